"""Writes for human annotation: people, sampling plans, the assignment queue, submissions,
revisions, gold labels and adjudications.

One module per concern; this package re-exports every public service so callers keep writing
``from annotations import services`` / ``services.annotation_submit(...)``. Queue invariants and
the lock order are documented in ``queue.py`` and docs/annotation.md.
"""

from .adjudication import adjudication_record
from .common import active_plan, is_failure, latest_rubric, plan_criteria
from .escalations import escalation_entries_add, escalation_plan_create
from .gold import gold_label_set
from .labels import MAX_TEXT_CHARS, CleanLabel, LabelInput, flags_clean, label_clean, labels_clean
from .members import (
    InviteResult,
    PasswordResetRefused,
    UserModel,
    annotator_invite,
    annotator_password_reset,
    invitation_accept,
    invitation_decline,
    invitation_revoke,
    invitations_pending_for,
    invitations_pending_in,
    member_remove,
    member_role_change,
    password_change_done,
    password_change_required,
    password_reset_allowed,
)
from .plans import sampling_plan_create, sampling_plan_deactivate, sampling_plan_preview
from .queue import (
    CLAIM_RETRIES,
    QUEUE_WINDOW,
    SWEEP_BATCH,
    assignment_heartbeat,
    assignment_next,
    assignment_skip,
    assignments_expire_stale,
)
from .submit import MAX_TIME_ON_TASK_MS, annotation_revise, annotation_submit, revision_deadline

__all__ = [
    "CLAIM_RETRIES",
    "MAX_TEXT_CHARS",
    "MAX_TIME_ON_TASK_MS",
    "QUEUE_WINDOW",
    "SWEEP_BATCH",
    "CleanLabel",
    "InviteResult",
    "LabelInput",
    "PasswordResetRefused",
    "UserModel",
    "active_plan",
    "adjudication_record",
    "annotation_revise",
    "annotation_submit",
    "annotator_invite",
    "annotator_password_reset",
    "assignment_heartbeat",
    "assignment_next",
    "assignment_skip",
    "assignments_expire_stale",
    "escalation_entries_add",
    "escalation_plan_create",
    "flags_clean",
    "gold_label_set",
    "invitation_accept",
    "invitation_decline",
    "invitation_revoke",
    "invitations_pending_for",
    "invitations_pending_in",
    "is_failure",
    "label_clean",
    "labels_clean",
    "latest_rubric",
    "member_remove",
    "member_role_change",
    "password_change_done",
    "password_change_required",
    "password_reset_allowed",
    "plan_criteria",
    "revision_deadline",
    "sampling_plan_create",
    "sampling_plan_deactivate",
    "sampling_plan_preview",
]
