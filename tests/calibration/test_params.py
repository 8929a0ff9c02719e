"""Calibration snapshot parameters (calibration/params.py): defaults, and every bad value
named by its path."""

from __future__ import annotations

from typing import Any

import pytest

from calibration.params import DEFAULT_PARAMS, METHODS, params_validate
from reviewhub.errors import ValidationFailed


def _paths(raw: Any) -> list[str]:
    with pytest.raises(ValidationFailed) as err:
        params_validate(raw)
    return [e["path"] for e in err.value.details["errors"]]


def test_defaults_are_filled_and_methods_resolved() -> None:
    p = params_validate(None)
    assert p == {**DEFAULT_PARAMS, "methods": list(METHODS), "level": 0.95}
    assert params_validate({"methods": ["platt"], "strata": ["lang"]})["methods"] == ["platt"]


def test_methods_are_those_evalstats_offers() -> None:
    from evalstats.calibration import METHODS as FITTED

    assert tuple(METHODS) == tuple(FITTED)


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        ({"seed": -1}, "params.seed"),
        ({"seed": True}, "params.seed"),
        ({"n_resamples": 5}, "params.n_resamples"),
        ({"curve_resamples": 3}, "params.curve_resamples"),
        ({"level": 1.0}, "params.level"),
        ({"level": float("nan")}, "params.level"),
        ({"folds": 1}, "params.folds"),
        ({"min_labels": 1}, "params.min_labels"),
        ({"n_bins": 1}, "params.n_bins"),
        ({"criteria": "correct"}, "params.criteria"),
        ({"criteria": ["a", "a"]}, "params.criteria"),
        ({"strata": [1]}, "params.strata"),
        ({"judges": ["3"]}, "params.judges"),
        ({"judges": [0]}, "params.judges"),
        ({"methods": []}, "params.methods"),
        ({"methods": ["spline"]}, "params.methods"),
        ({"colour": "red"}, "params.colour"),
    ],
)
def test_a_bad_parameter_is_named(raw: dict[str, Any], path: str) -> None:
    assert _paths(raw) == [path]


def test_every_bad_parameter_is_listed_at_once() -> None:
    assert _paths({"seed": "x", "folds": 0, "extra": 1}) == [
        "params.extra", "params.seed", "params.folds"
    ]


def test_curve_resamples_zero_is_allowed() -> None:
    assert params_validate({"curve_resamples": 0})["curve_resamples"] == 0


def test_params_must_be_an_object() -> None:
    assert _paths([1, 2]) == ["params"]
