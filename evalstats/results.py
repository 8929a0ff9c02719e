"""Frozen result dataclasses returned by every public ``evalstats`` function.

Every result carries the common fields ``value``, ``ci_low``, ``ci_high`` (``None`` when no
interval was computed), ``n_items``, ``method`` and ``warnings`` so that report code can render
any of them the same way. Array-valued fields are stored as read-only numpy arrays or tuples so
that a result cannot be changed after it was computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
import numpy.typing as npt

__all__ = [
    "AltTestAnnotator",
    "AltTestResult",
    "ClassificationReport",
    "CombinedVerdicts",
    "ConfusionMatrix",
    "ConsensusResult",
    "Estimate",
    "LeaveOneOutAnnotator",
    "LeaveOneOutResult",
    "MeanPairwiseKappa",
    "NominalAgreement",
    "OrdinalAgreement",
    "PositionBiasResult",
    "RaterPairKappa",
    "frozen_array",
]


def frozen_array(values: npt.ArrayLike, dtype: npt.DTypeLike | None = None) -> npt.NDArray[Any]:
    """Return a read-only copy of ``values`` (results must not be mutable through arrays)."""
    arr = np.array(values, dtype=dtype, copy=True)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """A point estimate with an optional interval.

    ``method`` names the coefficient and, when an interval is present, how it was computed
    (e.g. ``"cohen_kappa[quadratic]; bootstrap-bca(B=1000, clustered by item)"``).
    ``n_pairs`` is the number of rater pairs / compared pairs where that applies and
    ``n_ratings`` the number of individual ratings that entered the computation.
    """

    value: float
    ci_low: float | None = None
    ci_high: float | None = None
    n_items: int = 0
    n_pairs: int | None = None
    n_ratings: int | None = None
    method: str = ""
    level: float | None = None
    n_resamples: int | None = None
    p_value: float | None = None
    warnings: tuple[str, ...] = ()

    @property
    def has_interval(self) -> bool:
        return self.ci_low is not None and self.ci_high is not None


class IntervalFields(TypedDict):
    """The common fields a result repeats from the estimate it reports (``**`` into it)."""

    value: float
    ci_low: float | None
    ci_high: float | None


def interval_fields(est: Estimate) -> IntervalFields:
    """``est``'s value and interval, for a result whose headline figure is ``est``."""
    return {"value": est.value, "ci_low": est.ci_low, "ci_high": est.ci_high}


@dataclass(frozen=True, kw_only=True)
class ConfusionMatrix:
    """Confusion matrix with rows = reference (``y_true``) and columns = prediction.

    ``value`` is the accuracy (trace / total) so that the common fields stay meaningful.
    """

    labels: tuple[object, ...]
    matrix: npt.NDArray[np.int64]
    value: float
    ci_low: float | None = None
    ci_high: float | None = None
    n_items: int = 0
    method: str = "confusion_matrix"
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ClassificationReport:
    """Accuracy plus per-class and macro precision / recall / F1 (sklearn definitions).

    ``value`` is the accuracy; ``ci_low``/``ci_high`` are its Wilson interval.
    Per-class tuples are aligned with ``labels``; undefined ratios are 0 (``zero_division=0``).
    """

    labels: tuple[object, ...]
    value: float
    ci_low: float | None
    ci_high: float | None
    precision: tuple[float, ...]
    recall: tuple[float, ...]
    f1: tuple[float, ...]
    support: tuple[int, ...]
    macro_precision: float
    macro_recall: float
    macro_f1: float
    confusion: ConfusionMatrix
    n_items: int
    method: str = "classification_report"
    level: float | None = None
    warnings: tuple[str, ...] = ()

    @property
    def accuracy(self) -> float:
        return self.value


@dataclass(frozen=True, kw_only=True)
class CombinedVerdicts:
    """Two presentation-order verdicts combined into one canonical verdict per pair.

    ``labels[i]`` is the agreed label when both orders agree, else the tie label;
    ``inconsistent[i]`` flags the pairs where the two orders disagreed.
    ``value`` is the share of consistent pairs.
    """

    labels: npt.NDArray[np.generic]
    inconsistent: npt.NDArray[np.bool_]
    value: float
    ci_low: float | None = None
    ci_high: float | None = None
    n_items: int = 0
    n_pairs: int = 0
    n_inconsistent: int = 0
    method: str = "combine_orders"
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ConsensusResult:
    """Per-item consensus labels (majority vote or mean).

    ``labels`` holds category values, NaN for items without a consensus (no ratings, or an
    unbroken tie
    under ``tie_break="none"``). ``value`` is the share of items that received a consensus.
    """

    labels: npt.NDArray[np.generic]
    value: float
    ci_low: float | None = None
    ci_high: float | None = None
    n_items: int = 0
    n_ratings: int = 0
    n_ties: int = 0
    method: str = ""
    tie_break: str | None = None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class LeaveOneOutAnnotator:
    """One held-out annotator: judge vs the rest, and this annotator vs the rest."""

    annotator: int
    n_items: int
    judge_score: float
    human_score: float
    judge_at_least_as_good: bool


