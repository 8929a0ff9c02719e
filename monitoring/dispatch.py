"""Dispatch of the sampled live rows: judge work for the rows drawn for the judges, the
calibrated policy's decision on each verdict, and the human queue for the random human draws
and the escalations.

Where the work happens. Live rows are judged and graded in the deployment's **live study**
(`live_study_ensure`), not in the selection study: adding them there would put one candidate's
live answers among the selection items (its reports compare candidates on the same items),
and an items import recomputes the study's strata (quantile bins would move). The live study
is made once, from the deployment: the selection study's latest rubric, the deployment's
frozen strata scheme, the shipped candidate, the deployment's judge versions (the same
configs, so the same content hashes) and the selection study's members (annotators grade there
as they do in the selection study). Everything is written through the owning apps' services.

The steps, each idempotent, run by the beat tick (`monitoring.celery_tasks`) before the windows:

1. `rows_dispatch`: the rows drawn for the judges that have no live output yet get an item and
   an output in the live study (items import, outputs import), and one judge run per judge
   version over exactly those outputs (`judges.runs.judge_run_start` with an ``outputs``
   selection), all in one transaction. A row is dispatched once (its ``live_output``); a
   re-dispatch of the same outputs finds their jobs done and queues nothing.
2. `judge_labels_collect`: each finished verdict becomes the row's judge label (1 = pass by the
   criterion's reading), and the calibrated policy decides: the verdict through the calibration
   curve in force gives P(pass); at or above the snapshot's ``pass_above`` it passes, below
   ``fail_below`` it fails, between the two it **escalates** (without a snapshot the verdict
   decides pass or fail, nothing escalates). The curve and thresholds are those of the row's
   calibration cell (its strata) when the snapshot has one with a curve of its own, else the
   pooled ones (`CalibratedPolicies`). Recorded through `traffic_labels_record`, so an
   escalation marks its row ``escalated`` and it is never a random draw.
3. `human_queue_dispatch`: the random human draws (``to_human``) and the escalations go to the
   live study's annotation queue (k = 1) in **one plan version per deployment**: the first
   dispatch makes it (`annotations.services.escalation_plan_create`), later ones add their
   rows to it in place (`escalation_entries_add`: no new version, a subject never entered
   twice), so plan versions do not pile up one per tick. A new version is made only when the
   live study's active plan is not that plan any more (a lead made or deactivated another
   one); it carries the unfinished entries over, so nothing queued is lost. In the live study
   every such entry is of the escalation kind: those outputs are not a probability sample of
   *its* items, so the study's own estimators must not weight them; the random design (the
   row's ``to_human`` and ``human_pi``) stays on the traffic row, which is what the windows
   read.
4. `human_labels_collect`: each annotation of a queued row becomes its human label.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from annotations.models import Annotation, SamplingPlan
from annotations.services.common import active_plan, is_failure
from annotations.services.escalations import (
    MODE_ESCALATION,
    escalation_entries_add,
    escalation_plan_create,
)
from judges.models import Judge, JudgeVersion, Verdict
from judges.runs import judge_run_start
from judges.runs.lifecycle import Enqueue
from judges.services import judge_version_for_config
from snapshots.selectors import snapshot_done
from studies.ingest import ingest_run
from studies.models import Criterion, Study
from studies.services import dimension_set, membership_set, rubric_update, study_create

from . import reopen
from .models import Deployment, TrafficLabel, TrafficRow
from .services import traffic_labels_record
from .window import context as window_context

# Rows dispatched per call (a tick dispatches one batch; the rest wait for the next tick).
DISPATCH_BATCH = 2000


def _owner(deployment: Deployment) -> Any:
    return deployment.created_by or deployment.study.owner


def _live_study_create(deployment: Deployment) -> Study:
    study, owner, now = deployment.study, _owner(deployment), timezone.now()
    live = study_create(owner=owner, fields={
        "name": f"{study.name[:140]} (live: {deployment.name[:40]})",
        "slug": reopen.slug_for(study, f"live-{deployment.pk}", now),
        "task_description": study.task_description,
        "deployment_context": (f"The sampled live rows of deployment '{deployment.name}' of "
                               f"study '{study.slug}', judged and graded for monitoring."),
    })
    criteria = reopen.criteria_of(study)
    if criteria:
        rubric_update(study=live, criteria=criteria, created_by=owner)
    if deployment.strata_scheme:
        dimension_set(study=live, dimensions=[
            {k: d[k] for k in ("key", "kind", "source", "config") if k in d}
            for d in deployment.strata_scheme])
    shipped = deployment.candidate
    ingest_run(study=live, kind="candidates", fmt="ndjson", stream=reopen.jsonl([
        {k: getattr(shipped, k) for k in reopen.CANDIDATE_FIELDS
         if getattr(shipped, k) not in ("", None)}]))
    for m in study.memberships.exclude(user_id=owner.pk).select_related("user"):
        membership_set(study=live, user=m.user, role=m.role)
    _live_versions(deployment, live)
    return live


def live_study_ensure(deployment: Deployment) -> Study:
    """The deployment's live study, made at the first call (module docstring)."""
    if deployment.live_study_id is not None:
        return Study.objects.get(pk=deployment.live_study_id)
    with transaction.atomic():
        locked = Deployment.objects.select_for_update().get(pk=deployment.pk)
        if locked.live_study_id is None:
            locked.live_study = _live_study_create(deployment)
            locked.save(update_fields=["live_study"])
    live_id = locked.live_study_id
    assert live_id is not None
    deployment.live_study_id = live_id
    return Study.objects.get(pk=live_id)


