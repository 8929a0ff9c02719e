"""The selection report's page, charts, CSV tables and PDF, rendered from a stored snapshot.

The snapshots here carry a hand-written result of the SelectionResult v1 shape (docs/selection.md)
with a hostile candidate name, so the tests check what the page does with whatever the result
holds: the decision first, flips as the headline, "no data" cells, escaping, formula-safe CSV,
a self-contained PDF, and who may see it.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotations.models import SamplingPlan
from reports.selection.present import charts as selection_charts
from reports.selection.present import pdf as selection_pdf
from reports.selection.present import tables as selection_tables
from snapshots.models import ReportSnapshot
from studies.models import Item, Membership, StratumDimension, Study
from tests.browser.factories import PASSWORD, grading_study
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script>"
FORMULA = "=HYPERLINK(\"http://evil.example\",\"x\")"
DECISION = ("ship B: best on the mix by 4.1 points [1.2, 7.0], passes every gate; but A is "
            "better on long documents (flip)")


def _ppi(v: float, lo: float, hi: float, nl: int = 40, nu: int = 400,
         method: str = "ppi++") -> dict[str, Any]:
    return {"value": v, "ci_low": lo, "ci_high": hi, "se": (hi - lo) / 3.92, "n_labelled": nl,
            "n_unlabelled": nu, "lam": 0.7, "method": method, "level": 0.95, "warnings": []}


def _est(v: float, lo: float, hi: float, n: int = 300) -> dict[str, Any]:
    return {"value": v, "ci_low": lo, "ci_high": hi, "n_items": n, "method": "wilson",
            "level": 0.95, "n_resamples": None, "p_value": None, "warnings": []}


def selection_result(*, simulated: bool = False, judge_simulated: bool = False,
                     **overrides: Any) -> dict[str, Any]:
    """A SelectionResult v1 as C stores it: candidates A, B and a hostile name; strata short,
    long and unknown; the hostile candidate has no outputs on long documents."""
    cands = ["A", "B", HOSTILE]
    strata = ["short", "long", "unknown"]
    base = {"A": 0.70, "B": 0.74, HOSTILE: 0.60}
    estimates = []
    for c in cands:
        for s in [*strata, "mix"]:
            no_data = c == HOSTILE and s == "long"
            shift = 0.08 if (c == "A" and s == "long") else 0.0
            v = base[c] + shift
            estimates.append({
                "candidate": c, "metric": "rubric_pass_rate", "stratum": s,
                "n_outputs": 0 if no_data else 440, "n_labelled": 0 if no_data else 40,
                "no_data": no_data,
                "human": None if no_data else _ppi(v + 0.01, v - 0.12, v + 0.13, 40, 0,
                                                   "classical"),
                "judge": None if no_data else _ppi(v + 0.05, v + 0.02, v + 0.08, 0, 440,
                                                   "naive"),
                "ppi": None if no_data else _ppi(v, v - 0.05, v + 0.05),
            })
    result: dict[str, Any] = {
        "version": 1, "kind": "selection", "plan_version": 2, "fingerprint": "f" * 64,
        "simulated": simulated, "level": 0.95, "dimension": "length",
        "strata": strata, "mix": {"short": 0.6, "long": 0.3, "unknown": 0.1},
        "mix_source": "params", "plan_followed": False,
        "deviations": [{"field": "deployment_mix",
                        "message": f"the mix was changed by the request {HOSTILE}"}],
        "primary_metric": "rubric_pass_rate", "margin": 0.02,
        "judge": {"id": 1, "display": "judge-gpt v3", "simulated": judge_simulated},
        "candidates": [{"id": i + 1, "name": c, "model_family": "fam",
                        "public_scores": {"mmlu": 0.8 - i / 10}} for i, c in enumerate(cands)],
        "metrics": [{"key": "rubric_pass_rate", "label": "Rubric pass rate", "unit": "rate",
                     "higher_is_better": True}],
        "estimates": estimates,
        "differences": [{"metric": "rubric_pass_rate", "stratum": "mix", "a": "B", "b": "A",
                         "estimate": _ppi(0.041, 0.012, 0.070), "p_value": 0.004},
                        {"metric": "rubric_pass_rate", "stratum": "long", "a": "A", "b": "B",
                         "estimate": _ppi(0.04, 0.01, 0.07), "p_value": 0.008}],
        "rankings": [{"stratum": "mix", "order": ["B", "A", HOSTILE], "best": "B"},
                     {"stratum": "long", "order": ["A", "B"], "best": "A"}],
        "flips": [{"stratum": "long", "best": "A", "mix_best": "B",
                   "difference": _ppi(0.04, 0.01, 0.07), "p_value": 0.008,
                   "p_adjusted": 0.024, "correction": "holm"}],
        "gates": [{"candidate": HOSTILE, "stratum": "mix", "gate": "latency_p95_ms",
                   "threshold": 4000.0, "estimate": _est(5200.0, 4800.0, 5600.0),
                   "bound": 5600.0, "passed": False, "n": 1320},
                  {"candidate": "B", "stratum": "mix", "gate": "schema_valid_rate",
                   "threshold": 0.98, "estimate": _est(0.995, 0.989, 0.998), "bound": 0.989,
                   "passed": True, "n": 1320}],
        "gate_failures": {HOSTILE: ["latency_p95_ms"]},
        "thresholds": [{"candidate": "B", "metric": "rubric_pass_rate", "stratum": "mix",
                        "threshold": 0.7, "direction": ">=", "status": "uncertain"}],
        "frontier": [{"candidate": "A", "quality": 0.70, "latency_p95_ms": 1800.0,
                      "cost_per_1000": 1.2, "on_frontier": True},
                     {"candidate": "B", "quality": 0.74, "latency_p95_ms": 2600.0,
                      "cost_per_1000": 2.0, "on_frontier": True},
                     {"candidate": HOSTILE, "quality": 0.60, "latency_p95_ms": 5200.0,
                      "cost_per_1000": 2.4, "on_frontier": False}],
        "public_vs_private": {
            "benchmark": "mmlu",
            "rows": [{"candidate": HOSTILE, "public_score": 0.8, "public_rank": 1,
                      "private_rank": 3, "private_value": 0.60},
                     {"candidate": "A", "public_score": 0.7, "public_rank": 2,
                      "private_rank": 2, "private_value": 0.70},
                     {"candidate": "B", "public_score": 0.6, "public_rank": 3,
                      "private_rank": 1, "private_value": 0.74}],
            "kendall_tau": _est(-1.0, -1.0, 0.3, 3),
            "flags": [{"candidate": HOSTILE, "message": "leads publicly, last on your items"}]},
        "decision": {"verdict": "ship", "candidate": "B", "runner_up": "A",
                     "difference": _ppi(0.041, 0.012, 0.070), "text": DECISION},
        "next_labels": {"target_se": 0.01, "per_stratum": {"short": 120, "long": 60,
                                                           "unknown": 20},
                        "total": 200, "feasible": True, "se_current": 0.018,
                        "se_planned": 0.0098},
        "pairwise": None,
        "missing": [],
        "warnings": [f"warning {HOSTILE}"],
    }
    result.update(overrides)
    return result


def selection_snapshot(study: Study, result: dict[str, Any] | None = None, *,
                       status: str = ReportSnapshot.Status.DONE) -> ReportSnapshot:
    """A selection snapshot row holding `result` (default: `selection_result()`)."""
    done = status == ReportSnapshot.Status.DONE
    return ReportSnapshot.objects.create(
        computed_at=timezone.now() if done else None,
        study=study, kind="selection", status=status, params={"seed": 0},
        input_fingerprint="f" * 64,
        result=(result or selection_result()) if done else None,
        result_version=1 if done else None,
    )


@pytest.fixture
def lead_page(lead: Any) -> Client:
    client = Client()
    client.force_login(lead)
    return client


def _detail(snap: ReportSnapshot) -> str:
    return reverse("reports-selection-detail",
                   kwargs={"slug": snap.study.slug, "snapshot_id": snap.pk})


def _csv(snap: ReportSnapshot, table: str) -> str:
    return reverse("reports-selection-csv",
                   kwargs={"slug": snap.study.slug, "snapshot_id": snap.pk, "table": table})


def _text(html: str) -> str:
    """The page's text with tags dropped and whitespace folded (for sentence checks)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_decision_first_then_flips_and_every_section(study: Study, lead_page: Client) -> None:
    snap = selection_snapshot(study)
    r = lead_page.get(_detail(snap))
    assert r.status_code == 200
    assert "script-src 'self'" in r["Content-Security-Policy"]
    html = r.content.decode()
    # Nothing the policy would block: no inline script or style; the one script is the site's
    # own file (it opens a collapsed section a link points to).
    assert re.findall(r"<script[^>]*>", html) == [
        '<script src="/static/js/report_sections.js" defer>']
    assert " style=" not in html
    # The decision comes before the flips, the flips before gates and estimates.
    order = [html.index(x) for x in ('id="decision-heading"', DECISION.split(":")[0],
                                     '>Ranking flips</h2>', 'id="gates-heading"',
                                     'id="estimates-heading"', 'id="differences-heading"')]
    assert order == sorted(order)
    assert 'class="decision-verdict">Ship B</p>' in html
    text = _text(html)
    for sentence in (
        "In 1 stratum another candidate is better than the mix's best",
        "long A B +4.0 points [+1.0, +7.0]",                    # the flip row
        "0.024 (Holm)",
        "after Holm's correction across strata",
        "a real difference is more than 2.0 points",
        "fails p95 latency (ms) on the deployment mix",           # gate failure
        "upper bound ≤ 4,000 5,200 [4,800, 5,600] 5,600 1320 fail",
        "74.0 % [69.0, 79.0]",                                    # B on the mix, PPI
        "n = 40 labelled + 400 judged",
        "+4.1 points [+1.2, +7.0]",                              # the decision's difference
        "Kendall's tau between the mmlu rank",
        "-1.000 [-1.000, 0.300]",
        "About 200 more human labels",
        "not followed as written",                               # deviations, never silent
        "the mix was changed by the request",
    ):
        assert sentence in text, sentence
    assert "Create a sampling plan for these 200 labels" in text
    # Every table has a caption and column headers with a scope.
    assert html.count("<table") == html.count("<caption>")
    assert html.count('<th scope="col">') > 30
    assert "<th>" not in html


