"""The selection report's pairwise section (docs/reports.md): per pair of compared candidates
the win rate of one over the other (a tie counts half a win) with the three estimates per
stratum and on the mix, Bradley-Terry strengths (`evalstats.ppi.ppi_bradley_terry`) on the mix
and per stratum, and the plan's win_rate thresholds against its baseline. Pure: no database."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from evalstats.ppi import (
    BradleyTerry,
    PPIEstimate,
    classical_mean,
    combine_strata,
    naive_mean,
    ppi_bradley_terry,
    ppi_mean,
    ppi_mean_stratified,
)

from .cells import MIX, ppi_json
from .inputs import SelectionInputs

FloatArray = npt.NDArray[np.float64]


def threshold_status(test: PPIEstimate | None, threshold: float, direction: str) -> str:
    """pass when the whole interval is on the right side of the threshold, fail when it is on
    the wrong side, uncertain otherwise (or without an interval)."""
    if test is None or test.ci_low is None or test.ci_high is None:
        return "uncertain"
    lo, hi = test.ci_low, test.ci_high
    if direction == ">=":
        return "pass" if lo >= threshold else "fail" if hi < threshold else "uncertain"
    return "pass" if hi <= threshold else "fail" if lo > threshold else "uncertain"


def _clip01(e: PPIEstimate | None) -> PPIEstimate | None:
    """A win rate's interval cut to [0, 1] (as the rates' intervals are)."""
    if e is None:
        return None
    return dataclasses.replace(
        e, ci_low=None if e.ci_low is None else min(max(e.ci_low, 0.0), 1.0),
        ci_high=None if e.ci_high is None else min(max(e.ci_high, 0.0), 1.0))


def _swap(e: PPIEstimate | None) -> PPIEstimate | None:
    """The win rate of B over A from that of A over B (ties count half on both sides)."""
    if e is None:
        return None
    return dataclasses.replace(
        e, value=1.0 - e.value, ci_low=None if e.ci_high is None else 1.0 - e.ci_high,
        ci_high=None if e.ci_low is None else 1.0 - e.ci_low)


def win_rate_cells(
    y: FloatArray, f: FloatArray, w: FloatArray, s: npt.NDArray[np.int64],
    strata: Sequence[int], mix_codes: Mapping[int, float], level: float,
) -> tuple[dict[int, dict[str, Any]], dict[str, Any]]:
    """Human-only, judge-only and PPI win rates of one oriented pair per stratum code and on
    the mix, computed like the outputs' cells (module docstring of compute)."""
    per: dict[int, dict[str, Any]] = {}
    human: dict[int, PPIEstimate] = {}
    judge: dict[int, PPIEstimate] = {}
    for si in strata:
        at = s == si
        n_c = int(at.sum())
        if not n_c:
            continue
        yy, ff, ww = y[at], f[at], w[at]
        ly = np.isfinite(yy)
        jf = np.isfinite(ff)
        lf = ly & jf
        cell: dict[str, Any] = {"n": n_c, "n_labelled": int(ly.sum()), "human": None,
                                "judge": None, "ppi": None}
        if ly.any():
            human[si] = classical_mean(yy[ly], w=ww[ly], level=level)
            cell["human"] = human[si]
        if jf.any():
            judge[si] = naive_mean(ff[jf], level=level)
            cell["judge"] = judge[si]
        if lf.any():
            # The judge term over every comparison of the pair in the stratum, labelled ones
            # too (the difference estimator; see the outputs' cells).
            cell["ppi"] = ppi_mean(yy[lf], ff[lf], ff[jf], w=ww[lf], level=level, census=True)
        elif ly.any():
            cell["ppi"] = human[si]
        per[si] = cell
    hm, _ = combine_strata(human, mix_codes, level=level,
                           method="mix of per-stratum human-only win rates")
    jm, _ = combine_strata(judge, mix_codes, level=level,
                           method="mix of per-stratum judge-only win rates (biased)")
    lab_f = np.isfinite(y) & np.isfinite(f)
    every = np.isfinite(f)
    pm: PPIEstimate | None = None
    if lab_f.any():
        pm = ppi_mean_stratified(y[lab_f], f[lab_f], s[lab_f], f[every], s[every],
                                 mix=mix_codes, w=w[lab_f], level=level, census=True).mix
    elif np.isfinite(y).any():
        pm = hm
    mix_cell = {"n": int(y.size), "n_labelled": int(np.isfinite(y).sum()), "human": hm,
                "judge": jm, "ppi": pm}
    return per, mix_cell


