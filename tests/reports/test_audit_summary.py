"""The audit page a lead can act on: the plain-language summary and next steps, colours that
follow the verdict, readable names and intervals, the warning on a system-level correlation over
few candidates, the trust rule as a list; pure tests on hand-built results, page tests on a
computed report, and the page in Chromium at phone and desktop widths."""

from __future__ import annotations

import io
import itertools
import math
import random
import re
from typing import Any

import pytest
from django.urls import reverse
from scipy import stats

from imports.generic import ratings_import, ratings_read
from reports.agreement import NOT_TRUSTWORTHY, TOO_FEW, TRUSTWORTHY, params_validate
from reports.agreement.present.charts import VERDICT_FILL
from reports.agreement.present.summary import (
    EMPTY,
    SENTENCE_MAX_STRATA,
    SYSTEM_MIN_CANDIDATES,
    criterion_summary,
    estimate_text,
    interval_text,
    judge_summaries,
    method_text,
    metric_name,
    next_step,
    number_text,
    stratum_words,
    system_warning,
    verdict_class,
)
from reports.agreement.results import (
    AgreementCell,
    AgreementResult,
    CriterionRef,
    Estimate,
    HumanCeiling,
    JudgeRef,
)
from reports.agreement.verdict import rule_items, rule_text
from snapshots.models import ReportSnapshot
from studies.models import Criterion, Membership, Study
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.factories import MembershipFactory, StudyFactory, UserFactory

from .conftest import computed_report

PARAMS = params_validate({"n_resamples": 200})
CROSS = "\u00d7"

# --- hand-built results ---


def _est(value: float | None, lo: float | None = None, hi: float | None = None) -> Estimate:
    return Estimate(value=value, ci_low=lo, ci_high=hi, n=10, method="cohen_kappa", warnings=())


def _ceiling(point: float | None = 0.9) -> HumanCeiling:
    return HumanCeiling(
        n_subjects=10, n_items=10, n_humans=2, n_ratings=20, level="nominal",
        alpha=_est(point, 0.8, 0.95), pairwise_kappa=point, n_pairs=1 if point else 0,
        point=point, point_metric="mean pairwise kappa" if point is not None else None,
    )


def _cell(
    judge: int, dimension: str, label: str, verdict: str, *, n: int = 60,
    value: float | None = 0.8, basis: str = "ceiling", ceiling: float | None = 0.9,
    criterion: int = 1,
) -> AgreementCell:
    return AgreementCell(
        judge_version=judge, criterion=criterion, dimension=dimension, label=label,
        n_subjects=n, n_items=n, n_humans=2, primary_metric="kappa",
        metrics={"kappa": _est(value, None if value is None else value - 0.1,
                               None if value is None else min(1.0, value + 0.1))},
        ceiling=_ceiling(ceiling), alt_test=None, verdict=verdict, verdict_basis=basis,
        verdict_reason=f"reason of {label}",
    )


CRIT = CriterionRef(id=1, key="correct", name="Factual correctness", scale="binary",
                    values=("pass", "fail"), rubric_version=1)


def _judge(jid: int, name: str, value_type: str = "label") -> JudgeRef:
    return JudgeRef(id=jid, judge=name, version=1, label="v1", display=f"{name} v1",
                    model_family="", value_type=value_type, kind="imported")


def _result(cells: list[AgreementCell], judges: list[JudgeRef]) -> AgreementResult:
    return AgreementResult(
        version=1, rule=rule_text(PARAMS), params=PARAMS, plan_version=None, fingerprint="x",
        criteria=(CRIT,), judges=tuple(judges), strata=(), cells=tuple(cells), confusion=(),
        bias=(), ceiling=(), system=(), disagreements=(), warnings=(),
    )


