"""Agreement by rater group (the `rater_groups` parameter): raters grouped by one attribute of
their membership (e.g. ``group`` = expert / author / crowd, from an import's ``rater.group``).

Per criterion and stratum:

- judge vs group G: each judge version's usual coefficients (the main table's, with the same
  intervals) against the consensus of G's raters only; on nominal scales also the judge against
  each of G's votes (`agreement_per_vote`, and on pairwise scales
  `agreement_per_vote_without_ties`: result version 4), the figure papers print as "agreement
  with expert votes" (MT-Bench, Zheng et al. 2023), which is neither the all-votes figure of
  the main table (every group's votes mixed) nor the group's majority;
- group G vs group H: G's consensus in the judge's place against H's consensus, on the subjects
  both groups rated (ordinal: G's mean rounded half up against H's mean and its rounding, so
  the primary coefficient is the quadratic-weighted kappa as in the main table);
- within group G: Krippendorff's alpha among G's raters (level by scale, clustered interval as
  in the ceiling) and the pooled agreement of pairs of distinct G raters on the same subject.

Consensus is the main table's: majority vote (ties to the first rater by account id) on nominal
scales, the mean on ordinal ones. Raters without the attribute are left out and counted. A
figure on fewer subjects than `min_items` is marked too few and carries no numbers, as the
main table's verdict treats a small cell.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

import evalstats as es
from calibration.frames import CriterionRef, RatingData
from evalstats.votes import pooled_pair_agreement

from .coefficients import nominal_metrics, ordinal_metrics, primary_metric_for, vote_metrics
from .common import FloatArray, bootstrap_options, cell_rng, scale_categories
from .figures import AlphaLevel, alpha_with_interval, with_and_without_ties
from .humans import HumanBlock, Stratum


@dataclass
class _Group:
    name: str
    rows: npt.NDArray[np.bool_]  # which of the block's humans are in the group
    consensus: FloatArray  # per subject: majority code or mean (NaN: no rating of the group)
    rounded: FloatArray  # ordinal: the mean rounded half up; nominal: = consensus


def _groups(
    crit: CriterionRef, block: HumanBlock, attrs: Mapping[int, Mapping[str, str]], key: str
) -> tuple[list[_Group], int]:
    """The groups of the criterion's human raters by attribute `key`, and how many raters have
    no value for it."""
    of = np.array([attrs.get(int(h), {}).get(key) for h in block.humans], dtype=object)
    names = sorted({str(g) for g in of if g is not None})
    cats = scale_categories(crit)
    out = []
    for name in names:
        rows = of == name
        sub = block.matrix[rows]
        if crit.scale == "ordinal":
            consensus = np.asarray(es.mean_consensus(sub).labels, dtype=np.float64)
            rounded = np.floor(consensus + 0.5)
        else:
            consensus = np.asarray(
                es.majority_vote(sub, tie_break="first", categories=cats).labels,
                dtype=np.float64,
            )
            rounded = consensus
        out.append(_Group(name, rows, consensus, rounded))
    return out, int(sum(g is None for g in of))


@dataclass(frozen=True)
class _Scope:
    """One criterion's human block in one stratum, with the report's parameters: what every
    figure of the stratum reads."""

    crit: CriterionRef
    block: HumanBlock
    st: Stratum
    p: Mapping[str, Any]

    def rng(self, what: object, *groups: str) -> np.random.Generator:
        """The generator of one figure of the stratum (`what`: a judge version, "pair" or
        "within"; `groups`: the groups it is about)."""
        return cell_rng(self.p["seed"], "group", what, self.crit.id, self.st.dimension,
                        self.st.label, *groups)

    def counts(self, rows: npt.NDArray[np.bool_], idx: npt.NDArray[np.int64]) -> dict[str, int]:
        """A figure's subjects `idx`, their items, and the raters among `rows` who rated one."""
        return {
            "n_subjects": int(idx.size),
            "n_items": int(np.unique(self.block.items[idx]).size),
            "n_raters": int((~np.isnan(self.block.matrix[rows][:, idx])).any(axis=1).sum()),
        }


def _row(scope: _Scope, kind: str, *, group: str, judge_version: int | None = None,
         other_group: str | None = None, counts: Mapping[str, int], primary: str,
         metrics: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "criterion": scope.crit.id,
        **scope.st.as_dict(),
        "kind": kind,
        "judge_version": judge_version,
        "group": group,
        "other_group": other_group,
        **counts,
        "too_few": metrics is None,
        "primary_metric": primary,
        "metrics": metrics or {},
    }


def _against(scope: _Scope, j: FloatArray, g: _Group, idx: npt.NDArray[np.int64],
             continuous: bool, rng: np.random.Generator,
             votes: FloatArray | None = None) -> dict[str, Any]:
    """The main table's coefficients of `j` against group g's consensus on subjects `idx`;
    with `votes` (nominal scales), also `j` against each of the votes (humans x subjects)."""
    crit, p, items = scope.crit, scope.p, scope.block.items[idx]
    if crit.scale == "ordinal":
        return ordinal_metrics(
            crit, j, g.consensus[idx], g.rounded[idx], items, continuous, p, rng
        )
    metrics, _ = nominal_metrics(crit, j, g.consensus[idx], items, p, rng)
    if votes is not None:
        # Drawn after the majority coefficients, so theirs are those of earlier versions.
        metrics.update(vote_metrics(crit, j, votes, items, p, rng))
    return metrics


