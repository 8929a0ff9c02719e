"""Writes for human annotation: people, sampling plans, the assignment queue, submissions,
revisions, gold labels and adjudications.

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
import secrets
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, connection, transaction
from django.db.models import BigIntegerField as BigIntField
from django.db.models import Exists, ExpressionWrapper, F, Max, OuterRef, QuerySet, Value
from django.db.models.functions import Mod
from django.utils import timezone

from judges.models import Verdict
from reviewhub.api.errors import Conflict, Forbidden, NotFound, ValidationFailed
from reviewhub.rawrows import RowShape, db_value, fetch_one
from studies.access import study_role
from studies.models import Comparison, Criterion, Membership, Output, RubricVersion, Study
from studies.services import membership_set

from . import sampling
from .constants import FLAG_KEYS, PAIRWISE_VALUES, SEVERITY_MAX, SEVERITY_MIN
from .models import (
    Adjudication,
    Annotation,
    AnnotationRevision,
    Assignment,
    GoldLabel,
    QueueEntry,
    SamplingPlan,
)

UserModel = get_user_model()

# Candidates the queue looks at per probe; the annotator's own random order is applied within.
QUEUE_WINDOW = 32
# Rounds of SKIP LOCKED claims (with a short back-off) before a busy queue reports nothing.
CLAIM_RETRIES = 40
# Expired leases the sweep handles per call of assignment_next (the Celery sweep does the rest).
SWEEP_BATCH = 50
# A hash modulus: the largest prime below 2**31, so (a * sort_key + b) stays inside 63 bits.
_HASH_PRIME = 2_147_483_647
MAX_TIME_ON_TASK_MS = 24 * 3600 * 1000
MAX_TEXT_CHARS = 20_000


class LabelInput(TypedDict, total=False):
    """One criterion's label as an annotator sends it.

    `value` uses the criterion's encoding (judges/models.py); for pairwise criteria it is AS
    PRESENTED ("A" = the left text) and is mapped back to canonical terms with `swapped`.
    """

    value: str
    severity: int | None
    severity_note: str


@dataclass(frozen=True)
class CleanLabel:
    criterion: Criterion
    value: str  # canonical
    value_num: float | None
    severity: int | None
    severity_note: str


# --- helpers ------------------------------------------------------------------------------


def _require_lead(*, study: Study, user: User) -> None:
    if study_role(user=user, study=study) != Membership.Role.LEAD:
        raise Forbidden(f"This needs the 'lead' role in study '{study.slug}'.")


def _require_annotator(*, study: Study, user: User) -> None:
    if study_role(user=user, study=study) not in (Membership.Role.LEAD, Membership.Role.ANNOTATOR):
        raise Forbidden(f"This needs the 'annotator' role in study '{study.slug}'.")


def active_plan(study: Study) -> SamplingPlan | None:
    return (
        SamplingPlan.objects.select_related("rubric")
        .filter(study=study, is_active=True)
        .order_by("-version")
        .first()
    )


def latest_rubric(study: Study) -> RubricVersion | None:
    return RubricVersion.objects.filter(study=study).order_by("-version").first()


def plan_criteria(plan: SamplingPlan) -> list[Criterion]:
    """The criteria annotators answer under this plan (pairwise ones for comparisons only)."""
    qs = Criterion.objects.filter(rubric_id=plan.rubric_id).order_by("position", "id")
    if plan.spec.get("subject", "output") == "comparison":
        return list(qs.filter(scale=Criterion.Scale.PAIRWISE))
    return list(qs.exclude(scale=Criterion.Scale.PAIRWISE))


_CRITERIA_CACHE_MAX = 256
_criteria_cache: dict[tuple[int, float, str], list[Criterion]] = {}


def _cached_plan_criteria(plan: SamplingPlan) -> list[Criterion]:
    """plan_criteria, cached per process once the rubric version is frozen.

    studies.rubric_update edits a version in place only until annotations (or verdicts, ...)
    refer to it, so a version with annotations never changes again; caching it saves every
    submit a round trip. The key includes created_at so that a reused id is never confused.
    """
    rubric = plan.rubric
    key = (rubric.pk, rubric.created_at.timestamp(), plan.spec.get("subject", "output"))
    hit = _criteria_cache.get(key)
    if hit is not None:
        return hit
    criteria = plan_criteria(plan)
    if Annotation.objects.filter(criterion__in=[c.pk for c in criteria]).exists():
        if len(_criteria_cache) >= _CRITERIA_CACHE_MAX:
            _criteria_cache.clear()
        _criteria_cache[key] = criteria
    return criteria


def is_failure(criterion: Criterion, value: str) -> bool:
    """Whether a canonical value fails the criterion (pairwise has no pass/fail reading)."""
    if criterion.scale == Criterion.Scale.BINARY:
        return value == "fail"
    if criterion.scale == Criterion.Scale.ORDINAL:
        return criterion.pass_threshold is not None and int(value) < criterion.pass_threshold
    if criterion.scale == Criterion.Scale.CATEGORICAL:
        return bool(criterion.pass_labels) and value not in criterion.pass_labels
    return False


def _point_values(criterion: Criterion) -> list[str]:
    return [str(p.get("value")) for p in criterion.points if isinstance(p, dict)]


def _swap(value: str) -> str:
    return {"A": "B", "B": "A"}.get(value, value)


def label_clean(
    *, criterion: Criterion, raw: Any, swapped: bool = False, field: str | None = None
) -> CleanLabel:
    """Validate one criterion's label and return it in canonical encoding.

    Severity (1..5) is required exactly when the value is a failure and refused otherwise.
    """
    name = field or f"labels.{criterion.key}"
    if not isinstance(raw, Mapping):
        raise ValidationFailed(
            f"{name} must be an object with a 'value'.", details={name: "must be an object"}
        )
    unknown = sorted(set(raw) - {"value", "severity", "severity_note"})
    if unknown:
        raise ValidationFailed(
            f"{name} has unknown field(s): {', '.join(unknown)}.",
            details={f"{name}.{k}": "unknown field" for k in unknown},
        )
    value = raw.get("value")
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise ValidationFailed(f"{name}.value is required.", details={f"{name}.value": "required"})
    value_num: float | None
    if criterion.scale == Criterion.Scale.BINARY:
        if value not in ("pass", "fail"):
            raise ValidationFailed(
                f"{name}.value must be 'pass' or 'fail'.", details={f"{name}.value": "invalid"}
            )
        value_num = 1.0 if value == "pass" else 0.0
    elif criterion.scale == Criterion.Scale.ORDINAL:
        allowed = _point_values(criterion)
        if value not in allowed:
            raise ValidationFailed(
                f"{name}.value must be one of {', '.join(allowed)}.",
                details={f"{name}.value": "invalid"},
            )
        value_num = float(value)
    elif criterion.scale == Criterion.Scale.CATEGORICAL:
        allowed = _point_values(criterion)
        if value not in allowed:
            raise ValidationFailed(
                f"{name}.value must be one of {', '.join(allowed)}.",
                details={f"{name}.value": "invalid"},
            )
        value_num = None
    else:
        if value not in PAIRWISE_VALUES:
            raise ValidationFailed(
                f"{name}.value must be 'A', 'B' or 'tie'.", details={f"{name}.value": "invalid"}
            )
        if swapped:
            value = _swap(value)
        value_num = {"A": 1.0, "B": 0.0, "tie": 0.5}[value]
    severity = raw.get("severity")
    note = raw.get("severity_note") or ""
    if not isinstance(note, str):
        raise ValidationFailed(
            f"{name}.severity_note must be text.", details={f"{name}.severity_note": "invalid"}
        )
    if len(note) > MAX_TEXT_CHARS:
        raise ValidationFailed(
            f"{name}.severity_note is longer than {MAX_TEXT_CHARS} characters.",
            details={f"{name}.severity_note": "too long"},
        )
    if is_failure(criterion, value):
        if severity is None:
            raise ValidationFailed(
                f"{name}.severity (1..5) is required when the label is a failure.",
                details={f"{name}.severity": "required for a failing label"},
            )
        if (
            isinstance(severity, bool)
            or not isinstance(severity, int)
            or not SEVERITY_MIN <= severity <= SEVERITY_MAX
        ):
            raise ValidationFailed(
                f"{name}.severity must be an integer from 1 to 5.",
                details={f"{name}.severity": "must be 1..5"},
            )
    else:
        if severity is not None:
            raise ValidationFailed(
                f"{name}.severity is only asked when the label is a failure.",
                details={f"{name}.severity": "not allowed for a passing label"},
            )
        if note:
            raise ValidationFailed(
                f"{name}.severity_note is only asked when the label is a failure.",
                details={f"{name}.severity_note": "not allowed for a passing label"},
            )
    return CleanLabel(criterion, value, value_num, severity, note)


def labels_clean(*, criteria: list[Criterion], labels: Any, swapped: bool) -> list[CleanLabel]:
    """Every criterion of the plan answered exactly once; unknown keys refused by name."""
    if not isinstance(labels, Mapping):
        raise ValidationFailed(
            "labels must be an object keyed by criterion key.", details={"labels": "invalid"}
        )
    by_key = {c.key: c for c in criteria}
    unknown = sorted(set(labels) - set(by_key))
    if unknown:
        raise ValidationFailed(
            f"Unknown criterion key(s): {', '.join(map(str, unknown))}.",
            details={f"labels.{k}": "unknown criterion" for k in unknown},
        )
    missing = [c.key for c in criteria if c.key not in labels]
    if missing:
        raise ValidationFailed(
            f"Missing label(s) for criterion: {', '.join(missing)}.",
            details={f"labels.{k}": "required" for k in missing},
        )
    return [label_clean(criterion=c, raw=labels[c.key], swapped=swapped) for c in criteria]


def flags_clean(flags: Any) -> dict[str, bool]:
    if flags is None:
        return {}
    if not isinstance(flags, Mapping):
        raise ValidationFailed("flags must be an object.", details={"flags": "invalid"})
    unknown = sorted(set(flags) - set(FLAG_KEYS))
    if unknown:
        raise ValidationFailed(
            f"Unknown flag(s): {', '.join(map(str, unknown))}; allowed: {', '.join(FLAG_KEYS)}.",
            details={f"flags.{k}": "unknown flag" for k in unknown},
        )
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise ValidationFailed(
                f"flags.{key} must be true or false.", details={f"flags.{key}": "invalid"}
            )
    return {k: bool(v) for k, v in flags.items() if v}


def _text_clean(value: Any, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationFailed(f"{name} must be text.", details={name: "invalid"})
    if len(value) > MAX_TEXT_CHARS:
        raise ValidationFailed(
            f"{name} is longer than {MAX_TEXT_CHARS} characters.", details={name: "too long"}
        )
    return value


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
        raise ValidationFailed("lease_minutes must be positive.", details={"lease_minutes": ">0"})
    return now + timedelta(minutes=lease)


# --- people -------------------------------------------------------------------------------


class PasswordResetRefused(Forbidden):
    """A lead asked for the password of an account they may not take over (403).

    `details.reason` is "not_created_here" (the account was not created by this study's
    invitation) or "wider_access" (it has access beyond this study: another study, a lead role,
    staff or admin)."""

    code = "password_reset_refused"


def _one_time_password() -> str:
    return secrets.token_urlsafe(12)


def annotator_invite(
    *,
    study: Study,
    username: str,
    email: str,
    role: str,
    invited_by: User,
) -> tuple[Any, str | None]:
    """Add a person to the study (creating the account if new) with `role`.

    Returns (user, one-time password) when the account was created here, else (user, None).
    The password is shown once to the lead and never stored in clear; the new user should change
    it at /accounts/password_change/. The membership records that this study created the
    account, which is what later lets its leads reset that password (annotator_password_reset).

    An existing account is found by its username only, and gets the membership and nothing
    else: no credentials, and nothing about it (its e-mail address) goes back to the lead. An
    e-mail address is never looked up: that would tell a lead which addresses have accounts.
    With only an e-mail, a new account is created, named after the address's local part.
    """
    _require_lead(study=study, user=invited_by)
    if role not in Membership.Role.values:
        raise ValidationFailed(
            f"role must be one of {', '.join(Membership.Role.values)}.", details={"role": "invalid"}
        )
    username = (username or "").strip()
    email = (email or "").strip()
    if email:
        try:
            validate_email(email)
        except DjangoValidationError as exc:
            raise ValidationFailed(
                "email is not a valid address.", details={"email": "invalid"}
            ) from exc
    if not username and not email:
        raise ValidationFailed(
            "Give a username or an email.", details={"username": "required", "email": "required"}
        )
    by_username = bool(username)
    if not username:
        username = email.split("@", 1)[0]
    with transaction.atomic():
        user = UserModel.objects.filter(username=username).first() if by_username else None
        password: str | None = None
        if user is None:
            _new_username_check(username)
            password = _one_time_password()
            try:
                with transaction.atomic():
                    user = UserModel.objects.create_user(
                        username=username, email=email, password=password
                    )
            except IntegrityError as exc:
                # A concurrent invite created the same username first.
                raise Conflict(
                    f"A user named '{username}' already exists; invite them by username.",
                    details={"username": "taken"},
                ) from exc
        # The studies app owns the membership rules (the owner always stays a lead).
        membership, _outcome = membership_set(study=study, user=user, role=role)
        if password is not None:
            # Recorded only here, in the transaction that created the account; re-inviting
            # or adding a member through the studies API never sets it.
            Membership.objects.filter(pk=membership.pk).update(created_account=True)
    return user, password


def _new_username_check(username: str) -> None:
    try:
        UnicodeUsernameValidator()(username)
    except DjangoValidationError as exc:
        raise ValidationFailed(
            "username may contain only letters, digits and @/./+/-/_.",
            details={"username": "invalid"},
        ) from exc
    if len(username) > 150:
        raise ValidationFailed("username is too long.", details={"username": "too long"})
    if UserModel.objects.filter(username=username).exists():
        # Only reached with an e-mail and no username: the derived name is taken.
        raise Conflict(
            f"A user named '{username}' already exists; invite them by username.",
            details={"username": "taken"},
        )


def annotator_password_reset(*, study: Study, user: Any, by: User) -> str:
    """Give a member a new one-time password (returned once).

    A lead may reset the password only of an account that this study's invitation created
    (Membership.created_account) and that has no access beyond this study: no membership in
    another study, no lead role anywhere, not the owner of a study, not staff, not an admin.
    Anything else would let a lead sign in as someone who can see more than they can (a member
    of another study, above all). Refusals are a 403 `password_reset_refused` naming the
    reason. Admins (superusers) may reset anyone's.
    """
    is_admin = bool(getattr(by, "is_superuser", False))
    if not is_admin:
        _require_lead(study=study, user=by)
    with transaction.atomic():
        # The account's row lock makes the checks hold until the password is set: adding a
        # membership for the account (its foreign key check) or changing its staff flags waits.
        # The membership's lock holds its role.
        accounts = UserModel.objects.filter(pk=user.pk)
        memberships = Membership.objects.filter(study=study, user_id=user.pk)
        if connection.features.has_select_for_update:
            accounts = accounts.select_for_update()
            memberships = memberships.select_for_update()
        account = accounts.first()
        membership = memberships.first()
        if account is None or membership is None:
            raise NotFound("No such member in this study.")
        if not is_admin:
            _password_reset_check(study=study, account=account, membership=membership)
        password = _one_time_password()
        account.set_password(password)
        account.save(update_fields=["password"])
    return password


def _password_reset_check(*, study: Study, account: Any, membership: Membership) -> None:
    if not membership.created_account:
        raise PasswordResetRefused(
            "This account was not created by an invitation to this study, so only an admin can "
            "reset its password (its owner can change it at /accounts/password_change/).",
            details={"reason": "not_created_here"},
        )
    wider = (
        account.is_superuser
        or account.is_staff
        or Membership.objects.filter(user_id=account.pk)
        .exclude(study=study, role__in=[Membership.Role.ANNOTATOR, Membership.Role.VIEWER])
        .exists()
        or Study.objects.filter(owner_id=account.pk).exists()
    )
    if wider:
        raise PasswordResetRefused(
            "This account has access beyond this study (another study, a lead role, staff or "
            "admin), so only an admin can reset its password.",
            details={"reason": "wider_access"},
        )


# --- sampling plans -------------------------------------------------------------------------


def _population(
    *, study: Study, spec: sampling.SamplingSpec
) -> tuple[list[tuple[int, str]], dict[int, str]]:
    """[(subject id, stratum)] sorted by id, and the subject → item external id map."""
    rows: Any
    if spec.subject == "comparison":
        rows = (
            Comparison.objects.filter(study=study)
            .order_by("id")
            .values_list("id", "item__strata", "item__external_id")
        )
    else:
        qs = Output.objects.filter(study=study)
        if not spec.include_errors:
            qs = qs.filter(error="")
        rows = qs.order_by("id").values_list("id", "item__strata", "item__external_id")
    subjects = [(sid, sampling.stratum_label(strata, spec.dimension)) for sid, strata, _ in rows]
    return subjects, {sid: ext for sid, _, ext in rows}


def sampling_plan_create(
    *,
    study: Study,
    spec: Mapping[str, Any],
    k: int,
    gold_rate: float,
    created_by: User,
) -> SamplingPlan:
    """Draw a new plan version and fill its queue; the previous active plan is superseded.

    Superseding ends the live leases of the old plan (its entries are no longer offered and its
    assignments can no longer be submitted). Subjects already labelled under earlier versions
    keep those annotations: the new entry starts with them counted toward k, and their
    annotators are never offered the subject again.
    """
    _require_lead(study=study, user=created_by)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 100:
        raise ValidationFailed("k must be an integer from 1 to 100.", details={"k": "invalid"})
    if (
        isinstance(gold_rate, bool)
        or not isinstance(gold_rate, int | float)
        or not 0.0 <= float(gold_rate) < 1.0
    ):
        raise ValidationFailed("gold_rate must be in [0, 1).", details={"gold_rate": "invalid"})
    gold_rate = float(gold_rate)
    parsed = sampling.spec_parse(spec, default_seed=secrets.randbelow(2**31))
    rubric = latest_rubric(study)
    if rubric is None:
        raise ValidationFailed("The study has no rubric yet.", details={"rubric": "missing"})
    criteria_qs = Criterion.objects.filter(rubric=rubric)
    if parsed.subject == "comparison":
        criteria_qs = criteria_qs.filter(scale=Criterion.Scale.PAIRWISE)
    else:
        criteria_qs = criteria_qs.exclude(scale=Criterion.Scale.PAIRWISE)
    criterion_ids = list(criteria_qs.values_list("id", flat=True))
    if not criterion_ids:
        kind = "pairwise" if parsed.subject == "comparison" else "non-pairwise"
        raise ValidationFailed(
            f"The rubric v{rubric.version} has no {kind} criteria for spec.subject "
            f"'{parsed.subject}'.",
            details={"spec.subject": f"no {kind} criteria"},
        )
    if parsed.dimension is not None and not study.dimensions.filter(key=parsed.dimension).exists():
        raise ValidationFailed(
            f"spec.dimension '{parsed.dimension}' is not a dimension of this study.",
            details={"spec.dimension": "unknown dimension"},
        )
    subjects, _ = _population(study=study, spec=parsed)
    subject_field = "comparison_id" if parsed.subject == "comparison" else "output_id"
    gold_ids = set(
        GoldLabel.objects.filter(criterion_id__in=criterion_ids)
        .exclude(**{f"{subject_field}__isnull": True})
        .values_list(subject_field, flat=True)
    )
    uncertainty: dict[int, float] = {}
    if parsed.disagreement_weight > 0:
        verdict_rows = (
            Verdict.objects.filter(criterion_id__in=criterion_ids, is_scored=True)
            .exclude(**{f"{subject_field}__isnull": True})
            .values_list(subject_field, "criterion_id", "value", "probability")
        )
        if parsed.subject == "output":
            verdict_rows = verdict_rows.filter(output__study=study)
        else:
            verdict_rows = verdict_rows.filter(comparison__study=study)
        uncertainty = sampling.judge_uncertainty(verdict_rows)
    population = [
        sampling.Subject(sid, h, uncertainty.get(sid, 0.0))
        for sid, h in subjects
        if sid not in gold_ids
    ]
    gold = [sampling.Subject(sid, h) for sid, h in subjects if sid in gold_ids]
    if not population and not gold:
        raise ValidationFailed(
            f"The study has no {parsed.subject}s to sample.", details={"spec.subject": "empty"}
        )
    result = sampling.draw(spec=parsed, population=population, gold=gold, gold_rate=gold_rate)
    chosen_ids = [c[0] for c in result.chosen]
    # Prior annotators per subject (earlier plan versions, imports): counted toward k and never
    # offered the subject again.
    prior: dict[int, set[int]] = {}
    for sid, annotator_id in (
        Annotation.objects.filter(
            criterion_id__in=criterion_ids, **{f"{subject_field}__in": chosen_ids}
        )
        .values_list(subject_field, "annotator_id")
        .distinct()
    ):
        prior.setdefault(sid, set()).add(annotator_id)
    now = timezone.now()
    with transaction.atomic():
        # The study row serialises concurrent plan creation (version numbers, single active).
        Study.objects.select_for_update().filter(pk=study.pk).first()
        last = SamplingPlan.objects.filter(study=study).aggregate(v=Max("version"))["v"] or 0
        old_plans = list(
            SamplingPlan.objects.filter(study=study, is_active=True).values_list("id", flat=True)
        )
        if old_plans:
            SamplingPlan.objects.filter(pk__in=old_plans).update(is_active=False, superseded_at=now)
            _end_leases(plan_ids=old_plans, now=now)
        plan = SamplingPlan.objects.create(
            study=study,
            version=last + 1,
            rubric=rubric,
            spec=parsed.as_dict(),
            k=k,
            gold_rate=gold_rate,
            is_active=True,
            created_by=created_by,
            summary={
                "seed": parsed.seed,
                "population": result.population,
                "allocation": result.allocation,
                "entries": len(result.chosen),
                "gold_available": result.gold_available,
                "gold_entries": result.gold_chosen,
                "carried_over_annotators": sum(len(v) for v in prior.values()),
                "warnings": result.warnings,
                # Per stratum: the design and its inclusion probabilities (docs/annotation.md).
                "designs": {h: d.as_dict() for h, d in result.designs.items()},
                "draw_kinds": result.draw_kinds(),
            },
        )
        entries = [
            QueueEntry(
                plan=plan,
                is_gold=draw.is_gold,
                needed=k,
                done_count=min(k, len(prior.get(draw.id, ()))),
                sort_key=draw.sort_key,
                stratum=draw.stratum,
                sample_weight=draw.weight,
                draw_kind=draw.draw_kind,
                inclusion_probability=draw.inclusion_probability,
                **{subject_field: draw.id},
            )
            for draw in result.chosen
        ]
        QueueEntry.objects.bulk_create(entries, batch_size=1000)
        if prior:
            entry_ids = dict(QueueEntry.objects.filter(plan=plan).values_list(subject_field, "id"))
            Assignment.objects.bulk_create(
                [
                    Assignment(
                        entry_id=entry_ids[sid],
                        annotator_id=annotator_id,
                        status=Assignment.Status.SUBMITTED,
                        carried_over=True,
                        finished_at=now,
                    )
                    for sid, annotators in prior.items()
                    for annotator_id in sorted(annotators)
                ],
                batch_size=1000,
            )
    if connection.vendor == "postgresql":
        # A plan adds thousands of queue rows at once, long before autovacuum's next look: with
        # the stale estimate (a near-empty table) the planner nests loops in the "next" and
        # progress queries and each call costs ~20 ms instead of ~0.5 ms. Refresh the statistics
        # once the rows are visible.
        transaction.on_commit(_queue_analyze)
    return plan


def _queue_analyze() -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE annotations_queueentry, annotations_assignment")


def _end_leases(*, plan_ids: list[int], now: datetime) -> None:
    """Expire the live leases of plans that stop being offered (inside the caller's atomic).

    The entries are locked first, in id order, like every other queue write, so that a submit
    racing with the plan change cannot deadlock with it.
    """
    entries = QueueEntry.objects.filter(plan_id__in=plan_ids, leased_count__gt=0).order_by("id")
    if connection.features.has_select_for_update:
        entries = entries.select_for_update()
    entry_ids = list(entries.values_list("id", flat=True))
    if not entry_ids:
        return
    Assignment.objects.filter(entry_id__in=entry_ids, status=Assignment.Status.LEASED).update(
        status=Assignment.Status.EXPIRED, finished_at=now
    )
    QueueEntry.objects.filter(pk__in=entry_ids).update(leased_count=0)


def sampling_plan_deactivate(*, plan: SamplingPlan, by: User) -> SamplingPlan:
    """Stop offering a plan's entries without replacing it (its live leases end)."""
    _require_lead(study=plan.study, user=by)
    now = timezone.now()
    with transaction.atomic():
        SamplingPlan.objects.filter(pk=plan.pk).update(is_active=False, superseded_at=now)
        _end_leases(plan_ids=[plan.pk], now=now)
    plan.refresh_from_db()
    return plan


# --- the queue ------------------------------------------------------------------------------


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


_ASSIGNMENT = RowShape(Assignment, "a")
_L_ENTRY = RowShape(QueueEntry, "e")
_L_PLAN = RowShape(SamplingPlan, "p")
_L_RUBRIC = RowShape(RubricVersion, "r")


def _for_update(of: str) -> str:
    return f" FOR UPDATE OF {of}" if connection.features.has_select_for_update else ""


def _lock_assignment(assignment_id: int) -> Assignment:
    row = fetch_one(
        f"SELECT {_ASSIGNMENT.select} FROM {Assignment._meta.db_table} a WHERE a.id = %s"
        + _for_update("a"),
        [assignment_id],
    )
    if row is None:
        raise Assignment.DoesNotExist(f"assignment {assignment_id} does not exist")
    return _ASSIGNMENT.load(row)


def _lock_for_submit(entry_id: int, assignment_id: int) -> tuple[QueueEntry, Assignment]:
    """The entry and the assignment, both locked, in one statement (the plan and rubric are
    read along, not locked).

    PostgreSQL takes the row locks of one statement in the order of its FROM list, so this
    keeps the lock order every queue write uses: entry first, then assignment.
    """
    row = fetch_one(
        f"SELECT {_L_ENTRY.select}, {_L_PLAN.select}, {_L_RUBRIC.select}, {_ASSIGNMENT.select} "
        f"FROM {QueueEntry._meta.db_table} e "
        f"JOIN {Assignment._meta.db_table} a ON a.entry_id = e.id "
        f"JOIN {SamplingPlan._meta.db_table} p ON p.id = e.plan_id "
        f"JOIN {RubricVersion._meta.db_table} r ON r.id = p.rubric_id "
        "WHERE e.id = %s AND a.id = %s" + _for_update("e, a"),
        [entry_id, assignment_id],
    )
    if row is None:
        raise Assignment.DoesNotExist(f"assignment {assignment_id} of entry {entry_id} is gone")
    entry = _L_ENTRY.load(row)
    at = _L_ENTRY.width
    entry.plan = _L_PLAN.load(row, at)
    entry.plan.rubric = _L_RUBRIC.load(row, at + _L_PLAN.width)
    return entry, _ASSIGNMENT.load(row, at + _L_PLAN.width + _L_RUBRIC.width)


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
        f"EXISTS(SELECT 1 FROM {Membership._meta.db_table} m WHERE m.study_id = %s "
        "AND m.user_id = %s AND m.role IN (%s, %s)) "
        f"FROM {'lk, ' if locking else ''}{SamplingPlan._meta.db_table} p "
        "WHERE p.study_id = %s AND p.is_active ORDER BY p.version DESC LIMIT 1",
        ([_queue_lock_key(study.pk, annotator.pk)] if locking else [])
        + [annotator.pk, Assignment.Status.LEASED.value, Assignment.Status.EXPIRED.value,
           study.pk, annotator.pk, Membership.Role.LEAD.value, Membership.Role.ANNOTATOR.value,
           study.pk],
    )
    plan = None
    if row is not None:
        plan = _PLAN.load(row)
        plan.has_unfinished = bool(row[_PLAN.width])  # type: ignore[attr-defined]
        plan.may_annotate = bool(row[_PLAN.width + 1])  # type: ignore[attr-defined]
    if getattr(annotator, "is_superuser", False):
        return plan
    if plan is None:
        _require_annotator(study=study, user=annotator)
        return None
    if not plan.may_annotate:  # type: ignore[attr-defined]
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


