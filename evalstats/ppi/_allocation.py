"""Neyman allocation of the next human labels across strata (see `evalstats.ppi`)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalstats.ppi._common import MAX_LABELS, FloatArray, IntArray, _check_mix, _num

# --- where the next labels help most -----------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class NeymanAllocation:
    """Extra human labels per stratum that reach ``target_se`` on the mix with the fewest labels.

    ``per_stratum``: extra labels (>= 0) per stratum code; ``total``: their sum;
    ``feasible``: whether the planned labels reach the target (``False`` when the target is 0
    or below the part of the variance labels cannot reduce, when it needs more than
    :data:`MAX_LABELS` labels, or when a stratum's ``capacity`` of unlabelled outputs runs
    out; ``per_stratum`` is then the labels an interval needs, or the whole capacity);
    ``se_current`` / ``se_planned``: the modelled mix standard error now (``inf`` when a
    weighted stratum has no label) and after the extra labels. A target already met, or
    ``sigma`` 0 everywhere (no variance to remove), is feasible with only the labels an
    interval needs.
    """

    per_stratum: dict[int, int]
    total: int
    feasible: bool
    target_se: float
    se_current: float
    se_planned: float

    def to_json(self) -> dict[str, Any]:
        """The report's ``next_labels`` shape (stratum codes as string keys)."""
        return {
            "target_se": self.target_se,
            "per_stratum": {str(k): v for k, v in sorted(self.per_stratum.items())},
            "total": self.total,
            "feasible": self.feasible,
            "se_current": _num(self.se_current),
            "se_planned": _num(self.se_planned),
        }


def _max_m(q: FloatArray) -> IntArray:
    """Largest integer m >= 0 with m (m + 1) <= q (elementwise, exact after a correction)."""
    m = np.floor((np.sqrt(1.0 + 4.0 * q) - 1.0) / 2.0)
    m = np.where((m + 1) * (m + 2) <= q, m + 1, m)
    m = np.where(m * (m + 1) > q, m - 1, m)
    return np.maximum(m, 0).astype(np.int64)


def neyman_allocation(
    *,
    sigma: Mapping[int, float],
    n_labelled: Mapping[int, int],
    mix: Mapping[int, float],
    target_se: float,
    capacity: Mapping[int, int] | None = None,
    fixed_var: Mapping[int, float] | None = None,
    min_labels: int = 2,
) -> NeymanAllocation:
    """The fewest extra human labels per stratum that bring the mix se down to ``target_se``.

    Model: ``var_mix = sum_s mix_s^2 (sigma_s^2 / n_s + fixed_var_s)`` with ``sigma_s`` the
    per-label standard deviation of the rectifier ``y - lambda f`` in stratum s (e.g. a
    stratum's PPI se times ``sqrt(n_s)``), ``n_s`` its labels after the extra ones and
    ``fixed_var_s`` (default 0) the part of its variance labels do not reduce (the judge-only
    term). Minimises the total number of extra labels subject to ``var_mix <= target_se^2``,
    in integers: the continuous optimum is Neyman's allocation, ``n_s`` proportional to
    ``mix_s sigma_s`` with the strata that already have more than their share kept as they are;
    the integer optimum takes the largest marginal reductions ``mix_s^2 sigma_s^2 /
    (n (n + 1))`` first, which is exact for this separable convex problem (found here by a
    threshold search on the marginal reduction, then single steps).

    Every stratum with a positive mix weight first gets up to ``min_labels`` labels (an
    interval needs two). ``capacity`` caps the extra labels per stratum (its unlabelled
    outputs); strata missing from it are uncapped. ``sigma`` must be given (finite, >= 0) for
    every stratum with a positive mix weight; a stratum whose sigma is unknown (fewer than two
    labels) needs a prior guess from the caller, e.g. the pooled sigma.
    """
    weights = _check_mix(mix)
    target = float(target_se)
    if not math.isfinite(target) or target < 0:
        raise ValueError(f"target_se must be a finite number >= 0, got {target_se!r}")
    if min_labels < 1:
        raise ValueError("min_labels must be >= 1")
    strata, a2, n0, cap, floor_var = _allocation_inputs(
        weights, sigma=sigma, n_labelled=n_labelled, capacity=capacity, fixed_var=fixed_var)
    # Labels every weighted stratum needs before an interval exists.
    forced = np.minimum(np.maximum(min_labels - n0, 0), cap)
    m = n0 + forced
    room = cap - forced
    se_now = (math.sqrt(_var_of(a2, np.maximum(n0, 0), floor_var))
              if np.all((n0 > 0) | (a2 == 0)) else math.inf)
    budget = target**2

    def result(extra: IntArray, feasible: bool) -> NeymanAllocation:
        per = {s: int(x) for s, x in zip(strata, extra, strict=True)}
        v = (_var_of(a2, n0 + extra, floor_var)
             if np.all((n0 + extra > 0) | (a2 == 0)) else math.inf)
        return NeymanAllocation(
            per_stratum=per,
            total=int(sum(per.values())),
            feasible=feasible,
            target_se=target,
            se_current=se_now,
            se_planned=math.sqrt(v),
        )

    if np.any(n0 + forced < min_labels) or np.any((m == 0) & (a2 > 0)):
        # Not enough outputs left to label in some weighted stratum.
        return result(forced, False)
    if _var_of(a2, m, floor_var) <= budget:
        return result(forced, True)
    full = m + room
    if _var_of(a2, full, floor_var) > budget:
        return result(forced + room, False)
    # Neyman's continuous total; beyond MAX_LABELS the plan is not a plan (and int64 overflows).
    if float(np.sqrt(a2).sum()) ** 2 / (budget - floor_var) > MAX_LABELS:
        return result(forced, False)
    cur = _largest_reductions_first(a2, m, room, budget, floor_var)
    # Recompute from scratch (the running sum drifts by rounding) before deciding feasibility.
    return result(cur - n0, _var_of(a2, cur, floor_var) <= budget * (1 + 1e-12))


