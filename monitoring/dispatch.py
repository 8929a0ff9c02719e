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
   decides pass or fail, nothing escalates). Recorded through `traffic_labels_record`, so an
   escalation marks its row ``escalated`` and it is never a random draw.
3. `human_queue_dispatch`: the random human draws (``to_human``) and the escalations go to the
   live study's annotation queue through `annotations.services.escalation_plan_create` (one
   plan version per dispatch, k = 1). In the live study every such entry is of the escalation
   kind: those outputs are not a probability sample of *its* items, so the study's own
   estimators must not weight them; the random design (the row's ``to_human`` and ``human_pi``)
   stays on the traffic row, which is what the windows read.
4. `human_labels_collect`: each annotation of a queued row becomes its human label.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import numpy as np
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from annotations.models import Annotation
from annotations.services.common import is_failure
from annotations.services.escalations import escalation_plan_create
from judges.models import Judge, JudgeVersion, Verdict
from judges.runs import judge_run_start
from judges.runs.lifecycle import Enqueue
from judges.services import judge_version_for_config
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
    by_output = dict(pending.values_list("live_output_id", "request_id"))
    have = set(TrafficLabel.objects.filter(row__in=pending.values("pk"), source="judge")
               .values_list("row__request_id", "rater"))
    reference = window_context.selection_reference(deployment)
    labels = []
    live_to_original = {v.pk: original for original, v in versions.items()}
    for output_id, version_id, value in Verdict.objects.filter(
            output_id__in=list(by_output), criterion=criterion, is_scored=True,
            judge_version_id__in=list(live_to_original)).values_list(
                "output_id", "judge_version_id", "value"):
        request_id, rater = by_output[output_id], str(live_to_original[version_id])
        if (request_id, rater) in have:
            continue
        passed = not is_failure(criterion, value)
        p = float(np.interp(float(passed), reference.curve_x, reference.curve_y)) \
            if len(reference.curve_x) >= 2 else float(passed)
        labels.append({"request_id": request_id, "source": "judge", "rater": rater,
                       "value": float(passed),
                       "decision": policy_decision(p, reference.thresholds, passed)})
    if not labels:
        return {"recorded": 0, "escalated": 0}
    return traffic_labels_record(deployment=deployment, labels=labels)


def human_queue_dispatch(*, deployment: Deployment) -> dict[str, int]:
    """Step 3 (module docstring): random human draws and escalations to the live queue."""
    if deployment.live_study_id is None:
        return {"queued": 0}
    rows = list(TrafficRow.objects.filter(deployment=deployment, live_output__isnull=False,
                                          queued_at__isnull=True)
                .filter(Q(to_human=True) | Q(escalated=True)).order_by("id")
                .values_list("id", "live_output_id", "to_human"))
    if not rows:
        return {"queued": 0}
    live = Study.objects.get(pk=deployment.live_study_id)
    with transaction.atomic():
        escalation_plan_create(
            study=live, subject="output", subject_ids=[r[1] for r in rows],
            source=f"monitoring:{deployment.pk}:{rows[0][0]}-{rows[-1][0]}", k=1,
            created_by=_owner(deployment),
            details={"random_draws": sum(1 for r in rows if r[2]),
                     "escalations": sum(1 for r in rows if not r[2])})
        TrafficRow.objects.filter(pk__in=[r[0] for r in rows]).update(queued_at=timezone.now())
    return {"queued": len(rows)}


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

