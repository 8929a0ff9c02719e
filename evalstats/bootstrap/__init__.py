"""Vectorised, item-clustered bootstrap intervals.

The unit of resampling is the *item*: every rating of an item (all raters, both sides of a
pair) moves together, so dependence between ratings of the same item is respected.

Instead of recomputing a coefficient B times in Python, each statistic is written as a
function of *summed per-item sufficient statistics* (confusion-matrix cells for kappa and
accuracy, coincidence-matrix contributions for alpha, moments for Pearson, contingency cells
for rank correlations). A bootstrap resample is a vector of item multiplicities ``w`` (B x n),
so all B resampled statistics are ``stat_fn(w @ item_stats)``: one matrix product.

Two further savings, both exact:
* items with identical sufficient statistics are interchangeable, so when there are few distinct
  rows (always the case for categorical data) the multiplicities of the *distinct rows* are drawn
  directly as Multinomial(n, share of each row): cost O(B x distinct rows), independent of n;
* the jackknife for the BCa acceleration is ``stat_fn(total - item_stats)``, one leave-one-out
  replicate per distinct row, weighted by its multiplicity.
"""

from __future__ import annotations

# The package splits into the engine (resampling, replicates, intervals; _engine), the two-rater
# coefficients (_two_rater) and the multi-rater ones (_multi_rater). The underscored names
# imported with `as` are internals that tests check against brute-force computations; the
# engine's cells_estimates, replicate_estimate and replicate_interval are for the other
# evalstats modules only.
from evalstats.bootstrap._engine import (
    _cell_replicates as _cell_replicates,
)
from evalstats.bootstrap._engine import (
    _collapse as _collapse,
)
from evalstats.bootstrap._engine import (
    _one_hot as _one_hot,
)
from evalstats.bootstrap._engine import (
    bootstrap_from_item_stats,
    bootstrap_items,
    resample_counts,
)
from evalstats.bootstrap._engine import cells_estimates as cells_estimates
from evalstats.bootstrap._engine import replicate_estimate as replicate_estimate
from evalstats.bootstrap._engine import replicate_interval as replicate_interval
from evalstats.bootstrap._multi_rater import (
    _agreement_multi_stats as _agreement_multi_stats,
)
from evalstats.bootstrap._multi_rater import (
    _fleiss_stats as _fleiss_stats,
)
from evalstats.bootstrap._multi_rater import (
    _gwet_multi_stats as _gwet_multi_stats,
)
from evalstats.bootstrap._multi_rater import (
    _MultiRaterStats as _MultiRaterStats,
)
from evalstats.bootstrap._multi_rater import (
    bootstrap_fleiss_kappa,
    bootstrap_gwet_ac1_multi,
    bootstrap_percent_agreement_multi,
)
from evalstats.bootstrap._two_rater import (
    bootstrap_accuracy,
    bootstrap_alpha,
    bootstrap_correlation,
    bootstrap_kappa,
    bootstrap_mean,
)
from evalstats.intervals import wilson_interval
from evalstats.options import CI, DEFAULT_OPTIONS, BootstrapOptions

__all__ = [
    "CI",
    "DEFAULT_OPTIONS",
    "BootstrapOptions",
    "bootstrap_accuracy",
    "bootstrap_alpha",
    "bootstrap_correlation",
    "bootstrap_fleiss_kappa",
    "bootstrap_from_item_stats",
    "bootstrap_gwet_ac1_multi",
    "bootstrap_items",
    "bootstrap_kappa",
    "bootstrap_mean",
    "bootstrap_percent_agreement_multi",
    "resample_counts",
    "wilson_interval",
]
