"""Reads for human annotation: the blind grading context, progress, queue status, annotator
statistics, disagreements and an annotator's own annotations.

Blinding: `grading_context` is the only view of a subject an annotator gets before submitting.
It is built from an explicit allow-list of fields (item text, output text, criteria); it never
reads the candidate, judge verdicts or other annotators' annotations, so nothing downstream can
leak them by accident.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Count, F, Q, QuerySet, Sum
from django.utils import timezone

from judges.models import Verdict
from reviewhub.rawrows import RowShape, fetch_one
from studies.models import Comparison, Criterion, Item, Output, RubricVersion, Study
from studies.subjects import SubjectRef, subjects_q

from .constants import FLAG_LABELS, SEVERITY_QUESTION, SEVERITY_SCALE
from .models import Adjudication, Annotation, Assignment, GoldLabel, QueueEntry, SamplingPlan
from .services.common import active_plan, cached_plan_criteria, is_failure


@dataclass(frozen=True)
class CriterionView:
    key: str
    name: str
    guidance: str
    scale: str
    points: list[dict[str, Any]]
    pass_threshold: int | float | None
    pass_labels: list[str]
    # The values for which the severity question is asked (empty for pairwise).
    failing_values: list[str]
    # The rubric says grading it needs the item's context: the page shows the context open.
    needs_context: bool = False
    # Interval criteria: the closed range of a score (None for the other scales). A score
    # below pass_threshold (when there is one) is a failure and asks a severity.
    min: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class GradingContext:
    """Everything the grading page shows for one assignment, and nothing else."""

    assignment_id: int
    study_slug: str
    study_name: str
    kind: str  # "output" | "pairwise"
    status: str
    lease_expires_at: datetime | None
    item_input: str
    item_input_format: str
    item_context: str
    # None unless the study shows references to annotators.
    item_reference: str | None
    # kind "output": the text and whether generation failed (the error text is NOT shown: it
    # may name the provider).
    output_text: str | None
    output_failed: bool
    # kind "pairwise": the two texts in the order presented (left = "A").
    left_text: str | None
    right_text: str | None
    criteria: list[CriterionView]
    severity_question: str = SEVERITY_QUESTION
    severity_scale: list[dict[str, Any]] = field(
        default_factory=lambda: [p._asdict() for p in SEVERITY_SCALE]
    )
    flags: dict[str, str] = field(default_factory=lambda: dict(FLAG_LABELS))

    def as_dict(self) -> dict[str, Any]:
        return {
            "assignment_id": self.assignment_id,
            "study": {"slug": self.study_slug, "name": self.study_name},
            "kind": self.kind,
            "status": self.status,
            "lease_expires_at": self.lease_expires_at.isoformat()
            if self.lease_expires_at
            else None,
            "item": {
                "input": self.item_input,
                "input_format": self.item_input_format,
                "context": self.item_context,
                "reference": self.item_reference,
            },
            "output": (
                {"text": self.output_text, "failed": self.output_failed}
                if self.kind == "output"
                else None
            ),
            "pair": (
                {"left": self.left_text, "right": self.right_text}
                if self.kind == "pairwise"
                else None
            ),
            "criteria": [c.__dict__ for c in self.criteria],
            "severity_question": self.severity_question,
            "severity_scale": self.severity_scale,
            "flags": self.flags,
        }


def _criterion_view(c: Criterion) -> CriterionView:
    if c.scale == Criterion.Scale.BINARY:
        candidates = ["pass", "fail"]
    elif c.scale in (Criterion.Scale.ORDINAL, Criterion.Scale.CATEGORICAL):
        candidates = [str(p.get("value")) for p in c.points if isinstance(p, dict)]
    else:
        candidates = []
    return CriterionView(
        key=c.key,
        name=c.name,
        guidance=c.guidance,
        scale=c.scale,
        points=[
            {"value": p.get("value"), "label": p.get("label", "")}
            for p in c.points
            if isinstance(p, dict)
        ],
        pass_threshold=c.pass_threshold,
        pass_labels=list(c.pass_labels or []),
        failing_values=[v for v in candidates if is_failure(c, v)],
        needs_context=bool(c.needs_context),
        min=c.min if c.scale == Criterion.Scale.INTERVAL else None,
        max=c.max if c.scale == Criterion.Scale.INTERVAL else None,
    )


_G_ENTRY = RowShape(QueueEntry, "e")
_G_PLAN = RowShape(SamplingPlan, "p")
_G_STUDY = RowShape(Study, "s")
_G_RUBRIC = RowShape(RubricVersion, "r")
_G_OUTPUT = RowShape(Output, "o", only=("id", "item_id", "text", "error"))
_G_ITEM = RowShape(Item, "i", only=("id", "input", "input_format", "context", "reference"))


def _entry_for_grading(entry_id: int) -> QueueEntry:
    """The entry with its plan, study and rubric, and (for an output) the output and item.

    One precompiled query (see reviewhub/rawrows.py): "next" is on every annotator's critical
    path. Only allow-listed columns of the subject are loaded; candidate rows are never
    joined.
    """
    shapes = (_G_ENTRY, _G_PLAN, _G_STUDY, _G_RUBRIC, _G_OUTPUT, _G_ITEM)
    row = fetch_one(
        f"SELECT {', '.join(shape.select for shape in shapes)} "
        f"FROM {QueueEntry._meta.db_table} e "
        f"JOIN {SamplingPlan._meta.db_table} p ON p.id = e.plan_id "
        f"JOIN {Study._meta.db_table} s ON s.id = p.study_id "
        f"JOIN {RubricVersion._meta.db_table} r ON r.id = p.rubric_id "
        f"LEFT JOIN {Output._meta.db_table} o ON o.id = e.output_id "
        f"LEFT JOIN {Item._meta.db_table} i ON i.id = o.item_id "
        "WHERE e.id = %s",
        [entry_id],
    )
    if row is None:
        raise QueueEntry.DoesNotExist(f"queue entry {entry_id} does not exist")
    offsets = []
    at = 0
    for shape in shapes:
        offsets.append(at)
        at += shape.width
    entry = _G_ENTRY.load(row)
    plan = _G_PLAN.load(row, offsets[1])
    plan.study = _G_STUDY.load(row, offsets[2])
    plan.rubric = _G_RUBRIC.load(row, offsets[3])
    entry.plan = plan
    output = _G_OUTPUT.load_optional(row, offsets[4])
    if output is not None:
        item = _G_ITEM.load_optional(row, offsets[5])
        if item is not None:
            output.item = item
    entry.output = output
    return entry


def grading_context(*, assignment: Assignment) -> GradingContext:
    """The blind view of an assignment's subject (see the module docstring)."""
    # One query for the entry, its plan and study, and (for an output) the output and item:
    # "next" is on every annotator's critical path. Only allow-listed columns of the subject
    # are loaded; candidate rows are never joined.
    entry = _entry_for_grading(assignment.entry_id)
    # Callers (the next view's progress) read the plan through the assignment: no second load.
    assignment.entry = entry
    study = entry.plan.study
    criteria = [_criterion_view(c) for c in cached_plan_criteria(entry.plan)]

    if entry.comparison_id is not None:
        comparison = Comparison.objects.only("id", "item_id", "output_a_id", "output_b_id").get(
            pk=entry.comparison_id
        )
        texts = dict(
            Output.objects.filter(
                pk__in=[comparison.output_a_id, comparison.output_b_id]
            ).values_list("id", "text")
        )
        a_text, b_text = texts[comparison.output_a_id], texts[comparison.output_b_id]
        left, right = (b_text, a_text) if assignment.swapped else (a_text, b_text)
        item_id = comparison.item_id
        kind, output_text, failed = "pairwise", None, False
    else:
        output = entry.output
        if output is None:
            raise Output.DoesNotExist(f"queue entry {entry.pk} has no subject")
        item_id = output.item_id
        kind, output_text, failed = "output", output.text, bool(output.error)
        left, right = None, None
    item = (
        entry.output.item
        if entry.output is not None
        else Item.objects.only("input", "input_format", "context", "reference").get(pk=item_id)
    )
    return GradingContext(
        assignment_id=assignment.pk,
        study_slug=study.slug,
        study_name=study.name,
        kind=kind,
        status=assignment.status,
        lease_expires_at=assignment.lease_expires_at,
        item_input=item.input,
        item_input_format=item.input_format,
        item_context=item.context,
        item_reference=item.reference if study.show_reference else None,
        output_text=output_text,
        output_failed=failed,
        left_text=left,
        right_text=right,
        criteria=criteria,
    )


