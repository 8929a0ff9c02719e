"""PandaLM through the importer and the agreement report: the published figures.

Figures: the PandaLM README and data/compute_metrics.py (see $REVIEWHUB_DATA_DIR/README.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from annotations.models import Annotation
from calibration.frames import rating_data_load
from imports.datasets import dataset_import
from imports.generic import importer_username
from reports.agreement import NOT_TRUSTWORTHY, TRUSTWORTHY, input_fingerprint
from snapshots.models import ReportSnapshot
from studies.models import Study

from .conftest import computed_report, module_study, shared_data_dir

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def pandalm(
    request: pytest.FixtureRequest, django_db_setup: Any, django_db_blocker: Any
) -> Iterator[dict[str, Any]]:
    for study in module_study(request, django_db_blocker, "pandalm-test", ["pandalm"]):
        with django_db_blocker.unblock():
            report = computed_report(study, {"seed": 7, "n_resamples": 1000})
        yield {"study": study, "report": report}


def _judge(result: dict[str, Any], name: str) -> int:
    return next(j["id"] for j in result["judges"] if j["judge"] == name)


def _cell(result: dict[str, Any], judge: int, label: str = "overall") -> dict[str, Any]:
    return next(
        c
        for c in result["cells"]
        if c["judge_version"] == judge
        and c["label"] == label
        and c["dimension"] in ("", "motivation_app")
    )


def _confusion(result: dict[str, Any], judge: int, label: str = "overall") -> dict[str, Any]:
    return next(
        c for c in result["confusion"] if c["judge_version"] == judge and c["label"] == label
    )


def test_report_finished_and_snapshots_inputs(pandalm: dict[str, Any]) -> None:
    report: ReportSnapshot = pandalm["report"]
    assert report.status == ReportSnapshot.Status.DONE, report.error
    assert len(report.input_fingerprint) == 64
    assert report.result["fingerprint"] == report.input_fingerprint
    assert "alternative annotator test" in report.result["rule"]


def test_annotator_kappas(pandalm: dict[str, Any]) -> None:
    result = pandalm["report"].result
    ceiling = next(c for c in result["ceiling"] if c["label"] == "overall")
    names = dict(
        get_user_model()
        .objects.filter(
            pk__in=[p["a"] for p in ceiling["pairs"]] + [p["b"] for p in ceiling["pairs"]]
        )
        .values_list("pk", "username")
    )
    study = pandalm["study"]
    got = {(names[p["a"]], names[p["b"]]): round(p["kappa"], 4) for p in ceiling["pairs"]}
    u = [importer_username(study, f"annotator{k}") for k in (1, 2, 3)]
    assert got == {(u[0], u[1]): 0.8520, (u[0], u[2]): 0.8789, (u[1], u[2]): 0.8617}
    # Independent figure from the data README: Fleiss' kappa = nominal alpha = 0.8642.
    assert round(ceiling["alpha"]["value"], 4) == 0.8642


def test_gold_label_counts(pandalm: dict[str, Any]) -> None:
    result = pandalm["report"].result
    conf = _confusion(result, _judge(result, "gpt-3.5-turbo"))
    assert conf["labels"] == ["tie", "A", "B"]
    assert [sum(row) for row in conf["matrix"]] == [105, 422, 472]


@pytest.mark.parametrize(
    ("judge", "acc", "prec", "rec", "f1"),
    [
        ("gpt-3.5-turbo", 0.7107, 0.5879, 0.5736, 0.5755),
        ("pandalm-7b", 0.6677, 0.5738, 0.5750, 0.5743),
    ],
)
def test_judges_vs_majority(
    pandalm: dict[str, Any], judge: str, acc: float, prec: float, rec: float, f1: float
) -> None:
    result = pandalm["report"].result
    m = _cell(result, _judge(result, judge))["metrics"]
    assert round(m["accuracy"]["value"], 4) == acc
    assert round(m["macro_precision"]["value"], 4) == prec
    assert round(m["macro_recall"]["value"], 4) == rec
    assert round(m["macro_f1"]["value"], 4) == f1
    for name in ("accuracy", "kappa", "gwet_ac1", "macro_f1", "agreement_without_ties"):
        assert m[name]["ci_low"] <= m[name]["value"] <= m[name]["ci_high"], name
        assert "clustered by item" in m[name]["method"]


def test_stratum_accuracies_and_verdict_flip(pandalm: dict[str, Any]) -> None:
    result = pandalm["report"].result
    gpt = _judge(result, "gpt-3.5-turbo")
    wolfram = _cell(result, gpt, "Wolfram alpha")
    wiki = _cell(result, gpt, "Wikipedia")
    assert (wolfram["n_subjects"], wiki["n_subjects"]) == (35, 30)
    correct = {
        lab: sum(_confusion(result, gpt, lab)["matrix"][i][i] for i in range(3))
        for lab in ("Wolfram alpha", "Wikipedia")
    }
    assert correct == {"Wolfram alpha": 13, "Wikipedia": 29}
    assert round(wolfram["metrics"]["accuracy"]["value"], 3) == 0.371
    assert round(wiki["metrics"]["accuracy"]["value"], 3) == 0.967
    # The same judge is trustworthy in one stratum and not in the other, by the stated rule.
    assert wiki["verdict"] == TRUSTWORTHY and wiki["verdict_basis"] == "alt_test"
    assert wolfram["verdict"] == NOT_TRUSTWORTHY and wolfram["verdict_basis"] == "alt_test"
    small = [c for c in result["cells"] if c["n_subjects"] < 30]
    assert small and all(c["verdict"] == "too few labels" for c in small)


def test_bias_audits_where_data_allow(pandalm: dict[str, Any]) -> None:
    result = pandalm["report"].result
    audits = {(b["judge_version"], b["audit"]) for b in result["bias"]}
    pandalm7b = _judge(result, "pandalm-7b")
    # PandaLM-7B is LLaMA-based and llama-7b is a candidate: self-preference can be audited.
    assert (pandalm7b, "self-preference") in audits
    assert (pandalm7b, "length: longer preferred among human ties") in audits
    # Only one presentation order exists in this data set: no position audit.
    assert not any(a.startswith("position") for _, a in audits)


def test_reproducible_and_seed_sensitive(pandalm: dict[str, Any]) -> None:
    study = pandalm["study"]
    params = {"seed": 11, "n_resamples": 200, "strata": []}
    a = computed_report(study, params).result
    b = computed_report(study, params).result
    assert a == b
    c = computed_report(study, {**params, "seed": 12}).result
    cell_a = a["cells"][0]["metrics"]["kappa"]
    cell_c = c["cells"][0]["metrics"]["kappa"]
    assert cell_a["value"] == cell_c["value"]
    assert (cell_a["ci_low"], cell_a["ci_high"]) != (cell_c["ci_low"], cell_c["ci_high"])


def test_fingerprint_changes_when_a_rating_changes(pandalm: dict[str, Any]) -> None:
    study = pandalm["study"]
    before = input_fingerprint(rating_data_load(study=study))
    assert before == pandalm["report"].input_fingerprint
    ann = Annotation.objects.filter(criterion__rubric__study=study).order_by("pk").first()
    assert ann is not None
    ann.value, ann.value_num = ("B", 0.0) if ann.value != "B" else ("A", 1.0)
    ann.save()
    assert input_fingerprint(rating_data_load(study=study)) != before


def test_reimport_is_idempotent(pandalm: dict[str, Any]) -> None:
    summary = dataset_import(study=pandalm["study"], name="pandalm", data_dir=shared_data_dir())
    assert sum(summary.created.values()) == 0
    assert sum(summary.updated.values()) == 0
    assert summary.unchanged == {"item": 999, "annotation": 2997, "verdict": 1998}


def test_study_is_not_simulated(pandalm: dict[str, Any]) -> None:
    assert Study.objects.get(pk=pandalm["study"].pk).is_simulated is False


def _raw_pandalm() -> tuple[list[list[int]], dict[str, list[int]]]:
    """The three annotator labels per item and each judge's label, read from the released
    files with PandaLM's rule ("1" / "2" wins; "Tie" and anything unparseable a tie, 0)."""
    folder = shared_data_dir() / "pandalm"
    items = json.loads((folder / "testset-v1.json").read_text())
    votes = [[int(r[f"annotator{k}"]) for k in (1, 2, 3)] for r in items]
    judges = {}
    for name, file, key in (
        ("gpt-3.5-turbo", "gpt-3.5-turbo-testset-v1.json", "gpt_result"),
        ("pandalm-7b", "pandalm-7b-testset-v1.json", "pandalm_result"),
    ):
        by_idx = {r["idx"]: str(r[key]).strip() for r in json.loads((folder / file).read_text())}
        judges[name] = [{"1": 1, "2": 2}.get(by_idx[r["idx"]], 0) for r in items]
    return votes, judges


