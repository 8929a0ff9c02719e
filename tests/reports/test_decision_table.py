"""The decision table (docs/selection.md): one test per row, each on a small hand-built study
whose right answer is obvious from its data, through the real report path (snapshot, load,
compute, stored result), with the wording checked on the page, in the PDF and in the API.

Every study: two candidates "model-alpha" and "model-beta", a rubric of two binary criteria
`correct` (a hard gate) and `polite`, 30 items; every output is polite. Which outputs are
correct, which the judge sees as correct and which outputs humans labelled is spelled out per
test.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotations.models import Annotation, Assignment, QueueEntry, SamplingPlan
from judges.models import Judge, JudgeVersion, Verdict
from reports.selection.decision import (
    Contender,
    DecisionInputs,
    Difference,
    Threshold,
    decide,
)
from reports.selection.present import pdf as selection_pdf
from reports.selection.results import SelectionResult
from reports.services import report_compute, report_snapshot_create
from snapshots.models import ReportSnapshot
from studies.models import (
    AnalysisPlan,
    Candidate,
    Criterion,
    Item,
    Membership,
    Output,
    RubricVersion,
)
from tests.factories import MembershipFactory, StudyFactory, UserFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

A, B = "model-alpha", "model-beta"
N_ITEMS = 30
FAST = {"n_resamples": 200, "seed": 3}


def small_study(
    slug: str, *, correct: dict[str, list[int]], labelled: dict[str, list[int]],
    judge: bool = True, plan_spec: dict[str, Any] | None = None, lock: bool = True,
    errors: dict[str, int] | None = None, aggregate: dict[str, Any] | None = None,
    judge_name: str = "judge-gpt", grader_name: str = "", judge_simulated: bool = False,
) -> dict[str, Any]:
    """`correct[c]`: the items (0..29) whose output of c is correct; `labelled[c]`: the items
    whose output of c humans graded (both criteria, drawn at random with probability
    len / 30); the judge, when there is one, agrees with the truth on every output; the first
    `errors[c]` outputs of c errored."""
    owner = UserFactory(username=f"{slug}-lead")
    grader = get_user_model().objects.create(username=grader_name or f"{slug}-grader")
    study = StudyFactory(owner=owner, slug=slug, name=f"Study {slug}", is_simulated=False)
    MembershipFactory(study=study, user=owner, role=Membership.Role.LEAD)
    rubric = RubricVersion.objects.create(study=study, version=1, aggregate=aggregate or {})
    crit_c = Criterion.objects.create(rubric=rubric, key="correct", name="Correct",
                                      scale="binary", is_hard_gate=True, position=0)
    crit_p = Criterion.objects.create(rubric=rubric, key="polite", name="Polite",
                                      scale="binary", position=1)
    items = Item.objects.bulk_create([Item(study=study, external_id=f"q{i}", input="q")
                                      for i in range(N_ITEMS)])
    jv = None
    if judge:
        j = Judge.objects.create(study=study, name=judge_name, kind="llm")
        jv = JudgeVersion.objects.create(judge=j, version=1, simulated=judge_simulated,
                                         content_hash=slug[:16].ljust(16, "x"))
    sampling = SamplingPlan.objects.create(study=study, version=1, rubric=rubric, k=1)
    verdicts: list[Verdict] = []
    anns: list[Annotation] = []
    for name in (A, B):
        cand = Candidate.objects.create(study=study, name=name, model_family=name)
        n_err = (errors or {}).get(name, 0)
        outs = Output.objects.bulk_create([
            Output(study=study, item=it, candidate=cand, text="answer", latency_ms=800.0,
                   tokens_in=10, tokens_out=10, cost=0.001, schema_valid=True,
                   error="timeout" if i < n_err else "")
            for i, it in enumerate(items)])
        pi = len(labelled[name]) / N_ITEMS
        for i, o in enumerate(outs):
            ok = i in correct[name]
            if jv is not None:
                verdicts.append(Verdict(judge_version=jv, criterion=crit_c, output=o,
                                        value="pass" if ok else "fail",
                                        value_num=1.0 if ok else 0.0))
                verdicts.append(Verdict(judge_version=jv, criterion=crit_p, output=o,
                                        value="pass", value_num=1.0))
            if i in labelled[name]:
                entry = QueueEntry.objects.create(plan=sampling, output=o, stratum="all",
                                                  needed=1, draw_kind="random",
                                                  inclusion_probability=pi)
                a = Assignment.objects.create(entry=entry, annotator=grader,
                                              status="submitted")
                anns.append(Annotation(annotator=grader, criterion=crit_c, output=o,
                                       assignment=a, plan=sampling,
                                       value="pass" if ok else "fail",
                                       value_num=1.0 if ok else 0.0))
                anns.append(Annotation(annotator=grader, criterion=crit_p, output=o,
                                       assignment=a, plan=sampling, value="pass",
                                       value_num=1.0))
    Verdict.objects.bulk_create(verdicts)
    Annotation.objects.bulk_create(anns)
    if plan_spec is not None:
        AnalysisPlan.objects.create(study=study, version=1, spec=plan_spec,
                                    locked_at=timezone.now() if lock else None)
    return {"study": study, "owner": owner}


def threshold_plan(threshold: float, **extra: Any) -> dict[str, Any]:
    return {"criteria": {"correct": {"metric": "pass_rate", "threshold": threshold,
                                     "primary": True}},
            "confidence_level": 0.95, **extra}


def build(data: dict[str, Any]) -> tuple[ReportSnapshot, SelectionResult]:
    snap = report_snapshot_create(study=data["study"], kind="selection", params=FAST,
                                  created_by=None)
    done = report_compute(report_id=snap.pk)
    assert done.status == "done", done.error
    return done, SelectionResult.from_json(done.result)


def fold(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def three_views(data: dict[str, Any], snap: ReportSnapshot,
                monkeypatch: pytest.MonkeyPatch, client_for: Any) -> dict[str, str]:
    """The page's text, the PDF's text and the API's decision (headline + text)."""
    study = data["study"]
    web = Client()
    web.force_login(data["owner"])
    page = web.get(reverse("reports-selection-detail",
                           kwargs={"slug": study.slug, "snapshot_id": snap.pk}))
    assert page.status_code == 200
    page_text = fold(re.sub(r"<[^>]+>", " ", page.content.decode()))
    docs: list[Any] = []
    render = selection_pdf.pdf_document

    def spy(html: str) -> Any:
        doc = render(html)
        docs.append(doc)
        return doc

    monkeypatch.setattr(selection_pdf, "pdf_document", spy)
    pdf = web.get(reverse("reports-selection-pdf",
                          kwargs={"slug": study.slug, "snapshot_id": snap.pk}))
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF-")
    pdf_text = fold(selection_pdf.document_text(docs[0]))
    api = client_for(data["owner"]).get(
        f"/api/studies/{study.slug}/reports/selection/{snap.pk}/")
    assert api.status_code == 200
    decision = api.json()["result"]["decision"]
    return {"page": page_text, "pdf": pdf_text,
            "api": fold(decision["headline"] + " | " + decision["text"])}


