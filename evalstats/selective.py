"""Guaranteed agreement ("trust or escalate"): trust a judge only where it provably agrees.

Jung, Brahman & Choi, "Trust or Escalate: LLM Judges with Provable Guarantees for Human
Agreement" (ICLR 2025). The judge's decision is trusted when its confidence is at least a
threshold lambda, and escalated to a human otherwise. Lambda is chosen on human-labelled
calibration rows so that

    P( agreement with humans on trusted outputs >= 1 - alpha ) >= 1 - delta,

the probability being over the draw of the calibration rows (exchangeable with the outputs
the threshold is then applied to).

How lambda is chosen (:func:`trust_threshold`)
----------------------------------------------
The candidate thresholds are the distinct calibration confidences (or a given grid), from the
most conservative (highest) down. At each lambda with n(lambda) >= ``min_count`` trusted
calibration rows, k(lambda) of them disagreeing with the human, the null hypothesis "the
disagreement rate above lambda exceeds alpha" is tested with the exact binomial p-value
P(Binom(n, alpha) <= k). *Fixed-sequence testing*: lambda is accepted while p <= delta, and
testing stops at the first failure; the chosen threshold is the last (lowest) accepted one.
Because the hypotheses are tested in an order fixed before the data are seen (descending
lambda) and each at level delta, the family-wise error is at most delta: the guarantee needs
no correction for the number of thresholds looked at. Thresholds with fewer than
``min_count`` trusted rows are not tested (they neither accept nor stop the sequence): their
binomial bound is too loose to pass and would only end the search early.

p <= delta is the same as: the one-sided Clopper-Pearson lower bound on agreement at level
1 - delta, Beta(delta; n - k, k + 1), is at least 1 - alpha. That bound is reported as
``agreement_lower``.

Cascades (:func:`trust_cascade`)
--------------------------------
Several judges (e.g. judge versions in order of cost) rate the same rows. The first is
calibrated on all rows; each next one on the rows the earlier ones did not trust, and it
decides those of them its own threshold trusts; what no stage trusts goes to a human. Each
stage's trusted set meets agreement >= 1 - alpha with probability >= 1 - delta, so the whole
trusted set (a mixture of them) meets 1 - alpha whenever every stage does: by a union bound
with probability at least 1 - m delta for m stages that trust anything (reported as
``confidence``; the original method states 1 - delta per stage). As in the original method,
a later stage is calibrated on the rows the earlier thresholds, chosen on the same rows,
left.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats

from evalstats._data import as_1d, as_float
from evalstats._fields import attrs_dict

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_DELTA",
    "DEFAULT_GRID_STEP",
    "DEFAULT_MIN_COUNT",
    "CascadeResult",
    "TrustThreshold",
    "threshold_grid",
    "trust_cascade",
    "trust_threshold",
]

FloatArray = npt.NDArray[np.float64]

#: Plan defaults of the guaranteed-agreement policy: 90 % agreement, with 90 % probability,
#: tested only where at least 50 calibration rows are trusted, on candidate thresholds every
#: 0.001 from 1 down to 0.5 (the grid of the published method's code). Why 50 and the grid
#: rather than the distinct confidences: docs/statistics.md, "Guaranteed agreement".
DEFAULT_ALPHA: float = 0.1
DEFAULT_DELTA: float = 0.1
DEFAULT_MIN_COUNT: int = 50
DEFAULT_GRID_STEP: float = 0.001


def threshold_grid(step: float | None, *, low: float = 0.5) -> FloatArray | None:
    """Candidate thresholds ``1, 1 - step, ...`` down to ``low`` (a confidence in the judge's
    own decision is at least 0.5); ``None`` for ``step=None`` (the distinct confidences).
    Rounded to 12 decimals so that 0.9 on the grid is the number 0.9 a user writes."""
    if step is None:
        return None
    if isinstance(step, bool) or not 0.0 < float(step) <= 0.5:
        raise ValueError(f"the grid step must be in (0, 0.5], got {step!r}")
    k = math.floor((1.0 - low) / float(step) + 1e-9)
    return np.round(1.0 - float(step) * np.arange(k + 1), 12)


def _interval(n: int, errors: int, delta: float) -> list[float] | None:
    """Two-sided Clopper-Pearson interval (level 1 - delta) of agreement, n - errors of n."""
    if n <= 0:
        return None
    ci = stats.binomtest(n - errors, n).proportion_ci(confidence_level=1.0 - delta,
                                                      method="exact")
    return [float(ci.low), float(ci.high)]


def _unit_open(value: Any, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not math.isfinite(float(value))
        or not 0.0 < float(value) < 1.0
    ):
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return float(value)


def _min_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 1:
        raise ValueError(f"min_count must be an integer >= 1, got {value!r}")
    return int(value)


# TrustThreshold.to_json's keys before "agreement_interval" (a property among the fields).
_TRUST_JSON_HEAD = ("threshold", "alpha", "delta", "guaranteed_level", "coverage", "n",
                    "n_trusted", "errors_trusted", "agreement", "agreement_lower")


@dataclass(frozen=True, kw_only=True)
class TrustThreshold:
    """The chosen trust threshold and what it guarantees on the calibration rows.

    ``threshold``: trust the judge when confidence >= threshold; ``None`` when no threshold
    meets the guarantee (escalate everything). ``coverage``: share of the ``n`` calibration
    rows trusted. ``n_trusted`` / ``errors_trusted``: trusted calibration rows and how many
    disagreed with the human; ``agreement`` their agreement and ``agreement_lower`` its
    one-sided Clopper-Pearson bound at 1 - delta (>= 1 - alpha by construction).
    ``tested``: hypotheses tested (accepted ones plus the one that stopped the sequence).
    """

    threshold: float | None
    alpha: float
    delta: float
    coverage: float
    n_trusted: int
    errors_trusted: int
    agreement: float | None
    agreement_lower: float | None
    tested: int
    min_count: int
    n: int = 0

    @property
    def guaranteed_level(self) -> float:
        return 1.0 - self.alpha

    def trusted(self, confidence: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Which rows the threshold trusts (NaN confidence is never trusted)."""
        c = as_float(np.atleast_1d(np.asarray(confidence)), "confidence")
        if self.threshold is None:
            return np.zeros(c.shape, dtype=bool)
        return np.asarray(c >= self.threshold)

    def to_json(self) -> dict[str, Any]:
        interval = (_interval(self.n_trusted, self.errors_trusted, self.delta)
                    if self.threshold is not None else None)
        return {**attrs_dict(self, _TRUST_JSON_HEAD), "agreement_interval": interval,
                **attrs_dict(self, ("tested", "min_count"))}


