"""Study members: invitations (accepted by the invited account), new accounts with one-time
passwords, resetting the passwords of accounts made here, role changes and removals."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from reviewhub.errors import Conflict, Forbidden, NotFound, Problems, ValidationFailed
from studies.models import Membership, Study
from studies.services import membership_remove, membership_set

from ..models import Invitation, PasswordChangeRequired
from .common import require_lead

UserModel = get_user_model()



class PasswordResetRefused(Forbidden):
    """A lead asked for the password of an account they may not take over (403).

    `details.reason` is "not_created_here" (the account was not created by this study's
    invitation) or "wider_access" (it has access beyond this study: another study, a lead role,
    staff or admin)."""

    code = "password_reset_refused"


def _one_time_password() -> str:
    return secrets.token_urlsafe(12)


@dataclass(frozen=True)
class InviteResult:
    """What an invitation did. `status`:

    - "invited": an invitation of `username` is waiting for that account to accept it. The
      same answer whether or not an account of that name exists (`user` None either way), so
      a lead cannot learn which names exist, nor add an account to the study without it.
    - "created": a new account was made (from an e-mail address) with a one-time password.
    - "added": staff or an admin added an existing account at once; or an existing member's
      role was changed (the lead already sees the members).
    """

    status: str
    username: str
    role: str
    user: Any = None
    one_time_password: str | None = None


def annotator_invite(
    *,
    study: Study,
    username: str,
    email: str,
    role: str,
    invited_by: User,
) -> InviteResult:
    """Invite a person to the study with `role`.

    - By `username` (an existing account): an invitation the account accepts or declines
      after signing in (`invitation_accept`); until then it is not a member. Whether the name
      exists is never looked up for the answer, which is the same for both. Staff and admins
      add the account at once; an existing member's role is simply changed.
    - By `email` alone (someone new): a new account is created with a one-time password, shown
      once to the lead and never stored in clear, which its owner must change at first sign-in.
      Its name is the address's local part with a random suffix (always, so that the name
      given back says nothing about which names are taken). The membership records that this
      study created the account, which lets its leads reset that password later.
    E-mail addresses are never looked up.
    """
    require_lead(study=study, user=invited_by)
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
    if username:
        _username_check(username)
        return _invite_existing(study=study, username=username, role=role,
                                invited_by=invited_by)
    return _create_account(study=study, email=email, role=role)


def _is_staff(user: Any) -> bool:
    return bool(getattr(user, "is_staff", False) or getattr(user, "is_superuser", False))


def _invite_existing(*, study: Study, username: str, role: str, invited_by: User
                     ) -> InviteResult:
    with transaction.atomic():
        user = UserModel.objects.filter(username=username).first()
        if user is not None and (
            _is_staff(invited_by)
            or Membership.objects.filter(study=study, user=user).exists()
        ):
            membership_set(study=study, user=user, role=role)
            Invitation.objects.filter(study=study, username=username,
                                      status=Invitation.Status.PENDING).delete()
            return InviteResult(status="added", username=username, role=role, user=user)
        # Looked up only to decide the branch above: what follows, and the answer, are the
        # same whether or not an account of this name exists.
        Invitation.objects.update_or_create(
            study=study, username=username, status=Invitation.Status.PENDING,
            defaults={"role": role, "invited_by": invited_by},
        )
    return InviteResult(status="invited", username=username, role=role)


def _create_account(*, study: Study, email: str, role: str) -> InviteResult:
    local = email.split("@", 1)[0][:140] or "member"
    password = _one_time_password()
    for _attempt in range(5):
        username = f"{local}-{secrets.token_hex(3)}"
        _username_check(username)
        try:
            with transaction.atomic():
                user = UserModel.objects.create_user(username=username, email=email,
                                                     password=password)
                # The studies app owns the membership table and its rules; an account
                # created here is recorded as this study's own (which allows its leads to
                # reset its password), and its owner must replace the one-time password.
                membership_set(study=study, user=user, role=role, created_account=True)
                PasswordChangeRequired.objects.get_or_create(user=user)
        except IntegrityError:
            continue  # the random name was taken: draw another
        return InviteResult(status="created", username=username, role=role, user=user,
                            one_time_password=password)
    raise Conflict("Could not find a free username; try again.")


def _username_check(username: str) -> None:
    try:
        UnicodeUsernameValidator()(username)
    except DjangoValidationError as exc:
        raise ValidationFailed.at(
            "username", "username may contain only letters, digits and @/./+/-/_.",
        ) from exc
    if len(username) > 150:
        raise ValidationFailed.at("username", "username is too long.")


def invitations_pending_for(*, user: Any) -> list[Invitation]:
    """The invitations waiting for this account's answer, oldest first."""
    return list(
        Invitation.objects.filter(username=user.username, status=Invitation.Status.PENDING)
        .select_related("study", "invited_by").order_by("id")
    )