def assert_everywhere(views: dict[str, str], *phrases: str) -> None:
    for where, text in views.items():
        for phrase in phrases:
            assert phrase in text, (where, phrase, text[:600])


# --- row 1: not enough evidence ------------------------------------------------------------------

def test_not_enough_evidence_says_how_many_labels_are_missing(
        monkeypatch: pytest.MonkeyPatch, client_for: Any) -> None:
    data = small_study("dt-few", correct={A: list(range(25)), B: list(range(10))},
                       labelled={A: [0, 1, 29], B: [0, 29]}, plan_spec=threshold_plan(0.5))
    snap, r = build(data)
    assert r.decision.verdict == "not_enough_evidence"
    # Each candidate needs 5 labels: alpha has 3 (2 short), beta 2 (3 short).
    assert r.decision.labels_needed == 5
    views = three_views(data, snap, monkeypatch, client_for)
    assert_everywhere(views, "Not enough evidence",
                      "about 5 more human labels on Pass rate: Correct are needed",
                      "model-alpha has 3, model-beta has 2", "No ranking flip.")


# --- row 2: no candidate passes the gates --------------------------------------------------------

def test_no_candidate_passes_the_gates_names_the_gates(
        monkeypatch: pytest.MonkeyPatch, client_for: Any) -> None:
    data = small_study("dt-gates", correct={A: list(range(30)), B: list(range(30))},
                       labelled={A: list(range(30)), B: list(range(30))},
                       errors={A: 15, B: 12},
                       plan_spec=threshold_plan(0.5, gates={"error_rate": 0.02}))
    snap, r = build(data)
    assert r.decision.verdict == "no_candidate_passes_gates"
    views = three_views(data, snap, monkeypatch, client_for)
    assert_everywhere(views, "No candidate passes the gates",
                      "model-alpha fails error rate", "model-beta fails error rate",
                      "No ranking flip.")
    for text in views.values():
        assert "threshold" not in text.split("No candidate passes the gates", 1)[1][:120]


