"""Inclusion probabilities of sampling plans: the recorded pi of every random draw is the
probability with which the design really draws the subject, and re-weighting by 1 / pi
(Horvitz-Thompson) estimates a known population mean without bias.

The pi-ps formulas are checked against hand-computed figures; the designs are checked by
simulation over many seeds against the recorded probabilities (binomial bounds), which is an
independent check of the draw, not a comparison with earlier output.
"""

from __future__ import annotations

import json
import math
import uuid
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from scipy.stats import norm

from annotations import export, sampling, services
from annotations.models import Annotation, GoldLabel, QueueEntry
from studies.models import Study

from .factories import annotators_make, passing_labels, world_build

R = 4000  # seeded draws per simulation
Z = 4.0  # a Horvitz-Thompson check is 4 standard errors wide (one check per design)


# --- the pi-ps formulas by hand ---------------------------------------------------------------


def test_pps_probabilities_by_hand() -> None:
    # n = 2 of sizes 1..4 (sum 10): pi_i = 2 x_i / 10.
    assert sampling.pps_inclusion_probabilities([1, 2, 3, 4], 2) == pytest.approx(
        [0.2, 0.4, 0.6, 0.8]
    )
    # 2 * 10 / 13 > 1: the big unit is certain and the last draw is split over three equals.
    assert sampling.pps_inclusion_probabilities([1, 1, 1, 10], 2) == pytest.approx(
        [1 / 3, 1 / 3, 1 / 3, 1.0]
    )
    # Two rounds: 3 * 16 / 28 > 1 takes 16; then 2 * 8 / 12 > 1 takes 8; 1 draw over [1, 1, 2].
    assert sampling.pps_inclusion_probabilities([1, 1, 2, 8, 16], 3) == pytest.approx(
        [0.25, 0.25, 0.5, 1.0, 1.0]
    )
    # Equal sizes reduce to n / N.
    assert sampling.pps_inclusion_probabilities([3.0] * 8, 3) == pytest.approx([3 / 8] * 8)
    assert list(sampling.pps_inclusion_probabilities([1, 2], 5)) == [1.0, 1.0]
    assert list(sampling.pps_inclusion_probabilities([1, 2], 0)) == [0.0, 0.0]
    for bad in ([1.0, 0.0], [1.0, -2.0], [1.0, math.nan]):
        with pytest.raises(ValueError):
            sampling.pps_inclusion_probabilities(bad, 1)


def test_pps_probabilities_sum_to_n_and_stay_at_most_one() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        size = int(rng.integers(2, 30))
        x = rng.pareto(1.0, size) + 0.01  # heavy tail: many certainty units
        n = int(rng.integers(1, size))
        pi = sampling.pps_inclusion_probabilities(x, n)
        assert pi.sum() == pytest.approx(n)
        assert np.all(pi > 0) and np.all(pi <= 1.0)
        # Below certainty, pi stays proportional to size.
        rest = pi < 1.0
        if rest.sum() > 1:
            ratio = pi[rest] / x[rest]
            assert ratio == pytest.approx(np.full(rest.sum(), ratio[0]))


# --- a small frame covering every design ------------------------------------------------------

# Stratum a: unequal weights (pi-ps, no certainty); b: two large units taken with certainty;
# c: equal weights (simple random sampling); d: smaller than n (taken whole).
UNCERTAINTY = {
    "a": [0.0, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.0],
    "b": [0.0, 0.0, 0.0, 1.0, 1.0],
    "c": [0.5] * 6,
    "d": [0.3, 0.9],
}
OFFSET = {"a": 0.0, "b": 3.0, "c": -1.0, "d": 4.0}
FRAME_SIZE = sum(len(us) for us in UNCERTAINTY.values())
# A frequency check tests every unit of the frame at once: the Bonferroni bound keeps the
# chance of any false alarm per design at 1e-3 (z = 4.07 for 21 units).
Z_UNITS = float(norm.isf(1e-3 / (2 * FRAME_SIZE)))


