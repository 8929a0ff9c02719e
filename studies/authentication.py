"""Bearer-token authentication for API clients (`Authorization: Bearer rh_…`)."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from .models import ApiToken

TOKEN_PREFIX = "rh_"


def token_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def token_generate() -> tuple[str, str, str]:
    """Return (secret, prefix, hash). Only the hash and prefix are stored."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return secret, secret[:10], token_hash(secret)


class ApiTokenAuthentication(authentication.BaseAuthentication):
    keywords = ("bearer", "token")

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        token = (
            ApiToken.objects.select_related("user")
            .filter(key_hash=token_hash(header[1]), revoked_at__isnull=True)
            .first()
        )
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
