"""Which subjects (outputs or comparisons) a sampling plan sends to humans, and with what
probability.

Pure functions over plain data (no ORM): the service gathers the population, the judges'
uncertainty and the gold pool, and stores what these functions return. Every draw uses an
explicit seeded `numpy.random.Generator`, so a plan can be rebuilt exactly from its spec.

Modes:
- ``all``: every eligible subject (a census: inclusion probability 1).
- ``per_stratum``: ``n`` subjects from every stratum of ``dimension`` (all of a smaller stratum),
  or, with ``counts`` ({stratum label: n}), that many from each stratum it names (strata it
  does not name get ``n``, or none without ``n``): what a selection report's Neyman
  allocation of the next labels asks for.
- ``proportional``: ``total`` subjects split in proportion to stratum sizes, but no stratum gets
  fewer than ``min_per_stratum`` (or its size, if smaller); see `allocate_proportional`.

Inside a stratum h with N_h subjects and n_h to draw, the design is:
- simple random sampling without replacement when every subject has the same weight (always
  so without ``disagreement_weight``): inclusion probability pi = n_h / N_h;
- with ``disagreement_weight`` w > 0 and unequal weights, randomised systematic sampling with
  probability proportional to size (pi-ps; Hartley & Rao 1962): a subject's size is its
  selection weight ``1 + w * u`` with ``u`` in [0, 1] (see `judge_uncertainty`),
  pi_i = n_h * x_i / sum(x), and subjects whose pi would reach 1 are taken with certainty and
  the rest recomputed (see `pps_inclusion_probabilities`). Successive sampling
  (``rng.choice(p=..., replace=False)``) is deliberately not used: its inclusion probabilities
  are not proportional to the weights and have no closed form.

Every random draw records its first-order inclusion probability, so that estimates can be
re-weighted (Horvitz-Thompson: mean = sum(y_i / pi_i) / N). Gold entries are not random draws
(``draw_kind`` "gold", no probability); "escalation" is reserved for subjects sent to humans by
a decision rule, which are not random draws either.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from reviewhub.errors import Problems, ValidationFailed

MODES = ("all", "per_stratum", "proportional")
SUBJECTS = ("output", "comparison")
UNKNOWN_STRATUM = "unknown"
SORT_KEY_LIMIT = 2**31  # sort keys stay below this so the per-annotator hash fits in 63 bits
NO_SORT_KEY = -1  # a draw's sort key before the keys are drawn (see `draw`)

# How a queue entry came to be (QueueEntry.draw_kind has the same values). Only "random" and
# "census" entries are probability draws and carry an inclusion probability.
DRAW_RANDOM = "random"
DRAW_CENSUS = "census"
DRAW_GOLD = "gold"
DRAW_ESCALATION = "escalation"
DRAW_KINDS = (DRAW_RANDOM, DRAW_CENSUS, DRAW_GOLD, DRAW_ESCALATION)

# Designs inside one stratum, as recorded in the plan summary.
DESIGN_CENSUS = "census"  # mode "all": every subject, pi = 1
DESIGN_TAKE_ALL = "take_all"  # n_h >= N_h: the whole stratum, pi = 1
DESIGN_NONE = "none"  # n_h = 0: nothing drawn, pi = 0 (the stratum cannot be estimated)
DESIGN_SRSWOR = "srswor"  # equal weights: simple random sampling, pi = n_h / N_h
DESIGN_PPS = "pps_systematic"  # unequal weights: randomised systematic pi-ps


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
    # per_stratum only: subjects to draw per stratum label, overriding `n` where given.
    counts: Mapping[str, int] | None = None

    def as_dict(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.counts is not None:
            extra["counts"] = dict(self.counts)
        return {
            **extra,
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


class Draw(NamedTuple):
    """One queue entry to create. The first five fields keep the order of the former tuple."""

    id: int
    stratum: str
    weight: float  # selection weight: the size measure of a pi-ps draw, 1.0 otherwise
    is_gold: bool
    sort_key: int
    draw_kind: str
    # First-order inclusion probability under the plan's design; None for non-random entries.
    inclusion_probability: float | None


@dataclass(frozen=True)
class StratumDesign:
    """How one stratum was sampled; sum of pi over the stratum equals `drawn`."""

    design: str
    population: int
    drawn: int
    certainty: int  # subjects with pi = 1 (all of them in a census or take-all stratum)
    pi_min: float
    pi_max: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Design:
    """The plan's design over the regular (non-gold) frame, before any random number is used."""

    allocation: dict[str, int]
    strata: dict[str, StratumDesign]
    # Every frame subject's inclusion probability (0 in a stratum that gets no draws).
    probabilities: dict[int, float]