def _own_assignment(assignment: Assignment, annotator: User) -> None:
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
    _own_assignment(assignment, annotator)
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
    _own_assignment(assignment, annotator)
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


def _submission_replay(
    *, submission_id: uuid.UUID, assignment: Assignment, annotator: User
) -> list[Annotation] | None:
    existing = list(
        Annotation.objects.filter(submission_id=submission_id)
        .select_related("criterion")
        .order_by("criterion__position", "criterion_id")
    )
    if not existing:
        return None
    if any(a.annotator_id != annotator.pk or a.assignment_id != assignment.pk for a in existing):
        raise Conflict(
            "This submission_id was already used for another assignment.",
            code="submission_id_reused",
            details={"submission_id": "already used"},
        )
    return existing


def annotation_submit(
    *,
    assignment: Assignment,
    annotator: User,
    submission_id: uuid.UUID,
    labels: Mapping[str, LabelInput],
    rationale: str = "",
    flags: Mapping[str, bool] | None = None,
    time_on_task_ms: int | None = None,
    source: str = "ui",
) -> list[Annotation]:
    """Record one annotation per criterion of the plan and complete the assignment.

    Idempotent on `submission_id`: a repeat (double click, retry, second tab) returns the
    annotations of the first call, even when the two calls race; the first payload wins. A
    different submission for an assignment already submitted is a 409. A late submit after the
    lease expired is accepted while the entry still has room, else 409 `lease_expired`.
    """
    _own_assignment(assignment, annotator)
    if not isinstance(submission_id, uuid.UUID):
        try:
            submission_id = uuid.UUID(str(submission_id))
        except ValueError as exc:
            raise ValidationFailed(
                "submission_id must be a UUID.", details={"submission_id": "invalid"}
            ) from exc
    if source not in Annotation.Source.values:
        raise ValidationFailed("source is invalid.", details={"source": "invalid"})
    if time_on_task_ms is not None and (
        isinstance(time_on_task_ms, bool)
        or not isinstance(time_on_task_ms, int)
        or not 0 <= time_on_task_ms <= MAX_TIME_ON_TASK_MS
    ):
        raise ValidationFailed(
            "time_on_task_ms must be an integer from 0 to 86400000.",
            details={"time_on_task_ms": "invalid"},
        )
    clean_flags = flags_clean(flags)
    rationale = _text_clean(rationale, "rationale")
    now = timezone.now()
    try:
        with transaction.atomic():
            # Entry first, then assignment: the lock order every queue write uses.
            locked, current = _lock_for_submit(assignment.entry_id, assignment.pk)
            if current.status == Assignment.Status.SUBMITTED:
                if current.submission_id == submission_id:
                    done = _submission_replay(
                        submission_id=submission_id, assignment=assignment, annotator=annotator
                    )
                    if done is not None:
                        return done
                raise Conflict(
                    "This assignment was already submitted; revise the annotations instead.",
                    code="already_submitted",
                )
            if current.status == Assignment.Status.SKIPPED:
                raise Conflict("This assignment was skipped.", code="assignment_skipped")
            # Validation runs under the lock so that a repeat of a submission that just went
            # through is answered with its result, whatever its payload.
            criteria = _cached_plan_criteria(locked.plan)
            clean = labels_clean(criteria=criteria, labels=labels, swapped=current.swapped)
            holds_slot = current.status == Assignment.Status.LEASED
            if not holds_slot:
                # Superseding a plan ends its leases, so only an expired lease can belong to an
                # inactive plan.
                if not SamplingPlan.objects.filter(pk=locked.plan_id, is_active=True).exists():
                    raise Conflict(
                        "The sampling plan of this assignment was superseded.",
                        code="plan_superseded",
                    )
                if locked.done_count + locked.leased_count >= locked.needed:
                    raise Conflict(
                        "The lease expired and the output got its annotations from others.",
                        code="lease_expired",
                    )
            subject = (
                {"comparison_id": locked.comparison_id}
                if locked.comparison_id is not None
                else {"output_id": locked.output_id}
            )
            created = Annotation.objects.bulk_create(
                [
                    Annotation(
                        annotator_id=annotator.pk,
                        criterion=c.criterion,
                        assignment_id=current.pk,
                        plan_id=locked.plan_id,
                        value=c.value,
                        value_num=c.value_num,
                        severity=c.severity,
                        severity_note=c.severity_note,
                        rationale=rationale,
                        flags=clean_flags,
                        time_on_task_ms=time_on_task_ms,
                        submission_id=submission_id,
                        source=source,
                        created_at=now,
                        **subject,
                    )
                    for c in clean
                ]
            )
            # Precompiled (see reviewhub/rawrows.py); values prepared by their fields. Both
            # rows are locked already; on PostgreSQL the two updates are one statement.
            done_assignment = (
                f"UPDATE {Assignment._meta.db_table} SET status = %s, submission_id = %s, "
                "finished_at = %s, lease_expires_at = NULL WHERE id = %s"
            )
            done_params = [Assignment.Status.SUBMITTED.value,
                           db_value(Assignment, "submission_id", submission_id),
                           db_value(Assignment, "finished_at", now), current.pk]
            count_entry = (
                f"UPDATE {QueueEntry._meta.db_table} SET done_count = done_count + 1, "
                "leased_count = leased_count - %s WHERE id = %s"
            )
            count_params = [1 if holds_slot else 0, locked.pk]
            with connection.cursor() as cursor:
                if connection.vendor == "postgresql":
                    cursor.execute(f"WITH done AS ({done_assignment} RETURNING 1) {count_entry}",
                                   done_params + count_params)
                else:
                    cursor.execute(done_assignment, done_params)
                    cursor.execute(count_entry, count_params)
    except IntegrityError as exc:
        # The submission_id is already taken (another assignment), or the annotator already
        # labelled this subject through another route (an import).
        replay = _submission_replay(
            submission_id=submission_id, assignment=assignment, annotator=annotator
        )
        if replay is not None:
            return replay
        if (
            Assignment.objects.filter(submission_id=submission_id)
            .exclude(pk=assignment.pk)
            .exists()
        ):
            raise Conflict(
                "This submission_id was already used for another assignment.",
                code="submission_id_reused",
                details={"submission_id": "already used"},
            ) from exc
        raise Conflict(
            "These annotations conflict with ones you already recorded for this output.",
            code="duplicate_annotation",
        ) from exc
    assignment.status = Assignment.Status.SUBMITTED
    assignment.submission_id = submission_id
    assignment.finished_at = now
    assignment.lease_expires_at = None
    for annotation in created:
        # Callers serialise these; spare them a lazy load per row.
        annotation.plan = locked.plan
        annotation.assignment = assignment
    return created


