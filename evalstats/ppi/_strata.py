"""Stratified PPI over the deployment mix, and paired differences of two candidates."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Unpack

import numpy as np
import numpy.typing as npt

from evalstats.ppi._common import (
    FloatArray,
    IntArray,
    Interval,
    PPIEstimate,
    PPIMeanOptions,
    _check_mix,
    _codes,
    _estimate,
    _few_labels,
    _interval_text,
    _level,
    _same_length,
    _vec,
    _welch_df,
)
from evalstats.ppi._means import _census_parts, ppi_mean

# --- strata and the deployment mix -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class StratifiedPPI:
    """Per-stratum estimates and their deployment-mix combination.

    ``per_stratum`` has an entry for every stratum code with at least one human label (in the
    data or the mix). ``mix`` is ``None`` when a stratum with a positive mix weight has no
    human label; those strata are listed in ``missing``. ``weights`` is the mix used.
    """

    per_stratum: dict[int, PPIEstimate]
    mix: PPIEstimate | None
    missing: tuple[int, ...]
    weights: dict[int, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (stratum codes become string keys)."""
        return {
            "per_stratum": {str(k): v.to_json() for k, v in sorted(self.per_stratum.items())},
            "mix": None if self.mix is None else self.mix.to_json(),
            "missing": list(self.missing),
            "weights": {str(k): v for k, v in sorted(self.weights.items())},
        }


def combine_strata(
    per_stratum: Mapping[int, PPIEstimate],
    mix: Mapping[int, float],
    *,
    method: str = "mix of per-stratum estimates",
    level: float | None = None,
) -> tuple[PPIEstimate | None, tuple[int, ...]]:
    """Combine per-stratum estimates with the mix: ``sum mix_s theta_s``, se from the strata.

    Returns ``(estimate, missing)``: ``missing`` lists the strata with a positive mix weight
    and no estimate, and the estimate is then ``None``. A stratum without an interval gives a
    mix value without an interval. Usable for human-only or judge-only per-stratum estimates as
    well as PPI ones. When every weighted stratum has a Student t interval (``df`` set), the
    mix has one too, with Welch-Satterthwaite degrees of freedom; otherwise it is normal.
    """
    weights = _check_mix(mix)
    active = {s: m for s, m in weights.items() if m > 0}
    missing = tuple(sorted(s for s in active if s not in per_stratum))
    if missing:
        return None, missing
    if level is None:
        levels = {per_stratum[s].level for s in active}
        level = levels.pop() if len(levels) == 1 else 0.95
    level = _level(level)
    value = sum(m * per_stratum[s].value for s, m in active.items())
    no_interval = sorted(s for s in active if per_stratum[s].se is None)
    warnings: list[str] = []
    se: float | None
    if no_interval:
        se = None
        warnings.append(
            "no interval: strata without an interval (fewer than 2 labels): "
            + ", ".join(str(s) for s in no_interval)
        )
    else:
        se = math.sqrt(sum(m**2 * (per_stratum[s].se or 0.0) ** 2 for s, m in active.items()))
    df: float | None = None
    if se is not None and all(per_stratum[s].df is not None for s in active):
        df = _welch_df([(m**2 * (per_stratum[s].se or 0.0) ** 2, per_stratum[s].df or 0.0)
                        for s, m in active.items()])
    if df is not None:
        method = method.replace("normal interval", _interval_text(df))
    for s in active:
        warnings.extend(f"stratum {s}: {w}" for w in per_stratum[s].warnings)
    left_out = sorted(s for s in per_stratum if s not in active)
    if left_out:
        warnings.append(
            "strata with data but no mix weight, left out of the mix: "
            + ", ".join(str(s) for s in left_out)
        )
    est = _estimate(
        value,
        se,
        n_labelled=sum(per_stratum[s].n_labelled for s in active),
        n_unlabelled=sum(per_stratum[s].n_unlabelled for s in active),
        lam=None,
        method=method,
        level=level,
        warnings=tuple(warnings),
        df=df,
    )
    return est, ()