def _frame() -> tuple[list[sampling.Subject], dict[int, float]]:
    """Subjects sorted by id, and a study variable y that grows with u and differs by stratum
    (so an unweighted sample mean is biased under every design below)."""
    subjects: list[sampling.Subject] = []
    y: dict[int, float] = {}
    for h, us in UNCERTAINTY.items():
        for u in us:
            sid = len(subjects) + 1
            subjects.append(sampling.Subject(sid, h, u))
            y[sid] = 2.0 + 5.0 * u + OFFSET[h] + 0.5 * (sid % 3)
    return subjects, y


def _spec(**raw: Any) -> sampling.SamplingSpec:
    return sampling.spec_parse({"dimension": "lang", **raw}, default_seed=0)


WEIGHTED = {"mode": "per_stratum", "n": 3, "disagreement_weight": 9}


GOLD = [sampling.Subject(100 + i, "a") for i in range(4)]
_SIMULATIONS: dict[str, tuple[Counter[int], dict[int, float], list[sampling.SampleResult]]] = {}


def _simulate(
    raw: dict[str, Any],
) -> tuple[Counter[int], dict[int, float], list[sampling.SampleResult]]:
    """Inclusion counts and the recorded pi per subject over R seeds (pi must not vary), on the
    frame above with the gold pool mixed in at rate 0.2. Cached: the frequency and the
    Horvitz-Thompson checks of one design share the same draws."""
    key = json.dumps(raw, sort_keys=True)
    if key in _SIMULATIONS:
        return _SIMULATIONS[key]
    population, _ = _frame()
    counts: Counter[int] = Counter()
    recorded: dict[int, float] = {}
    results = []
    for seed in range(R):
        result = sampling.draw(
            spec=_spec(**raw, seed=seed), population=population, gold=GOLD, gold_rate=0.2
        )
        results.append(result)
        for d in result.chosen:
            if d.draw_kind == sampling.DRAW_GOLD:
                continue
            assert d.inclusion_probability is not None
            assert recorded.setdefault(d.id, d.inclusion_probability) == d.inclusion_probability
            counts[d.id] += 1
    _SIMULATIONS[key] = (counts, recorded, results)
    return _SIMULATIONS[key]


def _within_binomial(freq: float, pi: float) -> bool:
    return abs(freq - pi) <= Z_UNITS * math.sqrt(pi * (1.0 - pi) / R) + 1e-12


def test_design_sums_to_allocation_per_stratum() -> None:
    population, _ = _frame()
    for raw in (
        {"mode": "all"},
        {"mode": "per_stratum", "n": 3},
        WEIGHTED,
        {"mode": "proportional", "total": 9, "min_per_stratum": 2},
        {"mode": "proportional", "total": 9, "min_per_stratum": 2, "disagreement_weight": 4},
    ):
        frame = sampling.design(spec=_spec(**raw), population=population)
        by_stratum: dict[str, float] = defaultdict(float)
        for s in population:
            by_stratum[s.stratum] += frame.probabilities[s.id]
        for h, total in by_stratum.items():
            assert total == pytest.approx(frame.strata[h].drawn), (raw, h)
            assert frame.strata[h].drawn == min(frame.allocation[h], len(UNCERTAINTY[h]))
    designs = sampling.design(spec=_spec(**WEIGHTED), population=population).strata
    assert {h: d.design for h, d in designs.items()} == {
        "a": "pps_systematic",
        "b": "pps_systematic",
        "c": "srswor",
        "d": "take_all",
    }
    assert designs["b"].certainty == 2 and designs["d"].certainty == 2
    assert designs["a"].certainty == 0


DESIGNS = [
    pytest.param({"mode": "per_stratum", "n": 3}, id="uniform-within-stratum"),
    pytest.param({"mode": "proportional", "total": 9, "min_per_stratum": 2}, id="proportional"),
    pytest.param(WEIGHTED, id="weighted-pps"),
    pytest.param(
        {"mode": "proportional", "total": 9, "min_per_stratum": 2, "disagreement_weight": 4},
        id="proportional-weighted",
    ),
]


