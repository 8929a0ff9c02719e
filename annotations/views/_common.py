"""What the grading pages and the lead pages share: the signed-in actor, integer form fields,
no-store responses and the label a criterion value is shown with."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.utils.cache import add_never_cache_headers

from reviewhub.errors import ValidationFailed
from studies.models import Criterion


def _actor(request: HttpRequest) -> User:
    """The signed-in user (every page view here is behind login_required)."""
    user = request.user
    if not isinstance(user, User):
        raise Http404("Sign in first.")
    return user


def _int_field(data: Any, name: str) -> int | None:
    raw = (data.get(name) or "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise ValidationFailed.at(name, f"{name} must be an integer.") from exc


def _required_int(data: Any, name: str) -> int:
    value = _int_field(data, name)
    if value is None:
        raise ValidationFailed.at(name, f"{name} is required.")
    return value


def _no_store(response: HttpResponse) -> HttpResponse:
    # Pages with a lease or a one-time password must not come back from the cache (Back).
    add_never_cache_headers(response)
    return response


def _value_label(criterion: Criterion, presented: str) -> str:
    if criterion.scale == Criterion.Scale.BINARY:
        return presented.capitalize()
    if criterion.scale == Criterion.Scale.PAIRWISE:
        return {"A": "A (left)", "B": "B (right)", "tie": "Tie"}.get(presented, presented)
    for p in criterion.points:
        if isinstance(p, dict) and str(p.get("value")) == presented:
            label = str(p.get("label") or "")
            if criterion.scale == Criterion.Scale.ORDINAL:
                return f"{presented} · {label}" if label else presented
            return label or presented
    return presented
