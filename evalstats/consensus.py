"""Human consensus and judge-vs-human-panel comparisons.

Reliability data are raters (annotators) as rows and items as columns, NaN = not rated; the
row order is the annotator order used by the ``"first"`` tie-break.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy import special
from statsmodels.stats.multitest import multipletests

from evalstats import _kernels as K
from evalstats._data import as_1d, as_2d, as_float, encode, missing_mask, resolve_categories
from evalstats.agreement import cohen_kappa, correlation, mean_absolute_error
from evalstats.results import (
    AltTestAnnotator,
    AltTestResult,
    ConsensusResult,
    LeaveOneOutAnnotator,
    LeaveOneOutResult,
    frozen_array,
)

__all__ = ["alt_test", "leave_one_annotator_out", "majority_vote", "mean_consensus"]

TieBreak = Literal["first", "random", "none"]


def majority_vote(
    reliability_data: npt.ArrayLike,
    *,
    tie_break: TieBreak = "first",
    rng: np.random.Generator | None = None,
    categories: Sequence[object] | npt.ArrayLike | None = None,
) -> ConsensusResult:
    """Most frequent label per item, with an explicit rule for ties between top labels.

    * ``"first"``: the first label, in annotator (row) order, whose count is the highest. This is
      PandaLM's rule (``Counter.most_common`` keeps first-appearance order): labels (1, 2, 0) -> 1,
      (0, 2, 2) -> 2.
    * ``"random"``: a uniformly random choice among the top labels, drawn from ``rng``.
    * ``"none"``: tied items get no consensus (NaN).

    Items nobody rated are NaN. ``n_ties`` counts items with more than one top label.
    """
    data = as_2d(reliability_data)
    cats = resolve_categories(categories, data)
    codes = encode(data, cats)
    counts = K.value_counts(codes, len(cats))
    n_items = data.shape[1]
    top = counts.max(axis=1) if counts.size else np.zeros(n_items)
    rated = top > 0
    is_top = (counts == top[:, None]) & rated[:, None]
    tied = is_top.sum(axis=1) > 1
    if tie_break == "first":
        # Count of each rater's own label on each item; the first rater whose label is a top label.
        own = np.where(codes >= 0, counts[np.arange(n_items)[None, :], np.maximum(codes, 0)], -1.0)
        first_rater = np.argmax(own == top[None, :], axis=0)
        chosen = codes[first_rater, np.arange(n_items)]
    elif tie_break == "random":
        if rng is None:
            raise ValueError('tie_break="random" needs rng')
        chosen = np.argmax(np.where(is_top, rng.random(counts.shape), -1.0), axis=1)
    elif tie_break == "none":
        chosen = np.where(tied, -1, np.argmax(is_top, axis=1))
    else:
        raise ValueError("tie_break must be 'first', 'random' or 'none'")
    chosen = np.where(rated, chosen, -1)
    labels = np.where(chosen >= 0, cats[np.maximum(chosen, 0)] if cats.size else np.nan, np.nan)
    resolved = chosen >= 0
    warnings = (f"{int((~rated).sum())} items have no rating",) if (~rated).any() else ()
    return ConsensusResult(
        labels=frozen_array(labels),
        value=float(resolved.mean()) if n_items else float("nan"),
        n_items=n_items,
        n_ratings=int(counts.sum()),
        n_ties=int(tied.sum()),
        method=f"majority_vote[tie_break={tie_break}]",
        tie_break=tie_break,
        warnings=warnings,
    )


def mean_consensus(reliability_data: npt.ArrayLike) -> ConsensusResult:
    """Mean rating per item over the raters who rated it (NaN when nobody did)."""
    data = as_float(as_2d(reliability_data))
    present = ~np.isnan(data)
    m = present.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(m > 0, np.nansum(data, axis=0) / np.maximum(m, 1), np.nan)
    return ConsensusResult(
        labels=frozen_array(means),
        value=float((m > 0).mean()) if m.size else float("nan"),
        n_items=int(data.shape[1]),
        n_ratings=int(m.sum()),
        method="mean_consensus",
    )


Metric = Literal["accuracy", "kappa", "quadratic_kappa", "mae", "spearman", "pearson"]


def _metric(
    metric: Metric, categories: Sequence[object] | npt.ArrayLike | None
) -> tuple[Callable[[np.ndarray, np.ndarray], float], bool]:
    """Score function (x, consensus) and whether higher is better."""
    if metric == "accuracy":
        return (lambda x, c: float(np.mean(x == c))), True
    if metric == "kappa":
        return (lambda x, c: cohen_kappa(x, c, categories=categories).value), True
    if metric == "quadratic_kappa":
        return (
            lambda x, c: cohen_kappa(x, c, categories=categories, weights="quadratic").value
        ), True
    if metric == "mae":
        return (lambda x, c: mean_absolute_error(x, c).value), False
    if metric in ("spearman", "pearson"):
        return (lambda x, c: correlation(x, c, method=metric).value), True
    raise ValueError(f"unknown metric {metric!r}")


def leave_one_annotator_out(
    judge: npt.ArrayLike,
    reliability_data: npt.ArrayLike,
    *,
    metric: Metric = "accuracy",
    categories: Sequence[object] | npt.ArrayLike | None = None,
    tie_break: TieBreak = "first",
    rng: np.random.Generator | None = None,
    min_items: int = 30,
) -> LeaveOneOutResult:
    """For each annotator j: score(judge, consensus of the others) vs score(j, same consensus).

    Uses the items j rated on which at least one other annotator and the judge gave a rating.
    The consensus of the others is their majority vote (``tie_break``) for the label metrics
    (accuracy, kappa) and their mean for the numeric ones (mae, spearman, pearson). ``value`` is
    the share of annotators the judge matches or beats: the judge is "as good as a human" at
    representing the panel when that share is high.
    """
    data = as_2d(reliability_data)
    j_arr = as_1d(judge, "judge")
    if j_arr.shape[0] != data.shape[1]:
        raise ValueError("judge needs one verdict per item (column)")
    score, higher_better = _metric(metric, categories)
    numeric = metric in ("mae", "spearman", "pearson")
    present = ~missing_mask(data)
    judge_ok = ~missing_mask(j_arr)
    rows: list[LeaveOneOutAnnotator] = []
    warnings: list[str] = []
    for a in range(data.shape[0]):
        others = np.delete(data, a, axis=0)
        cons = (
            mean_consensus(others)
            if numeric
            else majority_vote(others, tie_break=tie_break, rng=rng, categories=categories)
        ).labels
        use = present[a] & judge_ok & ~missing_mask(np.asarray(cons))
        n = int(use.sum())
        if n == 0:
            warnings.append(f"annotator {a}: no comparable items")
            continue
        if n < min_items:
            warnings.append(f"annotator {a}: only {n} items (< {min_items})")
        js = score(j_arr[use], np.asarray(cons)[use])
        hs = score(data[a, use], np.asarray(cons)[use])
        ok = js >= hs if higher_better else js <= hs
        rows.append(
            LeaveOneOutAnnotator(
                annotator=a,
                n_items=n,
                judge_score=js,
                human_score=hs,
                judge_at_least_as_good=bool(ok),
            )
        )
    value = float(np.mean([r.judge_at_least_as_good for r in rows])) if rows else float("nan")
    return LeaveOneOutResult(
        annotators=tuple(rows),
        value=value,
        n_items=int((present.sum(0) >= 2).sum()),
        n_ratings=int(present.sum()),
        metric=metric,
        warnings=tuple(warnings),
    )


Alignment = Literal["accuracy", "neg_abs", "neg_rmse"]

# Entries of one (annotators x raters x items) block of the alignment step (8 MB of float64).
_ALIGN_BLOCK_ELEMENTS = 1_000_000


def _alt_alignments(
    data: np.ndarray,
    judge: np.ndarray,
    present: npt.NDArray[np.bool_],
    use: npt.NDArray[np.bool_],
    alignment: str,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """S_f and S_h of the alternative annotator test for every annotator and item.

    Row a, item i: alignment of the judge (S_f) and of annotator a (S_h) with the labels of
    the *other* annotators who rated item i, defined where ``use[a, i]`` (elsewhere undefined).

    "accuracy" counts matching labels, which are integers, so all annotators are done at once
    in (block x raters x items) arrays with annotator a's own row masked out: the counts, and so
    the shares, are exact whatever the order of the sums. The numeric alignments sum
    non-integer differences, whose last bits depend on the summation order numpy picks for the
    array's shape, so they keep the per-annotator sums over the other rows on annotator a's
    items (two vectorised sums per annotator), which keeps every figure bit-for-bit what the
    test has always reported.
    """
    r, n = present.shape
    cnt = present.sum(axis=0)[None, :] - present  # other raters per item, for each annotator
    s_f = np.empty((r, n))
    s_h = np.empty((r, n))
    if r == 0 or n == 0:
        return s_f, s_h
    with np.errstate(divide="ignore", invalid="ignore"):
        if alignment != "accuracy":
            vals, jvals = as_float(data), as_float(judge)
            for a in range(r):
                cols = use[a]
                mask = np.delete(present[:, cols], a, axis=0)
                others = np.delete(vals[:, cols], a, axis=0)
                for x, out in ((jvals[cols], s_f), (vals[a, cols], s_h)):
                    diff = np.where(mask, others - x[None, :], 0.0)
                    if alignment == "neg_abs":
                        out[a, cols] = -np.abs(diff).sum(axis=0) / cnt[a, cols]
                    else:
                        out[a, cols] = -np.sqrt((diff**2).sum(axis=0) / cnt[a, cols])
            return s_f, s_h
        # Labels are compared for equality only: integer codes make the blocks cheap for any
        # label type (strings, numbers); missing values get -1 and are masked anyway.
        flat = np.concatenate([data.ravel(), judge])
        ok = ~missing_mask(flat)
        codes = np.full(flat.size, -1, dtype=np.int64)
        codes[ok] = pd.factorize(flat[ok])[0]
        labels = codes[: data.size].reshape(r, n)
        jlabels = codes[data.size :]
        block = max(1, _ALIGN_BLOCK_ELEMENTS // (r * n))
        for start in range(0, r, block):
            rows = np.arange(start, min(r, start + block))
            others3 = np.repeat(present[None, :, :], rows.size, axis=0)
            others3[np.arange(rows.size), rows, :] = False
            for x, out in ((jlabels[None, None, :], s_f), (labels[rows][:, None, :], s_h)):
                hits = ((labels[None, :, :] == x) & others3).sum(axis=1)
                out[rows] = hits / cnt[rows]
    return s_f, s_h


def _one_sided_t(
    n: npt.NDArray[np.float64],
    mean: npt.NDArray[np.float64],
    m2: npt.NDArray[np.float64],
    popmean: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """One-sample t-tests of H0: mu <= popmean against "greater", one per row, at once.

    ``mean`` and ``m2`` (mean squared deviation) of each sample of size ``n``. The formulas
    are those of ``scipy.stats.ttest_1samp`` (variance m2 * n / (n - 1), p from Student's t
    with n - 1 degrees of freedom via ``scipy.special.stdtr``), evaluated for all samples in one
    call instead of one scipy call per sample. A sample with no variance gets t = +/-inf and
    p = 0 or 1 by the sign of mean - popmean (t = 0 and p = 1 when they are equal).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        var = m2 * (n / (n - 1.0))
        t = (mean - popmean) / np.sqrt(var / n)
        p = special.stdtr(n - 1.0, -t)
    flat = m2 == 0
    if flat.any():
        gap = mean[flat] - popmean
        t[flat] = np.where(gap != 0, np.sign(gap) * np.inf, 0.0)
        p[flat] = np.where(gap > 0, 0.0, 1.0)
    return t, p


