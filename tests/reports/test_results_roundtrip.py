"""The typed agreement result reads exactly the JSON the computation writes, and writes it back.

Typing the inner tables (a cell's ceiling and alternative annotator test, the confusion, bias,
ceiling, system and disagreement rows) changes how a result is read, not what is stored: for
every shape the computation gives (optional keys present or absent, nulls kept), the raw JSON of
`compute_report` must survive `AgreementResult.from_json(x).to_json() == x`, fit the schema, and
come back as the typed rows the pages, charts and exports read by attribute.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

import jsonschema
import numpy as np
import pandas as pd
import pytest

from calibration.frames import CriterionRef, JudgeRef, RatingData, rating_data_load
from reports.agreement import compute_report, input_fingerprint, params_validate
from reports.agreement.present.export import TABLES, table_csv
from reports.agreement.results import (
    AgreementResult,
    AltTest,
    AltTestAnnotator,
    BiasRow,
    CandidateMeans,
    CeilingRow,
    ConfusionRow,
    DisagreementExample,
    DisagreementRow,
    Estimate,
    HumanCeiling,
    RaterPair,
    ResultFormatError,
    SystemRow,
    json_safe,
)
from snapshots.models import ReportSnapshot
from studies.models import Study

from .conftest import computed_report, module_study

CANDIDATES = {1: ("small", "fam-a"), 2: ("large", "fam-b"), 3: ("mid", "fam-c")}


def _synthetic_data(seed: int = 5) -> RatingData:
    """Every table and every optional key of the result: binary, ordinal and categorical
    criteria on outputs, a pairwise one on comparisons with both presentation orders, and a
    binary one with a single annotator per output (no human ceiling); two label judges (one
    of the first candidate's family), a continuous judge; three candidates (system level)."""
    rng = np.random.default_rng(seed)
    n_items = 90
    n_out = 3 * n_items  # one output of each candidate per item; subject 2s
    n_cmp = n_items  # candidate 1 vs 2 per item; subject 2c + 1
    crits = {
        1: CriterionRef(1, "correct", "Correct", "binary", ("fail", "pass"), 1),
        2: CriterionRef(2, "helpful", "Helpful", "ordinal", ("1", "2", "3", "4", "5"), 1),
        3: CriterionRef(3, "tone", "Tone", "categorical", ("calm", "neutral", "rude"), 1),
        4: CriterionRef(4, "pref", "Preference", "pairwise", ("A", "B", "tie"), 1),
        5: CriterionRef(5, "solo", "Solo", "binary", ("fail", "pass"), 1),
    }
    judges = {
        10: JudgeRef.of(10, "judge-a", 1, "", "fam-a", "label", "llm"),
        11: JudgeRef.of(11, "judge-b", 1, "", "", "label", "llm"),
        12: JudgeRef.of(12, "metric", 1, "", "", "continuous", "imported"),
    }
    rows: list[tuple[int, int, int, float, bool, bool]] = []
    orders: list[tuple[int, int, int, float, float]] = []
    for cid, crit in crits.items():
        pairwise = crit.scale == "pairwise"
        n = n_cmp if pairwise else n_out
        subject = (2 * np.arange(n) + 1) if pairwise else 2 * np.arange(n)
        k = 3 if pairwise else len(crit.values)
        lo = 1 if crit.scale == "ordinal" else 0
        truth = rng.integers(0, k, n)
        for jv in (10, 11):
            right = rng.random(n) < 0.75
            val = np.where(right, truth, rng.integers(0, k, n)) + lo
            rows += [
                (int(s), cid, jv, float(v), True, False)
                for s, v in zip(subject, val, strict=True)
            ]
            if pairwise and jv == 10:
                # Now and then the output shown first wins (B, when B is shown first): the
                # order changes some verdicts.
                ab = val.astype(float)
                ba = np.where(rng.random(n) < 0.3, 2.0, ab)
                orders += [
                    (int(s), cid, jv, float(a), float(b))
                    for s, a, b in zip(subject, ab, ba, strict=True)
                ]
        if crit.scale == "ordinal":
            score = truth + lo + rng.normal(0, 0.7, n)
            rows += [(2 * s, cid, 12, float(v), True, True) for s, v in enumerate(score)]
        annotators = 1 if crit.key == "solo" else 3
        for s in rng.choice(n, 120 if not pairwise else 80, replace=False):
            for a in rng.choice(8, annotators, replace=False):
                v = truth[s] if rng.random() < 0.8 else rng.integers(0, k)
                rows.append((int(subject[s]), cid, 100 + int(a), float(v + lo), False, False))
    ratings = pd.DataFrame(
        rows, columns=["subject", "criterion", "rater", "num", "is_judge", "continuous"]
    )
    outputs = pd.DataFrame(
        {
            "item": np.arange(n_out) // 3,
            "candidate": np.arange(n_out) % 3 + 1,
            "candidate_b": -1,
            "length": rng.integers(20, 900, n_out).astype(float),
            "length_b": np.nan,
        },
        index=pd.Index(np.arange(n_out) * 2, name="subject"),
    )
    comparisons = pd.DataFrame(
        {
            "item": np.arange(n_cmp),
            "candidate": 1,
            "candidate_b": 2,
            "length": rng.integers(20, 900, n_cmp).astype(float),
            "length_b": rng.integers(20, 900, n_cmp).astype(float),
        },
        index=pd.Index(np.arange(n_cmp) * 2 + 1, name="subject"),
    )
    items = pd.DataFrame(
        {
            "external_id": [f"i{i}" for i in range(n_items)],
            "lang": rng.choice(["de", "en", "fr"], n_items),
        },
        index=pd.Index(np.arange(n_items), name="item"),
    )
    return RatingData(
        criteria=crits,
        judges=judges,
        candidates=CANDIDATES,
        ratings=ratings,
        subjects=pd.concat([outputs, comparisons]).sort_index(),
        items=items,
        dimensions=["lang"],
        orders=pd.DataFrame(orders, columns=["subject", "criterion", "rater", "ab", "ba"]),
        # Rater groups (result version 3): annotator 106 has none.
        rater_attributes={
            100 + a: {"group": g}
            for a, g in enumerate(["expert"] * 3 + ["crowd"] * 3 + [""] + ["author"])
            if g
        },
    )


def _raw_json(data: RatingData, params: dict[str, Any]) -> dict[str, Any]:
    """What the report kind stores, before the typed reader has seen it."""
    raw = compute_report(data, params_validate(params))
    return json_safe({**raw, "plan_version": None, "fingerprint": input_fingerprint(data)})


@pytest.fixture(scope="module")
def synthetic() -> dict[str, Any]:
    return _raw_json(
        _synthetic_data(),
        {"n_resamples": 200, "seed": 2, "min_items": 10, "system_level": True,
         "rater_groups": "group", "by_candidate": True},
    )


def test_synthetic_result_round_trips_exactly(synthetic: dict[str, Any]) -> None:
    typed = AgreementResult.from_json(synthetic)
    assert typed.to_json() == synthetic
    jsonschema.validate(synthetic, AgreementResult.json_schema())
    # The test covers what it says: every table has rows, and the optional keys occur both
    # present and absent (or null) in them.
    for table in ("cells", "confusion", "bias", "ceiling", "system", "disagreements"):
        assert synthetic[table], table
    cells = synthetic["cells"]
    assert {"pairs" in c["ceiling"] for c in cells} == {True, False}
    assert {"pairwise_kappa_weights" in c["ceiling"] for c in cells} == {True, False}
    assert {c["alt_test"] is None for c in cells} == {True, False}
    audits = {b["audit"] for b in synthetic["bias"]}
    assert {"position: flip rate", "self-preference", "length: residual vs length"} <= audits
    assert {"p_value" in b for b in synthetic["bias"]} == {True, False}
    assert {"strict_flip_rate" in b for b in synthetic["bias"]} == {True, False}
    assert {"n_pairs" in b for b in synthetic["bias"]} == {True, False}
    # Binary criteria have no per-subject Kendall tau: the key is there, null.
    assert {s["per_subject_kendall"] is None for s in synthetic["system"]} == {True, False}
    groups = synthetic["rater_groups"]
    assert {g["kind"] for g in groups} == {"judge_vs_group", "group_vs_group", "within_group"}
    assert {"n_pairs" in g for g in groups} == {True, False}
    assert {g["other_group"] is None for g in groups} == {True, False}
    assert {m["n_raters_without"] for m in synthetic["rater_group_members"]} == {1}  # 106
    # Result version 4: per-vote figures against one group's votes, and every cell per
    # candidate.
    assert any("agreement_per_vote" in g["metrics"] for g in groups)
    assert synthetic["by_candidate"]
    assert {(c["judge_version"], c["criterion"], c["dimension"], c["label"])
            for c in synthetic["by_candidate"]} == {
        (c["judge_version"], c["criterion"], c["dimension"], c["label"])
        for c in synthetic["cells"]}


def test_inner_tables_are_read_as_typed_rows(synthetic: dict[str, Any]) -> None:
    typed = AgreementResult.from_json(synthetic)
    for cell, raw in zip(typed.cells, synthetic["cells"], strict=True):
        assert isinstance(cell.ceiling, HumanCeiling) and isinstance(cell.ceiling.alpha, Estimate)
        assert cell.ceiling.point == raw["ceiling"]["point"]
        assert cell.ceiling.n_pairs == raw["ceiling"]["n_pairs"]
        if cell.ceiling.pairs is not None:
            assert all(isinstance(p, RaterPair) for p in cell.ceiling.pairs)
            assert [p.kappa for p in cell.ceiling.pairs] == [
                p["kappa"] for p in raw["ceiling"]["pairs"]
            ]
        if raw["alt_test"] is None:
            assert cell.alt_test is None
        else:
            assert isinstance(cell.alt_test, AltTest)
            assert cell.alt_test.winning_rate == raw["alt_test"]["winning_rate"]
            assert all(isinstance(a, AltTestAnnotator) for a in cell.alt_test.annotators)
            assert len(cell.alt_test.annotators) == raw["alt_test"]["n_tested"]
    for row, raw in zip(typed.ceiling, synthetic["ceiling"], strict=True):
        assert isinstance(row, CeilingRow) and isinstance(row, HumanCeiling)
        assert (row.criterion, row.judge_version, row.dimension, row.label) == (
            raw["criterion"], None, raw["dimension"], raw["label"]
        )
        assert row.alpha.value == raw["alpha"]["value"]
    for conf, raw in zip(typed.confusion, synthetic["confusion"], strict=True):
        assert isinstance(conf, ConfusionRow)
        assert [list(r) for r in conf.matrix] == raw["matrix"]
        assert [c.support for c in conf.per_class] == [c["support"] for c in raw["per_class"]]
    for bias, raw in zip(typed.bias, synthetic["bias"], strict=True):
        assert isinstance(bias, BiasRow)
        assert (bias.audit, bias.value, bias.p_value, bias.strict_flip_rate, bias.n_pairs) == (
            raw["audit"], raw["value"], raw.get("p_value"), raw.get("strict_flip_rate"),
            raw.get("n_pairs"),
        )
    for system, raw in zip(typed.system, synthetic["system"], strict=True):
        assert isinstance(system, SystemRow) and isinstance(system.kendall, Estimate)
        assert all(isinstance(c, CandidateMeans) for c in system.candidates)
        assert system.kendall.ci_low == raw["kendall"]["ci_low"]
        assert [c.human_mean for c in system.candidates] == [
            c["human_mean"] for c in raw["candidates"]
        ]
    for dis, raw in zip(typed.disagreements, synthetic["disagreements"], strict=True):
        assert isinstance(dis, DisagreementRow)
        assert all(isinstance(e, DisagreementExample) for e in dis.examples)
        assert [e.subject for e in dis.examples] == [e["subject"] for e in raw["examples"]]


def test_ceiling_export_reads_the_same_values_as_the_json(synthetic: dict[str, Any]) -> None:
    """The CSV, read from the typed rows, against the raw JSON read by key."""
    typed = AgreementResult.from_json(synthetic)
    got = list(csv.DictReader(io.StringIO(table_csv(typed, "ceiling"))))
    raw = [(None, c) for c in synthetic["ceiling"]] + [
        (c["judge_version"], {**c["ceiling"], "dimension": c["dimension"], "label": c["label"]})
        for c in synthetic["cells"]
    ]
    assert len(got) == len(raw)
    for row, (jid, c) in zip(got, raw, strict=True):
        assert row["judge_version_id"] == ("" if jid is None else str(jid))
        assert (row["dimension"], row["stratum"]) == (c["dimension"], c["label"])
        assert row["alpha"] == ("" if c["alpha"]["value"] is None else str(c["alpha"]["value"]))
        assert row["kappa_weights"] == (c.get("pairwise_kappa_weights") or "")
        assert row["n_pairs"] == str(c["n_pairs"])
    for table in TABLES:
        assert table_csv(typed, table).count("\n") > 1, table


def test_a_missing_required_key_or_a_stray_one_is_refused(synthetic: dict[str, Any]) -> None:
    cell = synthetic["cells"][0]
    ceiling = {k: v for k, v in cell["ceiling"].items() if k != "point_metric"}
    broken = {**synthetic, "cells": [{**cell, "ceiling": ceiling}, *synthetic["cells"][1:]]}
    with pytest.raises(ResultFormatError) as err:
        AgreementResult.from_json(broken)
    assert err.value.path == "cells[0].ceiling.point_metric"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, AgreementResult.json_schema())
    bias = [{**synthetic["bias"][0], "colour": "red"}, *synthetic["bias"][1:]]
    with pytest.raises(ResultFormatError, match=r"bias\[0\]: unknown field\(s\) colour"):
        AgreementResult.from_json({**synthetic, "bias": bias})
    system = {k: v for k, v in synthetic["system"][0].items() if k != "per_subject_kendall"}
    with pytest.raises(ResultFormatError, match=r"system\[0\]\.per_subject_kendall"):
        AgreementResult.from_json({**synthetic, "system": [system, *synthetic["system"][1:]]})


