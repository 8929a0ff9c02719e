"""Invitations need the invited account's acceptance, and the members page (issue 30 §7,
issue 26 §8).

- Inviting an existing account creates an invitation, not a membership; the answer (API and
  page) is the same whether or not the name exists; a superuser is no exception.
- The invited account lists its pending invitations (API and page) and accepts or declines.
- Staff add at once; the studies API no longer adds a non-member.
- Members page: "Reset" only where the reset would be allowed; a lead changes roles and removes
  members (page and API), never the last lead.
- An account whose password came from a one-time password must change it at first sign-in.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from annotations import services
from annotations.models import Invitation
from reviewhub.errors import Conflict
from studies.models import Membership, Study
from tests.factories import MembershipFactory, StudyFactory, UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "pw-for-tests-123"  # tests.factories.UserFactory's
URL = "/api/studies/alpha"
PAGE = "/studies/alpha/annotation/members/"


@pytest.fixture(autouse=True)
def fast_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _page(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _token_for(user: Any, client_for: Any) -> APIClient:
    return client_for(user)


# --- the invitation answer tells nothing ---------------------------------------------------------


def test_inviting_an_existing_name_and_a_missing_one_answer_alike(
        study: Study, lead_client: APIClient) -> None:
    UserFactory(username="exists", email="secret@corp.example")
    one = lead_client.post(f"{URL}/annotators/invite", {"username": "exists"}, format="json")
    two = lead_client.post(f"{URL}/annotators/invite", {"username": "nobody"}, format="json")
    assert one.status_code == two.status_code == 201
    body_one, body_two = one.json(), two.json()
    assert body_one.pop("username") == "exists" and body_two.pop("username") == "nobody"
    assert body_one == body_two == {"status": "invited", "role": "annotator", "user_id": None,
                                    "email": "", "one_time_password": None}
    assert not Membership.objects.filter(study=study, user__username="exists").exists()


def test_the_members_page_answers_alike_too(study: Study, lead: Any) -> None:
    UserFactory(username="exists")
    page = _page(lead)
    texts = []
    for name in ("exists", "nobody"):
        response = page.post(PAGE, {"action": "invite", "username": name, "email": "",
                                    "role": "annotator"}, follow=True)
        assert response.status_code == 200
        text = re.sub(r"\b(exists|nobody)\b", "NAME", response.content.decode())
        # The pending list grows by one each time; compare the message only.
        message = re.search(r"Invitation recorded for NAME[^<]*", text)
        assert message is not None
        texts.append(message.group(0))
    assert texts[0] == texts[1]


def test_a_superuser_is_not_added_silently(study: Study, lead: Any, lead_client: APIClient,
                                           client_for: Any) -> None:
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    invited = lead_client.post(f"{URL}/annotators/invite", {"username": "root"}, format="json")
    assert invited.json()["status"] == "invited"
    assert not Membership.objects.filter(study=study, user=root).exists()
    # Nor through the studies API, which answers as for a name that does not exist.
    direct = lead_client.post(f"{URL}/members", {"username": "root", "role": "lead"},
                              format="json")
    ghost = lead_client.post(f"{URL}/members", {"username": "ghost", "role": "lead"},
                             format="json")
    assert direct.status_code == ghost.status_code == 400
    assert direct.json()["error"]["details"] == ghost.json()["error"]["details"]
    assert not Membership.objects.filter(study=study, user=root).exists()
    # The superuser sees the invitation and decides.
    mine = client_for(root).get("/api/invitations")
    assert [(i["study"], i["role"]) for i in mine.json()] == [("alpha", "annotator")]


def test_staff_add_an_existing_account_at_once(study: Study) -> None:
    staff = UserFactory(username="ops", is_staff=True, is_superuser=True)
    person = UserFactory(username="person")
    result = services.annotator_invite(study=study, username="person", email="",
                                       role="viewer", invited_by=staff)
    assert result.status == "added"
    assert Membership.objects.get(study=study, user=person).role == "viewer"


# --- the invited account answers -----------------------------------------------------------------


def test_the_invited_account_accepts_over_the_api(study: Study, lead_client: APIClient,
                                                  client_for: Any) -> None:
    person = UserFactory(username="person")
    lead_client.post(f"{URL}/annotators/invite", {"username": "person", "role": "viewer"},
                     format="json")
    api = client_for(person)
    listed = api.get("/api/invitations").json()
    assert len(listed) == 1 and listed[0]["study_name"] == study.name
    accepted = api.post(f"/api/invitations/{listed[0]['id']}/accept")
    assert accepted.status_code == 200 and accepted.json()["status"] == "accepted"
    assert Membership.objects.get(study=study, user=person).role == "viewer"
    assert api.get("/api/invitations").json() == []
    # Answered once: a second answer finds nothing.
    assert api.post(f"/api/invitations/{listed[0]['id']}/decline").status_code == 404


def test_nobody_else_can_answer_an_invitation(study: Study, lead: Any, client_for: Any) -> None:
    UserFactory(username="person")
    intruder = UserFactory(username="intruder")
    services.annotator_invite(study=study, username="person", email="", role="lead",
                              invited_by=lead)
    invitation = Invitation.objects.get(study=study, username="person")
    assert client_for(intruder).post(
        f"/api/invitations/{invitation.pk}/accept").status_code == 404
    assert client_for(lead).post(f"/api/invitations/{invitation.pk}/accept").status_code == 404
    assert not Membership.objects.filter(study=study, user=intruder).exists()
    # A read-only token of the invited account cannot answer either.
    person = get_user_model().objects.get(username="person")
    read_only = client_for(person, can_write=False)
    assert read_only.post(f"/api/invitations/{invitation.pk}/accept").status_code == 403


def test_the_invited_account_declines_on_its_page(study: Study, lead: Any) -> None:
    person = UserFactory(username="person")
    services.annotator_invite(study=study, username="person", email="", role="annotator",
                              invited_by=lead)
    page = _page(person)
    html = page.get("/invitations/").content.decode()
    assert study.name in html and "Accept the invitation" in html
    invitation = Invitation.objects.get(study=study, username="person")
    response = page.post("/invitations/", {"invitation_id": invitation.pk,
                                           "decision": "decline"}, follow=True)
    assert response.status_code == 200 and "Invitation declined" in response.content.decode()
    assert not Membership.objects.filter(study=study, user=person).exists()
    invitation.refresh_from_db()
    assert invitation.status == "declined"


def test_the_invited_account_accepts_on_its_page(study: Study, lead: Any) -> None:
    person = UserFactory(username="person")
    services.annotator_invite(study=study, username="person", email="", role="annotator",
                              invited_by=lead)
    invitation = Invitation.objects.get(study=study, username="person")
    page = _page(person)
    page.post("/invitations/", {"invitation_id": invitation.pk, "decision": "accept"})
    assert Membership.objects.get(study=study, user=person).role == "annotator"
    assert "No invitations are waiting" in page.get("/invitations/").content.decode()


def test_a_lead_withdraws_an_invitation(study: Study, lead: Any) -> None:
    services.annotator_invite(study=study, username="person", email="", role="annotator",
                              invited_by=lead)
    invitation = Invitation.objects.get(study=study, username="person")
    page = _page(lead)
    assert "Withdraw the invitation of person" in page.get(PAGE).content.decode()
    page.post(PAGE, {"action": "revoke", "invitation_id": invitation.pk})
    assert not Invitation.objects.filter(pk=invitation.pk).exists()


# --- the members page ----------------------------------------------------------------------------


def _created_here(study: Study, lead: Any) -> Any:
    return services.annotator_invite(study=study, username="", email="new@example.test",
                                     role="annotator", invited_by=lead).user


def test_reset_is_offered_only_where_it_would_work(study: Study, lead: Any) -> None:
    mine = _created_here(study, lead)
    outsider = UserFactory(username="outsider")
    MembershipFactory(study=study, user=outsider, role=Membership.Role.ANNOTATOR)
    grown = _created_here(study, lead)
    other = StudyFactory(owner=UserFactory(username="beta-owner"), slug="beta")
    MembershipFactory(study=other, user=grown, role=Membership.Role.VIEWER)
    colead = UserFactory(username="colead")
    MembershipFactory(study=study, user=colead, role=Membership.Role.LEAD)
    html = _page(lead).get(PAGE).content.decode()
    assert f"Reset the password of {mine.username}" in html
    for name in ("outsider", grown.username, "colead", lead.username):
        assert f"Reset the password of {name}" not in html, name


def test_a_lead_changes_a_role_and_removes_a_member_on_the_page(study: Study,
                                                                 lead: Any) -> None:
    person = UserFactory(username="person")
    MembershipFactory(study=study, user=person, role=Membership.Role.ANNOTATOR)
    page = _page(lead)
    html = page.get(PAGE).content.decode()
    assert "Change the role of person" in html and "Remove person from the study" in html
    assert f"Remove {lead.username} from the study" not in html  # the owner
    assert page.post(PAGE, {"action": "role", "user_id": person.pk,
                            "role": "viewer"}).status_code == 200
    assert Membership.objects.get(study=study, user=person).role == "viewer"
    bad = page.post(PAGE, {"action": "role", "user_id": person.pk, "role": "boss"})
    assert bad.status_code == 400
    assert page.post(PAGE, {"action": "remove", "user_id": person.pk}).status_code == 200
    assert not Membership.objects.filter(study=study, user=person).exists()
    # A member's annotator cannot do either.
    annotator = UserFactory(username="ann")
    MembershipFactory(study=study, user=annotator, role=Membership.Role.ANNOTATOR)
    assert _page(annotator).post(PAGE, {"action": "remove",
                                        "user_id": lead.pk}).status_code == 404


def _study_without_owner_membership() -> tuple[Study, Any]:
    """A study whose owner is not a member (its owner left it to a lead)."""
    owner = UserFactory(username="gone-owner")
    study = StudyFactory(owner=owner, slug="orphan")
    only_lead = UserFactory(username="only-lead")
    MembershipFactory(study=study, user=only_lead, role=Membership.Role.LEAD)
    return study, only_lead


def test_the_last_lead_can_be_neither_removed_nor_demoted(client_for: Any) -> None:
    study, only_lead = _study_without_owner_membership()
    with pytest.raises(Conflict):
        services.member_remove(study=study, user=only_lead, by=only_lead)
    with pytest.raises(Conflict):
        services.member_role_change(study=study, user=only_lead, role="viewer", by=only_lead)
    api = client_for(only_lead)
    removed = api.delete(f"/api/studies/orphan/members/{only_lead.pk}")
    assert removed.status_code == 409 and removed.json()["error"]["details"] == {
        "reason": "last_lead"}
    demoted = api.patch(f"/api/studies/orphan/members/{only_lead.pk}", {"role": "viewer"},
                        format="json")
    assert demoted.status_code == 409
    page = _page(only_lead)
    refused = page.post("/studies/orphan/annotation/members/",
                        {"action": "remove", "user_id": only_lead.pk})
    assert refused.status_code == 400 and "last lead" in refused.content.decode()
    assert Membership.objects.filter(study=study, user=only_lead, role="lead").exists()
    # With a second lead, the first may step down.
    second = UserFactory(username="second-lead")
    MembershipFactory(study=study, user=second, role=Membership.Role.LEAD)
    services.member_role_change(study=study, user=only_lead, role="viewer", by=only_lead)
    assert Membership.objects.get(study=study, user=only_lead).role == "viewer"


# --- one-time passwords must be changed ----------------------------------------------------------


def _change_password(client: Client, old: str) -> Any:
    return client.post("/accounts/password_change/", {
        "old_password": old, "new_password1": "a-Brand-new-pass-2026",
        "new_password2": "a-Brand-new-pass-2026"})


def test_a_new_account_must_change_its_one_time_password_at_first_sign_in(
        study: Study, lead: Any) -> None:
    result = services.annotator_invite(study=study, username="", email="new@example.test",
                                       role="annotator", invited_by=lead)
    assert result.one_time_password
    client = Client()
    assert client.login(username=result.username, password=result.one_time_password)
    home = client.get("/")
    assert home.status_code == 302 and home["Location"] == "/accounts/password_change/"
    assert client.get("/studies/alpha/grade/")["Location"] == "/accounts/password_change/"
    api = client.get("/api/studies/alpha")
    assert api.status_code == 403
    assert api.json()["error"]["code"] == "password_change_required"
    assert client.get("/accounts/password_change/").status_code == 200
    changed = _change_password(client, result.one_time_password)
    assert changed.status_code == 302
    assert client.get("/").status_code == 200
    assert client.get("/api/studies/alpha").status_code == 200


def test_a_reset_password_must_be_changed_too(study: Study, lead: Any) -> None:
    user = _created_here(study, lead)
    client = Client()
    first = services.annotator_password_reset(study=study, user=user, by=lead)
    assert client.login(username=user.username, password=first)
    _change_password(client, first)
    assert client.get("/").status_code == 200
    second = services.annotator_password_reset(study=study, user=user, by=lead)
    again = Client()
    assert again.login(username=user.username, password=second)
    assert again.get("/").status_code == 302


def test_an_account_that_chose_its_password_is_not_asked(study: Study, lead: Any) -> None:
    client = Client()
    assert client.login(username=lead.username, password=PASSWORD)
    assert client.get("/").status_code == 200