@dataclass(frozen=True, kw_only=True)
class LeaveOneOutResult:
    """Leave-one-annotator-out comparison.

    ``value`` = share of annotators the judge matches or beats.
    """

    annotators: tuple[LeaveOneOutAnnotator, ...]
    value: float
    ci_low: float | None = None
    ci_high: float | None = None
    n_items: int = 0
    n_ratings: int = 0
    metric: str = ""
    method: str = "leave_one_annotator_out"
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class AltTestAnnotator:
    """Per-annotator figures of the alternative annotator test (Calderon et al., 2025).

    ``rho_judge`` = share of items where the judge aligns with the other humans at least as
    well as this annotator does (mean of W^f); ``rho_human`` = mean of W^h. ``t``/``p_value``
    are the one-sided paired t-test of H0: rho_judge <= rho_human - epsilon.
    """

    annotator: int
    n_items: int
    rho_judge: float
    rho_human: float
    mean_judge_alignment: float
    mean_human_alignment: float
    t: float
    p_value: float
    p_adjusted: float
    rejected: bool


@dataclass(frozen=True, kw_only=True)
class AltTestResult:
    """Outcome of the alternative annotator test.

    ``value`` is the winning rate omega (share of tested annotators whose H0 was rejected);
    ``passed`` is ``omega >= 0.5``. ``advantage_probability`` is the mean rho_judge across
    tested annotators (the paper's rho, which does not depend on epsilon).
    """

    value: float
    passed: bool
    advantage_probability: float
    epsilon: float
    q: float
    alignment: str
    annotators: tuple[AltTestAnnotator, ...]
    skipped_annotators: tuple[int, ...] = ()
    ci_low: float | None = None
    ci_high: float | None = None
    n_items: int = 0
    n_ratings: int = 0
    min_items: int = 30
    method: str = "alt_test(Calderon, Reichart & Dror 2025; paired one-sided t-test, BY FDR)"
    warnings: tuple[str, ...] = ()

    @property
    def winning_rate(self) -> float:
        return self.value


@dataclass(frozen=True, kw_only=True)
class PositionBiasResult:
    """Position bias of a pairwise judge, from verdicts in both presentation orders.

    ``value`` is the flip rate (share of pairs whose canonical verdict changes when the order
    is swapped). ``first_slot`` is the share of decisive verdicts that picked the
    first-presented output, with a Wilson interval and a two-sided binomial test vs 0.5.
    """

    value: float
    ci_low: float | None
    ci_high: float | None
    strict_flip_rate: float
    first_slot: Estimate
    n_items: int
    n_pairs: int
    method: str = "position_bias"
    level: float | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True, kw_only=True)
class RaterPairKappa:
    """Cohen's kappa of one pair of raters (row indices ``a < b``) on ``n_shared`` subjects."""

    a: int
    b: int
    kappa: float
    n_shared: int


@dataclass(frozen=True, kw_only=True)
class MeanPairwiseKappa:
    """Mean Cohen's kappa over the rater pairs that share enough subjects.

    ``value`` is NaN (with a warning) when no pair qualifies or every qualifying kappa is
    undefined; ``n_pairs`` counts the pairs averaged (0 then). ``pairs`` lists every qualifying
    pair, undefined kappas (NaN) included, in row order.
    """

    value: float
    pairs: tuple[RaterPairKappa, ...]
    ci_low: float | None = None
    ci_high: float | None = None
    n_items: int = 0
    n_pairs: int = 0
    weights: str | None = None
    method: str = "mean_pairwise_cohen_kappa"
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class NominalAgreement:
    """Judge vs reference labels on a nominal (binary, categorical, pairwise) scale.

    Each coefficient is an :class:`Estimate` whose value is the point function's and whose
    interval is the item-clustered bootstrap (``None`` interval fields when fewer than two
    subjects). ``value``, ``ci_*`` and ``warnings`` repeat the primary coefficient, Cohen's
    kappa. ``agreement_without_ties`` is set for pairwise scales only (a tie category given).
    ``classification`` holds the confusion matrix (rows = reference) and per-class figures.
    """

    value: float
    ci_low: float | None
    ci_high: float | None
    n_items: int
    accuracy: Estimate
    kappa: Estimate
    gwet_ac1: Estimate
    macro_f1: Estimate
    macro_precision: Estimate
    macro_recall: Estimate
    classification: ClassificationReport
    agreement_without_ties: Estimate | None = None
    method: str = "nominal_agreement"
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class OrdinalAgreement:
    """Judge scores vs the reference mean (and its rounding) on an ordinal scale.

    Each coefficient is an :class:`Estimate` with an item-clustered bootstrap interval.
    ``qwk`` (quadratic-weighted kappa) and ``alpha_ordinal`` (Krippendorff) compare the judge
    with the rounded reference and are ``None`` for continuous judge scores; the correlations,
    ``mae`` and ``signed_bias`` (judge - reference mean) compare with the mean. ``primary`` names
    the coefficient that ``value``, ``ci_*`` and ``warnings`` repeat: ``"qwk"``, or
    ``"spearman"`` for continuous judge scores.
    """

    value: float
    ci_low: float | None
    ci_high: float | None
    n_items: int
    primary: str
    qwk: Estimate | None
    alpha_ordinal: Estimate | None
    spearman: Estimate
    kendall: Estimate
    pearson: Estimate
    mae: Estimate
    signed_bias: Estimate
    method: str = "ordinal_agreement"
    warnings: tuple[str, ...] = ()
