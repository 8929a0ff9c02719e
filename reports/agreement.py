"""The agreement report computation: frames in, a JSON-ready result out (no ORM access).

For every judge version x criterion x stratum ("overall", each dimension's labels, and the
crosses asked for) the cell holds the coefficients suited to the scale with item-clustered
bootstrap intervals, the human-human ceiling on the same subjects, the alternative annotator
test and a verdict by the rule written into the result (`rule_text`). Statistics, intervals
clustered by item included, come from evalstats (`evalstats.clustered`); this module picks the
subjects of each cell and shapes the results into the stored JSON.

Codes: nominal scales use category indices in the criterion's value order (binary: fail 0,
pass 1); pairwise uses tie 0, A 1, B 2; ordinal and continuous scores are the numbers.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

try:  # optional: see _one_blas_thread
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - exercised only where threadpoolctl is missing
    threadpool_limits = None

import evalstats as es
from calibration.frames import CriterionInfo, JudgeInfo, RatingData, value_text
from evalstats.clustered import coarsen, finite_percentile_interval, rank_corr_rows
from reviewhub.errors import ValidationFailed
from studies.strata import cross_label

RESULT_VERSION = 1
# Threads computing criteria and judge versions side by side (see compute_report); 1 computes
# them in turn, in the calling thread. Without threadpoolctl, BLAS keeps its own threads and a
# second report thread only competes with them for the cores (see _one_blas_thread).
DEFAULT_WORKERS = 2 if threadpool_limits is not None else 1
# Per-pair human kappas are listed in the ceiling when there are at most this many pairs.
MAX_LISTED_PAIRS = 45
FloatArray = npt.NDArray[np.float64]

TRUSTWORTHY = "trustworthy"
NOT_TRUSTWORTHY = "not trustworthy"
TOO_FEW = "too few labels"

# Calderon, Reichart & Dror (2025), as documented in evalstats.alt_test.
EPSILON_BY_ANNOTATOR_TYPE = {"expert": 0.2, "skilled": 0.15, "crowd": 0.1}

DEFAULT_PARAMS: dict[str, Any] = {
    "seed": 0,
    "n_resamples": 1000,
    "ci": "bca",
    "level": 0.95,
    "min_items": 30,
    "annotator_type": "skilled",
    "epsilon": None,  # None: EPSILON_BY_ANNOTATOR_TYPE[annotator_type]
    "q": 0.05,
    "margin": 0.05,
    "min_alt_annotators": 2,
    "min_pair_items": 10,
    "crosses": [],
    "strata": None,  # None: every dimension
    "criteria": None,
    "judges": None,
    "candidates": None,
    "system_level": False,
    "disagreement_gap": 1.0,
    "max_examples": 200,
}


def params_validate(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """Fill defaults and check types; raise ValidationFailed naming each bad parameter."""
    raw = dict(raw or {})
    errors: list[dict[str, str]] = []
    unknown = sorted(set(raw) - set(DEFAULT_PARAMS))
    for key in unknown:
        errors.append({"path": f"params.{key}", "message": "unknown parameter"})
    p = {**DEFAULT_PARAMS, **{k: v for k, v in raw.items() if k in DEFAULT_PARAMS}}

    def need(cond: bool, key: str, message: str) -> None:
        if not cond:
            errors.append({"path": f"params.{key}", "message": message})

    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    def is_num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    need(is_int(p["seed"]) and 0 <= p["seed"] < 2**63, "seed", "a non-negative integer")
    need(
        is_int(p["n_resamples"]) and 100 <= p["n_resamples"] <= 20000,
        "n_resamples",
        "an integer from 100 to 20000",
    )
    need(p["ci"] in ("bca", "percentile"), "ci", "'bca' or 'percentile'")
    need(is_num(p["level"]) and 0.5 <= p["level"] < 1, "level", "a number in [0.5, 1)")
    need(is_int(p["min_items"]) and 2 <= p["min_items"] <= 100000, "min_items", "an integer >= 2")
    need(
        p["annotator_type"] in EPSILON_BY_ANNOTATOR_TYPE,
        "annotator_type",
        "one of " + ", ".join(EPSILON_BY_ANNOTATOR_TYPE),
    )
    need(
        p["epsilon"] is None or (is_num(p["epsilon"]) and 0 <= p["epsilon"] < 1),
        "epsilon",
        "null or a number in [0, 1)",
    )
    need(is_num(p["q"]) and 0 < p["q"] < 1, "q", "a number in (0, 1)")
    need(is_num(p["margin"]) and 0 <= p["margin"] <= 1, "margin", "a number in [0, 1]")
    need(
        is_int(p["min_alt_annotators"]) and p["min_alt_annotators"] >= 2,
        "min_alt_annotators",
        "an integer >= 2",
    )
    need(
        is_int(p["min_pair_items"]) and p["min_pair_items"] >= 2,
        "min_pair_items",
        "an integer >= 2",
    )
    need(isinstance(p["system_level"], bool), "system_level", "true or false")
    need(
        is_num(p["disagreement_gap"]) and p["disagreement_gap"] > 0,
        "disagreement_gap",
        "a positive number",
    )
    need(
        is_int(p["max_examples"]) and 0 <= p["max_examples"] <= 10000,
        "max_examples",
        "an integer from 0 to 10000",
    )
    crosses = p["crosses"]
    ok_crosses = isinstance(crosses, list) and all(
        isinstance(c, (list, tuple))
        and len(c) == 2
        and all(isinstance(x, str) for x in c)
        and c[0] != c[1]
        for c in crosses
    )
    need(ok_crosses, "crosses", "a list of [dimension, dimension] pairs")
    for key in ("strata", "criteria", "candidates"):
        v = p[key]
        need(
            v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
            key,
            "null or a list of strings",
        )
    v = p["judges"]
    need(
        v is None or (isinstance(v, list) and all(is_int(x) for x in v)),
        "judges",
        "null or a list of judge version ids",
    )
    if errors:
        raise ValidationFailed(
            f"The report parameters did not validate: {errors[0]['path']}: {errors[0]['message']}",
            details={"errors": errors},
        )
    p["crosses"] = [list(c) for c in p["crosses"]]
    if p["epsilon"] is None:
        p["epsilon"] = EPSILON_BY_ANNOTATOR_TYPE[p["annotator_type"]]
    p["level"] = float(p["level"])
    return p


def rule_text(p: Mapping[str, Any]) -> str:
    """The verdict rule, written out with the parameters in force."""
    return (
        f"A cell (judge version x criterion x stratum) with fewer than {p['min_items']} subjects "
        "rated by both the judge and at least one human is 'too few labels'. Otherwise, when at "
        f"least {p['min_alt_annotators']} annotators each share {p['min_items']} or more "
        "subjects with the judge and another human, the alternative annotator test decides "
        f"(Calderon, Reichart & Dror 2025; epsilon = {p['epsilon']:g} for "
        f"{p['annotator_type']} annotators, Benjamini-Yekutieli at q = {p['q']:g}): "
        "'trustworthy' iff the judge's winning rate is at least 0.5. Without that overlap, the "
        "judge's primary coefficient against the human consensus (Cohen's kappa for binary, "
        "categorical and pairwise criteria, quadratic-weighted kappa for ordinal ones) is "
        "compared with the human ceiling on the same subjects (mean pairwise Cohen's kappa "
        "between annotators, quadratic-weighted for ordinal; Krippendorff's alpha when no pair "
        f"shares {p['min_pair_items']} subjects): 'trustworthy' iff the lower end of the "
        f"judge's {p['level']:.0%} interval is at least the ceiling minus {p['margin']:g}. "
        "Continuous-score judges have no kappa and are decided by the alternative annotator test "
        "only. With no ceiling to compare against, the cell is 'too few labels'. Intervals: "
        f"{p['ci']} bootstrap, {p['n_resamples']} resamples of items (all ratings of an item "
        f"move together), seed {p['seed']}. Human consensus: majority vote, ties broken by the "
        "first annotator (lowest account id; for imports the order of first appearance) whose "
        "label has the top count; for ordinal criteria the mean (rounded half up where a scale "
        "point is needed)."
    )


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _num(x: Any) -> float | None:
    if x is None:
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def est_dict(e: Any) -> dict[str, Any]:
    """A result dataclass as JSON: value, interval, n, method, warnings (NaN -> null)."""
    if e is None:
        return {
            "value": None,
            "ci_low": None,
            "ci_high": None,
            "n": 0,
            "method": "",
            "warnings": [],
        }
    out = {
        "value": _num(e.value),
        "ci_low": _num(getattr(e, "ci_low", None)),
        "ci_high": _num(getattr(e, "ci_high", None)),
        "n": int(getattr(e, "n_items", 0) or 0),
        "method": str(getattr(e, "method", "")),
        "warnings": list(getattr(e, "warnings", ()) or ()),
    }
    p = getattr(e, "p_value", None)
    if p is not None:
        out["p_value"] = _num(p)
    return out


def _options(p: Mapping[str, Any]) -> es.BootstrapOptions:
    """The bootstrap settings of validated report parameters."""
    return es.BootstrapOptions(
        n_resamples=p["n_resamples"], ci=p["ci"], level=p["level"], min_items=p["min_items"]
    )


def _cell_rng(seed: int, *parts: object) -> np.random.Generator:
    """A generator per cell, so one cell's numbers do not depend on which other cells exist."""
    material = [seed] + [zlib.crc32(str(p).encode()) for p in parts]
    return np.random.default_rng(material)