# --- pure: formatting ---


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        ("cohen_kappa[quadratic]; bootstrap-bca(B=1000, clustered by item)",
         "Cohen's kappa (quadratic weights), BCa bootstrap, 1000 resamples clustered by item"),
        # The point's own interval (Wilson) is replaced by the bootstrap the report kept, and
        # the statistic named in "interval: <name>; ..." is not repeated.
        ("accuracy; wilson; interval: accuracy; bootstrap-bca(B=200, clustered by item)",
         "Accuracy, BCa bootstrap, 200 resamples clustered by item"),
        ("krippendorff_alpha[nominal]; interval: krippendorff_alpha[nominal]; "
         "bootstrap-percentile(B=500, clustered by item)",
         "Krippendorff's alpha (nominal), percentile bootstrap, 500 resamples clustered by item"),
        ("kendall_tau_b over 3 candidate means; interval: percentile bootstrap (B=200, items "
         "resampled)",
         "Kendall's tau-b over 3 candidate means, percentile bootstrap, 200 resamples of items"),
        ("alt_test(Calderon, Reichart & Dror 2025; paired one-sided t-test, BY FDR)",
         "Alternative annotator test (Calderon, Reichart & Dror 2025; paired one-sided t-test, "
         "Benjamini-Yekutieli FDR)"),
        ("mean_pairwise_cohen_kappa[quadratic]", "Mean pairwise Cohen's kappa (quadratic weights)"),
        ("position_bias; flip rate wilson", "Position bias, flip rate, Wilson interval"),
        ("signed_bias(judge-human); t interval", "Signed bias (judge-human), t interval"),
        ("macro_precision", "Macro precision"),
        ("", ""),
    ],
)
def test_method_names_are_readable(method: str, expected: str) -> None:
    assert method_text(method) == expected


def test_intervals_are_never_empty_brackets() -> None:
    assert interval_text(0.1234, 0.9) == "[0.123, 0.900]"
    for lo, hi in ((None, None), (None, 0.5), (0.5, None), (float("nan"), 0.5)):
        assert interval_text(lo, hi) == ""
    assert estimate_text(_est(0.5, None, None)) == "0.500"
    assert estimate_text(_est(None)) == EMPTY and estimate_text(None) == EMPTY
    assert estimate_text(_est(float("nan"), 0.1, 0.2)) == EMPTY
    assert estimate_text(_est(0.5, 0.25, 0.75), 2) == "0.50 [0.25, 0.75]"
    assert number_text(None) == EMPTY and number_text(True) == EMPTY


def test_strata_and_coefficients_read_as_words() -> None:
    assert stratum_words("", "overall") == "whole study"
    assert stratum_words("language", "de") == "language=de"
    assert stratum_words(f"language{CROSS}length", f"de{CROSS}long") == "language=de / length=long"
    assert metric_name("qwk") == "Cohen's kappa (quadratic weights)"
    assert metric_name("gwet_ac1") == "Gwet's AC1" and metric_name("new_thing") == "new thing"
    assert verdict_class(NOT_TRUSTWORTHY) == "verdict-not-trustworthy"
    assert verdict_class("something else") == "verdict-unknown"


# --- pure: next steps and the summary ---


@pytest.mark.parametrize(("min_items", "n", "more"), [(30, 18, 12), (30, 9, 21), (50, 9, 41)])
def test_too_few_labels_says_how_many_more_and_where(min_items: int, n: int, more: int) -> None:
    cell = _cell(1, f"language{CROSS}length", f"de{CROSS}long", TOO_FEW, n=n, basis="min_items")
    step = next_step(cell, params={**PARAMS, "min_items": min_items}, criterion=CRIT)
    assert step is not None and step.labels_needed == more
    assert step.text.endswith(f"label {more} more in language=de / length=long.")
    assert f"{n} of the {min_items} outputs" in step.text