def test_no_data_cells_are_never_zero(study: Study, lead_page: Client) -> None:
    snap = selection_snapshot(study)
    html = lead_page.get(_detail(snap)).content.decode()
    row = re.search(r"<tr><th scope=\"row\">&lt;script&gt;alert\(1\)&lt;/script&gt;</th>"
                    r"<td>long</td>(.*?)</tr>", html, re.S)
    assert row is not None
    cells = re.findall(r"<td class=\"num[^\"]*\">(.*?)</td>", row.group(1), re.S)
    assert cells[0] == "0" and cells[2:] == ["no data"] * 3
    assert row.group(1).count("no-data") == 3
    assert "0.0 %" not in row.group(1)


def test_hostile_names_are_escaped_everywhere(study: Study, lead_page: Client) -> None:
    snap = selection_snapshot(study)
    html = lead_page.get(_detail(snap)).content.decode()
    assert HOSTILE not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    for name in ("reports-selection-pareto",):
        svg = lead_page.get(reverse(name, kwargs={"slug": study.slug, "snapshot_id": snap.pk}))
        assert svg["Content-Type"] == "image/svg+xml"
        assert svg["Content-Security-Policy"].startswith("default-src 'none'")
        body = svg.content.decode()
        assert HOSTILE not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    forest = lead_page.get(reverse("reports-selection-forest", kwargs={
        "slug": study.slug, "snapshot_id": snap.pk, "metric": 0})).content.decode()
    assert HOSTILE not in forest and "&lt;script&gt;" in forest
    assert lead_page.get(reverse("reports-selection-forest", kwargs={
        "slug": study.slug, "snapshot_id": snap.pk, "metric": 1})).status_code == 404