@pytest.mark.parametrize("raw", DESIGNS)
def test_empirical_inclusion_matches_recorded_probability(raw: dict[str, Any]) -> None:
    population, _ = _frame()
    counts, recorded, results = _simulate(raw)
    frame = sampling.design(spec=_spec(**raw), population=population)
    assert set(recorded) == {s.id for s in population}  # every unit is drawn at some seed
    for s in population:
        pi = recorded[s.id]
        assert pi == pytest.approx(frame.probabilities[s.id])
        freq = counts[s.id] / R
        assert _within_binomial(freq, pi), (s, freq, pi)
    # Certainty units are drawn every time.
    certain = [s.id for s in population if recorded[s.id] == 1.0]
    assert certain and all(counts[sid] == R for sid in certain)
    assert len(certain) == sum(d.certainty for d in frame.strata.values())
    # Each draw takes exactly n_h per stratum, and gold is marked, never given a probability.
    drawn = {h: d.drawn for h, d in frame.strata.items()}
    for result in results:
        assert Counter(d.stratum for d in result.chosen if not d.is_gold) == drawn
        golds = [d for d in result.chosen if d.is_gold]
        assert golds and all(
            d.draw_kind == "gold" and d.inclusion_probability is None for d in golds
        )
        assert {d.draw_kind for d in result.chosen if not d.is_gold} == {"random"}


def test_successive_sampling_would_fail_the_same_check() -> None:
    # The check above has power: numpy's weighted choice without replacement (the former
    # draw) does not include units with probability n x_i / sum(x).
    sizes = np.array([1.0 + 9.0 * u for u in UNCERTAINTY["a"]])
    naive = sampling.pps_inclusion_probabilities(sizes, 3)
    rng = np.random.default_rng(0)
    counts = np.zeros(len(sizes))
    for _ in range(R):
        counts[rng.choice(len(sizes), size=3, replace=False, p=sizes / sizes.sum())] += 1
    assert not all(_within_binomial(f, p) for f, p in zip(counts / R, naive, strict=True))


def _ht_check(raw: dict[str, Any]) -> None:
    population, y = _frame()
    true_mean = float(np.mean(list(y.values())))
    _, _, results = _simulate(raw)
    ht, naive = [], []
    for result in results:
        drawn = [
            (y[d.id], d.inclusion_probability)
            for d in result.chosen
            if d.draw_kind in ("random", "census") and d.inclusion_probability is not None
        ]
        assert len(drawn) == sum(not d.is_gold for d in result.chosen)
        ht.append(sum(value / pi for value, pi in drawn) / len(population))
        naive.append(float(np.mean([value for value, _ in drawn])))
    ht_se = float(np.std(ht, ddof=1)) / math.sqrt(R)
    assert abs(float(np.mean(ht)) - true_mean) <= Z * ht_se, (raw, np.mean(ht), true_mean)
    # The same draws averaged without weights are biased: the check can tell the difference.
    naive_se = float(np.std(naive, ddof=1)) / math.sqrt(R)
    assert abs(float(np.mean(naive)) - true_mean) > Z * naive_se, raw


@pytest.mark.parametrize("raw", DESIGNS)
def test_horvitz_thompson_is_unbiased(raw: dict[str, Any]) -> None:
    _ht_check(raw)


def test_census_is_certain() -> None:
    population, y = _frame()
    result = sampling.draw(spec=_spec(mode="all"), population=population, gold=[], gold_rate=0)
    assert {(d.draw_kind, d.inclusion_probability) for d in result.chosen} == {("census", 1.0)}
    ht = sum(y[d.id] / (d.inclusion_probability or 0) for d in result.chosen) / len(population)
    assert ht == pytest.approx(np.mean(list(y.values())))


def test_stratum_without_draws_has_probability_zero() -> None:
    population, _ = _frame()
    # 4 over 21 without a floor: d's share rounds to 0, so d cannot be estimated; the design
    # says so instead of pretending.
    frame = sampling.design(spec=_spec(mode="proportional", total=4), population=population)
    assert frame.strata["d"].design == "none" and frame.strata["d"].drawn == 0
    assert all(frame.probabilities[s.id] == 0.0 for s in population if s.stratum == "d")


