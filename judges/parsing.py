"""Strict parsing of a judge's answer into the criterion's scale, plus logprob probabilities.

Parser `json_verdict` version 1 (the only one so far; its name and version are part of every
LLM judge config and so of the judge version hash):

1. The whole answer, stripped of surrounding whitespace and of at most one enclosing Markdown
   code fence (```json ... ```), must be one JSON object with a "verdict" member (a string,
   or a number for ordinal (an integer) and interval scales) and optionally a "rationale"
   string. This is what structured output and the Anthropic forced tool call produce.
2. Fallback "final_line" (unless the config says "none"): the last non-empty line is exactly
   `VERDICT: <value>` (case-insensitive keyword, optional quotes around the value); the text
   before it is the rationale.
3. The value must be one of the allowed values: binary "pass"/"fail", pairwise "A"/"B"/"tie"
   (case-insensitive), ordinal an integer point of the scale (3, "3"; not 3.5, "3/5", "three"),
   categorical a label (exact, else case-insensitive when that is unambiguous), interval a
   finite number within the criterion's [min, max] (3.5, "3.5", 4, "4"; not "3/5", "4 out of
   5", "high"), stored as its shortest text ("3.5", "4").

Anything else raises `Unparseable` with the reason; it is never read as a pass or a fail.
Pairwise labels are returned AS PRESENTED ("A" = the response shown first).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from studies.criteria import number_text

from .providers import TokenLogprob

_FENCE_RE = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\n(?P<body>.*)\n[ \t]*```$", re.DOTALL)
_FINAL_LINE_RE = re.compile(r"^\s*VERDICT\s*:\s*(?P<value>.+?)\s*$", re.IGNORECASE)
_VERDICT_KEY_RE = re.compile(r'"verdict"\s*:\s*"?')
MAX_RATIONALE_CHARS = 10_000


@dataclass(frozen=True)
class ParsedVerdict:
    value: str
    value_num: float | None
    probability: float | None
    rationale: str
    # {"parsed_from": "json" | "final_line", "distribution": {value: p}, "expected": float}
    details: Mapping[str, Any] = field(default_factory=dict)


class Unparseable(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def _interval_value(raw: Any, bounds: tuple[float, float] | None) -> str:
    """An interval verdict: a finite number within `bounds`, as its canonical text."""
    if bounds is None:
        raise Unparseable("the interval criterion has no range")
    lo, hi = bounds
    shown = f"{number_text(lo)}..{number_text(hi)}"
    if isinstance(raw, bool):
        raise Unparseable(f"verdict {raw!r} is not a number in {shown}")
    if isinstance(raw, (int, float)):
        num = float(raw)
    elif isinstance(raw, str) and _NUMBER_RE.fullmatch(raw.strip()):
        num = float(raw.strip())
    else:
        raise Unparseable(f"verdict {str(raw)[:50]!r} is not a number in {shown}")
    if not math.isfinite(num):
        raise Unparseable(f"verdict {str(raw)[:50]!r} is not a finite number")
    if not lo <= num <= hi:
        raise Unparseable(f"verdict {number_text(num)} is outside the range {shown}")
    return number_text(num)


def _value_num(scale: str, value: str) -> float | None:
    if scale == "binary":
        return 1.0 if value == "pass" else 0.0
    if scale == "ordinal":
        return float(int(value))
    if scale == "interval":
        return float(value)
    if scale == "pairwise":
        return {"A": 1.0, "B": 0.0, "tie": 0.5}[value]
    return None


def normalise_value(
    raw: Any, *, scale: str, allowed_values: Sequence[str],
    bounds: tuple[float, float] | None = None,
) -> str:
    """The allowed value `raw` denotes, or Unparseable. Interval criteria have no list of
    values: `bounds` is their (min, max)."""
    if scale == "interval":
        return _interval_value(raw, bounds)
    allowed = [str(v) for v in allowed_values]
    if not allowed:
        raise Unparseable("the criterion defines no allowed values")
    if scale == "ordinal":
        if isinstance(raw, bool):
            raise Unparseable(f"verdict {raw!r} is not an integer point")
        if isinstance(raw, int):
            text = str(raw)
        elif isinstance(raw, float) and raw.is_integer():
            text = str(int(raw))
        elif isinstance(raw, str) and re.fullmatch(r"[+-]?\d+", raw.strip()):
            text = str(int(raw.strip()))
        else:
            raise Unparseable(f"verdict {str(raw)[:50]!r} is not an integer point of the scale "
                              f"({', '.join(allowed)})")
        if text not in allowed:
            raise Unparseable(f"verdict {text} is outside the scale ({', '.join(allowed)})")
        return text
    if not isinstance(raw, str):
        raise Unparseable(f"verdict {str(raw)[:50]!r} is not a string")
    text = raw.strip()
    if text in allowed:
        return text
    folded = [v for v in allowed if v.lower() == text.lower()]
    if len(folded) == 1:
        return folded[0]
    raise Unparseable(f"verdict {text[:50]!r} is not one of the allowed values "
                      f"({', '.join(allowed)})")


def _strip_fence(text: str) -> str:
    match = _FENCE_RE.match(text)
    return match.group("body").strip() if match else text


def _from_json(text: str) -> tuple[Any, str] | None:
    """(raw verdict, rationale) when the text is a verdict JSON object; None when it is not
    JSON at all; Unparseable when it is JSON of the wrong shape."""
    body = _strip_fence(text.strip())
    if not body.startswith("{"):
        return None
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise Unparseable(f"answer looks like JSON but does not parse ({exc.msg} at char "
                          f"{exc.pos})") from None
    if not isinstance(data, dict):
        raise Unparseable("answer JSON is not an object")
    if "verdict" not in data:
        raise Unparseable(f"answer JSON has no 'verdict' (keys: {', '.join(sorted(data))[:100]})")
    rationale = data.get("rationale", "")
    if rationale is None:
        rationale = ""
    if not isinstance(rationale, str):
        raise Unparseable("answer JSON 'rationale' is not a string")
    return data["verdict"], rationale


def _from_final_line(text: str) -> tuple[str, str] | None:
    lines = [line for line in text.strip().splitlines()]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        return None
    match = _FINAL_LINE_RE.match(lines[-1])
    if not match:
        return None
    value = match.group("value").strip().strip("\"'`*").strip()
    return value, "\n".join(lines[:-1]).strip()


# --- logprobs ----------------------------------------------------------------------------


def _token_norm(token: str) -> str:
    return token.strip().strip("\"'`*").strip().lower()


def _verdict_token_index(text: str, tokens: Sequence[TokenLogprob], source: str) -> int | None:
    """The index of the token where the verdict value starts, located by character offset."""
    joined = "".join(t.token for t in tokens)
    if source == "json":
        match = _VERDICT_KEY_RE.search(joined)
        start = match.end() if match else None
    else:
        marker = joined.upper().rfind("VERDICT")
        start = None
        if marker >= 0:
            colon = joined.find(":", marker)
            start = colon + 1 if colon >= 0 else None
    if start is None:
        return None
    offset = 0
    for index, token in enumerate(tokens):
        end = offset + len(token.token)
        # The first token ending after `start` that carries something other than whitespace
        # or quotes is the value's first token.
        if end > start and _token_norm(token.token[max(0, start - offset):]):
            return index
        offset = end
    return None


def _distribution(
    token: TokenLogprob, *, scale: str, allowed_values: Sequence[str]
) -> dict[str, float] | None:
    """Probability of each allowed value from the alternatives at the verdict position.

    Alternatives are matched on their normalised text: exactly (ordinal points, where "1"
    must not count as "10"), or as an unambiguous prefix of a label ("pa" → "pass"). The mass
    is renormalised over the allowed values.
    """
    mass = {str(v): 0.0 for v in allowed_values}
    lowered = {str(v).lower(): str(v) for v in allowed_values}
    alternatives = list(token.top)
    if all(alt != token.token for alt, _ in alternatives):
        alternatives.append((token.token, token.logprob))
    seen: set[str] = set()
    for alt, logprob in alternatives:
        norm = _token_norm(alt)
        # Distinct tokens ("pass", " Pass") are distinct probability mass for the same value
        # and are summed; a token listed twice is counted once.
        if not norm or alt in seen or not math.isfinite(logprob):
            continue
        seen.add(alt)
        if norm in lowered:
            target = lowered[norm]
        elif scale != "ordinal":
            matches = [v for low, v in lowered.items() if low.startswith(norm)]
            if len(matches) != 1:
                continue
            target = matches[0]
        else:
            continue
        mass[target] += math.exp(logprob)
    total = sum(mass.values())
    if total <= 0:
        return None
    return {v: m / total for v, m in mass.items()}


def _probability(
    *,
    text: str,
    source: str,
    value: str,
    scale: str,
    allowed_values: Sequence[str],
    logprobs: Sequence[TokenLogprob] | None,
    pass_threshold: int | float | None,
) -> tuple[float | None, dict[str, Any]]:
    # A continuous score has no distribution over a few values to read from the logprobs.
    if not logprobs or scale in ("categorical", "interval"):
        return None, {}
    index = _verdict_token_index(text, logprobs, source)
    if index is None:
        return None, {"logprobs": "verdict token not found"}
    dist = _distribution(logprobs[index], scale=scale, allowed_values=allowed_values)
    if dist is None:
        return None, {"logprobs": "no allowed value among the top alternatives"}
    details: dict[str, Any] = {"distribution": dist}
    if scale == "binary":
        return dist.get("pass", 0.0), details
    if scale == "pairwise":
        return dist.get("A", 0.0), details
    # ordinal
    expected = sum(int(v) * p for v, p in dist.items())
    details["expected"] = expected
    if pass_threshold is None:
        return None, details
    return sum(p for v, p in dist.items() if int(v) >= pass_threshold), details


def verdict_parse(
    *,
    text: str,
    criterion_scale: str,
    allowed_values: Sequence[str],
    parser: Mapping[str, Any],
    logprobs: Sequence[TokenLogprob] | None = None,
    pass_threshold: int | float | None = None,
    bounds: tuple[float, float] | None = None,
) -> ParsedVerdict:
    """Parse an answer strictly (see the module docstring); raise Unparseable otherwise.

    `probability` is P(pass) for binary, P(rating >= pass_threshold) for ordinal (the expected
    rating is in details), P("A" as presented) for pairwise, from the top logprobs at the
    verdict token, renormalised over the allowed values; None without logprobs (and always for
    categorical and interval criteria). `bounds` is an interval criterion's (min, max).
    """
    name = parser.get("name", "json_verdict") if parser else "json_verdict"
    version = parser.get("version", 1) if parser else 1
    if name != "json_verdict" or version != 1:
        raise Unparseable(f"unknown parser {name} v{version}")
    fallback = (parser or {}).get("fallback", "final_line")
    if not isinstance(text, str) or not text.strip():
        raise Unparseable("empty answer")
    found: tuple[Any, str] | None = _from_json(text)
    source = "json"
    if found is None:
        if fallback == "final_line":
            found = _from_final_line(text)
            source = "final_line"
        if found is None:
            hint = " or a final 'VERDICT: <value>' line" if fallback == "final_line" else ""
            raise Unparseable(f"answer is neither a JSON verdict object{hint}: "
                              f"{text.strip()[:80]!r}")
    raw_value, rationale = found
    value = normalise_value(raw_value, scale=criterion_scale, allowed_values=allowed_values,
                            bounds=bounds)
    probability, details = _probability(
        text=text, source=source, value=value, scale=criterion_scale,
        allowed_values=allowed_values, logprobs=logprobs, pass_threshold=pass_threshold,
    )
    return ParsedVerdict(
        value=value,
        value_num=_value_num(criterion_scale, value),
        probability=probability,
        rationale=rationale[:MAX_RATIONALE_CHARS],
        details={"parsed_from": source, **details},
    )
