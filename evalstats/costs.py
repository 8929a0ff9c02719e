"""Error costs: what a judge's mistakes cost, and the decision that minimises the expected cost.

A lead states, in the analysis plan, what each kind of mistake costs in one unit of their
choosing (money, minutes, points): shipping a failure of severity 1..5 (a *false pass*),
rejecting a good output (a *false fail*, ``reject_cost``), and one human review
(``review_cost``). From the severities annotators gave to the outputs they failed,
:func:`false_pass_cost` estimates E[cost | fail], the expected cost of shipping a failure:
the mean cost of every failure, or, where severity depends on the judge's score, of the
failures the judge lets through (each weighted by its calibrated P(pass)).

The decision rule (:func:`decision_thresholds`, :func:`decide`)
--------------------------------------------------------------
With p = calibrated P(a human passes the output), E = expected false-pass cost, c_r =
``reject_cost`` and c_h = ``review_cost``, the expected cost of each action is

* pass:     (1 - p) E
* fail:     p c_r
* escalate: c_h (a human decides; the human is the reference, so no error cost follows)

and the output gets the cheapest. Passing beats failing when (1 - p) E <= p c_r, i.e. when
p >= p* = E / (E + c_r). The cheaper of the two is largest at p*, where it equals
E c_r / (E + c_r); so

* if c_h >= E c_r / (E + c_r), a review never pays: pass when p >= p*, fail below
  (``pass_above == fail_below == p*``);
* otherwise there is an escalation band: pass when (1 - p) E <= c_h, i.e.
  p >= 1 - c_h / E (``pass_above``), fail when p c_r < c_h, i.e. p < c_h / c_r
  (``fail_below``), and escalate in between; c_h / c_r < p* < 1 - c_h / E.

Ties go to pass, then to escalate (a tie between failing and reviewing is a review: the
review costs no more and a human sees the output). Zero costs follow the same formulas: E = 0
(a failure costs nothing) passes everything (p* = 0); c_r = 0 (rejecting is free) fails
everything short of p = 1; c_h = 0 escalates everything short of p = 1; E = c_r = 0 passes
everything.

The default scale (:data:`DEFAULT_SEVERITY_COSTS`, used when a plan has no ``costs``)
-----------------------------------------------------------------------------------
The unit is "points", and one point is the cost of one human review
(:data:`DEFAULT_REVIEW_COST` = 1), the cost a lead can most easily put a number on.
Severity costs 1, 3, 10, 30, 100 grow by about half an order of magnitude per level (x ~3.16,
so two levels are a factor of 10), as in the logarithmic severity scales of risk matrices:
severity 1 (cosmetic) costs as much as one review, severity 5 (harmful, must never ship)
a hundred. Wrongly rejecting a good output (:data:`DEFAULT_REJECT_COST` = 3) costs a
regeneration and a second look, about a moderate (severity 2) failure. With these numbers
and E = 10 (a typical mix of failures) a lead sees all three actions: pass above 0.9, fail
below 1/3, escalate in between. The defaults are a starting point: a plan that uses them is
marked ``is_default`` so that every report says so.

Money figures (:func:`policy_costs`)
------------------------------------
The expected cost per 1,000 outputs of (a) the judge's raw verdicts, (b) the cost-optimal
decisions on calibrated P(pass) and (c) reviewing everything, estimated on the human-labelled
outputs (realised costs against the human consensus), weighted (e.g. by 1 / inclusion
probability) and with item-clustered bootstrap intervals.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from evalstats._data import as_1d, as_float
from evalstats._fields import fields_dict
from evalstats.clustered import bootstrap_clustered, diff_of_means_fn, item_sums, ratio_fn
from evalstats.options import DEFAULT_OPTIONS, BootstrapOptions
from evalstats.results import Estimate

__all__ = [
    "DECISIONS",
    "DEFAULT_COST_MODEL",
    "DEFAULT_REJECT_COST",
    "DEFAULT_REVIEW_COST",
    "DEFAULT_SEVERITY_COSTS",
    "DEFAULT_UNIT",
    "SEVERITY_LEVELS",
    "CostModel",
    "DecisionThresholds",
    "FalsePassCost",
    "PolicyCosts",
    "decide",
    "decision_thresholds",
    "expected_decision_cost",
    "false_pass_cost",
    "policy_costs",
]

FloatArray = npt.NDArray[np.float64]

#: The severity levels annotators give a failure ("how bad would it be if shipped").
SEVERITY_LEVELS: tuple[int, ...] = (1, 2, 3, 4, 5)
#: Cost of shipping a failure of severity 1..5, in points (one point = one human review).
DEFAULT_SEVERITY_COSTS: tuple[float, float, float, float, float] = (1.0, 3.0, 10.0, 30.0, 100.0)
#: Cost of wrongly rejecting a good output (a false fail), in points.
DEFAULT_REJECT_COST: float = 3.0
#: Cost of one human review, in points: the unit of the default scale.
DEFAULT_REVIEW_COST: float = 1.0
DEFAULT_UNIT: str = "points"
#: The decisions, in the order ties are broken.
DECISIONS: tuple[str, ...] = ("pass", "escalate", "fail")


def _cost(value: Any, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not math.isfinite(float(value))
        or float(value) < 0
    ):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _num(x: float | None) -> float | None:
    """A float for JSON: non-finite values become null (strict JSON has no NaN)."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)