@dataclass
class _Stratum:
    dimension: str
    label: str
    mask: npt.NDArray[np.bool_]

    def as_dict(self) -> dict[str, str]:
        return {"dimension": self.dimension, "label": self.label}


@dataclass
class _HumanBlock:
    subjects: npt.NDArray[np.int64]
    humans: npt.NDArray[np.int64]
    matrix: FloatArray  # humans x subjects (codes, NaN missing)
    consensus: FloatArray  # majority code or mean
    rounded: FloatArray  # ordinal: mean rounded half up; nominal: = consensus
    human_num_mean: FloatArray  # mean of value_num readings (length / self-preference audits)
    items: npt.NDArray[np.int64]
    strata: list[_Stratum]


def _categories(crit: CriterionInfo) -> list[float]:
    if crit.scale == "pairwise":
        return [0.0, 1.0, 2.0]
    if crit.scale == "binary":
        return [0.0, 1.0]
    if crit.scale == "ordinal":
        return [float(v) for v in crit.values]
    return [float(i) for i in range(len(crit.values))]


def _labels(crit: CriterionInfo) -> list[str]:
    if crit.scale == "pairwise":
        return ["tie", "A", "B"]
    if crit.scale == "binary":
        return ["fail", "pass"]
    return list(crit.values)


def _numeric_reading(crit: CriterionInfo, codes: FloatArray) -> FloatArray | None:
    """value_num of codes (pairwise A 1 / tie .5 / B 0; binary; ordinal) or None (categorical)."""
    if crit.scale == "pairwise":
        return np.select([codes == 1, codes == 2, codes == 0], [1.0, 0.0, 0.5], np.nan)
    if crit.scale in ("binary", "ordinal"):
        return codes
    return None