# --- row 3: no candidate meets the threshold -----------------------------------------------------

def test_no_candidate_meets_the_threshold_is_not_called_a_gate(
        monkeypatch: pytest.MonkeyPatch, client_for: Any) -> None:
    # Both correct on 6 of 30 (20 %), every output labelled: both clearly below 80 %.
    data = small_study("dt-thresh", correct={A: list(range(6)), B: list(range(5))},
                       labelled={A: list(range(30)), B: list(range(30))},
                       plan_spec=threshold_plan(0.8))
    snap, r = build(data)
    assert r.decision.verdict == "no_candidate_meets_threshold"
    assert r.decision.threshold == "correct ≥ 80 %"
    views = three_views(data, snap, monkeypatch, client_for)
    assert_everywhere(views, "No candidate meets correct ≥ 80 %",
                      "model-alpha fails correct ≥ 80 %", "No ranking flip.")
    assert "gate" not in views["api"]


# --- row 4: too close to call -------------------------------------------------------------------

def test_too_close_to_call_when_the_difference_does_not_clear_the_margin(
        monkeypatch: pytest.MonkeyPatch, client_for: Any) -> None:
    same = list(range(20))
    data = small_study("dt-close", correct={A: same, B: same[:19]},
                       labelled={A: list(range(30)), B: list(range(30))},
                       plan_spec=threshold_plan(0.3, margin=0.05))
    snap, r = build(data)
    assert r.decision.verdict == "too_close"
    views = three_views(data, snap, monkeypatch, client_for)
    assert_everywhere(views, "Too close to call", "model-alpha leads model-beta",
                      "does not clear the margin of 5 points", "No ranking flip.")


# --- row 5: X leads, but has not shown it meets the threshold (the newcomer's study) -------------

@pytest.mark.parametrize("lock", [True, False])
def test_newcomer_leads_but_has_not_shown_it_meets_the_threshold(
        lock: bool, monkeypatch: pytest.MonkeyPatch, client_for: Any) -> None:
    """Issue 23's newcomer: two candidates, correct + polite, 30 items, a judge, 24
    human-graded outputs (12 per candidate), plan correct >= 80 % with correct primary.
    alpha is correct on 22 of 30 (9 of its 12 labelled), beta on 2 (1 of 12): beta fails the
    threshold, alpha's interval straddles it."""
    data = small_study(
        "dt-newcomer" + ("" if lock else "-draft"),
        correct={A: list(range(22)), B: [0, 29]},
        labelled={A: [0, 2, 4, 6, 8, 10, 12, 14, 16, 22, 24, 26],
                  B: [0, 2, 4, 6, 8, 10, 12, 14, 16, 22, 24, 26]},
        plan_spec=threshold_plan(0.8), lock=lock)
    snap, r = build(data)
    assert r.primary_metric == "pass_rate:correct"
    assert r.decision.verdict == "leads_unproven"
    assert r.decision.candidate == A and r.decision.threshold == "correct ≥ 80 %"
    assert r.decision.labels_needed is not None and r.decision.labels_needed > 0
    # The rubric pass rate follows correct now (a wrong but polite answer fails it).
    mix = {e.candidate: e for e in r.estimates if e.metric == "rubric_pass_rate"}
    assert mix[A].human is not None and mix[B].human is not None
    assert mix[A].human.value == pytest.approx(9 / 12)
    assert mix[B].human.value == pytest.approx(1 / 12)
    assert r.rubric_rule.kind == "all"
    assert r.exploratory is (not lock)
    views = three_views(data, snap, monkeypatch, client_for)
    assert_everywhere(views, "model-alpha leads, but has not shown it meets correct ≥ 80 %",
                      f"about {r.decision.labels_needed} more human labels on model-alpha "
                      "would settle it", "model-beta fails the threshold correct ≥ 80 %",
                      "No ranking flip.")
    for where in ("page", "pdf"):
        assert "Rubric rule: an output passes the rubric when every criterion with a "\
               "pass/fail reading passes" in views[where]
        assert ("Exploratory, plan not locked" in views[where]) is (not lock)
    # The threshold is never called a gate (the one "gates" names the real gates, passed).
    assert "gate" not in views["api"].replace("the only candidate passing the gates", "")
    # The rule beside the rubric pass rate in the CSV and the API too.
    web = Client()
    web.force_login(data["owner"])
    csv_text = web.get(reverse("reports-selection-csv", kwargs={
        "slug": data["study"].slug, "snapshot_id": snap.pk, "table": "estimates"})).content
    lines = csv_text.decode().splitlines()
    assert lines[0].endswith(",note")
    rubric_lines = [ln for ln in lines if ",rubric_pass_rate," in ln]
    assert rubric_lines and all(ln.endswith("rubric rule: an output passes the rubric when "
                                            "every criterion with a pass/fail reading passes")
                                for ln in rubric_lines)
    assert snap.result["rubric_rule"]["kind"] == "all"


