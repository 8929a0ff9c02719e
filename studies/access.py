"""Study access: the one check every study-scoped view and service goes through.

A study the caller may not see is reported as 404 (not 403), so that tokens cannot probe which
studies exist. Read-only tokens get 403 on writes.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from reviewhub.errors import Forbidden, NotFound
from reviewhub.rawrows import RowShape, fetch_one

from .models import ApiToken, Membership, Study

ROLE_RANK = {Membership.Role.VIEWER: 0, Membership.Role.ANNOTATOR: 1, Membership.Role.LEAD: 2}


def study_role(*, user: AbstractBaseUser | AnonymousUser, study: Study) -> str | None:
    """The user's role in the study, or None. Superusers act as leads everywhere."""
    if not user.is_authenticated:
        return None
    if getattr(user, "is_superuser", False):
        return Membership.Role.LEAD
    return (
        Membership.objects.filter(study=study, user_id=user.pk)
        .values_list("role", flat=True)
        .first()
    )


_STUDY = RowShape(Study, "s")


def _study_with_role(slug: str, user_id: Any) -> Study | None:
    """The study by slug, carrying `caller_role` (the user's membership role, or None)."""
    row = fetch_one(
        f"SELECT {_STUDY.select}, (SELECT m.role FROM {Membership._meta.db_table} m "
        "WHERE m.study_id = s.id AND m.user_id = %s ORDER BY m.id LIMIT 1) "
        f"FROM {Study._meta.db_table} s WHERE s.slug = %s",
        [user_id, slug],
    )
    if row is None:
        return None
    study = _STUDY.load(row)
    study.caller_role = row[_STUDY.width]  # type: ignore[attr-defined]
    return study


def study_get_for_actor(
    *,
    user: AbstractBaseUser | AnonymousUser,
    slug: str,
    token: Any = None,
    write: bool = False,
    min_role: str = Membership.Role.VIEWER,
) -> tuple[Study, str]:
    """Return (study, role) when the actor may act on it, else raise NotFound / Forbidden.

    `min_role` is the least role needed (viewer < annotator < lead). Note that annotators are
    ranked above viewers only for annotation work; views that show lead data ask for "lead".
    """
    # Study and the caller's role in one precompiled query: this check runs on every API
    # request, and the annotators' next/submit loop is bound by its round trips and CPU.
    study = _study_with_role(slug, user.pk if user.is_authenticated else None)
    if study is None:
        raise NotFound(f"Study '{slug}' not found.")
    if isinstance(token, ApiToken) and token.study_id is not None and token.study_id != study.pk:
        raise NotFound(f"Study '{slug}' not found.")
    if not user.is_authenticated:
        role = None
    elif getattr(user, "is_superuser", False):
        role = Membership.Role.LEAD
    else:
        role = study.caller_role  # type: ignore[attr-defined]
    if role is None:
        raise NotFound(f"Study '{slug}' not found.")
    if ROLE_RANK[Membership.Role(role)] < ROLE_RANK[Membership.Role(min_role)]:
        raise Forbidden(f"This needs the '{min_role}' role in study '{slug}'.")
    if write and isinstance(token, ApiToken) and not token.can_write:
        raise Forbidden("This API token is read-only.")
    return study, role
