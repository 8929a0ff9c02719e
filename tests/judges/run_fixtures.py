"""Fixtures and builders for the judge-run tests (side R). Imported by test_run*/test_worker*.

Outputs carry a unique token `[o<n>]` (so that the simulated provider's calls can be counted
per job) and `[bad]` on every third output (the simulated judge fails those).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from judges.models import Judge, JudgeVersion
from studies.models import (
    Candidate,
    Criterion,
    Item,
    Output,
    RubricVersion,
    StratumDimension,
    Study,
)

KEY_ENV = "RH_TEST_RUN_JUDGE_API_KEY"


@dataclass
class StudyData:
    study: Study
    binary: Criterion
    ordinal: Criterion
    pairwise: Criterion
    candidates: list[Candidate]
    items: list[Item]
    outputs: list[Output]


def build_study_data(study: Study, *, n_items: int = 6, n_candidates: int = 2) -> StudyData:
    rubric = RubricVersion.objects.create(study=study, version=1)
    binary = Criterion.objects.create(rubric=rubric, key="correct", name="Correct",
                                      guidance="Is the answer correct?", scale="binary",
                                      position=0)
    ordinal = Criterion.objects.create(
        rubric=rubric, key="quality", name="Quality", guidance="Rate the quality.",
        scale="ordinal", points=[{"value": i, "label": f"level {i}"} for i in range(1, 6)],
        pass_threshold=4, position=1)
    pairwise = Criterion.objects.create(rubric=rubric, key="preference", name="Preference",
                                        guidance="Which answer is better?", scale="pairwise",
                                        position=2)
    StratumDimension.objects.create(study=study, key="lang", kind="categorical",
                                    source="metadata.lang")
    candidates = [Candidate.objects.create(study=study, name=f"cand-{c}")
                  for c in range(n_candidates)]
    items, outputs = [], []
    n = 0
    for i in range(n_items):
        lang = "en" if i % 2 == 0 else "de"
        item = Item.objects.create(study=study, external_id=f"it-{i}", input=f"Question {i}?",
                                   reference=f"Answer {i}", metadata={"lang": lang},
                                   strata={"lang": lang})
        items.append(item)
        for cand in candidates:
            bad = " [bad]" if n % 3 == 0 else ""
            outputs.append(Output.objects.create(study=study, candidate=cand, item=item,
                                                 text=f"Answer from {cand.name} [o{n}]{bad}"))
            n += 1
    return StudyData(study, binary, ordinal, pairwise, candidates, items, outputs)


def llm_config(base_url: str, **overrides: Any) -> dict[str, Any]:
    """A judge config in the shape documented in judges/models.py."""
    config: dict[str, Any] = {
        "provider": "openai",
        "base_url": base_url,
        "model": "sim-judge",
        "api_key_env": KEY_ENV,
        "parameters": {"temperature": 0.0, "max_tokens": 64},
        "samples": 1,
        "logprobs": False,
        "prices": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
    }
    config.update(overrides)
    return config


def make_version(study: Study, config: dict[str, Any], *, kind: str = Judge.Kind.LLM,
                 name: str = "sim") -> JudgeVersion:
    """A judge version through side P's service when it accepts the config, else directly."""
    judge, _ = Judge.objects.get_or_create(study=study, name=name, defaults={"kind": kind})
    try:
        from judges import services
    except ImportError:  # side P's service not there yet: store the config as it is
        services = None  # type: ignore[assignment]
    if services is not None:
        return services.judge_version_for_config(judge=judge, config=config)
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    existing = judge.versions.filter(content_hash=digest).first()
    if existing is not None:
        return existing
    n = judge.versions.count() + 1
    return JudgeVersion.objects.create(judge=judge, version=n, content_hash=digest, config=config)


class EnqueueSpy:
    """Stands in for the Celery enqueue in service tests: records (run_id, n)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, run_id: int, n: int) -> None:
        self.calls.append((run_id, n))


@pytest.fixture
def judge_key_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")
    yield KEY_ENV


@pytest.fixture
def provider_server() -> Iterator[Any]:
    from tests.judges.provider_server import ProviderServer

    server = ProviderServer().start()
    try:
        yield server
    finally:
        server.stop()