def _live_versions(deployment: Deployment, live: Study) -> dict[int, JudgeVersion]:
    """The live study's judge version of each of the deployment's versions (same config)."""
    out = {}
    for version in deployment.judge_versions.select_related("judge"):
        judge, _ = Judge.objects.get_or_create(study=live, name=version.judge.name,
                                               defaults={"kind": version.judge.kind})
        out[version.pk] = judge_version_for_config(judge=judge, config=version.config)
    return out


def _live_criterion(deployment: Deployment, live: Study) -> Criterion | None:
    key = window_context.criterion_key(deployment)
    rubric = live.rubric_versions.order_by("-version").first()
    return None if key is None or rubric is None else rubric.criteria.filter(key=key).first()


def rows_dispatch(*, deployment: Deployment, limit: int = DISPATCH_BATCH,
                  enqueue: Enqueue | None = None) -> dict[str, int]:
    """Step 1 (module docstring): items, outputs and judge runs for undispatched judge draws."""
    live = live_study_ensure(deployment)
    criterion = _live_criterion(deployment, live)
    versions = _live_versions(deployment, live)
    rows = list(TrafficRow.objects.filter(deployment=deployment, to_judge=True,
                                          live_output__isnull=True)
                .order_by("id")[:limit])
    if not rows or criterion is None or not versions:
        return {"dispatched": 0, "runs": 0}
    external = {f"r{r.pk}": r for r in rows}
    with transaction.atomic():
        ingest_run(study=live, kind="items", fmt="ndjson", stream=reopen.jsonl(
            {"external_id": ext, "input": r.input, "metadata": r.metadata or {}}
            for ext, r in external.items()))
        ingest_run(study=live, kind="outputs", fmt="ndjson", stream=reopen.jsonl(
            {k: v for k, v in {
                "candidate": deployment.candidate.name, "item": ext, "text": r.output,
                "latency_ms": r.latency_ms, "tokens_in": r.tokens_in,
                "tokens_out": r.tokens_out, "cost": r.cost,
                "finish_reason": r.finish_reason}.items() if v not in (None, "")}
            for ext, r in external.items()))
        outputs = dict(live.outputs.filter(item__external_id__in=list(external))
                       .values_list("item__external_id", "id"))
        for ext, r in external.items():
            r.live_output_id = outputs[ext]
        TrafficRow.objects.bulk_update(list(external.values()), ["live_output"],
                                       batch_size=1000)
        ids = sorted(outputs.values())
        for version in versions.values():
            judge_run_start(study=live, judge_version=version, criteria=[criterion],
                            selection={"kind": "outputs", "ids": ids}, enqueue=enqueue)
    return {"dispatched": len(rows), "runs": len(versions)}


def policy_decision(p_pass: float, thresholds: Mapping[str, Any] | None, passed: bool) -> str:
    """The calibrated policy's decision (module docstring, step 2)."""
    if not thresholds or thresholds.get("pass_above") is None:
        return "pass" if passed else "fail"
    if p_pass >= float(thresholds["pass_above"]):
        return "pass"
    if p_pass < float(thresholds.get("fail_below") or 0.0):
        return "fail"
    return "escalate"


@dataclass(frozen=True)
class CellPolicy:
    """One calibration cell's part of the calibrated policy: its curve (verdict -> P(pass))
    and its thresholds on P(pass)."""

    curve_x: tuple[float, ...] = ()
    curve_y: tuple[float, ...] = ()
    thresholds: Mapping[str, Any] | None = None

    def p_pass(self, passed: bool) -> float:
        """P(pass) of a verdict through the curve (the verdict itself without one)."""
        if not self.curve_x:
            return float(passed)
        return float(np.interp(float(passed), self.curve_x, self.curve_y))


