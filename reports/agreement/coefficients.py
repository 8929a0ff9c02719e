"""Judge-human coefficients per kind of criterion, and the alternative annotator test.

Nominal scales (binary, categorical, and pairwise with its tie category) are compared with
the human majority; ordinal scales, and continuous judge scores of them, with the human mean
and its rounding; interval scales with the human mean (not rounded), and, where the criterion
has a pass_threshold, as pass/fail (score >= threshold) with the mean's pass/fail reading.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

import evalstats as es
from calibration.frames import CriterionRef
from evalstats.votes import vote_agreement

from .common import (
    FloatArray,
    bootstrap_options,
    est_dict,
    finite_or_none,
    scale_categories,
    scale_labels,
)
from .figures import with_and_without_ties


def nominal_metrics(
    crit: CriterionRef,
    j: FloatArray,
    h: FloatArray,
    items: npt.NDArray[np.int64],
    p: Mapping[str, Any],
    rng: np.random.Generator,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The JSON of `evalstats.nominal_agreement` (judge vs human majority) and its confusion."""
    res = es.nominal_agreement(
        j,
        h,
        items,
        n_categories=len(scale_categories(crit)),
        tie_category=0 if crit.scale == "pairwise" else None,
        rng=rng,
        options=bootstrap_options(p),
    )
    m: dict[str, Any] = {
        "accuracy": est_dict(res.accuracy),
        "kappa": est_dict(res.kappa),
        "gwet_ac1": est_dict(res.gwet_ac1),
        "macro_f1": est_dict(res.macro_f1),
        "macro_precision": est_dict(res.macro_precision),
        "macro_recall": est_dict(res.macro_recall),
    }
    if res.agreement_without_ties is not None:
        m["agreement_without_ties"] = est_dict(res.agreement_without_ties)
        m["agreement_with_ties"] = m["accuracy"]
    report = res.classification
    confusion = {
        "labels": scale_labels(crit),
        "matrix": report.confusion.matrix.astype(int).tolist(),
        "rows": "human majority",
        "columns": "judge",
        "per_class": [
            {"label": lab, "precision": pr, "recall": rc, "f1": f, "support": s}
            for lab, pr, rc, f, s in zip(
                scale_labels(crit),
                report.precision,
                report.recall,
                report.f1,
                report.support,
                strict=True,
            )
        ],
    }
    return m, confusion


def vote_metrics(
    crit: CriterionRef,
    j: FloatArray,
    votes: FloatArray,
    items: npt.NDArray[np.int64],
    p: Mapping[str, Any],
    rng: np.random.Generator,
) -> dict[str, Any]:
    """Judge vs every human vote (`evalstats.votes.vote_agreement`), beside the per-majority
    accuracy: with ties and, for pairwise scales, without (MT-Bench's two setups)."""
    return with_and_without_ties(crit, "agreement_per_vote", functools.partial(
        vote_agreement, j, votes, items, rng=rng, options=bootstrap_options(p)))


def ordinal_metrics(
    crit: CriterionRef,
    j: FloatArray,
    h_mean: FloatArray,
    h_round: FloatArray,
    items: npt.NDArray[np.int64],
    continuous: bool,
    p: Mapping[str, Any],
    rng: np.random.Generator,
) -> dict[str, Any]:
    """The JSON of `evalstats.ordinal_agreement` (judge vs human mean and its rounding)."""
    res = es.ordinal_agreement(
        j,
        h_mean,
        h_round,
        items,
        categories=scale_categories(crit),
        judge_continuous=continuous,
        rng=rng,
        options=bootstrap_options(p),
    )
    m: dict[str, Any] = {}
    if res.qwk is not None:
        m["qwk"] = est_dict(res.qwk)
    if res.alpha_ordinal is not None:
        m["alpha_ordinal"] = est_dict(res.alpha_ordinal)
    for name in ("spearman", "kendall", "pearson", "mae", "signed_bias"):
        m[name] = est_dict(getattr(res, name))
    return m