def _estimate_json(e: Estimate) -> dict[str, Any]:
    return {
        "value": _num(e.value),
        "ci_low": _num(e.ci_low),
        "ci_high": _num(e.ci_high),
        "level": e.level,
        "n": e.n_items,
        "n_ratings": e.n_ratings,
        "method": e.method,
        "warnings": list(e.warnings),
    }


@dataclass(frozen=True, kw_only=True)
class CostModel:
    """What each mistake costs, in ``unit``: a plan's ``costs`` section.

    ``severity_costs[i]`` is the cost of shipping a failure of severity i + 1 (five levels,
    each >= 0, non-decreasing in severity); ``reject_cost`` the cost of rejecting a good
    output; ``review_cost`` the cost of one human review. ``is_default``: the plan gave no
    costs and the documented defaults were used. Invalid values raise ``ValueError``.
    """

    severity_costs: tuple[float, ...] = DEFAULT_SEVERITY_COSTS
    reject_cost: float = DEFAULT_REJECT_COST
    review_cost: float = DEFAULT_REVIEW_COST
    unit: str = DEFAULT_UNIT
    is_default: bool = False

    def __post_init__(self) -> None:
        sev = tuple(self.severity_costs)
        if len(sev) != len(SEVERITY_LEVELS):
            raise ValueError(f"severity_costs needs {len(SEVERITY_LEVELS)} levels, got {len(sev)}")
        sev = tuple(_cost(c, f"severity_costs[{i}]") for i, c in enumerate(sev))
        if any(b < a for a, b in itertools.pairwise(sev)):
            raise ValueError(f"severity_costs must not decrease with severity, got {sev}")
        object.__setattr__(self, "severity_costs", sev)
        object.__setattr__(self, "reject_cost", _cost(self.reject_cost, "reject_cost"))
        object.__setattr__(self, "review_cost", _cost(self.review_cost, "review_cost"))
        if not isinstance(self.unit, str):
            raise ValueError("unit must be a string")

    def to_json(self) -> dict[str, Any]:
        """The plan's ``costs`` shape: ``{"unit", "severity": {"1".."5"}, "false_fail",
        "review", "is_default"}``."""
        return {
            "unit": self.unit,
            "severity": {str(level): c for level, c in zip(SEVERITY_LEVELS, self.severity_costs,
                                                          strict=True)},
            "false_fail": self.reject_cost,
            "review": self.review_cost,
            "is_default": self.is_default,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CostModel:
        """Inverse of :meth:`to_json` (also reads ``studies.spec.plan_costs`` output)."""
        severity = d["severity"]
        return cls(
            severity_costs=tuple(float(severity[str(level)]) for level in SEVERITY_LEVELS),
            reject_cost=float(d["false_fail"]),
            review_cost=float(d["review"]),
            unit=str(d.get("unit", DEFAULT_UNIT)),
            is_default=bool(d.get("is_default", False)),
        )


#: The documented default scale, flagged as such.
DEFAULT_COST_MODEL = CostModel(is_default=True)


# --- the expected cost of a false pass --------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class FalsePassCost:
    """Severities of human-failed outputs and the expected cost of shipping one of them.

    ``severity_counts[i]``: failures of severity i + 1 (a fractional consensus severity counts
    at its nearest level); ``missing``: failures with no severity, left out of the mean;
    ``n``: all failures given, with or without a severity.

    ``all_failures``: the weighted mean cost of every failure (clustered bootstrap interval).
    With the judge's scores, ``score_weighted`` is the mean cost of the failures the judge
    *passes*: each failure weighted by its calibrated P(pass), the chance the judge lets it
    through; ``score_difference`` is score-weighted minus all, with its interval. Severity
    depends on the score when that interval excludes 0 (``depends_on_score``): then the
    failures a judge passes are not a typical failure (e.g. it catches the harmful ones and
    passes the cosmetic ones), and ``used`` is ``"score_weighted"``; otherwise the two estimate
    the same mean, the one over every failure is the more precise, and ``used`` is ``"all"``.
    ``expected`` is the estimate in use, the E[cost | fail] of the decision rule.
    """

    severity_counts: tuple[int, ...]
    missing: int
    expected: Estimate
    n: int
    warnings: tuple[str, ...] = ()
    all_failures: Estimate | None = None
    score_weighted: Estimate | None = None
    score_difference: Estimate | None = None
    used: str = "all"

    @property
    def depends_on_score(self) -> bool:
        return self.used == "score_weighted"

    def to_json(self) -> dict[str, Any]:
        def opt(e: Estimate | None) -> dict[str, Any] | None:
            return _estimate_json(e) if e is not None else None

        return {
            "severity_counts": {str(level): c for level, c in zip(SEVERITY_LEVELS,
                                                                 self.severity_counts,
                                                                 strict=True)},
            "missing": self.missing,
            "expected": _estimate_json(self.expected),
            "all_failures": opt(self.all_failures if self.all_failures is not None
                                else self.expected),
            "score_weighted": opt(self.score_weighted),
            "score_difference": opt(self.score_difference),
            "depends_on_score": self.depends_on_score,
            "used": self.used,
            "n": self.n,
            "warnings": list(self.warnings),
        }


def _weights(weights: npt.ArrayLike | None, n: int) -> FloatArray:
    if weights is None:
        return np.ones(n)
    w = as_float(as_1d(weights, "weights"), "weights")
    if w.size != n:
        raise ValueError(f"weights must have one entry per row ({n}), got {w.size}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and >= 0")
    return w


def _clusters(clusters: npt.ArrayLike | None, n: int) -> npt.NDArray[Any]:
    if clusters is None:
        return np.arange(n)
    c = as_1d(clusters, "clusters")
    if c.size != n:
        raise ValueError(f"clusters must have one entry per row ({n}), got {c.size}")
    return c


def _failure_scores(scores: npt.ArrayLike, n: int) -> FloatArray:
    """The judge's P(pass) of each failure, checked: one per failure, each in [0, 1]."""
    sc = as_float(as_1d(scores, "scores"), "scores")
    if sc.size != n:
        raise ValueError(f"scores must have one entry per failure ({n}), got {sc.size}")
    if not np.all(np.isfinite(sc)) or np.any((sc < 0) | (sc > 1)):
        raise ValueError("scores must be probabilities in [0, 1]")
    return sc


def _severity_warnings(
    s: FloatArray, levels: npt.NDArray[np.int64], missing: int, n: int,
) -> list[str]:
    """What a reader of the mean cost should know about the severities behind it."""
    warnings: list[str] = []
    if missing:
        warnings.append(
            f"{missing} of {n} failures have no severity: counted as missing and left out of "
            "the mean"
        )
    if s.size and np.any(s != levels):
        warnings.append("fractional severities cost the interpolation between their levels")
    return warnings


def false_pass_cost(
    severities: npt.ArrayLike,
    *,
    costs: CostModel,
    weights: npt.ArrayLike | None = None,
    clusters: npt.ArrayLike | None = None,
    scores: npt.ArrayLike | None = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> FalsePassCost:
    """E[cost | fail]: the weighted mean cost of the human-failed outputs, with an interval.

    ``severities``: one entry per human-failed output, its (consensus) severity in [1, 5] or
    NaN when nobody gave one. A fractional severity (the mean of several annotators) costs the
    linear interpolation between its two levels. Failures without a severity are counted in
    ``missing`` and left out of the mean (a warning says how many): assuming they are as bad as
    the others is the only assumption the data allow, and it is stated, not hidden.
    ``weights`` (e.g. 1 / inclusion probability) weight the mean; ``clusters`` (item ids) are
    resampled together.

    ``scores`` (optional, one per failure, in [0, 1]): the judge's calibrated P(pass) of each
    failure. Then the cost of the failures the judge passes is estimated too, each failure
    weighted by its score (``FalsePassCost.score_weighted``), and used where severity depends
    on the score (see :class:`FalsePassCost`). The two estimates and their difference share one
    set of item resamples (the same seed), so the difference's interval is paired.
    """
    sev = as_float(as_1d(severities, "severities"), "severities")
    n = int(sev.size)
    w = _weights(weights, n)
    cl = _clusters(clusters, n)
    sc = None if scores is None else _failure_scores(scores, n)
    have = ~np.isnan(sev)
    if np.any((sev[have] < 1) | (sev[have] > 5)):
        raise ValueError("severities must be in [1, 5] (or NaN for none given)")
    missing = int((~have).sum())
    s, ws = sev[have], w[have]
    levels = np.floor(s + 0.5).astype(np.int64)
    counts = tuple(int(c) for c in np.bincount(levels - 1, minlength=5)[:5])
    warnings = _severity_warnings(s, levels, missing, n)
    method = "false_pass_cost (weighted mean cost of a human-failed output)"
    if s.size == 0 or ws.sum() <= 0:
        warnings.append("no human-failed output with a severity (and positive weight)")
        expected = Estimate(value=float("nan"), method=method, warnings=tuple(warnings))
        return FalsePassCost(severity_counts=counts, missing=missing, expected=expected, n=n,
                             warnings=tuple(warnings), all_failures=expected)
    cost = np.interp(s, np.asarray(SEVERITY_LEVELS, dtype=np.float64),
                     np.asarray(costs.severity_costs))
    state = rng.bit_generator.state  # one seed for all three: paired resamples

    def boot(stats: FloatArray, fn: Any, how: str) -> Estimate:
        rng.bit_generator.state = state
        est = bootstrap_clustered(item_sums(stats, cl[have]), fn, n_subjects=int(s.size),
                                  rng=rng, options=options, method=how)
        return Estimate(**{**est.__dict__, "warnings": (*warnings, *est.warnings)})

    all_failures = boot(np.column_stack([ws, ws * cost]), ratio_fn, method)
    if sc is None:
        return FalsePassCost(severity_counts=counts, missing=missing, expected=all_failures,
                             n=n, warnings=tuple(warnings), all_failures=all_failures)
    wp = ws * sc[have]
    if wp.sum() <= 0:
        # The judge passes none of the failures: no false pass to cost; keep the mean of all.
        warnings.append("the judge's scores give no failure a chance to pass: the mean cost of "
                        "every failure is used")
        return FalsePassCost(severity_counts=counts, missing=missing, expected=all_failures,
                             n=n, warnings=tuple(warnings), all_failures=all_failures)
    weighted = boot(np.column_stack([wp, wp * cost]), ratio_fn,
                    "false_pass_cost (mean cost of a failure, weighted by the judge's P(pass))")
    diff = boot(np.column_stack([wp, wp * cost, ws, ws * cost]), diff_of_means_fn,
                "false_pass_cost difference (score-weighted - all failures)")
    lo, hi = diff.ci_low, diff.ci_high
    depends = (lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi)
               and (lo > 0 or hi < 0))
    return FalsePassCost(
        severity_counts=counts, missing=missing,
        expected=weighted if depends else all_failures, n=n, warnings=tuple(warnings),
        all_failures=all_failures, score_weighted=weighted, score_difference=diff,
        used="score_weighted" if depends else "all",
    )


# --- the decision rule ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DecisionThresholds:
    """Pass when p >= ``pass_above``, fail when p < ``fail_below``, escalate in between.

    Equal thresholds mean there is no escalation band (a review never pays). The costs they
    were derived from are kept beside them.
    """

    pass_above: float
    fail_below: float
    fail_cost: float
    reject_cost: float
    review_cost: float

    @property
    def has_band(self) -> bool:
        return self.fail_below < self.pass_above

    def to_json(self) -> dict[str, Any]:
        return fields_dict(self)


def decision_thresholds(
    *, fail_cost: float, reject_cost: float, review_cost: float
) -> DecisionThresholds:
    """Closed-form thresholds of the cost-optimal decision (see the module docstring).

    ``fail_cost`` is E[cost | fail] (e.g. ``false_pass_cost(...).expected.value``),
    ``reject_cost`` the cost of a false fail, ``review_cost`` that of one human review; all
    finite and >= 0 (``ValueError`` otherwise).
    """
    e = _cost(fail_cost, "fail_cost")
    c_r = _cost(reject_cost, "reject_cost")
    c_h = _cost(review_cost, "review_cost")
    if e + c_r == 0:
        # Nothing costs anything but a review: pass everything.
        p_star, peak = 0.0, 0.0
    else:
        p_star = e / (e + c_r)
        peak = e * c_r / (e + c_r)  # the cheaper of pass / fail at p*, its largest value
    if c_h >= peak:
        pass_above = fail_below = p_star
    else:
        # peak > c_h >= 0 implies e > 0 and c_r > 0.
        pass_above = 1.0 - c_h / e
        fail_below = c_h / c_r
    return DecisionThresholds(
        pass_above=float(pass_above),
        fail_below=float(fail_below),
        fail_cost=e,
        reject_cost=c_r,
        review_cost=c_h,
    )


def decide(p: npt.ArrayLike, *, thresholds: DecisionThresholds) -> npt.NDArray[np.str_]:
    """Per row "pass" (p >= pass_above), "fail" (p < fail_below) or "escalate".

    A missing probability (NaN) escalates: without a calibrated P(pass) only a human can
    decide.
    """
    pa = as_float(np.atleast_1d(np.asarray(p)), "p")
    out = np.full(pa.shape, "escalate", dtype="<U8")
    out[pa < thresholds.fail_below] = "fail"
    out[pa >= thresholds.pass_above] = "pass"
    return out


def expected_decision_cost(
    p: npt.ArrayLike,
    decisions: npt.ArrayLike,
    *,
    fail_cost: float,
    reject_cost: float,
    review_cost: float,
) -> FloatArray:
    """Expected cost of each row's decision given p = P(pass).

    pass -> (1 - p) fail_cost, fail -> p reject_cost, escalate -> review_cost.
    """
    pa = as_float(np.atleast_1d(np.asarray(p)), "p")
    d = np.atleast_1d(np.asarray(decisions)).astype(str)
    if d.shape != pa.shape:
        raise ValueError("p and decisions must have the same shape")
    unknown = set(np.unique(d)) - set(DECISIONS)
    if unknown:
        raise ValueError(f"unknown decisions {sorted(unknown)} (expected {', '.join(DECISIONS)})")
    e = _cost(fail_cost, "fail_cost")
    c_r = _cost(reject_cost, "reject_cost")
    c_h = _cost(review_cost, "review_cost")
    out = np.full(pa.shape, c_h, dtype=np.float64)
    is_pass = d == "pass"
    is_fail = d == "fail"
    out[is_pass] = (1.0 - pa[is_pass]) * e
    out[is_fail] = pa[is_fail] * c_r
    return out


# --- what each policy costs -------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PolicyCosts:
    """Expected cost per 1,000 outputs of three policies, on the human-labelled outputs.

    ``raw``: the judge's raw verdicts; ``calibrated``: cost-optimal decisions on calibrated
    P(pass) (escalations cost a review); ``human_only``: every output reviewed.
    """

    raw: Estimate
    calibrated: Estimate
    human_only: Estimate
    n: int
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "raw": _estimate_json(self.raw),
            "calibrated": _estimate_json(self.calibrated),
            "human_only": _estimate_json(self.human_only),
            "n": self.n,
            "per": 1000,
            "warnings": list(self.warnings),
        }