def invitations_pending_in(*, study: Study) -> list[Invitation]:
    """The study's invitations still waiting for an answer (for its leads)."""
    return list(Invitation.objects.filter(study=study, status=Invitation.Status.PENDING)
                .order_by("username"))


def _own_pending(invitation_id: int, user: Any) -> Invitation:
    invitation = (
        Invitation.objects.select_for_update()
        .filter(pk=invitation_id, username=user.username, status=Invitation.Status.PENDING)
        .first()
    )
    if invitation is None:
        raise NotFound("No such invitation waiting for you.")
    return invitation


def invitation_accept(*, invitation_id: int, user: Any) -> Membership:
    """The invited account accepts: it becomes a member with the invitation's role."""
    with transaction.atomic():
        invitation = _own_pending(invitation_id, user)
        membership, _ = membership_set(study=invitation.study, user=user, role=invitation.role)
        invitation.status = Invitation.Status.ACCEPTED
        invitation.decided_at = timezone.now()
        invitation.save(update_fields=["status", "decided_at"])
    return membership


def invitation_decline(*, invitation_id: int, user: Any) -> Invitation:
    """The invited account declines: nothing changes but the invitation's status."""
    with transaction.atomic():
        invitation = _own_pending(invitation_id, user)
        invitation.status = Invitation.Status.DECLINED
        invitation.decided_at = timezone.now()
        invitation.save(update_fields=["status", "decided_at"])
    return invitation


def invitation_revoke(*, study: Study, invitation_id: int, by: User) -> None:
    """A lead withdraws a pending invitation of their study."""
    require_lead(study=study, user=by)
    with transaction.atomic():
        deleted, _ = Invitation.objects.filter(
            pk=invitation_id, study=study, status=Invitation.Status.PENDING).delete()
    if not deleted:
        raise NotFound("No such pending invitation in this study.")


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
        require_lead(study=study, user=by)
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
        # The lead knows this password: its owner must replace it at the next sign-in.
        PasswordChangeRequired.objects.get_or_create(user=account)
    return password


def password_reset_allowed(*, study: Study, account: Any, membership: Membership,
                           by: User) -> bool:
    """Whether `by` may reset this member's password: the rule of `annotator_password_reset`,
    asked without resetting (the members page offers "Reset" only where it would work)."""
    if getattr(by, "is_superuser", False):
        return True
    if account.pk == getattr(by, "pk", None):
        return False
    try:
        _password_reset_check(study=study, account=account, membership=membership)
    except PasswordResetRefused:
        return False
    return True


def member_role_change(*, study: Study, user: Any, role: str, by: User) -> Membership:
    """A lead changes a member's role (the owner stays a lead; the last lead stays a lead)."""
    require_lead(study=study, user=by)
    if not Membership.objects.filter(study=study, user_id=user.pk).exists():
        raise NotFound("No such member in this study.")
    membership, _ = membership_set(study=study, user=user, role=role)
    return membership


def member_remove(*, study: Study, user: Any, by: User) -> None:
    """A lead removes a member (never the owner, never the last lead). Their annotations stay:
    they are the study's data, attributed to the account."""
    require_lead(study=study, user=by)
    membership_remove(study=study, user=user)


def password_change_required(*, user: Any) -> bool:
    """The account's password was set by someone else and has not been changed since."""
    return bool(getattr(user, "is_authenticated", False)) and (
        PasswordChangeRequired.objects.filter(user_id=user.pk).exists())


def password_change_done(*, user: Any) -> None:
    """The account's owner chose a new password: no change is required any more."""
    with transaction.atomic():
        PasswordChangeRequired.objects.filter(user_id=user.pk).delete()


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