def test_not_trustworthy_keeps_humans_and_shows_the_figure() -> None:
    step = next_step(_cell(1, "language", "de", NOT_TRUSTWORTHY, value=0.77), params=PARAMS)
    assert step is not None and step.labels_needed is None
    assert step.text == (
        "language=de: not trustworthy (Cohen's kappa 0.770 [0.670, 0.870], n=60): keep humans "
        "on this stratum, or try another judge/prompt."
    )
    assert next_step(_cell(1, "language", "en", TRUSTWORTHY), params=PARAMS) is None


def test_too_few_without_a_ceiling_or_for_a_continuous_judge_asks_for_overlap() -> None:
    no_ceiling = _cell(1, "language", "de", TOO_FEW, basis="none", ceiling=None)
    step = next_step(no_ceiling, params=PARAMS, criterion=CRIT, judge=_judge(1, "j"))
    assert step is not None and "have a second annotator grade at least 10" in step.text
    continuous = _cell(1, "", "overall", TOO_FEW, basis="none")
    step = next_step(continuous, params=PARAMS, judge=_judge(1, "bleu", "continuous"))
    assert step is not None
    assert "have at least 2 annotators each grade at least 30 of the same outputs" in step.text


def test_judge_summaries_in_plain_words() -> None:
    good, coin, everywhere = _judge(1, "good"), _judge(2, "coin"), _judge(3, "solid")
    cells = [
        _cell(1, "", "overall", NOT_TRUSTWORTHY, value=0.77),
        _cell(1, "language", "en", TRUSTWORTHY),
        _cell(1, "language", "de", NOT_TRUSTWORTHY),
        _cell(1, "language", "fr", TOO_FEW, n=18, basis="min_items"),
        _cell(2, "", "overall", NOT_TRUSTWORTHY, value=0.0),
        _cell(2, "language", "en", NOT_TRUSTWORTHY, value=0.1),
        _cell(3, "", "overall", TRUSTWORTHY),
        _cell(3, "language", "en", TRUSTWORTHY),
    ]
    summaries = judge_summaries(_result(cells, [good, coin, everywhere]))
    # The judges that stand in for humans in the most places first.
    assert [s.judge for s in summaries] == ["solid v1", "good v1", "coin v1"]
    by_judge = {s.judge: s for s in summaries}
    g = by_judge["good v1"]
    assert g.headline == (
        "good v1 can stand in for humans in 1 of 4 strata measured; 2 not trustworthy, 1 with "
        "too few labels."
    )
    (crit,) = g.criteria
    assert crit.sentence == (
        "Factual correctness (correct): can stand in for humans in language=en; not trustworthy "
        "in the whole study and language=de; too few labels to tell in language=fr."
    )
    assert [s.stratum for s in crit.steps] == ["whole study", "language=de", "language=fr"]
    assert crit.steps[0].text.startswith("Whole study: not trustworthy (Cohen's kappa 0.770")
    assert crit.steps[-1].text.endswith("label 12 more in language=fr.")
    assert by_judge["coin v1"].criteria[0].sentence == (
        "Factual correctness (correct): cannot stand in for humans in any stratum; not "
        "trustworthy in the whole study and language=en."
    )
    assert by_judge["coin v1"].headline.startswith("coin v1 cannot stand in for humans anywhere")
    assert by_judge["solid v1"].headline == (
        "solid v1 can stand in for humans in all 2 strata measured."
    )
    assert not by_judge["solid v1"].criteria[0].steps


def test_a_long_list_of_strata_is_cut_in_the_sentence_not_in_the_steps() -> None:
    labels = [f"l{i}" for i in range(SENTENCE_MAX_STRATA + 3)]
    cells = [_cell(1, "dim", lab, NOT_TRUSTWORTHY) for lab in labels]
    summary = criterion_summary(cells, params=PARAMS, criterion=CRIT)
    assert "and 3 more (see the next steps)" in summary.sentence
    assert "dim=l6" not in summary.sentence
    assert len(summary.steps) == len(labels)


