"""The report: the inputs' fingerprint, and every cell, ceiling and audit computed in
threads and merged in report order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

try:  # optional: see _one_blas_thread
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - exercised only where threadpoolctl is missing
    threadpool_limits = None

from calibration.frames import CriterionRef, JudgeRef, RatingData

from .bias import bias_rows
from .candidates import candidate_rows
from .ceiling import human_ceiling
from .coefficients import (
    alt_test_figures,
    interval_metrics,
    nominal_metrics,
    ordinal_metrics,
    primary_metric_for,
    vote_metrics,
)
from .common import FloatArray, cell_rng
from .examples import disagreement_examples
from .groups import rater_group_rows
from .humans import HumanBlock, JudgeSubjects, Stratum, human_block
from .levels import correlation_level_rows
from .orders import order_rows
from .system import system_level_rows
from .verdict import cell_verdict, rule_text

# The version of the result's shape (reports.agreement.results.AGREEMENT_RESULT_VERSION).
RESULT_VERSION = 4
IntArray = npt.NDArray[np.int64]
# Threads computing criteria and judge versions side by side (see compute_report); 1 computes
# them in turn, in the calling thread. Without threadpoolctl, BLAS keeps its own threads and a
# second report thread only competes with them for the cores (see _one_blas_thread).
DEFAULT_WORKERS = 2 if threadpool_limits is not None else 1


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
    correlation_levels: list[dict[str, Any]] = field(default_factory=list)
    orders: list[dict[str, Any]] = field(default_factory=list)
    rater_group_members: list[dict[str, Any]] = field(default_factory=list)
    rater_groups: list[dict[str, Any]] = field(default_factory=list)
    by_candidate: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class _CriterionBase:
    """A criterion's human block and ceilings, shared by the judge parts of the criterion."""

    crit: CriterionRef
    block: HumanBlock | None
    ceiling_cache: dict[bytes, dict[str, Any]]
    part: _Part
    judges: list[tuple[int, pd.DataFrame]]


def _criterion_base(
    data: RatingData, crit: CriterionRef, crit_judges: pd.DataFrame, p: Mapping[str, Any]
) -> _CriterionBase:
    """Human block, strata and ceilings of a criterion, and its judge versions' rows."""
    block = human_block(data, crit, p)
    out = _Part()
    base = _CriterionBase(crit=crit, block=block, ceiling_cache={}, part=out, judges=[])
    if block is None:
        if len(crit_judges):
            out.warnings.append(
                f"criterion '{crit.key}': judge verdicts but no human labels; nothing to compare"
            )
        return base
    if crit.scale == "interval" and crit.pass_threshold is None:
        out.warnings.append(
            f"criterion '{crit.key}': an interval criterion without a pass_threshold has no "
            "pass/fail reading, so its pass/fail figures (accuracy, kappa and their confusion "
            "matrix) are left out; set a pass_threshold in the rubric to get them"
        )
    for st in block.strata:
        out.strata.append((st.dimension, st.label))
        idx = np.nonzero(st.mask)[0]
        ceil = human_ceiling(crit, block, idx, p, st, base.ceiling_cache)
        out.ceiling.append({"criterion": crit.id, "judge_version": None, **st.as_dict(), **ceil})
    raters = crit_judges["rater"].to_numpy()
    base.judges = [
        (int(jv_id), crit_judges[raters == jv_id]) for jv_id in sorted(pd.unique(raters))
    ]
    return base