class CalibratedPolicies:
    """The calibration snapshot in force, per judge version and calibration cell.

    A calibration snapshot holds a cell per stratum combination ("lang=de|length=long", see
    `calibration.scoring.cell_label`) besides the whole study (""), each with its own curve
    and thresholds when it had enough human labels ("too few labels": empty curve, null
    thresholds). A row is decided by the cell its strata fall in when that cell has a curve
    of its own (and its thresholds, or the pooled ones when it states none), else by the
    pooled cell of its judge version, else by the pooled cell of the deployment's first judge
    version (the one `window.context.selection_reference` reads): the policy the windows
    compare with. Without a snapshot in force the verdict decides."""

    def __init__(self, deployment: Deployment) -> None:
        self.cells: dict[int, list[tuple[dict[str, str], CellPolicy]]] = {}
        self.pooled: dict[int, CellPolicy] = {}
        self._memo: dict[tuple[int, tuple[tuple[str, str], ...]], CellPolicy] = {}
        key = window_context.criterion_key(deployment)
        snap = snapshot_done(snapshot_id=deployment.calibration_snapshot_id)
        for cell in ((snap.result or {}).get("cells") or []) if snap is not None else []:
            curve = cell.get("curve") or {}
            if cell.get("criterion") != key or not curve.get("x"):
                continue
            version, label = int(cell.get("judge_version", 0)), str(cell.get("stratum", ""))
            policy = CellPolicy(tuple(float(v) for v in curve["x"]),
                                tuple(float(v) for v in curve["y"]), cell.get("thresholds"))
            if label == "":
                self.pooled[version] = policy
            else:
                self.cells.setdefault(version, []).append((_cell_pairs(label), policy))
        first = min((v.pk for v in deployment.judge_versions.all()), default=None)
        self.fallback = self.pooled.get(first, CellPolicy()) if first is not None \
            else CellPolicy()

    def for_row(self, version: int, strata: Mapping[str, Any]) -> CellPolicy:
        """The policy deciding a verdict of `version` (an id of the deployment's versions) on
        a row with these strata labels (class docstring)."""
        memo_key = (version, tuple(sorted((str(k), str(v)) for k, v in strata.items())))
        if memo_key in self._memo:
            return self._memo[memo_key]
        pooled = self.pooled.get(version, self.fallback)
        policy = pooled
        for pairs, cell in self.cells.get(version, []):
            if all(str(strata.get(d, "unknown")) == v for d, v in pairs.items()):
                policy = cell if cell.thresholds is not None else replace(
                    cell, thresholds=pooled.thresholds)
                break
        self._memo[memo_key] = policy
        return policy


def _cell_pairs(label: str) -> dict[str, str]:
    """A calibration cell label "dim=label|dim2=label2" as {dim: label}."""
    return dict(part.split("=", 1) for part in label.split("|") if "=" in part)


def judge_labels_collect(*, deployment: Deployment) -> dict[str, int]:
    """Step 2 (module docstring): finished verdicts become judge labels with their decision."""
    if deployment.live_study_id is None:
        return {"recorded": 0, "escalated": 0}
    live = Study.objects.get(pk=deployment.live_study_id)
    criterion = _live_criterion(deployment, live)
    versions = _live_versions(deployment, live)
    if criterion is None or not versions:
        return {"recorded": 0, "escalated": 0}
    # Only rows still missing a judge label of some version are read (not every row ever).
    pending = (TrafficRow.objects.filter(deployment=deployment, to_judge=True,
                                         live_output__isnull=False)
               .annotate(n_judge=Count("labels", filter=Q(labels__source="judge")))
               .filter(n_judge__lt=len(versions)))
    by_output = {o: (r, strata or {}) for o, r, strata in
                 pending.values_list("live_output_id", "request_id", "strata")}
    have = set(TrafficLabel.objects.filter(row__in=pending.values("pk"), source="judge")
               .values_list("row__request_id", "rater"))
    policies = CalibratedPolicies(deployment)
    labels = []
    live_to_original = {v.pk: original for original, v in versions.items()}
    for output_id, version_id, value in Verdict.objects.filter(
            output_id__in=list(by_output), criterion=criterion, is_scored=True,
            judge_version_id__in=list(live_to_original)).values_list(
                "output_id", "judge_version_id", "value"):
        (request_id, strata), original = by_output[output_id], live_to_original[version_id]
        if (request_id, str(original)) in have:
            continue
        passed = not is_failure(criterion, value)
        policy = policies.for_row(original, strata)
        labels.append({"request_id": request_id, "source": "judge", "rater": str(original),
                       "value": float(passed),
                       "decision": policy_decision(policy.p_pass(passed), policy.thresholds,
                                                   passed)})
    if not labels:
        return {"recorded": 0, "escalated": 0}
    return traffic_labels_record(deployment=deployment, labels=labels)


