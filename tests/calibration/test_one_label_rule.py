"""One human-label rule (calibration.frames.human_labels): the same evidence fed to the
consumers that read labels — calibration's consensus and fit membership, the selection
report's per-output label — gives the same label for every output, and the right one by the
rule: the latest adjudication, then a gold label, then the annotators' majority (a tie gives
none); escalation-only labels are left out of random-sample estimates."""

from __future__ import annotations

import math

import numpy as np
import pytest
from django.contrib.auth import get_user_model

from annotations.models import (
    Adjudication,
    Annotation,
    Assignment,
    GoldLabel,
    QueueEntry,
    SamplingPlan,
)
from calibration.compute import _humans, calibration_inputs_load
from calibration.frames import human_labels
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