@dataclass(frozen=True)
class SampleResult:
    chosen: list[Draw]  # in draw order: regular entries by stratum and id, then gold
    population: dict[str, int]
    allocation: dict[str, int]
    gold_available: int
    gold_chosen: int
    warnings: list[str] = field(default_factory=list)
    designs: dict[str, StratumDesign] = field(default_factory=dict)

    def draw_kinds(self) -> dict[str, int]:
        """Entries per draw kind (for the plan summary)."""
        return dict(sorted(Counter(d.draw_kind for d in self.chosen).items()))


def _int_field(raw: Mapping[str, Any], name: str, *, minimum: int,
               problems: Problems) -> int | None:
    value = raw.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        problems.add(f"spec.{name}", "must be an integer")
        return None
    if value < minimum:
        problems.add(f"spec.{name}", f"must be at least {minimum}")
        return None
    return value


def spec_parse(raw: Mapping[str, Any], *, default_seed: int) -> SamplingSpec:
    """Validate a plan spec as sent by a lead; every problem names its field (all of them are
    collected, then raised as one ValidationFailed)."""
    problems = Problems()
    if not isinstance(raw, Mapping):
        problems.add("spec", "must be an object")
        problems.raise_if_any("The sampling spec")
    known = set(SamplingSpec.__dataclass_fields__)
    for k in sorted(set(raw) - known):
        problems.add(f"spec.{k}", "unknown field")
    mode = raw.get("mode", "all")
    if mode not in MODES:
        problems.add("spec.mode", f"must be one of {', '.join(MODES)}")
    subject = raw.get("subject", "output")
    if subject not in SUBJECTS:
        problems.add("spec.subject", "must be 'output' or 'comparison'")
    dimension = raw.get("dimension")
    if dimension is not None and (not isinstance(dimension, str) or not dimension):
        problems.add("spec.dimension", "must be a dimension key")
        dimension = ""
    n = _int_field(raw, "n", minimum=1, problems=problems)
    total = _int_field(raw, "total", minimum=1, problems=problems)
    min_per = _int_field(raw, "min_per_stratum", minimum=0, problems=problems) or 0
    seed = _int_field(raw, "seed", minimum=0, problems=problems)
    weight_raw = raw.get("disagreement_weight", 0.0)
    weight = 0.0
    if isinstance(weight_raw, bool) or not isinstance(weight_raw, int | float):
        problems.add("spec.disagreement_weight", "must be a number")
    elif not math.isfinite(float(weight_raw)) or weight_raw < 0:
        problems.add("spec.disagreement_weight", "must be a finite number >= 0")
    else:
        weight = float(weight_raw)
    include_errors = raw.get("include_errors", False)
    if not isinstance(include_errors, bool):
        problems.add("spec.include_errors", "must be true or false")
    if mode in ("per_stratum", "proportional") and dimension is None:
        problems.add("spec.dimension", f"is required for mode '{mode}'")
    counts = _counts_field(raw, mode, problems)
    if mode == "per_stratum" and raw.get("n") is None and raw.get("counts") is None:
        problems.add("spec.n", "is required for mode 'per_stratum' (or give spec.counts)")
    if mode == "proportional" and raw.get("total") is None:
        problems.add("spec.total", "is required for mode 'proportional'")
    problems.raise_if_any("The sampling spec")
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
        counts=counts,
    )


