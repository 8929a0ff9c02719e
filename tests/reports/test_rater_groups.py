"""Agreement by rater group (issue 15, section 5; the `rater_groups` report parameter).

A small study with `rater.group` = expert / crowd / author (and one rater without a group) is
imported through `import_ratings` and reported through `report agreement` (the CLI); every
figure is checked against scikit-learn (Cohen's kappa, accuracy, quadratic-weighted kappa), the
`krippendorff` package and scipy on arrays built here from the same rows, with the consensus
(majority of three, mean rounded half up) computed here too.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
from itertools import combinations
from pathlib import Path
from typing import Any

import krippendorff
import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from rest_framework.test import APIClient
from scipy import stats
from sklearn.metrics import accuracy_score, cohen_kappa_score

from reports.agreement.present.export import table_csv
from reports.agreement.results import AgreementResult
from snapshots.models import ReportSnapshot
from studies.models import Study
from tests.factories import api_token_create

pytestmark = pytest.mark.django_db

N = 12
MIN_ITEMS = 6
GROUPS = {"expert": ["e1", "e2", "e3"], "crowd": ["c1", "c2", "c3"]}
AUTHORS = ["a1", "a2"]  # rate the first four items only: too few for min_items
LANG = ["en" if i < N // 2 else "de" for i in range(N)]


def _data() -> dict[str, Any]:
    """Per rater: binary codes (1 pass) and ordinal points per item, and the judge's."""
    rng = np.random.default_rng(15)
    truth_b = rng.integers(0, 2, N)
    truth_o = rng.integers(1, 6, N)
    raters = [*GROUPS["expert"], *GROUPS["crowd"], *AUTHORS, "r0"]
    flip = {r: (0.1 if r.startswith("e") else 0.3) for r in raters}
    binary = {r: np.where(rng.random(N) < flip[r], 1 - truth_b, truth_b) for r in raters}
    ordinal = {
        r: np.clip(truth_o + rng.integers(-1, 2 if r.startswith("c") else 1, N), 1, 5)
        for r in raters
    }
    judge_b = np.where(rng.random(N) < 0.2, 1 - truth_b, truth_b)
    judge_o = np.clip(truth_o + rng.integers(-1, 2, N), 1, 5)
    return {"binary": binary, "ordinal": ordinal, "judge_b": judge_b, "judge_o": judge_o}


DATA = _data()


def _rows(group_name: str = "expert") -> list[dict[str, Any]]:
    rows = []
    for i in range(N):
        base = {"item_id": f"q{i}", "output_id": f"o{i}", "stratum.lang": LANG[i]}
        for rater in DATA["binary"]:
            if rater in AUTHORS and i >= 4:
                continue
            group = ("author" if rater in AUTHORS else "" if rater == "r0" else
                     group_name if rater.startswith("e") else "crowd")
            for crit, values in (("correct", DATA["binary"]), ("quality", DATA["ordinal"])):
                v = values[rater][i]
                rows.append({
                    **base, "rater_id": rater, "rater_kind": "human", "rater.group": group,
                    "criterion": crit,
                    "value": ("pass" if v else "fail") if crit == "correct" else int(v),
                })
        rows.append({**base, "rater_id": "j", "rater_kind": "judge", "judge_version": "v1",
                     "criterion": "correct", "value": "pass" if DATA["judge_b"][i] else "fail"})
        rows.append({**base, "rater_id": "j", "rater_kind": "judge", "judge_version": "v1",
                     "criterion": "quality", "value": int(DATA["judge_o"][i])})
    return rows


def _import(tmp_path: Path, slug: str, rows: list[dict[str, Any]], lead: Any) -> None:
    path = tmp_path / f"{slug}.csv"
    with path.open("w", encoding="utf-8", newline="") as fh:
        header: list[str] = []
        for r in rows:
            header += [k for k in r if k not in header]
        w = csv.DictWriter(fh, fieldnames=header)
        w.writeheader()
        # An empty rater.group cell: the rater has no group (r0).
        w.writerows(rows)
    call_command("import_ratings", str(path), "--study", slug, "--owner", lead.username,
                 "--scale", "quality=ordinal:1-5", stdout=io.StringIO(), stderr=io.StringIO())


