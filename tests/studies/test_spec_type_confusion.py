"""Every field of a study file, replaced by a value of the wrong JSON type, is a validation
error naming a path, never a crash (a list or an object used as a dict key once gave a 500 on
PUT strata). The study file covers the study fields, rubric criteria, strata dimensions and
the analysis plan, which the REST endpoints validate with the same functions."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from reviewhub.errors import AppError
from studies.spec import dimensions_validate, study_file_validate

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "study.yaml"
WRONG_TYPES: list[Any] = [{}, {"a": [1]}, [], [[1], {"b": 2}], 0, -1.5, True, None, "x"]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))


def _replaced(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(doc)
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


def test_the_example_study_file_is_valid() -> None:
    study_file_validate(yaml.safe_load(EXAMPLE.read_text()))


def test_every_field_of_the_wrong_type_is_a_validation_error() -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    paths = [p for p in _paths(doc) if p]
    assert len(paths) > 30  # the example exercises the study, rubric, strata and plan
    crashes = []
    for path in paths:
        for value in WRONG_TYPES:
            try:
                study_file_validate(_replaced(doc, path, value))
            except AppError:
                pass
            except Exception as exc:  # the defect this test exists for
                crashes.append((path, value, f"{type(exc).__name__}: {exc}"))
    assert not crashes, crashes[:10]


@pytest.mark.parametrize("kind", [{"x": 1}, ["categorical"], 3, None])
def test_a_dimension_kind_that_is_not_a_string_is_named(kind: Any) -> None:
    with pytest.raises(AppError) as info:
        dimensions_validate([{"key": "lang", "kind": kind, "source": "metadata.lang"}])
    assert "dimensions[0].kind" in str(info.value.details) or "kind" in str(info.value.details)