# --- a real report: PandaLM through the importer, the service and the database ------------------


@pytest.fixture(scope="module")
def pandalm(
    request: pytest.FixtureRequest, django_db_setup: Any, django_db_blocker: Any
) -> Iterator[dict[str, Any]]:
    params = {"seed": 7, "n_resamples": 200, "system_level": True}
    for study in module_study(request, django_db_blocker, "pandalm-roundtrip", ["pandalm"]):
        with django_db_blocker.unblock():
            report = computed_report(study, params)
            data = rating_data_load(study=study, columns="agreement")
        yield {"study": study, "report": report, "data": data, "params": params}


@pytest.mark.django_db
def test_real_report_stores_what_the_computation_gives(pandalm: dict[str, Any]) -> None:
    report: ReportSnapshot = ReportSnapshot.objects.get(pk=pandalm["report"].pk)
    assert report.status == ReportSnapshot.Status.DONE, report.error
    stored = report.result
    assert AgreementResult.from_json(stored).to_json() == stored
    jsonschema.validate(stored, AgreementResult.json_schema())
    # Through the typed reader and the database, the JSON is the computation's, key for key.
    raw = _raw_json(pandalm["data"], pandalm["params"])
    assert stored == {**raw, "plan_version": stored["plan_version"]}
    # PandaLM's three annotators: listed pairs, the alternative annotator test, confusion
    # matrices and bias audits all occur in this report.
    typed = AgreementResult.from_json(stored)
    assert any(c.alt_test is not None for c in typed.cells)
    overall = next(c for c in typed.ceiling if c.label == "overall")
    assert overall.pairs is not None and len(overall.pairs) == 3
    assert typed.confusion and typed.bias and typed.disagreements


@pytest.mark.django_db
def test_real_report_pages_read_the_typed_rows(pandalm: dict[str, Any], client: Any) -> None:
    from django.urls import reverse

    study: Study = pandalm["study"]
    report = pandalm["report"]
    client.force_login(study.owner)
    kw = {"slug": study.slug, "report_id": report.pk}
    page = client.get(reverse("reports-audit", kwargs=kw))
    assert page.status_code == 200
    html = page.content.decode()
    typed = AgreementResult.from_json(report.result)
    crits = typed.criteria_by_id()
    for b in typed.bias:
        # The bias table names the criterion by its key.
        assert f"<td>{crits[b.criterion].key}</td><td>{b.audit}</td>" in html
    entry = typed.disagreements[0]
    dis = client.get(
        reverse("reports-disagreements", kwargs=kw),
        {"judge": entry.judge_version, "criterion": entry.criterion},
    )
    assert dis.status_code == 200
    assert f"Item {entry.examples[0].item}</h2>" in dis.content.decode()