def _alt_inputs(
    judge: npt.ArrayLike, reliability_data: npt.ArrayLike, alignment: str,
) -> tuple[np.ndarray, np.ndarray]:
    """`alt_test`'s ratings (raters x items) and judge verdicts, checked."""
    data = as_2d(reliability_data)
    j_arr = as_1d(judge, "judge")
    if j_arr.shape[0] != data.shape[1]:
        raise ValueError("judge needs one verdict per item (column)")
    if alignment not in ("accuracy", "neg_abs", "neg_rmse"):
        raise ValueError("alignment must be 'accuracy', 'neg_abs' or 'neg_rmse'")
    return data, j_arr


def _alt_per_annotator(
    s_f: npt.NDArray[np.float64], s_h: npt.NDArray[np.float64], use_all: npt.NDArray[np.bool_],
    *, min_items: int,
    epsilon: float,
) -> tuple[list[dict[str, float | int]], list[int]]:
    """Each annotator with at least ``min_items`` comparable items: winning rates, mean
    alignments and the one-sided t-test of mean(d) <= -epsilon; and the annotators skipped."""
    tested: list[dict[str, float | int]] = []
    skipped: list[int] = []
    win_f = s_f >= s_h
    win_h = s_h >= s_f
    for a in range(s_f.shape[0]):
        use = use_all[a]
        n = int(use.sum())
        if n < min_items:
            skipped.append(a)
            continue
        w_f = win_f[a, use].astype(np.float64)
        w_h = win_h[a, use].astype(np.float64)
        d = w_f - w_h
        mean = d.mean()
        tested.append(
            {
                "a": a,
                "n": n,
                "rf": float(w_f.mean()),
                "rh": float(w_h.mean()),
                "sf": float(s_f[a, use].mean()),
                "sh": float(s_h[a, use].mean()),
                "mean": float(mean),
                # Second central moment as scipy.stats.ttest_1samp forms it (mean of squared
                # deviations), so the t statistics below are scipy's to the last bit.
                "m2": float(np.mean((d - mean) ** 2)),
            }
        )
    if tested:
        t_all, p_all = _one_sided_t(
            np.array([r["n"] for r in tested], dtype=np.float64),
            np.array([r["mean"] for r in tested]),
            np.array([r["m2"] for r in tested]),
            -epsilon,
        )
        for r, t, p in zip(tested, t_all, p_all, strict=True):
            r["t"], r["p"] = float(t), float(p)
    return tested, skipped


