"""The human-human ceiling: Krippendorff's alpha and mean pairwise kappa on a cell's
subjects, and for nominal scales the pooled agreement of pairs of distinct humans on the same
subject (with ties, and without for pairwise scales).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

import evalstats as es
from calibration.frames import CriterionRef
from evalstats.votes import pooled_pair_agreement

from .common import _categories, _cell_rng, _num, _options, est_dict
from .humans import _HumanBlock, _Stratum

# Per-pair human kappas are listed in the ceiling when there are at most this many pairs.
MAX_LISTED_PAIRS = 45


def _ceiling(
    crit: CriterionRef,
    block: _HumanBlock,
    idx: npt.NDArray[np.int64],
    p: Mapping[str, Any],
    stratum: _Stratum,
    cache: dict[bytes, dict[str, Any]],
) -> dict[str, Any]:
    """Human-human agreement on the given subjects: alpha (clustered CI) and mean pairwise kappa.

    Cached by the subject set: judges that cover the same subjects share one computation (and
    its generator is seeded by criterion and stratum only, so the numbers are the same).
    """
    key = hashlib.sha256(idx.tobytes()).digest() + stratum.label.encode()
    if key not in cache:
        rng = _cell_rng(p["seed"], "ceiling", crit.id, stratum.dimension, stratum.label)
        cache[key] = _ceiling_compute(crit, block, idx, p, rng)
    return cache[key]


def _ceiling_compute(
    crit: CriterionRef,
    block: _HumanBlock,
    idx: npt.NDArray[np.int64],
    p: Mapping[str, Any],
    rng: np.random.Generator,
) -> dict[str, Any]:
    sub = block.matrix[:, idx]
    active = (~np.isnan(sub)).any(axis=1)
    sub = sub[active]
    items = block.items[idx]
    cats = _categories(crit)
    level: Literal["ordinal", "nominal", "interval"] = (
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
        options=_options(p),
    )
    out["alpha"] = est_dict(es.with_interval(point, interval))
    if crit.scale == "interval":
        # Scores on a continuous range have no categories for a kappa: alpha (interval level)
        # is the ceiling.
        out.update(pairwise_kappa=None, n_pairs=0, point=out["alpha"]["value"],
                   point_metric="krippendorff alpha")
        return out
    if crit.scale != "ordinal":
        # Drawn after alpha's interval, so alpha's numbers are those of earlier versions.
        out["pooled_agreement"] = est_dict(
            pooled_pair_agreement(sub, items, ties="keep", rng=rng, options=_options(p))
        )
        if crit.scale == "pairwise":
            out["pooled_agreement_without_ties"] = est_dict(
                pooled_pair_agreement(
                    sub, items, ties="drop", tie_category=0.0, rng=rng, options=_options(p)
                )
            )
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
    if len(pk.pairs) <= MAX_LISTED_PAIRS:
        ids = block.humans[active]
        out["pairs"] = [
            {"a": int(ids[q.a]), "b": int(ids[q.b]), "kappa": _num(q.kappa), "n": q.n_shared}
            for q in pk.pairs
        ]
    kappa = _num(pk.value)
    out["pairwise_kappa"] = kappa
    out["pairwise_kappa_weights"] = "quadratic" if crit.scale == "ordinal" else "none"
    out["n_pairs"] = pk.n_pairs
    out["point"] = kappa if kappa is not None else out["alpha"]["value"]
    out["point_metric"] = "mean pairwise kappa" if kappa is not None else "krippendorff alpha"
    return out