def interval_metrics(
    crit: CriterionRef,
    j: FloatArray,
    h_mean: FloatArray,
    items: npt.NDArray[np.int64],
    p: Mapping[str, Any],
    rng: np.random.Generator,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """An interval criterion's coefficients: judge vs the human mean (not rounded).

    Krippendorff's alpha at the interval level of the pair (judge, human mean); Spearman,
    Kendall tau-b and Pearson; MAE and signed bias (`evalstats.ordinal_agreement` with the
    judge as continuous: no scale points to round to). With a pass_threshold also the
    pass/fail figures (accuracy, Cohen's kappa: score >= threshold against mean >= threshold)
    and their confusion matrix; without one those are left out (the report warns once per
    criterion), never computed at an invented cut.
    """
    res = es.ordinal_agreement(
        j, h_mean, h_mean, items, categories=[], judge_continuous=True, rng=rng,
        options=bootstrap_options(p),
    )
    pair = np.vstack([j, h_mean])
    # A cell where every score is the same makes alpha 0/0: the NaN is the answer.
    with np.errstate(divide="ignore", invalid="ignore"):
        point = es.krippendorff_alpha(pair, level="interval")
    interval = (
        es.alpha_clustered(
            pair, items, level_of_measurement="interval", value_domain=None, rng=rng,
            options=bootstrap_options(p),
        )
        if j.size >= 2
        else None
    )
    m: dict[str, Any] = {"alpha_interval": est_dict(es.with_interval(point, interval))}
    for name in ("spearman", "kendall", "pearson", "mae", "signed_bias"):
        m[name] = est_dict(getattr(res, name))
    if crit.pass_threshold is None:
        return m, None
    t = float(crit.pass_threshold)
    jb = (j >= t).astype(np.float64)
    hb = (h_mean >= t).astype(np.float64)
    nominal = es.nominal_agreement(jb, hb, items, n_categories=2, rng=rng,
                                   options=bootstrap_options(p))
    m["pass_accuracy"] = est_dict(nominal.accuracy)
    m["pass_kappa"] = est_dict(nominal.kappa)
    report = nominal.classification
    labels = ["fail", "pass"]
    confusion = {
        "labels": labels,
        "matrix": report.confusion.matrix.astype(int).tolist(),
        "rows": f"human mean >= {t:g}",
        "columns": f"judge >= {t:g}",
        "per_class": [
            {"label": lab, "precision": pr, "recall": rc, "f1": f, "support": s}
            for lab, pr, rc, f, s in zip(
                labels, report.precision, report.recall, report.f1, report.support, strict=True
            )
        ],
    }
    return m, confusion


def primary_metric_for(crit: CriterionRef, continuous: bool) -> str:
    if continuous:
        return "spearman"
    if crit.scale == "interval":
        return "alpha_interval"
    return "qwk" if crit.scale == "ordinal" else "kappa"


def alt_test_figures(
    crit: CriterionRef, j: FloatArray, sub: FloatArray, p: Mapping[str, Any]
) -> dict[str, Any]:
    active = (~np.isnan(sub)).any(axis=1)
    res = es.alt_test(
        j,
        sub[active],
        epsilon=p["epsilon"],
        alignment="neg_abs" if crit.scale in ("ordinal", "interval") else "accuracy",
        q=p["q"],
        min_items=p["min_items"],
        min_annotators=p["min_alt_annotators"],
    )
    return {
        "winning_rate": finite_or_none(res.value),
        "passed": bool(res.passed),
        "advantage_probability": finite_or_none(res.advantage_probability),
        "epsilon": res.epsilon,
        "q": res.q,
        "alignment": res.alignment,
        "n_tested": len(res.annotators),
        "n_skipped": len(res.skipped_annotators),
        "method": res.method,
        "warnings": list(res.warnings),
        "annotators": [
            {
                "rho_judge": finite_or_none(a.rho_judge),
                "rho_human": finite_or_none(a.rho_human),
                "n_items": a.n_items,
                "p_value": finite_or_none(a.p_value),
                "p_adjusted": finite_or_none(a.p_adjusted),
                "rejected": a.rejected,
            }
            for a in res.annotators
        ],
    }


__all__ = [
    "alt_test_figures",
    "interval_metrics",
    "nominal_metrics",
    "ordinal_metrics",
    "primary_metric_for",
    "vote_metrics",
]
