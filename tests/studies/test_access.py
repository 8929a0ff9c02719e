"""Cross-study access is refused for every study-scoped endpoint.

The URL list is read from the resolver, so endpoints added by any app under
`/api/studies/<slug>/...` are covered without editing this file. Other URL parameters are
filled with ids of real objects in study B where the parameter name says what it is.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from studies.models import Membership
from tests.factories import MembershipFactory, StudyFactory, UserFactory

METHODS = ("get", "post", "put", "patch", "delete")
WRITE_METHODS = ("post", "put", "patch", "delete")
# POST endpoints that only read by design (a read-only token may use them). A view can also
# declare `read_only_methods = ("post",)`.
READ_ONLY_WRITES = {
    # Renders the provider request a judge version would send; nothing is sent or stored.
    ("api/studies/<slug:slug>/judges/<int:judge_id>/versions/<int:version_id>/preview", "post"),
}
PARAM_RE = re.compile(r"<(?:(?P<conv>[^>:]+):)?(?P<name>[^>]+)>")


def _walk(patterns: list[Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for p in patterns:
        if isinstance(p, URLResolver):
            out.extend(_walk(p.url_patterns, prefix + str(p.pattern)))
        elif isinstance(p, URLPattern):
            out.append((prefix + str(p.pattern), p.callback))
    return out


def study_patterns() -> list[tuple[str, Any]]:
    return [(route, cb) for route, cb in _walk(get_resolver().url_patterns)
            if route.startswith("api/studies/<slug:slug>")]


def allowed_methods(callback: Any) -> list[str]:
    cls = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    if cls is None:
        return list(METHODS)
    return [m for m in METHODS if hasattr(cls, m)]


def test_the_resolver_has_study_endpoints():
    routes = [r for r, _ in study_patterns()]
    for expected in ("api/studies/<slug:slug>", "api/studies/<slug:slug>/outputs",
                     "api/studies/<slug:slug>/plans/<int:version>/lock"):
        assert expected in routes


def fill(route: str, world: Any) -> tuple[str, bool]:
    """The URL for study B, and whether every parameter was filled with a real B id."""
    known = {
        "slug": world.study.slug, "item_id": world.item.pk, "candidate_id": world.candidate.pk,
        "output_id": world.output.pk, "user_id": world.member.pk,
    }
    # "version" names a rubric or analysis-plan version only on those routes (B has v1 of
    # both); elsewhere (sampling plans, ...) it is an unknown object.
    if "/rubric/" in route or "/plans/" in route:
        known["version"] = 1
    if "/judges/" in route:
        known["judge_id"] = world.judge.pk
        known["version_id"] = world.judge_version.pk
    complete = True

    def repl(m: re.Match[str]) -> str:
        nonlocal complete
        name, conv = m.group("name"), m.group("conv") or "str"
        if name in known:
            return str(known[name])
        complete = False
        return "1" if conv == "int" else "x"

    return "/" + PARAM_RE.sub(repl, route), complete


@pytest.fixture
def clients(world_b, study, lead, client_for):
    """Study A's lead with an A-scoped token, a non-member, and B's lead read-only."""
    outsider = UserFactory(username="outsider")
    other = StudyFactory(owner=outsider, slug="gamma")
    MembershipFactory(study=other, user=outsider, role=Membership.Role.LEAD)
    # lead of A is also a member of B: only the token scope keeps B out of reach.
    MembershipFactory(study=world_b.study, user=lead, role=Membership.Role.LEAD)
    return {
        "a_scoped": client_for(lead, study=study, can_write=True),
        "outsider_token": client_for(outsider, can_write=True),
        "b_read_only": client_for(world_b.lead, can_write=False),
        "b_lead": client_for(world_b.lead, can_write=True),
    }


def _call(client: Any, method: str, url: str) -> Any:
    return getattr(client, method)(url, data={}, format="json")


@pytest.mark.django_db
@pytest.mark.parametrize("route", [r for r, _ in study_patterns()])
def test_every_study_endpoint_refuses_other_studies(route, world_b, clients, client):
    callback = dict(study_patterns())[route]
    url, complete = fill(route, world_b)
    methods = allowed_methods(callback)
    assert methods, f"{route} allows no method"
    for method in METHODS:
        # A token scoped to study A, held by a user who IS a member of B: 404 everywhere.
        response = _call(clients["a_scoped"], method, url)
        expected = {404} if method in methods else {404, 405}
        assert response.status_code in expected, (route, method, response.status_code)
        # A user with no membership in B: 404.
        response = _call(clients["outsider_token"], method, url)
        assert response.status_code in expected, (route, method, response.status_code)
        # An anonymous caller is never let in.
        response = getattr(client, method)(url)
        assert response.status_code in {401, 403, 404, 405, 302}, (route, method)
    view_cls = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    declared_reads = set(getattr(view_cls, "read_only_methods", ()))
    for method in WRITE_METHODS:
        if method not in methods or (route, method) in READ_ONLY_WRITES or (
                method in declared_reads):
            continue
        # B's own lead with a read-only token: 403 on every write, before any validation.
        # (With a made-up id in the URL a 404 for that object is acceptable: nothing exists
        # to write to.)
        response = _call(clients["b_read_only"], method, url)
        assert response.status_code in ({403} if complete else {403, 404}), (
            route, method, response.status_code, response.content[:300])
    if complete and "get" in methods:
        # Control: the URL is real; B's lead can read it, so the 404s above are about access.
        response = clients["b_lead"].get(url)
        assert response.status_code != 404, (route, response.content[:300])


@pytest.mark.django_db
def test_study_list_shows_only_visible_studies(world_b, study, lead, client_for):
    scoped = client_for(lead, study=study).get("/api/studies").json()
    assert [s["slug"] for s in scoped["results"]] == ["alpha"]
    MembershipFactory(study=world_b.study, user=lead, role=Membership.Role.VIEWER)
    account = client_for(lead).get("/api/studies").json()
    assert sorted(s["slug"] for s in account["results"]) == ["alpha", "beta"]
    outsider = UserFactory(username="nobody")
    assert client_for(outsider).get("/api/studies").json()["results"] == []


@pytest.mark.django_db
def test_annotators_do_not_see_lead_data(world_b, client_for):
    annotator = UserFactory(username="ann_b")
    MembershipFactory(study=world_b.study, user=annotator, role=Membership.Role.ANNOTATOR)
    c = client_for(annotator, can_write=True)
    assert c.get("/api/studies/beta").status_code == 200
    assert c.get("/api/studies/beta/rubric").status_code == 200
    for path in ("outputs", "candidates", "items", "plans", "members",
                 f"outputs/{world_b.output.pk}"):
        assert c.get(f"/api/studies/beta/{path}").status_code == 403, path
    assert c.patch("/api/studies/beta", {"name": "x"}, format="json").status_code == 403


@pytest.mark.django_db
def test_viewers_read_but_cannot_write(world_b, client_for):
    c = client_for(world_b.member, can_write=True)
    assert c.get("/api/studies/beta/outputs").status_code == 200
    assert c.patch("/api/studies/beta", {"name": "x"}, format="json").status_code == 403
    assert c.put("/api/studies/beta/strata", {"dimensions": []},
                 format="json").status_code == 403