# --- progress ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    done_today: int
    done_total: int
    left_in_queue: int
    plan_version: int | None

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _today_start() -> datetime:
    now = timezone.localtime()
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def annotator_progress(
    *, study: Study, annotator: User, plan: SamplingPlan | None = None
) -> Progress:
    """Submissions today and in total (all plan versions), and entries of the active plan this
    annotator may still be offered (not complete, never assigned to them). Pass the active
    `plan` when the caller has it, to save a query."""
    plan = plan if plan is not None and plan.is_active else active_plan(study)
    # One statement for the three counts: progress rides on every next and submit response.
    # The "left" count walks the plan's open entries (the partial index) and probes the
    # (entry, annotator) unique index for each.
    a = Assignment._meta.db_table
    e = QueueEntry._meta.db_table
    p = SamplingPlan._meta.db_table
    sql = f"""
        SELECT
            COUNT(*),
            COALESCE(SUM(CASE WHEN a.finished_at >= %s THEN 1 ELSE 0 END), 0),
            (SELECT COUNT(*) FROM {e} q
              WHERE q.plan_id = %s AND q.done_count < q.needed
                AND NOT EXISTS (SELECT 1 FROM {a} m
                                 WHERE m.entry_id = q.id AND m.annotator_id = %s))
        FROM {a} a
        JOIN {e} e ON e.id = a.entry_id
        JOIN {p} p ON p.id = e.plan_id
        WHERE p.study_id = %s AND a.annotator_id = %s AND a.status = %s AND NOT a.carried_over
    """
    params = [
        connection.ops.adapt_datetimefield_value(_today_start()),
        plan.pk if plan is not None else -1,
        annotator.pk,
        study.pk,
        annotator.pk,
        Assignment.Status.SUBMITTED.value,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        total, today, left = cursor.fetchone()
    return Progress(
        done_today=int(today),
        done_total=int(total),
        left_in_queue=int(left) if plan is not None else 0,
        plan_version=plan.version if plan else None,
    )


@dataclass(frozen=True)
class StratumQueueRow:
    stratum: str
    entries: int
    complete: int
    needed: int  # annotations the stratum needs in total (entries x k, gold included)
    leased: int  # live leases now
    done: int  # submitted annotations counted toward k
    gold_entries: int


def sampling_plans_list(*, study: Study) -> QuerySet[SamplingPlan]:
    """The study's sampling plan versions, newest first."""
    return (SamplingPlan.objects.filter(study=study).select_related("created_by")
            .order_by("-version"))


def queue_status(*, study: Study, plan: SamplingPlan | None = None) -> list[StratumQueueRow]:
    """Per stratum of the active (or given) plan: needed / leased / done. One query."""
    plan = plan or active_plan(study)
    if plan is None:
        return []
    rows = (
        QueueEntry.objects.filter(plan=plan)
        .values("stratum")
        .annotate(
            entries=Count("id"),
            complete=Count("id", filter=Q(done_count__gte=F("needed"))),
            needed=Sum("needed"),
            leased=Sum("leased_count"),
            done=Sum("done_count"),
            gold=Count("id", filter=Q(is_gold=True)),
        )
        .order_by("stratum")
    )
    return [
        StratumQueueRow(
            stratum=r["stratum"],
            entries=r["entries"],
            complete=r["complete"],
            needed=r["needed"] or 0,
            leased=r["leased"] or 0,
            done=r["done"] or 0,
            gold_entries=r["gold"],
        )
        for r in rows
    ]


@dataclass(frozen=True)
class AnnotatorStatsRow:
    annotator_id: int
    username: str
    submitted: int
    submitted_last_hour: int
    submitted_today: int
    per_active_hour: float | None  # submissions per hour of recorded time on task
    median_time_on_task_ms: float | None
    skipped: int
    gold_labels: int
    gold_correct: int
    gold_accuracy: float | None
    # Subjects the annotator labelled outside the grading page (imported, or before any plan):
    # they count toward a plan's "done" (a plan credits labels that already exist), so the
    # page that shows that count has to show who gave them.
    imported: int = 0


def annotator_stats(*, study: Study) -> list[AnnotatorStatsRow]:
    """Per annotator of the study: throughput, median time on task and gold accuracy.

    Time on task is per submission (the same value is stored on each criterion's annotation).
    Gold accuracy is over (subject, criterion) pairs that have a gold label. `imported` counts
    the subjects labelled without an assignment (imports, labels older than the plan). Five
    queries.
    """
    now = timezone.now()
    imported: Counter[int] = Counter(
        annotator_id
        for annotator_id, _o, _c in Annotation.objects.filter(
            criterion__rubric__study=study, assignment__isnull=True
        ).order_by().values_list("annotator_id", "output_id", "comparison_id").distinct()
    )
    per_assignment = (
        Annotation.objects.filter(criterion__rubric__study=study, assignment__isnull=False)
        .values_list("annotator_id", "assignment_id", "time_on_task_ms", "created_at")
        .distinct()
    )
    submissions: dict[int, dict[int, tuple[int | None, datetime]]] = defaultdict(dict)
    for annotator_id, assignment_id, ms, created in per_assignment:
        submissions[annotator_id][assignment_id] = (ms, created)
    skipped = dict(
        Assignment.objects.filter(entry__plan__study=study, status=Assignment.Status.SKIPPED)
        .values("annotator_id")
        .annotate(n=Count("id"))
        .values_list("annotator_id", "n")
    )
    gold: dict[tuple[str, int, int], str] = {}
    for criterion_id, output_id, comparison_id, value in GoldLabel.objects.filter(
        criterion__rubric__study=study
    ).values_list("criterion_id", "output_id", "comparison_id", "value"):
        gold[(*SubjectRef.of(output_id, comparison_id).short, criterion_id)] = value
    gold_n: Counter[int] = Counter()
    gold_ok: Counter[int] = Counter()
    if gold:
        for annotator_id, criterion_id, output_id, comparison_id, value in (
            Annotation.objects.filter(criterion__rubric__study=study)
            .filter(subjects_q({SubjectRef.from_short((k[0], k[1])) for k in gold}))
            .values_list("annotator_id", "criterion_id", "output_id", "comparison_id", "value")
        ):
            key = (*SubjectRef.of(output_id, comparison_id).short, criterion_id)
            if key in gold:
                gold_n[annotator_id] += 1
                gold_ok[annotator_id] += int(gold[key] == value)
    people = set(submissions) | set(skipped) | set(imported)
    from django.contrib.auth import get_user_model

    names = dict(get_user_model().objects.filter(pk__in=people).values_list("pk", "username"))
    today = _today_start()
    rows = []
    for annotator_id in sorted(people, key=lambda pk: names.get(pk, "")):
        subs = list(submissions.get(annotator_id, {}).values())
        times = [ms for ms, _ in subs if ms is not None]
        total_hours = sum(times) / 3_600_000 if times else 0.0
        rows.append(
            AnnotatorStatsRow(
                annotator_id=annotator_id,
                username=names.get(annotator_id, ""),
                submitted=len(subs),
                submitted_last_hour=sum(1 for _, t in subs if t >= now - timedelta(hours=1)),
                submitted_today=sum(1 for _, t in subs if t >= today),
                per_active_hour=(len(times) / total_hours) if total_hours > 0 else None,
                median_time_on_task_ms=float(statistics.median(times)) if times else None,
                skipped=skipped.get(annotator_id, 0),
                gold_labels=gold_n[annotator_id],
                gold_correct=gold_ok[annotator_id],
                gold_accuracy=(gold_ok[annotator_id] / gold_n[annotator_id])
                if gold_n[annotator_id]
                else None,
                imported=imported[annotator_id],
            )
        )
    return rows


# --- disagreements -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DisagreementRow:
    criterion_key: str
    criterion_id: int
    subject: str  # "output" | "comparison"
    subject_id: int
    item_external_id: str
    human_values: dict[str, int]
    n_annotators: int
    human_majority: str | None  # None when there is no strict majority
    humans_disagree: bool
    judge_values: dict[str, int]
    judges_disagree: bool  # a judge verdict differs from the human majority
    adjudicated_value: str | None
    adjudication_note: str

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def disagreement_need(row: DisagreementRow) -> tuple[int, int]:
    """Sort key putting the pairs that most need a lead first: unresolved before adjudicated;
    within each, a human split with no majority, then a human split with a majority, then
    unanimous humans that a judge contradicts (the judge is the likelier one to be wrong)."""
    if not row.humans_disagree:
        return (1 if row.adjudicated_value is not None else 0, 2)
    kind = 0 if row.human_majority is None else 1
    return (1 if row.adjudicated_value is not None else 0, kind)


def disagreements(
    *, study: Study, criterion: Criterion | None = None, include_judges: bool = True
) -> list[DisagreementRow]:
    """(Subject, criterion) pairs where annotators disagree with each other, or (with
    `include_judges`) where a judge verdict differs from the annotators' strict majority.
    Values are canonical (pairwise "A" = comparison.output_a). Bounded queries (4)."""
    annotations = Annotation.objects.filter(criterion__rubric__study=study)
    if criterion is not None:
        annotations = annotations.filter(criterion=criterion)
    human: dict[tuple[str, int, int], Counter[str]] = defaultdict(Counter)
    for criterion_id, output_id, comparison_id, value in annotations.values_list(
        "criterion_id", "output_id", "comparison_id", "value"
    ):
        key = (*SubjectRef.of(output_id, comparison_id).pair, criterion_id)
        human[key][value] += 1
    if not human:
        return []
    judge = _judge_values(human) if include_judges else {}
    adjudicated = _adjudications(human)
    criteria = dict(Criterion.objects.filter(id__in={k[2] for k in human}).values_list("id", "key"))
    out_items, cmp_items = _item_external_ids(human)
    rows = []
    for key in sorted(human):
        kind, subject_id, criterion_id = key
        values = human[key]
        n = sum(values.values())
        top, top_n = values.most_common(1)[0]
        majority = top if top_n * 2 > n else None
        humans_disagree = len(values) > 1
        judge_values = judge.get(key, Counter())
        judges_disagree = bool(judge_values) and (
            majority is None or any(v != majority for v in judge_values)
        )
        if not humans_disagree and not judges_disagree:
            continue
        adj = adjudicated.get(key)
        rows.append(
            DisagreementRow(
                criterion_key=criteria[criterion_id],
                criterion_id=criterion_id,
                subject=kind,
                subject_id=subject_id,
                item_external_id=(out_items if kind == "output" else cmp_items).get(subject_id, ""),
                human_values=dict(values),
                n_annotators=n,
                human_majority=majority,
                humans_disagree=humans_disagree,
                judge_values=dict(judge_values),
                judges_disagree=judges_disagree,
                adjudicated_value=adj[0] if adj else None,
                adjudication_note=adj[1] if adj else "",
            )
        )
    return rows



_PairKey = tuple[str, int, int]  # (subject kind, subject id, criterion id)


def _judge_values(human: Mapping[_PairKey, Counter[str]]) -> dict[_PairKey, Counter[str]]:
    """The scored judge verdicts' values on the pairs the annotators labelled."""
    judge: dict[_PairKey, Counter[str]] = defaultdict(Counter)
    verdicts = Verdict.objects.filter(
        criterion_id__in={k[2] for k in human}, is_scored=True
    ).filter(subjects_q({SubjectRef.from_pair((k[0], k[1])) for k in human}))
    for criterion_id, output_id, comparison_id, value in verdicts.values_list(
        "criterion_id", "output_id", "comparison_id", "value"
    ):
        key = (*SubjectRef.of(output_id, comparison_id).pair, criterion_id)
        if key in human:
            judge[key][value] += 1
    return judge


def _adjudications(human: Mapping[_PairKey, Counter[str]]) -> dict[_PairKey, tuple[str, str]]:
    """The latest adjudication (value, note) of each pair on the criteria labelled."""
    adjudicated: dict[_PairKey, tuple[str, str]] = {}
    for criterion_id, output_id, comparison_id, value, note in (
        Adjudication.objects.filter(criterion_id__in={k[2] for k in human})
        .order_by("id")
        .values_list("criterion_id", "output_id", "comparison_id", "value", "note")
    ):
        key = (*SubjectRef.of(output_id, comparison_id).pair, criterion_id)
        adjudicated[key] = (value, note)  # later rows win
    return adjudicated


def _item_external_ids(
    human: Mapping[_PairKey, Counter[str]],
) -> tuple[dict[int, str], dict[int, str]]:
    """The item external id of each output and of each comparison labelled."""
    out_items = dict(
        Output.objects.filter(id__in={k[1] for k in human if k[0] == "output"}).values_list(
            "id", "item__external_id"
        )
    )
    cmp_items = dict(
        Comparison.objects.filter(id__in={k[1] for k in human if k[0] == "comparison"}).values_list(
            "id", "item__external_id"
        )
    )
    return out_items, cmp_items


def my_annotations(
    *, study: Study, annotator: User, revisable_only: bool = False
) -> QuerySet[Annotation]:
    """The annotator's own annotations in the study, newest first (criterion and assignment
    joined, so serialising a page is one query)."""
    qs = (
        Annotation.objects.filter(annotator_id=annotator.pk, criterion__rubric__study=study)
        .select_related("criterion", "assignment", "plan")
        .order_by("-id")
    )
    if revisable_only:
        since = timezone.now() - timedelta(minutes=settings.REVIEWHUB_REVISION_WINDOW_MINUTES)
        qs = qs.filter(created_at__gte=since)
    return qs


_O_ASSIGNMENT = RowShape(Assignment, "a")
_O_ENTRY = RowShape(QueueEntry, "e")


def assignment_for_annotator(
    *, study: Study, annotator: User, assignment_id: int
) -> Assignment | None:
    """The annotator's own assignment in this study, or None (someone else's is invisible)."""
    # Precompiled (see reviewhub/rawrows.py): every submit, skip and heartbeat starts here.
    row = fetch_one(
        f"SELECT {_O_ASSIGNMENT.select}, {_O_ENTRY.select} FROM {Assignment._meta.db_table} a "
        f"JOIN {QueueEntry._meta.db_table} e ON e.id = a.entry_id "
        f"JOIN {SamplingPlan._meta.db_table} p ON p.id = e.plan_id "
        "WHERE a.id = %s AND a.annotator_id = %s AND p.study_id = %s",
        [assignment_id, annotator.pk, study.pk],
    )
    if row is None:
        return None
    assignment = _O_ASSIGNMENT.load(row)
    assignment.entry = _O_ENTRY.load(row, _O_ASSIGNMENT.width)
    return assignment


def rubric_referenced(rubric: RubricVersion, criteria: QuerySet[Criterion]) -> bool:
    """Whether annotation work refers to the rubric version: an active sampling plan (annotators
    holding leases grade against its text, and a criterion edited under them would mix two
    meanings in one plan's labels), or annotations, gold labels or adjudications on its
    criteria (registered with `studies.services.rubric_use_register`)."""
    if SamplingPlan.objects.filter(rubric=rubric, is_active=True).exists():
        return True
    return any(model.objects.filter(criterion__in=criteria).exists()
               for model in (Annotation, GoldLabel, Adjudication))
