"""API tokens: created (the secret shown once) and revoked."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from reviewhub.capabilities import Capability
from reviewhub.errors import NotFound

from ..access import study_capabilities
from ..authentication import token_generate
from ..models import (
    ApiToken,
    Study,
)
from ..spec import (
    Problems,
)


def api_token_create(
    *, user: User, name: str, study: Study | None = None, can_write: bool = False
) -> tuple[ApiToken, str]:
    """Create a token; returns (token, secret). The secret is never stored or shown again."""
    problems = Problems()
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        problems.add("name", "must be a non-empty string of at most 100 characters")
    problems.raise_if_any("The token")
    if study is not None and Capability.VIEW_STUDY not in study_capabilities(user=user,
                                                                             study=study):
        raise NotFound(f"Study '{study.slug}' not found.")
    secret, prefix, digest = token_generate()
    with transaction.atomic():
        token = ApiToken.objects.create(user=user, name=name.strip(), prefix=prefix,
                                        key_hash=digest, study=study, can_write=can_write)
    return token, secret


def api_token_revoke(*, token: ApiToken) -> ApiToken:
    """Revoke a token (idempotent: revoking twice keeps the first time)."""
    if token.revoked_at is None:
        with transaction.atomic():
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
    return token
