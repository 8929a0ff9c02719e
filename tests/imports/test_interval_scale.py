"""Issue 15, section 5: continuous human scores (a mean over raters, 2.2 on 1-5) import under an
interval criterion, stated (`--scale quality=interval:1-5`) or already in the rubric, and the
agreement report reads them at the interval level.

Every import goes through `import_ratings` and every figure is read back through
`report agreement`, then checked against an independent library on the same arrays: the
`krippendorff` package (interval alpha), scipy.stats (Pearson, Spearman, Kendall tau-b) and
scikit-learn (Cohen's kappa of the pass/fail reading).
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import krippendorff
import numpy as np
import pytest
from django.core.management import call_command
from scipy import stats
from sklearn.metrics import cohen_kappa_score

from annotations.models import Annotation
from imports.generic import scale_parse
from judges.models import Verdict
from reviewhub.errors import ValidationFailed
from studies.criteria import criterion_is_pass, criterion_value_num
from studies.models import Criterion, Item, Study
from studies.services import plan_create, rubric_update
from studies.spec import criteria_validate
from tests.imports.cli import agreement_report, import_error, run_import

pytestmark = pytest.mark.django_db

# The example: human scores that are means over several raters on a 1-5 scale, and a
# judge scoring the same outputs.
MEANS = [2.2, 3, 4.6667, 1.5, 3.3333, 4, 2.75, 5]
JUDGE = [2, 3.5, 4.5, 1, 3, 4.5, 2, 4.8]


def _import(path: Path, *args: str) -> tuple[dict[str, Any], str]:
    summary, notes, _ = run_import(path, *args)
    return summary, notes


def _csv(path: Path, rows: list[dict[str, Any]]) -> Path:
    header: list[str] = []
    for r in rows:
        header += [k for k in r if k not in header]
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=header)
        w.writeheader()
        w.writerows(rows)
    return path


def _rows(raters: dict[str, list[float | None]], kind: str = "human") -> list[dict[str, Any]]:
    return [
        {"item_id": f"q{i}", "output_id": f"q{i}-x", "rater_id": rater, "rater_kind": kind,
         "criterion": "quality", "value": v}
        for rater, values in raters.items()
        for i, v in enumerate(values)
        if v is not None
    ]




def _overall(result: dict[str, Any], table: str = "cells") -> dict[str, Any]:
    rows = [r for r in result[table] if r["dimension"] == ""]
    assert len(rows) == 1
    return rows[0]


def _value(metric: dict[str, Any]) -> float:
    assert metric["value"] is not None
    return float(metric["value"])


# --- the path: stated on the command line, then the report ---------------------------


def test_means_over_raters_import_under_a_stated_interval_scale_and_report_at_interval_level(
    lead: Any, tmp_path: Path
) -> None:
    path = _csv(tmp_path / "means.csv", _rows({"mean": MEANS}) + _rows({"j": JUDGE}, "judge"))
    summary, notes = _import(
        path, "--study", "means", "--owner", lead.username, "--scale", "quality=interval:1-5"
    )
    assert summary["criteria"]["quality"] == {
        "scale": "interval 1..5", "how": "stated (--scale)", "rubric": "v1"}
    assert "criterion 'quality' created in rubric v1 as interval 1..5" in notes
    quality = Criterion.objects.get(rubric__study__slug="means", key="quality")
    assert (quality.scale, quality.min, quality.max, quality.pass_threshold) == (
        "interval", 1.0, 5.0, None)
    # Stored as the number (value_num) and its shortest text: never a label per distinct text.
    stored = dict(Annotation.objects.filter(criterion=quality).values_list("value", "value_num"))
    assert stored == {"2.2": 2.2, "3": 3.0, "4.6667": 4.6667, "1.5": 1.5, "3.3333": 3.3333,
                      "4": 4.0, "2.75": 2.75, "5": 5.0}
    assert sorted(Verdict.objects.filter(criterion=quality).values_list("value_num", flat=True)
                  ) == sorted(float(v) for v in JUDGE)

    result = agreement_report("means", tmp_path)
    [crit] = result["criteria"]
    assert (crit["scale"], crit["bounds"], crit["values"]) == ("interval", [1.0, 5.0], [])
    assert "pass_threshold" not in crit
    cell = _overall(result)
    m = cell["metrics"]
    j, h = np.array(JUDGE, dtype=float), np.array(MEANS, dtype=float)
    assert cell["primary_metric"] == "alpha_interval"
    assert _value(m["alpha_interval"]) == pytest.approx(
        krippendorff.alpha(reliability_data=np.vstack([j, h]), level_of_measurement="interval"))
    assert _value(m["pearson"]) == pytest.approx(stats.pearsonr(j, h)[0])
    assert _value(m["spearman"]) == pytest.approx(stats.spearmanr(j, h)[0])
    assert _value(m["kendall"]) == pytest.approx(stats.kendalltau(j, h)[0])  # tau-b
    assert _value(m["mae"]) == pytest.approx(float(np.mean(np.abs(j - h))))
    assert _value(m["signed_bias"]) == pytest.approx(float(np.mean(j - h)))
    # No pass_threshold: no pass/fail figures, and the report says why rather than guessing a cut.
    assert not {"accuracy", "kappa", "pass_accuracy", "pass_kappa"} & set(m)
    assert not result["confusion"]
    assert any("quality" in w and "pass_threshold" in w and "left out" in w
               for w in result["warnings"])
    # One human score per output: no human-human ceiling.
    assert cell["ceiling"]["level"] == "interval" and cell["ceiling"]["point"] is None
    # The dataset level of the correlation table is the cell's own coefficients.
    levels = _overall(result, "correlation_levels")
    for method in ("pearson", "spearman", "kendall"):
        assert levels["dataset"][method]["value"] == pytest.approx(m[method]["value"])


def test_several_raters_consensus_is_their_mean_and_the_ceiling_interval_alpha(
    lead: Any, tmp_path: Path
) -> None:
    raters: dict[str, list[float | None]] = {
        "r1": [2, 3.5, 4, 1, 5, 2.5, 3, 4.25],
        "r2": [2.5, 3, 4.5, 1.5, 4.5, None, 3.5, 4],
        "r3": [None, 3, 5, 2, 4, 3, 2.5, 4.75],
    }
    judge = [2, 3.2, 4.4, 1.2, 4.6, 2.9, 3.4, 3.9]
    path = _csv(tmp_path / "raters.csv", _rows(raters) + _rows({"j": judge}, "judge"))
    _import(path, "--study", "raters", "--owner", lead.username,
            "--scale", "quality=interval:1-5")
    result = agreement_report("raters", tmp_path)
    matrix = np.array([[np.nan if v is None else v for v in vs] for vs in raters.values()])
    mean = np.nanmean(matrix, axis=0)  # 2.25, 3.1667, ...: the mean, not rounded to a point
    j = np.array(judge)
    cell = _overall(result)
    m = cell["metrics"]
    assert _value(m["alpha_interval"]) == pytest.approx(
        krippendorff.alpha(reliability_data=np.vstack([j, mean]), level_of_measurement="interval"))
    assert _value(m["pearson"]) == pytest.approx(stats.pearsonr(j, mean)[0])
    assert _value(m["spearman"]) == pytest.approx(stats.spearmanr(j, mean)[0])
    assert _value(m["kendall"]) == pytest.approx(stats.kendalltau(j, mean)[0])
    assert _value(m["mae"]) == pytest.approx(float(np.mean(np.abs(j - mean))))
    ceiling = _overall(result, "ceiling")
    assert ceiling["level"] == "interval" and ceiling["point_metric"] == "krippendorff alpha"
    assert ceiling["pairwise_kappa"] is None
    human_alpha = krippendorff.alpha(reliability_data=matrix, level_of_measurement="interval")
    assert _value(ceiling["alpha"]) == pytest.approx(human_alpha)
    assert ceiling["point"] == pytest.approx(human_alpha)
    assert cell["ceiling"]["point"] == pytest.approx(human_alpha)
    # The alternative annotator test compares absolute differences on the scores themselves.
    assert cell["alt_test"] is None or cell["alt_test"]["alignment"] == "neg_abs"


def test_a_pass_threshold_gives_the_pass_fail_figures(
    study: Study, lead: Any, tmp_path: Path
) -> None:
    rubric_update(study=study, created_by=lead, criteria=[
        {"key": "quality", "scale": "interval", "min": 1, "max": 5, "pass_threshold": 3.5}])
    humans: dict[str, list[float | None]] = {"mean": list(MEANS)}
    path = _csv(tmp_path / "t.csv", _rows(humans) + _rows({"j": JUDGE}, "judge"))
    # On an existing interval criterion the continuous values import with no --scale.
    summary, _ = _import(path, "--study", study.slug)
    assert summary["criteria"]["quality"] == {"scale": "interval", "how": "existing"}
    # ... and --scale must then state the same range.
    error = import_error(path, "--study", study.slug, "--scale", "quality=interval:0-10")
    assert "'quality' exists as interval 1..5; --scale says interval 0..10" in error
    result = agreement_report(study.slug, tmp_path)
    assert result["criteria"][0]["pass_threshold"] == 3.5
    m = _overall(result)["metrics"]
    jp = [int(v >= 3.5) for v in JUDGE]
    hp = [int(v >= 3.5) for v in MEANS]
    assert _value(m["pass_accuracy"]) == pytest.approx(np.mean(np.equal(jp, hp)))
    assert _value(m["pass_kappa"]) == pytest.approx(cohen_kappa_score(hp, jp))
    [confusion] = [c for c in result["confusion"] if c["dimension"] == ""]
    assert confusion["labels"] == ["fail", "pass"]
    assert confusion["matrix"] == [
        [sum(1 for a, b in zip(hp, jp, strict=True) if (a, b) == (x, y)) for y in (0, 1)]
        for x in (0, 1)
    ]
    assert not any("pass_threshold" in w for w in result["warnings"])
    # Severity is recorded only where the threshold makes a score a failure.
    [crit] = Criterion.objects.filter(rubric__study=study)
    assert criterion_is_pass(crit, "3.5") is True and criterion_is_pass(crit, "3.4999") is False
    assert criterion_value_num(crit, "2.2") == 2.2


# --- never re-typed by inference -------------------------------------------------------------


def test_inference_refuses_continuous_scores_and_names_the_scale_to_state(
    lead: Any, tmp_path: Path
) -> None:
    path = _csv(tmp_path / "m.csv", _rows({"mean": [2.2, 3, 3.0, 4.6667, 1.0]}))
    error = import_error(path, "--study", "inferred", "--owner", lead.username)
    assert ("line 2: criterion: the values of 'quality' are non-integer numbers from 1 to "
            "4.6667") in error
    assert "--scale quality=interval:1-4.6667" in error
    assert not Study.objects.filter(slug="inferred").exists()
    # Stated, it imports; --dry-run shows the kind and writes nothing.
    summary, notes = _import(path, "--study", "inferred", "--owner", lead.username,
                             "--scale", "quality=interval:1-5", "--dry-run")
    assert summary["dry_run"] is True
    assert "criterion 'quality': interval 1..5 (stated (--scale))" in notes
    assert summary["created"]["annotation"] == 5
    assert not Study.objects.filter(slug="inferred").exists()


def test_values_outside_the_range_are_refused_with_their_line(
    lead: Any, tmp_path: Path
) -> None:
    rows = _rows({"mean": [2.2, 5.5, 3]}) + _rows({"j": [0.5, 3, 3]}, "judge")
    rows.append({"item_id": "q9", "output_id": "q9-x", "rater_id": "mean", "rater_kind": "human",
                 "criterion": "quality", "value": "good"})
    path = _csv(tmp_path / "bad.csv", rows)
    error = import_error(path, "--study", "range", "--owner", lead.username,
                          "--scale", "quality=interval:1-5")
    assert ("line 3: value: '5.5' is not a value of the interval criterion 'quality': 5.5 is "
            "outside the range 1..5") in error
    assert "line 5: value: '0.5' is not a value of the interval criterion 'quality'" in error
    assert "line 8: value: 'good' is not a value of the interval criterion 'quality': 'good' is "\
        "not a number" in error
    assert not Study.objects.filter(slug="range").exists()
    assert not Item.objects.filter(study__slug="range").exists()


def test_scale_parse_reads_interval_ranges() -> None:
    assert scale_parse("interval:1-5").bounds == (1.0, 5.0)
    assert scale_parse("interval:0-1").bounds == (0.0, 1.0)
    assert scale_parse("interval:0.5..4.5").bounds == (0.5, 4.5)
    assert scale_parse("interval:-1-1").bounds == (-1.0, 1.0)
    assert scale_parse("interval:1-5").describe() == "interval 1..5"
    for bad in ("interval", "interval:5-1", "interval:1", "interval:a-b", "interval:1-1"):
        with pytest.raises(ValueError):
            scale_parse(bad)


# --- the rubric rules ------------------------------------------------------------------------


def _errors(criteria: list[dict[str, Any]]) -> dict[str, str]:
    with pytest.raises(ValidationFailed) as info:
        criteria_validate(criteria)
    return {e["path"]: e["message"] for e in info.value.details["errors"]}


def test_interval_spec_validation_names_the_field() -> None:
    [crit] = criteria_validate([{"key": "q", "scale": "interval", "min": 0, "max": 1}])
    assert (crit["min"], crit["max"], crit["pass_threshold"]) == (0.0, 1.0, None)
    [crit] = criteria_validate(
        [{"key": "q", "scale": "interval", "min": 1, "max": 5, "pass_threshold": 3.5}])
    assert crit["pass_threshold"] == 3.5
    base = {"key": "q", "scale": "interval"}
    assert "max must be greater than min" in _errors([{**base, "min": 5, "max": 1}])[
        "criteria[0].max"]
    assert "max must be greater than min" in _errors([{**base, "min": 2, "max": 2}])[
        "criteria[0].max"]
    assert "needs min" in _errors([{**base, "max": 5}])["criteria[0].min"]
    assert "finite number" in _errors([{**base, "min": 1, "max": math.inf}])["criteria[0].max"]
    assert "finite number" in _errors([{**base, "min": "1", "max": 5}])["criteria[0].min"]
    assert "outside the range" in _errors([{**base, "min": 1, "max": 5, "pass_threshold": 5.5}])[
        "criteria[0].pass_threshold"]
    assert "finite number" in _errors([{**base, "min": 1, "max": 5, "pass_threshold": "x"}])[
        "criteria[0].pass_threshold"]
    assert "takes no points" in _errors([{**base, "min": 1, "max": 5, "points": [1, 2]}])[
        "criteria[0].points"]
    # min / max belong to interval criteria only.
    assert "interval criteria only" in _errors([{"key": "b", "scale": "binary", "min": 0}])[
        "criteria[0].min"]
    # A hard gate needs the threshold.
    assert "hard gate" in _errors([{**base, "min": 1, "max": 5, "is_hard_gate": True}])[
        "criteria[0].is_hard_gate"]
    criteria_validate([{**base, "min": 1, "max": 5, "pass_threshold": 4, "is_hard_gate": True}])


def test_plan_metrics_of_an_interval_criterion(study: Study, lead: Any) -> None:
    rubric_update(study=study, created_by=lead, criteria=[
        {"key": "plain", "scale": "interval", "min": 1, "max": 5},
        {"key": "cut", "scale": "interval", "min": 0, "max": 1, "pass_threshold": 0.5}])
    plan_create(study=study, created_by=lead, spec={"criteria": {
        "plain": {"metric": "mean_score", "threshold": 3.5},
        "cut": {"metric": "pass_rate", "threshold": 0.8}}})
    with pytest.raises(ValidationFailed) as info:
        plan_create(study=study, created_by=lead, spec={"criteria": {
            "plain": {"metric": "pass_rate", "threshold": 0.8}}})
    assert "has no pass/fail reading (set a pass_threshold)" in str(info.value)
    with pytest.raises(ValidationFailed) as info:
        plan_create(study=study, created_by=lead, spec={"criteria": {
            "plain": {"metric": "mean_score", "threshold": 7}}})
    assert "inside the range 1..5" in str(info.value)


# --- calibration and selection ---------------------------------------------------------------


def test_calibration_and_selection_read_an_interval_pass_as_score_at_least_the_threshold(
    study: Study, lead: Any, tmp_path: Path
) -> None:
    rubric_update(study=study, created_by=lead, criteria=[
        {"key": "cut", "scale": "interval", "min": 1, "max": 5, "pass_threshold": 3.5},
        {"key": "plain", "scale": "interval", "min": 1, "max": 5}])
    rng = np.random.default_rng(3)
    rows: list[dict[str, Any]] = []
    truth = rng.uniform(1, 5, size=40)
    for i, t in enumerate(truth):
        for crit in ("cut", "plain"):
            human = float(np.clip(round(t + rng.normal(0, 0.3), 2), 1, 5))
            judge = float(np.clip(round(t + rng.normal(0, 0.6), 2), 1, 5))
            base = {"item_id": f"q{i}", "output_id": f"q{i}-x", "criterion": crit}
            rows.append({**base, "rater_id": "h", "rater_kind": "human", "value": human})
            rows.append({**base, "rater_id": "j", "rater_kind": "judge", "value": judge})
    _import(_csv(tmp_path / "cal.csv", rows), "--study", study.slug)
    out = tmp_path / "cal.json"
    call_command("report", "calibration", "--study", study.slug, "--params",
                 json.dumps({"n_resamples": 50, "curve_resamples": 20, "seed": 1}),
                 "--out", str(out), stdout=io.StringIO())
    body = json.loads(out.read_text())
    assert body["status"] == "done", body
    text = json.dumps(body["result"])
    # Without a threshold the criterion is skipped, and the result says why.
    assert ("criterion 'plain' has no pass/fail reading (no pass threshold or pass labels): "
            "not calibrated") in text
    assert '"cut"' in text
    from calibration.compute import calibration_inputs_load
    from calibration.scoring import pass_codes as _pass_codes

    inputs = calibration_inputs_load(study=study, params={})
    [rule] = [r for r in inputs.rules.values() if r.key == "cut"]
    assert (rule.min, rule.max, rule.pass_threshold) == (1.0, 5.0, 3.5)
    assert _pass_codes(rule, (), np.array([3.49, 3.5, 5.0])).tolist() == [0.0, 1.0, 1.0]

    from reports.selection.load import selection_inputs_load
    from reports.selection.readings import label_reading as _label_reading
    from reports.selection.readings import pass_reading as _pass_reading

    sel = selection_inputs_load(study, {}, None)
    metas = {c.key: c for c in sel.criteria}
    assert metas["cut"].has_pass_reading() and not metas["plain"].has_pass_reading()
    assert _pass_reading(metas["cut"], np.array([2.0, 3.5, np.nan])).tolist()[:2] == [0.0, 1.0]
    assert _label_reading(metas["cut"], "4.2", mean_score=False) == 1.0
    assert _label_reading(metas["plain"], "4.2", mean_score=True) == 4.2
    assert any("'plain' is an interval score without a pass_threshold" in w
               for w in sel.warnings)
