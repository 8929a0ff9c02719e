"""HTTP responses every report kind's pages share."""

from __future__ import annotations

from django.http import HttpResponse


def svg_response(content: bytes) -> HttpResponse:
    """A chart as an SVG response that can run nothing and load nothing."""
    response = HttpResponse(content, content_type="image/svg+xml")
    # The SVG is an image: no scripts, no external loads, even if opened on its own.
    response["Content-Security-Policy"] = "default-src 'none'; style-src 'unsafe-inline'"
    return response


__all__ = ["svg_response"]