def human_queue_dispatch(*, deployment: Deployment) -> dict[str, int]:
    """Step 3 (module docstring): random human draws and escalations to the live queue, added
    to the deployment's monitoring plan (`_monitoring_plan`) in place; a new plan version only
    when the live study's active plan is not that plan."""
    if deployment.live_study_id is None:
        return {"queued": 0}
    rows = list(TrafficRow.objects.filter(deployment=deployment, live_output__isnull=False,
                                          queued_at__isnull=True)
                .filter(Q(to_human=True) | Q(escalated=True)).order_by("id")
                .values_list("id", "live_output_id", "to_human"))
    if not rows:
        return {"queued": 0}
    live = Study.objects.get(pk=deployment.live_study_id)
    details = {"random_draws": sum(1 for r in rows if r[2]),
               "escalations": sum(1 for r in rows if not r[2])}
    with transaction.atomic():
        plan = _monitoring_plan(deployment, live)
        if plan is not None:
            escalation_entries_add(plan=plan, subject_ids=[r[1] for r in rows],
                                   created_by=_owner(deployment), details=details)
        else:
            escalation_plan_create(
                study=live, subject="output", subject_ids=[r[1] for r in rows],
                source=f"{_plan_source(deployment)}{rows[0][0]}-{rows[-1][0]}", k=1,
                created_by=_owner(deployment), details=dict(details))
        TrafficRow.objects.filter(pk__in=[r[0] for r in rows]).update(queued_at=timezone.now())
    return {"queued": len(rows)}


def _plan_source(deployment: Deployment) -> str:
    """The start of the `source` of the escalation plans this deployment's dispatch makes."""
    return f"monitoring:{deployment.pk}:"


def _monitoring_plan(deployment: Deployment, live: Study) -> SamplingPlan | None:
    """The live study's active plan when it is one this deployment's dispatch made (the plan
    the next rows are added to), else None. One plan version serves every tick; a new one is
    made only at the first dispatch, or after someone made or deactivated another plan in the
    live study (the new version then carries that plan's unfinished entries over, as every
    escalation plan does)."""
    plan = active_plan(live)
    spec = (plan.spec or {}) if plan is not None else {}
    if (plan is not None and spec.get("mode") == MODE_ESCALATION
            and str(spec.get("source", "")).startswith(_plan_source(deployment))):
        return plan
    return None


def human_labels_collect(*, deployment: Deployment) -> dict[str, int]:
    """Step 4 (module docstring): annotations of queued rows become human labels."""
    if deployment.live_study_id is None:
        return {"recorded": 0}
    live = Study.objects.get(pk=deployment.live_study_id)
    criterion = _live_criterion(deployment, live)
    if criterion is None:
        return {"recorded": 0}
    # Queued rows without a human label yet (an annotation revised after it was collected
    # is not read again).
    pending = TrafficRow.objects.filter(deployment=deployment, queued_at__isnull=False).exclude(
        labels__source="human")
    by_output = dict(pending.values_list("live_output_id", "request_id"))
    labels = []
    for output_id, annotator, value in Annotation.objects.filter(
            output_id__in=list(by_output), criterion=criterion).values_list(
                "output_id", "annotator__username", "value"):
        passed = 0.0 if is_failure(criterion, value) else 1.0
        labels.append({"request_id": by_output[output_id], "source": "human",
                       "rater": annotator, "value": passed})
    if not labels:
        return {"recorded": 0}
    return {"recorded": traffic_labels_record(deployment=deployment, labels=labels)["recorded"]}


def deployment_dispatch(*, deployment: Deployment, enqueue: Enqueue | None = None
                        ) -> dict[str, Any]:
    """One tick's dispatch: every step once (module docstring)."""
    if not deployment.judge_versions.exists() or window_context.criterion_key(deployment) is None:
        return {"skipped": "the deployment names no judge version or pass-rate criterion"}
    return {
        "judge_labels": judge_labels_collect(deployment=deployment),
        "dispatch": rows_dispatch(deployment=deployment, enqueue=enqueue),
        "queue": human_queue_dispatch(deployment=deployment),
        "human_labels": human_labels_collect(deployment=deployment),
        "at": dt.datetime.now(dt.UTC).isoformat(),
    }

