"""Study members: inviting annotators and resetting the passwords of accounts made here."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, connection, transaction

from reviewhub.errors import Conflict, Forbidden, NotFound, Problems, ValidationFailed
from studies.models import Membership, Study
from studies.services import membership_set

from .common import _require_lead

UserModel = get_user_model()



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
        raise ValidationFailed.at(
            "role", f"role must be one of {', '.join(Membership.Role.values)}.",
        )
    username = (username or "").strip()
    email = (email or "").strip()
    if email:
        try:
            validate_email(email)
        except DjangoValidationError as exc:
            raise ValidationFailed.at("email", "email is not a valid address.") from exc
    if not username and not email:
        raise Problems.from_mapping(
            {"username": "give a username or an email", "email": "give a username or an email"}
        ).error(message="Give a username or an email.")
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
        # The studies app owns the membership table and its rules (the owner always stays a
        # lead); an account created just above is recorded as this study's own, which is
        # what later allows a lead to reset its password.
        membership_set(study=study, user=user, role=role,
                       created_account=password is not None)
    return user, password


def _new_username_check(username: str) -> None:
    try:
        UnicodeUsernameValidator()(username)
    except DjangoValidationError as exc:
        raise ValidationFailed.at(
            "username", "username may contain only letters, digits and @/./+/-/_.",
        ) from exc
    if len(username) > 150:
        raise ValidationFailed.at("username", "username is too long.")
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
