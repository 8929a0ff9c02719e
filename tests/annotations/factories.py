"""Small builders for annotation tests: a study with a rubric, strata and outputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from studies.models import (
    Candidate,
    Comparison,
    Criterion,
    Item,
    Membership,
    Output,
    RubricVersion,
    StratumDimension,
    Study,
)
from tests.factories import MembershipFactory, UserFactory

SECRET_CANDIDATES = ("zq-secret-model-alpha", "zq-secret-model-beta")
SECRET_PROVIDERS = ("acmeprov-hidden", "otherprov-hidden")


@dataclass
class World:
    study: Study
    rubric: RubricVersion
    criteria: dict[str, Criterion]
    candidates: list[Candidate]
    items: list[Item]
    outputs: list[Output]
    comparisons: list[Comparison] = field(default_factory=list)


def rubric_build(
    study: Study, *, pairwise: bool = False
) -> tuple[RubricVersion, dict[str, Criterion]]:
    rubric = RubricVersion.objects.create(study=study, version=1)
    criteria = {
        "correct": Criterion.objects.create(
            rubric=rubric,
            key="correct",
            name="Correct",
            guidance="Is it right?",
            scale=Criterion.Scale.BINARY,
            position=0,
        ),
        "helpful": Criterion.objects.create(
            rubric=rubric,
            key="helpful",
            name="Helpful",
            guidance="How helpful?",
            scale=Criterion.Scale.ORDINAL,
            position=1,
            pass_threshold=3,
            points=[{"value": v, "label": f"point {v}"} for v in range(1, 6)],
        ),
    }
    if pairwise:
        criteria["better"] = Criterion.objects.create(
            rubric=rubric,
            key="better",
            name="Better",
            guidance="Which is better?",
            scale=Criterion.Scale.PAIRWISE,
            position=2,
        )
    return rubric, criteria


def world_build(
    *,
    study: Study,
    strata: dict[str, int],
    n_candidates: int = 1,
    pairwise: bool = False,
    dimension: str = "lang",
) -> World:
    """Items per stratum label of `dimension` (sizes given), each answered by every candidate."""
    rubric, criteria = rubric_build(study, pairwise=pairwise)
    StratumDimension.objects.create(
        study=study,
        key=dimension,
        kind=StratumDimension.Kind.CATEGORICAL,
        source=f"metadata.{dimension}",
    )
    candidates = [
        Candidate.objects.create(
            study=study,
            name=SECRET_CANDIDATES[i],
            provider=SECRET_PROVIDERS[i],
            model_id=f"{SECRET_CANDIDATES[i]}-v1",
        )
        for i in range(n_candidates)
    ]
    items = Item.objects.bulk_create(
        [
            Item(
                study=study,
                external_id=f"{label}-{j}",
                input=f"Question {label} {j}?",
                metadata={dimension: label},
                strata={dimension: label},
                reference=f"REFERENCE-{label}-{j}",
            )
            for label, size in strata.items()
            for j in range(size)
        ]
    )
    outputs = Output.objects.bulk_create(
        [
            Output(study=study, candidate=c, item=it, text=f"Answer to {it.external_id} by #{ci}")
            for it in items
            for ci, c in enumerate(candidates)
        ]
    )
    outputs = list(Output.objects.filter(study=study).order_by("id"))
    comparisons: list[Comparison] = []
    if pairwise and n_candidates >= 2:
        by_item: dict[int, list[Output]] = {}
        for o in outputs:
            by_item.setdefault(o.item_id, []).append(o)
        comparisons = Comparison.objects.bulk_create(
            [
                Comparison(study=study, item_id=item_id, output_a=pair[0], output_b=pair[1])
                for item_id, pair in by_item.items()
            ]
        )
        comparisons = list(Comparison.objects.filter(study=study).order_by("id"))
    return World(study, rubric, criteria, candidates, items, outputs, comparisons)


def annotators_make(study: Study, n: int, *, prefix: str = "ann") -> list[Any]:
    users = [UserFactory(username=f"{prefix}{i}") for i in range(n)]
    Membership.objects.bulk_create(
        [Membership(study=study, user=u, role=Membership.Role.ANNOTATOR) for u in users]
    )
    return users


def passing_labels() -> dict[str, Any]:
    return {"correct": {"value": "pass"}, "helpful": {"value": "4"}}


def failing_labels(severity: int = 3, note: str = "") -> dict[str, Any]:
    return {
        "correct": {"value": "fail", "severity": severity, "severity_note": note},
        "helpful": {"value": "2", "severity": severity},
    }


__all__ = ["MembershipFactory", "World", "annotators_make", "world_build"]
