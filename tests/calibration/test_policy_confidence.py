"""The guaranteed-agreement policy of a calibration snapshot with the plan settings of issue 24
§2: it thresholds the judge's own confidence by default (serving the judge's own decision),
on the plan's grid with its minimum count; a cascade is named by judge and version, and a
stage whose judge has no verdicts yet is left out with a warning.

The synthetic study of tests/calibration/test_compute.py (simulated judge: P(pass) q, humans
pass with probability q**2)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from evalstats.selective import threshold_grid, trust_threshold
from judges.models import Judge, JudgeVersion, Verdict
from tests.calibration.test_compute import PLAN, _compute_with_plan, _rows, build_study

pytestmark = pytest.mark.django_db
ALPHA, DELTA = 0.15, 0.1


@pytest.fixture
def built(db: Any) -> dict[str, Any]:
    return build_study()


def test_default_policy_thresholds_the_judges_own_confidence(built: dict[str, Any]) -> None:
    spec = {**PLAN, "policy": {"kind": "guaranteed_agreement", "alpha": ALPHA, "delta": DELTA}}
    res = _compute_with_plan(built["study"], spec)
    assert res.policy["score"] == "confidence" and res.policy["min_count"] == 50
    whole = next(c for c in res.cells if c.stratum == "")
    trust = whole.trust
    assert trust is not None and trust["score"] == "confidence"
    # Independently: the human-labelled (non-escalated) rows, the judge's confidence in its
    # own decision max(q, 1 - q), agreement of its decision with the human.
    q, drawn, hp = built["q"], built["drawn"], built["human_pass"]
    conf = np.maximum(q[drawn], 1 - q[drawn])
    agree = ((q[drawn] >= 0.5) == hp[drawn]).astype(float)
    expected = trust_threshold(conf, agree, alpha=ALPHA, delta=DELTA, min_count=50,
                               thresholds=threshold_grid(0.001))
    assert trust["threshold"] == expected.threshold and trust["n"] == expected.n
    assert trust["threshold"] is not None
    rows = _rows(res)
    qs = dict(zip([o.pk for o in built["outputs"]], q, strict=True))
    n_trusted = 0
    for pk, row in rows.items():
        if row["source"] != "judge":
            continue
        c = max(qs[pk], 1 - qs[pk])
        if c >= trust["threshold"]:
            n_trusted += 1
            # The judge's own decision is served, whatever the calibrated P(pass) says.
            assert row["decision"] == ("pass" if qs[pk] >= 0.5 else "fail")
        else:
            assert row["decision"] == "escalate"
    assert n_trusted > 0


def test_cascade_named_by_judge_and_version(built: dict[str, Any]) -> None:
    rng = np.random.default_rng(9)
    judge = Judge.objects.create(study=built["study"], name="cheap", kind="imported")
    cheap = JudgeVersion.objects.create(judge=judge, version=1, content_hash="c" * 16,
                                        config={"imported": True, "label": "v-cheap"})
    noisy = np.clip(built["q"] + rng.normal(0, 0.25, built["q"].size), 0.01, 0.99)
    Verdict.objects.bulk_create([
        Verdict(judge_version=cheap, criterion=built["correct"], output=o,
                value="pass" if v >= 0.5 else "fail", value_num=float(v >= 0.5),
                probability=float(v))
        for o, v in zip(built["outputs"], noisy, strict=True)
    ])
    spec = {**PLAN, "policy": {
        "kind": "guaranteed_agreement", "alpha": ALPHA, "delta": DELTA, "min_count": 30,
        "cascade": [{"judge": "cheap", "version": "v-cheap"}, {"judge": "gpt", "version": 1},
                    {"judge": "not-yet-imported", "version": 1}],
    }}
    res = _compute_with_plan(built["study"], spec)
    cascade = res.cascades["correct"]
    assert cascade["judge_versions"] == [{"judge": "cheap", "version": 1},
                                         {"judge": "gpt", "version": 1}]
    assert any("not-yet-imported" in w for w in res.warnings)
    assert len(cascade["stages"]) == 2 and len(cascade["shares"]) == 2
    assert sum(cascade["shares"]) == pytest.approx(cascade["coverage"])
    lo, hi = cascade["agreement_interval"]
    assert lo <= cascade["agreement"] <= hi
    rows = [r for r in _rows(res).values() if r["source"] == "judge"]
    decided = [r for r in rows if r["decision"] != "escalate"]
    assert decided and {r["judge_version_id"] for r in decided} <= {cheap.pk, built["jv"].pk}


def test_policy_as_an_exploratory_report_parameter(built: dict[str, Any]) -> None:
    """The policy tried as a report parameter is reported, marked exploratory, and changes
    none of the served decisions (those follow the plan's policy, here cost-optimal)."""
    from calibration.params import params_validate
    from reviewhub.errors import ValidationFailed

    trial = {"kind": "guaranteed_agreement", "alpha": ALPHA, "delta": DELTA}
    plain = _compute_with_plan(built["study"], PLAN)
    tried = _compute_with_plan(built["study"], PLAN, policy=trial)
    assert plain.policy_trial is None
    assert tried.policy_trial is not None and tried.policy_trial["exploratory"] is True
    assert tried.policy["kind"] == "cost_optimal"
    trust = tried.policy_trial["judges"]["correct"]["gpt v1"]
    q, drawn, hp = built["q"], built["drawn"], built["human_pass"]
    expected = trust_threshold(np.maximum(q[drawn], 1 - q[drawn]),
                               ((q[drawn] >= 0.5) == hp[drawn]).astype(float), alpha=ALPHA,
                               delta=DELTA, min_count=50, thresholds=threshold_grid(0.001))
    assert trust["threshold"] == expected.threshold and trust["score"] == "confidence"
    assert [r["decision"] for r in plain.scores] == [r["decision"] for r in tried.scores]
    assert tried.to_json()["policy_trial"]["exploratory"] is True
    with pytest.raises(ValidationFailed) as exc:
        params_validate({"policy": {"kind": "guaranteed_agreement", "alpha": 2}})
    assert exc.value.details["errors"][0]["path"] == "params.policy.alpha"