def _allocation_inputs(
    weights: Mapping[int, float],
    *,
    sigma: Mapping[int, float],
    n_labelled: Mapping[int, int],
    capacity: Mapping[int, int] | None,
    fixed_var: Mapping[int, float] | None,
) -> tuple[list[int], FloatArray, IntArray, IntArray, float]:
    """Per weighted stratum (sorted): mix^2 sigma^2, labels so far, capacity; and the mix
    variance labels cannot reduce. Raises ``ValueError`` naming the stratum on bad input."""
    strata = sorted(s for s, m in weights.items() if m > 0)
    a2 = np.zeros(len(strata))
    n0 = np.zeros(len(strata), dtype=np.int64)
    cap = np.full(len(strata), np.iinfo(np.int64).max // 4, dtype=np.int64)
    floor_var = 0.0
    for i, s in enumerate(strata):
        if s not in sigma:
            raise ValueError(f"sigma is missing for stratum {s} (mix weight {weights[s]})")
        sg = float(sigma[s])
        if not math.isfinite(sg) or sg < 0:
            raise ValueError(f"sigma of stratum {s} must be a finite number >= 0, got {sg!r}")
        a2[i] = weights[s] ** 2 * sg**2
        n0[i] = int(n_labelled.get(s, 0))
        if n0[i] < 0:
            raise ValueError(f"n_labelled of stratum {s} must be >= 0")
        if capacity is not None and s in capacity:
            cap[i] = max(int(capacity[s]), 0)
        if fixed_var is not None and s in fixed_var:
            floor_var += weights[s] ** 2 * float(fixed_var[s])
    return strata, a2, n0, cap, floor_var


def _var_of(a2: FloatArray, m: IntArray, floor_var: float) -> float:
    """The mix variance with ``m`` labels per stratum."""
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(a2 > 0, a2 / m, 0.0)
    return float(terms.sum()) + floor_var


def _largest_reductions_first(
    a2: FloatArray, m: IntArray, room: IntArray, budget: float, floor_var: float,
) -> IntArray:
    """Labels per stratum taking the largest marginal reductions first until the variance is
    within ``budget``: a threshold search on the reduction, then single steps by a heap."""

    def steps(t: float) -> IntArray:
        # Steps m -> m + 1 whose reduction a2 / (m (m + 1)) is >= t, within the capacity.
        with np.errstate(divide="ignore"):
            top = _max_m(a2 / t)
        return np.clip(top - m + 1, 0, room)

    gains0 = a2 / (m * (m + 1.0))
    t_hi = float(gains0.max()) * 2.0  # takes no step: infeasible
    t_lo = t_hi
    while _var_of(a2, m + steps(t_lo), floor_var) > budget:
        t_lo /= 16.0
    for _ in range(200):
        t_mid = math.sqrt(t_hi * t_lo)
        if not (t_lo < t_mid < t_hi):
            break
        if _var_of(a2, m + steps(t_mid), floor_var) > budget:
            t_hi = t_mid
        else:
            t_lo = t_mid
    # m + steps(t_hi) is a prefix of the order of largest reductions and misses the target:
    # continue one label at a time, largest reduction first.
    cur = m + steps(t_hi)
    v = _var_of(a2, cur, floor_var)
    heap = [
        (-a2[i] / (cur[i] * (cur[i] + 1.0)), i)
        for i in range(len(a2))
        if a2[i] > 0 and cur[i] - m[i] < room[i]
    ]
    heapq.heapify(heap)
    while v > budget and heap:
        neg_gain, i = heapq.heappop(heap)
        cur[i] += 1
        v -= -neg_gain
        if cur[i] - m[i] < room[i]:
            heapq.heappush(heap, (-a2[i] / (cur[i] * (cur[i] + 1.0)), i))
    return cur