def _stratum_metrics(
    data: RatingData, base: _CriterionBase, jv: JudgeRef, st: Stratum, idx: IntArray,
    idx_v: IntArray, j_all: FloatArray, p: Mapping[str, Any], out: _Part,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The coefficients of one judge x stratum cell suited to the scale, and its confusion
    matrix (None on ordinal scales); correlation levels are added to ``out``."""
    crit, block = base.crit, base.block
    assert block is not None
    rng = cell_rng(p["seed"], jv.id, crit.id, st.dimension, st.label)
    j = j_all[idx]
    items = block.items[idx]
    continuous = jv.value_type == "continuous"
    if crit.scale == "interval":
        metrics, confusion = interval_metrics(crit, j, block.consensus[idx], items, p, rng)
    elif crit.scale == "ordinal":
        metrics = ordinal_metrics(
            crit, j, block.consensus[idx], block.rounded[idx], items, continuous, p, rng
        )
        confusion = None
    else:
        metrics, confusion = nominal_metrics(crit, j, block.consensus[idx], items, p, rng)
        # Drawn after the majority coefficients, so theirs are those of earlier versions.
        metrics.update(vote_metrics(crit, j_all[idx_v], block.matrix[:, idx_v],
                                    block.items[idx_v], p, rng))
        return metrics, confusion
    if p["correlation_levels"]:
        out.correlation_levels.append(
            correlation_level_rows(data, crit, jv, block, st, idx, j, metrics, p)
        )
    return metrics, confusion


def _stratum_cell(
    data: RatingData, base: _CriterionBase, jv: JudgeRef, st: Stratum, idx: IntArray,
    idx_v: IntArray, j_all: FloatArray, p: Mapping[str, Any], out: _Part,
) -> None:
    """One judge x stratum cell: coefficients, ceiling, alternative test and verdict (and its
    confusion matrix and per-candidate rows), added to ``out``."""
    crit, block, ceiling_cache = base.crit, base.block, base.ceiling_cache
    assert block is not None
    continuous = jv.value_type == "continuous"
    primary_name = primary_metric_for(crit, continuous)
    metrics, confusion = _stratum_metrics(data, base, jv, st, idx, idx_v, j_all, p, out)
    sub = block.matrix[:, idx_v]
    # Another judge part may fill the cache at the same time: a ceiling is a pure function
    # of its subjects (own generator), so either copy is the same.
    ceil = human_ceiling(crit, block, idx_v, p, st, ceiling_cache)
    multi = int(((~np.isnan(sub)).sum(axis=0) >= 2).sum())
    alt = alt_test_figures(crit, j_all[idx_v], sub, p) \
        if multi >= 2 and idx_v.size >= p["min_items"] else None
    verdict, basis, reason = cell_verdict(
        int(idx.size), metrics.get(primary_name, {}), ceil, alt, continuous, p
    )
    out.cells.append(
        {
            "judge_version": jv.id,
            "criterion": crit.id,
            **st.as_dict(),
            "n_subjects": int(idx.size),
            "n_items": int(np.unique(block.items[idx]).size),
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
    if p.get("by_candidate"):
        out.by_candidate.extend(
            candidate_rows(data, crit, jv, block, st, idx, idx_v, j_all, continuous, p)
        )
    if confusion is not None:
        out.confusion.append(
            {"judge_version": jv.id, "criterion": crit.id, **st.as_dict(), **confusion}
        )


def _judge_audits(
    data: RatingData, base: _CriterionBase, jv: JudgeRef, both: npt.NDArray[np.bool_],
    j_all: FloatArray, p: Mapping[str, Any], out: _Part,
) -> None:
    """What is read over every labelled subject of the judge: the bias audits, the system
    level (if asked for) and the disagreeing examples, added to ``out``."""
    crit, block = base.crit, base.block
    assert block is not None
    idx = np.nonzero(both)[0]
    if idx.size == 0:
        return
    js = JudgeSubjects(data=data, crit=crit, jv=jv, block=block, idx=idx, j=j_all[idx])
    rng = cell_rng(p["seed"], "bias", jv.id, crit.id)
    out.bias.extend(bias_rows(js, p, rng))
    if p["system_level"]:
        rng = cell_rng(p["seed"], "system", jv.id, crit.id)
        sysl = system_level_rows(js, p, rng)
        if sysl is not None:
            per_subject = next((c for c in out.cells if c["dimension"] == ""), None)
            if per_subject is not None:
                sysl["per_subject_kendall"] = per_subject["metrics"].get("kendall")
            out.system.append(sysl)
    out.disagreements.append(disagreement_examples(js, p))


def _judge_part(
    data: RatingData, base: _CriterionBase, jv_id: int, jr: pd.DataFrame, p: Mapping[str, Any]
) -> _Part:
    """Cells, confusion matrices, bias audits, system level and examples of one judge version."""
    crit, block = base.crit, base.block
    assert block is not None  # only criteria with human labels have judge parts
    out = _Part()
    jv = data.judges[jv_id]
    jser = pd.Series(jr["num"].to_numpy(), index=jr["subject"].to_numpy())
    j_all = jser.reindex(block.subjects).to_numpy(dtype=np.float64)
    judged = ~np.isnan(j_all)
    # Judge vs THE human label (the one rule) on the subjects that have one; judge vs each
    # vote, the human-human ceiling and the alternative test read the annotators' own votes
    # on every judged subject, a label or not (an exact tie of the votes is no label).
    both = judged & ~np.isnan(block.consensus)
    if jv.value_type == "continuous" and crit.scale != "ordinal":
        return out
    for st in block.strata:
        idx = np.nonzero(both & st.mask)[0]
        if idx.size == 0:
            continue
        idx_v = np.nonzero(judged & st.mask)[0]
        _stratum_cell(data, base, jv, st, idx, idx_v, j_all, p, out)
    out.orders.extend(order_rows(data, crit, jv, block, p))
    _judge_audits(data, base, jv, both, j_all, p, out)
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


# The tables every result has (the last two since result version 2).
_TABLES = ("cells", "confusion", "bias", "ceiling", "system", "disagreements",
           "correlation_levels", "orders")


def _result_head(data: RatingData, p: dict[str, Any]) -> dict[str, Any]:
    """The result before its tables are filled: the rule, the parameters, the criteria and the
    judge versions it covers."""
    return {
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
                **(
                    {"bounds": list(c.bounds), "pass_threshold": c.pass_threshold}
                    if c.bounds is not None
                    else {}
                ),
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
        **{name: [] for name in _TABLES},
        "warnings": [],
    }


def _groups_part(data: RatingData, b: _CriterionBase, p: Mapping[str, Any]) -> _Part:
    out = _Part()
    if b.block is not None:
        members, rows = rater_group_rows(data, b.crit, b.block, b.judges, p)
        out.rater_group_members.append(members)
        out.rater_groups.extend(rows)
    return out


def _merge(result: dict[str, Any], bases: list[_CriterionBase], judge_parts: list[_Part],
           group_parts: list[_Part], p: Mapping[str, Any]) -> None:
    """The parts into the result, in report order: each criterion's own part, then its judge
    versions' in turn."""
    parts = iter(judge_parts)
    seen_strata: dict[tuple[str, str], None] = {}
    by_candidate: list[dict[str, Any]] = []
    for b in bases:
        for pt in [b.part] + [next(parts) for _ in b.judges]:
            for key in pt.strata:
                seen_strata.setdefault(key, None)
            for name in _TABLES:
                result[name].extend(getattr(pt, name))
            by_candidate.extend(pt.by_candidate)
            result["warnings"].extend(pt.warnings)
    result["strata"] = [{"dimension": d, "label": lab} for d, lab in seen_strata]
    if p.get("rater_groups") is not None:
        # Only a report that asks for groups has the tables (result version 3).
        result["rater_group_members"] = [m for g in group_parts for m in g.rater_group_members]
        result["rater_groups"] = [r for g in group_parts for r in g.rater_groups]
    if p.get("by_candidate"):
        # Only a report that asks for it has the table (result version 4).
        result["by_candidate"] = by_candidate


def compute_report(
    data: RatingData, params: Mapping[str, Any], *, workers: int = DEFAULT_WORKERS
) -> dict[str, Any]:
    """The full agreement report for loaded rating data (see the module docstring).

    ``workers`` threads compute criteria, then judge versions, side by side; the result does
    not depend on it.
    """
    p = dict(params)
    result = _result_head(data, p)
    r = data.ratings
    judge_rows = r[r["is_judge"].to_numpy()]
    crits = list(data.criteria.values())
    # Look-up tables the threads share are built here, once, instead of lazily in a thread.
    for frame in (data.subjects, data.items):
        frame.index.get_indexer(frame.index[:1])

    def base(crit: CriterionRef) -> _CriterionBase:
        return _criterion_base(
            data, crit, judge_rows[judge_rows["criterion"].to_numpy() == crit.id], p
        )

    def judge(unit: tuple[_CriterionBase, int, pd.DataFrame]) -> _Part:
        return _judge_part(data, unit[0], unit[1], unit[2], p)

    def groups(b: _CriterionBase) -> _Part:
        return _groups_part(data, b, p)

    # Every cell, ceiling and audit has its own generator, seeded by what it is, so criteria
    # and judge versions are independent: threads change nothing but the wall time, and the
    # parts are merged in report order. The bootstrap's multinomial draws and matrix products
    # (most of the time) run without the GIL, so a second thread keeps a second core busy.
    with _one_blas_thread(), ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        run = map if workers <= 1 else pool.map
        bases = list(run(base, crits))
        units = [(b, jv_id, jr) for b in bases for jv_id, jr in b.judges]
        judge_parts = list(run(judge, units))
        group_parts = list(run(groups, bases)) if p.get("rater_groups") is not None else []
    _merge(result, bases, judge_parts, group_parts, p)
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
    "DEFAULT_WORKERS",
    "RESULT_VERSION",
    "cells_for",
    "compute_report",
    "lookup",
]
