"""Shared fixtures. Backend-specific tests skip with a reason when the backend is absent."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from studies.models import Membership, Study

from .factories import MembershipFactory, StudyFactory, UserFactory, api_token_create


def _is_postgres() -> bool:
    return connection.vendor == "postgresql"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    require_pg = os.environ.get("REVIEWHUB_REQUIRE_SERVICES") == "1"
    for item in items:
        if "postgres" in item.keywords and not _is_postgres():
            if require_pg:
                raise pytest.UsageError("PostgreSQL required (REVIEWHUB_REQUIRE_SERVICES=1)")
            item.add_marker(pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL"))


@pytest.fixture
def redis_url() -> str:
    """A reachable Redis URL, or skip (fail under REVIEWHUB_REQUIRE_SERVICES=1)."""
    url = os.environ.get("REDIS_URL") or os.environ.get("CELERY_BROKER_URL", "")
    if not url.startswith("redis://"):
        if os.environ.get("REVIEWHUB_REQUIRE_SERVICES") == "1":
            pytest.fail("Redis required but REDIS_URL/CELERY_BROKER_URL is not a redis:// URL")
        pytest.skip("needs Redis: set REDIS_URL or CELERY_BROKER_URL to a redis:// URL")
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.RedisError as exc:
        if os.environ.get("REVIEWHUB_REQUIRE_SERVICES") == "1":
            pytest.fail(f"Redis required but not answering at {url}: {exc}")
        pytest.skip(f"Redis not answering at {url}")
    return url


@pytest.fixture
def data_dir() -> Path:
    """The shared public data folder (`$REVIEWHUB_DATA_DIR`), or skip with a reason."""
    value = os.environ.get("REVIEWHUB_DATA_DIR")
    if not value or not Path(value).is_dir():
        if os.environ.get("CI"):
            pytest.fail("REVIEWHUB_DATA_DIR must point at ../shared/data in CI")
        pytest.skip("REVIEWHUB_DATA_DIR is not set to the shared data folder")
    return Path(value)


@pytest.fixture
def user_factory() -> type[UserFactory]:
    return UserFactory


@pytest.fixture
def lead(db: Any) -> Any:
    return UserFactory(username="lead")


@pytest.fixture
def study(db: Any, lead: Any) -> Study:
    study = StudyFactory(owner=lead, slug="alpha", name="Alpha study")
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    return study


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


@pytest.fixture
def lead_client(study: Study, lead: Any) -> APIClient:
    """An API client authenticated with a read-write token for the lead's whole account."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=lead)}")
    return client


@pytest.fixture
def client_for() -> Callable[..., APIClient]:
    """Make an API client with a token: client_for(user, study=None, can_write=True)."""

    def make(user: Any, study: Study | None = None, can_write: bool = True) -> APIClient:
        client = APIClient()
        secret = api_token_create(user=user, study=study, can_write=can_write)
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
        return client

    return make


@pytest.fixture(autouse=True)
def throttle_counters_reset() -> None:
    """Every test starts with no bad-token counts (kept in the cache, which outlives a test).

    Sign-in lockouts live in the database (django-axes) and go with each test's transaction.
    With Redis as the cache, only ReviewHub's own keys are removed: the same database number
    also holds the provider rate-limit counters of other tests.
    """
    from django.core.cache import caches
    from django.core.cache.backends.redis import RedisCache

    backend = caches["default"]
    if isinstance(backend, RedisCache):
        client = backend._cache.get_client(None, write=True)
        keys = list(client.scan_iter(match=f"{backend.key_prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    else:
        backend.clear()
