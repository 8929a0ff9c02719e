"""OpenAPI extensions: describe the bearer-token authentication to drf-spectacular.

Imported by `studies.api` so that it is registered whenever the API URLs are loaded (which the
schema generator always does first).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "studies.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "`Authorization: Bearer rh_…` — a token from POST /api/tokens or "
                           "`manage.py token_create`, scoped to one study or the whole "
                           "account, read-only or read-write.",
        }