def _bsum(idx: IntArray, vals: FloatArray, k: int) -> FloatArray:
    """Per-stratum sums of ``vals`` (strata coded 0..k-1 in ``idx``)."""
    return np.asarray(np.bincount(idx, weights=vals, minlength=k), dtype=np.float64)


def _strata_tuned_lambda(
    y: FloatArray, fl: FloatArray, sl: IntArray, fu: FloatArray, su: IntArray,
    wl: FloatArray, wun: FloatArray | None, n: FloatArray, big_n: FloatArray,
    mu: FloatArray, ss_u: FloatArray,
) -> FloatArray:
    """`_tuned_lambda` of every stratum at once, from per-stratum sums; the unlabelled set
    enters through its size ``big_n``, weighted mean ``mu`` and centred sum of squares ``ss_u``.
    Called under ``np.errstate`` (empty strata divide by zero and are masked out)."""
    k = len(n)
    has_u = big_n > 0
    theta1 = mu + _bsum(sl, wl * (y - fl), k) / n
    g = wl * (y - theta1[sl])
    gh = wl * (fl - theta1[sl])
    g_mean = _bsum(sl, g, k) / n
    gh_mean = _bsum(sl, gh, k) / n
    cov = 2.0 * _bsum(sl, (g - g_mean[sl]) * (gh - gh_mean[sl]), k) / n
    # ghu = wun * (fu - theta1): sum = swf' - theta1 sw, sum of squares by moments.
    if wun is None:
        m_all = (_bsum(sl, gh, k) + big_n * (mu - theta1)) / (n + big_n)
        ss_ghu = ss_u + big_n * (mu - theta1 - m_all) ** 2
    else:
        # With weights the judge's gradients are w (f - theta), not w f - theta: a
        # pass over them (an expansion in the weights' moments cancels badly).
        ghu = wun * (fu - theta1[su])
        m_all = (_bsum(sl, gh, k) + _bsum(su, ghu, k)) / (n + big_n)
        ss_ghu = _bsum(su, (ghu - m_all[su]) ** 2, k)
    ss = _bsum(sl, (gh - m_all[sl]) ** 2, k) + ss_ghu
    var = ss / (n + big_n - 1.0)
    denom = 2.0 * (1.0 + n / big_n) * var
    ok = (denom > 0) & np.isfinite(cov) & has_u
    return np.asarray(np.where(ok, np.clip(cov / np.where(ok, denom, 1.0), 0.0, 1.0), 0.0))


def _strata_census(
    codes: list[int], y: FloatArray, fl: FloatArray, sl: IntArray, wl: FloatArray,
    lam_s: FloatArray, n: FloatArray, big_n: FloatArray, var_r: FloatArray, var_i: FloatArray,
) -> None:
    """Replace ``var_r`` / ``var_i`` in place by the census design variances per stratum."""
    # The labelled set is small: its design variance per stratum from its own slices.
    for c in codes:
        if big_n[c] < n[c]:
            raise ValueError("census: f_unlabelled must hold the judge's scores on every "
                             "output, the labelled ones included")
        li = sl == c
        var_r[c], var_i[c] = _census_parts(y[li], fl[li], wl[li], float(lam_s[c]),
                                           int(big_n[c]), 0)


