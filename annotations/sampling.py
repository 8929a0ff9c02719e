"""Which subjects (outputs or comparisons) a sampling plan sends to humans.

Pure functions over plain data (no ORM): the service gathers the population, the judges'
uncertainty and the gold pool, and stores what these functions return. Every draw uses an
explicit seeded `numpy.random.Generator`, so a plan can be rebuilt exactly from its spec.

Modes:
- ``all``: every eligible subject.
- ``per_stratum``: ``n`` subjects from every stratum of ``dimension`` (all of a smaller stratum).
- ``proportional``: ``total`` subjects split in proportion to stratum sizes, but no stratum gets
  fewer than ``min_per_stratum`` (or its size, if smaller); see `allocate_proportional`.

``disagreement_weight`` w > 0 makes the draw inside a stratum favour subjects the judges are
unsure about: a subject's selection weight is ``1 + w * u`` with ``u`` in [0, 1] (see
`judge_uncertainty`), and subjects are drawn without replacement with probability proportional
to weight (numpy's successive sampling). The weights are stored per queue entry so that
estimates can be re-weighted.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reviewhub.api.errors import ValidationFailed

MODES = ("all", "per_stratum", "proportional")
SUBJECTS = ("output", "comparison")
UNKNOWN_STRATUM = "unknown"
SORT_KEY_LIMIT = 2**31  # sort keys stay below this so the per-annotator hash fits in 63 bits


@dataclass(frozen=True)
class SamplingSpec:
    mode: str = "all"
    subject: str = "output"
    dimension: str | None = None
    n: int | None = None
    total: int | None = None
    min_per_stratum: int = 0
    disagreement_weight: float = 0.0
    seed: int = 0
    include_errors: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "subject": self.subject,
            "dimension": self.dimension,
            "n": self.n,
            "total": self.total,
            "min_per_stratum": self.min_per_stratum,
            "disagreement_weight": self.disagreement_weight,
            "seed": self.seed,
            "include_errors": self.include_errors,
        }


@dataclass(frozen=True)
class Subject:
    """One candidate for the queue: a subject id and its stratum label."""

    id: int
    stratum: str = ""
    uncertainty: float = 0.0


@dataclass(frozen=True)
class SampleResult:
    # (subject id, stratum, selection weight, is_gold, sort_key), in draw order.
    chosen: list[tuple[int, str, float, bool, int]]
    population: dict[str, int]
    allocation: dict[str, int]
    gold_available: int
    gold_chosen: int
    warnings: list[str] = field(default_factory=list)


def _int_field(raw: Mapping[str, Any], name: str, *, minimum: int) -> int | None:
    value = raw.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationFailed(
            f"spec.{name} must be an integer.", details={f"spec.{name}": "must be an integer"}
        )
    if value < minimum:
        raise ValidationFailed(
            f"spec.{name} must be at least {minimum}.",
            details={f"spec.{name}": f"must be >= {minimum}"},
        )
    return value


def spec_parse(raw: Mapping[str, Any], *, default_seed: int) -> SamplingSpec:
    """Validate a plan spec as sent by a lead; every problem names its field."""
    if not isinstance(raw, Mapping):
        raise ValidationFailed("spec must be an object.", details={"spec": "must be an object"})
    known = set(SamplingSpec.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValidationFailed(
            f"Unknown spec field(s): {', '.join(unknown)}.",
            details={f"spec.{k}": "unknown field" for k in unknown},
        )
    mode = raw.get("mode", "all")
    if mode not in MODES:
        raise ValidationFailed(
            f"spec.mode must be one of {', '.join(MODES)}.", details={"spec.mode": "invalid"}
        )
    subject = raw.get("subject", "output")
    if subject not in SUBJECTS:
        raise ValidationFailed(
            "spec.subject must be 'output' or 'comparison'.", details={"spec.subject": "invalid"}
        )
    dimension = raw.get("dimension")
    if dimension is not None and (not isinstance(dimension, str) or not dimension):
        raise ValidationFailed(
            "spec.dimension must be a dimension key.", details={"spec.dimension": "invalid"}
        )
    n = _int_field(raw, "n", minimum=1)
    total = _int_field(raw, "total", minimum=1)
    min_per = _int_field(raw, "min_per_stratum", minimum=0) or 0
    seed = _int_field(raw, "seed", minimum=0)
    weight_raw = raw.get("disagreement_weight", 0.0)
    if isinstance(weight_raw, bool) or not isinstance(weight_raw, int | float):
        raise ValidationFailed(
            "spec.disagreement_weight must be a number.",
            details={"spec.disagreement_weight": "must be a number"},
        )
    weight = float(weight_raw)
    if not math.isfinite(weight) or weight < 0:
        raise ValidationFailed(
            "spec.disagreement_weight must be a finite number >= 0.",
            details={"spec.disagreement_weight": "must be >= 0"},
        )
    include_errors = raw.get("include_errors", False)
    if not isinstance(include_errors, bool):
        raise ValidationFailed(
            "spec.include_errors must be true or false.",
            details={"spec.include_errors": "must be a boolean"},
        )
    if mode in ("per_stratum", "proportional") and dimension is None:
        raise ValidationFailed(
            f"spec.dimension is required for mode '{mode}'.",
            details={"spec.dimension": "required"},
        )
    if mode == "per_stratum" and n is None:
        raise ValidationFailed(
            "spec.n is required for mode 'per_stratum'.", details={"spec.n": "required"}
        )
    if mode == "proportional" and total is None:
        raise ValidationFailed(
            "spec.total is required for mode 'proportional'.", details={"spec.total": "required"}
        )
    return SamplingSpec(
        mode=mode,
        subject=subject,
        dimension=dimension,
        n=n if mode == "per_stratum" else None,
        total=total if mode == "proportional" else None,
        min_per_stratum=min_per if mode == "proportional" else 0,
        disagreement_weight=weight,
        seed=default_seed if seed is None else seed,
        include_errors=include_errors,
    )


def allocate_per_stratum(sizes: Mapping[str, int], n: int) -> dict[str, int]:
    """n from every stratum, or the whole stratum when it is smaller."""
    return {h: min(n, size) for h, size in sizes.items()}


def allocate_proportional(sizes: Mapping[str, int], total: int, minimum: int) -> dict[str, int]:
    """Split `total` in proportion to stratum sizes with a floor of min(minimum, size).

    Strata whose proportional share falls below their floor are fixed at the floor (and those
    above their size at their size), and the rest is re-split in proportion among the others
    until nothing moves; the fractional shares are then rounded by largest remainder (ties to
    the larger stratum, then the label), so the allocation sums to exactly `total`.
    """
    population = sum(sizes.values())
    if total >= population:
        return dict(sizes)
    floors = {h: min(minimum, size) for h, size in sizes.items()}
    if sum(floors.values()) > total:
        raise ValidationFailed(
            f"spec.total ({total}) is smaller than the per-stratum minimums "
            f"({sum(floors.values())} over {len(sizes)} strata).",
            details={"spec.total": "smaller than min_per_stratum times the number of strata"},
        )
    fixed: dict[str, int] = {}
    free = {h for h, size in sizes.items() if size > 0}
    for h in set(sizes) - free:
        fixed[h] = 0
    shares: dict[str, float] = {}
    while True:
        remaining = total - sum(fixed.values())
        weight = sum(sizes[h] for h in free)
        shares = {h: remaining * sizes[h] / weight for h in free} if weight else {}
        low = {h for h in free if shares[h] < floors[h]}
        if low:
            for h in low:
                fixed[h] = floors[h]
            free -= low
            continue
        high = {h for h in free if shares[h] > sizes[h]}
        if high:
            for h in high:
                fixed[h] = sizes[h]
            free -= high
            continue
        break
    allocation = dict(fixed)
    floor_parts = {h: math.floor(shares[h]) for h in free}
    allocation.update(floor_parts)
    leftover = total - sum(allocation.values())
    order = sorted(free, key=lambda h: (-(shares[h] - floor_parts[h]), -sizes[h], h))
    for h in order[:leftover]:
        allocation[h] += 1
    return allocation


def judge_uncertainty(
    verdicts: Iterable[tuple[int, int, str, float | None]],
) -> dict[int, float]:
    """Per subject, how much the judges leave open, in [0, 1].

    `verdicts` are (subject id, criterion id, value, probability) for scored verdicts of every
    judge version. For each (subject, criterion): 1 when judge versions give different values,
    else 1 - 2|p - 0.5| averaged over the verdicts that carry a probability (1 at p = 0.5,
    0 at p = 0 or 1). A subject's uncertainty is the largest over its criteria.
    """
    values: dict[tuple[int, int], set[str]] = defaultdict(set)
    probs: dict[tuple[int, int], list[float]] = defaultdict(list)
    for subject_id, criterion_id, value, probability in verdicts:
        key = (subject_id, criterion_id)
        values[key].add(value)
        if probability is not None and math.isfinite(probability):
            probs[key].append(min(1.0, max(0.0, probability)))
    result: dict[int, float] = {}
    for key, seen in values.items():
        if len(seen) > 1:
            u = 1.0
        elif probs[key]:
            u = float(np.mean([1.0 - 2.0 * abs(p - 0.5) for p in probs[key]]))
        else:
            u = 0.0
        result[key[0]] = max(result.get(key[0], 0.0), u)
    return result


def weighted_draw(
    ids: Sequence[int], weights: Sequence[float], n: int, rng: np.random.Generator
) -> list[int]:
    """n ids without replacement, with probability proportional to weight."""
    if n >= len(ids):
        return list(ids)
    if n <= 0:
        return []
    w = np.asarray(weights, dtype=float)
    if np.allclose(w, w[0]):
        picked = rng.choice(len(ids), size=n, replace=False)
    else:
        picked = rng.choice(len(ids), size=n, replace=False, p=w / w.sum())
    return [ids[int(i)] for i in picked]


def gold_target(n_regular: int, gold_rate: float) -> int:
    """Gold entries so that they make up `gold_rate` of the whole queue (rounded)."""
    if gold_rate <= 0:
        return 0
    return round(n_regular * gold_rate / (1.0 - gold_rate))


def draw(
    *,
    spec: SamplingSpec,
    population: Sequence[Subject],
    gold: Sequence[Subject],
    gold_rate: float,
) -> SampleResult:
    """Choose the regular and gold subjects of a plan. Deterministic given `spec.seed`.

    `population` excludes the gold subjects; both sequences are sorted by id by the caller, so
    the same database state and seed always give the same plan.
    """
    rng = np.random.default_rng(spec.seed)
    by_stratum: dict[str, list[Subject]] = defaultdict(list)
    for subject in population:
        by_stratum[subject.stratum].append(subject)
    sizes = {h: len(members) for h, members in sorted(by_stratum.items())}
    if spec.mode == "all":
        allocation = dict(sizes)
    elif spec.mode == "per_stratum":
        assert spec.n is not None
        allocation = allocate_per_stratum(sizes, spec.n)
    else:
        assert spec.total is not None
        allocation = allocate_proportional(sizes, spec.total, spec.min_per_stratum)
    chosen: list[tuple[int, str, float, bool]] = []
    for h in sorted(sizes):
        members = by_stratum[h]
        weights = [1.0 + spec.disagreement_weight * s.uncertainty for s in members]
        picked = set(weighted_draw([s.id for s in members], weights, allocation[h], rng))
        chosen.extend(
            (s.id, h, w, False) for s, w in zip(members, weights, strict=True) if s.id in picked
        )
    warnings: list[str] = []
    n_gold = gold_target(len(chosen), gold_rate)
    if n_gold > len(gold):
        warnings.append(
            f"gold_rate {gold_rate} asks for {n_gold} gold entries but only {len(gold)} "
            "subjects have gold labels; all of them are used."
        )
        n_gold = len(gold)
    gold_ids = set(weighted_draw([g.id for g in gold], [1.0] * len(gold), n_gold, rng))
    chosen.extend((g.id, g.stratum, 1.0, True) for g in gold if g.id in gold_ids)
    sort_keys = rng.integers(0, SORT_KEY_LIMIT, size=len(chosen))
    return SampleResult(
        chosen=[(*c, int(k)) for c, k in zip(chosen, sort_keys, strict=True)],
        population=sizes,
        allocation=allocation,
        gold_available=len(gold),
        gold_chosen=len(gold_ids),
        warnings=warnings,
    )


def stratum_label(strata: Mapping[str, Any] | None, dimension: str | None) -> str:
    """The subject's label in `dimension` ("" without one; "unknown" when the item lacks it)."""
    if dimension is None:
        return ""
    value = (strata or {}).get(dimension)
    return UNKNOWN_STRATUM if value in (None, "") else str(value)


def counts(labels: Iterable[str]) -> dict[str, int]:
    return dict(Counter(labels))