# --- row 6: ship ---------------------------------------------------------------------------------

def test_ship_when_every_gate_threshold_and_the_margin_are_met(
        monkeypatch: pytest.MonkeyPatch, client_for: Any) -> None:
    data = small_study("dt-ship", correct={A: list(range(29)), B: list(range(8))},
                       labelled={A: list(range(30)), B: list(range(30))},
                       plan_spec=threshold_plan(0.05, margin=0.05,
                                                gates={"error_rate": 0.2}))
    snap, r = build(data)
    assert r.decision.verdict == "ship" and r.decision.candidate == A
    views = three_views(data, snap, monkeypatch, client_for)
    assert_everywhere(views, "Ship model-alpha", "passes every gate, meets every threshold",
                      "clearing the margin of 5 points", "No ranking flip.")


def test_human_labels_alone_decide_without_a_judge(
        monkeypatch: pytest.MonkeyPatch, client_for: Any) -> None:
    """Every output human-labelled, no judge: the report decides from the humans (it used
    to say "insufficient data: no human label yet")."""
    data = small_study("dt-nojudge", correct={A: list(range(28)), B: list(range(3))},
                       labelled={A: list(range(30)), B: list(range(30))}, judge=False,
                       plan_spec=None)
    snap, r = build(data)
    assert r.judge is None
    assert r.primary_metric == "rubric_pass_rate" and r.primary_source == "default"
    assert r.decision.verdict == "ship" and r.decision.candidate == A
    assert r.decision.basis == "human_only"
    diff = r.decision.difference
    assert diff is not None and diff.value == pytest.approx(28 / 30 - 3 / 30)
    views = three_views(data, snap, monkeypatch, client_for)
    assert_everywhere(views, "Ship model-alpha", "decided from the human labels alone")
    for where in ("page", "pdf"):
        assert "Decided from the human labels alone" in views[where]
        assert "the plan states no primary metric, so the rubric pass rate decides" in \
            views[where]


def test_a_weighted_rubric_rule_is_stated_and_used() -> None:
    # Weighted rule with pass_share 0.5 and correct NOT a gate would pass a wrong but polite
    # answer; the rubric says so and the report prints that rule.
    data = small_study("dt-weighted", correct={A: list(range(15)), B: list(range(15))},
                       labelled={A: list(range(30)), B: list(range(30))},
                       aggregate={"kind": "weighted", "pass_share": 0.75})
    _, r = build(data)
    assert r.rubric_rule.kind == "weighted" and r.rubric_rule.pass_share == 0.75
    assert "at least 75 % (by weight) of the other criteria" in r.rubric_rule.text
    # correct is a hard gate: the weighted rule still fails the 15 wrong outputs.
    est = next(e for e in r.estimates if e.metric == "rubric_pass_rate" and e.candidate == A)
    assert est.human is not None and est.human.value == pytest.approx(0.5)


# --- simulated from the records, never from a name -------------------------------------------

def test_simulated_is_read_from_the_records_not_from_names() -> None:
    kw: dict[str, Any] = {"correct": {A: list(range(20)), B: list(range(10))},
                          "labelled": {A: list(range(30)), B: list(range(30))}}
    named = small_study("dt-simname", judge_name="sim-judge (simulated)",
                        grader_name="sim-annotator-9", **kw)
    _, r = build(named)
    assert r.simulated is False and r.judge is not None and r.judge.simulated is False
    flagged = small_study("dt-simflag", judge_simulated=True, **kw)
    _, r = build(flagged)
    assert r.simulated is True and r.judge is not None and r.judge.simulated is True


# --- the pure function, row by row ---------------------------------------------------------------