def revision_deadline(annotation: Annotation) -> datetime:
    return annotation.created_at + timedelta(minutes=settings.REVIEWHUB_REVISION_WINDOW_MINUTES)


def annotation_revise(
    *,
    annotation_id: int,
    annotator: User,
    value: Any,
    severity: int | None = None,
    severity_note: str = "",
    rationale: str | None = None,
    flags: Mapping[str, bool] | None = None,
) -> Annotation:
    """Change one's own annotation within the revision window; the prior state is kept.

    For pairwise criteria `value` is as presented on the annotator's assignment, like submit.
    `rationale` / `flags` None leave them as they were.
    """
    annotation = (
        Annotation.objects.select_related("criterion", "assignment")
        .filter(pk=annotation_id, annotator_id=annotator.pk)
        .first()
    )
    if annotation is None:
        raise NotFound("Annotation not found.")
    now = timezone.now()
    if now > revision_deadline(annotation):
        raise Conflict(
            f"The revision window ({settings.REVIEWHUB_REVISION_WINDOW_MINUTES} minutes after "
            "submitting) has closed.",
            code="revision_window_closed",
        )
    swapped = bool(annotation.assignment and annotation.assignment.swapped)
    clean = label_clean(
        criterion=annotation.criterion,
        raw={"value": value, "severity": severity, "severity_note": severity_note or ""},
        swapped=swapped,
        field="value",
    )
    new_flags = flags_clean(flags) if flags is not None else annotation.flags
    new_rationale = (
        _text_clean(rationale, "rationale") if rationale is not None else annotation.rationale
    )
    with transaction.atomic():
        qs = Annotation.objects.filter(pk=annotation.pk)
        if connection.features.has_select_for_update:
            qs = qs.select_for_update()
        current = qs.get()
        AnnotationRevision.objects.create(
            annotation=current,
            value=current.value,
            severity=current.severity,
            severity_note=current.severity_note,
            rationale=current.rationale,
            flags=current.flags,
        )
        current.value = clean.value
        current.value_num = clean.value_num
        current.severity = clean.severity
        current.severity_note = clean.severity_note
        current.rationale = new_rationale
        current.flags = new_flags
        current.revised_at = now
        current.save(
            update_fields=[
                "value",
                "value_num",
                "severity",
                "severity_note",
                "rationale",
                "flags",
                "revised_at",
            ]
        )
    current.criterion = annotation.criterion
    current.assignment = annotation.assignment
    return current


