"""The human-human ceiling: Krippendorff's alpha and mean pairwise kappa on a cell's
subjects, and for nominal scales the pooled agreement of pairs of distinct humans on the same
subject (with ties, and without for pairwise scales).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

import evalstats as es
from calibration.frames import CriterionRef
from evalstats.votes import pooled_pair_agreement

from .common import (
    FloatArray,
    bootstrap_options,
    cell_rng,
    est_dict,
    finite_or_none,
    scale_categories,
)
from .figures import AlphaLevel, alpha_with_interval, with_and_without_ties
from .humans import HumanBlock, Stratum

# Per-pair human kappas are listed in the ceiling when there are at most this many pairs.
MAX_LISTED_PAIRS = 45


def human_ceiling(
    crit: CriterionRef,
    block: HumanBlock,
    idx: npt.NDArray[np.int64],
    p: Mapping[str, Any],
    stratum: Stratum,
    cache: dict[bytes, dict[str, Any]],
) -> dict[str, Any]:
    """Human-human agreement on the given subjects: alpha (clustered CI) and mean pairwise kappa.

    Cached by the subject set: judges that cover the same subjects share one computation (and
    its generator is seeded by criterion and stratum only, so the numbers are the same).
    """
    key = hashlib.sha256(idx.tobytes()).digest() + stratum.label.encode()
    if key not in cache:
        rng = cell_rng(p["seed"], "ceiling", crit.id, stratum.dimension, stratum.label)
        cache[key] = _ceiling_compute(crit, block, idx, p, rng)
    return cache[key]


def _ceiling_compute(
    crit: CriterionRef,
    block: HumanBlock,
    idx: npt.NDArray[np.int64],
    p: Mapping[str, Any],
    rng: np.random.Generator,
) -> dict[str, Any]:
    sub = block.matrix[:, idx]
    active = (~np.isnan(sub)).any(axis=1)
    sub = sub[active]
    items = block.items[idx]
    cats = scale_categories(crit)
    level: AlphaLevel = (
        crit.scale if crit.scale in ("ordinal", "interval") else "nominal"  # type: ignore[assignment]
    )
    domain = cats if crit.scale != "interval" else None
    pairable = (~np.isnan(sub)).sum(axis=0) >= 2
    out: dict[str, Any] = {
        "n_subjects": int(pairable.sum()),
        "n_items": int(np.unique(items[pairable]).size),
        "n_humans": int(sub.shape[0]),
        "n_ratings": int((~np.isnan(sub[:, pairable])).sum()),
        "level": level,
    }
    if pairable.sum() < 2:
        out.update(
            alpha=est_dict(None), pairwise_kappa=None, n_pairs=0, point=None, point_metric=None
        )
        return out
    out["alpha"] = alpha_with_interval(sub, pairable, items, level, domain, p, rng)
    if crit.scale == "interval":
        # Scores on a continuous range have no categories for a kappa: alpha (interval level)
        # is the ceiling.
        out.update(pairwise_kappa=None, n_pairs=0, point=out["alpha"]["value"],
                   point_metric="krippendorff alpha")
        return out
    if crit.scale != "ordinal":
        # Drawn after alpha's interval, so alpha's numbers are those of earlier versions.
        out.update(_pooled(crit, sub, items, p, rng))
    out.update(_pairwise_kappa(crit, sub, block.humans[active], cats, p))
    out["point"] = (out["pairwise_kappa"] if out["pairwise_kappa"] is not None
                    else out["alpha"]["value"])
    out["point_metric"] = ("mean pairwise kappa" if out["pairwise_kappa"] is not None
                           else "krippendorff alpha")
    return out


def _pooled(crit: CriterionRef, sub: FloatArray, items: npt.NDArray[Any],
            p: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """Nominal scales: the share of agreeing pairs of distinct humans on the same subject,
    pooled over pairs, with ties and (pairwise scales) without."""
    return with_and_without_ties(crit, "pooled_agreement", functools.partial(
        pooled_pair_agreement, sub, items, rng=rng, options=bootstrap_options(p)))


def _pairwise_kappa(crit: CriterionRef, sub: FloatArray, humans: npt.NDArray[Any],
                    cats: list[float], p: Mapping[str, Any]) -> dict[str, Any]:
    """The mean pairwise kappa of the humans ``humans`` (the rows of ``sub``), quadratic
    weights on ordinal scales, with each pair listed when there are few."""
    codes = (
        sub
        if crit.scale != "ordinal"
        else np.searchsorted(np.asarray(cats), sub).astype(np.float64)
    )
    if crit.scale == "ordinal":
        codes[np.isnan(sub)] = np.nan
    pk = es.mean_pairwise_kappa(
        codes,
        len(cats),
        weights="quadratic" if crit.scale == "ordinal" else None,
        min_shared=p["min_pair_items"],
    )
    out: dict[str, Any] = {}
    if len(pk.pairs) <= MAX_LISTED_PAIRS:
        out["pairs"] = [
            {
                "a": int(humans[q.a]),
                "b": int(humans[q.b]),
                "kappa": finite_or_none(q.kappa),
                "n": q.n_shared,
            }
            for q in pk.pairs
        ]
    out["pairwise_kappa"] = finite_or_none(pk.value)
    out["pairwise_kappa_weights"] = "quadratic" if crit.scale == "ordinal" else "none"
    out["n_pairs"] = pk.n_pairs
    return out


__all__ = ["MAX_LISTED_PAIRS", "human_ceiling"]
