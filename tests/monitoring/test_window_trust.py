"""A window against the selection-time evidence: the calibrated pass rate through the snapshot's
curve, judge trust (Wilson interval as statsmodels computes it) against the agreement report's
figure and ceiling, calibration drift (ECE and the calibration-in-the-large z-test computed
here from their definitions), the mix against the selection sample and the finish reasons
(scipy), and the page's words."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pytest
from django.test import Client
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from judges.models import Judge, JudgeVersion
from monitoring.models import Deployment, TrafficRow
from monitoring.services import traffic_ingest, traffic_labels_record, window_compute
from monitoring.window.params import WindowParams
from monitoring.window.results import WindowResult
from snapshots.models import ReportSnapshot
from studies.models import Criterion, Item, Study

pytestmark = pytest.mark.django_db

START = dt.datetime(2026, 12, 7, 10, tzinfo=dt.UTC)
HOUR = WindowParams("hour", START)
CURVE = {"x": [0.0, 1.0], "y": [0.3, 0.9]}


def _snapshots(study: Study, version: JudgeVersion, deployment: Deployment, *,
               selection_agreement: float) -> None:
    criterion = Criterion.objects.get(rubric__study=study, key="ok")
    cal = ReportSnapshot.objects.create(
        study=study, kind="calibration", status="done", result={"cells": [{
            "judge_version": version.pk, "criterion": "ok", "stratum": "", "curve": CURVE,
            "diagnostics": {"before": None, "after": {"ece": {"value": 0.04},
                                                      "brier": 0.15}}}]})
    Deployment.objects.filter(pk=deployment.pk).update(calibration_snapshot_id=cal.pk)
    cells = [{"judge_version": version.pk, "criterion": criterion.pk, "dimension": d,
              "label": lab, "metrics": {"accuracy": {"value": selection_agreement,
                                                     "ci_low": selection_agreement - 0.05,
                                                     "ci_high": selection_agreement + 0.05}},
              "ceiling": {"pooled_agreement": {"value": 0.93}}}
             for d, lab in (("", ""), ("lang", "de"), ("lang", "en"))]
    ReportSnapshot.objects.create(study=study, kind="agreement", status="done",
                                  result={"cells": cells})


@pytest.fixture
def judged(deployment: Deployment, shipped_study: Study) -> tuple[Deployment, JudgeVersion]:
    judge = Judge.objects.create(study=shipped_study, name="j", kind=Judge.Kind.LLM)
    version = JudgeVersion.objects.create(judge=judge, version=1, content_hash="h",
                                          config={})
    deployment.judge_versions.set([version])
    return deployment, version


def _traffic(deployment: Deployment, *, agree_de: float, seed: int = 5) -> None:
    rng = np.random.default_rng(seed)
    rows = [{"request_id": f"r{i}", "input": f"q{i}", "output": "answer",
             "metadata": {"language": "de" if i % 2 else "en"},
             "finish_reason": "length" if i % 10 == 0 else "stop",
             "occurred_at": (START + dt.timedelta(seconds=i)).isoformat()} for i in range(800)]
    traffic_ingest(deployment=deployment, rows=rows)
    labels = []
    for r in TrafficRow.objects.filter(deployment=deployment, to_judge=True):
        truth = bool(rng.random() < 0.8)
        agree = rng.random() < (agree_de if r.stratum == "de" else 0.95)
        labels.append({"request_id": r.request_id, "source": "judge", "rater": "j",
                       "value": float(truth if agree else not truth)})
        if r.to_human:
            labels.append({"request_id": r.request_id, "source": "human", "rater": "a",
                           "value": float(truth)})
    traffic_labels_record(deployment=deployment, labels=labels)


def _pairs(deployment: Deployment, stratum: str | None) -> tuple[np.ndarray, np.ndarray]:
    f, y = [], []
    rows = TrafficRow.objects.filter(deployment=deployment, to_human=True)
    if stratum:
        rows = rows.filter(stratum=stratum)
    for r in rows.prefetch_related("labels"):
        by = {lab.source: lab.value for lab in r.labels.all()}
        f.append(by["judge"])
        y.append(by["human"])
    return np.array(f), np.array(y)


def test_judge_trust_calibrated_rate_and_drift(judged: Any, shipped_study: Study) -> None:
    deployment, version = judged
    _snapshots(shipped_study, version, deployment, selection_agreement=0.9)
    deployment.refresh_from_db()
    _traffic(deployment, agree_de=0.5)
    result = WindowResult.from_json(window_compute(deployment=deployment, params=HOUR).result)
    cells = {s.stratum: s for s in result.strata}
    for label, cell in cells.items():
        f, y = _pairs(deployment, label)
        k = int(((f >= 0.5) == (y >= 0.5)).sum())
        lo, hi = proportion_confint(k, f.size, alpha=0.05, method="wilson")
        trust = cell.judge_trust
        assert trust is not None and trust["n"] == f.size and trust["agree"] == k
        assert trust["agreement"]["ci_low"] == pytest.approx(lo)
        assert trust["agreement"]["ci_high"] == pytest.approx(hi)
        assert trust["selection"]["value"] == 0.9 and trust["ceiling"] == 0.93
        # The selection-time interval's lower end is 0.85.
        assert trust["state"] == ("no_longer" if hi < 0.85 else "agrees")
    assert cells["de"].judge_trust["state"] == "no_longer"
    assert cells["en"].judge_trust["state"] == "agrees"
    # Calibrated: each judged row's verdict through the curve (0 -> 0.3, 1 -> 0.9).
    judged_rows = TrafficRow.objects.filter(deployment=deployment, to_judge=True,
                                            stratum="en")
    values = np.array([r.labels.get(source="judge").value for r in judged_rows])
    assert cells["en"].pass_calibrated["value"] == pytest.approx(
        np.interp(values, CURVE["x"], CURVE["y"]).mean())
    # Calibration drift on all random draws, from the definitions.
    f, y = _pairs(deployment, None)
    p = np.interp(f, CURVE["x"], CURVE["y"])
    drift = result.calibration_drift
    assert drift is not None and drift["n"] == f.size
    ece = sum((np.minimum((p * 10).astype(int), 9) == b).mean()
              * abs(y[np.minimum((p * 10).astype(int), 9) == b].mean()
                    - p[np.minimum((p * 10).astype(int), 9) == b].mean())
              for b in np.unique(np.minimum((p * 10).astype(int), 9)))
    assert drift["ece"] == pytest.approx(ece)
    assert drift["brier"] == pytest.approx(((p - y) ** 2).mean())
    z = (y.sum() - p.sum()) / np.sqrt((p * (1 - p)).sum())
    assert drift["p_value"] == pytest.approx(2 * stats.norm.sf(abs(z)))
    assert drift["snapshot_ece"] == 0.04 and drift["snapshot_brier"] == 0.15


def test_mix_against_the_selection_sample_and_finish_reasons(
        judged: Any, shipped_study: Study) -> None:
    deployment, _ = judged
    for item in Item.objects.filter(study=shipped_study):  # the factory assigns no strata
        Item.objects.filter(pk=item.pk).update(strata={"lang": item.metadata["language"]})
    _traffic(deployment, agree_de=0.95)
    result = WindowResult.from_json(window_compute(deployment=deployment, params=HOUR).result)
    assert result.mix is not None
    items = [s.get("lang") for s in Item.objects.filter(study=shipped_study)
             .values_list("strata", flat=True)]
    n_de, n_en = items.count("de"), items.count("en")
    mix = {r.label: r for r in result.mix.rows}
    assert mix["de"].selection_share == pytest.approx(n_de / len(items))
    observed = [mix["de"].n, mix["en"].n]
    expected = np.array([n_de, n_en]) / (n_de + n_en) * sum(observed)
    assert result.mix.selection_chi2_p == pytest.approx(
        stats.chisquare(observed, expected).pvalue)
    # Finish reasons: 10 % "length" in the window; the selection outputs reported none.
    assert result.overall.finish_reasons == {"length": 80, "stop": 720}
    signals = {s.signal for s in result.signals}
    assert not any(s.startswith("finish_reason") for s in signals)  # reference has one reason


def test_the_page_says_whether_the_judge_still_agrees(judged: Any, shipped_study: Study,
                                                      lead: Any) -> None:
    deployment, version = judged
    _snapshots(shipped_study, version, deployment, selection_agreement=0.9)
    deployment.refresh_from_db()
    _traffic(deployment, agree_de=0.5)
    window_compute(deployment=deployment, params=HOUR)
    client = Client()
    client.force_login(lead)
    html = client.get(f"/studies/{shipped_study.slug}/deployments/{deployment.pk}/"
                      ).content.decode()
    assert "lang = de" in html and "the judge no longer agrees with humans there" in html
    assert "the judge still agrees with humans there" in html  # en
    assert "90 % at selection" in html and "humans agree with each other on 93 %" in html


def test_a_version_1_window_still_reads(judged: Any) -> None:
    deployment, _ = judged
    _traffic(deployment, agree_de=0.95)
    stored = window_compute(deployment=deployment, params=HOUR).result
    new_cell_keys = {"pass_calibrated", "n_agree_pairs", "n_agree", "judge_trust", "n_schema",
                     "n_schema_valid", "n_latency", "n_slow", "n_cost", "cost_clipped_sum",
                     "finish_reasons"}

    def old(cell: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in cell.items() if k not in new_cell_keys}

    v1 = {**{k: v for k, v in stored.items() if k != "calibration_drift"}, "version": 1,
          "overall": old(stored["overall"]), "strata": [old(s) for s in stored["strata"]],
          "mix": {k: v for k, v in stored["mix"].items()
                  if k not in ("selection_chi2_p", "unseen_in_selection")}}
    v1["mix"]["rows"] = [{k: v for k, v in r.items() if k != "selection_share"}
                         for r in v1["mix"]["rows"]]
    result = WindowResult.from_json(v1)
    assert result.version == 1 and result.overall.judge_trust is None
    assert result.overall.n_slow == 0 and result.calibration_drift is None
    with pytest.raises(ValueError):
        WindowResult.from_json({**stored, "version": 99})
