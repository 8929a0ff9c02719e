"""The second outside probe's findings (issue 30 §3, §4, §5, §8), each as the probe sent it.

- Redis down: a bearer-token request answers 503 with Retry-After in the one error shape
  (the bad-token throttle's cache is unreachable), not a 500 traceback.
- A metadata filter hundreds of segments deep is a 400 naming the parameter, not a
  RecursionError 500, on the items and outputs lists, for a viewer.
- Agreement and calibration report parameters naming a judge version of another study, or of
  none, are a 400 naming the id (as the selection report's are).
- A CSV with bad UTF-8 says how many of its rows are invalid correctly.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from judges.models import Judge
from judges.services import judge_create, judge_version_for_config
from snapshots.models import ReportSnapshot
from studies.models import Item, Membership
from tests.factories import (
    CandidateFactory,
    ItemFactory,
    MembershipFactory,
    StudyFactory,
    UserFactory,
    api_token_create,
)

pytestmark = pytest.mark.django_db


def _error(response: Any) -> dict[str, Any]:
    body = json.loads(response.content)
    assert set(body) == {"error"} and {"code", "message", "details"} <= set(body["error"])
    return dict(body["error"])


# --- Redis down ----------------------------------------------------------------------------------


UNREACHABLE_REDIS = {"default": {
    "BACKEND": "django.core.cache.backends.redis.RedisCache",
    # Port 1 on the loopback: nothing listens, the connection is refused at once.
    "LOCATION": "redis://127.0.0.1:1/0",
    "KEY_PREFIX": "reviewhub-cache",
    "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
}}


@pytest.mark.parametrize("good_token", [True, False])
def test_with_redis_down_a_token_request_gets_503_with_retry_after(
        study: Any, lead: Any, settings: Any, good_token: bool) -> None:
    secret = api_token_create(user=lead) if good_token else "rh_not-a-real-token"
    settings.CACHES = UNREACHABLE_REDIS
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    response = client.get("/api/studies/alpha/items")
    assert response.status_code == 503, response.content[:500]
    assert int(response["Retry-After"]) > 0
    error = _error(response)
    assert error["code"] == "service_unavailable"
    assert "Traceback" not in response.content.decode()


def test_with_redis_down_session_pages_are_not_touched(study: Any, lead: Any,
                                                       settings: Any) -> None:
    # The throttle's cache is only read for token requests: signed-in pages still answer.
    settings.CACHES = UNREACHABLE_REDIS
    client = APIClient()
    client.force_login(lead)
    assert client.get("/api/studies/alpha/items").status_code == 200


# --- deep metadata filters -----------------------------------------------------------------------


@pytest.fixture
def viewer_client(study: Any, client_for: Any) -> APIClient:
    viewer = UserFactory(username="deep-viewer")
    MembershipFactory(study=study, user=viewer, role=Membership.Role.VIEWER)
    item = ItemFactory(study=study, external_id="d1", metadata={"a": {"a": 1}})
    CandidateFactory(study=study, name="m")
    assert item.pk
    return client_for(viewer, can_write=False)


@pytest.mark.parametrize("path,prefix", [
    ("/api/studies/alpha/items", "meta."),
    ("/api/studies/alpha/outputs", "meta."),
    ("/api/studies/alpha/outputs", "output_meta."),
])
def test_a_deep_metadata_filter_is_a_400_naming_the_parameter(
        viewer_client: APIClient, path: str, prefix: str) -> None:
    name = prefix + ".".join(["a"] * 250)
    response = viewer_client.get(path, {name: "1"})
    assert response.status_code == 400, response.content[:300]
    error = _error(response)
    assert error["code"] == "filter_too_deep"
    assert error["details"]["errors"][0]["path"] == name
    assert "16 levels" in error["message"]


def test_a_filter_at_the_depth_limit_still_works(viewer_client: APIClient) -> None:
    ok = viewer_client.get("/api/studies/alpha/items", {"meta.a.a": "1"})
    assert ok.status_code == 200 and [r["external_id"] for r in ok.json()["results"]] == ["d1"]
    deepest = viewer_client.get("/api/studies/alpha/items",
                                {"meta." + ".".join(["a"] * 16): "1"})
    assert deepest.status_code == 200 and deepest.json()["results"] == []


def test_a_deep_stratum_dimension_is_a_400(viewer_client: APIClient) -> None:
    response = viewer_client.get("/api/studies/alpha/items",
                                 {"stratum": ".".join(["d"] * 300) + ":x"})
    assert response.status_code == 400
    assert _error(response)["details"]["errors"][0]["path"] == "stratum"


# --- report parameters naming judge versions of other studies ------------------------------------


@pytest.fixture
def foreign_version(db: Any) -> int:
    other_owner = UserFactory(username="other-owner")
    other = StudyFactory(owner=other_owner, slug="other-study")
    judge = judge_create(study=other, name="other-check", kind=Judge.Kind.PROGRAMMATIC)
    return int(judge_version_for_config(judge=judge, config={"check": "length", "max": 10}).pk)


@pytest.mark.parametrize("kind", ["agreement", "calibration"])
@pytest.mark.parametrize("which", ["another study's", "no such"])
def test_report_judges_of_another_study_or_none_are_a_400_naming_the_id(
        lead_client: APIClient, study: Any, foreign_version: int, kind: str,
        which: str) -> None:
    own_judge = judge_create(study=study, name="own-check", kind=Judge.Kind.PROGRAMMATIC)
    own = judge_version_for_config(judge=own_judge, config={"check": "length", "max": 10})
    bad = foreign_version if which == "another study's" else 987654321
    response = lead_client.post(f"/api/studies/alpha/reports/{kind}/",
                                {"params": {"judges": [own.pk, bad]}}, format="json")
    assert response.status_code == 400, response.content[:300]
    error = _error(response)
    assert [e["path"] for e in error["details"]["errors"]] == ["params.judges[1]"]
    assert str(bad) in error["details"]["errors"][0]["message"]
    assert str(bad) in error["message"]
    assert not ReportSnapshot.objects.filter(study=study).exists()


@pytest.mark.parametrize("kind", ["agreement", "calibration"])
def test_report_judges_of_this_study_are_accepted(lead_client: APIClient, study: Any,
                                                  kind: str) -> None:
    own_judge = judge_create(study=study, name="own-check", kind=Judge.Kind.PROGRAMMATIC)
    own = judge_version_for_config(judge=own_judge, config={"check": "length", "max": 10})
    response = lead_client.post(f"/api/studies/alpha/reports/{kind}/",
                                {"params": {"judges": [own.pk]}}, format="json")
    assert response.status_code in (201, 202), response.content[:300]


# --- bad encoding in a CSV -----------------------------------------------------------------------


def test_a_csv_with_bad_utf8_counts_its_rows_right(lead_client: APIClient, study: Any) -> None:
    body = b"external_id,input\nx1,caf\xe9\n"
    response = lead_client.post("/api/studies/alpha/items/bulk", body, content_type="text/csv")
    assert response.status_code == 400
    error = _error(response)
    assert error["message"].startswith("1 of 1 rows are invalid"), error["message"]
    assert error["details"]["rows_with_errors"] == 1
    assert "invalid UTF-8" in error["details"]["errors"][0]["message"]
    assert "no rows" not in json.dumps(error)
    assert not Item.objects.filter(study=study).exists()


def test_a_csv_with_two_bad_rows_of_three(lead_client: APIClient, study: Any) -> None:
    body = b"external_id,input\nx1,caf\xe9\nx2,fine\nx3,\xff\n"
    error = _error(lead_client.post("/api/studies/alpha/items/bulk", body,
                                    content_type="text/csv"))
    assert error["message"].startswith("2 of 3 rows are invalid"), error["message"]


def test_a_file_level_error_is_not_counted_as_a_row(lead_client: APIClient, study: Any) -> None:
    error = _error(lead_client.post("/api/studies/alpha/items/bulk", b"external_id,input\n",
                                    content_type="text/csv"))
    assert error["message"].startswith("The file was rejected"), error["message"]


# --- password spraying ---------------------------------------------------------------------------


def _sign_in(client: Any, username: str, password: str, **extra: Any) -> Any:
    return client.post("/accounts/login/", {"username": username, "password": password},
                       **extra)


@pytest.fixture
def fast_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def test_one_wrong_password_for_each_of_40_usernames_meets_429(settings: Any,
                                                               fast_hashing: None) -> None:
    from django.test import Client

    real = UserFactory(username="real-user", password="pw-for-tests-123")
    assert real.pk
    attacker = Client(REMOTE_ADDR="203.0.113.50")
    statuses = [_sign_in(attacker, f"user{k}", "Winter2026!").status_code for k in range(40)]
    limit = settings.REVIEWHUB_LOGIN_ADDRESS_FAILURE_LIMIT
    assert statuses[:limit] == [200] * limit
    assert set(statuses[limit:]) == {429}, statuses
    # The right password of a real account from that address is refused too, with Retry-After.
    locked = _sign_in(attacker, "real-user", "pw-for-tests-123")
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    # Another address is not affected.
    assert _sign_in(Client(REMOTE_ADDR="198.51.100.8"), "real-user",
                    "pw-for-tests-123").status_code == 302


def test_the_address_limit_honours_the_trusted_proxy_setting(settings: Any,
                                                             fast_hashing: None) -> None:
    from django.test import Client

    settings.REVIEWHUB_LOGIN_ADDRESS_FAILURE_LIMIT = 5
    UserFactory(username="real-user", password="pw-for-tests-123")
    proxy = Client(REMOTE_ADDR="10.0.0.2")
    # No trusted proxy: X-Forwarded-For is the client's word and does not pick a new key.
    for k in range(5):
        _sign_in(proxy, f"u{k}", "x", HTTP_X_FORWARDED_FOR=f"192.0.2.{k}")
    assert _sign_in(proxy, "real-user", "pw-for-tests-123",
                    HTTP_X_FORWARDED_FOR="192.0.2.99").status_code == 429
    # One trusted proxy: each client behind it is counted on its own.
    settings.REVIEWHUB_TRUSTED_PROXY_COUNT = 1
    assert _sign_in(proxy, "real-user", "pw-for-tests-123",
                    HTTP_X_FORWARDED_FOR="192.0.2.99").status_code == 302
    for k in range(5):
        _sign_in(Client(REMOTE_ADDR="10.0.0.2"), f"v{k}", "x",
                 HTTP_X_FORWARDED_FOR="192.0.2.7")
    assert _sign_in(Client(REMOTE_ADDR="10.0.0.2"), "real-user", "pw-for-tests-123",
                    HTTP_X_FORWARDED_FOR="192.0.2.7").status_code == 429