def _strata_estimates(
    codes: list[int], n: FloatArray, big_n: FloatArray, value: FloatArray, var: FloatArray,
    lam_s: FloatArray, *, tuned: bool, census: bool, weighted: str, level: float,
) -> dict[int, PPIEstimate]:
    """One `PPIEstimate` per stratum code from the per-stratum value and variance."""
    out: dict[int, PPIEstimate] = {}
    for c in codes:
        n_c, big_c = int(n[c]), int(big_n[c])
        warnings = list(_few_labels(n_c))
        if big_c == 0:
            how = "no unlabelled outputs: human labels only"
            warnings.append("no judge-only outputs: the estimate uses the human labels only")
        elif tuned:
            how = f"power-tuned lambda={float(lam_s[c]):.4g}"
        else:
            how = f"fixed lambda={float(lam_s[c]):.4g}"
        if census and big_c:
            how += "; judge term over every output, design-based variance"
        se = math.sqrt(float(var[c])) if n_c >= 2 else None
        out[c] = _estimate(
            float(value[c]),
            se,
            n_labelled=n_c,
            n_unlabelled=big_c,
            lam=float(lam_s[c]),
            method=f"PPI++ mean ({how}{weighted}); {_interval_text(None)}",
            level=level,
            warnings=tuple(warnings),
        )
    return out


def _strata_normal(
    y: FloatArray, fl: FloatArray, sl: IntArray, fu: FloatArray, su: IntArray,
    w: FloatArray | None, wu: FloatArray | None, lam: float | None, level: float,
    census: bool = False,
) -> dict[int, PPIEstimate]:
    """:func:`ppi_mean` (normal interval) of every stratum at once, from per-stratum sums.

    The same formulas as `ppi_mean` and `_tuned_lambda`, evaluated with one ``bincount`` per
    sum over all strata instead of one boolean mask and a dozen array passes per stratum: a
    selection report calls this for every candidate and paired difference over ~100k outputs
    and 11 strata. Sums are in another order, so figures agree with `ppi_mean` to rounding
    (tests/evalstats/test_ppi.py holds 1e-12). Centred (two-pass) sums keep the variances as
    accurate as numpy's ``var``.
    """
    codes = np.unique(sl)
    k = int(max(int(codes.max()), int(su.max()) if su.size else 0)) + 1
    if int(codes.min()) < 0 or (su.size and int(su.min()) < 0):
        return {}
    if lam is not None and not math.isfinite(float(lam)):
        raise ValueError(f"lam must be finite, got {lam!r}")
    if census and wu is not None:
        raise ValueError("census: the judge term runs over every output unweighted; "
                         "w_unlabelled does not apply")
    n = np.bincount(sl, minlength=k).astype(np.float64)
    big_n = np.bincount(su, minlength=k).astype(np.float64) if su.size else np.zeros(k)
    with np.errstate(divide="ignore", invalid="ignore"):
        # Weights rescaled to mean 1 within each stratum's labelled / unlabelled set.
        wl = np.ones_like(y) if w is None else w * (n / _bsum(sl, w, k))[sl]
        wun = None if wu is None else wu * (big_n / _bsum(su, wu, k))[su]
        has_u = big_n > 0
        # The unlabelled set (the big one) enters only through its size, weighted mean and
        # centred sum of squares per stratum; every formula below is rewritten in those.
        wf = fu if wun is None else wun * fu
        mu = np.where(has_u, _bsum(su, wf, k) / big_n, 0.0)
        # One pass, shifted by the overall mean so that a common offset cannot cancel
        # (sum (x - c)^2 - N (mu - c)^2 per stratum; no per-output gather of mu).
        shift = float(wf.mean()) if wf.size else 0.0
        ss_u = np.maximum(_bsum(su, (wf - shift) ** 2, k) - big_n * (mu - shift) ** 2, 0.0)
        if lam is None:
            lam_s = _strata_tuned_lambda(y, fl, sl, fu, su, wl, wun, n, big_n, mu, ss_u)
        else:
            lam_s = np.where(has_u, float(lam), 0.0)
        rect = wl * (y - lam_s[sl] * fl)
        value_r = _bsum(sl, rect, k) / n
        var_r = _bsum(sl, (rect - value_r[sl]) ** 2, k) / n / n
        # imputed = lambda * w f: mean lambda mu, centred sum of squares lambda^2 ss_u.
        value_i = np.where(has_u, lam_s * mu, 0.0)
        var_i = np.where(has_u, lam_s**2 * ss_u / big_n / big_n, 0.0)
    if census:
        _strata_census(codes.tolist(), y, fl, sl, wl, lam_s, n, big_n, var_r, var_i)
    weighted = ", weighted" if (w is not None or wu is not None) else ""
    return _strata_estimates(codes.tolist(), n, big_n, value_r + value_i, var_r + var_i, lam_s,
                             tuned=lam is None, census=census, weighted=weighted, level=level)