def _binary(x: npt.ArrayLike, name: str, n: int | None = None) -> npt.NDArray[np.bool_]:
    a = as_float(as_1d(x, name), name)
    if n is not None and a.size != n:
        raise ValueError(f"{name} must have one entry per row ({n}), got {a.size}")
    if not np.all((a == 0) | (a == 1)):
        raise ValueError(f"{name} must be 0/1 with no missing values")
    return a == 1


def policy_costs(
    passed: npt.ArrayLike,
    raw_pass: npt.ArrayLike,
    calibrated_p: npt.ArrayLike,
    *,
    thresholds: DecisionThresholds,
    weights: npt.ArrayLike | None = None,
    clusters: npt.ArrayLike | None = None,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> PolicyCosts:
    """Expected cost per 1,000 outputs of raw verdicts, calibrated decisions and humans only.

    ``passed``: human consensus (0/1, the reference); ``raw_pass``: the judge's raw verdict
    (0/1); ``calibrated_p``: held-out calibrated P(pass) (in-sample probabilities flatter the
    calibrated policy). Each row's *realised* cost against the human consensus: a pass of a
    human-failed output costs ``thresholds.fail_cost``, a fail of a human-passed output
    ``thresholds.reject_cost``, an escalation ``thresholds.review_cost``; a correct decision
    costs nothing. The weighted means (``weights``, e.g. 1 / inclusion probability) get
    bootstrap intervals with ``clusters`` (item ids) resampled together, drawn from ``rng``
    in the order raw, calibrated. Reviewing everything costs 1,000 x review_cost exactly
    (no sampling error; the interval is that point).
    """
    truth = _binary(passed, "passed")
    n = int(truth.size)
    raw = _binary(raw_pass, "raw_pass", n)
    p = as_float(as_1d(calibrated_p, "calibrated_p"), "calibrated_p")
    if p.size != n:
        raise ValueError(f"calibrated_p must have one entry per row ({n}), got {p.size}")
    if not np.all(np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError("calibrated_p must be probabilities in [0, 1] with no missing values")
    w = _weights(weights, n)
    cl = _clusters(clusters, n)
    e, c_r, c_h = thresholds.fail_cost, thresholds.reject_cost, thresholds.review_cost
    per = 1000.0
    raw_cost = np.where(raw & ~truth, e, np.where(~raw & truth, c_r, 0.0)) * per
    d = decide(p, thresholds=thresholds)
    cal_cost = np.select(
        [(d == "pass") & ~truth, (d == "fail") & truth, d == "escalate"],
        [e, c_r, c_h],
        default=0.0,
    ) * per

    def mean_cost(cost: FloatArray, name: str) -> Estimate:
        if n == 0 or w.sum() <= 0:
            return Estimate(value=float("nan"), method=name,
                            warnings=("no labelled output with positive weight",))
        stats = item_sums(np.column_stack([w, w * cost]), cl)
        return bootstrap_clustered(stats, ratio_fn, n_subjects=n, rng=rng, options=options,
                                   method=name)

    raw_est = mean_cost(raw_cost, "cost per 1,000 outputs: raw judge verdicts")
    cal_est = mean_cost(cal_cost, "cost per 1,000 outputs: calibrated cost-optimal decisions")
    human = per * c_h
    human_est = Estimate(
        value=human,
        ci_low=human,
        ci_high=human,
        n_items=raw_est.n_items,
        n_ratings=n,
        level=options.level,
        method="cost per 1,000 outputs: humans only (1,000 x review cost, no sampling error)",
    )
    warnings = sorted(set(raw_est.warnings) | set(cal_est.warnings))
    return PolicyCosts(raw=raw_est, calibrated=cal_est, human_only=human_est, n=n,
                       warnings=tuple(warnings))