def test_charts_are_accessible_deterministic_and_show_intervals() -> None:
    result = selection_result(simulated=True)
    one = selection_charts.forest_svg(result, "rubric_pass_rate")
    assert one == selection_charts.forest_svg(result, "rubric_pass_rate")
    svg = one.decode()
    assert re.search(r'<svg [^>]*role="img" aria-labelledby="forest-rubric_pass_rate-title '
                     r'forest-rubric_pass_rate-desc"', svg)
    title = re.search(r"<title id=\"forest-rubric_pass_rate-title\">(.*?)</title>", svg)
    assert title and "Rubric pass rate" in title.group(1) and "simulated" in title.group(1)
    desc = re.search(r"<desc id=\"forest-rubric_pass_rate-desc\">(.*?)</desc>", svg, re.S)
    assert desc is not None
    assert "B · deployment mix: prediction-powered 74.0 % [69.0, 79.0]" in desc.group(1)
    assert "&lt;script&gt;alert(1)&lt;/script&gt; · long: no data" in desc.group(1)
    assert "<dc:date>" not in svg
    # One mark per drawn estimate: n labels on the right for the 11 rows with data.
    assert svg.count("n=40 lab. + 400 judged") == 11
    pareto = selection_charts.pareto_svg(result).decode()
    assert pareto == selection_charts.pareto_svg(result).decode()
    assert "A: Rubric pass rate 70.0 %, p95 latency 1,800 ms, cost per 1,000 1.20, on the " \
           "frontier." in pareto
    assert "not on the frontier" in pareto


def test_chart_text_with_dollars_is_not_mathtext() -> None:
    result = selection_result()
    for e in result["estimates"]:
        if e["candidate"] == "A":
            e["candidate"] = "cost $5 $"
    svg = selection_charts.forest_svg(result, "rubric_pass_rate").decode()
    assert "cost $5 $ · short" in svg


