"""evalstats: pure-Python statistics for judge-human agreement. Never imports Django.

Conventions (shared by every function)
--------------------------------------
* Two-rater functions take ``a`` and ``b`` (or ``judge`` and ``human``): 1-D arrays of equal
  length, one entry per item; ``NaN``/``None`` is missing and an item missing either side is
  dropped.
* Multi-rater functions take ``reliability_data``: a 2-D array, **raters as rows, items as
  columns** (the layout of ``krippendorff.alpha``), ``NaN`` for "this rater did not rate this
  item".
* ``categories`` is an explicit, ordered list of the scale's categories. Pass it whenever the
  scale is known: categories that nobody used still count (kappa's weights, Gwet's q). Without
  it the sorted observed values are used.
* Anything random takes ``rng: numpy.random.Generator``.
* Every bootstrap function takes ``rng`` and ``options: BootstrapOptions`` (``n_resamples``,
  ``ci``, ``level``, ``min_items``; default ``DEFAULT_OPTIONS`` = 1000, "bca", 0.95, 30) in
  place of four separate keyword arguments; "..." below stands for ``rng, options``.
* Every public function returns a frozen dataclass from :mod:`evalstats.results` with at least
  ``value, ci_low, ci_high, n_items, method, warnings`` (``ci_*`` are ``None`` when no interval
  was computed). Small samples do not raise: they add a warning.

Public API (stable)
-------------------
results:    Estimate, ConfusionMatrix, ClassificationReport, CombinedVerdicts, ConsensusResult,
            LeaveOneOutAnnotator, LeaveOneOutResult, AltTestAnnotator, AltTestResult,
            PositionBiasResult, NominalAgreement, OrdinalAgreement, MeanPairwiseKappa,
            RaterPairKappa; frozen_array(values) (a read-only copy, for frozen results)
options:    BootstrapOptions(*, n_resamples=1000, ci="bca"|"percentile", level=0.95,
                             min_items=30), DEFAULT_OPTIONS, CI
agreement:  percent_agreement(a, b) -> Estimate
            percent_agreement_multi(reliability_data, *, mode="pairwise"|"all") -> Estimate
            cohen_kappa(a, b, *, categories=None, weights=None|"linear"|"quadratic") -> Estimate
            fleiss_kappa(reliability_data, *, categories=None) -> Estimate
            krippendorff_alpha(reliability_data, *, level="nominal", value_domain=None) -> Estimate
            krippendorff_alpha_fast(reliability_data, *, level="nominal", value_domain=None)
            gwet_ac1(a, b, *, categories=None) -> Estimate
            gwet_ac1_multi(reliability_data, *, categories=None) -> Estimate
            correlation(x, y, *, method="spearman"|"kendall"|"pearson") -> Estimate
            mean_absolute_error(judge, human) -> Estimate
            signed_bias(judge, human, *, level=0.95) -> Estimate          # mean(judge - human)
            accuracy(y_true, y_pred, *, level=0.95) -> Estimate           # Wilson interval
            confusion_matrix(y_true, y_pred, *, labels=None) -> ConfusionMatrix
            classification_report(y_true, y_pred, *, labels=None) -> ClassificationReport
pairwise:   swap_labels(verdicts, *, first=1, second=2) -> ndarray
            pairwise_agreement(judge, human, *, ties="keep"|"drop", tie_label=0) -> Estimate
            position_consistency(verdict_ab, verdict_ba, *, level=0.95) -> Estimate
            combine_orders(verdict_ab, verdict_ba, *, tie_label=0) -> CombinedVerdicts
consensus:  majority_vote(reliability_data, *, tie_break="first"|"random"|"none", rng=None)
            mean_consensus(reliability_data) -> ConsensusResult
            leave_one_annotator_out(judge, reliability_data, *, metric="accuracy", ...)
            alt_test(judge, reliability_data, *, epsilon, alignment="accuracy", q=0.05, ...)
bootstrap:  resample_counts(n_items, n_resamples, rng) -> ndarray (B x n_items)
            bootstrap_kappa(a, b, *, categories=None, weights=None, rng,
                            options=DEFAULT_OPTIONS) -> Estimate
            bootstrap_alpha(reliability_data, *, level_of_measurement="nominal", ...)
            bootstrap_accuracy(y_true, y_pred, ...) -> Estimate
            bootstrap_correlation(x, y, *, method="spearman", ...) -> Estimate
            bootstrap_mean(values, ...) -> Estimate
            bootstrap_from_item_stats(item_stats, stat_fn, ..., method=, n_ratings=,
                                      extra_warnings=) -> Estimate    # vectorised engine
            bootstrap_items(stat_fn, *arrays, ..., method=) -> Estimate     # slow generic loop
            wilson_interval(successes, n, *, level=0.95) -> Estimate
            bootstrap_fleiss_kappa(reliability_data, *, categories=None, ...) -> Estimate
            bootstrap_gwet_ac1_multi(reliability_data, *, categories=None, ...) -> Estimate
            bootstrap_percent_agreement_multi(reliability_data, *, mode="pairwise", ...)
tables:     PAIRED_STATS (names below), MAX_TABLE_CATEGORIES = 256
            bootstrap_paired(a, b, *, stats, categories=None, ...) -> dict[str, Estimate]
            bootstrap_by_group(group_ids, a, b, *, stats, categories=None, ...)
                -> dict[group, dict[str, Estimate]]             # rng.spawn per group
            bootstrap_gwet_ac1(a, b, *, categories=None, ...) -> Estimate
            bootstrap_spearman(x, y, *, categories=None, ...) -> Estimate      # c x c table
            bootstrap_kendall_tau(x, y, *, categories=None, ...) -> Estimate   # tau-b, table
            bootstrap_mean_absolute_error(judge, human, *, categories=None, ...) -> Estimate
            bootstrap_signed_bias(judge, human, *, categories=None, ...) -> Estimate
            bootstrap_macro_f1(y_true, y_pred, *, labels=None, ...) -> Estimate
            stats: percent_agreement, accuracy, kappa, kappa_linear, kappa_quadratic, gwet_ac1,
                   spearman, kendall_tau_b, pearson, mae, signed_bias, macro_f1,
                   alpha_nominal, alpha_ordinal, alpha_interval, alpha_ratio
bias:       position_bias(verdict_ab, verdict_ba, *, tie_label=0, level=0.95) -> PositionBiasResult
            length_bias(length_diff, judge, human, *, rng, ...) -> Estimate
            longer_preference_among_ties(judge, human, length_1, length_2, ...) -> Estimate
            self_preference(judge, human, same_family, *, rng, ...) -> Estimate
clustered:  (several rated subjects per item; intervals resample items, see the module doc)
            item_sums(stats, items), item_cell_counts(cells, n_cells, items) -> per-item rows
            bootstrap_clustered(item_stats, stat_fn, *, n_subjects, ..., method=) -> Estimate
            with_interval(point, interval) -> Estimate        # point value, clustered interval
            nominal_agreement(judge, reference, items, *, n_categories, tie_category=None, ...)
                -> NominalAgreement     # accuracy, kappa, AC1, macro F1, agreement w/o ties
            ordinal_agreement(judge, reference_mean, reference_rounded, items, *, categories,
                              judge_continuous=False, ...) -> OrdinalAgreement
            correlation_clustered(x, y, items, *, method, ...) -> Estimate | None
            alpha_clustered(data, items, *, level_of_measurement, value_domain, ...)
                -> Estimate | None
            group_difference_clustered(values, in_group, items, ...) -> Estimate
            mean_pairwise_kappa(codes, n_categories, *, weights=None, min_shared=2)
                -> MeanPairwiseKappa
            evalstats.clustered also: StatFn factories (kappa_fn, accuracy_fn, gwet_ac1_fn,
            macro_f1_fn, agreement_without_ties_fn, ratio_fn, diff_of_means_fn),
            rank_corr_rows, coarsen, finite_percentile_interval
calibration: (judge score -> P(human pass); METHODS = isotonic, platt, beta, histogram)
            calibration_fit(score, passed, *, method, weights=None) -> CalibrationCurve
            calibration_select(score, passed, *, weights=None, groups=None, methods=METHODS,
                               folds=5, rng) -> CalibrationSelection   # CV log loss
            calibration_hierarchical(score, passed, strata, *, weights=None, groups=None,
                                     methods=METHODS, folds=5, min_labels=10, rng,
                                     all_strata=()) -> HierarchicalCalibration
                (StratumCalibration per stratum: own_weight, borrowed, pooled_only)
            calibration_diagnostics(passed, prob, *, weights=None, clusters=None, n_bins=10,
                                    rng, options=DEFAULT_OPTIONS) -> CalibrationDiagnostics
            reliability_bins(passed, prob, *, weights=None, n_bins=10,
                             strategy="uniform"|"quantile") -> tuple[ReliabilityBin, ...]
            confidence_of(passed, prob) -> (correct, confidence)   # P(side) as confidence
                in [0.5, 1], for a pairwise judge's ECE in confidence bins (docs/statistics.md)
costs:      (error costs and the cost-optimal pass / fail / escalate decision)
            CostModel(*, severity_costs, reject_cost, review_cost, unit="points",
                      is_default=False), DEFAULT_COST_MODEL (1, 3, 10, 30, 100; 3; 1 points),
            DEFAULT_SEVERITY_COSTS, DEFAULT_REJECT_COST, DEFAULT_REVIEW_COST
            false_pass_cost(severities, *, costs, weights=None, clusters=None, ...)
                -> FalsePassCost       # E[cost | human fail], missing severities counted
            decision_thresholds(*, fail_cost, reject_cost, review_cost) -> DecisionThresholds
            decide(p, *, thresholds) -> ndarray of "pass" | "fail" | "escalate"
            expected_decision_cost(p, decisions, *, fail_cost, reject_cost, review_cost)
            policy_costs(passed, raw_pass, calibrated_p, *, thresholds, weights=None,
                         clusters=None, ...) -> PolicyCosts   # per 1,000: raw, calibrated, humans
selective:  (guaranteed agreement, "trust or escalate", Jung, Brahman & Choi, ICLR 2025)
            trust_threshold(confidence, agree, *, alpha, delta, min_count=DEFAULT_MIN_COUNT,
                            thresholds=None) -> TrustThreshold   # fixed-sequence testing,
                                                                 # exact binomial bound
            trust_cascade(confidences, agrees, *, alpha, delta, min_count=DEFAULT_MIN_COUNT,
                          thresholds=None) -> CascadeResult
            threshold_grid(step, *, low=0.5) -> candidate thresholds 1, 1 - step, ... (or None)
orders:     order_accuracy(verdict_ab, verdict_ba, reference, items, *,
                           unparseable="miss"|"tie"|"drop", tie_category=0.0, ...)
                -> OrderAccuracy   # per-order accuracy, its mean, order-consistent, positional
votes:      vote_agreement(judge, votes, items, *, ties="keep"|"drop", tie_category=None, ...)
                -> Estimate      # every human vote counts (votes: humans x subjects)
            pooled_pair_agreement(votes, items, *, ties=..., tie_category=None, ...)
                -> Estimate      # pairs of distinct humans on a subject, pooled
levels:     per_item_correlations(x, y, items, ...) -> PerItemCorrelations
            sample_level_correlation(x, y, items, ...) -> SampleLevelCorrelation
                                              # per input across systems, then averaged
ppi:        (prediction-powered inference, Angelopoulos et al. 2023; PPI++ 2024)
            classical_mean, naive_mean, ppi_mean(..., census=False) -> PPIEstimate
            ppi_mean_stratified, combine_strata -> StratifiedPPI
            paired_difference, paired_difference_stratified; ppi_bradley_terry -> BradleyTerry
            neyman_allocation -> NeymanAllocation; Interval, INTERVALS ("normal", "t")
gates:      rate_gate (Wilson), quantile_intervals (exact order statistics),
            mean_per_thousand, gate_check
ranking:    kendall_tau (Fisher-z interval), holm, two_sided_p, pareto_front, rank_with_ties
intervals:  wilson_interval, percentile_interval, bca_interval
sequential: (anytime-valid: a false-alarm rate that holds however often one looks)
            mean_confidence_sequence(counts, sums, *, alpha=0.05, bounds=(0, 1), n_opt=500)
                -> ConfidenceSequence   # normal mixture, Howard et al. 2021
            normal_mixture_radius(v, *, alpha, rho), normal_mixture_rho(v, alpha)
            drift_monitor(counts, sums, *, limit, direction="below"|"above", alpha=0.05,
                          restart_every=24, ...) -> DriftMonitor   # restarted sequences,
                P(any false alarm, ever) <= alpha; restart_alpha(alpha, d) = alpha/((d+1)(d+2))
changes:    (two-sample change tests for label-free behaviour signals)
            rank_sum_test(first, second) -> ChangeTest   # Mann-Whitney U, asymptotic
            two_proportion_test(k1, n1, k2, n2) -> ChangeTest   # pooled z
            change_monitor(p_values, *, alpha=0.05) -> ChangeMonitor   # look k tested at
                alpha/((k+1)(k+2)): P(any false alarm, ever) <= alpha

The bootstrap functions resample *items* (all ratings of an item move together) and compute all
B resamples at once from per-item sufficient statistics; see docs/statistics.md.
"""