def bradley_terry_fit(
    a: npt.NDArray[np.int64], b: npt.NDArray[np.int64], y: FloatArray, f: FloatArray,
    w: FloatArray, *, scale: FloatArray | None = None, reference: int, level: float,
) -> BradleyTerry:
    """`evalstats.ppi.ppi_bradley_terry` on comparisons (candidate codes ``a`` and ``b``,
    human score ``y`` of A, judge score ``f`` of A, inclusion weight ``w`` of the human
    labels, ``scale`` a population weight of each comparison, 1 by default): the labelled set
    is the comparisons with both a human and a judge score, weighted ``w * scale``; the judge
    term runs over the judged comparisons WITHOUT a human label, weighted ``scale``: ppi_py's
    design of two independent samples, whose variance the fit uses (the win rates' difference
    estimator has its own, design-based variance; a logistic fit has no such form here).
    Without any judge score it is the human-only fit (lambda 0). Raises ValueError when the
    comparisons do not identify the strengths."""
    sc = np.ones(a.size) if scale is None else scale
    every = np.isfinite(f)
    cands = sorted(set(np.concatenate([a, b]).tolist()))
    if not every.any():
        lab = np.isfinite(y)
        return ppi_bradley_terry(y[lab], a[lab], b[lab], np.zeros(int(lab.sum())),
                                 a[:0], b[:0], np.zeros(0), candidates=cands,
                                 reference=reference, w=(w * sc)[lab], lam=0.0, level=level)
    lab = np.isfinite(y) & every
    rest = every & ~np.isfinite(y)
    return ppi_bradley_terry(y[lab], a[lab], b[lab], f[lab], a[rest], b[rest], f[rest],
                             candidates=cands, reference=reference, w=(w * sc)[lab],
                             w_unlabelled=sc[rest], level=level)



