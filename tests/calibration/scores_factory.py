"""Calibrated-score rows and calibration snapshots for the API, escalation and page tests.

The rows are written directly (the calibration report writes them in production), so these
tests exercise what clients and leads see of any snapshot without computing one.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from calibration.models import CalibratedScore
from judges.models import Judge, JudgeVersion
from judges.services import judge_create, judge_version_for_config
from snapshots.models import ReportSnapshot
from studies.models import Candidate, Criterion, Output, Study
from tests.factories import CandidateFactory, CriterionFactory, OutputFactory, RubricVersionFactory

T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)


@dataclass
class World:
    study: Study
    criteria: list[Criterion]
    candidates: list[Candidate]
    outputs: list[Output]
    judges: list[JudgeVersion]
    snapshots: list[int] = field(default_factory=list)


def world_make(study: Study, *, n_outputs: int = 6) -> World:
    """A rubric of two binary criteria, two candidates, outputs in two languages, two judges."""
    rubric = RubricVersionFactory(study=study, version=1)
    criteria = [CriterionFactory(rubric=rubric, key=k, name=k.title(), position=i)
                for i, k in enumerate(("correct", "safe"))]
    candidates = [CandidateFactory(study=study, name=n) for n in ("m-small", "m-large")]
    outputs = []
    for i in range(n_outputs):
        out = OutputFactory(candidate=candidates[i % 2], study=study,
                            item__study=study, item__external_id=f"q{i}",
                            item__strata={"language": "de" if i % 3 == 0 else "en"})
        outputs.append(out)
    judges = []
    for name in ("len-a", "len-b"):
        judge = judge_create(study=study, name=name, kind=Judge.Kind.PROGRAMMATIC)
        judges.append(judge_version_for_config(judge=judge, config={"check": "length",
                                                                    "max": 1000}))
    return World(study=study, criteria=criteria, candidates=candidates, outputs=outputs,
                 judges=judges)


def snapshot_make(world: World, *, result: dict[str, Any] | None = None,
                  rows: bool = True, decisions: tuple[str, ...] = ("pass", "fail", "escalate"),
                  ) -> ReportSnapshot:
    """A done calibration snapshot with one row per output x criterion x judge (and a rubric
    row per output), decisions cycling through `decisions`, p_pass spread over (0, 1)."""
    snap = ReportSnapshot.objects.create(
        study=world.study, kind="calibration", status=ReportSnapshot.Status.DONE,
        params={"min_labels": 10}, result=result or {"version": 1, "kind": "calibration",
                                                     "cells": []},
        result_version=1,
    )
    world.snapshots.append(snap.pk)
    if rows:
        scores = []
        i = 0
        for out in world.outputs:
            lang = out.item.strata.get("language", "")
            for crit in [*world.criteria, None]:
                for jv in world.judges if crit is not None else [None]:
                    decision = decisions[i % len(decisions)]
                    p = round(0.05 + 0.9 * ((i * 37) % 100) / 100, 4)
                    scores.append(CalibratedScore(
                        study=world.study, snapshot_id=snap.pk, output=out,
                        candidate=out.candidate, criterion=crit,
                        criterion_key=crit.key if crit is not None else "rubric",
                        judge_version=jv,
                        judge_version_hash=jv.content_hash if jv is not None else "",
                        stratum=f"language={lang}", strata=dict(out.item.strata),
                        raw_value="pass" if p > 0.5 else "fail", raw_confidence=p,
                        p_pass=p, p_low=max(0.0, p - 0.1), p_high=min(1.0, p + 0.1),
                        decision=decision, expected_cost=round(1.0 + i / 7, 3),
                        source="judge" if decision != "human" else "human",
                        plan_version=1, n_labels=12 + (i % 5),
                        evidence_at=T0 + dt.timedelta(hours=i),
                    ))
                    i += 1
        CalibratedScore.objects.bulk_create(scores)
    return snap