def _agreement_lower(n: int, errors: int, delta: float) -> float:
    """One-sided Clopper-Pearson lower bound on agreement (n - errors of n) at 1 - delta."""
    agree = n - errors
    if agree == 0:
        return 0.0
    return float(stats.beta.ppf(delta, agree, errors + 1))


def _agree(agree: npt.ArrayLike, n: int) -> npt.NDArray[np.bool_]:
    a = as_float(as_1d(agree, "agree"), "agree")
    if a.size != n:
        raise ValueError(f"agree must have one entry per row ({n}), got {a.size}")
    if not np.all((a == 0) | (a == 1)):
        raise ValueError("agree must be 0/1 (1: the judge's decision equals the human's)")
    return a == 1


def trust_threshold(
    confidence: npt.ArrayLike,
    agree: npt.ArrayLike,
    *,
    alpha: float,
    delta: float,
    min_count: int = DEFAULT_MIN_COUNT,
    thresholds: npt.ArrayLike | None = None,
) -> TrustThreshold:
    """The lowest confidence threshold that guarantees agreement >= 1 - alpha w.p. 1 - delta.

    ``confidence``: the judge's confidence in its own decision per calibration row (NaN: no
    confidence, never trusted); ``agree``: 1 when the judge's decision equals the human's.
    ``thresholds``: candidate grid (default: the distinct confidences). Fixed-sequence
    testing from the highest candidate down with the exact binomial p-value (module doc).
    """
    a_val = _unit_open(alpha, "alpha")
    d_val = _unit_open(delta, "delta")
    m = _min_count(min_count)
    conf = as_float(as_1d(confidence, "confidence"), "confidence")
    n = int(conf.size)
    ok = _agree(agree, n)
    finite = np.isfinite(conf)
    c = conf[finite]
    errors = ~ok[finite]
    if thresholds is None:
        cands = np.unique(c)[::-1]
    else:
        grid = as_float(np.atleast_1d(np.asarray(thresholds)), "thresholds")
        cands = np.unique(grid[np.isfinite(grid)])[::-1]
    # Rows sorted by descending confidence: n(lambda) trusted rows are a prefix, so the
    # counts and errors at every candidate come from one sort and one cumulative sum.
    order = np.argsort(-c, kind="stable")
    cum_err = np.concatenate([[0], np.cumsum(errors[order])])
    asc = np.sort(c)
    n_lam = c.size - np.searchsorted(asc, cands, side="left")
    k_lam = cum_err[n_lam]
    testable = n_lam >= m
    # n(lambda) grows as lambda falls, so the testable candidates are a suffix of `cands`.
    idx = np.flatnonzero(testable)
    p_values = stats.binom.cdf(k_lam[idx], n_lam[idx], a_val)
    failed = np.flatnonzero(p_values > d_val)
    n_accepted = int(failed[0]) if failed.size else int(idx.size)
    tested = n_accepted + (1 if failed.size else 0)
    if n_accepted == 0:
        return TrustThreshold(
            threshold=None, alpha=a_val, delta=d_val, coverage=0.0, n_trusted=0,
            errors_trusted=0, agreement=None, agreement_lower=None, tested=tested,
            min_count=m, n=n,
        )
    chosen = idx[n_accepted - 1]
    n_t, k_t = int(n_lam[chosen]), int(k_lam[chosen])
    return TrustThreshold(
        threshold=float(cands[chosen]),
        alpha=a_val,
        delta=d_val,
        coverage=n_t / n,
        n_trusted=n_t,
        errors_trusted=k_t,
        agreement=(n_t - k_t) / n_t,
        agreement_lower=_agreement_lower(n_t, k_t, d_val),
        tested=tested,
        min_count=m,
        n=n,
    )