def pairwise_section(
    inputs: SelectionInputs, names: Sequence[str], cand_ids: Sequence[int],
    labels: Sequence[str], code: Mapping[str, int], mix_codes: Mapping[int, float],
    level: float, warnings: list[str], missing: list[str],
) -> tuple[dict[str, Any] | None, dict[tuple[int, int, str], PPIEstimate | None]]:
    """The pairwise section (docs/reports.md): win rates per pair of candidates, per stratum
    and on the mix, and Bradley-Terry strengths; and the oriented win rates by (candidate,
    opponent, stratum) for the plan's win_rate thresholds."""
    crit = inputs.pairwise_criterion
    win: dict[tuple[int, int, str], PPIEstimate | None] = {}
    if crit is None:
        return None, win
    cmp = inputs.comparisons
    by_id = pd.Index(list(cand_ids))
    a = by_id.get_indexer(cmp["a"].to_numpy()).astype(np.int64)
    b = by_id.get_indexer(cmp["b"].to_numpy()).astype(np.int64)
    s = pd.Index(list(labels)).get_indexer(cmp["stratum"].astype(str).to_numpy()).astype(
        np.int64)
    keep = (a >= 0) & (b >= 0) & (a != b) & (s >= 0)
    a, b, s = a[keep], b[keep], s[keep]
    y = cmp["y"].to_numpy(dtype=np.float64)[keep]
    f = cmp["f"].to_numpy(dtype=np.float64)[keep]
    w = cmp["weight"].to_numpy(dtype=np.float64)[keep]
    section: dict[str, Any] = {"criterion": crit.key, "win_rates": [], "bradley_terry": [],
                               "reference": None}
    if not a.size:
        missing.append(f"no comparison of two candidates on the pairwise criterion "
                       f"'{crit.key}' yet: no win rate or Bradley-Terry ranking")
        return section, win
    if not np.isfinite(y).any():
        missing.append(f"no human label on a comparison of '{crit.key}' yet: its win rates "
                       "are the judge's only (biased) and there is no Bradley-Terry ranking")
    dim = inputs.dimension
    # Each pair in candidate order (lower index first): a comparison stored the other way
    # round scores 1 - its score for A.
    lo_, hi_ = np.minimum(a, b), np.maximum(a, b)
    flip = a > b
    y_o = np.where(flip, 1.0 - y, y)
    f_o = np.where(flip, 1.0 - f, f)
    strata = [code[h] for h in labels]
    for i, j in sorted(set(zip(lo_.tolist(), hi_.tolist(), strict=True))):
        at = (lo_ == i) & (hi_ == j)
        per, mix_cell = win_rate_cells(y_o[at], f_o[at], w[at], s[at], strata, mix_codes,
                                        level)
        targets: list[tuple[str, dict[str, Any] | None]] = []
        if dim is not None:
            targets += [(h, per.get(code[h])) for h in labels]
        targets.append((MIX, mix_cell))
        for h, cell in targets:
            if cell is None:
                win[(i, j, h)] = win[(j, i, h)] = None
                continue
            est = {k: _clip01(cell[k]) for k in ("human", "judge", "ppi")}
            win[(i, j, h)] = est["ppi"]
            win[(j, i, h)] = _swap(est["ppi"])
            section["win_rates"].append({
                "a": names[i], "b": names[j], "stratum": h, "n_comparisons": cell["n"],
                "n_labelled": cell["n_labelled"],
                **{k: ppi_json(v) for k, v in est.items()}})

    if np.isfinite(y).any():
        _bradley_terry(inputs, names, labels, code, mix_codes, level, warnings, section,
                       (a, b, s, y, f, w))
    return section, win


def _bradley_terry(
    inputs: SelectionInputs, names: Sequence[str], labels: Sequence[str],
    code: Mapping[str, int], mix_codes: Mapping[int, float], level: float,
    warnings: list[str], section: dict[str, Any],
    comparisons: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64],
                       FloatArray, FloatArray, FloatArray],
) -> None:
    """Bradley-Terry strengths on the mix (every comparison re-weighted to the mix's shares of
    the strata) and per stratum, into `section`; what cannot be fitted goes to `warnings`."""
    a, b, s, y, f, w = comparisons
    dim = inputs.dimension
    ref = _bt_reference(inputs, names, a, b)
    section["reference"] = names[ref]
    bt_targets: list[tuple[str, npt.NDArray[np.bool_], FloatArray]] = []
    every = np.ones(a.size, dtype=bool)
    if dim is None:
        bt_targets.append((MIX, every, w))
    else:
        # The mix: every comparison, re-weighted from its stratum's share of the comparisons
        # to the stratum's share of the deployment mix.
        counts = np.bincount(s, minlength=len(labels)).astype(np.float64)
        share = counts / counts.sum()
        absent = [labels[k] for k, v in mix_codes.items() if v > 0 and counts[k] == 0]
        if absent:
            warnings.append("no Bradley-Terry ranking on the mix: no comparison in "
                            f"{', '.join(absent)} (weighted in the mix)")
        else:
            ratio = np.array([mix_codes.get(k, 0.0) / share[k] if share[k] > 0 else 0.0
                              for k in range(len(labels))])
            bt_targets.append((MIX, ratio[s] > 0, ratio[s]))
        for h in labels:
            bt_targets.append((h, s == code[h], np.ones(a.size)))
    skipped: list[str] = []
    for h, sel, scale in bt_targets:
        aa, bb = a[sel], b[sel]
        if ref not in set(aa.tolist()) | set(bb.tolist()):
            if h == MIX:
                warnings.append(f"no Bradley-Terry ranking on the mix: {names[ref]} (the "
                                "reference) has no comparison")
            else:
                skipped.append(h)
            continue
        try:
            fit = bradley_terry_fit(aa, bb, y[sel], f[sel], w[sel], scale=scale[sel],
                                    reference=ref, level=level)
        except ValueError as exc:
            if h == MIX:
                warnings.append(f"no Bradley-Terry ranking on the mix: {exc}")
            else:
                skipped.append(h)
            continue
        warnings.extend(f"Bradley-Terry ({stratum_name(h)}): {x}" for x in fit.warnings)
        for rank, c in enumerate(fit.order, start=1):
            e = fit.strengths[c]
            section["bradley_terry"].append({
                "stratum": h, "candidate": names[c], "strength": e.value,
                "ci_low": e.ci_low, "ci_high": e.ci_high, "rank": rank})
    if skipped:
        warnings.append("no Bradley-Terry ranking in " + ", ".join(skipped) + " (too few "
                        "labelled comparisons there to connect the candidates, or none of "
                        "the reference)")