def test_system_warning_states_the_chance_of_a_perfect_tau_at_random() -> None:
    # The chance that a random ranking of m candidates has Kendall tau = 1, counted over every
    # ordering with scipy, is the 1/m! the warning states.
    for m in range(3, SYSTEM_MIN_CANDIDATES):
        truth = list(range(m))
        perfect = sum(
            math.isclose(stats.kendalltau(truth, perm).statistic, 1.0)
            for perm in itertools.permutations(truth)
        )
        assert perfect == 1
        warning = system_warning(m)
        assert warning is not None
        assert f"Only {m} candidates" in warning
        assert f"one time in {math.factorial(m)} " in warning
    assert system_warning(SYSTEM_MIN_CANDIDATES) is None and system_warning(10) is None


def test_rule_items_carry_every_parameter_of_the_rule_text() -> None:
    params = params_validate({"min_items": 42, "margin": 0.07, "n_resamples": 321, "seed": 9,
                              "annotator_type": "crowd", "min_pair_items": 13})
    items = rule_items(params)
    joined = " ".join(items)
    assert 4 <= len(items) <= 8
    numbers = set(re.findall(r"\d+(?:\.\d+)?%?", rule_text(params)))
    assert numbers and all(num in joined for num in numbers), numbers
    assert "crowd" in joined and "alternative annotator test" in joined


# --- the page, on a computed report ---


def audit_csv(n_items: int = 60, seed: int = 7) -> str:
    """Three candidates per item, two annotators who nearly always agree, a judge that is right
    on English, wrong on 12 % of German and has too few French outputs (18) to tell, and a
    judge that answers at random."""
    rnd = random.Random(seed)
    lines = [
        "item_id,stratum.language,stratum.length,output_id,candidate,output_text,rater_id,"
        "rater_kind,judge_version,criterion,value"
    ]
    for i in range(n_items):
        lang = "de" if i < 30 else ("en" if i < 54 else "fr")
        length = "long" if i % 2 else "short"
        for cand, quality in (("small", 0.5), ("medium", 0.7), ("large", 0.9)):
            truth = "pass" if rnd.random() < quality else "fail"
            other = "fail" if truth == "pass" else "pass"
            row = f"q{i},{lang},{length},q{i}-{cand},{cand},answer {i} of {cand}"
            bob = other if rnd.random() < 0.03 else truth
            good = other if lang == "de" and rnd.random() < 0.12 else truth
            coin = "pass" if rnd.random() < 0.6 else "fail"
            lines += [
                f"{row},ann,human,,correct,{truth}",
                f"{row},bob,human,,correct,{bob}",
                f"{row},good-judge,judge,v1,correct,{good}",
                f"{row},coin-judge,judge,v1,correct,{coin}",
            ]
    return "\n".join(lines) + "\n"


REPORT_PARAMS = {
    "n_resamples": 200,
    "system_level": True,
    # Two annotators only: the ceiling comparison decides every cell (no alternative test).
    "min_alt_annotators": 3,
    "crosses": [["language", "length"]],
}


def audited_report(study: Study) -> ReportSnapshot:
    ratings_import(study=study, rows=ratings_read(io.StringIO(audit_csv()), fmt="csv"))
    Criterion.objects.filter(rubric__study=study, key="correct").update(
        name="Factual correctness"
    )
    report = computed_report(study, REPORT_PARAMS)
    assert report.status == ReportSnapshot.Status.DONE, report.error
    return report


@pytest.fixture
def audited(study: Study) -> ReportSnapshot:
    return audited_report(study)


def _page(client: Any, lead: Any, report: ReportSnapshot) -> str:
    client.force_login(lead)
    url = reverse("reports-audit", kwargs={"slug": report.study.slug, "report_id": report.pk})
    response = client.get(url)
    assert response.status_code == 200
    return str(response.content.decode())


def _main(html: str) -> str:
    return html[html.index("<main"):]


