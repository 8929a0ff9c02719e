"""Who may do what inside a study, decided in one place.

Every access decision of the product comes down to three facts about the caller: their role in
the study (viewer, annotator, lead, or none), whether their account is a superuser, and the
scope of the API token they came with (none for a browser session, read-only or read-write).
`capabilities` turns those into the set of things the caller may do; views, services and the
raw-SQL hot paths ask it rather than comparing roles themselves, so that the two rules the
product rests on are each written once, here:

- **superusers count as leads** of every study (`effective_role`);
- **annotators are blind**: they grade without seeing judge verdicts or which candidate wrote
  an output, so judge data and lead data are not theirs to read (`_BLIND`).

How a refusal is answered is decided here too (`refusal_status`): a study the caller cannot see
is a 404 on the API and on pages alike (tokens cannot probe which studies exist); inside a
study, a role too low or a read-only token is a 403 on the API, while pages answer 404 to
anyone who may not see them (docs/api.md, "Access").

Plain Python: no Django, no ORM, so the raw-SQL paths and the ORM paths compute the same answer
from the same function, and the module imports without settings (tests/test_pure_imports.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

__all__ = [
    "ANNOTATOR",
    "LEAD",
    "ROLES",
    "ROLE_RANK",
    "VIEWER",
    "Capability",
    "TokenScope",
    "capabilities",
    "counts_as_lead",
    "effective_role",
    "may_start_study",
    "may_write",
    "missing",
    "refusal_status",
    "required_for_role",
    "roles_with",
]

# The membership roles (studies.models.Membership.Role holds the same values).
VIEWER = "viewer"
ANNOTATOR = "annotator"
LEAD = "lead"
ROLES = (VIEWER, ANNOTATOR, LEAD)
# Annotators rank above viewers only for annotation work; lead data is asked for by capability.
ROLE_RANK = {VIEWER: 0, ANNOTATOR: 1, LEAD: 2}


class Capability(StrEnum):
    """What a caller may do inside one study."""

    VIEW_STUDY = "view_study"
    """See that the study exists: the study, its rubric and strata, one's own work."""
    VIEW_JUDGE_DATA = "view_judge_data"
    """Read what grading must stay blind to: judge verdicts and everything built on them
    (reports, calibrated scores), and the lead data that names candidates (candidates, items,
    outputs, analysis plans, members)."""
    GRADE = "grade"
    """Annotation work: take assignments from the queue, submit and revise one's own."""
    LEAD = "lead"
    """Manage the study: every lead page and every write to study data."""
    WRITE = "write"
    """The credential may change things: a browser session or a read-write token."""


class TokenScope(StrEnum):
    """What an API token allows (a browser session has no token: scope None)."""

    READ = "read"
    WRITE = "write"


def counts_as_lead(*, is_superuser: bool) -> bool:
    """Whether the account leads every study whatever its memberships (superusers do)."""
    return bool(is_superuser)


def may_start_study(roles: Iterable[str], *, is_superuser: bool) -> bool:
    """Whether the home page offers starting a new study (the lead's first action): to a
    superuser, to anyone who leads a study, and to an account that belongs to none yet (it
    starts its own). An account invited only to grade or to read is not offered lead actions."""
    held = set(roles)
    return counts_as_lead(is_superuser=is_superuser) or LEAD in held or not held


def may_write(token_scope: TokenScope | str | None) -> bool:
    """Whether a credential may change things: a browser session (no token) or a read-write
    token."""
    return token_scope is None or TokenScope(token_scope) is TokenScope.WRITE


def effective_role(role: str | None, *, is_superuser: bool) -> str | None:
    """The role the caller acts with: a superuser is a lead everywhere, others their
    membership role (None without one)."""
    if counts_as_lead(is_superuser=is_superuser):
        return LEAD
    if role is not None and role not in ROLE_RANK:
        raise ValueError(f"unknown role {role!r}")
    return role


# Annotators are blind (see the module docstring): the one line that says so.
_BLIND = frozenset({ANNOTATOR})

_BY_ROLE: dict[str, frozenset[Capability]] = {
    role: frozenset(
        {Capability.VIEW_STUDY}
        | ({Capability.VIEW_JUDGE_DATA} if role not in _BLIND else set())
        | ({Capability.GRADE} if ROLE_RANK[role] >= ROLE_RANK[ANNOTATOR] else set())
        | ({Capability.LEAD} if role == LEAD else set())
    )
    for role in ROLES
}


# Built once: this runs on every API request, so no set is made per call.
_TABLE: dict[tuple[str, bool], frozenset[Capability]] = {
    (role, write): caps | {Capability.WRITE} if write else caps
    for role, caps in _BY_ROLE.items() for write in (False, True)
}


def capabilities(
    role: str | None, *, is_superuser: bool = False, token_scope: TokenScope | str | None = None
) -> frozenset[Capability]:
    """The capabilities of a caller with membership `role` (None: no membership), superuser
    flag and token scope (None: a browser session). No role and no superuser flag: nothing at
    all, not even WRITE, since there is nothing in the study to write to."""
    acting = effective_role(role, is_superuser=is_superuser)
    if acting is None:
        return frozenset()
    return _TABLE[(acting, may_write(token_scope))]


def required_for_role(min_role: str) -> Capability:
    """The capability that stands for "at least `min_role`" (viewer, annotator or lead)."""
    return {VIEWER: Capability.VIEW_STUDY, ANNOTATOR: Capability.GRADE,
            LEAD: Capability.LEAD}[min_role]


def roles_with(capability: Capability) -> tuple[str, ...]:
    """The membership roles that grant `capability` (for SQL that filters memberships)."""
    return tuple(r for r in ROLES if capability in _BY_ROLE[r])


def missing(
    caps: Iterable[Capability], need: Iterable[Capability]
) -> Capability | None:
    """The first capability of `need` that `caps` lacks (VIEW_STUDY always first), or None.

    The order of `need` is the order refusals are reported in (the role before the token)."""
    have = frozenset(caps)
    for capability in (Capability.VIEW_STUDY, *need):
        if capability not in have:
            return capability
    return None


def refusal_status(lacking: Capability, *, page: bool) -> int:
    """The HTTP status of a refusal for lack of `lacking`, over the API or on an HTML page.

    A study one cannot see is 404 everywhere. Inside it, the API says 403 (the caller knows
    the study exists), while pages answer 404 to anyone who may not see them."""
    if lacking is Capability.VIEW_STUDY or page:
        return 404
    return 403
