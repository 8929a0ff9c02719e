"""Sampling plans: allocation arithmetic (checked against hand-computed figures), stratified and
proportional draws, gold mixing, judge-disagreement weighting and plan versioning. The designs'
inclusion probabilities are checked by simulation in test_inclusion_probability.py."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from annotations import sampling, services
from annotations.models import Annotation, Assignment, GoldLabel, QueueEntry, SamplingPlan
from judges.models import Judge, JudgeVersion, Verdict
from reviewhub.api.errors import Conflict, Forbidden, ValidationFailed
from studies.models import Study

from .factories import World, passing_labels, world_build

# --- pure allocation ------------------------------------------------------------------------


def _paths(exc: ValidationFailed) -> list[str]:
    """The paths of the problems a validation error lists (the one details shape)."""
    return [e["path"] for e in exc.details["errors"]]



def test_per_stratum_caps_at_stratum_size() -> None:
    assert sampling.allocate_per_stratum({"en": 6, "de": 3, "fr": 1}, 2) == {
        "en": 2,
        "de": 2,
        "fr": 1,
    }


def test_per_stratum_counts_draw_each_stratum_its_own_count() -> None:
    spec = sampling.spec_parse({"mode": "per_stratum", "dimension": "lang",
                                "counts": {"en": 5, "fr": 9}, "seed": 3}, default_seed=0)
    population = [sampling.Subject(id=i, stratum=h)
                  for i, h in enumerate(["en"] * 40 + ["de"] * 10 + ["fr"] * 4)]
    result = sampling.draw(spec=spec, population=population, gold=[], gold_rate=0.0)
    drawn = Counter(d.stratum for d in result.chosen)
    # en its 5, fr all 4 of its 4 (fewer than 9), de none: counts name only en and fr.
    assert drawn == {"en": 5, "fr": 4}
    pi = {d.stratum: d.inclusion_probability for d in result.chosen}
    assert pi["en"] == pytest.approx(5 / 40) and pi["fr"] == 1.0
    with_n = sampling.spec_parse({"mode": "per_stratum", "dimension": "lang", "n": 2,
                                  "counts": {"en": 5}}, default_seed=0)
    assert Counter(d.stratum for d in sampling.draw(
        spec=with_n, population=population, gold=[], gold_rate=0.0).chosen) == {
        "en": 5, "de": 2, "fr": 2}


@pytest.mark.parametrize(("raw", "field"), [
    ({"mode": "per_stratum", "dimension": "lang", "counts": {"en": -1}}, "spec.counts.en"),
    ({"mode": "per_stratum", "dimension": "lang", "counts": {"en": 1.5}}, "spec.counts.en"),
    ({"mode": "per_stratum", "dimension": "lang", "counts": []}, "spec.counts"),
    ({"mode": "proportional", "dimension": "lang", "total": 5, "counts": {"en": 1}},
     "spec.counts"),
])
def test_bad_counts_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as exc:
        sampling.spec_parse(raw, default_seed=0)
    assert field in _paths(exc.value)


def test_counts_naming_an_empty_stratum_are_refused() -> None:
    spec = sampling.spec_parse({"mode": "per_stratum", "dimension": "lang",
                                "counts": {"xx": 3}}, default_seed=0)
    with pytest.raises(ValidationFailed) as exc:
        sampling.draw(spec=spec, population=[sampling.Subject(id=1, stratum="en")], gold=[],
                      gold_rate=0.0)
    assert "spec.counts.xx" in _paths(exc.value)


def test_proportional_with_floor_by_hand() -> None:
    # Shares of 40 over 100/50/10 are 25, 12.5, 2.5; fr is raised to its floor of 8, and the
    # remaining 32 are re-split over 150: 21.33 and 10.67, rounded by largest remainder.
    assert sampling.allocate_proportional({"en": 100, "de": 50, "fr": 10}, 40, 8) == {
        "en": 21,
        "de": 11,
        "fr": 8,
    }


def test_proportional_floor_capped_by_small_stratum() -> None:
    # fr has only 3 items: its floor is 3. Shares of 30 over 60/30/3 → 19.35/9.68/0.97; fr
    # rises to 3, 27 over 90: 18 and 9 exactly.
    assert sampling.allocate_proportional({"en": 60, "de": 30, "fr": 3}, 30, 5) == {
        "en": 18,
        "de": 9,
        "fr": 3,
    }


def test_proportional_without_floor_is_hamilton() -> None:
    # 10 over 7/2/1 → 7.0, 2.0, 1.0 of 10 = population: everything.
    assert sampling.allocate_proportional({"a": 7, "b": 2, "c": 1}, 10, 0) == {
        "a": 7,
        "b": 2,
        "c": 1,
    }
    # 5 over 7/2/1 → 3.5, 1.0, 0.5: floors 3, 1, 0 and one seat to the largest remainder
    # (tie 0.5 / 0.5 goes to the larger stratum a).
    assert sampling.allocate_proportional({"a": 7, "b": 2, "c": 1}, 5, 0) == {
        "a": 4,
        "b": 1,
        "c": 0,
    }


def test_proportional_total_below_floors_is_refused() -> None:
    with pytest.raises(ValidationFailed) as info:
        sampling.allocate_proportional({"a": 10, "b": 10, "c": 10}, 5, 2)
    assert "spec.total" in _paths(info.value)


def test_judge_uncertainty() -> None:
    u = sampling.judge_uncertainty(
        [
            (1, 10, "pass", None),
            (1, 10, "fail", None),  # two versions disagree → 1
            (2, 10, "pass", 0.5),  # coin flip → 1
            (3, 10, "pass", 0.9),  # fairly sure → 0.2
            (4, 10, "pass", None),
            (4, 11, "pass", 1.0),  # sure → 0
        ]
    )
    assert u == pytest.approx({1: 1.0, 2: 1.0, 3: 0.2, 4: 0.0})


def test_spec_errors_name_the_field() -> None:
    for raw, field in [
        ({"mode": "bogus"}, "spec.mode"),
        ({"mode": "per_stratum", "dimension": "lang"}, "spec.n"),
        ({"mode": "proportional", "dimension": "lang"}, "spec.total"),
        ({"mode": "per_stratum", "n": 2}, "spec.dimension"),
        ({"n": "3"}, "spec.n"),
        ({"surprise": 1}, "spec.surprise"),
        ({"disagreement_weight": -1}, "spec.disagreement_weight"),
    ]:
        with pytest.raises(ValidationFailed) as info:
            sampling.spec_parse(raw, default_seed=1)
        assert field in _paths(info.value), raw


def test_spec_errors_are_all_collected() -> None:
    with pytest.raises(ValidationFailed) as info:
        sampling.spec_parse({"mode": "per_stratum", "n": "3", "seed": -1, "surprise": 1,
                             "include_errors": "yes"}, default_seed=1)
    assert _paths(info.value) == ["spec.surprise", "spec.n", "spec.seed",
                                  "spec.include_errors", "spec.dimension"]
    assert info.value.details["error_count"] == 5
    assert info.value.message == ("The sampling spec did not validate: spec.surprise: unknown "
                                  "field (and 4 more problems)")


# --- plans through the service --------------------------------------------------------------


def _strata_counts(plan: SamplingPlan) -> dict[str, int]:
    return dict(
        Counter(
            QueueEntry.objects.filter(plan=plan, is_gold=False).values_list("stratum", flat=True)
        )
    )


@pytest.mark.django_db
def test_plan_all(world: World, lead: Any) -> None:
    plan = services.sampling_plan_create(
        study=world.study,
        spec={"mode": "all", "dimension": "lang"},
        k=3,
        gold_rate=0,
        created_by=lead,
    )
    assert plan.version == 1 and plan.is_active
    assert _strata_counts(plan) == {"en": 6, "de": 3, "fr": 1}
    assert set(plan.entries.values_list("needed", flat=True)) == {3}
    assert isinstance(plan.summary["seed"], int)
    # A census: every entry is certain.
    assert set(plan.entries.values_list("draw_kind", "inclusion_probability")) == {("census", 1.0)}
    assert {d["design"] for d in plan.summary["designs"].values()} == {"census"}


@pytest.mark.django_db
def test_plan_per_stratum_exact(study: Study, lead: Any) -> None:
    world_build(study=study, strata={"en": 50, "de": 20, "fr": 4})
    plan = services.sampling_plan_create(
        study=study,
        spec={"mode": "per_stratum", "dimension": "lang", "n": 10, "seed": 3},
        k=2,
        gold_rate=0,
        created_by=lead,
    )
    assert _strata_counts(plan) == {"en": 10, "de": 10, "fr": 4}
    assert plan.summary["allocation"] == {"de": 10, "en": 10, "fr": 4}
    assert plan.summary["population"] == {"de": 20, "en": 50, "fr": 4}
    # Every chosen output belongs to the stratum it is filed under, and carries pi = n_h / N_h
    # (simple random sampling inside the stratum; fr is taken whole).
    expected_pi = {"en": 10 / 50, "de": 10 / 20, "fr": 1.0}
    for entry in plan.entries.select_related("output__item"):
        assert entry.output.item.strata["lang"] == entry.stratum
        assert entry.draw_kind == "random"
        assert entry.inclusion_probability == pytest.approx(expected_pi[entry.stratum])
    assert {h: d["design"] for h, d in plan.summary["designs"].items()} == {
        "de": "srswor",
        "en": "srswor",
        "fr": "take_all",
    }


@pytest.mark.django_db
def test_plan_proportional_exact(study: Study, lead: Any) -> None:
    world_build(study=study, strata={"en": 100, "de": 50, "fr": 10})
    plan = services.sampling_plan_create(
        study=study,
        spec={"mode": "proportional", "dimension": "lang", "total": 40, "min_per_stratum": 8},
        k=3,
        gold_rate=0,
        created_by=lead,
    )
    assert _strata_counts(plan) == {"en": 21, "de": 11, "fr": 8}
    assert plan.entries.count() == 40


@pytest.mark.django_db
def test_plan_is_reproducible_from_seed(study: Study, lead: Any) -> None:
    world_build(study=study, strata={"en": 40, "de": 40})
    spec = {"mode": "per_stratum", "dimension": "lang", "n": 5, "seed": 11}
    p1 = services.sampling_plan_create(study=study, spec=spec, k=1, gold_rate=0, created_by=lead)
    chosen1 = set(p1.entries.values_list("output_id", flat=True))
    p2 = services.sampling_plan_create(study=study, spec=spec, k=1, gold_rate=0, created_by=lead)
    assert set(p2.entries.values_list("output_id", flat=True)) == chosen1
    p3 = services.sampling_plan_create(
        study=study, spec={**spec, "seed": 12}, k=1, gold_rate=0, created_by=lead
    )
    assert set(p3.entries.values_list("output_id", flat=True)) != chosen1


@pytest.mark.django_db
def test_gold_rate(study: Study, lead: Any) -> None:
    world = world_build(study=study, strata={"en": 90})
    for output in world.outputs[:20]:
        GoldLabel.objects.create(criterion=world.criteria["correct"], output=output, value="pass")
    plan = services.sampling_plan_create(
        study=study, spec={"mode": "all"}, k=2, gold_rate=0.1, created_by=lead
    )
    # 70 regular outputs (20 of the 90 are gold); gold = round(70 * 0.1 / 0.9) = 8, so gold
    # is 8 / 78 ≈ 10% of the queue.
    assert plan.entries.filter(is_gold=False).count() == 70
    gold_entries = plan.entries.filter(is_gold=True)
    assert gold_entries.count() == 8
    gold_outputs = {o.pk for o in world.outputs[:20]}
    assert set(gold_entries.values_list("output_id", flat=True)) <= gold_outputs
    assert not set(plan.entries.filter(is_gold=False).values_list("output_id", flat=True)) & (
        gold_outputs
    )
    assert plan.summary["gold_entries"] == 8 and plan.summary["gold_available"] == 20
    # Gold is chosen for quality control, not drawn from the frame: no inclusion probability.
    assert set(gold_entries.values_list("draw_kind", "inclusion_probability")) == {("gold", None)}
    assert plan.summary["draw_kinds"] == {"census": 70, "gold": 8}


@pytest.mark.django_db
def test_gold_rate_short_of_gold_warns(study: Study, lead: Any) -> None:
    world = world_build(study=study, strata={"en": 30})
    GoldLabel.objects.create(
        criterion=world.criteria["correct"], output=world.outputs[0], value="fail"
    )
    plan = services.sampling_plan_create(
        study=study, spec={"mode": "all"}, k=2, gold_rate=0.5, created_by=lead
    )
    assert plan.entries.filter(is_gold=True).count() == 1
    assert plan.summary["warnings"]


@pytest.mark.django_db
def test_disagreement_weight_favours_uncertain_outputs(study: Study, lead: Any) -> None:
    world = world_build(study=study, strata={"en": 100})
    judge = Judge.objects.create(study=study, name="j", kind=Judge.Kind.IMPORTED)
    v1 = JudgeVersion.objects.create(judge=judge, version=1, content_hash="a" * 64)
    v2 = JudgeVersion.objects.create(judge=judge, version=2, content_hash="b" * 64)
    crit = world.criteria["correct"]
    contested = {o.pk for o in world.outputs[:20]}
    rows = []
    for o in world.outputs:
        rows.append(Verdict(judge_version=v1, criterion=crit, output=o, value="pass"))
        rows.append(
            Verdict(
                judge_version=v2,
                criterion=crit,
                output=o,
                value="fail" if o.pk in contested else "pass",
            )
        )
    Verdict.objects.bulk_create(rows)
    weighted = services.sampling_plan_create(
        study=study,
        spec={
            "mode": "proportional",
            "dimension": "lang",
            "total": 20,
            "seed": 5,
            "disagreement_weight": 9,
        },
        k=1,
        gold_rate=0,
        created_by=lead,
    )
    picked = set(weighted.entries.values_list("output_id", flat=True))
    weights = dict(weighted.entries.values_list("output_id", "sample_weight"))
    assert all(weights[pk] == 10.0 for pk in picked & contested)
    assert all(weights[pk] == 1.0 for pk in picked - contested)
    # pi-ps of 20 from 20 items of size 10 and 80 of size 1 (sum 280): a contested output is
    # drawn with probability 20 * 10 / 280 = 5/7, any other with 20 / 280 = 1/14, so ~14.3
    # contested picks are expected; a uniform draw would expect 4.
    pis = dict(weighted.entries.values_list("output_id", "inclusion_probability"))
    assert all(pis[pk] == pytest.approx(5 / 7) for pk in picked & contested)
    assert all(pis[pk] == pytest.approx(1 / 14) for pk in picked - contested)
    assert set(weighted.entries.values_list("draw_kind", flat=True)) == {"random"}
    assert weighted.summary["designs"]["en"]["design"] == "pps_systematic"
    assert len(picked & contested) >= 10
    plain = services.sampling_plan_create(
        study=study,
        spec={"mode": "proportional", "dimension": "lang", "total": 20, "seed": 5},
        k=1,
        gold_rate=0,
        created_by=lead,
    )
    assert len(set(plain.entries.values_list("output_id", flat=True)) & contested) < 10


@pytest.mark.django_db
def test_pairwise_plan_samples_comparisons(study: Study, lead: Any) -> None:
    world = world_build(study=study, strata={"en": 6, "de": 2}, n_candidates=2, pairwise=True)
    plan = services.sampling_plan_create(
        study=study,
        spec={"mode": "per_stratum", "dimension": "lang", "n": 3, "subject": "comparison"},
        k=2,
        gold_rate=0,
        created_by=lead,
    )
    assert plan.entries.filter(comparison__isnull=False).count() == 5
    assert plan.entries.filter(output__isnull=False).count() == 0
    assert {c.pk for c in world.comparisons} >= set(
        plan.entries.values_list("comparison_id", flat=True)
    )


@pytest.mark.django_db
def test_plan_errors(world: World, lead: Any, annotators: list[Any]) -> None:
    with pytest.raises(ValidationFailed) as info:
        services.sampling_plan_create(
            study=world.study,
            spec={"mode": "per_stratum", "dimension": "nope", "n": 1},
            k=3,
            gold_rate=0,
            created_by=lead,
        )
    assert "spec.dimension" in _paths(info.value)
    with pytest.raises(ValidationFailed):
        services.sampling_plan_create(study=world.study, spec={}, k=0, gold_rate=0, created_by=lead)
    with pytest.raises(ValidationFailed):
        services.sampling_plan_create(
            study=world.study, spec={}, k=3, gold_rate=1.0, created_by=lead
        )
    with pytest.raises(ValidationFailed) as info:
        services.sampling_plan_create(
            study=world.study, spec={"subject": "comparison"}, k=3, gold_rate=0, created_by=lead
        )
    assert "spec.subject" in _paths(info.value)
    with pytest.raises(Forbidden):
        services.sampling_plan_create(
            study=world.study, spec={}, k=3, gold_rate=0, created_by=annotators[0]
        )


@pytest.mark.django_db
def test_plan_versioning(world: World, lead: Any, annotators: list[Any]) -> None:
    v1 = services.sampling_plan_create(
        study=world.study, spec={"mode": "all"}, k=2, gold_rate=0, created_by=lead
    )
    first, second = annotators[0], annotators[1]
    done = services.assignment_next(study=world.study, annotator=first)
    assert done is not None
    services.annotation_submit(
        assignment=done, annotator=first, submission_id=uuid.uuid4(), labels=passing_labels()
    )
    held = services.assignment_next(study=world.study, annotator=second)
    assert held is not None
    v2 = services.sampling_plan_create(
        study=world.study, spec={"mode": "all"}, k=2, gold_rate=0, created_by=lead
    )
    v1.refresh_from_db()
    assert (v1.version, v2.version) == (1, 2)
    assert not v1.is_active and v1.superseded_at is not None and v2.is_active
    # The superseded plan's live lease ended; submitting it now is refused.
    held.refresh_from_db()
    assert held.status == Assignment.Status.EXPIRED
    with pytest.raises(Conflict) as info:
        services.annotation_submit(
            assignment=held, annotator=second, submission_id=uuid.uuid4(), labels=passing_labels()
        )
    assert info.value.code == "plan_superseded"
    # Earlier annotations count toward k in the new version, and their annotator is never
    # offered that output again.
    carried = QueueEntry.objects.get(plan=v2, output_id=done.entry.output_id)
    assert carried.done_count == 1
    assert Assignment.objects.get(entry=carried, annotator=first).carried_over
    seen = set()
    while (a := services.assignment_next(study=world.study, annotator=first)) is not None:
        assert a.entry.plan_id == v2.pk
        seen.add(a.entry.output_id)
        services.annotation_submit(
            assignment=a, annotator=first, submission_id=uuid.uuid4(), labels=passing_labels()
        )
    assert done.entry.output_id not in seen and len(seen) == 9
    # Annotations name the plan version they were collected under.
    plans = Counter(
        Annotation.objects.filter(annotator=first).values_list("plan__version", flat=True)
    )
    assert plans == {1: 2, 2: 18}
    # Only the active plan is offered.
    a = services.assignment_next(study=world.study, annotator=second)
    assert a is not None and a.entry.plan_id == v2.pk
