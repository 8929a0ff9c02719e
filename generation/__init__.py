"""Candidate runs: the candidates answer the study's own items under the production prompt.

This app owns:

- **generation configs** (`GenerationConfig`): one candidate as an endpoint (provider,
  base URL, model, parameters, prices, timeout, key by environment-variable name), immutable
  versions named by the content hash of the canonical config, validated by the same network
  and key allow-lists as judges (`judges/config.py`) and called through the same provider
  clients (`judges/providers/`);
- **production prompt templates** (`PromptTemplate`): the study's system and user messages
  with placeholders filled from item fields and metadata (never expanded inside item text),
  an optional output JSON schema; versioned by content hash;
- **candidate runs** (`GenerationRun`, `GenerationJob`): a Celery fan-out over the judge
  queue's lease machinery (`judges/runs/leases.py`), one job per (item, config version,
  sample index), closed-loop at exactly C requests in flight per candidate, with latency,
  tokens, cost, error kind, schema validity, request hash and ReviewHub's own overhead per
  output. Finished sample-0 jobs become the study's ordinary `Output` rows (written through
  `studies.services`), so judges, annotation, calibration and selection use them.

Dependencies: generation -> judges, studies, reviewhub (never the other way).
"""
