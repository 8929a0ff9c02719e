"""Programmatic judges: deterministic checks with the same verdict shape as LLM judges.

Every check gives a binary verdict ("pass" / "fail") with a rationale that says why. An output
whose generation call errored fails every check (an error is a failure, not a missing value);
a check that cannot be applied to this subject (no reference to match, no schema) raises
`Unparseable`, which the queue records as unscored.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from collections.abc import Mapping
from typing import Any

from .parsing import ParsedVerdict, Unparseable

_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
MAX_DETAIL_CHARS = 300


def normalise_answer(text: str) -> str:
    """Unicode NFKC, case-folded, punctuation and English articles removed, whitespace
    collapsed (the usual exact-match normalisation of QA benchmarks)."""
    text = unicodedata.normalize("NFKC", text).casefold().translate(_PUNCT)
    return " ".join(_ARTICLES_RE.sub(" ", text).split())


def _verdict(passed: bool, rationale: str) -> ParsedVerdict:
    return ParsedVerdict(
        value="pass" if passed else "fail",
        value_num=1.0 if passed else 0.0,
        probability=None,
        rationale=rationale[:2000],
        details={"parsed_from": "programmatic"},
    )


def _json_schema(config: Mapping[str, Any], output: Any) -> ParsedVerdict:
    import jsonschema

    schema = config.get("schema")
    if schema is None:
        schema = output.study.output_schema
    if not schema:
        raise Unparseable("json_schema check without a schema, and the study has no "
                          "output schema")
    if output.parsed_json is not None:
        document = output.parsed_json
    else:
        try:
            document = json.loads(output.text)
        except ValueError as exc:
            return _verdict(False, f"output is not valid JSON ({exc})")
    validator_cls = jsonschema.validators.validator_for(schema)
    error = jsonschema.exceptions.best_match(validator_cls(schema).iter_errors(document))
    if error is None:
        return _verdict(True, "output is valid against the JSON schema")
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return _verdict(False, f"schema violation at {where}: {error.message[:MAX_DETAIL_CHARS]}")


def _regex(config: Mapping[str, Any], text: str) -> ParsedVerdict:
    flags = re.IGNORECASE if config.get("ignore_case") else 0
    # Patterns come from the study's leads (the config is theirs, validated at creation).
    missing = [p for p in config.get("must_match", []) if not re.search(p, text, flags)]
    forbidden = [p for p in config.get("must_not_match", []) if re.search(p, text, flags)]
    if not missing and not forbidden:
        return _verdict(True, "all must-match patterns found, no must-not-match pattern found")
    parts = []
    if missing:
        parts.append("missing: " + ", ".join(repr(p) for p in missing))
    if forbidden:
        parts.append("forbidden pattern found: " + ", ".join(repr(p) for p in forbidden))
    return _verdict(False, "; ".join(parts))


def _match(config: Mapping[str, Any], output: Any) -> ParsedVerdict:
    reference = output.item.reference
    if not reference:
        raise Unparseable("match check: the item has no reference answer")
    if config.get("mode") == "exact":
        same = output.text == reference
        return _verdict(same, "output equals the reference exactly" if same
                        else "output differs from the reference (exact match)")
    same = normalise_answer(output.text) == normalise_answer(reference)
    return _verdict(same, "output matches the reference after normalisation" if same
                    else "output differs from the reference after normalisation")


def _length(config: Mapping[str, Any], text: str) -> ParsedVerdict:
    unit = config.get("unit", "chars")
    size = len(text.split()) if unit == "words" else len(text)
    lo, hi = config.get("min"), config.get("max")
    if lo is not None and size < lo:
        return _verdict(False, f"{size} {unit}, fewer than the minimum {lo}")
    if hi is not None and size > hi:
        return _verdict(False, f"{size} {unit}, more than the maximum {hi}")
    return _verdict(True, f"{size} {unit}, within the limits")


def programmatic_evaluate(*, config: Mapping[str, Any], output: Any, criterion: Any
                          ) -> ParsedVerdict:
    """Run one deterministic check on one output (no network). See the module docstring."""
    if output is None:
        raise ValueError("programmatic checks judge single outputs, not comparisons")
    if criterion.scale != "binary":
        raise ValueError(f"programmatic checks give pass/fail verdicts; criterion "
                         f"{criterion.key!r} is {criterion.scale}")
    check = config.get("check")
    if check == "errored":
        if output.error:
            return _verdict(False, f"the generation call errored: {output.error[:200]}")
        return _verdict(True, "the generation call did not error")
    if output.error:
        return _verdict(False, f"the generation call errored: {output.error[:200]}")
    if check == "json_schema":
        return _json_schema(config, output)
    if check == "regex":
        return _regex(config, output.text)
    if check == "match":
        return _match(config, output)
    if check == "length":
        return _length(config, output.text)
    raise ValueError(f"unknown programmatic check {check!r}")