def _report(tmp_path: Path, slug: str, **extra: Any) -> dict[str, Any]:
    out = tmp_path / f"{slug}-report.json"
    params = {"n_resamples": 200, "seed": 1, "min_items": MIN_ITEMS, **extra}
    call_command("report", "agreement", "--study", slug, "--params", json.dumps(params),
                 "--out", str(out), stdout=io.StringIO())
    return json.loads(out.read_text())


def _majority(raters: list[str], idx: np.ndarray) -> np.ndarray:
    votes = np.array([DATA["binary"][r][idx] for r in raters])
    assert len(raters) % 2 == 1  # three raters: never a tie
    return (votes.sum(axis=0) * 2 > len(raters)).astype(int)


def _mean(raters: list[str], idx: np.ndarray) -> np.ndarray:
    return np.mean([DATA["ordinal"][r][idx] for r in raters], axis=0)


def _pooled(matrix: np.ndarray) -> tuple[float, int]:
    agree = total = 0
    for col in matrix.T:
        for x, y in combinations(col, 2):
            total += 1
            agree += int(x == y)
    return agree / total, total


def _find(result: dict[str, Any], crit: str, kind: str, group: str, other: str | None = None,
          label: str = "overall") -> dict[str, Any]:
    cid = next(c["id"] for c in result["criteria"] if c["key"] == crit)
    [row] = [r for r in result["rater_groups"] if r["criterion"] == cid and r["kind"] == kind
             and r["group"] == group and r["other_group"] == other and r["label"] == label]
    return row


@pytest.fixture
def grouped(lead: Any, tmp_path: Path) -> dict[str, Any]:
    _import(tmp_path, "groups", _rows(), lead)
    return _report(tmp_path, "groups", rater_groups="group")


