"""The selection report as a PDF (WeasyPrint), for a committee that reads it without logging in.

The PDF holds the same sections as the page (templates/reports/selection_body.html), with the
charts embedded as data: URLs of their SVG and the stylesheet inline, so it needs nothing from
the server or the network: WeasyPrint gets no base URL and a URL fetcher that decodes the
document's own SVG data: URLs and refuses every other URL (http, file, any other data:), so a
name in the result that looks like a link or an image can never make the renderer fetch
anything.

WeasyPrint needs the system libraries Pango and PangoFT2 (Debian: libpango-1.0-0,
libpangoft2-1.0-0); it is imported only when a PDF is made.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from django.template.loader import render_to_string


class FetchRefused(ValueError):
    """Raised for every URL WeasyPrint asks for that is not one of the embedded charts."""


SVG_DATA_PREFIX = "data:image/svg+xml;base64,"


def svg_data_url(svg: bytes) -> str:
    """A chart as a data: URL (base64 holds no character an HTML attribute must escape)."""
    return SVG_DATA_PREFIX + base64.b64encode(svg).decode("ascii")


def refuse_url(url: str) -> bytes:
    """The bytes of an embedded chart (an SVG data: URL); FetchRefused for any other URL."""
    if not url.startswith(SVG_DATA_PREFIX):
        raise FetchRefused(f"The selection PDF loads nothing: refused {url[:80]!r}")
    try:
        return base64.b64decode(url[len(SVG_DATA_PREFIX):], validate=True)
    except binascii.Error as exc:
        raise FetchRefused("Malformed chart data URL") from exc


def pdf_html(context: Mapping[str, Any]) -> str:
    """The PDF's HTML: the page's sections with embedded charts and inline CSS (escaped by
    Django)."""
    return render_to_string("reports/selection_pdf.html", dict(context))


def _fetcher() -> Any:
    """A WeasyPrint URL fetcher that answers only `refuse_url`'s embedded charts.

    WeasyPrint 68 and later take a `URLFetcher` object (a refused URL is reported as a warning
    and the resource left out); earlier versions take a function returning a dict.
    """
    from weasyprint import urls

    base = getattr(urls, "URLFetcher", None)
    if base is None:  # pragma: no cover - WeasyPrint before 68
        return lambda url, *a, **k: {"string": refuse_url(url), "mime_type": "image/svg+xml"}

    class LocalOnly(base):  # type: ignore[misc, valid-type]
        def fetch(self, url: str, headers: Any = None) -> Any:
            return urls.URLFetcherResponse(url, refuse_url(url),
                                           {"Content-Type": "image/svg+xml"})

    return LocalOnly(fail_on_errors=False)


def pdf_document(html: str) -> Any:
    """The laid-out WeasyPrint document of `html` (pages and boxes), with no URL allowed."""
    import weasyprint

    return weasyprint.HTML(string=html, base_url=None, url_fetcher=_fetcher()).render()


def pdf_bytes(context: Mapping[str, Any]) -> bytes:
    """The PDF of a selection report's page context."""
    return bytes(pdf_document(pdf_html(context)).write_pdf())


def document_text(document: Any) -> str:
    """The text of a laid-out document's boxes, page by page (for checks and search)."""
    parts: list[str] = []

    def walk(box: Any) -> None:
        text = getattr(box, "text", None)
        if isinstance(text, str) and text:
            parts.append(text)
        for child in getattr(box, "children", None) or ():
            walk(child)

    for page in document.pages:
        walk(page._page_box)
    return " ".join(parts)


__all__ = ["FetchRefused", "document_text", "pdf_bytes", "pdf_document", "pdf_html",
           "refuse_url", "svg_data_url"]