def _within(scope: _Scope, g: _Group) -> dict[str, Any] | None:
    """Alpha and pooled pair agreement among g's raters in the stratum (None: g rated none of
    its subjects)."""
    crit, block, st, p = scope.crit, scope.block, scope.st, scope.p
    sub = block.matrix[g.rows][:, st.mask]
    items = block.items[st.mask]
    rated = ~np.isnan(sub)
    if not rated.any():
        return None
    pairable = rated.sum(axis=0) >= 2
    counts = scope.counts(g.rows, np.nonzero(st.mask)[0][pairable])
    metrics = None
    if counts["n_subjects"] >= p["min_items"]:
        rng = scope.rng("within", g.name)
        cats = scale_categories(crit)
        level: AlphaLevel = "ordinal" if crit.scale == "ordinal" else "nominal"
        metrics = {
            "krippendorff_alpha": alpha_with_interval(sub, pairable, items, level, cats, p, rng),
            **with_and_without_ties(crit, "pooled_agreement", functools.partial(
                pooled_pair_agreement, sub, items, rng=rng, options=bootstrap_options(p))),
        }
    row = _row(scope, "within_group", group=g.name, counts=counts,
               primary="krippendorff_alpha", metrics=metrics)
    # How many pairs of the group's raters the pooled agreement counts.
    row["n_pairs"] = metrics["pooled_agreement"]["n"] if metrics is not None else 0
    return row


def rater_group_rows(
    data: RatingData,
    crit: CriterionRef,
    block: HumanBlock,
    judges: Sequence[tuple[int, pd.DataFrame]],
    p: Mapping[str, Any],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The criterion's group sizes and its figures by rater group (module docstring), in
    report order: per stratum, judge vs each group, each pair of groups, within each group."""
    key = str(p["rater_groups"])
    groups, n_without = _groups(crit, block, data.rater_attributes, key)
    members = {
        "criterion": crit.id,
        "attribute": key,
        "groups": [{"group": g.name, "n_raters": int(g.rows.sum())} for g in groups],
        "n_raters_without": n_without,
    }
    judge_codes = []
    for jv_id, jr in judges:
        jv = data.judges[jv_id]
        continuous = jv.value_type == "continuous"
        if continuous and crit.scale != "ordinal":
            continue  # as in the main table: continuous scores of ordinal criteria only
        jser = pd.Series(jr["num"].to_numpy(), index=jr["subject"].to_numpy())
        judge_codes.append(
            (jv_id, continuous, jser.reindex(block.subjects).to_numpy(dtype=np.float64))
        )
    rows: list[dict[str, Any]] = []
    for st in block.strata:
        scope = _Scope(crit, block, st, p)
        for jv_id, continuous, j_all in judge_codes:
            rows.extend(_judge_vs_groups(scope, groups, jv_id, continuous, j_all))
        rows.extend(_group_pairs(scope, groups))
        for g in groups:
            within = _within(scope, g)
            if within is not None:
                rows.append(within)
    return members, rows


def _judge_vs_groups(scope: _Scope, groups: list[_Group], jv_id: int, continuous: bool,
                     j_all: FloatArray) -> list[dict[str, Any]]:
    """A judge version against each group's consensus (and its votes) in a stratum."""
    crit, block = scope.crit, scope.block
    rows = []
    for g in groups:
        idx = np.nonzero(~np.isnan(j_all) & ~np.isnan(g.consensus) & scope.st.mask)[0]
        if idx.size == 0:
            continue
        metrics = None
        if idx.size >= scope.p["min_items"]:
            rng = scope.rng(jv_id, g.name)
            # The group's own votes on the same subjects: every vote of the group
            # counts once (the group's consensus exists wherever one of them voted).
            votes = block.matrix[g.rows][:, idx] if crit.scale != "ordinal" else None
            metrics = _against(scope, j_all[idx], g, idx, continuous, rng, votes)
        rows.append(
            _row(scope, "judge_vs_group", judge_version=jv_id, group=g.name,
                 counts=scope.counts(g.rows, idx), primary=primary_metric_for(crit, continuous),
                 metrics=metrics)
        )
    return rows


def _group_pairs(scope: _Scope, groups: list[_Group]) -> list[dict[str, Any]]:
    """Each pair of groups' consensuses against each other in a stratum."""
    rows = []
    for a, g in enumerate(groups):
        for h in groups[a + 1 :]:
            idx = np.nonzero(~np.isnan(g.consensus) & ~np.isnan(h.consensus) & scope.st.mask)[0]
            if idx.size == 0:
                continue
            metrics = None
            if idx.size >= scope.p["min_items"]:
                rng = scope.rng("pair", g.name, h.name)
                metrics = _against(scope, g.rounded[idx], h, idx, False, rng)
            rows.append(
                _row(scope, "group_vs_group", group=g.name, other_group=h.name,
                     counts=scope.counts(g.rows | h.rows, idx),
                     primary=primary_metric_for(scope.crit, False), metrics=metrics)
            )
    return rows


__all__ = ["rater_group_rows"]