def test_every_table_as_csv_with_formulas_neutralised(study: Study, lead_page: Client) -> None:
    result = selection_result()
    for e in result["estimates"]:
        if e["candidate"] == "A":
            e["candidate"] = FORMULA
    result["frontier"][0]["candidate"] = "@SUM(A1)"
    snap = selection_snapshot(study, result)
    expected_rows = {"estimates": 12, "differences": 2, "flips": 1, "gates": 2, "thresholds": 1,
                     "frontier": 3, "public_vs_private": 3, "next_labels": 3, "rankings": 5,
                     "pairwise": 0, "bradley_terry": 0, "deviations": 1}
    assert set(expected_rows) == set(selection_tables.TABLES)
    for table, count in expected_rows.items():
        r = lead_page.get(_csv(snap, table))
        assert r.status_code == 200, table
        assert r["Content-Type"].startswith("text/csv")
        assert f"selection-{snap.pk}-{table}.csv" in r["Content-Disposition"]
        rows = list(csv.reader(io.StringIO(r.content.decode())))
        assert len(rows) == count + 1, table
        for row in rows[1:]:
            for cell in row:
                assert not cell.startswith(("=", "@", "+")), (table, cell)
    estimates = list(csv.DictReader(io.StringIO(lead_page.get(_csv(snap, "estimates"))
                                                .content.decode())))
    assert {r["candidate"] for r in estimates} >= {"'" + FORMULA, HOSTILE}
    missing = next(r for r in estimates if r["candidate"] == HOSTILE and r["stratum"] == "long")
    assert missing["no_data"] == "true" and missing["ppi_value"] == ""
    mix_b = next(r for r in estimates if r["candidate"] == "B" and r["stratum"] == "mix")
    assert float(mix_b["ppi_ci_low"]) == pytest.approx(0.69)
    frontier = lead_page.get(_csv(snap, "frontier")).content.decode()
    assert "'@SUM(A1)" in frontier
    # a negative number stays a number
    pvp = list(csv.reader(io.StringIO(lead_page.get(_csv(snap, "differences"))
                                      .content.decode())))
    assert pvp[1][4] == "0.041"
    assert lead_page.get(_csv(snap, "nope")).status_code == 404


def test_csv_cell_rules() -> None:
    assert selection_tables.csv_cell("-0.5") == "-0.5"
    assert selection_tables.csv_cell("-cmd") == "'-cmd"
    assert selection_tables.csv_cell("\t=1") == "'\t=1"
    assert selection_tables.csv_cell(None) == ""
    assert selection_tables.csv_cell(0.1) == "0.1"
    assert selection_tables.csv_cell(False) == "false"