def ppi_mean_stratified(
    y: npt.ArrayLike,
    f_labelled: npt.ArrayLike,
    s_labelled: npt.ArrayLike,
    f_unlabelled: npt.ArrayLike,
    s_unlabelled: npt.ArrayLike,
    *,
    mix: Mapping[int, float],
    w: npt.ArrayLike | None = None,
    w_unlabelled: npt.ArrayLike | None = None,
    lam: float | None = None,
    level: float = 0.95,
    interval: Interval = "normal",
    census: bool = False,
) -> StratifiedPPI:
    """Stratified PPI++ (Fisch et al. 2024): per-stratum power-tuned estimates and their mix.

    ``s_labelled`` / ``s_unlabelled`` are integer stratum codes of the labelled and unlabelled
    outputs; ``mix`` maps stratum codes to deployment shares (>= 0, summing to 1). Each stratum
    gets :func:`ppi_mean` on its own outputs (weights rescaled within the stratum; its own
    ``lambda``, or the fixed ``lam``, where ``lam = 0`` gives the human-only estimates); the mix
    estimate is ``sum mix_s theta_s`` with ``se = sqrt(sum mix_s^2 se_s^2)``. A stratum with
    a positive mix weight and no human label makes the mix ``None`` and is listed in
    ``missing``; one with fewer than 2 labels has no interval (nor has the mix then); one
    without unlabelled outputs uses its human labels only.
    """
    level = _level(level)
    weights = _check_mix(mix)
    yv = _vec(y, "y")
    fl = _vec(f_labelled, "f_labelled")
    sl = _codes(s_labelled, "s_labelled")
    fu = _vec(f_unlabelled, "f_unlabelled")
    su = _codes(s_unlabelled, "s_unlabelled")
    _same_length((yv, "y"), (fl, "f_labelled"), (sl, "s_labelled"))
    _same_length((fu, "f_unlabelled"), (su, "s_unlabelled"))
    wv = None if w is None else _vec(w, "w")
    wu = None if w_unlabelled is None else _vec(w_unlabelled, "w_unlabelled")
    if wv is not None:
        _same_length((yv, "y"), (wv, "w"))
    if wu is not None:
        _same_length((fu, "f_unlabelled"), (wu, "w_unlabelled"))
    per: dict[int, PPIEstimate] = {}
    if interval == "normal" and sl.size and (wv is None or np.all(wv > 0)) and (
        wu is None or np.all(wu > 0)
    ):
        per = _strata_normal(yv, fl, sl, fu, su, wv, wu, lam, level, census)
    for s in sorted(set(sl.tolist()) - set(per)):
        li = sl == s
        ui = su == s
        per[s] = ppi_mean(
            yv[li],
            fl[li],
            fu[ui],
            w=None if wv is None else wv[li],
            w_unlabelled=None if wu is None else wu[ui],
            lam=lam,
            level=level,
            interval=interval,
            census=census,
        )
    how = "per-stratum power-tuned lambda" if lam is None else f"fixed lambda={lam:.4g}"
    mixed, missing = combine_strata(
        per,
        weights,
        method=f"stratified PPI++ (Fisch et al. 2024; {how}): mix-weighted sum of per-stratum "
        "estimates; normal interval",
        level=level,
    )
    return StratifiedPPI(per_stratum=per, mix=mixed, missing=missing, weights=weights)


