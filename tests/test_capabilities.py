"""Capabilities (`reviewhub.capabilities`): one decision, reached the same way by every path.

For every role (none, viewer, annotator, lead) x superuser (no, yes) x token (none, read-only,
read-write):
- the capabilities match a table written out here (not derived from the module);
- the raw-SQL request path (`study_access_get`, one hand-written query) and the ORM path
  (`study_capabilities`) answer the same set, and so does the annotators' queue, whose own
  hand-written query decides who may grade;
- three representative pairs of an API endpoint and an HTML page that ask the same of a caller
  (judge run verdicts / the judge runs page, the queue / the grading page, creating a sampling
  plan over the API / on the plans page) refuse the same callers: a study one cannot see is 404
  on both, a role too low is 403 over the API and 404 on the page (docs/api.md, "Access").
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from django.db import transaction
from django.test import Client

from annotations import services as annotation_services
from annotations.services.queue import _active_plan_for_annotator
from imports.generic import ratings_import, ratings_read
from reviewhub.capabilities import (
    Capability,
    TokenScope,
    capabilities,
    effective_role,
    missing,
    refusal_status,
    required_for_role,
    roles_with,
)
from reviewhub.errors import Forbidden, NotFound
from studies.access import study_access_get, study_capabilities, study_role
from studies.models import ApiToken, Membership, Study
from tests.factories import MembershipFactory, StudyFactory, UserFactory, api_token_create

V, J, G, L, W = (Capability.VIEW_STUDY, Capability.VIEW_JUDGE_DATA, Capability.GRADE,
                 Capability.LEAD, Capability.WRITE)
ROLES: tuple[str | None, ...] = (None, "viewer", "annotator", "lead")
SUPERUSER = (False, True)
TOKENS: tuple[str | None, ...] = (None, "read", "write")
COMBOS = list(itertools.product(ROLES, SUPERUSER, TOKENS))

# The rules, written out: (acting role, token) -> capabilities. Annotators are blind (no J);
# viewers do no annotation work (no G); only leads lead; a read-only token never writes.
_BY_ROLE = {None: set(), "viewer": {V, J}, "annotator": {V, G}, "lead": {V, J, G, L}}


def expected(role: str | None, superuser: bool, token: str | None) -> frozenset[Capability]:
    acting = "lead" if superuser else role  # superusers count as leads
    caps = set(_BY_ROLE[acting])
    if caps and token != "read":
        caps.add(W)
    return frozenset(caps)


# --- pure -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("role", "superuser", "token"), COMBOS)
def test_capabilities_follow_the_table(role: str | None, superuser: bool,
                                       token: str | None) -> None:
    assert capabilities(role, is_superuser=superuser, token_scope=token) == expected(
        role, superuser, token)


def test_the_two_rules_and_their_helpers() -> None:
    assert effective_role(None, is_superuser=True) == "lead"
    assert effective_role("annotator", is_superuser=True) == "lead"
    assert effective_role("viewer", is_superuser=False) == "viewer"
    assert roles_with(J) == ("viewer", "lead")  # annotators are blind
    assert roles_with(G) == ("annotator", "lead")
    assert [required_for_role(r) for r in ("viewer", "annotator", "lead")] == [V, G, L]
    assert missing({V, G}, [L, W]) == L  # the role is reported before the token
    assert missing({V, J}, [W]) == W
    assert missing(set(), [W]) == V
    assert missing({V, J, W}, [J, W]) is None
    with pytest.raises(ValueError):
        capabilities("owner")
    with pytest.raises(ValueError):
        capabilities("lead", token_scope="admin")
    assert TokenScope("write") is TokenScope.WRITE


def test_refusal_statuses() -> None:
    # A study one cannot see: 404 over the API and on pages alike. A role too low, blind
    # grading or a read-only token: 403 over the API, 404 on pages.
    for lacking in Capability:
        assert refusal_status(lacking, page=True) == 404
        assert refusal_status(lacking, page=False) == (404 if lacking is V else 403)


# --- the raw-SQL path and the ORM path ----------------------------------------------------------

@dataclass
class World:
    study: Study
    other: Study
    users: dict[tuple[str | None, bool], Any]
    tokens: dict[tuple[str | None, bool, str], ApiToken]
    secrets: dict[tuple[str | None, bool, str], str]
    elsewhere: str


def _ratings_csv(n_items: int = 6) -> str:
    lines = ["item_id,stratum.language,output_id,candidate,output_text,rater_id,rater_kind,"
             "judge_version,criterion,value"]
    for i in range(n_items):
        lines.append(f"q{i},{'en' if i % 2 else 'de'},o{i},m1,answer {i},hum1,human,,correct,"
                     f"{'pass' if i % 3 else 'fail'}")
    return "\n".join(lines) + "\n"


def _world() -> World:
    owner: Any = UserFactory(username="cap-owner")
    study = cast(Study, StudyFactory(owner=owner, slug="cap-alpha"))
    MembershipFactory(study=study, user=owner, role=Membership.Role.LEAD)
    other = cast(Study, StudyFactory(owner=owner, slug="cap-beta"))
    MembershipFactory(study=other, user=owner, role=Membership.Role.LEAD)
    ratings_import(study=study, rows=ratings_read(io.StringIO(_ratings_csv()), fmt="csv"))
    annotation_services.sampling_plan_create(
        study=study, spec={"mode": "all", "dimension": "language", "seed": 1}, k=2,
        gold_rate=0, created_by=owner)
    users: dict[tuple[str | None, bool], Any] = {}
    tokens: dict[tuple[str | None, bool, str], ApiToken] = {}
    secrets: dict[tuple[str | None, bool, str], str] = {}
    for role, superuser in itertools.product(ROLES, SUPERUSER):
        user: Any = UserFactory(username=f"cap-{role or 'none'}-{'su' if superuser else 'plain'}",
                           is_superuser=superuser, is_staff=superuser)
        if role is not None:
            MembershipFactory(study=study, user=user, role=role)
        users[(role, superuser)] = user
        for scope in ("read", "write"):
            name = f"cap-{scope}"
            secrets[(role, superuser, scope)] = api_token_create(
                user=user, study=study, can_write=scope == "write", name=name)
            tokens[(role, superuser, scope)] = ApiToken.objects.get(user=user, name=name)
    elsewhere = api_token_create(user=owner, study=other, can_write=True, name="elsewhere")
    return World(study, other, users, tokens, secrets, elsewhere)


@pytest.fixture(scope="module")
def world(django_db_setup: Any, django_db_blocker: Any) -> Iterator[World]:
    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            yield _world()
        finally:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)


def _raw(world: World, user: Any, token: Any) -> tuple[frozenset[Capability], str | None]:
    try:
        access = study_access_get(user=user, slug=world.study.slug, token=token)
    except NotFound:
        return frozenset(), None
    return access.capabilities, access.role


@pytest.mark.django_db
def test_raw_sql_and_orm_answer_the_same(world: World) -> None:
    seen = set()
    for role, superuser, scope in COMBOS:
        user = world.users[(role, superuser)]
        token = world.tokens[(role, superuser, scope)] if scope else None
        raw, raw_role = _raw(world, user, token)
        orm = study_capabilities(user=user, study=world.study, token=token)
        want = expected(role, superuser, scope)
        where = f"role={role} superuser={superuser} token={scope}"
        assert raw == orm == want, where
        assert raw_role == study_role(user=user, study=world.study), where
        seen.add(want)
    # Nothing, and viewer, annotator and lead with and without WRITE: the table is exercised.
    assert len(seen) == 7


@pytest.mark.django_db
def test_a_token_for_another_study_sees_nothing(world: World) -> None:
    owner = world.study.owner
    token = ApiToken.objects.get(user=owner, name="elsewhere")
    assert _raw(world, owner, token) == (frozenset(), None)
    assert study_capabilities(user=owner, study=world.study, token=token) == frozenset()


@pytest.mark.django_db
def test_the_queue_query_grants_grading_as_the_orm_does(world: World) -> None:
    for role, superuser in itertools.product(ROLES, SUPERUSER):
        user = world.users[(role, superuser)]
        may = G in study_capabilities(user=user, study=world.study)
        with transaction.atomic():
            try:
                plan = _active_plan_for_annotator(study=world.study, annotator=user)
            except Forbidden:
                plan = None
                assert not may, (role, superuser)
            else:
                assert may and plan is not None, (role, superuser)
            transaction.set_rollback(True)


# --- pages and the API refuse alike -------------------------------------------------------------

@dataclass(frozen=True)
class Pair:
    name: str
    api: tuple[str, str]  # method, path ({slug})
    api_need: tuple[Capability, ...]
    page: tuple[str, str]
    page_need: tuple[Capability, ...]


PAIRS = (
    Pair("judge verdicts", ("GET", "/api/studies/{slug}/verdicts"), (L,),
         ("GET", "/studies/{slug}/judge-runs/"), (L,)),
    Pair("grading", ("POST", "/api/studies/{slug}/queue/next"), (G, W),
         ("GET", "/studies/{slug}/grade/"), (G,)),
    Pair("plan creation", ("POST", "/api/studies/{slug}/sampling-plans"), (L, W),
         ("POST", "/studies/{slug}/annotation/plans/"), (L,)),
)


def _status(client: Client, method: str, path: str, *, api: bool) -> int:
    with transaction.atomic():
        if method == "GET":
            response = client.get(path)
        elif api:
            response = client.generic(method, path, "{}", content_type="application/json")
        else:
            response = client.generic(method, path, "",
                                      content_type="application/x-www-form-urlencoded")
        transaction.set_rollback(True)
    assert response.status_code < 500, (method, path, response.status_code)
    if response.status_code == 302:
        assert "/login" not in response["Location"], (method, path)
    return response.status_code


def _denied(status: int) -> bool:
    return status in (401, 403, 404)


@pytest.mark.django_db
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: p.name)
def test_pages_and_api_refuse_the_same_callers(world: World, pair: Pair) -> None:
    from django.urls import resolve

    slug = world.study.slug
    api_path, page_path = pair.api[1].format(slug=slug), pair.page[1].format(slug=slug)
    resolve(page_path)  # the page exists where the pair says
    for role, superuser, scope in COMBOS:
        caps = expected(role, superuser, scope)
        where = f"{pair.name}: role={role} superuser={superuser} token={scope}"
        user = world.users[(role, superuser)]
        api_client = Client()
        if scope is None:
            api_client.force_login(user)
        else:
            api_client.defaults["HTTP_AUTHORIZATION"] = (
                f"Bearer {world.secrets[(role, superuser, scope)]}")
        api_status = _status(api_client, *pair.api[:1], api_path, api=True)
        lacking = missing(caps, pair.api_need)
        if lacking is None:
            assert not _denied(api_status), where + f": API {api_status}, expected let in"
        else:
            assert api_status == (404 if lacking is V else 403), where + f": API {api_status}"
        if scope is not None:
            continue  # a token signs nobody in to the pages
        page_client = Client()
        page_client.force_login(user)
        page_status = _status(page_client, pair.page[0], page_path, api=False)
        page_lacking = missing(caps, pair.page_need)
        # One decision: the page refuses exactly the session callers the API refuses.
        assert (page_lacking is None) == (lacking is None), where
        if page_lacking is None:
            assert not _denied(page_status), where + f": page {page_status}, expected let in"
        else:
            assert page_status == 404, where + f": page {page_status}"
            if lacking is V:  # the same denial (no sight of the study): the same status
                assert page_status == api_status == 404, where
