"""Poisson sampling of live traffic with permanent random numbers (pure, no Django).

Every row gets a number ``u`` in [0, 1) fixed by the deployment and the application's request
id (the first 8 bytes of a SHA-256, read as an integer over 2**64). A row goes to the judges
when ``u < judge_pi`` and to the human queue when ``u < human_pi``; with
``human_pi <= judge_pi`` the human sample is nested in the judge sample, so every human label
has the judge's verdict beside it (what prediction-powered inference needs). Because the hash
behaves as an independent uniform per request, each row is included independently with
probability exactly its rate: Poisson sampling, with the inclusion probability recorded per
row, so weighted (1 / pi) estimates are design-unbiased. A retried request draws the same
``u`` and so the same decision: the sampling is idempotent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_SCALE = float(2**64)


def permanent_random_number(deployment_id: int, request_id: str) -> float:
    """The row's fixed uniform number in [0, 1)."""
    digest = hashlib.sha256(f"{deployment_id}\x1f{request_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / _SCALE


def rate_for(rates: Mapping[str, Any], stratum: str) -> float:
    """The stratum's rate, else the "default" one (0 when neither is given)."""
    value = rates.get(stratum, rates.get("default", 0.0))
    return float(value)


@dataclass(frozen=True)
class Draw:
    u: float
    judge_pi: float
    human_pi: float

    @property
    def to_judge(self) -> bool:
        return self.u < self.judge_pi

    @property
    def to_human(self) -> bool:
        return self.u < self.human_pi


def draw(*, deployment_id: int, request_id: str, stratum: str,
         sampling: Mapping[str, Any]) -> Draw:
    """The sampling decision of one row (see the module docstring)."""
    judge_pi = rate_for(sampling.get("judge") or {}, stratum)
    human_pi = min(rate_for(sampling.get("human") or {}, stratum), judge_pi)
    return Draw(permanent_random_number(deployment_id, request_id), judge_pi, human_pi)


def sampling_problems(raw: Any) -> list[tuple[str, str]]:
    """Problems of a sampling spec as (path, message): ``{"judge": {"default": r, ...},
    "human": {...}}`` with rates in [0, 1] and each human rate at most the judge rate."""
    problems: list[tuple[str, str]] = []
    if not isinstance(raw, Mapping):
        return [("sampling", "must be an object with 'judge' and 'human' rates")]
    for key in raw:
        if key not in ("judge", "human"):
            problems.append((f"sampling.{key}", "unknown key (use 'judge' and 'human')"))
    for part in ("judge", "human"):
        rates = raw.get(part, {})
        if not isinstance(rates, Mapping):
            problems.append((f"sampling.{part}", "must be an object of rates by stratum"))
            continue
        for stratum, rate in rates.items():
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not (
                0.0 <= float(rate) <= 1.0
            ):
                problems.append((f"sampling.{part}.{stratum}", "must be a number in [0, 1]"))
    if problems:
        return problems
    judge = raw.get("judge") or {}
    human = raw.get("human") or {}
    for stratum in set(judge) | set(human):
        if rate_for(human, stratum) > rate_for(judge, stratum):
            problems.append((f"sampling.human.{stratum}",
                             "the human rate may not exceed the judge rate (humans grade a "
                             "subsample of the judged rows)"))
    return problems
