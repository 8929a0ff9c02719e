"""Studies and their members: create, update, status, membership changes (a study keeps a
lead)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import User
from django.db import connection, transaction

from reviewhub.errors import Conflict, NotFound, ValidationFailed

from ..models import (
    Membership,
    Study,
)
from ..spec import (
    study_fields_validate,
)
from ._common import Outcome

STATUS_NEXT = {Study.Status.DRAFT: Study.Status.OPEN, Study.Status.OPEN: Study.Status.CLOSED}


def study_create(*, owner: User, fields: Mapping[str, Any]) -> Study:
    """Create a study from raw fields (validated here); the owner becomes its lead."""
    data = study_fields_validate(fields, partial=False)
    if data.get("status", Study.Status.DRAFT) == Study.Status.CLOSED:
        raise ValidationFailed("A study cannot be created closed.",
                               details={"errors": [{"path": "status",
                                                    "message": "must be draft or open"}]})
    with transaction.atomic():
        if Study.objects.filter(slug=data["slug"]).exists():
            raise Conflict(f"A study with slug '{data['slug']}' already exists.",
                           details={"errors": [{"path": "slug", "message": "already taken"}]})
        study = Study.objects.create(owner=owner, **data)
        Membership.objects.create(study=study, user=owner, role=Membership.Role.LEAD)
    return study


def study_status_check(*, study: Study, status: str) -> None:
    """Refuse any status change other than draft -> open -> closed (one step forward)."""
    if status == study.status:
        return
    if STATUS_NEXT.get(Study.Status(study.status)) != status:
        allowed = STATUS_NEXT.get(Study.Status(study.status))
        hint = (f"the only allowed change is to '{allowed}'" if allowed
                else "a closed study stays closed")
        raise ValidationFailed(
            f"Cannot change status from '{study.status}' to '{status}': {hint}.",
            details={"errors": [{"path": "status", "message": f"{study.status} -> {status} is "
                                                              "not allowed"}]},
        )


def study_update(*, study: Study, fields: Mapping[str, Any]) -> tuple[Study, Outcome]:
    """Update study fields (partial). The slug is fixed after creation (URLs and tokens name
    it); status moves only forward (draft -> open -> closed)."""
    data = study_fields_validate(fields, partial=True)
    if "slug" in data and data["slug"] != study.slug:
        raise ValidationFailed("The slug of a study cannot change.",
                               details={"errors": [{"path": "slug", "message": "is fixed"}]})
    data.pop("slug", None)
    if "status" in data:
        study_status_check(study=study, status=data["status"])
    changed = [name for name, value in data.items() if getattr(study, name) != value]
    if not changed:
        return study, "unchanged"
    with transaction.atomic():
        for name in changed:
            setattr(study, name, data[name])
        study.save(update_fields=[*changed, "updated_at"])
    return study, "updated"


def membership_set(
    *, study: Study, user: User, role: str, created_account: bool = False
) -> tuple[Membership, Outcome]:
    """Add a member or change their role. The owner always stays a lead.

    `created_account`: the account was created by this study's invite, in the caller's
    transaction (annotations' invite). Only such a membership lets the study's leads reset the
    password (annotations/services/members.py); it is recorded when the membership is made and
    never set on an existing one, so re-inviting an account grants nothing more."""
    if role not in Membership.Role.values:
        raise ValidationFailed(f"Unknown role '{role}'.", details={"errors": [
            {"path": "role", "message": f"must be one of {', '.join(Membership.Role.values)}"}]})
    if user.pk == study.owner_id and role != Membership.Role.LEAD:
        raise Conflict("The study owner is always a lead.")
    with transaction.atomic():
        membership, created = Membership.objects.get_or_create(
            study=study, user=user, defaults={"role": role, "created_account": created_account}
        )
        if created:
            return membership, "created"
        if membership.role == role:
            return membership, "unchanged"
        if membership.role == Membership.Role.LEAD:
            _other_lead_check(study=study, user=user, what="change the role of")
        membership.role = role
        membership.save(update_fields=["role"])
    return membership, "updated"


def membership_remove(*, study: Study, user: User) -> None:
    """Remove a member (not the owner)."""
    if user.pk == study.owner_id:
        raise Conflict("The study owner cannot be removed.")
    with transaction.atomic():
        if Membership.objects.filter(study=study, user=user,
                                     role=Membership.Role.LEAD).exists():
            _other_lead_check(study=study, user=user, what="remove")
        deleted, _ = Membership.objects.filter(study=study, user=user).delete()
    if not deleted:
        raise NotFound("No such member.")


def _other_lead_check(*, study: Study, user: User, what: str) -> None:
    """A study keeps at least one lead: the lead rows are locked so that two leads removing
    each other at once cannot both succeed."""
    leads = Membership.objects.filter(study=study, role=Membership.Role.LEAD)
    if connection.features.has_select_for_update:
        leads = leads.select_for_update()
    if not any(pk != user.pk for pk in leads.values_list("user_id", flat=True)):
        raise Conflict(f"Cannot {what} the study's last lead: make another member a lead first.",
                       details={"reason": "last_lead"})
