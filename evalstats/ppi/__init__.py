"""Prediction-powered inference: few human labels plus many judge scores, unbiased and valid.

A candidate's quality on a set of outputs (a pass rate, a mean score, a cost per output) can be
estimated three ways, and the selection report shows all three side by side:

* **human-only** (:func:`classical_mean`): the mean of the human labels, weighted by
  1 / inclusion probability when humans were sampled unequally. Unbiased, but wide when labels
  are few.
* **judge-only** (:func:`naive_mean`): the mean of the judge's scores over every output.
  Narrow, and biased by however much the judge disagrees with humans; its interval covers only
  the sampling noise, never the judge's error.
* **prediction-powered** (:func:`ppi_mean`): PPI++ (Angelopoulos, Duchi & Zrnic 2023, "PPI++:
  Efficient Prediction-Powered Inference"). With ``y`` the human labels and ``f`` the judge's
  scores on the same ``n`` labelled outputs and ``f~`` its scores on ``N`` unlabelled outputs,

      theta(lambda) = lambda * mean_w~(f~) + mean_w(y - lambda * f)

  is unbiased for every ``lambda`` (the second term rectifies the judge's bias), with variance
  ``lambda^2 var_w~(f~) / N + var_w(y - lambda f) / n``. ``lambda = 0`` is the human-only
  estimate, ``lambda = 1`` the original PPI; *power tuning* picks the ``lambda`` that minimises
  the estimated variance, clipped to [0, 1], so a useless judge costs (asymptotically) nothing
  and a good one narrows the interval. The computation follows the authors' package
  ``ppi_py`` (0.2.x) exactly, so that both give the same numbers to rounding: weights are
  rescaled to mean 1 within each set, ``lambda`` is tuned on the gradients at the
  ``lambda = 1`` estimate (``_calc_lam_glm`` with an identity Hessian), variances are the
  ``1/n`` (population) variances and the interval is the normal one.

Strata and the deployment mix (:func:`ppi_mean_stratified`)
-----------------------------------------------------------
Stratified PPI (Fisch et al. 2024, "Stratified Prediction-Powered Inference for Hybrid
Language Model Evaluation"): one PPI++ estimate per stratum, each with its own power-tuned
``lambda`` (the mix variance is a sum of per-stratum terms, so tuning each stratum separately
minimises it), combined with the deployment-mix weights: ``theta = sum_s mix_s theta_s`` and
``se = sqrt(sum_s mix_s^2 se_s^2)``. A judge can be good in one stratum and useless in
another; per-stratum tuning uses it only where it helps.

Paired differences (:func:`paired_difference`)
----------------------------------------------
Candidates answer the same items, so their scores are correlated through item difficulty; the
difference of two independent intervals overstates the uncertainty. PPI is applied to the
item-level differences ``y_a - y_b`` (labelled: items where both outputs carry a human label)
with the judge's differences ``f_a - f_b`` as the predictor.

Where the next labels help most (:func:`neyman_allocation`)
-----------------------------------------------------------
The extra human labels per stratum that bring the mix standard error down to a target with the
fewest labels in total (Neyman allocation, exact in integers).

Pairwise studies (:func:`ppi_bradley_terry`)
--------------------------------------------
Bradley-Terry strengths by PPI++ logistic regression, as ``ppi_py.ppi_logistic_ci``.

Intervals
---------
``interval="normal"`` (the default) is the z interval of ``ppi_py`` with its ``1/n``
variances. With few labels it undercovers (on HANNA, 10 labels per system: about 0.90 for a
nominal 0.95), so every estimator also offers ``interval="t"``: unbiased (``n - 1``)
variances and a Student t quantile, with ``n - 1`` degrees of freedom for a human-only mean
and Welch-Satterthwaite degrees of freedom for the two PPI terms and for a mix of strata. The
two agree as the number of labels grows; the point estimates and ``lambda`` are the same.

Conventions: inputs are 1-D numeric arrays without missing values (the caller drops them);
``w`` / ``w_unlabelled`` are positive weights such as 1 / inclusion probability; ``level`` is
the two-sided confidence level. Fewer than two labels give an estimate without an interval and
a warning, never an exception.
"""

from __future__ import annotations

# The package splits along the module doc's sections: _common (the estimate, inputs, intervals),
# _means (one set of outputs), _strata (the deployment mix, paired differences), _allocation
# (where the next labels help most), _bradley_terry (pairwise studies).
from evalstats.ppi._allocation import (
    NeymanAllocation,
    neyman_allocation,
)
from evalstats.ppi._bradley_terry import (
    BradleyTerry,
    ppi_bradley_terry,
)
from evalstats.ppi._common import (
    INTERVALS,
    Interval,
    PPIEstimate,
)
from evalstats.ppi._means import (
    classical_mean,
    naive_mean,
    ppi_mean,
)
from evalstats.ppi._strata import (
    StratifiedPPI,
    combine_strata,
    paired_difference,
    paired_difference_stratified,
    ppi_mean_stratified,
)

__all__ = [
    "INTERVALS",
    "BradleyTerry",
    "Interval",
    "NeymanAllocation",
    "PPIEstimate",
    "StratifiedPPI",
    "classical_mean",
    "combine_strata",
    "naive_mean",
    "neyman_allocation",
    "paired_difference",
    "paired_difference_stratified",
    "ppi_bradley_terry",
    "ppi_mean",
    "ppi_mean_stratified",
]