# --- gold labels and adjudication --------------------------------------------------------------


def _subject_check(
    *, study: Study, criterion: Criterion, output: Output | None, comparison: Comparison | None
) -> dict[str, Any]:
    if criterion.rubric.study_id != study.pk:
        raise NotFound("Criterion not found in this study.")
    if (output is None) == (comparison is None):
        raise ValidationFailed(
            "Give exactly one of output or comparison.",
            details={"output": "exactly one", "comparison": "exactly one"},
        )
    if criterion.scale == Criterion.Scale.PAIRWISE and comparison is None:
        raise ValidationFailed(
            "A pairwise criterion labels a comparison.", details={"comparison": "required"}
        )
    if criterion.scale != Criterion.Scale.PAIRWISE and output is None:
        raise ValidationFailed(
            f"Criterion '{criterion.key}' labels an output.", details={"output": "required"}
        )
    if output is not None:
        if output.study_id != study.pk:
            raise NotFound("Output not found in this study.")
        return {"output": output}
    assert comparison is not None
    if comparison.study_id != study.pk:
        raise NotFound("Comparison not found in this study.")
    return {"comparison": comparison}


def gold_label_set(
    *,
    study: Study,
    criterion: Criterion,
    value: str,
    user: User,
    output: Output | None = None,
    comparison: Comparison | None = None,
) -> GoldLabel:
    """A lead's known answer for a subject (canonical encoding); replaces an earlier one."""
    _require_lead(study=study, user=user)
    subject = _subject_check(study=study, criterion=criterion, output=output, comparison=comparison)
    clean = _canonical_value(criterion, value)
    with transaction.atomic():
        gold, _ = GoldLabel.objects.update_or_create(
            criterion=criterion, **subject, defaults={"value": clean, "created_by": user}
        )
    return gold


def _canonical_value(criterion: Criterion, value: Any) -> str:
    """Validate a value in canonical encoding (no severity involved)."""
    raw: dict[str, Any] = {"value": value}
    try:
        clean = label_clean(criterion=criterion, raw=raw, field="value")
    except ValidationFailed as exc:
        # A failing value without severity is fine here: only the value matters.
        if "value.severity" not in exc.details:
            raise
        raw["severity"] = SEVERITY_MIN
        clean = label_clean(criterion=criterion, raw=raw, field="value")
    return clean.value


def adjudication_record(
    *,
    study: Study,
    criterion: Criterion,
    output: Output | None = None,
    comparison: Comparison | None = None,
    value: str,
    note: str,
    user: User,
) -> Adjudication:
    """Record a lead's adjudicated label (canonical encoding), kept apart from the raw
    annotations; the latest adjudication of a (subject, criterion) is the one in force."""
    _require_lead(study=study, user=user)
    subject = _subject_check(study=study, criterion=criterion, output=output, comparison=comparison)
    clean = _canonical_value(criterion, value)
    note = _text_clean(note, "note")
    with transaction.atomic():
        return Adjudication.objects.create(
            criterion=criterion, value=clean, note=note, adjudicated_by=user, **subject
        )