def test_unweighted_draws_are_unchanged() -> None:
    # Unweighted strata still draw with rng.choice(N_h, n_h, replace=False) in label order,
    # so plans made before inclusion probabilities existed rebuild to the same subjects.
    population, _ = _frame()
    for seed in (0, 1, 17):
        result = sampling.draw(
            spec=_spec(mode="per_stratum", n=3, seed=seed),
            population=population,
            gold=[],
            gold_rate=0,
        )
        rng = np.random.default_rng(seed)
        expected: list[int] = []
        for h in sorted(UNCERTAINTY):
            members = [s.id for s in population if s.stratum == h]
            if len(members) > 3:
                picked = {members[int(i)] for i in rng.choice(len(members), 3, replace=False)}
            else:
                picked = set(members)
            expected.extend(sid for sid in members if sid in picked)
        keys = rng.integers(0, sampling.SORT_KEY_LIMIT, size=len(expected))
        assert [(d.id, d.sort_key) for d in result.chosen] == list(
            zip(expected, keys.tolist(), strict=True)
        )


def test_draw_kinds_match_the_model() -> None:
    assert tuple(QueueEntry.DrawKind.values) == sampling.DRAW_KINDS
    assert "escalation" in sampling.DRAW_KINDS


def test_weighted_draw_is_reproducible_from_seed() -> None:
    population, _ = _frame()
    a = sampling.draw(spec=_spec(**WEIGHTED, seed=9), population=population, gold=[], gold_rate=0)
    b = sampling.draw(spec=_spec(**WEIGHTED, seed=9), population=population, gold=[], gold_rate=0)
    assert a.chosen == b.chosen


# --- through the service, the database and the export ---------------------------------------


@pytest.mark.django_db
def test_plan_stores_probabilities_and_export_carries_them(study: Study, lead: Any) -> None:
    world = world_build(study=study, strata={"en": 6, "de": 3, "fr": 1})
    GoldLabel.objects.create(
        criterion=world.criteria["correct"], output=world.outputs[-1], value="pass"
    )
    plan = services.sampling_plan_create(
        study=study,
        spec={"mode": "per_stratum", "dimension": "lang", "n": 2, "seed": 4},
        k=1,
        gold_rate=0.3,
        created_by=lead,
    )
    # fr's only output is gold, so the regular frame is en 6, de 3.
    rows = Counter(
        (h, kind, None if pi is None else round(pi, 12))
        for h, kind, pi in plan.entries.values_list("stratum", "draw_kind", "inclusion_probability")
    )
    assert rows == {
        ("de", "random", round(2 / 3, 12)): 2,
        ("en", "random", round(2 / 6, 12)): 2,
        ("fr", "gold", None): 1,
    }
    assert plan.summary["designs"] == {
        "de": {
            "design": "srswor",
            "population": 3,
            "drawn": 2,
            "certainty": 0,
            "pi_min": pytest.approx(2 / 3),
            "pi_max": pytest.approx(2 / 3),
        },
        "en": {
            "design": "srswor",
            "population": 6,
            "drawn": 2,
            "certainty": 0,
            "pi_min": pytest.approx(1 / 3),
            "pi_max": pytest.approx(1 / 3),
        },
    }
    assert plan.summary["draw_kinds"] == {"gold": 1, "random": 4}
    (annotator,) = annotators_make(study, 1)
    while (a := services.assignment_next(study=study, annotator=annotator)) is not None:
        services.annotation_submit(
            assignment=a, annotator=annotator, submission_id=uuid.uuid4(), labels=passing_labels()
        )
    in_plan = set(plan.entries.values_list("output_id", flat=True))
    imported = Annotation.objects.create(
        annotator=annotator,
        criterion=world.criteria["correct"],
        output=next(o for o in world.outputs if o.pk not in in_plan),
        value="pass",
        source=Annotation.Source.IMPORT,
    )
    by_id = {r["annotation_id"]: r for r in export.export_rows(study=study)}
    assert len(by_id) == 5 * 2 + 1
    pis = {e.output_id: (e.draw_kind, e.inclusion_probability) for e in plan.entries.all()}
    for row in by_id.values():
        if row["annotation_id"] == imported.pk:
            assert row["draw_kind"] is None and row["inclusion_probability"] is None
        else:
            assert (row["draw_kind"], row["inclusion_probability"]) == pis[row["output_id"]]
    csv_text = "".join(export.export_csv(study=study))
    header = csv_text.splitlines()[0].split(",")
    assert "draw_kind" in header and "inclusion_probability" in header


