"""Study access: the one check every study-scoped view and service goes through.

What a caller may do is decided by `reviewhub.capabilities` from their role, superuser flag and
token scope; this module finds those facts (by raw SQL on the request path, by the ORM in
services) and turns a missing capability into the refusal the API documents. A study the caller
may not see is reported as 404 (not 403), so that tokens cannot probe which studies exist;
read-only tokens get 403 on writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from reviewhub.capabilities import (
    ROLE_RANK,
    Capability,
    TokenScope,
    capabilities,
    effective_role,
    missing,
    refusal_status,
    required_for_role,
)
from reviewhub.errors import Forbidden, NotFound
from reviewhub.rawrows import RowShape, fetch_one

from .models import ApiToken, Membership, Study

__all__ = [
    "ROLE_RANK",
    "StudyAccess",
    "api_study",
    "judge_data_need",
    "study_access_get",
    "study_capabilities",
    "study_get_for_actor",
    "study_role",
    "token_scope",
]

Actor = AbstractBaseUser | AnonymousUser


@dataclass(frozen=True)
class StudyAccess:
    """A study with the caller's acting role (None: none) and capabilities in it."""

    study: Study
    role: str | None
    capabilities: frozenset[Capability]


def token_scope(token: Any) -> TokenScope | None:
    """The scope of the request's API token (None for a browser session)."""
    if not isinstance(token, ApiToken):
        return None
    return TokenScope.WRITE if token.can_write else TokenScope.READ


def _token_elsewhere(token: Any, study: Study) -> bool:
    # A study-scoped token sees nothing of any other study: as if the study did not exist.
    return isinstance(token, ApiToken) and token.study_id is not None \
        and token.study_id != study.pk


def _is_superuser(user: Actor) -> bool:
    return bool(user.is_authenticated and getattr(user, "is_superuser", False))


def _capabilities_of(user: Actor, study: Study, token: Any, member_role: str | None
                     ) -> frozenset[Capability]:
    if not user.is_authenticated or _token_elsewhere(token, study):
        return frozenset()
    return capabilities(member_role, is_superuser=_is_superuser(user),
                        token_scope=token_scope(token))


def _member_role(user: Actor, study: Study) -> str | None:
    if not user.is_authenticated:
        return None
    return (
        Membership.objects.filter(study=study, user_id=user.pk)
        .values_list("role", flat=True)
        .first()
    )


def study_role(*, user: Actor, study: Study) -> str | None:
    """The role the user acts with in the study, or None (superusers act as leads)."""
    if not user.is_authenticated:
        return None
    return effective_role(None if _is_superuser(user) else _member_role(user, study),
                          is_superuser=_is_superuser(user))


def study_capabilities(*, user: Actor, study: Study, token: Any = None
                       ) -> frozenset[Capability]:
    """The caller's capabilities in `study`, by the ORM (services; the request path uses
    `study_access_get`, which answers the same from one hand-written query)."""
    if not user.is_authenticated:
        return frozenset()
    role = None if _is_superuser(user) else _member_role(user, study)
    return _capabilities_of(user, study, token, role)


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


def _refusal(lacking: Capability, slug: str, messages: Mapping[Capability, str]) -> Exception:
    if lacking in messages:
        message = messages[lacking]
    elif lacking is Capability.VIEW_STUDY:
        message = f"Study '{slug}' not found."
    elif lacking is Capability.WRITE:
        message = "This API token is read-only."
    elif lacking is Capability.GRADE:
        message = f"This needs the 'annotator' role in study '{slug}'."
    elif lacking is Capability.LEAD:
        message = f"This needs the 'lead' role in study '{slug}'."
    else:
        message = "Annotators grade blind: this data is for leads and viewers."
    status = refusal_status(lacking, page=False)
    return NotFound(message) if status == NotFound.status_code else Forbidden(message)


def study_access_get(
    *,
    user: Actor,
    slug: str,
    token: Any = None,
    need: Sequence[Capability] = (),
    messages: Mapping[Capability, str] | None = None,
) -> StudyAccess:
    """The study by slug with the caller's access, when they have every capability of `need`
    (checked in that order, after VIEW_STUDY); else NotFound / Forbidden (`refusal_status`).

    `messages` overrides the refusal message per missing capability."""
    # Study and the caller's role in one precompiled query: this check runs on every API
    # request, and the annotators' next/submit loop is bound by its round trips and CPU.
    study = _study_with_role(slug, user.pk if user.is_authenticated else None)
    if study is None:
        raise NotFound(f"Study '{slug}' not found.")
    caps = _capabilities_of(user, study, token, study.caller_role)  # type: ignore[attr-defined]
    lacking = missing(caps, need)
    if lacking is not None:
        raise _refusal(lacking, slug, messages or {})
    role = effective_role(study.caller_role, is_superuser=_is_superuser(user))  # type: ignore[attr-defined]
    return StudyAccess(study=study, role=role, capabilities=caps)


def judge_data_need(*, write: bool) -> list[Capability]:
    """What an endpoint of judge data (judges, calibrated scores, reports) asks of a caller:
    to read, sight of judge data (leads and viewers; annotators are blind); to write, the lead
    role and a credential that may write."""
    if write:
        return [Capability.LEAD, Capability.WRITE, Capability.VIEW_JUDGE_DATA]
    return [Capability.VIEW_JUDGE_DATA]


def api_study(
    request: Any,
    slug: str,
    *,
    write: bool = False,
    lead: bool = False,
    min_role: str | None = None,
    judge_data: bool = False,
    messages: Mapping[Capability, str] | None = None,
) -> StudyAccess:
    """The study named in an API request's URL, with the caller's access (the request's user
    and token): the one access helper of every app's API views.

    What is asked, in this order: `min_role` (the least role, as `study_get_for_actor`); with
    `judge_data`, what an endpoint of judge data asks (`judge_data_need`: to read, sight of
    judge data; to write, the lead role and a credential that may write); else the lead role
    when `lead` and a credential that may write when `write`. Refusals are NotFound /
    Forbidden; `messages` overrides a refusal's message per missing capability."""
    need: list[Capability] = []
    if min_role is not None:
        need.append(required_for_role(str(min_role)))
    if judge_data:
        need += judge_data_need(write=write)
    else:
        need += ([Capability.LEAD] if lead else []) + ([Capability.WRITE] if write else [])
    return study_access_get(user=request.user, slug=slug, token=getattr(request, "auth", None),
                            need=need, messages=messages)


def study_get_for_actor(
    *,
    user: Actor,
    slug: str,
    token: Any = None,
    write: bool = False,
    min_role: str = Membership.Role.VIEWER,
) -> tuple[Study, str]:
    """Return (study, role) when the actor may act on it, else raise NotFound / Forbidden.

    `min_role` is the least role needed (viewer < annotator < lead). Note that annotators are
    ranked above viewers only for annotation work; views that show lead data ask for
    `Capability.VIEW_JUDGE_DATA` (`study_access_get`) or for "lead".
    """
    need = [required_for_role(str(min_role))] + ([Capability.WRITE] if write else [])
    access = study_access_get(user=user, slug=slug, token=token, need=need)
    assert access.role is not None  # VIEW_STUDY held
    return access.study, access.role