# --- paired differences -----------------------------------------------------------------------


def paired_difference(
    y_a: npt.ArrayLike,
    y_b: npt.ArrayLike,
    f_a_l: npt.ArrayLike,
    f_b_l: npt.ArrayLike,
    f_a_u: npt.ArrayLike,
    f_b_u: npt.ArrayLike,
    **options: Unpack[PPIMeanOptions],
) -> PPIEstimate:
    """PPI++ estimate of mean(A - B) on shared items.

    Labelled: the items where both candidates' outputs carry a human label (``y_a``, ``y_b``
    and the judge's ``f_a_l``, ``f_b_l`` there, aligned by item); unlabelled: the other items
    where both have judge scores (``f_a_u``, ``f_b_u``). This is :func:`ppi_mean` on the
    item-level differences, so the correlation between the candidates through the items is
    accounted for; the keyword ``options`` (``w``, ``w_unlabelled``, ``lam``, ``level``,
    ``interval``, ``census``) are :func:`ppi_mean`'s, with its defaults.
    """
    dy, dfl, dfu = _paired_differences(y_a, y_b, f_a_l, f_b_l, f_a_u, f_b_u)
    return _relabel(ppi_mean(dy, dfl, dfu, **options), "paired difference A - B on shared items: ")


def _paired_differences(
    y_a: npt.ArrayLike,
    y_b: npt.ArrayLike,
    f_a_l: npt.ArrayLike,
    f_b_l: npt.ArrayLike,
    f_a_u: npt.ArrayLike,
    f_b_u: npt.ArrayLike,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The item-level differences A - B (labels, labelled scores, unlabelled scores), after
    checking that each set is aligned by item."""
    ya, yb = _vec(y_a, "y_a"), _vec(y_b, "y_b")
    fal, fbl = _vec(f_a_l, "f_a_l"), _vec(f_b_l, "f_b_l")
    fau, fbu = _vec(f_a_u, "f_a_u"), _vec(f_b_u, "f_b_u")
    _same_length((ya, "y_a"), (yb, "y_b"), (fal, "f_a_l"), (fbl, "f_b_l"))
    _same_length((fau, "f_a_u"), (fbu, "f_b_u"))
    return ya - yb, fal - fbl, fau - fbu


def _relabel(est: PPIEstimate, prefix: str) -> PPIEstimate:
    return dataclasses.replace(est, method=prefix + est.method)


def paired_difference_stratified(
    y_a: npt.ArrayLike,
    y_b: npt.ArrayLike,
    f_a_l: npt.ArrayLike,
    f_b_l: npt.ArrayLike,
    s_labelled: npt.ArrayLike,
    f_a_u: npt.ArrayLike,
    f_b_u: npt.ArrayLike,
    s_unlabelled: npt.ArrayLike,
    *,
    mix: Mapping[int, float],
    **options: Unpack[PPIMeanOptions],
) -> StratifiedPPI:
    """Stratified PPI++ of mean(A - B): per-stratum paired differences and their mix.

    As :func:`paired_difference` within each stratum (item-aligned arrays, stratum codes
    ``s_labelled`` / ``s_unlabelled`` per item) and :func:`ppi_mean_stratified` for the mix;
    the keyword ``options`` are :func:`ppi_mean`'s, with its defaults.
    """
    dy, dfl, dfu = _paired_differences(y_a, y_b, f_a_l, f_b_l, f_a_u, f_b_u)
    res = ppi_mean_stratified(dy, dfl, s_labelled, dfu, s_unlabelled, mix=mix, **options)
    prefix = "paired difference A - B on shared items: "
    return StratifiedPPI(
        per_stratum={k: _relabel(v, prefix) for k, v in res.per_stratum.items()},
        mix=None if res.mix is None else _relabel(res.mix, prefix),
        missing=res.missing,
        weights=res.weights,
    )
