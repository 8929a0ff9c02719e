"""The home page's decision per study: read in one query for every listed study, and the same
summary the overview reads study by study (the latest finished selection snapshot)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from reports.selectors import study_decision_summaries, study_decision_summary
from snapshots.models import ReportSnapshot
from tests.factories import StudyFactory


def _selection(study: Any, verdict: str, *, minutes_ago: int,
               status: str = ReportSnapshot.Status.DONE) -> ReportSnapshot:
    return ReportSnapshot.objects.create(
        study=study, kind=ReportSnapshot.Kind.SELECTION, status=status,
        computed_at=timezone.now() - timedelta(minutes=minutes_ago),
        result={"version": 2, "kind": "selection", "plan_version": 1, "exploratory": False,
                "margin": 0.02, "primary_metric": "rubric_pass_rate", "judge": None,
                "decision": {"verdict": verdict, "candidate": "B", "headline": verdict}})


@pytest.mark.django_db
def test_every_listed_study_in_one_query_and_as_the_overview_reads_it(
        django_assert_num_queries: Any) -> None:
    studies = [StudyFactory() for _ in range(4)]
    _selection(studies[0], "too_close", minutes_ago=30)
    _selection(studies[0], "ship", minutes_ago=5)  # the latest finished one counts
    _selection(studies[1], "not_enough_evidence", minutes_ago=10)
    _selection(studies[1], "ship", minutes_ago=1, status=ReportSnapshot.Status.FAILED)
    _selection(studies[2], "leads_unproven", minutes_ago=3)
    # studies[3]: no selection snapshot

    with django_assert_num_queries(1):
        batch = study_decision_summaries(studies=studies)
    assert set(batch) == {studies[0].pk, studies[1].pk, studies[2].pk}
    assert [batch[s.pk]["state"] for s in studies[:3]] == [
        "ship", "not_enough_evidence", "leads_unproven"]
    for study in studies:
        assert batch.get(study.pk) == study_decision_summary(study=study)