def test_figures_by_rater_group_match_independent_libraries(grouped: dict[str, Any]) -> None:
    result = grouped["result"]
    assert result["version"] == 4 and result["params"]["rater_groups"] == "group"
    members = {m["criterion"]: m for m in result["rater_group_members"]}
    for m in members.values():
        assert m["attribute"] == "group" and m["n_raters_without"] == 1  # r0
        assert m["groups"] == [{"group": "author", "n_raters": 2},
                               {"group": "crowd", "n_raters": 3},
                               {"group": "expert", "n_raters": 3}]
    every = np.arange(N)
    de = np.arange(N // 2, N)
    j_b, j_o = DATA["judge_b"], DATA["judge_o"]
    close = {"abs": 1e-9}

    # Binary: the judge against each group's majority (Cohen's kappa, accuracy).
    for group in ("expert", "crowd"):
        row = _find(result, "correct", "judge_vs_group", group)
        maj = _majority(GROUPS[group], every)
        assert row["n_subjects"] == N and row["n_raters"] == 3 and not row["too_few"]
        assert row["primary_metric"] == "kappa"
        assert row["metrics"]["kappa"]["value"] == pytest.approx(cohen_kappa_score(j_b, maj),
                                                                 **close)
        assert row["metrics"]["accuracy"]["value"] == pytest.approx(accuracy_score(maj, j_b),
                                                                    **close)
        k = row["metrics"]["kappa"]
        assert k["ci_low"] <= k["value"] <= k["ci_high"]
        # The judge against each of the group's votes (result version 4), counted here.
        votes = [DATA["binary"][r][i] == j_b[i] for r in GROUPS[group] for i in every]
        per_vote = row["metrics"]["agreement_per_vote"]
        assert per_vote["value"] == pytest.approx(sum(votes) / len(votes), **close)
        assert per_vote["n"] == len(votes) == 3 * N
    # ... per stratum too (lang = de: the last six items).
    row = _find(result, "correct", "judge_vs_group", "expert", label="de")
    assert row["n_subjects"] == 6 and row["dimension"] == "lang"
    assert row["metrics"]["kappa"]["value"] == pytest.approx(
        cohen_kappa_score(j_b[de], _majority(GROUPS["expert"], de)), **close)
    # Authors rated four items: fewer than min_items, no numbers.
    row = _find(result, "correct", "judge_vs_group", "author")
    assert row["too_few"] and row["n_subjects"] == 4 and row["metrics"] == {}
    # Group vs group: experts' majority against the crowd's.
    row = _find(result, "correct", "group_vs_group", "crowd", "expert")
    assert row["metrics"]["kappa"]["value"] == pytest.approx(
        cohen_kappa_score(_majority(GROUPS["crowd"], every), _majority(GROUPS["expert"], every)),
        **close)
    assert _find(result, "correct", "group_vs_group", "author", "crowd")["too_few"]
    # Within a group: nominal alpha (krippendorff) and pooled pair agreement.
    for group in ("expert", "crowd"):
        row = _find(result, "correct", "within_group", group)
        matrix = np.array([DATA["binary"][r] for r in GROUPS[group]], dtype=float)
        alpha = krippendorff.alpha(reliability_data=matrix, level_of_measurement="nominal",
                                   value_domain=[0.0, 1.0])
        assert row["metrics"]["krippendorff_alpha"]["value"] == pytest.approx(alpha, **close)
        pooled, pairs = _pooled(matrix)
        assert row["metrics"]["pooled_agreement"]["value"] == pytest.approx(pooled, **close)
        assert row["n_pairs"] == pairs == 3 * N and row["n_subjects"] == N
    assert _find(result, "correct", "within_group", "author")["too_few"]

    # Ordinal: quadratic-weighted kappa against the group mean rounded half up, Spearman
    # against the mean; group vs group with the first group's rounded mean in the judge's place.
    for group in ("expert", "crowd"):
        row = _find(result, "quality", "judge_vs_group", group)
        mean = _mean(GROUPS[group], every)
        rounded = np.floor(mean + 0.5)
        assert row["primary_metric"] == "qwk"
        assert row["metrics"]["qwk"]["value"] == pytest.approx(
            cohen_kappa_score(j_o, rounded, weights="quadratic", labels=[1, 2, 3, 4, 5]),
            **close)
        assert row["metrics"]["spearman"]["value"] == pytest.approx(
            stats.spearmanr(j_o, mean)[0], **close)
    row = _find(result, "quality", "group_vs_group", "crowd", "expert")
    crowd_r = np.floor(_mean(GROUPS["crowd"], every) + 0.5)
    expert_r = np.floor(_mean(GROUPS["expert"], every) + 0.5)
    assert row["metrics"]["qwk"]["value"] == pytest.approx(
        cohen_kappa_score(crowd_r, expert_r, weights="quadratic", labels=[1, 2, 3, 4, 5]),
        **close)
    row = _find(result, "quality", "within_group", "crowd")
    matrix = np.array([DATA["ordinal"][r] for r in GROUPS["crowd"]], dtype=float)
    alpha = krippendorff.alpha(reliability_data=matrix, level_of_measurement="ordinal",
                               value_domain=[1.0, 2.0, 3.0, 4.0, 5.0])
    assert row["metrics"]["krippendorff_alpha"]["value"] == pytest.approx(alpha, **close)
    assert row["metrics"]["pooled_agreement"]["value"] == pytest.approx(_pooled(matrix)[0],
                                                                        **close)

    # The typed result reads it by attribute, and the CSV export has a row per figure.
    typed = AgreementResult.from_json(result)
    assert typed.rater_groups is not None and typed.rater_group_members is not None
    titles = {r.title() for r in typed.rater_groups}
    assert {"judge vs expert", "crowd vs expert", "within expert"} <= titles
    text = table_csv(typed, "rater_groups")
    rows = list(csv.DictReader(io.StringIO(text)))
    [kappa] = [r for r in rows if r["comparison"] == "j v1 vs expert"
               and r["stratum"] == "overall" and r["metric"] == "kappa"]
    expert = _find(result, "correct", "judge_vs_group", "expert")["metrics"]["kappa"]
    assert kappa["criterion"] == "correct" and kappa["primary"] == "True"
    assert float(kappa["value"]) == pytest.approx(expert["value"], abs=1e-12)
    assert [r["criterion"] for r in rows if r["comparison"] == "j v1 vs expert"
            and r["stratum"] == "overall" and r["primary"] == "True"] == ["correct", "quality"]
    assert any(r["too_few"] == "True" and r["group"] == "author" for r in rows)


def test_the_section_is_absent_without_the_parameter(lead: Any, tmp_path: Path) -> None:
    _import(tmp_path, "nogroups", _rows(), lead)
    result = _report(tmp_path, "nogroups")["result"]
    assert result["params"]["rater_groups"] is None
    assert "rater_groups" not in result and "rater_group_members" not in result
    typed = AgreementResult.from_json(result)
    assert typed.rater_groups is None
    assert table_csv(typed, "rater_groups").count("\n") == 1  # the header only


def test_a_bad_rater_groups_parameter_is_refused(lead: Any, tmp_path: Path) -> None:
    _import(tmp_path, "badgroups", _rows(), lead)
    for bad in (["group"], 3, "", " group"):
        with pytest.raises(CommandError) as info:
            _report(tmp_path, "badgroups", rater_groups=bad)
        assert "params.rater_groups" in str(info.value)
    assert not ReportSnapshot.objects.filter(study__slug="badgroups").exists()


def test_an_attribute_no_rater_has_leaves_every_rater_out(lead: Any, tmp_path: Path) -> None:
    _import(tmp_path, "nokey", _rows(), lead)
    result = _report(tmp_path, "nokey", rater_groups="seniority")["result"]
    assert result["rater_groups"] == []
    assert {m["n_raters_without"] for m in result["rater_group_members"]} == {9}


def test_the_page_shows_the_groups_escaped(lead: Any, tmp_path: Path, client: Any) -> None:
    bait = "<script>alert(1)</script>"
    _import(tmp_path, "pagegroups", _rows(bait), lead)
    body = _report(tmp_path, "pagegroups", rater_groups="group")
    study = Study.objects.get(slug="pagegroups")
    client.force_login(lead)
    page = client.get(
        reverse("reports-audit", kwargs={"slug": study.slug, "report_id": body["id"]})
    ).content.decode()
    assert bait not in page and html.escape(bait) in page
    tables = re.findall(r'<table class="data audit-table audit-groups">(.*?)</table>', page, re.S)
    assert len(tables) == 2  # one per criterion
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", tables[0])).split())
    assert (f"agreement by rater group (group: {bait} 3 raters, author 2 raters, crowd 3 "
            "raters;") in text
    assert "1 rater without group, left out" in text
    assert f"j v1 vs {bait}" in text and f"{bait} vs crowd" in text
    assert f"within {bait}" in text and "too few" in text
    # The judge against each vote of a group, beside its majority figure (binary: no ties).
    row = next(r for r in body["result"]["rater_groups"] if r["kind"] == "judge_vs_group"
               and r["group"] == "crowd" and r["label"] == "overall"
               and r["metrics"].get("agreement_per_vote"))
    assert "Judge vs each vote" in text
    assert f"{row['metrics']['agreement_per_vote']['value']:.3f}" in text
    # The API's GET of the report carries the same section as the CLI's JSON.
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=lead)}")
    got = api.get(reverse("reports-api-detail",
                          kwargs={"slug": study.slug, "report_id": body["id"]}))
    assert got.status_code == 200
    assert got.json()["result"]["rater_groups"] == body["result"]["rater_groups"]
    assert got.json()["result"]["rater_group_members"] == body["result"]["rater_group_members"]