@pytest.mark.django_db
def test_the_summary_names_where_each_judge_stands_in_and_what_to_do(
    audited: ReportSnapshot, lead: Any, client: Any
) -> None:
    html = _page(client, lead, audited)
    result = AgreementResult.from_json(audited.result)
    summary = html[html.index('id="summary"'):html.index("How the verdict is decided")]
    judges = {j.display: j.id for j in result.judges}
    assert "<h3>coin-judge v1</h3>" in summary and "<h3>good-judge v1</h3>" in summary
    good = summary[summary.index("<h3>good-judge v1</h3>"):]
    good = good[: good.find("<h3>", 1) if "<h3>" in good[1:] else len(good)]
    # French has 6 items x 3 candidates = 18 outputs (9 per length): 12 and 21 short of 30.
    assert "label 12 more in language=fr." in good
    assert "label 21 more in language=fr / length=long." in good
    # Every cell that is not trustworthy has its step, with its own figure.
    for cell in result.cells_for(judge_version=judges["good-judge v1"]):
        where = stratum_words(cell.dimension, cell.label)
        if cell.verdict == NOT_TRUSTWORTHY:
            head = "Whole study" if where == "whole study" else where
            assert (f"{head}: not trustworthy (Cohen&#x27;s kappa "
                    f"{number_text(cell.primary.value if cell.primary else None)}") in good
        if cell.verdict == TRUSTWORTHY:
            trusted = good.split("(correct): can stand in for humans in", 1)[1]
            assert where in trusted.split(";")[0]
    assert "keep humans on this stratum, or try another judge/prompt." in good
    # The English strata, where the judge equals the truth, are the trusted ones.
    assert "can stand in for humans in language=en" in good
    assert "coin-judge v1 cannot stand in for humans anywhere yet" in summary
    assert html.index('id="summary"') < html.index("judge vs human consensus per stratum")


@pytest.mark.django_db
def test_table_and_heatmap_colours_follow_the_verdict(
    audited: ReportSnapshot, lead: Any, client: Any
) -> None:
    html = _page(client, lead, audited)
    result = AgreementResult.from_json(audited.result)
    cells = re.findall(
        r'<td class="(verdict-[a-z-]+)">(.*?)</td>', html, flags=re.S
    )
    assert len(cells) == len(result.cells)
    for cls, body in cells:
        verdict = re.search(r'title="[^"]*">([^<]+)</span>', body)
        assert verdict and verdict_class(verdict.group(1)) == cls
    # A cell judged not trustworthy with a high coefficient: red, its value still written.
    high = [c for c in result.cells if c.verdict == NOT_TRUSTWORTHY and c.primary
            and (c.primary.value or 0) >= 0.7]
    assert high, "the data should hold a high-valued cell that is not trustworthy"
    value = number_text(high[0].primary.value if high[0].primary else None)
    assert any(cls == "verdict-not-trustworthy" and f"kappa {value}" in body
               for cls, body in cells)
    kw = {"slug": audited.study.slug, "report_id": audited.pk}
    svg = client.get(reverse("reports-heatmap", kwargs=kw),
                     {"criterion": result.criteria[0].id}).content.decode()
    groups = re.findall(r'<g id="cell-\d+-\d+-(verdict-[a-z-]+)">\s*<path .*?style="fill: '
                        r'(#[0-9a-f]{6})', svg, flags=re.S)
    by_class = {verdict_class(v): f for v, f in VERDICT_FILL.items()}
    assert len(groups) == len(result.cells)
    assert all(by_class[cls] == fill for cls, fill in groups)
    assert sorted(cls for cls, _ in groups) == sorted(verdict_class(c.verdict)
                                                        for c in result.cells)