def _strata_for(
    data: RatingData, items: npt.NDArray[np.int64], p: Mapping[str, Any]
) -> list[_Stratum]:
    n = items.size
    out = [_Stratum("", "overall", np.ones(n, dtype=bool))]
    dims = [d for d in data.dimensions if p["strata"] is None or d in p["strata"]]
    labels: dict[str, npt.NDArray[np.object_]] = {}
    frame = data.items.reindex(items)
    for d in set(dims) | {x for c in p["crosses"] for x in c}:
        if d in frame.columns:
            labels[d] = frame[d].fillna("unknown").to_numpy(dtype=object)
    for d in dims:
        arr = labels[d]
        for lab in sorted(pd.unique(arr)):
            out.append(_Stratum(d, str(lab), arr == lab))
    for a, b in p["crosses"]:
        if a not in labels or b not in labels:
            continue
        crossed = np.array(
            [cross_label(x, y) for x, y in zip(labels[a], labels[b], strict=True)], dtype=object
        )
        for lab in sorted(pd.unique(crossed)):
            out.append(_Stratum(cross_label(a, b), str(lab), crossed == lab))
    return out


def _human_block(data: RatingData, crit: CriterionInfo, p: Mapping[str, Any]) -> _HumanBlock | None:
    r = data.ratings
    h = r[(~r["is_judge"].to_numpy()) & (r["criterion"].to_numpy() == crit.id)]
    if h.empty:
        return None
    subjects = np.unique(h["subject"].to_numpy())
    humans = np.unique(h["rater"].to_numpy())
    matrix = np.full((humans.size, subjects.size), np.nan)
    matrix[
        np.searchsorted(humans, h["rater"].to_numpy()),
        np.searchsorted(subjects, h["subject"].to_numpy()),
    ] = h["num"].to_numpy()
    cats = _categories(crit)
    if crit.scale == "ordinal":
        consensus = np.asarray(es.mean_consensus(matrix).labels, dtype=np.float64)
        rounded = np.floor(consensus + 0.5)
    else:
        consensus = np.asarray(
            es.majority_vote(matrix, tie_break="first", categories=cats).labels, dtype=np.float64
        )
        rounded = consensus
    num = _numeric_reading(crit, matrix)
    if num is not None:
        with np.errstate(invalid="ignore"):
            human_num_mean = np.asarray(es.mean_consensus(num).labels, dtype=np.float64)
    else:
        human_num_mean = np.full(subjects.size, np.nan)
    items = data.subjects.loc[subjects, "item"].to_numpy(dtype=np.int64)
    return _HumanBlock(
        subjects=subjects,
        humans=humans,
        matrix=matrix,
        consensus=consensus,
        rounded=rounded,
        human_num_mean=human_num_mean,
        items=items,
        strata=_strata_for(data, items, p),
    )


# ---------------------------------------------------------------------------------------------
# Ceiling
# ---------------------------------------------------------------------------------------------