@pytest.mark.parametrize("judge", ["gpt-3.5-turbo", "pandalm-7b"])
def test_per_vote_agreement_with_and_without_ties(pandalm: dict[str, Any], judge: str) -> None:
    """Every annotator vote compared with the judge (MT-Bench's convention), from the raw
    files; beside the per-majority accuracy the paper publishes (test_judges_vs_majority)."""
    votes, judges = _raw_pandalm()
    j = judges[judge]
    with_ties = [v == jv for vs, jv in zip(votes, j, strict=True) for v in vs]
    without = [v == jv for vs, jv in zip(votes, j, strict=True) for v in vs if v and jv]
    result = pandalm["report"].result
    m = _cell(result, _judge(result, judge))["metrics"]
    assert m["agreement_per_vote"]["value"] == pytest.approx(sum(with_ties) / len(with_ties))
    assert m["agreement_per_vote"]["n"] == len(with_ties) == 2997
    got = m["agreement_per_vote_without_ties"]
    assert got["value"] == pytest.approx(sum(without) / len(without))
    assert got["n"] == len(without)
    for name in ("agreement_per_vote", "agreement_per_vote_without_ties"):
        assert m[name]["ci_low"] <= m[name]["value"] <= m[name]["ci_high"]


def test_pooled_human_pair_agreement(pandalm: dict[str, Any]) -> None:
    """Pairs of distinct annotators on the same item, pooled, from the raw files: with all
    three annotators on every item, the mean of the three pairwise percent agreements."""
    votes, _ = _raw_pandalm()
    pairs = [(vs[a], vs[b]) for vs in votes for a, b in ((0, 1), (0, 2), (1, 2))]
    no_ties = [(x, y) for x, y in pairs if x and y]
    result = pandalm["report"].result
    ceiling = next(c for c in result["ceiling"] if c["label"] == "overall")
    assert ceiling["pooled_agreement"]["value"] == pytest.approx(
        sum(x == y for x, y in pairs) / len(pairs)
    )
    assert ceiling["pooled_agreement"]["n"] == 3 * 999
    assert ceiling["pooled_agreement_without_ties"]["value"] == pytest.approx(
        sum(x == y for x, y in no_ties) / len(no_ties)
    )
    # Beside Krippendorff's alpha (0.8642 in test_annotator_kappas).
    assert ceiling["pooled_agreement"]["value"] > ceiling["alpha"]["value"]
