"""Re-open the selection: a new selection study seeded with a deployment's recent traffic.

When the alerts say the selection no longer holds, the next step is the same instrument again
on today's inputs. `selection_reopen` creates a draft study with the original study's task,
rubric (the latest version) and strata scheme, the deployment's shipped and shadow candidates,
and, as items, the most recent successful live requests (external id = the request id, the
input and its metadata), with the shipped candidate's live answers as its outputs. Everything
is written through the studies services and the ingest service (one writer per table), in one
transaction: a failure leaves no half-made study. The shadow candidates have no outputs yet:
run them on the new items (candidate runs), then judge and sample as for any study.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from studies.ingest import ingest_run
from studies.models import Candidate, RubricVersion, Study
from studies.services import dimension_set, rubric_update, study_create

from .models import Deployment, TrafficRow

CRITERION_FIELDS = ("key", "name", "guidance", "scale", "points", "pass_threshold",
                    "pass_labels", "is_hard_gate", "weight", "needs_context", "min", "max")
CANDIDATE_FIELDS = ("name", "provider", "model_id", "model_version", "model_family",
                    "parameters", "notes")


def jsonl(rows: Iterable[Mapping[str, Any]]) -> io.BytesIO:
    """Rows as an NDJSON upload for `ingest_run`."""
    return io.BytesIO(b"".join(json.dumps(r).encode() + b"\n" for r in rows))


def criteria_of(study: Study) -> list[dict[str, Any]]:
    """The study's latest rubric as `rubric_update` takes it."""
    rubric = study.rubric_versions.order_by("-version").first()
    if not isinstance(rubric, RubricVersion):
        return []
    out = []
    for c in rubric.criteria.order_by("position", "id"):
        entry = {}
        for name in CRITERION_FIELDS:
            value = getattr(c, name)
            if value is None or value == [] or (name == "guidance" and value == ""):
                continue
            entry[name] = value
        out.append(entry)
    return out


def slug_for(study: Study, tag: str, now: dt.datetime) -> str:
    """A free slug for a study made from `study`: its slug, `tag` and the minute."""
    stem = f"{study.slug[:60]}-{tag}-{now:%Y%m%d%H%M}"
    slug, n = stem, 1
    while Study.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{stem}-{n}"
    return slug


def selection_reopen(*, deployment: Deployment, user: Any, days: int = 7,
                     limit: int = 2000) -> Study:
    """A new draft selection study seeded with the last `days` of successful traffic (at most
    `limit` requests, newest first); see the module docstring."""
    study = deployment.study
    now = timezone.now()
    rows = list(TrafficRow.objects.filter(
        deployment=deployment, occurred_at__gte=now - dt.timedelta(days=days), error="")
        .order_by("-occurred_at", "-id")
        .values("request_id", "input", "metadata", "output", "latency_ms", "tokens_in",
                "tokens_out", "cost", "finish_reason")[:limit])
    candidates = [deployment.candidate, *deployment.shadow_candidates.order_by("name")]
    with transaction.atomic():
        new = study_create(owner=user, fields={
            "name": f"{study.name[:150]} (re-opened {now:%Y-%m-%d})",
            "slug": slug_for(study, "reopened", now),
            "task_description": study.task_description,
            "deployment_context": (f"Re-opened from deployment '{deployment.name}' of study "
                                   f"'{study.slug}' with {len(rows)} live requests of the last "
                                   f"{days} days."),
        })
        criteria = criteria_of(study)
        if criteria:
            rubric_update(study=new, criteria=criteria, created_by=user)
        dims = list(study.dimensions.order_by("position", "id").values(
            "key", "name", "kind", "source", "config"))
        if dims:
            dimension_set(study=new, dimensions=[dict(d) for d in dims])
        ingest_run(study=new, kind="candidates", fmt="ndjson", stream=jsonl(
            {k: getattr(c, k) for k in CANDIDATE_FIELDS if getattr(c, k) not in ("", None)}
            for c in candidates if isinstance(c, Candidate)))
        if rows:
            ingest_run(study=new, kind="items", fmt="ndjson", stream=jsonl(
                {"external_id": r["request_id"], "input": r["input"],
                 "metadata": r["metadata"] or {}} for r in rows))
            shipped = deployment.candidate.name
            ingest_run(study=new, kind="outputs", fmt="ndjson", stream=jsonl(
                {k: v for k, v in {
                    "candidate": shipped, "item": r["request_id"], "text": r["output"],
                    "latency_ms": r["latency_ms"], "tokens_in": r["tokens_in"],
                    "tokens_out": r["tokens_out"], "cost": r["cost"],
                    "finish_reason": r["finish_reason"]}.items() if v not in (None, "")}
                for r in rows))
    return new
