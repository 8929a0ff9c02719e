"""REST endpoints of the studies app: CRUD, rubric and strata, plans (409 when locked),
tokens, filters and cursor pagination with bounded query counts."""

from __future__ import annotations

from typing import Any

import pytest

from judges.models import Judge, JudgeVersion, Verdict
from studies.models import ApiToken, Membership, Study
from studies.services import dimension_set
from tests.factories import (
    CandidateFactory,
    ItemFactory,
    MembershipFactory,
    OutputFactory,
    UserFactory,
)

from .factories import BINARY, ORDINAL

pytestmark = pytest.mark.django_db


def err(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    return body["error"]


# --- Studies and members ----------------------------------------------------------------------

def test_create_study_makes_owner_lead(api_client, client_for):
    user = UserFactory(username="maker")
    c = client_for(user)
    r = c.post("/api/studies", {"name": "New", "slug": "new-study",
                                "run_conditions": {"temperature": 0}}, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["owner"] == "maker" and r.json()["status"] == "draft"
    assert Membership.objects.get(study__slug="new-study", user=user).role == "lead"
    dup = c.post("/api/studies", {"name": "New", "slug": "new-study"}, format="json")
    assert dup.status_code == 409
    bad = c.post("/api/studies", {"name": "", "slug": "Bad Slug", "output_schema": {"type": 3}},
                 format="json")
    assert bad.status_code == 400
    paths = {e["path"] for e in err(bad)["details"]["errors"]}
    assert paths == {"name", "slug", "output_schema"}


def test_scoped_and_read_only_tokens_cannot_create_studies(study, lead, client_for):
    r = client_for(lead, study=study).post("/api/studies", {"name": "x", "slug": "x"},
                                           format="json")
    assert r.status_code == 403
    r = client_for(lead, can_write=False).post("/api/studies", {"name": "x", "slug": "x"},
                                               format="json")
    assert r.status_code == 403
    assert not Study.objects.filter(slug="x").exists()


def test_status_moves_forward_only(study, lead_client):
    Study.objects.filter(pk=study.pk).update(status="draft")
    assert lead_client.patch("/api/studies/alpha", {"status": "closed"},
                             format="json").status_code == 400
    assert lead_client.patch("/api/studies/alpha", {"status": "open"},
                             format="json").json()["status"] == "open"
    assert lead_client.patch("/api/studies/alpha", {"status": "closed"},
                             format="json").json()["status"] == "closed"
    r = lead_client.patch("/api/studies/alpha", {"status": "open"}, format="json")
    assert r.status_code == 400 and "closed study stays closed" in err(r)["message"]
    r = lead_client.patch("/api/studies/alpha", {"slug": "renamed"}, format="json")
    assert r.status_code == 400


def test_members_add_change_remove(study, lead, lead_client):
    bob = UserFactory(username="bob")
    # A lead cannot add an account that is not a member (it joins by accepting an
    # invitation); the answer is the same for an existing name and for none.
    r = lead_client.post("/api/studies/alpha/members", {"username": "bob", "role": "annotator"},
                         format="json")
    ghost = lead_client.post("/api/studies/alpha/members",
                             {"username": "ghost", "role": "annotator"}, format="json")
    assert r.status_code == ghost.status_code == 400
    assert err(r)["details"] == err(ghost)["details"]
    assert err(r)["details"]["errors"][0]["path"] == "username"
    MembershipFactory(study=study, user=bob, role="annotator")
    r = lead_client.patch(f"/api/studies/alpha/members/{bob.pk}", {"role": "viewer"},
                          format="json")
    assert r.json()["role"] == "viewer"
    r = lead_client.patch(f"/api/studies/alpha/members/{lead.pk}", {"role": "viewer"},
                          format="json")
    assert r.status_code == 409
    assert lead_client.delete(f"/api/studies/alpha/members/{lead.pk}").status_code == 409
    assert lead_client.delete(f"/api/studies/alpha/members/{bob.pk}").status_code == 204
    assert lead_client.get(f"/api/studies/alpha/members/{bob.pk}").status_code == 404
    listed = lead_client.get("/api/studies/alpha/members").json()["results"]
    assert [m["username"] for m in listed] == ["lead"]


# --- Rubric -----------------------------------------------------------------------------------

def test_rubric_put_versions(study, lead, lead_client):
    assert lead_client.get("/api/studies/alpha/rubric").status_code == 404
    r = lead_client.put("/api/studies/alpha/rubric", {"criteria": [BINARY, ORDINAL]},
                        format="json")
    assert r.status_code == 201 and r.json()["outcome"] == "created"
    assert r.json()["criteria"][1]["allowed_values"] == ["1", "2", "3"]
    r = lead_client.put("/api/studies/alpha/rubric", {"criteria": [BINARY]}, format="json")
    assert (r.status_code, r.json()["outcome"], r.json()["version"]) == (200, "updated", 1)

    judge = Judge.objects.create(study=study, name="j", kind="imported")
    jv = JudgeVersion.objects.create(judge=judge, version=1, content_hash="0" * 64)
    ok = study.rubric_versions.get().criteria.get(key="ok")
    Verdict.objects.create(judge_version=jv, criterion=ok,
                           output=OutputFactory(candidate__study=study), value="pass")
    r = lead_client.put("/api/studies/alpha/rubric", {"criteria": [BINARY, ORDINAL]},
                        format="json")
    assert (r.status_code, r.json()["version"]) == (201, 2)
    versions = lead_client.get("/api/studies/alpha/rubric/versions").json()["results"]
    assert [v["version"] for v in versions] == [2, 1]
    v1 = lead_client.get("/api/studies/alpha/rubric/versions/1").json()
    assert [c["key"] for c in v1["criteria"]] == ["ok"]

    bad = {**ORDINAL, "pass_threshold": 9}
    r = lead_client.put("/api/studies/alpha/rubric", {"criteria": [bad]}, format="json")
    assert r.status_code == 400
    e = err(r)["details"]["errors"][0]
    assert e["path"] == "criteria[0].pass_threshold" and "criterion 'quality'" in e["message"]


# --- Strata -----------------------------------------------------------------------------------

def test_strata_put_and_counts(study, lead_client):
    for lang in ("en", "en", "de", None):
        ItemFactory(study=study, metadata={"language": lang} if lang else {})
    dims = [{"key": "lang", "kind": "categorical", "source": "metadata.language"}]
    r = lead_client.put("/api/studies/alpha/strata", {"dimensions": dims}, format="json")
    assert r.status_code == 200, r.content
    assert r.json()["items_changed"] == 4
    assert r.json()["counts"] == {"lang": {"de": 1, "en": 2, "unknown": 1}}
    got = lead_client.get("/api/studies/alpha/strata").json()
    assert got["dimensions"][0]["key"] == "lang"
    r = lead_client.put("/api/studies/alpha/strata", {"dimensions": [{"key": "x"}]},
                        format="json")
    assert r.status_code == 400
    assert err(r)["details"]["errors"][0]["path"].startswith("dimensions[0]")


# --- Lists: filters, pagination, query counts -------------------------------------------------

@pytest.fixture
def populated(study):
    dimension_set(study=study, dimensions=[
        {"key": "lang", "kind": "categorical", "source": "metadata.language"},
        {"key": "len", "kind": "numeric_bins", "source": "input_length",
         "config": {"edges": [0, 20], "labels": ["short", "long"]}},
    ])
    cands = [CandidateFactory(study=study, name=n) for n in ("alpha-m", "beta-m")]
    items = []
    for i in range(30):
        items.append(ItemFactory(
            study=study, input="q" * (5 if i % 2 else 50),
            metadata={"language": "de" if i % 3 == 0 else "en", "n": i % 5,
                      "src": {"kind": "chat" if i < 10 else "mail"}},
        ))
    from studies.services import study_strata_recompute

    study_strata_recompute(study=study)
    for item in items:
        for j, cand in enumerate(cands):
            OutputFactory(study=study, candidate=cand, item=item,
                          error="timeout" if (item.pk + j) % 7 == 0 else "",
                          schema_valid=bool(item.pk % 2), metadata={"run": "r1"})
    return {"items": items, "candidates": cands}


def collect(client: Any, url: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while url:
        body = client.get(url).json()
        out.extend(body["results"])
        url = body["next"]
    return out


def test_cursor_pagination_walks_everything_once(populated, lead_client):
    rows = collect(lead_client, "/api/studies/alpha/outputs?page_size=7")
    ids = [r["id"] for r in rows]
    assert len(ids) == 60 and len(set(ids)) == 60 and ids == sorted(ids)
    assert {r["candidate"] for r in rows} == {"alpha-m", "beta-m"}
    assert "item_strata" in rows[0] and "input" not in rows[0]


def test_output_filters(populated, lead_client):
    items = populated["items"]

    def ids(query: str) -> set[int]:
        return {r["id"] for r in collect(lead_client, f"/api/studies/alpha/outputs?{query}")}

    from studies.models import Output

    base = Output.objects.filter(study__slug="alpha")
    assert ids("candidate=alpha-m") == set(base.filter(candidate__name="alpha-m")
                                           .values_list("id", flat=True))
    de_ids = {i.pk for i in items if i.metadata["language"] == "de"}
    assert ids("stratum=lang:de") == set(base.filter(item_id__in=de_ids)
                                         .values_list("id", flat=True))
    de_short = {i.pk for i in items if i.metadata["language"] == "de" and len(i.input) < 20}
    assert ids("stratum=lang:de&stratum=len:short") == set(
        base.filter(item_id__in=de_short).values_list("id", flat=True))
    n3 = {i.pk for i in items if i.metadata["n"] == 3}
    assert ids("meta.n=3") == set(base.filter(item_id__in=n3).values_list("id", flat=True))
    n34 = {i.pk for i in items if i.metadata["n"] in (3, 4)}
    assert ids("meta.n=3&meta.n=4") == set(base.filter(item_id__in=n34)
                                           .values_list("id", flat=True))
    chat = {i.pk for i in items if i.metadata["src"]["kind"] == "chat"}
    assert ids("meta.src.kind=chat&candidate=beta-m") == set(
        base.filter(item_id__in=chat, candidate__name="beta-m").values_list("id", flat=True))
    assert ids("has_error=true") == set(base.exclude(error="").values_list("id", flat=True))
    assert ids("has_error=false") == set(base.filter(error="").values_list("id", flat=True))
    assert ids("schema_valid=false") == set(base.filter(schema_valid=False)
                                            .values_list("id", flat=True))
    assert ids("output_meta.run=r1") == set(base.values_list("id", flat=True))
    assert ids("output_meta.run=r2") == set()
    assert ids("stratum=lang:fr") == set()
    r = lead_client.get("/api/studies/alpha/outputs?stratum=lang")
    assert r.status_code == 400 and err(r)["details"]["errors"][0]["path"] == "stratum"
    assert lead_client.get("/api/studies/alpha/outputs?has_error=maybe").status_code == 400


def test_item_filters(populated, lead_client):
    rows = collect(lead_client, "/api/studies/alpha/items?stratum=lang:en&meta.n=0")
    expected = {i.pk for i in populated["items"]
                if i.metadata["language"] == "en" and i.metadata["n"] == 0}
    assert {r["id"] for r in rows} == expected and expected
    assert rows[0]["strata"]["lang"] == "en"
    one = populated["items"][0]
    rows = collect(lead_client, f"/api/studies/alpha/items?external_id={one.external_id}")
    assert [r["id"] for r in rows] == [one.pk]
    r = lead_client.get(f"/api/studies/alpha/items/{one.pk}")
    assert r.json()["external_id"] == one.external_id


@pytest.mark.parametrize("page_size", [5, 200])
@pytest.mark.parametrize(("path", "total"), [
    ("outputs", 60), ("items", 30), ("candidates", 2),
    ("outputs?stratum=lang:en&candidate=alpha-m&meta.n=1", 4),
    ("plans", 1), ("rubric/versions", 1), ("members", 1),
])
def test_list_queries_are_bounded(populated, lead, lead_client, django_assert_max_num_queries,
                                  page_size, path, total):
    from studies.services import plan_create, rubric_update

    study = populated["items"][0].study
    rubric_update(study=study, criteria=[BINARY, ORDINAL], created_by=lead)
    plan_create(study=study, spec={"criteria": {"ok": {"metric": "pass_rate",
                                                       "threshold": 0.5}}}, created_by=lead)
    sep = "&" if "?" in path else "?"
    lead_client.get("/api/studies")  # the token's last_used_at touch happens on first use
    # token (1) + study (1) + role (1) + page (1) + criteria prefetch for rubric versions (1).
    with django_assert_max_num_queries(5):
        r = lead_client.get(f"/api/studies/alpha/{path}{sep}page_size={page_size}")
    assert r.status_code == 200
    assert len(r.json()["results"]) == min(page_size, total)


def test_output_detail_and_cross_study_ids(populated, lead_client, world_b):
    own = populated["candidates"][0].outputs.first()
    assert lead_client.get(f"/api/studies/alpha/outputs/{own.pk}").status_code == 200
    # An id from study B under study A's URL is not found.
    assert lead_client.get(f"/api/studies/alpha/outputs/{world_b.output.pk}").status_code == 404
    assert lead_client.get(f"/api/studies/alpha/items/{world_b.item.pk}").status_code == 404
    assert lead_client.get(
        f"/api/studies/alpha/candidates/{world_b.candidate.pk}").status_code == 404


# --- Plans ------------------------------------------------------------------------------------

def test_plan_endpoints_lock_409_and_new_version(study, lead, lead_client):
    lead_client.put("/api/studies/alpha/rubric", {"criteria": [BINARY, ORDINAL]}, format="json")
    spec = {"criteria": {"ok": {"metric": "pass_rate", "threshold": 0.9}}}
    r = lead_client.post("/api/studies/alpha/plans", {"spec": spec}, format="json")
    assert r.status_code == 201 and r.json()["version"] == 1
    r = lead_client.patch("/api/studies/alpha/plans/1",
                          {"spec": {"criteria": {"ok": {"metric": "pass_rate",
                                                        "threshold": 0.8}}}}, format="json")
    assert r.status_code == 200 and r.json()["spec"]["criteria"]["ok"]["threshold"] == 0.8
    r = lead_client.post("/api/studies/alpha/plans/1/lock")
    assert r.status_code == 200 and r.json()["is_locked"] and r.json()["locked_by"] == "lead"
    r = lead_client.patch("/api/studies/alpha/plans/1", {"notes": "late edit"}, format="json")
    assert r.status_code == 409 and "save it as a new version" in err(r)["message"]
    assert lead_client.post("/api/studies/alpha/plans/1/lock").status_code == 409
    r = lead_client.post("/api/studies/alpha/plans/1/new-version", {}, format="json")
    assert r.status_code == 201 and r.json()["version"] == 2 and not r.json()["is_locked"]
    assert r.json()["spec"]["criteria"]["ok"]["threshold"] == 0.8
    listed = lead_client.get("/api/studies/alpha/plans").json()["results"]
    assert [(p["version"], p["is_locked"]) for p in listed] == [(2, False), (1, True)]
    r = lead_client.post("/api/studies/alpha/plans",
                         {"spec": {"criteria": {"zzz": {"metric": "pass_rate",
                                                        "threshold": 0.9}}}}, format="json")
    assert r.status_code == 400
    assert err(r)["details"]["errors"][0]["path"] == "spec.criteria.zzz"


# --- Tokens -----------------------------------------------------------------------------------

def test_tokens_create_list_revoke(study, lead, client_for, api_client):
    api_client.force_authenticate(lead)
    r = api_client.post("/api/tokens", {"name": "ci", "study": "alpha", "can_write": True},
                        format="json")
    assert r.status_code == 201
    secret = r.json()["secret"]
    assert secret.startswith("rh_") and r.json()["study"] == "alpha"
    token_id = r.json()["id"]
    listed = api_client.get("/api/tokens").json()["results"]
    assert [t["id"] for t in listed] == [token_id] and "secret" not in listed[0]
    assert "secret" not in api_client.get(f"/api/tokens/{token_id}").json()
    assert ApiToken.objects.filter(key_hash__contains=secret).count() == 0

    scoped = client_for(lead, study=study)
    scoped.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert scoped.get("/api/studies/alpha").status_code == 200
    assert scoped.get("/api/tokens").status_code == 403  # scoped tokens do not manage tokens

    # A token for a study the user is not in is refused like any other unknown study.
    Study.objects.create(name="Other", slug="other", owner=UserFactory(username="o"))
    assert api_client.post("/api/tokens", {"name": "x", "study": "other"},
                           format="json").status_code == 404
    assert api_client.post("/api/tokens", {"name": ""}, format="json").status_code == 400

    assert api_client.delete(f"/api/tokens/{token_id}").json()["revoked_at"] is not None
    assert scoped.get("/api/studies/alpha").status_code == 401
    other = UserFactory(username="other-user")
    api_client.force_authenticate(other)
    assert api_client.delete(f"/api/tokens/{token_id}").status_code == 404


def test_read_only_account_token_lists_but_cannot_create(lead, client_for):
    c = client_for(lead, can_write=False)
    assert c.get("/api/tokens").status_code == 200
    assert c.post("/api/tokens", {"name": "x"}, format="json").status_code == 403


def test_rubric_rule_is_stored_versioned_and_refused_with_the_field(study, lead_client):
    url = "/api/studies/alpha/rubric"
    r = lead_client.put(url, {"criteria": [BINARY, ORDINAL]}, format="json")
    assert r.status_code == 201 and r.json()["aggregate"] == {"kind": "all"}
    bad = lead_client.put(url, {"criteria": [BINARY], "aggregate": {"kind": "weighted"}},
                          format="json")
    assert bad.status_code == 400
    assert [e["path"] for e in err(bad)["details"]["errors"]] == ["aggregate.pass_share"]
    odd = lead_client.put(url, {"criteria": [BINARY], "aggregate": {"kind": "most"}},
                          format="json")
    assert [e["path"] for e in err(odd)["details"]["errors"]] == ["aggregate.kind"]
    rule = {"kind": "weighted", "pass_share": 0.75}
    r = lead_client.put(url, {"criteria": [BINARY, ORDINAL], "aggregate": rule}, format="json")
    assert (r.status_code, r.json()["outcome"], r.json()["aggregate"]) == (200, "updated", rule)
    again = lead_client.put(url, {"criteria": [BINARY, ORDINAL], "aggregate": rule},
                            format="json")
    assert again.json()["outcome"] == "unchanged"
