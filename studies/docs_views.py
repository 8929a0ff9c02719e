"""The user docs (the repository's docs/ pages) served inside the product, so that pages link to
a readable reference instead of printing file paths.

Markdown is rendered by markdown-it-py in CommonMark mode with raw HTML off: a doc cannot
inject markup, and the strict CSP applies as on every page. Links between docs pages, to
their screenshots and to the example files are rewritten to the routes below; only files
directly inside docs/, docs/img/ and docs/examples/ are served, by name.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_GET
from markdown_it import MarkdownIt

from reviewhub.pages import strict_csp

DOCS_DIR = Path(settings.BASE_DIR) / "docs"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
_EXAMPLE_TYPES = {".yaml": "text/yaml", ".yml": "text/yaml", ".json": "application/json",
                  ".jsonl": "application/jsonl", ".csv": "text/csv"}


def _anchor(text: str) -> str:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def _href(target: str) -> str:
    """A docs link rewritten to the served page, image or example (others unchanged)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
        return target
    path, _, fragment = target.partition("#")
    path = path.removeprefix("./").removeprefix("docs/")
    suffix = f"#{fragment}" if fragment else ""
    if path.endswith(".md") and "/" not in path:
        return reverse("docs-page", args=[path[:-3]]) + suffix
    folder, _, name = path.partition("/")
    if folder in ("img", "examples") and name and "/" not in name:
        return reverse("docs-file", args=[folder, name])
    return target


@lru_cache(maxsize=64)
def _render(name: str, mtime: float) -> tuple[str, str]:
    """(title, HTML) of docs/<name>.md; cached per file version."""
    title, html = markdown_html((DOCS_DIR / f"{name}.md").read_text(encoding="utf-8"))
    return title or name, html


def markdown_html(text: str) -> tuple[str, str]:
    """(first h1's text, HTML) of a Markdown text: raw HTML escaped, headings given GitHub's
    anchors, links to docs pages, screenshots and examples pointed at the served routes."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(text)
    title = ""
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and i + 1 < len(tokens):
            heading = tokens[i + 1].content
            token.attrSet("id", _anchor(heading))
            if token.tag == "h1" and not title:
                title = heading.replace("`", "")
        for child in token.children or []:
            if child.type == "link_open":
                child.attrSet("href", _href(str(child.attrGet("href") or "")))
            elif child.type == "image":
                child.attrSet("src", _href(str(child.attrGet("src") or "")))
    return title, md.renderer.render(tokens, md.options, {})


def _doc_path(name: str) -> Path:
    if not _NAME.match(name):
        raise Http404("No such page.")
    path = DOCS_DIR / f"{name}.md"
    if not path.is_file():
        raise Http404("No such page.")
    return path


@require_GET
@login_required
@strict_csp
def docs_page(request: HttpRequest, page: str) -> HttpResponse:
    """One docs page (docs/<page>.md) rendered."""
    name = page
    path = _doc_path(name)
    title, html = _render(name, path.stat().st_mtime)
    context: dict[str, Any] = {"title": title, "html": mark_safe(html),
                               "name": name}
    return render(request, "studies/docs_page.html", context)


@require_GET
@login_required
def docs_file(request: HttpRequest, folder: str, filename: str) -> FileResponse:
    """A screenshot (docs/img/) or an example file (docs/examples/, as a download)."""
    name = filename
    if folder not in ("img", "examples") or not _NAME.match(name):
        raise Http404("No such file.")
    path = DOCS_DIR / folder / name
    if not path.is_file():
        raise Http404("No such file.")
    if folder == "img":
        if path.suffix != ".png":
            raise Http404("No such file.")
        return FileResponse(path.open("rb"), content_type="image/png")
    content_type = _EXAMPLE_TYPES.get(path.suffix)
    if content_type is None:
        raise Http404("No such file.")
    return FileResponse(path.open("rb"), content_type=f"{content_type}; charset=utf-8",
                        as_attachment=True, filename=name)