def _c(name: str, **kw: Any) -> Contender:
    return Contender(name=name, n_labels=kw.pop("n", 30), labels_short=kw.pop("short", 0),
                     **kw)


def _inputs(*cands: Contender, diffs: dict[str, tuple[float, float, float]] | None = None,
            flips: tuple[str, ...] = ()) -> DecisionInputs:
    return DecisionInputs(
        metric="Pass rate: Correct", margin=0.02, margin_text="2 points", level=0.95,
        contenders=cands,
        differences={k: Difference(k, v, lo, hi, f"{v * 100:.1f} points")
                     for k, (v, lo, hi) in (diffs or {}).items()},
        flips=flips)


def test_pure_table_rows_in_order_and_flips_in_every_state() -> None:
    flip = ("Y is better than X on long (5.0 points [1.0, 9.0])",)
    th_ok = Threshold("pass_rate:correct", "correct ≥ 80 %", "pass")
    th_unsure = Threshold("pass_rate:correct", "correct ≥ 80 %", "uncertain", 40)
    th_fail = Threshold("pass_rate:correct", "correct ≥ 80 %", "fail")
    rows = [
        (_inputs(_c("X", short=3, n=2), _c("Y"), flips=flip), "not_enough_evidence"),
        (_inputs(_c("X", gate_failures=("error rate",)),
                 _c("Y", gate_failures=("p95 latency",)), flips=flip),
         "no_candidate_passes_gates"),
        (_inputs(_c("X", thresholds=(th_fail,)), _c("Y", thresholds=(th_fail,)),
                 flips=flip), "no_candidate_meets_threshold"),
        (_inputs(_c("X", thresholds=(th_ok,)), _c("Y", thresholds=(th_ok,)),
                 diffs={"Y": (0.03, -0.01, 0.07)}, flips=flip), "too_close"),
        (_inputs(_c("X", thresholds=(th_unsure,)), _c("Y", thresholds=(th_fail,)),
                 flips=flip), "leads_unproven"),
        (_inputs(_c("X", thresholds=(th_ok,)), _c("Y", thresholds=(th_ok,)),
                 diffs={"Y": (0.1, 0.05, 0.15)}, flips=flip), "ship"),
    ]
    for inputs, state in rows:
        out = decide(inputs)
        assert out.state == state, (state, out.text)
        assert "Ranking flip: Y is better than X on long" in out.text
    gates = decide(rows[1][0])
    assert "threshold" not in gates.text and "gate" in gates.text
    thresholds = decide(rows[2][0])
    assert "gate" not in thresholds.text and thresholds.headline == \
        "No candidate meets correct ≥ 80 %"
    unsure = decide(rows[4][0])
    assert unsure.headline == "X leads, but has not shown it meets correct ≥ 80 %"
    assert unsure.labels_needed == 40 and "about 40 more human labels on X" in unsure.text


# --- where the decision is: the study overview and the home page ---------------------------------

def test_overview_and_home_show_the_current_decision_and_the_next_step() -> None:
    data = small_study("dt-overview", correct={A: list(range(22)), B: [0, 29]},
                       labelled={A: [0, 2, 4, 6, 8, 10, 12, 14, 16, 22, 24, 26],
                                 B: [0, 2, 4, 6, 8, 10, 12, 14, 16, 22, 24, 26]},
                       plan_spec=threshold_plan(0.8), lock=False)
    web = Client()
    web.force_login(data["owner"])
    slug = data["study"].slug
    before = fold(re.sub(r"<[^>]+>", " ", web.get(f"/studies/{slug}/").content.decode()))
    assert "Current decision" in before and "No selection report yet." in before
    snap, r = build(data)
    html = web.get(f"/studies/{slug}/").content.decode()
    text = fold(re.sub(r"<[^>]+>", " ", html))
    assert "Current decision" in text
    assert "model-alpha leads, but has not shown it meets correct ≥ 80 %" in text
    assert "exploratory, plan not locked" in text
    need = r.decision.labels_needed
    assert (f"Next step: Lock the analysis plan, then rebuild the report: this decision is "
            f"exploratory. Label about {need} more outputs of model-alpha to settle "
            "correct ≥ 80 %.") in text
    assert reverse("reports-selection-detail",
                   kwargs={"slug": slug, "snapshot_id": snap.pk}) in html
    home = fold(re.sub(r"<[^>]+>", " ", web.get("/").content.decode()))
    assert "Study dt-overview" in home
    assert "model-alpha leads, but has not shown it meets correct ≥ 80 %" in home