from evalstats.agreement import (
    accuracy,
    classification_report,
    cohen_kappa,
    confusion_matrix,
    correlation,
    fleiss_kappa,
    gwet_ac1,
    gwet_ac1_multi,
    krippendorff_alpha,
    krippendorff_alpha_fast,
    mean_absolute_error,
    percent_agreement,
    percent_agreement_multi,
    signed_bias,
)
from evalstats.bias import (
    length_bias,
    longer_preference_among_ties,
    position_bias,
    self_preference,
)
from evalstats.bootstrap import (
    bootstrap_accuracy,
    bootstrap_alpha,
    bootstrap_correlation,
    bootstrap_fleiss_kappa,
    bootstrap_from_item_stats,
    bootstrap_gwet_ac1_multi,
    bootstrap_items,
    bootstrap_kappa,
    bootstrap_mean,
    bootstrap_percent_agreement_multi,
    resample_counts,
)
from evalstats.calibration import (
    CalibrationCurve,
    CalibrationDiagnostics,
    CalibrationSelection,
    HierarchicalCalibration,
    ReliabilityBin,
    StratumCalibration,
    calibration_diagnostics,
    calibration_fit,
    calibration_hierarchical,
    calibration_select,
    confidence_of,
    reliability_bins,
)
from evalstats.changes import (
    ChangeMonitor,
    ChangeTest,
    change_monitor,
    rank_sum_test,
    two_proportion_test,
)
from evalstats.clustered import (
    alpha_clustered,
    bootstrap_clustered,
    correlation_clustered,
    group_difference_clustered,
    item_cell_counts,
    item_sums,
    mean_pairwise_kappa,
    nominal_agreement,
    ordinal_agreement,
    with_interval,
)
from evalstats.consensus import (
    alt_test,
    leave_one_annotator_out,
    majority_vote,
    mean_consensus,
)
from evalstats.costs import (
    DEFAULT_COST_MODEL,
    DEFAULT_REJECT_COST,
    DEFAULT_REVIEW_COST,
    DEFAULT_SEVERITY_COSTS,
    CostModel,
    DecisionThresholds,
    FalsePassCost,
    PolicyCosts,
    decide,
    decision_thresholds,
    expected_decision_cost,
    false_pass_cost,
    policy_costs,
)
from evalstats.gates import (
    gate_check,
    mean_per_thousand,
    quantile_intervals,
    rate_gate,
)
from evalstats.intervals import bca_interval, percentile_interval, wilson_interval
from evalstats.levels import (
    PerItemCorrelations,
    SampleLevelCorrelation,
    per_item_correlations,
    sample_level_correlation,
)
from evalstats.options import CI, DEFAULT_OPTIONS, BootstrapOptions
from evalstats.orders import (
    OrderAccuracy,
    Unparseable,
    order_accuracy,
)
from evalstats.pairwise import (
    combine_orders,
    pairwise_agreement,
    position_consistency,
    swap_labels,
)
from evalstats.ppi import (
    INTERVALS,
    BradleyTerry,
    Interval,
    NeymanAllocation,
    PPIEstimate,
    StratifiedPPI,
    classical_mean,
    combine_strata,
    naive_mean,
    neyman_allocation,
    paired_difference,
    paired_difference_stratified,
    ppi_bradley_terry,
    ppi_mean,
    ppi_mean_stratified,
)
from evalstats.ranking import (
    holm,
    kendall_tau,
    pareto_front,
    rank_with_ties,
    two_sided_p,
)
from evalstats.results import (
    AltTestAnnotator,
    AltTestResult,
    ClassificationReport,
    CombinedVerdicts,
    ConfusionMatrix,
    ConsensusResult,
    Estimate,
    LeaveOneOutAnnotator,
    LeaveOneOutResult,
    MeanPairwiseKappa,
    NominalAgreement,
    OrdinalAgreement,
    PositionBiasResult,
    RaterPairKappa,
)
from evalstats.selective import (
    CascadeResult,
    TrustThreshold,
    threshold_grid,
    trust_cascade,
    trust_threshold,
)
from evalstats.sequential import (
    ConfidenceSequence,
    DriftMonitor,
    drift_monitor,
    mean_confidence_sequence,
    normal_mixture_radius,
    normal_mixture_rho,
    restart_alpha,
)
from evalstats.tables import (
    MAX_TABLE_CATEGORIES,
    PAIRED_STATS,
    bootstrap_by_group,
    bootstrap_gwet_ac1,
    bootstrap_kendall_tau,
    bootstrap_macro_f1,
    bootstrap_mean_absolute_error,
    bootstrap_paired,
    bootstrap_signed_bias,
    bootstrap_spearman,
)
from evalstats.votes import (
    pooled_pair_agreement,
    vote_agreement,
)

