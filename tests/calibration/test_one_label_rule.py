"""One human-label rule (calibration.frames.human_labels): the same evidence fed to the
consumers that read labels — calibration's consensus and fit membership, the selection
report's per-output label — gives the same label for every output, and the right one by the
rule: the latest adjudication, then a gold label, then the annotators' majority (a tie gives
none); escalation-only labels are left out of random-sample estimates."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from annotations.models import (
    Adjudication,
    Annotation,
    Assignment,
    GoldLabel,
    QueueEntry,
    SamplingPlan,
)
from calibration.compute import calibration_inputs_load
from calibration.frames import human_labels
from calibration.scoring import humans_of as _humans
from judges.models import Judge, JudgeVersion, Verdict
from reports.selection.load import selection_inputs_load
from studies.models import Candidate, Criterion, Item, Membership, Output, RubricVersion
from studies.subjects import output_codes
from tests.factories import MembershipFactory, StudyFactory, UserFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

NAN = math.nan
# Per output: annotations as (annotator index, value, draw kind), gold, adjudication, and the
# label the rule gives (NaN: none or not countable).
CASES = [
    ([(0, "pass", "random"), (1, "pass", "random")], None, None, 1.0),
    ([(0, "pass", "random"), (1, "fail", "random")], None, None, NAN),  # a tie: none
    ([(0, "pass", "random"), (1, "fail", "random")], "fail", None, 0.0),  # gold settles it
    ([(0, "pass", "random")], "pass", "fail", 0.0),  # adjudication beats gold and annotators
    ([(0, "fail", "escalation")], None, None, NAN),  # escalation only: left out
    ([(0, "fail", "escalation")], None, "pass", NAN),  # still an escalation draw
    ([], "pass", None, 1.0),  # a gold label alone: a deliberate label
    ([], None, "fail", 0.0),  # an adjudication alone, likewise
    ([(0, "fail", "random"), (1, "fail", "escalation")], None, None, 0.0),
    ([], None, None, NAN),
]


def test_pure_rule_on_the_cases() -> None:
    subj, read, kinds = [], [], []
    gold, adj = {}, {}
    for i, (anns, g, a, _) in enumerate(CASES):
        for _, v, k in anns:
            subj.append(i)
            read.append(1.0 if v == "pass" else 0.0)
            kinds.append(k)
        if g is not None:
            gold[i] = 1.0 if g == "pass" else 0.0
        if a is not None:
            adj[i] = 1.0 if a == "pass" else 0.0
    hl = human_labels(subject=subj, reading=read, draw_kind=kinds,
                      inclusion=[0.5] * len(subj), gold=gold, adjudicated=adj)
    got = dict(zip(hl.subjects.tolist(), np.where(hl.countable, hl.label, np.nan).tolist(),
                   strict=True))
    for i, case in enumerate(CASES[:-1]):
        want = case[3]
        assert (math.isnan(got[i]) and math.isnan(want)) or got[i] == want, (i, got[i])


def test_calibration_and_selection_agree_label_for_label() -> None:
    owner = UserFactory(username="rule-lead")
    study = StudyFactory(owner=owner, slug="one-rule")
    MembershipFactory(study=study, user=owner, role=Membership.Role.LEAD)
    graders = [get_user_model().objects.create(username=f"rule-grader-{k}") for k in (0, 1)]
    rubric = RubricVersion.objects.create(study=study, version=1)
    crit = Criterion.objects.create(rubric=rubric, key="correct", name="Correct",
                                    scale="binary", position=0)
    cand = Candidate.objects.create(study=study, name="m")
    items = Item.objects.bulk_create([Item(study=study, external_id=f"i{k}", input="q")
                                      for k in range(len(CASES))])
    outs = Output.objects.bulk_create([Output(study=study, item=it, candidate=cand, text="a")
                                       for it in items])
    judge = Judge.objects.create(study=study, name="j", kind="llm")
    jv = JudgeVersion.objects.create(judge=judge, version=1, content_hash="r" * 16)
    Verdict.objects.bulk_create([Verdict(judge_version=jv, criterion=crit, output=o,
                                         value="pass", value_num=1.0) for o in outs])
    plan = SamplingPlan.objects.create(study=study, version=1, rubric=rubric, k=2)
    for o, (anns, g, a, _) in zip(outs, CASES, strict=True):
        for who, v, kind in anns:
            entry = QueueEntry.objects.create(plan=plan, output=o, stratum="all", needed=2,
                                              draw_kind=kind, inclusion_probability=0.5
                                              if kind == "random" else None)
            asg = Assignment.objects.create(entry=entry, annotator=graders[who],
                                            status="submitted")
            Annotation.objects.create(annotator=graders[who], criterion=crit, output=o,
                                      assignment=asg, plan=plan, value=v,
                                      value_num=1.0 if v == "pass" else 0.0)
        if g is not None:
            GoldLabel.objects.create(criterion=crit, output=o, value=g)
        if a is not None:
            Adjudication.objects.create(criterion=crit, output=o, value=a, adjudicated_by=owner)

    # Calibration's consensus and fit membership.
    inputs = calibration_inputs_load(study, {}, None)
    rows = inputs.data.ratings[inputs.data.ratings["criterion"] == crit.pk]
    rule = inputs.rules[crit.pk]
    values = inputs.data.criteria[crit.pk].values
    humans = _humans(rows, rule, values)
    codes = output_codes(np.array([o.pk for o in outs]))
    calib = [float(humans.consensus.get(c, NAN)) if bool(humans.fit.get(c, False)) else NAN
             for c in codes.tolist()]
    # The selection report's per-output label.
    sel = selection_inputs_load(study, {}, None)
    by_output = sel.outputs.set_index("output")["y:pass_rate:correct"]
    selection = [float(by_output[o.pk]) for o in outs]
    want = [c[3] for c in CASES]
    for k, (w, a, b) in enumerate(zip(want, calib, selection, strict=True)):
        same = (math.isnan(w) and math.isnan(a) and math.isnan(b)) or (w == a == b)
        assert same, (k, CASES[k], w, a, b)


# --- every consumer, binary and pairwise ----------------------------------------------------------

# Pairwise comparisons: annotations as (annotator index, side, draw kind), gold, adjudication
# and the side the rule gives (None: none). The side most annotators chose; a tie for the most
# frequent gives none; adjudication, then gold, settle it.
PAIR_CASES = [
    ([(0, "A", "random"), (1, "A", "random"), (2, "B", "random")], None, None, "A"),
    ([(0, "A", "random"), (1, "tie", "random")], None, None, None),  # not 0.75 of a win
    ([(0, "A", "random"), (1, "B", "random"), (2, "tie", "random")], None, None, None),
    ([(0, "tie", "random"), (1, "tie", "random"), (2, "B", "random")], None, None, "tie"),
    ([(0, "A", "random"), (1, "A", "random")], "B", None, "B"),
    ([(0, "A", "random")], "A", "tie", "tie"),
    ([(0, "B", "escalation")], None, None, None),  # escalation only: not in estimates
    ([], "A", None, "A"),
]
SIDE = {"tie": 0.0, "A": 1.0, "B": 2.0}
A_WINS = {"tie": 0.5, "A": 1.0, "B": 0.0}


def test_pure_rule_on_pairwise_sides() -> None:
    from calibration.frames import pairwise_a_wins, pairwise_side

    subj, read, kinds = [], [], []
    gold, adj = {}, {}
    for i, (anns, g, a, _) in enumerate(PAIR_CASES):
        for _, v, k in anns:
            subj.append(i)
            read.append(SIDE[v])
            kinds.append(k)
        if g is not None:
            gold[i] = SIDE[g]
        if a is not None:
            adj[i] = SIDE[a]
    hl = human_labels(subject=subj, reading=read, draw_kind=kinds,
                      inclusion=[0.5] * len(subj), gold=gold, adjudicated=adj)
    got = dict(zip(hl.subjects.tolist(), np.where(hl.countable, hl.label, np.nan).tolist(),
                   strict=True))
    for i, case in enumerate(PAIR_CASES):
        want = case[3]
        assert (want is None and math.isnan(got[i])) or got[i] == SIDE[want], (i, got[i])
    assert not hl.countable[6] and hl.countable[7] and hl.label[6] == SIDE["B"]
    assert pairwise_a_wins([0.0, 1.0, 2.0, NAN]).tolist()[:3] == [0.5, 1.0, 0.0]
    assert pairwise_side([0.5, 1.0, 0.0]).tolist() == [0.0, 1.0, 2.0]


def _annotate(graders: list[Any], plan: Any, crit: Any, anns: list[tuple[int, str, str]],
              **subject: Any) -> None:
    for who, v, kind in anns:
        entry = QueueEntry.objects.create(plan=plan, stratum="all", needed=2, draw_kind=kind,
                                          inclusion_probability=0.5 if kind == "random"
                                          else None, **subject)
        asg = Assignment.objects.create(entry=entry, annotator=graders[who],
                                        status="submitted")
        num = {"pass": 1.0, "fail": 0.0}.get(v, A_WINS.get(v))
        Annotation.objects.create(annotator=graders[who], criterion=crit, assignment=asg,
                                  plan=plan, value=v, value_num=num, **subject)


def test_every_consumer_gives_the_same_label() -> None:
    """Agreement (the judge-vs-human label), calibration (consensus and fit), selection (the
    per-output label and the comparisons' win-rate label), the calibration export and the
    calibrated-score API agree label for label on one study with a binary and a pairwise
    criterion."""
    from rest_framework.test import APIClient

    from calibration.frames import pairwise_a_wins
    from calibration.models import CalibratedScore
    from reports.agreement.humans import human_block
    from reports.agreement.load import agreement_load
    from reports.services import report_compute, report_snapshot_create
    from studies.models import Comparison
    from studies.subjects import comparison_codes

    owner = UserFactory(username="every-lead")
    study = StudyFactory(owner=owner, slug="every-rule")
    MembershipFactory(study=study, user=owner, role=Membership.Role.LEAD)
    graders = [get_user_model().objects.create(username=f"every-grader-{k}") for k in (0, 1, 2)]
    rubric = RubricVersion.objects.create(study=study, version=1)
    crit = Criterion.objects.create(rubric=rubric, key="correct", name="Correct",
                                    scale="binary", position=0)
    pref = Criterion.objects.create(rubric=rubric, key="preferred", name="Preferred",
                                    scale="pairwise", position=1)
    cand = Candidate.objects.create(study=study, name="m")
    cand_b = Candidate.objects.create(study=study, name="n")
    n = max(len(CASES), len(PAIR_CASES))
    items = Item.objects.bulk_create([Item(study=study, external_id=f"i{k}", input="q")
                                      for k in range(n)])
    outs = Output.objects.bulk_create([Output(study=study, item=it, candidate=cand, text="a")
                                       for it in items[:len(CASES)]])
    outs_b = Output.objects.bulk_create([Output(study=study, item=it, candidate=cand_b,
                                                text="b") for it in items[:len(PAIR_CASES)]])
    cmps = [Comparison.objects.create(study=study, item=items[k], output_a=outs_b[k],
                                      output_b=Output.objects.create(
                                          study=study, item=items[k], candidate=cand,
                                          text="c") if k >= len(outs) else outs[k])
            for k in range(len(PAIR_CASES))]
    judge = Judge.objects.create(study=study, name="j", kind="llm")
    jv = JudgeVersion.objects.create(judge=judge, version=1, content_hash="e" * 16)
    Verdict.objects.bulk_create([Verdict(judge_version=jv, criterion=crit, output=o,
                                         value="pass", value_num=1.0) for o in outs])
    Verdict.objects.bulk_create([Verdict(judge_version=jv, criterion=pref, comparison=c,
                                         value="A", value_num=1.0) for c in cmps])
    plan = SamplingPlan.objects.create(study=study, version=1, rubric=rubric, k=2)
    for o, (anns, g, a, _) in zip(outs, CASES, strict=True):
        _annotate(graders, plan, crit, anns, output=o)
        if g is not None:
            GoldLabel.objects.create(criterion=crit, output=o, value=g)
        if a is not None:
            Adjudication.objects.create(criterion=crit, output=o, value=a, adjudicated_by=owner)
    for c, (anns, g, a, _) in zip(cmps, PAIR_CASES, strict=True):
        _annotate(graders, plan, pref, anns, comparison=c)
        if g is not None:
            GoldLabel.objects.create(criterion=pref, comparison=c, value=g)
        if a is not None:
            Adjudication.objects.create(criterion=pref, comparison=c, value=a,
                                        adjudicated_by=owner)

    want_bin = [c[3] for c in CASES]  # the label when it counts in estimates
    # The label whatever the draw (what humans decided): the same but for escalation draws.
    label_bin = [1.0, NAN, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, NAN]
    want_pair = [NAN if c[3] is None else SIDE[c[3]] for c in PAIR_CASES]
    label_pair = [*want_pair[:6], 2.0, want_pair[7]]  # the escalation-only "B" is a label

    def same(a: list[float], b: list[float]) -> bool:
        return all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b,
                                                                              strict=True))

    codes = output_codes(np.array([o.pk for o in outs])).tolist()
    pcodes = comparison_codes(np.array([c.pk for c in cmps])).tolist()
    # Calibration: consensus where it fits the curves.
    inputs = calibration_inputs_load(study, {}, None)
    calib: dict[int, tuple[list[float], list[float]]] = {}
    for cr, sub in ((crit, codes), (pref, pcodes)):
        rows = inputs.data.ratings[inputs.data.ratings["criterion"] == cr.pk]
        humans = _humans(rows, inputs.rules[cr.pk], inputs.data.criteria[cr.pk].values)
        calib[cr.pk] = (
            [float(humans.consensus.get(c, NAN)) for c in sub],
            [float(humans.consensus.get(c, NAN)) if bool(humans.fit.get(c, False)) else NAN
             for c in sub])
    assert same(calib[crit.pk][0], label_bin) and same(calib[crit.pk][1], want_bin)
    assert same(calib[pref.pk][0], label_pair) and same(calib[pref.pk][1], want_pair)
    # Selection: per output, and per comparison as the "A wins" score.
    sel = selection_inputs_load(study, {}, None)
    by_output = sel.outputs.set_index("output")["y:pass_rate:correct"]
    assert same([float(by_output[o.pk]) for o in outs], want_bin)
    by_cmp = sel.comparisons.set_index("comparison")["y"]
    assert same([float(by_cmp[c.pk]) for c in cmps], pairwise_a_wins(want_pair).tolist())
    # Agreement: the human label the judge is compared with (every draw counts there).
    data = agreement_load(study, {})
    for cr, sub, want in ((crit, codes, label_bin), (pref, pcodes, label_pair)):
        block = human_block(data, data.criteria[cr.pk], {"strata": None, "crosses": []})
        assert block is not None
        at = {int(s): k for k, s in enumerate(block.subjects.tolist())}
        got = [float(block.consensus[at[c]]) if c in at else NAN for c in sub]
        # Subjects without any annotation are not in the human block (no annotator to agree).
        want_annotated = [w if c in at else NAN for c, w in zip(sub, want, strict=True)]
        assert same(got, want_annotated), (cr.key, got, want_annotated)
    # The calibration snapshot's rows decided by humans, through the API and the export.
    snap = report_snapshot_create(study=study, kind="calibration",
                                  params={"n_resamples": 20, "curve_resamples": 0, "seed": 1},
                                  created_by=None)
    assert report_compute(report_id=snap.pk).status == "done"
    human_rows = CalibratedScore.objects.filter(snapshot_id=snap.pk, criterion=crit,
                                                decision="human")
    stored = {r.output_id: r.p_pass for r in human_rows}
    for o, w in zip(outs, label_bin, strict=True):
        assert (math.isnan(w) and o.pk not in stored) or stored.get(o.pk) == w, (o.pk, w)
    client = APIClient()
    client.force_authenticate(owner)
    api = client.get(reverse("calibration-api-scores", kwargs={"slug": study.slug}),
                     {"criterion": "correct", "limit": 500})
    assert api.status_code == 200, api.content
    api_rows = api.json()["results"]
    api_human = {r["output_id"]: r["p_pass"] for r in api_rows if r["decision"] == "human"}
    assert api_human == stored
    export = client.get(reverse("calibration-api-export", kwargs={"slug": study.slug}),
                        {"format": "jsonl", "criterion": "correct"})
    assert export.status_code == 200
    lines = [json.loads(x) for x in b"".join(export.streaming_content).decode().splitlines()
             if x.strip()]
    assert {r["output_id"]: r["p_pass"] for r in lines if r["decision"] == "human"} == stored