@dataclass(frozen=True, kw_only=True)
class CascadeResult:
    """Stages of a cascade in order, the overall coverage and what it guarantees.

    ``stages[i]`` was calibrated on the rows stages 0..i-1 did not trust (its ``coverage`` is
    a share of those rows); ``coverage`` is the share of all rows some stage trusts;
    ``guaranteed_level`` = 1 - alpha, holding with probability at least ``confidence``
    (1 - delta times the number of stages that trust anything, by a union bound).
    """

    stages: tuple[TrustThreshold, ...]
    coverage: float
    guaranteed_level: float
    confidence: float = 1.0
    n: int = 0
    n_trusted: int = 0
    errors_trusted: int = 0

    def to_json(self) -> dict[str, Any]:
        delta = self.stages[0].delta if self.stages else 0.1
        return {
            "stages": [s.to_json() for s in self.stages],
            # Each stage's share of all rows (its own coverage is of the rows left to it).
            "shares": [s.n_trusted / self.n if self.n else 0.0 for s in self.stages],
            "agreement": ((self.n_trusted - self.errors_trusted) / self.n_trusted
                          if self.n_trusted else None),
            "agreement_interval": _interval(self.n_trusted, self.errors_trusted, delta),
            "coverage": self.coverage,
            "guaranteed_level": self.guaranteed_level,
            "confidence": self.confidence,
            "n": self.n,
            "n_trusted": self.n_trusted,
            "errors_trusted": self.errors_trusted,
        }


def trust_cascade(
    confidences: Sequence[npt.ArrayLike],
    agrees: Sequence[npt.ArrayLike],
    *,
    alpha: float,
    delta: float,
    min_count: int = DEFAULT_MIN_COUNT,
    thresholds: npt.ArrayLike | None = None,
) -> CascadeResult:
    """Calibrate a cascade of judges on the same calibration rows.

    ``confidences[i][j]`` / ``agrees[i][j]``: stage i's confidence and agreement with the human
    on row j (stages in the order they run, cheapest first). Stage i is calibrated with
    :func:`trust_threshold` on the rows no earlier stage trusted (``thresholds``: the candidate
    grid of every stage, default the distinct confidences).
    """
    a_val = _unit_open(alpha, "alpha")
    d_val = _unit_open(delta, "delta")
    if len(confidences) != len(agrees) or not confidences:
        raise ValueError("pass one confidence and one agree array per stage (at least one)")
    confs = [as_float(as_1d(c, f"confidences[{i}]"), f"confidences[{i}]")
             for i, c in enumerate(confidences)]
    n = int(confs[0].size)
    if any(c.size != n for c in confs):
        raise ValueError("every stage must rate the same rows")
    oks = [_agree(a, n) for a in agrees]
    remaining = np.ones(n, dtype=bool)
    stages: list[TrustThreshold] = []
    n_trusted = errors = 0
    for conf, ok in zip(confs, oks, strict=True):
        stage = trust_threshold(conf[remaining], ok[remaining], alpha=a_val, delta=d_val,
                                min_count=min_count, thresholds=thresholds)
        stages.append(stage)
        taken = remaining & stage.trusted(conf)
        n_trusted += int(taken.sum())
        errors += int((taken & ~ok).sum())
        remaining &= ~taken
    trusting = sum(1 for s in stages if s.threshold is not None)
    return CascadeResult(
        stages=tuple(stages),
        coverage=n_trusted / n if n else 0.0,
        guaranteed_level=1.0 - a_val,
        confidence=max(0.0, 1.0 - trusting * d_val),
        n=n,
        n_trusted=n_trusted,
        errors_trusted=errors,
    )