def test_pdf_is_self_contained_and_says_the_decision(study: Study, lead_page: Client,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    snap = selection_snapshot(study, selection_result(simulated=True))
    documents: list[Any] = []
    fetched: list[str] = []
    render = selection_pdf.pdf_document
    original_refuse = selection_pdf.refuse_url

    def spy(html: str) -> Any:
        assert HOSTILE not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "<link" not in html and "<script" not in html
        sources = re.findall(r'<img src="([^"]*)"', html)
        assert len(sources) == 2  # the forest plot and the Pareto plot, embedded
        assert all(src.startswith("data:image/svg+xml;base64,") for src in sources)
        doc = render(html)
        documents.append(doc)
        return doc

    def refuse(url: str, *args: Any, **kwargs: Any) -> Any:
        fetched.append(url)
        return original_refuse(url)

    monkeypatch.setattr(selection_pdf, "pdf_document", spy)
    monkeypatch.setattr(selection_pdf, "refuse_url", refuse)
    r = lead_page.get(reverse("reports-selection-pdf",
                              kwargs={"slug": study.slug, "snapshot_id": snap.pk}))
    assert r.status_code == 200 and r["Content-Type"] == "application/pdf"
    assert r.content.startswith(b"%PDF-")
    assert f"selection-{snap.pk}.pdf" in r["Content-Disposition"]
    # Only the two embedded charts were read; nothing else, not even a font or a stylesheet.
    assert len(fetched) == 2 and all(u.startswith("data:image/svg+xml;base64,") for u in fetched)
    (doc,) = documents
    assert len(doc.pages) >= 2
    text = re.sub(r"\s+", " ", selection_pdf.document_text(doc))
    assert DECISION in text
    assert "Ranking flips" in text and "judge-gpt v3" in text
    assert HOSTILE in text  # drawn as text, never parsed as markup
    assert "Simulated" in text
    assert "Create a sampling plan" not in text  # no forms in the PDF


def test_url_fetcher_refuses_everything_but_the_embedded_charts() -> None:
    for url in ("http://example.com/x.png", "file:///etc/passwd", "data:text/plain,hi",
                "data:image/svg+xml;base64,!!not-base64!!", "DATA:image/svg+xml;base64,PHN2Zz4="):
        with pytest.raises(selection_pdf.FetchRefused):
            selection_pdf.refuse_url(url)
    assert selection_pdf.refuse_url(selection_pdf.svg_data_url(b"<svg/>")) == b"<svg/>"
    html = ('<p>kept</p><img src="http://127.0.0.1:9/a.png"><img src="file:///etc/hostname">'
            '<link rel="stylesheet" href="file:///etc/hostname">')
    doc = selection_pdf.pdf_document(html)
    assert "kept" in selection_pdf.document_text(doc)
    assert "localhost" not in selection_pdf.document_text(doc)


@pytest.mark.parametrize("flag", ["simulated", "judge_simulated"])
def test_simulated_is_labelled(study: Study, lead_page: Client, flag: str) -> None:
    snap = selection_snapshot(study, selection_result(**{flag: True}))
    html = lead_page.get(_detail(snap)).content.decode()
    assert 'badge-simulated">simulated</span>' in html
    assert "Simulated:" in html
    real = selection_snapshot(study)
    assert "badge-simulated" not in lead_page.get(_detail(real)).content.decode()


def test_list_page_shows_latest_done_and_pending(study: Study, lead_page: Client) -> None:
    page = reverse("reports-selection", kwargs={"slug": study.slug})
    r = lead_page.get(page)
    assert r.status_code == 200 and b"No selection snapshot yet" in r.content
    old = selection_snapshot(study, selection_result(decision={
        "verdict": "too_close", "candidate": None, "runner_up": None, "difference": None,
        "text": "too close to call at the planned confidence"}))
    latest = selection_snapshot(study)
    pending = selection_snapshot(study, status=ReportSnapshot.Status.PENDING)
    html = lead_page.get(page).content.decode()
    assert f"snapshot #{latest.pk}" in html and DECISION in _text(html)
    assert f"Snapshot #{pending.pk} is pending" in html and 'http-equiv="refresh"' in html
    for s in (old, latest, pending):
        assert f'href="{_detail(s)}"' in html
    older = lead_page.get(_detail(old)).content.decode()
    assert "Too close to call" in older
    assert 'href="/studies/alpha/selection/" aria-current="page">Selection' in html
    # A pending snapshot's own page says so; its CSV, charts and PDF do not exist yet.
    r = lead_page.get(_detail(pending))
    assert r.status_code == 200 and f"Snapshot #{pending.pk} is pending" in r.content.decode()
    assert lead_page.get(_csv(pending, "estimates")).status_code == 404
    # Another kind's snapshot is not a selection snapshot.
    other = ReportSnapshot.objects.create(study=study, kind="calibration", status="done",
                                          result={"version": 1})
    assert lead_page.get(reverse("reports-selection-detail", kwargs={
        "slug": study.slug, "snapshot_id": other.pk})).status_code == 404


def test_partial_result_renders(study: Study, lead_page: Client) -> None:
    """A result with only the required keys (no human labels yet) says what is missing."""
    snap = selection_snapshot(study, {
        "version": 1, "kind": "selection", "simulated": False, "plan_version": None,
        "decision": {"verdict": "insufficient_data", "text": "No human label yet."},
        "missing": ["no human label yet"], "estimates": [], "flips": [], "gates": [],
        "frontier": [], "public_vs_private": None, "next_labels": None})
    r = lead_page.get(_detail(snap))
    assert r.status_code == 200
    text = _text(r.content.decode())
    for s in ("Insufficient data", "no human label yet", "No ranking flips",
              "No locked analysis plan", "No public benchmark scores"):
        assert s in text, s
    assert lead_page.get(_csv(snap, "estimates")).status_code == 200


def test_who_may_see_it(study: Study) -> None:
    snap = selection_snapshot(study)
    urls = [reverse("reports-selection", kwargs={"slug": study.slug}), _detail(snap),
            _csv(snap, "estimates"),
            reverse("reports-selection-pdf", kwargs={"slug": study.slug, "snapshot_id": snap.pk}),
            reverse("reports-selection-pareto",
                    kwargs={"slug": study.slug, "snapshot_id": snap.pk})]
    next_labels = reverse("reports-selection-next-labels",
                          kwargs={"slug": study.slug, "snapshot_id": snap.pk})
    viewer: Any = UserFactory(username="viewer")
    MembershipFactory(study=study, user=viewer, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(viewer)
    for url in urls[:3]:
        assert client.get(url).status_code == 200, url
    html = client.get(_detail(snap)).content.decode()
    assert "Create a sampling plan" not in html  # viewers read, leads act
    assert client.post(next_labels).status_code == 404
    assert client.post(urls[0], {"action": "build"}).status_code == 404
    for role in (Membership.Role.ANNOTATOR, None):
        user: Any = UserFactory(username=f"u-{role}")
        if role is not None:
            MembershipFactory(study=study, user=user, role=role)
        other = Client()
        other.force_login(user)
        for url in urls:
            assert other.get(url).status_code == 404, (role, url)
        assert other.post(next_labels).status_code == 404
    anonymous = Client().get(urls[1])
    assert anonymous.status_code == 302 and "login" in anonymous["Location"]


def test_hand_written_result_fits_the_typed_schema() -> None:
    """The page's fixture is the shape the selection kind stores (no drift between the two)."""
    from reports.selection.results import SelectionResult

    typed = SelectionResult.from_json(selection_result())
    assert typed.decision.text == DECISION and typed.flips[0].stratum == "long"


def _labelled_study() -> Any:
    """A study with outputs in two languages (a "lang" dimension) to draw next labels from."""
    g = grading_study(slug="support")
    StratumDimension.objects.create(study=g.study, key="lang", name="Language",
                                    kind="categorical", source="metadata.lang")
    for i, item in enumerate(Item.objects.filter(study=g.study).order_by("id")):
        item.strata = {"lang": "de" if i % 3 == 0 else "en"}
        item.save(update_fields=["strata"])
    return g


def _lang_result() -> dict[str, Any]:
    return selection_result(dimension="lang", strata=["de", "en"],
                            mix={"de": 0.5, "en": 0.5},
                            next_labels={"target_se": 0.01, "per_stratum": {"de": 2, "en": 1},
                                         "total": 3, "feasible": True, "se_current": 0.02,
                                         "se_planned": 0.01})


def test_next_labels_button_creates_a_sampling_plan(client: Client) -> None:
    g = _labelled_study()
    snap = selection_snapshot(g.study, _lang_result())
    client.force_login(g.lead)
    url = reverse("reports-selection-next-labels",
                  kwargs={"slug": g.study.slug, "snapshot_id": snap.pk})
    html = client.get(_detail(snap)).content.decode()
    assert f'action="{url}"' in html
    r = client.post(url)
    assert r.status_code == 302 and r["Location"] == _detail(snap)
    page = _text(client.get(_detail(snap)).content.decode())
    assert f"Sampling plan v2 created from snapshot #{snap.pk}" in page
    plan = SamplingPlan.objects.get(study=g.study, version=2)
    assert plan.spec["mode"] == "per_stratum" and plan.spec["dimension"] == "lang"
    assert lead_get_status(client, url) == 405
    # A snapshot that asks for no labels is refused with the reason on the page.
    none = selection_snapshot(g.study, selection_result(next_labels=None))
    client.post(reverse("reports-selection-next-labels",
                        kwargs={"slug": g.study.slug, "snapshot_id": none.pk}))
    assert "asks for no extra labels" in client.get(_detail(none)).content.decode()


def lead_get_status(client: Client, url: str) -> int:
    return int(client.get(url).status_code)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_lead_reads_the_decision_and_sends_next_labels_in_chromium(new_session: Any,
                                                                   viewport: str) -> None:
    g = _labelled_study()
    snap = selection_snapshot(g.study, _lang_result())
    s = new_session(viewport)
    s.login(g.lead.username, PASSWORD)
    page = s.page
    page.goto(s.url(f"/studies/{g.study.slug}/"))
    if viewport == "phone":  # the navigation wraps; the link is the same
        page.goto(s.url(f"/studies/{g.study.slug}/selection/"))
    else:
        page.get_by_role("link", name="Selection", exact=True).click()
    assert page.url.endswith(f"/studies/{g.study.slug}/selection/")
    page.get_by_role("link", name=f"#{snap.pk}", exact=True).first.click()
    assert page.url.endswith(_detail(snap))
    decision = page.locator(".decision-verdict")
    assert decision.inner_text() == "Ship B"
    assert DECISION in page.locator(".decision-text").inner_text()
    flips = page.get_by_role("heading", name="Ranking flips", level=2)
    assert flips.is_visible()
    # The flips (at a glance) come right after the decision, within one screen of it.
    glance_flips = page.locator("#glance-flips")
    assert glance_flips.bounding_box()["y"] < decision.bounding_box()["y"] + 800
    # Every detailed section is one click away: collapsed, and open after a click on its title.
    for section in page.locator("details.report-section").all():
        assert section.get_attribute("open") is None
        section.locator("summary").click()
        assert section.get_attribute("open") is not None
    # The charts load (as images from this server) and have their text alternative.
    for img in page.locator("figure.chart img").all():
        img.scroll_into_view_if_needed()
        page.wait_for_function("(el) => el.complete && el.naturalWidth > 0",
                               arg=img.element_handle())
        assert "same figures" in (img.get_attribute("alt") or "")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"horizontal scroll: {width}px"
    page.evaluate("window.scrollTo(0, 0)")
    if viewport == "desktop":
        # The screenshot shows the page as a lead first sees it: every section collapsed.
        page.reload()
        s.screenshot("docs/img/selection-report.png")
        page.locator("details#next > summary").click()
    button = page.get_by_role("button", name="Create a sampling plan for these 3 labels")
    with page.expect_navigation():
        button.click()
    assert "Sampling plan v2 created" in page.locator(".messages").inner_text()
    assert not s.page_errors and not s.dialogs
    assert not [e for e in s.console_errors if "Content Security Policy" in e]


def test_end_to_end_a_computed_snapshot_renders(client: Client) -> None:
    """A snapshot computed by the selection kind from the demo study (simulated judges and
    annotators) renders as a page, CSV and PDF, labelled simulated."""
    from django.core.management import call_command

    from demo import demo_data
    from reports.services import report_compute, report_snapshot_create

    call_command("demo_seed", items=60, stdout=io.StringIO())
    study = Study.objects.get(slug=demo_data.DEMO_SLUG)
    snap = report_snapshot_create(study=study, kind="selection",
                                  params={"dimension": "language"}, created_by=study.owner)
    snap = report_compute(report_id=snap.pk)
    assert snap.status == ReportSnapshot.Status.DONE, snap.error
    client.force_login(study.owner)
    r = client.get(_detail(snap))
    assert r.status_code == 200
    html = r.content.decode()
    result: dict[str, Any] = snap.result or {}
    decision = result["decision"]
    assert decision["text"] and _text(html).count(" ".join(decision["text"].split())) >= 1
    assert 'id="flips-heading">Ranking flips</h2>' in html
    assert "badge-simulated" in html  # the demo's judges and annotators are simulated
    for table in selection_tables.TABLES:
        assert client.get(_csv(snap, table)).status_code == 200, table
    for index in range(len(result["metrics"])):
        assert client.get(reverse("reports-selection-forest", kwargs={
            "slug": study.slug, "snapshot_id": snap.pk, "metric": index})).status_code == 200
    pdf = client.get(reverse("reports-selection-pdf",
                             kwargs={"slug": study.slug, "snapshot_id": snap.pk}))
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF-")


def test_next_labels_of_an_unreadable_result_is_refused_on_the_page(study: Study,
                                                                    lead_page: Client) -> None:
    snap = selection_snapshot(study, {"version": 1, "kind": "selection", "decision": {
        "verdict": "too_close", "text": "too close"}})
    r = lead_page.post(reverse("reports-selection-next-labels",
                               kwargs={"slug": study.slug, "snapshot_id": snap.pk}))
    assert r.status_code == 302
    page = lead_page.get(_detail(snap)).content.decode()
    assert "message-error" in page and "cannot be read" in page


def pairwise_section() -> dict[str, Any]:
    """A pairwise section of the SelectionResult v1 shape: A, B and the hostile name compared
    on "preferred"; the hostile candidate was never compared with A; B is the reference."""
    def rate(a: str, b: str, stratum: str, v: float, n: int = 200) -> dict[str, Any]:
        return {"a": a, "b": b, "stratum": stratum, "n_comparisons": n, "n_labelled": 40,
                "human": _ppi(v + 0.02, v - 0.12, v + 0.14, 40, 0, "classical"),
                "judge": _ppi(v - 0.03, v - 0.07, v + 0.01, 0, n, "naive"),
                "ppi": _ppi(v, v - 0.06, v + 0.06, 40, n)}
    return {
        "criterion": "preferred",
        "win_rates": [rate("A", "B", "short", 0.40), rate("A", "B", "mix", 0.35),
                      rate("B", HOSTILE, "mix", 0.80, 150)],
        "bradley_terry": [
            {"stratum": "mix", "candidate": "B", "strength": 0.0, "ci_low": None,
             "ci_high": None, "rank": 1},
            {"stratum": "mix", "candidate": "A", "strength": -0.62, "ci_low": -0.95,
             "ci_high": -0.29, "rank": 2},
            {"stratum": "mix", "candidate": HOSTILE, "strength": -1.39, "ci_low": -1.9,
             "ci_high": -0.88, "rank": 3},
            {"stratum": "short", "candidate": "B", "strength": 0.0, "ci_low": None,
             "ci_high": None, "rank": 1},
            {"stratum": "short", "candidate": "A", "strength": -0.41, "ci_low": -0.8,
             "ci_high": -0.02, "rank": 2}],
        "reference": "B",
    }


def test_pairwise_preferences_render_as_a_matrix_and_a_ranking(
    study: Study, lead_page: Client, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reports.selection.results import SelectionResult, upgrade_v1

    result = selection_result(pairwise=pairwise_section())
    typed = SelectionResult.from_json(result)
    assert typed.pairwise is not None and typed.pairwise.reference == "B"
    # A version 1 result is read as version 2 with the legacy rubric rule.
    assert typed.to_json() == upgrade_v1(result)
    assert typed.rubric_rule.kind == "legacy_half"
    snap = selection_snapshot(study, result)
    html = lead_page.get(_detail(snap)).content.decode()
    assert HOSTILE not in html
    section = html[html.index('id="pairwise-heading"'):html.index('id="deviations-heading"')]
    text = _text(section)
    assert "Pairwise preferences" in text and "a tie counting half a win" in text
    # The matrix on the mix, best first by the Bradley-Terry ranking: B, A, the hostile name.
    heads = re.findall(r'<th scope="col">(.*?)</th>', section)
    assert heads[:4] == ["Candidate", "over B", "over A",
                         "over &lt;script&gt;alert(1)&lt;/script&gt;"]
    row_b = re.search(r'<tr><th scope="row">B</th>(.*?)</tr>', section, re.S)
    assert row_b is not None
    cells = [_text(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row_b.group(1), re.S)]
    # B over A is 1 - (A over B): 65.0 % [59.0, 71.0]; B over the hostile name as stored.
    assert cells == [selection_tables.DASH, "65.0 % [59.0, 71.0] 200 comparisons, 40 labelled",
                     "80.0 % [74.0, 86.0] 150 comparisons, 40 labelled"]
    row_a = re.search(r'<tr><th scope="row">A</th>(.*?)</tr>', section, re.S)
    assert row_a is not None and "35.0 % [29.0, 41.0]" in row_a.group(1)
    assert "not compared" in row_a.group(1)
    for sentence in ("deployment mix 1 B 0 (reference)", "deployment mix 2 A -0.62 [-0.95, -0.29]",
                     "short 2 A -0.41 [-0.80, -0.02]", "against B, whose strength is 0"):
        assert sentence in text, sentence
    assert section.count("<table") == section.count("<caption>") == 2
    # The CSV tables.
    rows = list(csv.DictReader(io.StringIO(lead_page.get(_csv(snap, "pairwise"))
                                           .content.decode())))
    assert [(r["a"], r["b"], r["stratum"]) for r in rows] == [
        ("A", "B", "short"), ("A", "B", "mix"), ("B", HOSTILE, "mix")]
    assert float(rows[1]["ppi_value"]) == pytest.approx(0.35)
    assert rows[1]["criterion"] == "preferred"
    bt = list(csv.DictReader(io.StringIO(lead_page.get(_csv(snap, "bradley_terry"))
                                         .content.decode())))
    assert len(bt) == 5 and bt[0]["ci_low"] == "" and bt[1]["strength"] == "-0.62"
    assert {r["reference"] for r in bt} == {"B"}
    # The PDF has the same section, without the CSV links.
    documents: list[Any] = []
    render = selection_pdf.pdf_document

    def spy(html: str) -> Any:
        documents.append(render(html))
        return documents[-1]

    monkeypatch.setattr(selection_pdf, "pdf_document", spy)
    pdf = lead_page.get(reverse("reports-selection-pdf",
                                kwargs={"slug": study.slug, "snapshot_id": snap.pk}))
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF-")
    pdf_text = re.sub(r"\s+", " ", selection_pdf.document_text(documents[0]))
    assert "Pairwise preferences" in pdf_text and "65.0 % [59.0, 71.0]" in pdf_text
    assert "Win rates as CSV" not in pdf_text


def test_without_pairwise_criterion_there_is_no_pairwise_section(study: Study,
                                                                  lead_page: Client) -> None:
    html = lead_page.get(_detail(selection_snapshot(study))).content.decode()
    assert 'id="pairwise-heading"' not in html


def test_details_collapsed_on_the_page_and_printed_in_full_in_the_pdf(
    study: Study, lead_page: Client, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The page opens on the decision and the chips; each detailed table sits in a collapsed
    section whose id is its anchor. The PDF prints every one of those tables."""
    snap = selection_snapshot(study, selection_result(simulated=True))
    html = lead_page.get(_detail(snap)).content.decode()
    captions = ["Gates per candidate and stratum", "per candidate and stratum (",
                "Differences between candidates", "The plan's criteria thresholds",
                "p95 latency and cost per 1,000 outputs", "Extra human labels per stratum",
                "Deployment mix"]
    sections = re.findall(r'<details class="card report-section" id="(\w+)"[^>]*>', html)
    assert {"flips", "gates", "estimates", "differences", "thresholds", "frontier", "next",
            "deviations"} <= set(sections)
    assert not re.search(r'<details class="card report-section"[^>]*\bopen\b', html)
    head = html[:html.index('<details class="card report-section"')]
    assert 'id="decision-heading"' in head and 'class="chip' in head
    assert 'class="chart glance-chart"' in head  # the primary metric's forest, up top
    for caption in captions:
        assert caption in _text(html[html.index('<details class="card report-section"'):]), caption
    documents: list[Any] = []
    render = selection_pdf.pdf_document

    def keep(pdf_html: str) -> Any:
        assert not re.search(r'<details class="card report-section"(?![^>]*\bopen\b)', pdf_html)
        doc = render(pdf_html)
        documents.append(doc)
        return doc

    monkeypatch.setattr(selection_pdf, "pdf_document", keep)
    r = lead_page.get(reverse("reports-selection-pdf",
                              kwargs={"slug": study.slug, "snapshot_id": snap.pk}))
    assert r.status_code == 200
    text = re.sub(r"\s+", " ", selection_pdf.document_text(documents[0]))
    for caption in captions:
        # WeasyPrint's text may carry a typographic apostrophe (U+2019) for "'".
        assert caption in text or caption.replace("'", "\u2019") in text, caption
