"""`POST /api/studies/<slug>/verdicts/bulk` (issue 24 §1): verdicts and confidences of judges
run elsewhere, by judge name and config hash (created on first use with external: true),
idempotent on (judge version, subject, sample), validated in the one error shape, atomic."""

from __future__ import annotations

import json
from typing import Any

import pytest

from judges.models import Judge, JudgeVersion, Verdict
from studies.models import Comparison
from tests.factories import (
    CandidateFactory,
    CriterionFactory,
    ItemFactory,
    OutputFactory,
    RubricVersionFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db
URL = "/api/studies/alpha/verdicts/bulk"
JUDGE = {"name": "ext-judge", "config_hash": "abc123", "external": True}


@pytest.fixture
def data(study: Any) -> dict[str, Any]:
    rubric = RubricVersionFactory(study=study)
    CriterionFactory(rubric=rubric, key="correct", scale="binary", position=0)
    CriterionFactory(rubric=rubric, key="pref", scale="pairwise", position=1)
    x = CandidateFactory(study=study, name="x")
    y = CandidateFactory(study=study, name="y")
    out = {}
    for i in range(3):
        item = ItemFactory(study=study, external_id=f"q{i}")
        out[(f"q{i}", "x")] = OutputFactory(study=study, item=item, candidate=x)
        out[(f"q{i}", "y")] = OutputFactory(study=study, item=item, candidate=y)
    return out


def _post(client: Any, verdicts: list[dict[str, Any]], judge: dict[str, Any] | None = None
          ) -> Any:
    return client.post(URL, {"judge": judge or JUDGE, "verdicts": verdicts}, format="json")


def test_push_creates_external_judge_and_is_idempotent(lead_client: Any, data: Any) -> None:
    rows = [
        {"criterion": "correct", "item": "q0", "candidate": "x", "value": "pass",
         "probability": 0.9},
        {"criterion": "pref", "item": "q1", "candidate_a": "x", "candidate_b": "y",
         "value": "B", "probability": 0.2},
    ]
    r = _post(lead_client, rows)
    assert r.status_code == 201, r.json()
    body = r.json()
    assert body["created"] == 2 and body["judge_version"]["created"] is True
    version = JudgeVersion.objects.get(pk=body["judge_version"]["id"])
    assert version.content_hash == "abc123" and version.config["external"] is True
    assert version.judge.kind == Judge.Kind.IMPORTED
    v = Verdict.objects.get(output=data[("q0", "x")])
    assert v.value == "pass" and v.probability == pytest.approx(0.9)
    pref = Verdict.objects.get(comparison__isnull=False)
    assert pref.value == "B" and pref.probability == pytest.approx(0.2)
    again = _post(lead_client, rows)
    assert again.status_code == 200
    assert again.json()["unchanged"] == 2 and again.json()["created"] == 0
    assert again.json()["judge_version"]["created"] is False
    assert Verdict.objects.count() == 2 and JudgeVersion.objects.count() == 1


def test_samples_accumulate_and_a_resent_sample_replaces(lead_client: Any, data: Any) -> None:
    base = {"criterion": "correct", "item": "q0", "candidate": "x"}
    assert _post(lead_client, [{**base, "value": "pass", "sample": 0},
                               {**base, "value": "fail", "sample": 1}]).status_code == 201
    assert _post(lead_client, [{**base, "value": "pass", "sample": 2}]).status_code == 200
    v = Verdict.objects.get()
    assert v.n_samples == 3 and v.value == "pass"
    assert v.probability == pytest.approx(2 / 3)  # share of pass samples, as live runs do
    # Sample 1 sent again as pass: replaced, not added.
    assert _post(lead_client, [{**base, "value": "pass", "sample": 1}]).status_code == 200
    v.refresh_from_db()
    assert v.n_samples == 3 and v.probability == pytest.approx(1.0)


def test_pair_stored_the_other_way_round_turns_value_and_probability(
    lead_client: Any, data: Any, study: Any
) -> None:
    Comparison.objects.create(study=study, item=data[("q2", "y")].item,
                              output_a=data[("q2", "y")], output_b=data[("q2", "x")])
    r = _post(lead_client, [{"criterion": "pref", "item": "q2", "candidate_a": "x",
                             "candidate_b": "y", "value": "A", "probability": 0.7}])
    assert r.status_code == 201, r.json()
    v = Verdict.objects.get()
    assert v.comparison.output_a_id == data[("q2", "y")].pk  # type: ignore[union-attr]
    assert v.value == "B" and v.probability == pytest.approx(0.3)


def test_invalid_rows_named_and_nothing_written(lead_client: Any, data: Any) -> None:
    rows = [
        {"criterion": "correct", "item": "q0", "candidate": "x", "value": "pass"},
        {"criterion": "pref", "item": "q1", "candidate_a": "x", "candidate_b": "y",
         "value": "A", "probability": 0.2},
        {"criterion": "correct", "item": "q0", "candidate": "x", "value": "pass",
         "probability": 1.5, "sample": 1},
        {"criterion": "nope", "item": "q0", "candidate": "x", "value": "pass"},
        {"criterion": "correct", "item": "q9", "candidate": "x", "value": "pass"},
        {"criterion": "correct", "item": "q0", "candidate": "z", "value": "pass", "sample": 3},
        {"criterion": "correct", "item": "q0", "candidate": "x", "value": "maybe", "sample": 4},
        {"criterion": "correct", "item": "q0", "candidate": "x", "value": "pass"},
    ]
    r = _post(lead_client, rows)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "validation_failed"
    paths = {e["path"] for e in err["details"]["errors"]}
    assert paths == {"verdicts[1].probability", "verdicts[2].probability",
                     "verdicts[3].criterion", "verdicts[4].item", "verdicts[5].candidate",
                     "verdicts[6].value", "verdicts[7].sample"}
    assert not Verdict.objects.exists() and not Judge.objects.exists()


def test_unknown_version_without_external_is_refused(lead_client: Any, data: Any) -> None:
    r = _post(lead_client, [{"criterion": "correct", "item": "q0", "candidate": "x",
                             "value": "pass"}], judge={"name": "ext-judge", "config_hash": "zz"})
    assert r.status_code == 400
    assert r.json()["error"]["details"]["errors"][0]["path"] == "judge.config_hash"


def test_viewer_cannot_push(client_for: Any, study: Any, data: Any) -> None:
    from studies.models import Membership
    from tests.factories import MembershipFactory

    viewer = UserFactory(username="viewer")
    MembershipFactory(study=study, user=viewer, role=Membership.Role.VIEWER)
    r = _post(client_for(viewer), [{"criterion": "correct", "item": "q0", "candidate": "x",
                                    "value": "pass"}])
    assert r.status_code == 403


def test_listed_in_the_openapi_schema(lead_client: Any, study: Any) -> None:
    paths = json.loads(lead_client.get("/api/schema/", {"format": "json"}).content)["paths"]
    op = paths["/api/studies/{slug}/verdicts/bulk"]["post"]
    assert "requestBody" in op and "400" in op["responses"]