@pytest.mark.django_db
def test_names_intervals_methods_rule_and_the_small_n_warning(
    audited: ReportSnapshot, lead: Any, client: Any
) -> None:
    html = _page(client, lead, audited)
    main = _main(html)
    result = AgreementResult.from_json(audited.result)
    assert "[, ]" not in main and "[None" not in main and "[nan" not in main.lower()
    # macro precision has a point but no interval: a dash, not empty brackets.
    assert re.search(r"macro precision</th><td>[0-9.]+</td><td>—</td>", main)
    # Every table names the criterion (its name, not only the key or an id).
    tables = re.findall(r"<table.*?</table>", main, flags=re.S)
    assert len(tables) >= 5
    for table in tables:
        caption = re.search(r"<caption>(.*?)</caption>", table, flags=re.S)
        assert caption, table[:200]
        assert "Factual correctness" in caption.group(1) or "Factual correctness" in table
    assert "<td>Factual correctness (correct)</td>" in main  # the bias table's rows
    # Methods read as words.
    assert "BCa bootstrap, 200 resamples clustered by item" in main
    assert "bootstrap-bca(" not in main and "cohen_kappa" not in main
    # The system-level correlation over three candidates carries the warning.
    assert {s.n_candidates for s in result.system} == {3}
    assert "Only 3 candidates: a judge that ranks them at random still gets Kendall tau = 1 " \
           "one time in 6" in main
    # The trust rule is a short list in a <details>, not the paragraph.
    rule = re.search(r'<details class="trust-rule">.*?</details>', main, flags=re.S)
    assert rule is not None
    assert rule.group(0).count("<li>") == len(rule_items(result.params))
    assert result.rule[:80] not in main


@pytest.mark.django_db
def test_a_report_without_small_n_has_no_warning(study: Study, lead: Any, client: Any) -> None:
    report = computed_report_without_system(study)
    html = _page(client, lead, report)
    assert "a judge that ranks them at random" not in html and "system-warning" not in html


def computed_report_without_system(study: Study) -> ReportSnapshot:
    ratings_import(study=study, rows=ratings_read(io.StringIO(audit_csv(36)), fmt="csv"))
    return computed_report(study, {"n_resamples": 200})


# --- Chromium ---

# True for a header cell one of whose words the browser broke across lines (a word in one line
# has one client rect).
_BROKEN_HEADERS = """() => {
  const broken = [];
  for (const th of document.querySelectorAll('.table-wrap th')) {
    const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode())) {
      const re = /\\S+/g;
      let m;
      while ((m = re.exec(node.data))) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""



@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_audit_page_in_chromium_phone_and_desktop(new_session: Any) -> None:
    user = UserFactory(username="lead-audit")
    user.set_password("pw-lead-audit")
    user.save()
    study = StudyFactory(slug="support", name="Support answers", owner=user)
    MembershipFactory(study=study, user=user, role=Membership.Role.LEAD)
    report = audited_report(study)
    path = reverse("reports-audit", kwargs={"slug": study.slug, "report_id": report.pk})
    for viewport in ("phone", "desktop"):
        s = new_session(viewport)
        s.login("lead-audit", "pw-lead-audit")
        response = s.goto(path)
        assert response is not None and response.status == 200
        page = s.page
        page.wait_for_load_state("networkidle")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= page.viewport_size["width"], f"{viewport}: horizontal scroll {width}px"
        # Header words stay whole (judge names with hyphens included); wrapping at spaces.
        broken = page.evaluate(_BROKEN_HEADERS)
        assert broken == [], f"{viewport}: header words broken across lines: {broken}"
        # The heat-map and forest plot load (as images: their text never runs as markup).
        svgs = [(url, status) for url, status, _ in s.responses if url.endswith(".svg")
                or ".svg?" in url]
        assert len(svgs) == 2 and all(status == 200 for _, status in svgs)
        assert page.locator("#summary").is_visible()
        assert "label 12 more in language=fr" in page.locator("#summary").text_content()
        if viewport == "desktop":
            s.screenshot("docs/img/audit-summary.png")
        assert not s.page_errors
