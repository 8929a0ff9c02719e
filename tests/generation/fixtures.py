"""Builders for the candidate-run tests: a study with items, candidates and configs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from generation.models import GenerationConfig, PromptTemplate
from generation.services import generation_config_create, prompt_template_create
from studies.models import Candidate, Item, StratumDimension, Study

KEY_ENV = "RH_TEST_GENERATION_API_KEY"


@dataclass
class GenData:
    study: Study
    items: list[Item]
    candidates: list[Candidate]


def build(study: Study, *, n_items: int = 10, n_candidates: int = 1) -> GenData:
    StratumDimension.objects.create(study=study, key="lang", kind="categorical",
                                    source="metadata.lang")
    items = [Item.objects.create(study=study, external_id=f"q-{i}", input=f"Question {i}?",
                                 context=f"Context {i}", metadata={"lang": "en" if i % 2 else
                                                                   "de", "n": i},
                                 strata={"lang": "en" if i % 2 else "de"})
             for i in range(n_items)]
    cands = [Candidate.objects.create(study=study, name=f"cand-{c}")
             for c in range(n_candidates)]
    return GenData(study, items, cands)


def gen_config(base_url: str, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "provider": "openai", "base_url": base_url, "model": "sim-model",
        "api_key_env": KEY_ENV, "parameters": {"temperature": 0.0, "max_tokens": 64},
        "prices": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}, "timeout_s": 10.0,
    }
    config.update(overrides)
    return config


def make_config(candidate: Candidate, base_url: str, **overrides: Any) -> GenerationConfig:
    return generation_config_create(candidate=candidate,
                                    config=gen_config(base_url, **overrides))[0]


def make_template(study: Study, **overrides: Any) -> PromptTemplate:
    template: dict[str, Any] = {
        "system": "You answer questions in {metadata.lang}.",
        "user": "Context: {context}\nQuestion: {input}",
    }
    template.update(overrides)
    return prompt_template_create(study=study, template=template)[0]