def _ceiling(
    crit: CriterionInfo,
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
    crit: CriterionInfo,
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
    level: Literal["ordinal", "nominal"] = "ordinal" if crit.scale == "ordinal" else "nominal"
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
        point = es.krippendorff_alpha(sub[:, pairable], level=level, value_domain=cats)
    interval = es.alpha_clustered(
        sub,
        items,
        level_of_measurement=level,
        value_domain=cats,
        rng=rng,
        options=_options(p),
    )
    out["alpha"] = est_dict(es.with_interval(point, interval))
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


# ---------------------------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------------------------


def _nominal_metrics(
    crit: CriterionInfo,
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
        n_categories=len(_categories(crit)),
        tie_category=0 if crit.scale == "pairwise" else None,
        rng=rng,
        options=_options(p),
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
        "labels": _labels(crit),
        "matrix": report.confusion.matrix.astype(int).tolist(),
        "rows": "human majority",
        "columns": "judge",
        "per_class": [
            {"label": lab, "precision": pr, "recall": rc, "f1": f, "support": s}
            for lab, pr, rc, f, s in zip(
                _labels(crit),
                report.precision,
                report.recall,
                report.f1,
                report.support,
                strict=True,
            )
        ],
    }
    return m, confusion


def _ordinal_metrics(
    crit: CriterionInfo,
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
        categories=_categories(crit),
        judge_continuous=continuous,
        rng=rng,
        options=_options(p),
    )
    m: dict[str, Any] = {}
    if res.qwk is not None:
        m["qwk"] = est_dict(res.qwk)
    if res.alpha_ordinal is not None:
        m["alpha_ordinal"] = est_dict(res.alpha_ordinal)
    for name in ("spearman", "kendall", "pearson", "mae", "signed_bias"):
        m[name] = est_dict(getattr(res, name))
    return m


def _primary_metric(crit: CriterionInfo, continuous: bool) -> str:
    if continuous:
        return "spearman"
    return "qwk" if crit.scale == "ordinal" else "kappa"


def _alt_test(
    crit: CriterionInfo, j: FloatArray, sub: FloatArray, p: Mapping[str, Any]
) -> dict[str, Any]:
    active = (~np.isnan(sub)).any(axis=1)
    res = es.alt_test(
        j,
        sub[active],
        epsilon=p["epsilon"],
        alignment="neg_abs" if crit.scale == "ordinal" else "accuracy",
        q=p["q"],
        min_items=p["min_items"],
        min_annotators=p["min_alt_annotators"],
    )
    return {
        "winning_rate": _num(res.value),
        "passed": bool(res.passed),
        "advantage_probability": _num(res.advantage_probability),
        "epsilon": res.epsilon,
        "q": res.q,
        "alignment": res.alignment,
        "n_tested": len(res.annotators),
        "n_skipped": len(res.skipped_annotators),
        "method": res.method,
        "warnings": list(res.warnings),
        "annotators": [
            {
                "rho_judge": _num(a.rho_judge),
                "rho_human": _num(a.rho_human),
                "n_items": a.n_items,
                "p_value": _num(a.p_value),
                "p_adjusted": _num(a.p_adjusted),
                "rejected": a.rejected,
            }
            for a in res.annotators
        ],
    }


def _verdict(
    n: int,
    primary: dict[str, Any],
    ceiling: dict[str, Any],
    alt: dict[str, Any] | None,
    continuous: bool,
    p: Mapping[str, Any],
) -> tuple[str, str, str]:
    """(verdict, basis, reason) by the rule of `rule_text`."""
    if n < p["min_items"]:
        return (
            TOO_FEW,
            "min_items",
            f"{n} subjects with judge and human labels (< {p['min_items']})",
        )
    if alt is not None and alt["n_tested"] >= p["min_alt_annotators"]:
        rate = alt["winning_rate"] or 0.0
        verdict = TRUSTWORTHY if alt["passed"] else NOT_TRUSTWORTHY
        return (
            verdict,
            "alt_test",
            (
                f"alternative annotator test: winning rate {rate:.2f} over "
                f"{alt['n_tested']} annotators (needs >= 0.5), epsilon "
                f"{alt['epsilon']:g}"
            ),
        )
    if continuous:
        return (
            TOO_FEW,
            "none",
            (
                "continuous scores need the alternative annotator test, and too "
                "few annotators share enough subjects with the judge"
            ),
        )
    ceil = ceiling.get("point")
    low = primary.get("ci_low")
    if ceil is None or low is None:
        return TOO_FEW, "none", "no human-human overlap on these subjects to set a ceiling"
    verdict = TRUSTWORTHY if low >= ceil - p["margin"] else NOT_TRUSTWORTHY
    return (
        verdict,
        "ceiling",
        (
            f"interval lower bound {low:.3f} vs ceiling {ceil:.3f} "
            f"({ceiling['point_metric']}) - margin {p['margin']:g}"
        ),
    )


# ---------------------------------------------------------------------------------------------
# Bias audits, system level, examples
# ---------------------------------------------------------------------------------------------


def _bias(
    data: RatingData,
    crit: CriterionInfo,
    jv: JudgeInfo,
    block: _HumanBlock,
    idx: npt.NDArray[np.int64],
    j: FloatArray,
    p: Mapping[str, Any],
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    subj = data.subjects.loc[block.subjects[idx]]
    h_major = block.consensus[idx]
    h_num = block.human_num_mean[idx]
    base = {"judge_version": jv.id, "criterion": crit.id}
    options = _options(p)

    def add(audit: str, est: Any, note: str, **extra: Any) -> None:
        out.append({**base, "audit": audit, **est_dict(est), "note": note, **extra})

    if crit.scale == "pairwise":
        o = data.orders
        if len(o):
            sel = o[(o["criterion"] == crit.id) & (o["rater"] == jv.id)]
            if len(sel):
                pb = es.position_bias(sel["ab"].to_numpy(), sel["ba"].to_numpy(), level=p["level"])
                add(
                    "position: flip rate",
                    pb,
                    "share of pairs whose verdict changes when the order is swapped",
                    strict_flip_rate=_num(pb.strict_flip_rate),
                )
                add(
                    "position: first-slot preference",
                    pb.first_slot,
                    "share of decisive verdicts for the output shown first (0.5 = none)",
                )
        len_a = subj["length"].to_numpy(dtype=np.float64)
        len_b = subj["length_b"].to_numpy(dtype=np.float64)
        if np.isfinite(len_a).any():
            lt = es.longer_preference_among_ties(
                j, h_major, len_a, len_b, tie_label=0.0, first=1.0, second=2.0, level=p["level"]
            )
            add(
                "length: longer preferred among human ties",
                lt,
                "share of decisive judge verdicts for the longer output where humans saw a tie",
            )
            j_num = _numeric_reading(crit, j)
            if j.size >= 3 and j_num is not None:
                diff, binned = coarsen(len_a - len_b, j_num - h_num)
                lb = es.length_bias(diff, j_num, h_num, rng=rng, options=options)
                add(
                    "length: residual vs length difference",
                    lb,
                    "Spearman of (judge - human preference for A) with len(A) - len(B)"
                    + (" (in 20 quantile bins)" if binned else ""),
                )
        if jv.model_family:
            fam = {cid: f for cid, (_, f) in data.candidates.items()}
            fa = subj["candidate"].map(fam).fillna("").to_numpy(dtype=object)
            fb = subj["candidate_b"].map(fam).fillna("").to_numpy(dtype=object)
            same = np.where(
                (fa == jv.model_family) & (fb != jv.model_family),
                1.0,
                np.where((fb == jv.model_family) & (fa != jv.model_family), 2.0, 0.0),
            )
            if (same > 0).any():
                sp = es.self_preference(
                    j,
                    h_major,
                    same,
                    tie_label=0.0,
                    first=1.0,
                    second=2.0,
                    rng=rng,
                    options=options,
                )
                add(
                    "self-preference",
                    sp,
                    f"judge minus human win rate of '{jv.model_family}' outputs",
                    n_pairs=int((same > 0).sum()),
                )
        return out
    j_num = _numeric_reading(crit, j) if jv.value_type != "continuous" else j
    if j_num is None:
        return out
    length = subj["length"].to_numpy(dtype=np.float64)
    if j.size >= 3 and np.isfinite(length).all():
        length, binned = coarsen(length, j_num - h_num)
        lb = es.length_bias(length, j_num, h_num, rng=rng, options=options)
        add(
            "length: residual vs length",
            lb,
            "Spearman of (judge - human mean) with the output length in characters"
            + (" (in 20 quantile bins)" if binned else ""),
        )
    if jv.model_family:
        fam = {cid: f for cid, (_, f) in data.candidates.items()}
        same = subj["candidate"].map(fam).fillna("").to_numpy(dtype=object) == jv.model_family
        if same.any() and (~same).any():
            est = es.group_difference_clustered(
                j_num - h_num,
                same,
                block.items[idx],
                rng=rng,
                options=options,
                method="self_preference(mean residual own family - others)",
            )
            add(
                "self-preference",
                est,
                f"mean (judge - human) on '{jv.model_family}' outputs minus on the others",
                n_pairs=int(same.sum()),
            )
    return out


def _system_level(
    data: RatingData,
    crit: CriterionInfo,
    jv: JudgeInfo,
    block: _HumanBlock,
    idx: npt.NDArray[np.int64],
    j: FloatArray,
    p: Mapping[str, Any],
    rng: np.random.Generator,
) -> dict[str, Any] | None:
    """Correlation of candidate means (judge vs human mean), items resampled for the interval."""
    h = block.consensus[idx] if crit.scale == "ordinal" else block.human_num_mean[idx]
    jn = j if jv.value_type == "continuous" else _numeric_reading(crit, j)
    if jn is None or crit.scale == "pairwise":
        return None
    cands = data.subjects.loc[block.subjects[idx], "candidate"].to_numpy(dtype=np.int64)
    ucand, ci = np.unique(cands, return_inverse=True)
    if ucand.size < 3:
        return None
    uitem, ii = np.unique(block.items[idx], return_inverse=True)
    m = ucand.size
    sj = np.zeros((uitem.size, m))
    sh = np.zeros((uitem.size, m))
    cnt = np.zeros((uitem.size, m))
    np.add.at(sj, (ii, ci), jn)
    np.add.at(sh, (ii, ci), h)
    np.add.at(cnt, (ii, ci), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mj = sj.sum(0) / cnt.sum(0)
        mh = sh.sum(0) / cnt.sum(0)
    w = es.resample_counts(uitem.size, p["n_resamples"], rng).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        bj = (w @ sj) / (w @ cnt)
        bh = (w @ sh) / (w @ cnt)
    out: dict[str, Any] = {
        "judge_version": jv.id,
        "criterion": crit.id,
        "n_candidates": m,
        "n_items": int(uitem.size),
        "n_subjects": int(idx.size),
        "candidates": [
            {"name": data.candidates[int(c)][0], "judge_mean": _num(a), "human_mean": _num(b)}
            for c, a, b in zip(ucand, mj, mh, strict=True)
        ],
    }
    for method in ("kendall", "spearman", "pearson"):
        point = es.correlation(mj, mh, method=method)
        lo, hi = finite_percentile_interval(rank_corr_rows(bj, bh, method), p["level"])
        out[method] = {
            **est_dict(point),
            "ci_low": lo,
            "ci_high": hi,
            "method": f"{point.method} over {m} candidate means; interval: percentile "
            f"bootstrap (B={p['n_resamples']}, items resampled)",
        }
    return out


def _examples(
    data: RatingData,
    crit: CriterionInfo,
    jv: JudgeInfo,
    block: _HumanBlock,
    idx: npt.NDArray[np.int64],
    j: FloatArray,
    p: Mapping[str, Any],
) -> dict[str, Any]:
    continuous = jv.value_type == "continuous"
    if crit.scale == "ordinal":
        gap = np.abs(j - block.consensus[idx])
        dis = gap >= p["disagreement_gap"]
    else:
        gap = (j != block.consensus[idx]).astype(np.float64)
        dis = gap > 0
    order = np.lexsort((block.subjects[idx], -gap))
    picked = [i for i in order if dis[i]][: p["max_examples"]]
    ext = data.items["external_id"]
    rows = []
    for i in picked:
        s = int(block.subjects[idx][i])
        hv = block.consensus[idx][i]
        rows.append(
            {
                "subject": s,
                "item": str(ext.get(int(block.items[idx][i]), "")),
                "judge": value_text(crit.scale, crit.values, float(j[i]), continuous)
                if crit.scale != "categorical"
                else crit.values[int(j[i])],
                "human": (
                    f"{hv:.2f}"
                    if crit.scale == "ordinal"
                    else value_text(crit.scale, crit.values, float(hv), False)
                ),
            }
        )
    return {
        "judge_version": jv.id,
        "criterion": crit.id,
        "n_disagreements": int(dis.sum()),
        "n_subjects": int(idx.size),
        "rule": (
            "|judge - human mean| >= " + f"{p['disagreement_gap']:g}"
            if crit.scale == "ordinal"
            else "judge != human majority"
        ),
        "examples": rows,
    }


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------


def input_fingerprint(data: RatingData) -> str:
    """sha256 over the sorted (subject, criterion, rater, value) rows the report reads."""
    r = data.ratings
    if r.empty:
        return hashlib.sha256(b"").hexdigest()
    # np.lexsort is stable like the mergesort of sort_values: the same order, ties included.
    subj_all = r["subject"].to_numpy(dtype=np.int64)
    crit_all = r["criterion"].to_numpy(dtype=np.int64)
    judge_all = r["is_judge"].to_numpy(dtype=bool)
    order = np.lexsort((r["rater"].to_numpy(dtype=np.int64), judge_all, crit_all, subj_all))
    h = hashlib.sha256()
    subj = subj_all[order]
    crit = crit_all[order]
    rater = r["rater"].to_numpy(dtype=np.int64)[order] * 2 + judge_all[order].astype(np.int64)
    h.update(np.ascontiguousarray(np.column_stack([subj, crit, rater])).tobytes())
    nums = r["num"].to_numpy(dtype=np.float64)[order]
    cont = r["continuous"].to_numpy(dtype=bool)[order]
    # value_text once per distinct (criterion, code, continuous), not once per rating.
    texts = np.empty(nums.size, dtype=object)
    for cid in np.unique(crit):
        c = data.criteria[int(cid)]
        for is_cont in (False, True):
            rows = np.flatnonzero((crit == cid) & (cont == is_cont))
            if rows.size == 0:
                continue
            # Distinct bit patterns, so that -0.0 and 0.0 keep their own repr.
            bits, inverse = np.unique(nums[rows].view(np.int64), return_inverse=True)
            codes = bits.view(np.float64)
            labels = [value_text(c.scale, c.values, float(x), is_cont) for x in codes]
            texts[rows] = np.asarray(labels, dtype=object)[inverse]
    h.update("\x1f".join(texts.tolist()).encode())
    return h.hexdigest()


@dataclass
class _Part:
    """What one criterion or one judge of it adds to the report (merged in report order)."""

    strata: list[tuple[str, str]] = field(default_factory=list)
    cells: list[dict[str, Any]] = field(default_factory=list)
    confusion: list[dict[str, Any]] = field(default_factory=list)
    bias: list[dict[str, Any]] = field(default_factory=list)
    ceiling: list[dict[str, Any]] = field(default_factory=list)
    system: list[dict[str, Any]] = field(default_factory=list)
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class _CriterionBase:
    """A criterion's human block and ceilings, shared by the judge parts of the criterion."""

    crit: CriterionInfo
    block: _HumanBlock | None
    ceiling_cache: dict[bytes, dict[str, Any]]
    part: _Part
    judges: list[tuple[int, pd.DataFrame]]


def _criterion_base(
    data: RatingData, crit: CriterionInfo, crit_judges: pd.DataFrame, p: Mapping[str, Any]
) -> _CriterionBase:
    """Human block, strata and ceilings of a criterion, and its judge versions' rows."""
    block = _human_block(data, crit, p)
    out = _Part()
    base = _CriterionBase(crit=crit, block=block, ceiling_cache={}, part=out, judges=[])
    if block is None:
        if len(crit_judges):
            out.warnings.append(
                f"criterion '{crit.key}': judge verdicts but no human labels; nothing to compare"
            )
        return base
    for st in block.strata:
        out.strata.append((st.dimension, st.label))
        idx = np.nonzero(st.mask)[0]
        ceil = _ceiling(crit, block, idx, p, st, base.ceiling_cache)
        out.ceiling.append({"criterion": crit.id, "judge_version": None, **st.as_dict(), **ceil})
    raters = crit_judges["rater"].to_numpy()
    base.judges = [
        (int(jv_id), crit_judges[raters == jv_id]) for jv_id in sorted(pd.unique(raters))
    ]
    return base


def _judge_part(
    data: RatingData, base: _CriterionBase, jv_id: int, jr: pd.DataFrame, p: Mapping[str, Any]
) -> _Part:
    """Cells, confusion matrices, bias audits, system level and examples of one judge version."""
    crit, block, ceiling_cache = base.crit, base.block, base.ceiling_cache
    assert block is not None  # only criteria with human labels have judge parts
    out = _Part()
    jv = data.judges[jv_id]
    jser = pd.Series(jr["num"].to_numpy(), index=jr["subject"].to_numpy())
    j_all = jser.reindex(block.subjects).to_numpy(dtype=np.float64)
    both = ~np.isnan(j_all) & ~np.isnan(block.consensus)
    continuous = jv.value_type == "continuous"
    if continuous and crit.scale != "ordinal":
        return out
    primary_name = _primary_metric(crit, continuous)
    for st in block.strata:
        idx = np.nonzero(both & st.mask)[0]
        if idx.size == 0:
            continue
        rng = _cell_rng(p["seed"], jv.id, crit.id, st.dimension, st.label)
        j = j_all[idx]
        items = block.items[idx]
        if crit.scale == "ordinal":
            metrics = _ordinal_metrics(
                crit, j, block.consensus[idx], block.rounded[idx], items, continuous, p, rng
            )
            confusion = None
        else:
            metrics, confusion = _nominal_metrics(crit, j, block.consensus[idx], items, p, rng)
        # Another judge part may fill the cache at the same time: a ceiling is a pure function
        # of its subjects (own generator), so either copy is the same.
        ceil = _ceiling(crit, block, idx, p, st, ceiling_cache)
        sub = block.matrix[:, idx]
        multi = int(((~np.isnan(sub)).sum(axis=0) >= 2).sum())
        alt = _alt_test(crit, j, sub, p) if multi >= 2 and idx.size >= p["min_items"] else None
        verdict, basis, reason = _verdict(
            int(idx.size), metrics.get(primary_name, {}), ceil, alt, continuous, p
        )
        out.cells.append(
            {
                "judge_version": jv.id,
                "criterion": crit.id,
                **st.as_dict(),
                "n_subjects": int(idx.size),
                "n_items": int(np.unique(items).size),
                "n_humans": int((~np.isnan(sub)).any(axis=1).sum()),
                "primary_metric": primary_name,
                "metrics": metrics,
                "ceiling": ceil,
                "alt_test": alt,
                "verdict": verdict,
                "verdict_basis": basis,
                "verdict_reason": reason,
            }
        )
        if confusion is not None:
            out.confusion.append(
                {"judge_version": jv.id, "criterion": crit.id, **st.as_dict(), **confusion}
            )
    idx = np.nonzero(both)[0]
    if idx.size == 0:
        return out
    rng = _cell_rng(p["seed"], "bias", jv.id, crit.id)
    out.bias.extend(_bias(data, crit, jv, block, idx, j_all[idx], p, rng))
    if p["system_level"]:
        rng = _cell_rng(p["seed"], "system", jv.id, crit.id)
        sysl = _system_level(data, crit, jv, block, idx, j_all[idx], p, rng)
        if sysl is not None:
            per_subject = next((c for c in out.cells if c["dimension"] == ""), None)
            if per_subject is not None:
                sysl["per_subject_kendall"] = per_subject["metrics"].get("kendall")
            out.system.append(sysl)
    out.disagreements.append(_examples(data, crit, jv, block, idx, j_all[idx], p))
    return out


@contextmanager
def _one_blas_thread() -> Iterator[None]:
    """Single-threaded BLAS while a report computes (when threadpoolctl is installed).

    The bootstrap's matrix products are small (1000 x a few hundred); OpenBLAS's own threads
    gain nothing on them and spin between calls, keeping a second core busy that the report's
    worker threads (and everything else on the machine) need. On the 2-core development box
    (medians of three runs at load 1.3) one report thread took 4.4 s either way, but burnt
    2.5 s more CPU with BLAS threads; two report threads took 2.8 s with one BLAS thread and
    4.2 s without the limit. It also makes the last bits of the products independent of the
    machine's core count (OpenBLAS splits large products by thread). The limit is
    process-wide: two reports computed at once in one process share it.
    """
    if threadpool_limits is None:
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def compute_report(
    data: RatingData, params: Mapping[str, Any], *, workers: int = DEFAULT_WORKERS
) -> dict[str, Any]:
    """The full agreement report for loaded rating data (see the module docstring).

    ``workers`` threads compute criteria, then judge versions, side by side; the result does
    not depend on it.
    """
    p = dict(params)
    result: dict[str, Any] = {
        "version": RESULT_VERSION,
        "rule": rule_text(p),
        "params": p,
        "criteria": [
            {
                "id": c.id,
                "key": c.key,
                "name": c.name,
                "scale": c.scale,
                "values": list(c.values),
                "rubric_version": c.rubric_version,
            }
            for c in data.criteria.values()
        ],
        "judges": [
            {
                "id": j.id,
                "judge": j.judge,
                "version": j.version,
                "label": j.label,
                "display": j.display,
                "model_family": j.model_family,
                "value_type": j.value_type,
                "kind": j.kind,
            }
            for j in data.judges.values()
        ],
        "strata": [],
        "cells": [],
        "confusion": [],
        "bias": [],
        "ceiling": [],
        "system": [],
        "disagreements": [],
        "warnings": [],
    }
    r = data.ratings
    judge_rows = r[r["is_judge"].to_numpy()]
    crits = list(data.criteria.values())
    # Look-up tables the threads share are built here, once, instead of lazily in a thread.
    for frame in (data.subjects, data.items):
        frame.index.get_indexer(frame.index[:1])

    def base(crit: CriterionInfo) -> _CriterionBase:
        return _criterion_base(
            data, crit, judge_rows[judge_rows["criterion"].to_numpy() == crit.id], p
        )

    def judge(unit: tuple[_CriterionBase, int, pd.DataFrame]) -> _Part:
        return _judge_part(data, unit[0], unit[1], unit[2], p)

    # Every cell, ceiling and audit has its own generator, seeded by what it is, so criteria
    # and judge versions are independent: threads change nothing but the wall time, and the
    # parts are merged in report order. The bootstrap's multinomial draws and matrix products
    # (most of the time) run without the GIL, so a second thread keeps a second core busy.
    with _one_blas_thread(), ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        run = map if workers <= 1 else pool.map
        bases = list(run(base, crits))
        units = [(b, jv_id, jr) for b in bases for jv_id, jr in b.judges]
        judge_parts = iter(list(run(judge, units)))
    seen_strata: dict[tuple[str, str], None] = {}
    for b in bases:
        for pt in [b.part] + [next(judge_parts) for _ in b.judges]:
            for key in pt.strata:
                seen_strata.setdefault(key, None)
            for name in ("cells", "confusion", "bias", "ceiling", "system", "disagreements"):
                result[name].extend(getattr(pt, name))
            result["warnings"].extend(pt.warnings)
    result["strata"] = [{"dimension": d, "label": lab} for d, lab in seen_strata]
    return result


def cells_for(
    result: Mapping[str, Any], *, criterion: int | None = None, judge_version: int | None = None
) -> list[dict[str, Any]]:
    """Cells of a stored result filtered by criterion and/or judge version."""
    return [
        c
        for c in result.get("cells", [])
        if (criterion is None or c["criterion"] == criterion)
        and (judge_version is None or c["judge_version"] == judge_version)
    ]


def lookup(result: Mapping[str, Any], kind: str) -> dict[int, dict[str, Any]]:
    """criteria / judges of a stored result by id."""
    return {int(x["id"]): x for x in result.get(kind, [])}


__all__ = [
    "DEFAULT_PARAMS",
    "NOT_TRUSTWORTHY",
    "TOO_FEW",
    "TRUSTWORTHY",
    "cells_for",
    "compute_report",
    "input_fingerprint",
    "lookup",
    "params_validate",
    "rule_text",
]
