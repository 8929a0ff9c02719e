"""Figures several tables compute alike: Krippendorff's alpha with its clustered interval (the
ceiling, agreement within a rater group) and a vote agreement read with ties and, on pairwise
scales, without (judge per vote, pooled pairs of humans)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

import evalstats as es
from calibration.frames import CriterionRef

from .common import FloatArray, bootstrap_options, est_dict

AlphaLevel = Literal["ordinal", "nominal", "interval"]


def alpha_with_interval(sub: FloatArray, pairable: npt.NDArray[np.bool_], items: npt.NDArray[Any],
                        level: AlphaLevel, domain: list[float] | None,
                        p: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """The JSON of alpha among the raters of `sub` (raters x subjects) on its `pairable`
    subjects, with the interval of a bootstrap clustered by `items` (one draw of `rng`)."""
    # krippendorff divides 0/0 when a stratum has one value only; the NaN is reported. (errstate,
    # unlike warnings.catch_warnings, is thread-local: criteria may run in threads.)
    with np.errstate(divide="ignore", invalid="ignore"):
        point = es.krippendorff_alpha(sub[:, pairable], level=level, value_domain=domain)
    interval = es.alpha_clustered(
        sub,
        items,
        level_of_measurement=level,
        value_domain=domain,
        rng=rng,
        options=bootstrap_options(p),
    )
    return est_dict(es.with_interval(point, interval))


def with_and_without_ties(crit: CriterionRef, name: str,
                          measure: Callable[..., Any]) -> dict[str, Any]:
    """`measure(ties=...)` as JSON: with ties under `name` and, on pairwise scales (whose tie
    is code 0), drawn after it without ties under `<name>_without_ties`."""
    out = {name: est_dict(measure(ties="keep"))}
    if crit.scale == "pairwise":
        out[f"{name}_without_ties"] = est_dict(measure(ties="drop", tie_category=0.0))
    return out


__all__ = ["AlphaLevel", "alpha_with_interval", "with_and_without_ties"]
