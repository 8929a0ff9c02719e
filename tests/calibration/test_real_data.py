"""Calibration snapshots of published data, checked against figures rebuilt from the raw files.

HANNA (Chhun et al.): five LLMs rate 1,056 stories 1-5 on six criteria (Eval-Prompt 1 here),
three humans rate each story; PandaLM (Wang et al.): two LLM judges and three annotators on
999 pairs. Both go through the documented path: `manage.py import_dataset`, then `manage.py
report calibration --out file`. The test rebuilds the (judge score, human consensus pass)
pairs straight from the files in $REVIEWHUB_DATA_DIR with its own consensus rule
(docs/calibration.md: the majority of the pass readings, an exact tie no consensus) and checks
the snapshot's label counts, "before" Brier score, log loss and AUROC against scikit-learn, and
the whole-study curve against scikit-learn's isotonic / logistic fit on the same pairs.

HANNA's importer creates ordinal criteria without a pass threshold (a file cannot say where
passing starts): imported as they are, no criterion is calibrated. A lead who sets the
threshold in the rubric before importing gets the calibration (here: a story passes at 3 of 5).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score

from imports.generic import scale_parse
from judges.models import JudgeVersion
from studies.models import Criterion, Study
from studies.services import rubric_update, study_create
from tests.reports.conftest import shared_data_dir, study_delete

pytestmark = pytest.mark.django_db

HANNA_CRITERIA = {
    "RE": "relevance",
    "CH": "coherence",
    "EM": "empathy",
    "SU": "surprise",
    "EG": "engagement",
    "CX": "complexity",
}
HANNA_LLMS = ("Beluga-13B", "Llama-13B", "Mistral-7B", "ChatGPT", "OrcaPlatypus")
HANNA_PROMPT = 1
PASS_AT = 3  # the pass threshold the lead sets: a story passes at 3 of 5 or more
EPS = 1e-6  # every calibrated P(pass) is clipped to [EPS, 1 - EPS] (evalstats.calibration)
# Small bootstrap counts: the point figures checked here do not depend on them.
FAST = {"n_resamples": 20, "curve_resamples": 20, "seed": 5}


# --- raw files -> (score, pass) pairs, independently of the importer ---------------------------


def majority_pass(readings: list[float]) -> float:
    """1 / 0 when most readings pass / fail, NaN on an exact tie or without readings."""
    ok = [r for r in readings if np.isfinite(r)]
    s = sum(ok)
    if 2 * s > len(ok):
        return 1.0
    if 2 * s < len(ok):
        return 0.0
    return float("nan")


def hanna_pairs(data_dir: Path) -> dict[tuple[str, str], pd.DataFrame]:
    """(LLM, criterion key) -> one row per story: raw score, consensus pass (NaN: none)."""
    table = pd.read_csv(data_dir / "hanna" / "hanna_metric_scores_llm.csv")
    out: dict[tuple[str, str], pd.DataFrame] = {}
    for xx, key in HANNA_CRITERIA.items():
        humans = np.array(
            [[v for cell in table[f"Human {k} {xx}"] for v in json.loads(cell)] for k in (1, 2, 3)],
            dtype=float,
        )
        passed = np.array(
            [majority_pass([float(h >= PASS_AT) if np.isfinite(h) else np.nan for h in col])
             for col in humans.T]
        )
        for llm in HANNA_LLMS:
            score = np.array(
                [v for cell in table[f"{llm} {xx} {HANNA_PROMPT}"] for v in json.loads(cell)],
                dtype=float,
            )
            out[(llm, key)] = pd.DataFrame({"score": score, "passed": passed})
    return out


def pandalm_pairs(data_dir: Path) -> dict[str, pd.DataFrame]:
    """Judge -> one row per non-tie verdict: cell, pass (the human majority side equals the
    judge's side; NaN without a unique majority side)."""
    base = data_dir / "pandalm"
    items = json.loads((base / "testset-v1.json").read_text())
    judges = {
        "gpt-3.5-turbo": ("gpt-3.5-turbo-testset-v1.json", "gpt_result"),
        "pandalm-7b": ("pandalm-7b-testset-v1.json", "pandalm_result"),
    }
    out: dict[str, pd.DataFrame] = {}
    for judge, (name, field) in judges.items():
        verdicts = {r["idx"]: str(r[field]).strip() for r in json.loads((base / name).read_text())}
        rows = []
        for rec in items:
            # Published rule: "1" / "2" are sides; "Tie" and anything unparseable are ties.
            side = {"1": 1, "2": 2}.get(verdicts.get(rec["idx"], ""), 0)
            votes = pd.Series([int(rec[f"annotator{k}"]) for k in (1, 2, 3)]).value_counts()
            top = votes[votes == votes.max()]
            human = int(top.index[0]) if len(top) == 1 else None
            rows.append({
                "cell": f"motivation_app={rec['motivation_app']}",
                "side": side,
                "passed": np.nan if human is None else float(human == side),
            })
        out[judge] = pd.DataFrame(rows)
    return out


# --- fixtures: import_dataset, then report calibration, through the commands --------------------


def _report(slug: str, params: dict[str, Any], out: Path) -> dict[str, Any]:
    call_command("report", "calibration", "--study", slug, "--params", json.dumps(params),
                 "--out", str(out))
    snapshot = json.loads(out.read_text())
    assert snapshot["status"] == "done", snapshot.get("error")
    result: dict[str, Any] = snapshot["result"]
    return result


def _delete(slug: str) -> None:
    study = Study.objects.filter(slug=slug).first()
    if study is not None:
        study_delete(study)


@pytest.fixture(scope="module")
def hanna(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    data_dir = shared_data_dir()
    tmp = tmp_path_factory.mktemp("hanna")
    with django_db_blocker.unblock():
        _delete("cal-hanna")
        get_user_model().objects.filter(username="cal-hanna-lead").delete()
        owner = get_user_model().objects.create(username="cal-hanna-lead")
        # The importer creates ordinal criteria without a pass threshold, which calibration
        # skips: the lead states the threshold in the rubric first, and the import uses it.
        study = study_create(owner=owner, fields={"slug": "cal-hanna", "name": "HANNA",
                                                  "status": "open"})
        criteria = [
            {**scale_parse("ordinal:1-5").criterion_fields(key), "pass_threshold": PASS_AT}
            for key in HANNA_CRITERIA.values()
        ]
        rubric_update(study=study, criteria=criteria, created_by=owner)
        with open(tmp / "import.txt", "w") as log:
            call_command("import_dataset", "hanna", "--study", study.slug,
                         "--data-dir", str(data_dir), stdout=log)
        versions = {
            jv.pk: jv.judge.name
            for jv in JudgeVersion.objects.filter(judge__study=study).select_related("judge")
            if jv.judge.name in HANNA_LLMS and jv.config.get("label") == f"prompt-{HANNA_PROMPT}"
        }
        assert len(versions) == len(HANNA_LLMS)
        result = _report(study.slug, {**FAST, "judges": sorted(versions)}, tmp / "hanna.json")
        yield {"result": result, "versions": versions, "pairs": hanna_pairs(data_dir)}
        study_delete(study)


@pytest.fixture(scope="module")
def imported_ordinal(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """JUDGE-BENCH NewsRoom (ordinal 1-5 criteria) imported into a new study as it is."""
    data_dir = shared_data_dir()
    tmp = tmp_path_factory.mktemp("newsroom")
    with django_db_blocker.unblock():
        _delete("cal-newsroom")
        get_user_model().objects.filter(username="cal-newsroom-lead").delete()
        get_user_model().objects.create(username="cal-newsroom-lead")
        with open(tmp / "import.txt", "w") as log:
            call_command("import_dataset", "judge-bench:newsroom", "--study", "cal-newsroom",
                         "--owner", "cal-newsroom-lead", "--data-dir", str(data_dir), stdout=log)
        study = Study.objects.get(slug="cal-newsroom")
        thresholds = dict(
            Criterion.objects.filter(rubric__study=study).values_list("key", "pass_threshold")
        )
        result = _report(study.slug, {**FAST, "curve_resamples": 0}, tmp / "newsroom.json")
        yield {"result": result, "thresholds": thresholds}
        study_delete(study)


@pytest.fixture(scope="module")
def pandalm(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    data_dir = shared_data_dir()
    tmp = tmp_path_factory.mktemp("pandalm")
    with django_db_blocker.unblock():
        _delete("cal-pandalm")
        get_user_model().objects.filter(username="cal-pandalm-lead").delete()
        get_user_model().objects.create(username="cal-pandalm-lead")
        with open(tmp / "import.txt", "w") as log:
            call_command("import_dataset", "pandalm", "--study", "cal-pandalm",
                         "--owner", "cal-pandalm-lead", "--data-dir", str(data_dir), stdout=log)
        result = _report("cal-pandalm", {**FAST, "strata": ["motivation_app"]},
                         tmp / "pandalm.json")
        yield {"result": result, "pairs": pandalm_pairs(data_dir)}
        _delete("cal-pandalm")


def _value(diag: dict[str, Any], name: str) -> float:
    return float(diag[name]["value"])


def _sklearn_curve(method: str, x: np.ndarray, y: np.ndarray, grid: np.ndarray) -> np.ndarray:
    if method == "isotonic":
        fit = IsotonicRegression(out_of_bounds="clip").fit(x, y).predict(grid)
    else:
        model = LogisticRegression(C=np.inf, tol=1e-10, max_iter=10_000)
        fit = model.fit(x[:, None], y).predict_proba(grid[:, None])[:, 1]
    return np.clip(fit, EPS, 1 - EPS)


# --- HANNA ------------------------------------------------------------------------------------


def test_imported_ordinal_criteria_are_not_calibrated(imported_ordinal: dict[str, Any]) -> None:
    # The HANNA converter creates its six 1-5 criteria the same way (`scale_parse("ordinal:1-5")`,
    # docs/import-ratings.md): no pass threshold until a lead sets one.
    thresholds = imported_ordinal["thresholds"]
    assert len(thresholds) == 4 and set(thresholds.values()) == {None}
    result = imported_ordinal["result"]
    assert result["cells"] == [] and result["n_scores"] == 0
    for key in thresholds:
        assert (f"criterion '{key}' has no pass/fail reading (no pass threshold or pass labels): "
                "not calibrated") in result["warnings"]


def _hanna_cells(hanna: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    names = hanna["versions"]
    cells = {(names[c["judge_version"]], c["criterion"]): c for c in hanna["result"]["cells"]}
    assert len(cells) == len(hanna["result"]["cells"])
    return cells


def test_hanna_cells_and_labels(hanna: dict[str, Any]) -> None:
    cells = _hanna_cells(hanna)
    assert set(cells) == set(hanna["pairs"])
    for key, cell in cells.items():
        pairs = hanna["pairs"][key]
        n = int((np.isfinite(pairs["score"]) & pairs["passed"].notna()).sum())
        assert cell["stratum"] == "" and not cell["too_few_labels"], key
        assert cell["n_labels"] == n, key
    # Three readings per story: never a tie, every one of the 1,056 stories is labelled.
    assert {c["n_labels"] for c in cells.values()} == {1056}


def test_hanna_before_diagnostics_equal_sklearn(hanna: dict[str, Any]) -> None:
    for key, cell in _hanna_cells(hanna).items():
        pairs = hanna["pairs"][key]
        pairs = pairs[np.isfinite(pairs["score"])]
        # A continuous score is read as a probability by rescaling its observed range.
        lo, hi = pairs["score"].min(), pairs["score"].max()
        lab = pairs[pairs["passed"].notna()]
        y = lab["passed"].to_numpy()
        prob = ((lab["score"] - lo) / (hi - lo)).to_numpy()
        before = cell["diagnostics"]["before"]
        assert _value(before, "brier") == pytest.approx(brier_score_loss(y, prob), abs=1e-12), key
        assert _value(before, "log_loss") == pytest.approx(log_loss(y, prob), rel=1e-9), key
        assert before["auroc"]["value"] == pytest.approx(roc_auc_score(y, prob), abs=1e-12), key


def test_hanna_curve_equals_sklearn_fit(hanna: dict[str, Any]) -> None:
    checked = 0
    for key, cell in _hanna_cells(hanna).items():
        pairs = hanna["pairs"][key].dropna()
        x, y = pairs["score"].to_numpy(), pairs["passed"].to_numpy()
        grid = np.asarray(cell["curve"]["x"])
        got = np.asarray(cell["curve"]["y"])
        # The grid is the judge's distinct scores (a mean over samples: a few dozen values).
        assert np.array_equal(grid, np.unique(x)), key
        if cell["method"] in ("isotonic", "platt"):
            want = _sklearn_curve(cell["method"], x, y, grid)
            assert np.allclose(got, want, atol=1e-5), (key, cell["method"])
            checked += 1
        before = cell["diagnostics"]["before"]
        after = cell["diagnostics"]["after"]
        # A 1-5 score rescaled to [0, 1] is no probability: held-out calibration beats it.
        if _value(before, "ece") > 0.1:
            assert _value(after, "brier") < _value(before, "brier"), key
            assert _value(after, "log_loss") < _value(before, "log_loss"), key
    assert checked >= 1


# --- PandaLM ----------------------------------------------------------------------------------


def _pandalm_cells(pandalm: dict[str, Any], judge: str) -> dict[str, dict[str, Any]]:
    return {
        c["stratum"]: c for c in pandalm["result"]["cells"]
        if c["judge"].startswith(judge + " ") and c["criterion"] == "preference"
    }


@pytest.mark.parametrize("judge", ["gpt-3.5-turbo", "pandalm-7b"])
def test_pandalm_labels_per_cell_and_ties(pandalm: dict[str, Any], judge: str) -> None:
    pairs = pandalm["pairs"][judge]
    cells = _pandalm_cells(pandalm, judge)
    scored = pairs[pairs["side"] != 0]
    labelled = scored[scored["passed"].notna()]
    assert set(cells) == {"", *scored["cell"].unique()}
    assert cells[""]["n_labels"] == len(labelled)
    per_cell = labelled.groupby("cell").size()
    for label, cell in cells.items():
        if label:
            assert cell["n_labels"] == int(per_cell.get(label, 0)), label
            assert cell["too_few_labels"] == (cell["n_labels"] < 10), label
    ties = int((pairs["side"] == 0).sum())
    display = next(iter(cells.values()))["judge"]
    assert (f"{display} on 'preference': {ties} tie verdict(s) have no preferred side and get "
            "no calibrated score") in pandalm["result"]["warnings"]


@pytest.mark.parametrize("judge", ["gpt-3.5-turbo", "pandalm-7b"])
def test_pandalm_before_and_curve(pandalm: dict[str, Any], judge: str) -> None:
    pairs = pandalm["pairs"][judge]
    labelled = pairs[(pairs["side"] != 0) & pairs["passed"].notna()]
    cells = _pandalm_cells(pandalm, judge)
    for label, cell in cells.items():
        if cell["too_few_labels"]:
            assert cell["diagnostics"] in ({"before": None, "after": None},
                                           {"before": None, "after": None, "confidence": None})
            continue
        sub = labelled if label == "" else labelled[labelled["cell"] == label]
        y = sub["passed"].to_numpy()
        # Verdicts without a probability: the confidence in the judge's own side is 1.
        prob = np.ones(y.size)
        before = cell["diagnostics"]["before"]
        assert _value(before, "brier") == pytest.approx(brier_score_loss(y, prob), abs=1e-12)
        assert _value(before, "log_loss") == pytest.approx(
            log_loss(y, prob, labels=[0, 1]), rel=1e-9)
        if 0 < y.mean() < 1:
            assert before["auroc"]["value"] == pytest.approx(roc_auc_score(y, prob))
        # The ECE in confidence bins over [0.5, 1] (issue 24): a judge certain of every side it
        # picks sits in the top bin, so its ECE is 1 - the share of pairs where humans agree.
        conf_before = cell["diagnostics"]["confidence"]["before"]
        assert _value(conf_before, "ece") == pytest.approx(1 - y.mean(), abs=1e-12)
    # An always-certain judge that is wrong on about a quarter of the pairs: on the whole study the
    # held-out calibrated confidence beats it (small strata are too noisy to say).
    whole = cells[""]
    after = _value(whole["diagnostics"]["after"], "brier")
    assert after < _value(whole["diagnostics"]["before"], "brier")
    # Below even the best single constant (the agreement share, in sample): the per-stratum
    # offsets carry information, the judge is trustworthy in some applications and not others.
    share = labelled["passed"].mean()
    assert after < share * (1 - share)
    x = np.ones(len(labelled))
    y = labelled["passed"].to_numpy()
    grid = np.asarray(whole["curve"]["x"])
    assert grid.tolist() == [1.0]
    # One score value: every method's maximum-likelihood fit is the share the human agrees with.
    method = whole["method"] if whole["method"] in ("isotonic", "platt") else "isotonic"
    want = _sklearn_curve(method, x, y, grid)
    assert whole["curve"]["y"] == pytest.approx(want.tolist(), abs=1e-6)
