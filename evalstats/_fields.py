"""A result's JSON fields read off the result, so that a ``to_json`` does not spell each one."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any


def attrs_dict(obj: object, names: Iterable[str]) -> dict[str, Any]:
    """``{name: obj.<name>}`` in the order of ``names`` (fields and properties alike)."""
    return {name: getattr(obj, name) for name in names}


def fields_dict(obj: Any) -> dict[str, Any]:
    """Every dataclass field of ``obj`` by name, in declaration order.

    Unlike ``dataclasses.asdict`` the values are the objects themselves: nested dataclasses,
    tuples and arrays are neither converted nor copied.
    """
    return attrs_dict(obj, (f.name for f in dataclasses.fields(obj)))