def _alt_corrected(
    tested: list[dict[str, float | int]], q: float,
) -> tuple[tuple[AltTestAnnotator, ...], npt.NDArray[np.bool_]]:
    """The tested annotators with Benjamini-Yekutieli adjusted p-values at level ``q``."""
    pvals = np.array([r["p"] for r in tested])
    rejected, p_adj, _, _ = multipletests(pvals, alpha=q, method="fdr_by")
    annotators = tuple(
        AltTestAnnotator(
            annotator=int(r["a"]),
            n_items=int(r["n"]),
            rho_judge=float(r["rf"]),
            rho_human=float(r["rh"]),
            mean_judge_alignment=float(r["sf"]),
            mean_human_alignment=float(r["sh"]),
            t=float(r["t"]),
            p_value=float(r["p"]),
            p_adjusted=float(pa),
            rejected=bool(rj),
        )
        for r, pa, rj in zip(tested, p_adj, rejected, strict=True)
    )
    return annotators, rejected


def alt_test(
    judge: npt.ArrayLike,
    reliability_data: npt.ArrayLike,
    *,
    epsilon: float,
    alignment: Alignment = "accuracy",
    q: float = 0.05,
    min_items: int = 30,
    min_annotators: int = 3,
) -> AltTestResult:
    """Alternative annotator test (Calderon, Reichart & Dror, ACL 2025).

    For every annotator j with at least ``min_items`` items that j rated, the judge rated and at
    least one other human rated:
      S_f(i) = alignment of the judge with the other humans' labels on item i,
      S_h(i) = alignment of j with the same labels,
      W^f_i = [S_f >= S_h], W^h_i = [S_h >= S_f], d_i = W^f_i - W^h_i;
    a one-sided one-sample t-test of H0: mean(d) <= -epsilon (i.e. rho^f_j <= rho^h_j - epsilon)
    against "greater"; the p-values of all tested annotators are corrected with
    Benjamini-Yekutieli at level ``q``; the winning rate omega is the share of annotators whose
    H0 is rejected and the judge passes iff omega >= 0.5. ``advantage_probability`` (rho) is the
    mean of rho^f_j over the tested annotators.

    ``alignment``: "accuracy" = share of the others' labels the rater matches (categorical);
    "neg_abs" = minus the mean absolute difference, "neg_rmse" = minus the root mean squared
    difference from the others (numeric scores).

    ``epsilon`` (authors' guidance): 0.2 for expert annotators, 0.15 for skilled annotators,
    0.1 for crowd workers; use a smaller value when inter-annotator agreement is low. The
    authors ask for at least 30 items per annotator (normality of the t-test; 50-100 advised)
    and at least three annotators (two is allowed but weak).

    When every d_i is identical the t statistic is +/-inf and p is 0 or 1 accordingly.
    """
    data, j_arr = _alt_inputs(judge, reliability_data, alignment)
    present = ~missing_mask(data)
    judge_ok = ~missing_mask(j_arr)
    n_raters = present.sum(axis=0)
    # Items annotator a can be compared on: a, the judge and at least one other human rated it.
    use_all = present & judge_ok[None, :] & ((n_raters[None, :] - present) >= 1)
    s_f, s_h = _alt_alignments(data, j_arr, present, use_all, alignment)
    tested, skipped = _alt_per_annotator(s_f, s_h, use_all, min_items=min_items,
                                         epsilon=epsilon)
    warnings: list[str] = []
    if skipped:
        warnings.append(f"annotators {skipped} skipped: fewer than {min_items} comparable items")
    if len(tested) < min_annotators:
        warnings.append(f"only {len(tested)} annotators tested (the authors recommend at least 3)")
    if not tested:
        return AltTestResult(
            value=float("nan"),
            passed=False,
            advantage_probability=float("nan"),
            epsilon=epsilon,
            q=q,
            alignment=alignment,
            annotators=(),
            skipped_annotators=tuple(skipped),
            min_items=min_items,
            n_items=int((judge_ok & (n_raters >= 2)).sum()),
            n_ratings=int(present.sum()),
            warnings=(*warnings, "no annotator could be tested"),
        )
    annotators, rejected = _alt_corrected(tested, q)
    omega = float(np.mean(rejected))
    return AltTestResult(
        value=omega,
        passed=omega >= 0.5,
        advantage_probability=float(np.mean([a.rho_judge for a in annotators])),
        epsilon=epsilon,
        q=q,
        alignment=alignment,
        annotators=annotators,
        skipped_annotators=tuple(skipped),
        min_items=min_items,
        n_items=int((judge_ok & (n_raters >= 2)).sum()),
        n_ratings=int(present.sum()),
        warnings=tuple(warnings),
    )