def _counts_field(raw: Mapping[str, Any], mode: str, problems: Problems) -> dict[str, int] | None:
    value = raw.get("counts")
    if value is None:
        return None
    if mode != "per_stratum":
        if mode in MODES:
            problems.add("spec.counts", "applies to mode 'per_stratum' only")
        return None
    if not isinstance(value, Mapping) or not value:
        problems.add("spec.counts", "must be a non-empty object {stratum label: count}")
        return None
    out: dict[str, int] = {}
    for label, count in value.items():
        if not isinstance(label, str) or not label:
            problems.add("spec.counts", "keys must be stratum labels")
        elif isinstance(count, bool) or not isinstance(count, int) or count < 0:
            problems.add(f"spec.counts.{label}", "must be an integer >= 0")
        else:
            out[label] = count
    return out


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
        raise ValidationFailed.at(
            "spec.total",
            f"spec.total ({total}) is smaller than the per-stratum minimums "
            f"({sum(floors.values())} over {len(sizes)} strata).",
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


def pps_inclusion_probabilities(sizes: Sequence[float] | np.ndarray, n: int) -> np.ndarray:
    """First-order inclusion probabilities of a pi-ps design of n from units of the given sizes.

    pi_i = n * x_i / sum(x); a unit whose pi would be >= 1 is taken with certainty (pi = 1) and
    the others are recomputed with n reduced by the certainty units, until none is >= 1 (the
    standard treatment, e.g. Sarndal, Swensson & Wretman, Model Assisted Survey Sampling,
    3.6). The result sums to n. By hand: sizes [1, 2, 3, 4] with n = 2 give
    [0.2, 0.4, 0.6, 0.8]; sizes [1, 1, 2, 8, 16] with n = 3 take 16, then 8 (2 * 8 / 12 > 1),
    and split the last draw over [1, 1, 2]: [0.25, 0.25, 0.5, 1, 1].
    """
    x = np.asarray(sizes, dtype=float)
    if x.ndim != 1 or not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError("sizes must be finite and positive")
    if n >= len(x):
        return np.ones(len(x))
    if n <= 0:
        return np.zeros(len(x))
    certain = np.zeros(len(x), dtype=bool)
    pi = np.ones(len(x))
    while True:
        rest = ~certain
        m = n - int(certain.sum())
        # m >= 1 and some unit stays below 1: the rest sums to m < len(rest) with all sizes > 0.
        share = m * x[rest] / x[rest].sum()
        over = share >= 1.0
        if not over.any():
            pi[rest] = share
            return pi
        certain[np.flatnonzero(rest)[over]] = True


def pps_systematic_draw(pi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices drawn by randomised systematic sampling with inclusion probabilities `pi`.

    Certainty units (pi = 1) are taken; the others are put in a random order, laid end to end
    as intervals of length pi_i, and hit by the points U, U + 1, ..., U + m - 1 with
    U ~ Uniform[0, 1) and m = sum of their pi. Each interval is at most 1 long, so unit i is hit
    with probability exactly pi_i; the random order (Hartley & Rao 1962) lets any two units be
    drawn together, which a fixed order would not.
    """
    certain = np.flatnonzero(pi >= 1.0)
    rest = np.flatnonzero((pi > 0.0) & (pi < 1.0))
    m = round(float(pi[rest].sum()))
    if m == 0:
        return np.sort(certain)
    order = rng.permutation(rest)
    cum = np.cumsum(pi[order])
    # pi sums to the integer m up to rounding; pin the end so the last point stays inside.
    cum *= m / cum[-1]
    cum[-1] = m
    points = rng.random() + np.arange(m)
    hits = np.minimum(np.searchsorted(cum, points, side="right"), len(order) - 1)
    picked = order[hits]
    if len(set(picked.tolist())) != m:  # cannot happen with every pi < 1; a guard, not a path
        raise AssertionError("systematic draw hit a unit twice")
    return np.sort(np.concatenate([certain, picked]))


def srs_draw(ids: Sequence[int], n: int, rng: np.random.Generator) -> list[int]:
    """n ids by simple random sampling without replacement (all of them when n >= len)."""
    if n >= len(ids):
        return list(ids)
    if n <= 0:
        return []
    return [ids[int(i)] for i in rng.choice(len(ids), size=n, replace=False)]


def _weights(spec: SamplingSpec, members: Sequence[Subject]) -> list[float]:
    return [1.0 + spec.disagreement_weight * s.uncertainty for s in members]


def _allocation(spec: SamplingSpec, sizes: Mapping[str, int]) -> dict[str, int]:
    if spec.mode == "all":
        return dict(sizes)
    if spec.mode == "per_stratum":
        if spec.counts is not None:
            unknown = sorted(set(spec.counts) - set(sizes))
            if unknown:
                problems = Problems()
                for h in unknown:
                    problems.add(f"spec.counts.{h}", "no subject in this stratum")
                raise problems.error(
                    message=f"spec.counts names strata with no subject in '{spec.dimension}': "
                    f"{', '.join(unknown)} (strata: {', '.join(sorted(sizes)) or 'none'})."
                )
            return {h: min(spec.counts.get(h, spec.n or 0), size) for h, size in sizes.items()}
        assert spec.n is not None
        return allocate_per_stratum(sizes, spec.n)
    assert spec.total is not None
    return allocate_proportional(sizes, spec.total, spec.min_per_stratum)


def _strata(population: Sequence[Subject]) -> dict[str, list[Subject]]:
    by_stratum: dict[str, list[Subject]] = defaultdict(list)
    for subject in population:
        by_stratum[subject.stratum].append(subject)
    return {h: by_stratum[h] for h in sorted(by_stratum)}


def design(*, spec: SamplingSpec, population: Sequence[Subject]) -> Design:
    """The design of a plan over its regular frame: allocation, and every subject's pi.

    Needs no random numbers: the inclusion probabilities are a property of the design, the
    same for every seed.
    """
    by_stratum = _strata(population)
    sizes = {h: len(members) for h, members in by_stratum.items()}
    allocation = _allocation(spec, sizes)
    strata: dict[str, StratumDesign] = {}
    probabilities: dict[int, float] = {}
    for h, members in by_stratum.items():
        n_h, size = allocation[h], len(members)
        weights = _weights(spec, members)
        if spec.mode == "all":
            name, pi = DESIGN_CENSUS, np.ones(size)
        elif n_h >= size:
            name, pi = DESIGN_TAKE_ALL, np.ones(size)
        elif n_h <= 0:
            name, pi = DESIGN_NONE, np.zeros(size)
        elif np.allclose(weights, weights[0]):
            name, pi = DESIGN_SRSWOR, np.full(size, n_h / size)
        else:
            name, pi = DESIGN_PPS, pps_inclusion_probabilities(weights, n_h)
        strata[h] = StratumDesign(
            design=name,
            population=size,
            drawn=min(n_h, size),
            certainty=int((pi >= 1.0).sum()),
            pi_min=float(pi.min()),
            pi_max=float(pi.max()),
        )
        probabilities.update((s.id, float(p)) for s, p in zip(members, pi, strict=True))
    return Design(allocation=allocation, strata=strata, probabilities=probabilities)


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
    the same database state and seed always give the same plan. Every regular entry carries
    its inclusion probability under `design`; gold entries carry none.
    """
    rng = np.random.default_rng(spec.seed)
    by_stratum = _strata(population)
    plan_design = design(spec=spec, population=population)
    regular_kind = DRAW_CENSUS if spec.mode == "all" else DRAW_RANDOM
    # Sort keys are drawn once every entry is known (a key per entry, after the gold draw):
    # entries carry NO_SORT_KEY until then.
    chosen: list[Draw] = []
    for h, members in by_stratum.items():
        weights = _weights(spec, members)
        stratum = plan_design.strata[h]
        if stratum.design == DESIGN_PPS:
            pi = np.array([plan_design.probabilities[s.id] for s in members])
            picked = {members[int(i)].id for i in pps_systematic_draw(pi, rng)}
        else:
            # Unweighted strata keep the draw they always had, so plans made before pi-ps
            # existed rebuild to the same subjects from their seed.
            picked = set(srs_draw([s.id for s in members], stratum.drawn, rng))
        chosen.extend(
            Draw(s.id, h, w, False, NO_SORT_KEY, regular_kind, plan_design.probabilities[s.id])
            for s, w in zip(members, weights, strict=True)
            if s.id in picked
        )
    warnings: list[str] = []
    n_gold = gold_target(len(chosen), gold_rate)
    if n_gold > len(gold):
        warnings.append(
            f"gold_rate {gold_rate} asks for {n_gold} gold entries but only {len(gold)} "
            "subjects have gold labels; all of them are used."
        )
        n_gold = len(gold)
    gold_ids = set(srs_draw([g.id for g in gold], n_gold, rng))
    chosen.extend(
        Draw(g.id, g.stratum, 1.0, True, NO_SORT_KEY, DRAW_GOLD, None)
        for g in gold
        if g.id in gold_ids
    )
    sort_keys = rng.integers(0, SORT_KEY_LIMIT, size=len(chosen))
    return SampleResult(
        chosen=[d._replace(sort_key=int(key)) for d, key in zip(chosen, sort_keys, strict=True)],
        population={h: len(members) for h, members in by_stratum.items()},
        allocation=plan_design.allocation,
        gold_available=len(gold),
        gold_chosen=len(gold_ids),
        warnings=warnings,
        designs=plan_design.strata,
    )


def stratum_label(strata: Mapping[str, Any] | None, dimension: str | None) -> str:
    """The subject's label in `dimension` ("" without one; "unknown" when the item lacks it)."""
    if dimension is None:
        return ""
    value = (strata or {}).get(dimension)
    return UNKNOWN_STRATUM if value in (None, "") else str(value)


def counts(labels: Iterable[str]) -> dict[str, int]:
    return dict(Counter(labels))