def stratum_name(h: str) -> str:
    return "deployment mix" if h == MIX else f"stratum {h}"


def _bt_reference(inputs: SelectionInputs, names: Sequence[str], a: npt.NDArray[np.int64],
                  b: npt.NDArray[np.int64]) -> int:
    """The candidate whose strength is fixed at 0: the plan's win_rate baseline when it was
    compared, else the first compared candidate."""
    seen = set(a.tolist()) | set(b.tolist())
    crit = inputs.pairwise_criterion
    entry = ((inputs.plan_spec or {}).get("criteria") or {}).get(crit.key if crit else "")
    baseline = entry.get("baseline") if isinstance(entry, Mapping) else None
    if isinstance(baseline, str) and baseline in names and names.index(baseline) in seen:
        return names.index(baseline)
    return min(seen)


def win_rate_thresholds(
    key: str, entry: Mapping[str, Any], pairwise: Mapping[str, Any] | None,
    win: Mapping[tuple[int, int, str], PPIEstimate | None], names: Sequence[str],
    labels: Sequence[str], mix: Mapping[str, float], has_dim: bool, warnings: list[str],
) -> tuple[list[dict[str, Any]], list[str]]:
    """The plan's win_rate threshold on `key`: every candidate's PPI win rate over the
    plan's baseline, on the mix and (every_stratum) per stratum; the names failing it on the
    mix."""
    if pairwise is None or pairwise.get("criterion") != key:
        warnings.append(f"the plan's win_rate threshold on '{key}' is not checked: the report "
                        "has no win rates on that criterion")
        return [], []
    baseline = entry.get("baseline")
    if not isinstance(baseline, str) or baseline not in names:
        warnings.append(f"the plan's win_rate threshold on '{key}' is not checked: "
                        + ("it names no baseline candidate" if not isinstance(baseline, str)
                           else f"its baseline '{baseline}' is not among the candidates"))
        return [], []
    base = names.index(baseline)
    threshold = float(entry["threshold"])
    direction = str(entry.get("direction", ">="))
    targets = [MIX] + (list(labels) if entry.get("every_stratum", True) and has_dim else [])
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    for ci, name in enumerate(names):
        if ci == base:
            continue
        for h in targets:
            test = win.get((ci, base, h))
            if h != MIX and mix.get(h, 0.0) == 0.0 and test is None:
                continue
            status = threshold_status(test, threshold, direction)
            rows.append({"candidate": name, "metric": f"win_rate:{key}", "stratum": h,
                         "threshold": threshold, "direction": direction, "status": status})
            if h == MIX and status == "fail":
                failed.append(name)
    return rows, failed


__all__ = ["bradley_terry_fit", "pairwise_section", "stratum_name", "threshold_status",
           "win_rate_cells", "win_rate_thresholds"]
