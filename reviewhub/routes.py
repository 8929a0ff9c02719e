"""URL tables of the apps, written once per resource.

Every app's `urls.py` and `api_urls.py` lists the routes of a few resources: a collection, its
items, and the actions on them, all below one path. `routes(base, table)` builds them from a
table of `(path below base, view, URL name)` rows, so the base path is written once and a
class-based view is mounted through `as_view()` in one place. The names stay explicit in the
table (they are what `reverse` and the templates use, and what a search for a URL name finds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.urls import URLPattern, path
from django.views import View

ViewLike = Callable[..., Any] | type[View]
Route = tuple[str, ViewLike, str]


def routes(base: str, table: Iterable[Route]) -> list[URLPattern]:
    """One `path` a row, in the table's order (the order Django tries them and the API schema
    lists them): the route is `base` followed by the row's path, a class-based view (Django's
    or DRF's) is served by its `as_view()` and a function view as it is."""
    return [path(base + below, _served(view), name=name) for below, view, name in table]


def _served(view: ViewLike) -> Callable[..., Any]:
    if isinstance(view, type) and issubclass(view, View):
        return view.as_view()
    return view


__all__ = ["Route", "ViewLike", "routes"]
