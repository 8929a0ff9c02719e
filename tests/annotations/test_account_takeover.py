"""A lead cannot take over an account through invite + password reset (issue 11, item 1).

The attack: the lead of study A invites an account that belongs elsewhere (by its username),
then asks for a new one-time password for it, signs in as that person and reads or grades
their other studies. An existing account joins only by accepting the invitation (issue 30 §7);
even then a lead may reset only an account that their study's invitation created and that has
no access beyond the study; the invite never hands out credentials or the e-mail address of an
existing account.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from annotations import services
from studies.models import Membership, Study
from tests.factories import MembershipFactory, StudyFactory, UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "pw-for-tests-123"  # tests.factories.UserFactory's
SECRET_EMAIL = "private.person@corp.example"
URL = "/api/studies/alpha"


def _other_study(slug: str = "beta") -> Study:
    lead = UserFactory(username=f"{slug}-lead")
    study = StudyFactory(owner=lead, slug=slug)
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    return study


def _victim(role_elsewhere: str | None = None, **flags: bool) -> Any:
    user = UserFactory(username="victim", email=SECRET_EMAIL, **flags)
    if role_elsewhere is not None:
        MembershipFactory(study=_other_study(), user=user, role=role_elsewhere)
    return user


def _two_studies() -> Any:
    user = _victim(Membership.Role.ANNOTATOR)
    MembershipFactory(study=_other_study("gamma"), user=user, role=Membership.Role.VIEWER)
    return user


def _orphan() -> Any:
    # Made by an admin (createsuperuser, the Django admin, an import): no study created it.
    return _victim()


VICTIMS: dict[str, Callable[[], Any]] = {
    "viewer-of-another-study": lambda: _victim(Membership.Role.VIEWER),
    "annotator-of-another-study": lambda: _victim(Membership.Role.ANNOTATOR),
    "lead-of-another-study": lambda: _victim(Membership.Role.LEAD),
    "staff": lambda: _victim(is_staff=True),
    "superuser": lambda: _victim(is_staff=True, is_superuser=True),
    "member-of-two-other-studies": _two_studies,
    "account-no-study-created": _orphan,
}


def _login_works(username: str, password: str) -> bool:
    return Client().login(username=username, password=password)


def _accept(user: Any, study: Study) -> None:
    """The invited account accepts its pending invitation to `study`."""
    invitation = next(i for i in services.invitations_pending_for(user=user)
                      if i.study_id == study.pk)
    services.invitation_accept(invitation_id=invitation.pk, user=user)


@pytest.mark.parametrize("make_victim", VICTIMS.values(), ids=VICTIMS.keys())
def test_invite_then_reset_never_hands_over_an_existing_account(
    study: Study, lead_client: APIClient, make_victim: Callable[[], Any]
) -> None:
    victim = make_victim()
    invited = lead_client.post(
        f"{URL}/annotators/invite", {"username": "victim", "role": "annotator"}, format="json"
    )
    # An invitation waits for the account's answer: no membership, no credentials, and
    # nothing of the account beyond what the lead typed.
    assert invited.status_code == 201, invited.content
    assert not Membership.objects.filter(study=study, user=victim).exists()
    assert invited.json() == {
        "status": "invited",
        "user_id": None,
        "username": "victim",
        "email": "",
        "role": "annotator",
        "one_time_password": None,
    }
    assert SECRET_EMAIL not in invited.content.decode()
    # Even once the account has accepted, its password is not the lead's to reset.
    _accept(victim, study)
    assert Membership.objects.filter(study=study, user=victim).exists()

    reset = lead_client.post(f"{URL}/annotators/{victim.pk}/reset-password")
    assert reset.status_code == 403, reset.content
    error = reset.json()["error"]
    assert error["code"] == "password_reset_refused"
    assert error["details"] == {"reason": "not_created_here"}
    assert "admin" in error["message"]
    assert "one_time_password" not in reset.content.decode()
    victim.refresh_from_db()
    assert victim.check_password(PASSWORD)
    assert _login_works("victim", PASSWORD)


def test_the_members_page_refuses_the_same_resets(study: Study, lead: Any) -> None:
    """The HTML members page hands out passwords through the same service."""
    victim = _victim(Membership.Role.ANNOTATOR)
    services.annotator_invite(
        study=study, username="victim", email="", role="annotator", invited_by=lead
    )
    _accept(victim, study)
    page = Client()
    page.force_login(lead)
    listed = page.get("/studies/alpha/annotation/members/").content.decode()
    assert "Reset the password of victim" not in listed  # not offered where it would fail
    refused = page.post(
        "/studies/alpha/annotation/members/", {"action": "reset", "user_id": victim.pk}
    )
    assert 'id="one-time-password"' not in refused.content.decode()
    assert "admin" in refused.content.decode()
    victim.refresh_from_db()
    assert victim.check_password(PASSWORD)


def test_the_members_page_shows_no_address_of_an_account_from_elsewhere(
    study: Study, lead: Any
) -> None:
    """Inviting an existing account must not reveal its e-mail on the page either."""
    victim = _victim(Membership.Role.ANNOTATOR)
    services.annotator_invite(
        study=study, username="victim", email="", role="annotator", invited_by=lead
    )
    _accept(victim, study)
    services.annotator_invite(
        study=study, username="", email="fresh@example.test", role="annotator",
        invited_by=lead,
    )
    page = Client()
    page.force_login(lead)
    html = page.get("/studies/alpha/annotation/members/").content.decode()
    assert "victim" in html and SECRET_EMAIL not in html
    assert "fresh@example.test" in html  # the address the lead typed for a new account


def test_a_new_account_invited_here_can_be_reset_and_the_new_password_signs_in(
    study: Study, lead_client: APIClient
) -> None:
    invited = lead_client.post(
        f"{URL}/annotators/invite",
        {"email": "newbie@example.test", "role": "annotator"},
        format="json",
    )
    assert invited.status_code == 201
    first = invited.json()["one_time_password"]
    assert invited.json()["email"] == "newbie@example.test"  # what the lead typed
    assert invited.json()["status"] == "created"
    name = invited.json()["username"]
    assert name.startswith("newbie-")
    newbie = get_user_model().objects.get(username=name)
    assert Membership.objects.get(study=study, user=newbie).created_account
    for role in ("viewer", "annotator"):  # a role change here keeps the account resettable
        again = lead_client.post(
            f"{URL}/annotators/invite", {"username": name, "role": role}, format="json"
        )
        assert again.status_code == 201 and again.json()["one_time_password"] is None
        assert again.json()["status"] == "added"
    reset = lead_client.post(f"{URL}/annotators/{newbie.pk}/reset-password")
    assert reset.status_code == 200, reset.content
    second = reset.json()["one_time_password"]
    assert second and second != first
    assert _login_works(name, second)
    assert not _login_works(name, first)


def _created_here(lead_client: APIClient) -> Any:
    r = lead_client.post(
        f"{URL}/annotators/invite", {"email": "grown@example.test", "role": "annotator"},
        format="json"
    )
    assert r.status_code == 201 and r.json()["one_time_password"]
    return get_user_model().objects.get(username=r.json()["username"])


def _joined_another_study(user: Any, study: Study) -> None:
    MembershipFactory(study=_other_study(), user=user, role=Membership.Role.VIEWER)


GROWN: dict[str, Callable[[Any, Study], None]] = {
    "joined-another-study": _joined_another_study,
    "made-lead-here": lambda u, s: Membership.objects.filter(study=s, user=u).update(
        role=Membership.Role.LEAD
    ),
    "made-staff": lambda u, s: get_user_model().objects.filter(pk=u.pk).update(is_staff=True),
    "made-superuser": lambda u, s: get_user_model()
    .objects.filter(pk=u.pk)
    .update(is_superuser=True),
    "owns-a-study": lambda u, s: StudyFactory(owner=u, slug="own"),
}


@pytest.mark.parametrize("grow", GROWN.values(), ids=GROWN.keys())
def test_an_account_created_here_that_gained_wider_access_is_refused(
    study: Study, lead_client: APIClient, grow: Callable[[Any, Study], None]
) -> None:
    user = _created_here(lead_client)
    grow(user, study)
    reset = lead_client.post(f"{URL}/annotators/{user.pk}/reset-password")
    assert reset.status_code == 403, reset.content
    assert reset.json()["error"]["code"] == "password_reset_refused"
    assert reset.json()["error"]["details"] == {"reason": "wider_access"}


def test_the_other_study_cannot_reset_an_account_this_study_created(
    study: Study, lead_client: APIClient, client_for: Callable[..., APIClient]
) -> None:
    user = _created_here(lead_client)
    other = _other_study()
    other_lead = client_for(other.owner)
    assert other_lead.post(
        "/api/studies/beta/annotators/invite", {"username": user.username, "role": "annotator"},
        format="json"
    ).status_code == 201
    _accept(user, other)
    reset = other_lead.post(f"/api/studies/beta/annotators/{user.pk}/reset-password")
    assert reset.status_code == 403
    assert reset.json()["error"]["details"] == {"reason": "not_created_here"}
    # Joined by accepting (not an invitation that created the account): no flag.
    assert not Membership.objects.get(study=other, user=user).created_account


def test_removed_and_added_again_is_no_longer_created_here(
    study: Study, lead_client: APIClient
) -> None:
    user = _created_here(lead_client)
    assert lead_client.delete(f"{URL}/members/{user.pk}").status_code == 204
    again = lead_client.post(
        f"{URL}/annotators/invite", {"username": user.username, "role": "annotator"},
        format="json"
    )
    assert again.status_code == 201 and again.json()["one_time_password"] is None
    _accept(user, study)
    reset = lead_client.post(f"{URL}/annotators/{user.pk}/reset-password")
    assert reset.status_code == 403
    assert reset.json()["error"]["details"] == {"reason": "not_created_here"}


def test_an_admin_may_still_reset_any_member(
    study: Study, lead: Any, client_for: Callable[..., APIClient]
) -> None:
    victim = _victim(Membership.Role.LEAD)
    MembershipFactory(study=study, user=victim, role=Membership.Role.ANNOTATOR)
    admin = get_user_model().objects.create_superuser("root", "root@example.test", "pw-123456!")
    reset = client_for(admin).post(f"{URL}/annotators/{victim.pk}/reset-password")
    assert reset.status_code == 200
    assert _login_works("victim", reset.json()["one_time_password"])


def test_inviting_by_email_never_finds_an_existing_account(
    study: Study, lead_client: APIClient
) -> None:
    """An address is not looked up: that would tell a lead which addresses have accounts and
    let them add (and see the username of) whoever owns one."""
    victim = _victim(Membership.Role.ANNOTATOR)
    r = lead_client.post(
        f"{URL}/annotators/invite", {"email": SECRET_EMAIL, "role": "annotator"}, format="json"
    )
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["user_id"] != victim.pk and body["username"].startswith("private.person-")
    assert body["one_time_password"]  # a new account, exactly as for an unknown address
    assert not Membership.objects.filter(study=study, user=victim).exists()
    # A local part that is someone's username: still a new account with a suffixed name, as
    # for any address (always suffixed, so the name given back tells nothing).
    taken = lead_client.post(
        f"{URL}/annotators/invite", {"email": "victim@elsewhere.example"}, format="json"
    )
    assert taken.status_code == 201
    assert taken.json()["username"].startswith("victim-")
    assert SECRET_EMAIL not in taken.content.decode()
    assert not Membership.objects.filter(study=study, user=victim).exists()


def test_a_lead_of_another_study_or_an_annotator_here_cannot_reset_at_all(
    study: Study, lead_client: APIClient, client_for: Callable[..., APIClient]
) -> None:
    user = _created_here(lead_client)
    before = user.password
    annotator = UserFactory(username="plain-annotator")
    MembershipFactory(study=study, user=annotator, role=Membership.Role.ANNOTATOR)
    assert (
        client_for(annotator).post(f"{URL}/annotators/{user.pk}/reset-password").status_code
        == 403
    )
    other = _other_study()
    # Not a member of alpha: the study does not exist for them.
    assert (
        client_for(other.owner).post(f"{URL}/annotators/{user.pk}/reset-password").status_code
        == 404
    )
    user.refresh_from_db()
    assert user.password == before  # untouched: still the invite's password
