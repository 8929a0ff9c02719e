"""Bearer-token authentication for API clients (`Authorization: Bearer rh_…`)."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from reviewhub.rawrows import RowShape, fetch_one

from .models import ApiToken

TOKEN_PREFIX = "rh_"


def token_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def token_generate() -> tuple[str, str, str]:
    """Return (secret, prefix, hash). Only the hash and prefix are stored."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return secret, secret[:10], token_hash(secret)


_shapes: tuple[RowShape[ApiToken], RowShape[Any]] | None = None


def _live_token(key_hash: str) -> ApiToken | None:
    """The unrevoked token with this hash and its user, in one precompiled query.

    Every API request runs this; as a queryset it cost more CPU to compile than to execute
    (see reviewhub/rawrows.py).
    """
    global _shapes
    if _shapes is None:  # built on first use: AUTH_USER_MODEL resolves once the apps are ready
        _shapes = (RowShape(ApiToken, "t"), RowShape(get_user_model(), "u"))
    tokens, users = _shapes
    user_model = users.model
    row = fetch_one(
        f"SELECT {tokens.select}, {users.select} FROM {ApiToken._meta.db_table} t "
        f"JOIN {user_model._meta.db_table} u ON u.{user_model._meta.pk.column} = t.user_id "
        "WHERE t.key_hash = %s AND t.revoked_at IS NULL",
        [key_hash],
    )
    if row is None:
        return None
    token = tokens.load(row)
    token.user = users.load(row, tokens.width)
    return token


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keywords = ("bearer", "token")

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        token = _live_token(token_hash(header[1]))
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        now = timezone.now()
        # Touch last_used_at at most once a minute: a write per request would serialise
        # concurrent clients on the token row.
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return "Bearer"
