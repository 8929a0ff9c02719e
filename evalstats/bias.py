"""Judge biases: position (order) bias, length bias, self-preference.

Pairwise verdicts use canonical labels (1 = output 1 wins, 2 = output 2 wins, 0 = tie by
default); map a verdict given in swapped order with :func:`evalstats.swap_labels` first.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from scipy import stats

from evalstats._data import as_1d, as_float, missing_mask, paired
from evalstats.bootstrap import bootstrap_correlation, bootstrap_from_item_stats
from evalstats.intervals import wilson_interval
from evalstats.options import DEFAULT_OPTIONS, BootstrapOptions
from evalstats.results import Estimate, PositionBiasResult, interval_fields

__all__ = ["length_bias", "longer_preference_among_ties", "position_bias", "self_preference"]


def _binom_p(k: int, n: int) -> float | None:
    return float(stats.binomtest(k, n, 0.5).pvalue) if n else None


def position_bias(
    verdict_ab: npt.ArrayLike,
    verdict_ba: npt.ArrayLike,
    *,
    tie_label: Any = 0,
    first: Any = 1,
    second: Any = 2,
    level: float = 0.95,
) -> PositionBiasResult:
    """Flip rate and first-slot preference from verdicts in both presentation orders.

    ``verdict_ab``: canonical verdicts when output 1 was shown first; ``verdict_ba``: canonical
    verdicts when output 2 was shown first. ``value`` = share of pairs whose verdict changes
    (any change, tie vs winner included), with a Wilson interval; ``strict_flip_rate`` counts only
    decisive verdicts that switch winner. ``first_slot`` = share of decisive verdicts (pooled over
    both orders) that chose the output shown first, Wilson interval, two-sided exact binomial
    test vs 0.5 in ``p_value``. The two verdicts of one pair are not independent, so the
    first-slot interval is somewhat narrow when the same pairs are strongly biased.
    """
    ab, ba, dropped = paired(verdict_ab, verdict_ba, ("verdict_ab", "verdict_ba"))
    n = int(ab.size)
    flips = int(np.sum(ab != ba))
    decisive_ab = ab != tie_label
    decisive_ba = ba != tie_label
    strict = int(np.sum(decisive_ab & decisive_ba & (ab != ba)))
    first_picks = int(np.sum(ab == first) + np.sum(ba == second))
    n_decisive = int(decisive_ab.sum() + decisive_ba.sum())
    # The Wilson proportion relabelled: its interval, level and warnings stay as computed.
    first_slot = dataclasses.replace(
        wilson_interval(first_picks, n_decisive, level=level),
        n_items=n,
        n_ratings=n_decisive,
        p_value=_binom_p(first_picks, n_decisive),
        method="first_slot_preference; wilson; binomial test vs 0.5",
    )
    fr = wilson_interval(flips, n, level=level)
    warnings = ((f"{dropped} pairs missing a verdict dropped",) if dropped else ()) + fr.warnings
    return PositionBiasResult(
        **interval_fields(fr),
        strict_flip_rate=strict / n if n else float("nan"),
        first_slot=first_slot,
        n_items=n,
        n_pairs=n,
        level=level,
        method="position_bias; flip rate wilson",
        warnings=warnings,
    )


def length_bias(
    length_diff: npt.ArrayLike,
    judge: npt.ArrayLike,
    human: npt.ArrayLike,
    *,
    method: Literal["spearman", "kendall", "pearson"] = "spearman",
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Association of a length difference with the judge-minus-human residual.

    For scores: ``length_diff`` = length of the scored output (or minus a reference length) and
    residual = judge score - human score. For pairwise verdicts, code each verdict as the
    preference for output 1 (+1 / 0 / -1) and pass ``length_diff = len(output 1) - len(output 2)``.
    A positive correlation means the judge favours longer outputs more than humans do. The
    interval is a clustered bootstrap over items.
    """
    ld = as_float(as_1d(length_diff, "length_diff"))
    j = as_float(as_1d(judge, "judge"))
    h = as_float(as_1d(human, "human"))
    if not (ld.shape == j.shape == h.shape):
        raise ValueError("length_diff, judge and human must have the same length")
    res = bootstrap_correlation(
        ld,
        j - h,
        method=method,
        rng=rng,
        options=options,
    )
    return Estimate(
        **{**res.__dict__, "method": f"length_bias[{res.method}] of (judge - human) on length_diff"}
    )


def longer_preference_among_ties(
    judge: npt.ArrayLike,
    human: npt.ArrayLike,
    length_1: npt.ArrayLike,
    length_2: npt.ArrayLike,
    *,
    tie_label: Any = 0,
    first: Any = 1,
    second: Any = 2,
    level: float = 0.95,
) -> Estimate:
    """Among pairs humans called a tie, the share of decisive judge verdicts for the longer output.

    Pairs of equal length and judge ties are excluded. Wilson interval; ``p_value`` is the
    two-sided exact binomial test vs 0.5 (no length preference).
    """
    j = as_1d(judge, "judge")
    h = as_1d(human, "human")
    l1 = as_float(as_1d(length_1, "length_1"))
    l2 = as_float(as_1d(length_2, "length_2"))
    ok = ~(missing_mask(j) | missing_mask(h) | np.isnan(l1) | np.isnan(l2))
    use = ok & (h == tie_label) & (j != tie_label) & (l1 != l2)
    longer_is_1 = l1 > l2
    picks_longer = use & (((j == first) & longer_is_1) | ((j == second) & ~longer_is_1))
    k, n = int(picks_longer.sum()), int(use.sum())
    res = wilson_interval(k, n, level=level)
    return dataclasses.replace(
        res,
        n_pairs=n,
        p_value=_binom_p(k, n),
        method="longer_preference_among_human_ties; wilson; binomial test",
        warnings=res.warnings + ((f"only {n} usable pairs",) if n < 30 else ()),
    )


def _diff_fn(s: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray((s[..., 1] - s[..., 2]) / s[..., 0], dtype=np.float64)


def self_preference(
    judge: npt.ArrayLike,
    human: npt.ArrayLike,
    same_family: npt.ArrayLike,
    *,
    tie_label: Any = 0,
    first: Any = 1,
    second: Any = 2,
    rng: np.random.Generator,
    options: BootstrapOptions = DEFAULT_OPTIONS,
) -> Estimate:
    """Judge win rate of its own family's output minus the human win rate on the same pairs.

    ``same_family[i]`` is ``first`` / ``second`` when output 1 / output 2 comes from the judge's
    model family, anything else (0, NaN) when neither does (those pairs are ignored). A win
    counts 1, a tie 0.5, a loss 0. Positive values mean the judge favours its own family more
    than humans do; the interval is a paired bootstrap over pairs.
    """
    j = as_1d(judge, "judge")
    h = as_1d(human, "human")
    fam = as_1d(same_family, "same_family")
    if not (j.shape == h.shape == fam.shape):
        raise ValueError("judge, human and same_family must have the same length")
    ok = ~(missing_mask(j) | missing_mask(h) | missing_mask(fam)) & (
        (fam == first) | (fam == second)
    )
    j, h, fam = j[ok], h[ok], fam[ok]

    def win(v: np.ndarray) -> npt.NDArray[np.float64]:
        return np.where(v == fam, 1.0, np.where(v == tie_label, 0.5, 0.0))

    item_stats = np.column_stack([np.ones(j.size), win(j), win(h)])
    return bootstrap_from_item_stats(
        item_stats,
        _diff_fn,
        rng=rng,
        options=options,
        method="self_preference(judge - human win rate)",
    )