__all__ = [
    "CI",
    "DEFAULT_COST_MODEL",
    "DEFAULT_OPTIONS",
    "DEFAULT_REJECT_COST",
    "DEFAULT_REVIEW_COST",
    "DEFAULT_SEVERITY_COSTS",
    "INTERVALS",
    "MAX_TABLE_CATEGORIES",
    "PAIRED_STATS",
    "AltTestAnnotator",
    "AltTestResult",
    "BootstrapOptions",
    "BradleyTerry",
    "CalibrationCurve",
    "CalibrationDiagnostics",
    "CalibrationSelection",
    "CascadeResult",
    "ChangeMonitor",
    "ChangeTest",
    "ClassificationReport",
    "CombinedVerdicts",
    "ConfidenceSequence",
    "ConfusionMatrix",
    "ConsensusResult",
    "CostModel",
    "DecisionThresholds",
    "DriftMonitor",
    "Estimate",
    "FalsePassCost",
    "HierarchicalCalibration",
    "Interval",
    "LeaveOneOutAnnotator",
    "LeaveOneOutResult",
    "MeanPairwiseKappa",
    "NeymanAllocation",
    "NominalAgreement",
    "OrderAccuracy",
    "OrdinalAgreement",
    "PPIEstimate",
    "PerItemCorrelations",
    "PolicyCosts",
    "PositionBiasResult",
    "RaterPairKappa",
    "ReliabilityBin",
    "SampleLevelCorrelation",
    "StratifiedPPI",
    "StratumCalibration",
    "TrustThreshold",
    "Unparseable",
    "accuracy",
    "alpha_clustered",
    "alt_test",
    "bca_interval",
    "bootstrap_accuracy",
    "bootstrap_alpha",
    "bootstrap_by_group",
    "bootstrap_clustered",
    "bootstrap_correlation",
    "bootstrap_fleiss_kappa",
    "bootstrap_from_item_stats",
    "bootstrap_gwet_ac1",
    "bootstrap_gwet_ac1_multi",
    "bootstrap_items",
    "bootstrap_kappa",
    "bootstrap_kendall_tau",
    "bootstrap_macro_f1",
    "bootstrap_mean",
    "bootstrap_mean_absolute_error",
    "bootstrap_paired",
    "bootstrap_percent_agreement_multi",
    "bootstrap_signed_bias",
    "bootstrap_spearman",
    "calibration_diagnostics",
    "calibration_fit",
    "calibration_hierarchical",
    "calibration_select",
    "change_monitor",
    "classical_mean",
    "classification_report",
    "cohen_kappa",
    "combine_orders",
    "combine_strata",
    "confidence_of",
    "confusion_matrix",
    "correlation",
    "correlation_clustered",
    "decide",
    "decision_thresholds",
    "drift_monitor",
    "expected_decision_cost",
    "false_pass_cost",
    "fleiss_kappa",
    "gate_check",
    "group_difference_clustered",
    "gwet_ac1",
    "gwet_ac1_multi",
    "holm",
    "item_cell_counts",
    "item_sums",
    "kendall_tau",
    "krippendorff_alpha",
    "krippendorff_alpha_fast",
    "leave_one_annotator_out",
    "length_bias",
    "longer_preference_among_ties",
    "majority_vote",
    "mean_absolute_error",
    "mean_confidence_sequence",
    "mean_consensus",
    "mean_pairwise_kappa",
    "mean_per_thousand",
    "naive_mean",
    "neyman_allocation",
    "nominal_agreement",
    "normal_mixture_radius",
    "normal_mixture_rho",
    "order_accuracy",
    "ordinal_agreement",
    "paired_difference",
    "paired_difference_stratified",
    "pairwise_agreement",
    "pareto_front",
    "per_item_correlations",
    "percent_agreement",
    "percent_agreement_multi",
    "percentile_interval",
    "policy_costs",
    "pooled_pair_agreement",
    "position_bias",
    "position_consistency",
    "ppi_bradley_terry",
    "ppi_mean",
    "ppi_mean_stratified",
    "quantile_intervals",
    "rank_sum_test",
    "rank_with_ties",
    "rate_gate",
    "reliability_bins",
    "resample_counts",
    "restart_alpha",
    "sample_level_correlation",
    "self_preference",
    "signed_bias",
    "swap_labels",
    "threshold_grid",
    "trust_cascade",
    "trust_threshold",
    "two_proportion_test",
    "two_sided_p",
    "vote_agreement",
    "wilson_interval",
    "with_interval",
]
