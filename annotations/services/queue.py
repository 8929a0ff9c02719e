"""The assignment queue: claiming the next subject under a lease, heartbeat, skip and the
stale-lease sweep.

Queue invariants (the database enforces the last two with check constraints):
- at most one Assignment per (entry, annotator), ever — nobody gets the same subject twice;
- ``entry.leased_count`` equals the number of its assignments in status "leased", and changes
  only under the entry's row lock, in the same transaction as the assignment;
- ``done_count + leased_count <= needed`` and ``done_count <= needed``.

Locks are always taken entry first, then assignment, so that next, submit, skip and the lease
sweep cannot deadlock each other. See docs/annotation.md for the semantics.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, connection, transaction
from django.db.models import BigIntegerField as BigIntField
from django.db.models import Exists, ExpressionWrapper, F, OuterRef, QuerySet, Value
from django.db.models.functions import Mod
from django.utils import timezone

from reviewhub.capabilities import Capability, capabilities
from reviewhub.errors import Conflict, Forbidden, NotFound, ValidationFailed
from reviewhub.rawrows import RowShape, fetch_one
from studies.models import Membership, Study

from .. import sampling
from ..models import Assignment, QueueEntry, SamplingPlan
from .common import require_annotator

# Candidates the queue looks at per probe; the annotator's own random order is applied within.
QUEUE_WINDOW = 32
# Rounds of SKIP LOCKED claims (with a short back-off) before a busy queue reports nothing.
CLAIM_RETRIES = 40
# Expired leases the sweep handles per call of assignment_next (the Celery sweep does the rest).
SWEEP_BATCH = 50
# A hash modulus: the largest prime below 2**31, so (a * sort_key + b) stays inside 63 bits.
_HASH_PRIME = 2_147_483_647


def _annotator_hash(plan_id: int, annotator_id: int) -> tuple[int, int, int]:
    """(pivot, a, b) of an annotator's private order over a plan's entries."""
    digest = hashlib.sha256(f"{plan_id}:{annotator_id}".encode()).digest()
    pivot = int.from_bytes(digest[:8], "big") % sampling.SORT_KEY_LIMIT
    a = int.from_bytes(digest[8:16], "big") % (_HASH_PRIME - 1) + 1
    b = int.from_bytes(digest[16:24], "big") % _HASH_PRIME
    return pivot, a, b


def _lease_until(now: datetime, minutes: int | None) -> datetime:
    lease = minutes if minutes is not None else settings.REVIEWHUB_LEASE_MINUTES
    if lease <= 0:
        raise ValidationFailed.at("lease_minutes", "lease_minutes must be positive.")
    return now + timedelta(minutes=lease)



_last_sweep = 0.0
_sweep_lock = threading.Lock()


def assignments_expire_stale(*, now: datetime | None = None, limit: int = SWEEP_BATCH) -> int:
    """Return expired leases to the pool; an entry locked by someone else is left for later.

    Called by the Celery beat task `annotations.expire_leases` and, throttled, by
    assignment_next, so expired leases return even without a beat scheduler.
    """
    now = now or timezone.now()
    stale = list(
        Assignment.objects.filter(status=Assignment.Status.LEASED, lease_expires_at__lt=now)
        .order_by("lease_expires_at")
        .values_list("pk", "entry_id")[:limit]
    )
    expired = 0
    for pk, entry_id in stale:
        with transaction.atomic():
            if _lock_entry(entry_id, skip_locked=True) is None:
                continue
            changed = Assignment.objects.filter(
                pk=pk, status=Assignment.Status.LEASED, lease_expires_at__lt=now
            ).update(status=Assignment.Status.EXPIRED)
            if changed:
                QueueEntry.objects.filter(pk=entry_id).update(leased_count=F("leased_count") - 1)
                expired += 1
    return expired


def _maybe_sweep(now: datetime) -> None:
    """Run the sweep at most every REVIEWHUB_LEASE_SWEEP_SECONDS per process: a query per
    "next" call would cost every annotator a round trip to find nothing."""
    global _last_sweep
    interval = settings.REVIEWHUB_LEASE_SWEEP_SECONDS
    tick = time.monotonic()
    with _sweep_lock:
        if interval > 0 and tick - _last_sweep < interval:
            return
        _last_sweep = tick
    assignments_expire_stale(now=now)


def _lock_entry(entry_id: int, *, skip_locked: bool = False) -> QueueEntry | None:
    qs = QueueEntry.objects.filter(pk=entry_id)
    if connection.features.has_select_for_update:
        qs = qs.select_for_update(
            skip_locked=skip_locked and connection.features.has_select_for_update_skip_locked
        )
    return qs.first()


ASSIGNMENT_ROW = RowShape(Assignment, "a")


def for_update_clause(of: str) -> str:
    return f" FOR UPDATE OF {of}" if connection.features.has_select_for_update else ""


def _lock_assignment(assignment_id: int) -> Assignment:
    row = fetch_one(
        f"SELECT {ASSIGNMENT_ROW.select} FROM {Assignment._meta.db_table} a WHERE a.id = %s"
        + for_update_clause("a"),
        [assignment_id],
    )
    if row is None:
        raise Assignment.DoesNotExist(f"assignment {assignment_id} does not exist")
    return ASSIGNMENT_ROW.load(row)


def _candidates(plan: SamplingPlan, annotator_id: int) -> QuerySet[QueueEntry]:
    """Entries of the plan with room that this annotator has never been assigned."""
    return (
        QueueEntry.objects.filter(plan=plan, done_count__lt=F("needed"))  # the partial index
        .filter(done_count__lt=F("needed") - F("leased_count"))
        .exclude(
            Exists(Assignment.objects.filter(entry_id=OuterRef("pk"), annotator_id=annotator_id))
        )
    )


# PostgreSQL claims an entry in ONE statement: pick a candidate in the annotator's window and
# order (SKIP LOCKED), take a lease slot on it, and insert the assignment. No entry lock is
# held between round trips, so 50 annotators do not queue behind each other's transactions.
# The check constraint queueentry_not_overleased is the last line of defence against
# over-leasing.
# `mine` first: when the annotator already holds a live lease in the plan, the statement
# returns it and claims nothing. The caller holds the annotator's queue lock, and this
# statement's snapshot is newer than the lock, so a lease committed by the same annotator's
# concurrent call (a second tab) is seen here even where the plan query's `has_unfinished`
# predates it.
_CLAIM_SQL = """
WITH mine AS (
    SELECT a.id FROM annotations_assignment a
    JOIN annotations_queueentry e ON e.id = a.entry_id
    WHERE a.annotator_id = %(annotator)s AND a.status = 'leased'
      AND a.lease_expires_at > %(now)s AND e.plan_id = %(plan)s
    ORDER BY a.id
    LIMIT 1
), cand AS (
    SELECT e.id FROM annotations_queueentry e
    WHERE NOT EXISTS (SELECT 1 FROM mine)
      AND e.plan_id = %(plan)s
      AND e.done_count < e.needed
      AND e.done_count + e.leased_count < e.needed
      AND e.sort_key >= %(lo)s AND e.sort_key < %(hi)s
      AND NOT EXISTS (
          SELECT 1 FROM annotations_assignment a
          WHERE a.entry_id = e.id AND a.annotator_id = %(annotator)s
      )
    ORDER BY e.sort_key
    {window}
), picked AS (
    SELECT e.id, e.comparison_id FROM annotations_queueentry e
    WHERE e.id IN (SELECT id FROM cand)
      AND e.done_count + e.leased_count < e.needed
    ORDER BY (e.sort_key * %(a)s + %(b)s) %% 2147483647, e.id
    LIMIT 1
    FOR UPDATE OF e SKIP LOCKED
), bumped AS (
    UPDATE annotations_queueentry q SET leased_count = q.leased_count + 1
    FROM picked WHERE q.id = picked.id
    RETURNING q.id, picked.comparison_id
), claimed AS (
    INSERT INTO annotations_assignment
        (entry_id, annotator_id, status, lease_expires_at, swapped, carried_over, started_at)
    SELECT bumped.id, %(annotator)s, 'leased', %(expires)s,
           (bumped.comparison_id IS NOT NULL AND random() < 0.5), false, %(now)s
    FROM bumped
    RETURNING {returning}
)
SELECT {returning} FROM claimed
UNION ALL
SELECT {returning_mine} FROM annotations_assignment a WHERE a.id IN (SELECT id FROM mine)
"""

_ASSIGNMENT_COLUMNS = [str(f.column) for f in Assignment._meta.concrete_fields]
_claim_sqls: dict[str, str] = {}


def _claim_sql(window: str) -> str:
    sql = _claim_sqls.get(window)
    if sql is None:
        sql = _claim_sqls[window] = _CLAIM_SQL.format(
            window=window,
            returning=", ".join(_ASSIGNMENT_COLUMNS),
            returning_mine=", ".join(f"a.{c}" for c in _ASSIGNMENT_COLUMNS),
        )
    return sql


def _claim_postgres(
    plan: SamplingPlan, annotator_id: int, *, now: datetime, expires: datetime
) -> Assignment | None:
    pivot, a, b = _annotator_hash(plan.pk, annotator_id)
    params: dict[str, Any] = {
        "plan": plan.pk,
        "annotator": annotator_id,
        "a": a,
        "b": b,
        "now": now,
        "expires": expires,
    }
    windows = [
        (pivot, sampling.SORT_KEY_LIMIT, f"LIMIT {QUEUE_WINDOW}"),
        (0, pivot, f"LIMIT {QUEUE_WINDOW}"),
        (0, sampling.SORT_KEY_LIMIT, ""),
    ]
    with connection.cursor() as cursor:
        for attempt in range(CLAIM_RETRIES):
            for lo, hi, window in windows if attempt == 0 else windows[2:]:
                cursor.execute(_claim_sql(window), {**params, "lo": lo, "hi": hi})
                row = cursor.fetchone()
                if row is not None:
                    return Assignment.from_db(
                        connection.alias,
                        [f.attname for f in Assignment._meta.concrete_fields],
                        list(row),
                    )
            # Every candidate was locked by someone else's claim or submit. Never wait on a row
            # lock here: two claimers walking different orders could deadlock. The locks are
            # held for milliseconds, so look again shortly, unless nothing is left at all.
            if not _candidates(plan, annotator_id).exists():
                return None
            time.sleep(min(0.05, 0.002 * 2**attempt))
    return None


def _claim_orm(
    plan: SamplingPlan, annotator_id: int, *, now: datetime, expires: datetime
) -> Assignment | None:
    """The same claim for SQLite, whose IMMEDIATE transactions serialise writers (the demo)."""
    pivot, a, b = _annotator_hash(plan.pk, annotator_id)
    base = _candidates(plan, annotator_id)
    order = ExpressionWrapper(
        Mod(F("sort_key") * Value(a) + Value(b), Value(_HASH_PRIME)), output_field=BigIntField()
    )
    with transaction.atomic():
        entry = None
        for window in (base.filter(sort_key__gte=pivot), base.filter(sort_key__lt=pivot)):
            ids = window.order_by("sort_key").values("pk")[:QUEUE_WINDOW]
            entry = (
                QueueEntry.objects.filter(pk__in=ids)
                .filter(done_count__lt=F("needed") - F("leased_count"))
                .order_by(order, "pk")
                .first()
            )
            if entry is not None:
                break
        if entry is None:
            return None
        assignment = Assignment.objects.create(
            entry=entry,
            annotator_id=annotator_id,
            status=Assignment.Status.LEASED,
            lease_expires_at=expires,
            swapped=entry.comparison_id is not None and random.random() < 0.5,
        )
        QueueEntry.objects.filter(pk=entry.pk).update(leased_count=F("leased_count") + 1)
        return assignment


def assignment_next(
    *, study: Study, annotator: User, lease_minutes: int | None = None
) -> Assignment | None:
    """The annotator's next subject under the study's active plan, leased to them.

    In order: their live lease (a reload or a second tab gets the same one); an expired lease
    of theirs whose entry still has room (resumed, never a second row); a new entry they were
    never assigned, chosen in their own random order. None when nothing is left for them.

    Calls by the same annotator in the same study are serialised (see `_next_serialised`), so
    that two tabs asking at the same instant get one lease, not one each; different annotators
    never wait for each other here.
    """
    now = timezone.now()
    # Before the annotator's transaction: the sweep locks other people's entries, which must
    # not stay locked until this call commits.
    _maybe_sweep(now)
    expires = _lease_until(now, lease_minutes)
    for _attempt in range(5):
        try:
            with transaction.atomic():
                return _next_serialised(
                    study=study, annotator=annotator, now=now, expires=expires
                )
        except IntegrityError:
            # The check constraint caught a race with another annotator's claim (the
            # transaction is rolled back): look again from the start.
            continue
    return None


def _next_serialised(
    *, study: Study, annotator: User, now: datetime, expires: datetime
) -> Assignment | None:
    """assignment_next's body, inside its transaction.

    The first statement takes the annotator's queue lock for the study (PostgreSQL: a
    transaction advisory lock; SQLite: the IMMEDIATE transaction already holds the database's
    write lock), so a second call of the same annotator waits until the first has committed
    its lease, and then finds and returns that lease.
    """
    plan = _active_plan_for_annotator(study=study, annotator=annotator, lock=True)
    if plan is None:
        return None
    unfinished = (
        list(
            Assignment.objects.select_related("entry")
            .filter(
                entry__plan=plan,
                annotator_id=annotator.pk,
                status__in=[Assignment.Status.LEASED, Assignment.Status.EXPIRED],
            )
            .order_by("id")[:20]
        )
        if getattr(plan, "has_unfinished", True)
        else []
    )
    for mine in unfinished:
        expiry = mine.lease_expires_at
        if mine.status == Assignment.Status.LEASED and expiry is not None and expiry > now:
            return mine
    for stale in unfinished:
        resumed = _resume(stale, now=now, expires=expires)
        if resumed is not None:
            return resumed
    claim = _claim_postgres if connection.vendor == "postgresql" else _claim_orm
    return claim(plan, annotator.pk, now=now, expires=expires)


def _queue_lock_key(study_id: int, user_id: int) -> int:
    """The advisory lock key of one annotator's "next" calls in one study (a signed bigint).

    A hash, because the two-key form takes only 32-bit ids; a collision merely makes two
    annotators wait for each other's "next" for a few milliseconds."""
    digest = hashlib.sha256(f"reviewhub.queue_next:{study_id}:{user_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)

_PLAN = RowShape(SamplingPlan, "p")


def _active_plan_for_annotator(
    *, study: Study, annotator: User, lock: bool = False
) -> SamplingPlan | None:
    """The active plan, checking in the same query that the caller may annotate (403).

    The plan carries `has_unfinished`: whether the caller holds a lease or an expired lease in
    it, so that the common case (none) costs no extra round trip.

    With `lock` (inside a transaction, PostgreSQL), the same statement first takes the
    caller's queue lock for the study (`_queue_lock_key`), held until the transaction ends; it
    costs no round trip of its own. This statement's snapshot predates the wait for the lock,
    so `has_unfinished` may miss a lease that a concurrent call of the same annotator has just
    committed: the claim statement, which runs after the lock, checks for that lease itself
    (see _CLAIM_SQL)."""
    locking = lock and connection.vendor == "postgresql"
    # Precompiled (see reviewhub/rawrows.py): this runs on every "next".
    row = fetch_one(
        ("WITH lk AS MATERIALIZED (SELECT pg_advisory_xact_lock(%s)) " if locking else "")
        + f"SELECT {_PLAN.select}, EXISTS(SELECT 1 FROM {Assignment._meta.db_table} a "
        f"JOIN {QueueEntry._meta.db_table} e ON e.id = a.entry_id WHERE e.plan_id = p.id "
        "AND a.annotator_id = %s AND a.status IN (%s, %s)), "
        f"(SELECT m.role FROM {Membership._meta.db_table} m WHERE m.study_id = %s "
        "AND m.user_id = %s) "
        f"FROM {'lk, ' if locking else ''}{SamplingPlan._meta.db_table} p "
        "WHERE p.study_id = %s AND p.is_active ORDER BY p.version DESC LIMIT 1",
        ([_queue_lock_key(study.pk, annotator.pk)] if locking else [])
        + [annotator.pk, Assignment.Status.LEASED.value, Assignment.Status.EXPIRED.value,
           study.pk, annotator.pk, study.pk],
    )
    is_superuser = bool(getattr(annotator, "is_superuser", False))
    if row is None:
        # No active plan, so no row carried the role: ask apart (superusers need not).
        if Capability.GRADE not in capabilities(None, is_superuser=is_superuser):
            require_annotator(study=study, user=annotator)
        return None
    plan = _PLAN.load(row)
    plan.has_unfinished = bool(row[_PLAN.width])  # type: ignore[attr-defined]
    if Capability.GRADE not in capabilities(row[_PLAN.width + 1], is_superuser=is_superuser):
        raise Forbidden(f"This needs the 'annotator' role in study '{study.slug}'.")
    return plan


def _resume(stale: Assignment, *, now: datetime, expires: datetime) -> Assignment | None:
    with transaction.atomic():
        entry = _lock_entry(stale.entry_id)
        assignment = _lock_assignment(stale.pk)
        if entry is None:
            return None
        if assignment.status == Assignment.Status.LEASED:
            # Past its expiry but not yet swept: it still holds its slot.
            assignment.lease_expires_at = expires
            assignment.save(update_fields=["lease_expires_at"])
        elif (
            assignment.status == Assignment.Status.EXPIRED
            and entry.done_count + entry.leased_count < entry.needed
        ):
            assignment.status = Assignment.Status.LEASED
            assignment.lease_expires_at = expires
            assignment.save(update_fields=["status", "lease_expires_at"])
            QueueEntry.objects.filter(pk=entry.pk).update(leased_count=F("leased_count") + 1)
            entry.leased_count += 1
        else:
            return None
        assignment.entry = entry
        return assignment


def assignment_owned_check(assignment: Assignment, annotator: User) -> None:
    if assignment.annotator_id != annotator.pk:
        # Someone else's assignment does not exist as far as this annotator is concerned.
        raise NotFound("Assignment not found.")


def _plan_is_active(entry: QueueEntry) -> bool:
    return SamplingPlan.objects.filter(pk=entry.plan_id, is_active=True).exists()


def assignment_heartbeat(
    *, assignment: Assignment, annotator: User, lease_minutes: int | None = None
) -> Assignment:
    """Extend the lease while the annotator works; an expired lease is resumed if there is room.

    409 when the assignment is finished, its plan superseded, or the entry filled up meanwhile.
    """
    assignment_owned_check(assignment, annotator)
    now = timezone.now()
    expires = _lease_until(now, lease_minutes)
    changed = Assignment.objects.filter(pk=assignment.pk, status=Assignment.Status.LEASED).update(
        lease_expires_at=expires
    )
    if changed:
        assignment.refresh_from_db()
        return assignment
    assignment.refresh_from_db()
    if assignment.status == Assignment.Status.EXPIRED and _plan_is_active(assignment.entry):
        resumed = _resume(assignment, now=now, expires=expires)
        if resumed is not None:
            return resumed
        raise Conflict(
            "The lease expired and the output has been handed to other annotators.",
            code="lease_expired",
        )
    raise Conflict(
        f"This assignment is {assignment.status}; there is no lease to extend.",
        code=f"assignment_{assignment.status}",
    )


def assignment_skip(*, assignment: Assignment, annotator: User) -> None:
    """Give the subject back; this annotator will never be offered it again."""
    assignment_owned_check(assignment, annotator)
    now = timezone.now()
    with transaction.atomic():
        _lock_entry(assignment.entry_id)
        current = _lock_assignment(assignment.pk)
        if current.status == Assignment.Status.SKIPPED:
            return
        if current.status == Assignment.Status.SUBMITTED:
            raise Conflict("This assignment was already submitted.", code="already_submitted")
        if current.status == Assignment.Status.LEASED:
            QueueEntry.objects.filter(pk=current.entry_id).update(
                leased_count=F("leased_count") - 1
            )
        Assignment.objects.filter(pk=current.pk).update(
            status=Assignment.Status.SKIPPED, finished_at=now
        )
    assignment.status = Assignment.Status.SKIPPED
    assignment.finished_at = now
