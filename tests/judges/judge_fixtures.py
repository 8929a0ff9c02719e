"""Helpers for the provider/prompt/config tests (side P): contexts and configs."""

from __future__ import annotations

from typing import Any, cast

from judges.prompts import SubjectContext
from studies.models import Comparison, Output
from tests.factories import ComparisonFactory, OutputFactory


def binary_ctx(output: str = "An answer.", **overrides: Any) -> SubjectContext:
    fields: dict[str, Any] = {
        "item_input": "What is 2+2?",
        "item_context": "Arithmetic quiz.",
        "item_reference": "4",
        "output_text": output,
        "output_a_text": None,
        "output_b_text": None,
        "criterion_key": "correct",
        "criterion_name": "Correctness",
        "criterion_guidance": "The answer must be right.",
        "criterion_scale": "binary",
        "scale_points": (("pass", "Pass"), ("fail", "Fail")),
        "production_prompt": "You are a maths tutor.",
        "subject_key": "output:1",
    }
    fields.update(overrides)
    return SubjectContext(**fields)


def pairwise_ctx(a: str = "Four.", b: str = "Five.", **overrides: Any) -> SubjectContext:
    return binary_ctx(output=None, output_a_text=a, output_b_text=b,  # type: ignore[arg-type]
                      criterion_scale="pairwise", criterion_key="pref",
                      scale_points=(("A", "A"), ("B", "B"), ("tie", "Tie")),
                      subject_key="comparison:1:ab", **overrides)


def llm_config(base_url: str, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "provider": "openai",
        "base_url": base_url,
        "model": "sim-judge",
        "api_key_env": "RH_TEST_JUDGE_KEY",
        "parameters": {"temperature": 0.0, "max_tokens": 128, "seed": 7},
    }
    config.update(overrides)
    return config


def make_output(**fields: Any) -> Output:
    """OutputFactory with a precise type for mypy."""
    return cast(Output, OutputFactory(**fields))


def make_comparison(**fields: Any) -> Comparison:
    return cast(Comparison, ComparisonFactory(**fields))