@pytest.mark.django_db
def test_database_refuses_inconsistent_draw_records(world: Any, lead: Any) -> None:
    plan = services.sampling_plan_create(
        study=world.study, spec={"mode": "all"}, k=1, gold_rate=0, created_by=lead
    )
    output = world.outputs[0]
    for fields in (
        {"is_gold": True, "draw_kind": "random"},  # gold must say so
        {"is_gold": False, "draw_kind": "gold"},
        {"is_gold": True, "draw_kind": "gold", "inclusion_probability": 0.5},  # not a draw
        {"draw_kind": "escalation", "inclusion_probability": 0.5},
        {"draw_kind": "random", "inclusion_probability": 1.5},
        {"draw_kind": "random", "inclusion_probability": 0.0},
    ):
        with pytest.raises(IntegrityError), transaction.atomic():
            QueueEntry.objects.create(plan=plan, output=output, **fields)


# --- the migration's backfill -----------------------------------------------------------------


def _migration_nodes() -> tuple[tuple[str, str], tuple[str, str]]:
    """(this migration, its annotations parent), found by name so a renumbering keeps working."""
    graph = MigrationExecutor(connection).loader.graph
    (node,) = [
        key
        for key in graph.nodes
        if key[0] == "annotations" and key[1].endswith("_queueentry_inclusion_probability")
    ]
    (parent,) = [p for p in graph.node_map[node].parents if p.key[0] == "annotations"]
    return node, parent.key


@pytest.mark.django_db(transaction=True)
def test_migration_backfills_what_is_known(study: Study, lead: Any) -> None:
    world = world_build(study=study, strata={"en": 6, "de": 3, "fr": 1})
    GoldLabel.objects.create(
        criterion=world.criteria["correct"], output=world.outputs[0], value="pass"
    )
    census = services.sampling_plan_create(
        study=study, spec={"mode": "all"}, k=1, gold_rate=0.2, created_by=lead
    )
    srs = services.sampling_plan_create(
        study=study,
        spec={"mode": "proportional", "dimension": "lang", "total": 5, "min_per_stratum": 1},
        k=1,
        gold_rate=0,
        created_by=lead,
    )
    weighted = services.sampling_plan_create(
        study=study,
        spec={"mode": "per_stratum", "dimension": "lang", "n": 2, "disagreement_weight": 3},
        k=1,
        gold_rate=0,
        created_by=lead,
    )

    def state() -> dict[int, tuple[int, str, float | None]]:
        return {
            e.pk: (e.plan_id, e.draw_kind, e.inclusion_probability)
            for e in QueueEntry.objects.all()
        }

    before = state()
    node, parent = _migration_nodes()
    executor = MigrationExecutor(connection)
    executor.migrate([parent])
    executor = MigrationExecutor(connection)
    executor.migrate([node])
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    after = state()
    assert set(after) == set(before)
    # Census, gold and unweighted plans come back exactly as the sampler records them now.
    for pk, (plan_id, kind, pi) in before.items():
        if plan_id in (census.pk, srs.pk):
            assert after[pk][1] == kind and after[pk][2] == pytest.approx(pi), pk
    kinds = Counter(after[pk][1] for pk in after if after[pk][0] == census.pk)
    assert kinds == {"census": 9, "gold": 1}
    # Weighted plans: only strata taken whole are known (fr has a single regular output).
    for e in QueueEntry.objects.filter(plan=weighted):
        assert e.draw_kind == "random"
        assert e.inclusion_probability == (1.0 if e.stratum == "fr" else None)
