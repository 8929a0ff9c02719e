"""What a window is read against, beyond the plan: the selection-time evidence of the deployment's
study, and the per-window counts the gate streams accumulate.

* **Selection references** (`selection_reference`, once per deployment and computation): the
  calibration curve in force (the whole-study cell of the deployment's first judge version and
  the plan's pass-rate criterion in the deployment's calibration snapshot) with its reliability
  (ECE, Brier) at the snapshot; the judge-human agreement (accuracy against the human
  consensus, with its interval) and the human ceiling (pooled pair agreement of two humans) per
  stratum of the watched dimension from the study's latest agreement report; the selection
  sample's mix of the watched dimension (the study's items); the shipped candidate's finish
  reasons in the selection study.
* **Gate counts** (`gate_counts`, per window): per stratum, the finish reasons, the rows that
  reported schema validity and how many were valid, the rows that reported a latency and how
  many were slower than the plan's p95 gate, and the rows that reported a cost with their sum
  clipped at `COST_CLIP_FACTOR` times the per-row gate (what the anytime-valid cost stream needs:
  a bounded observation). One aggregate query over the window's rows (GROUP BY stratum and
  finish reason), beside the single pass of `window.load`.

The snapshots are `snapshots.ReportSnapshot` rows, read through `snapshots.selectors` (finished
ones only); this module is the one monitoring file that reads their results.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from django.db.models import Count, F, Q, Sum, Value
from django.db.models.functions import Least

from snapshots import selectors as snapshot_selectors
from snapshots.models import ReportSnapshot
from studies.models import Criterion, Item, Output
from studies.spec import plan_selection

from ..models import Deployment, TrafficRow
from .compute import GateCounts, SelectionReference
from .params import WindowParams
from .trust import NO_REASON

# A row's cost is clipped at this many times the per-row cost gate (gate / 1000) before the
# cost stream sums it: clipping only lowers the observed mean, so an alarm on the clipped mean
# is an alarm on the true one (docs/statistics.md).
COST_CLIP_FACTOR = 10.0


def criterion_key(deployment: Deployment) -> str | None:
    """The key of the plan's first pass-rate criterion (None: the plan has none)."""
    for key, entry in (deployment.plan.spec.get("criteria") or {}).items():
        if isinstance(entry, Mapping) and entry.get("metric") == "pass_rate":
            return str(key)
    return None


def _calibration_part(deployment: Deployment, version: int, key: str) -> dict[str, Any]:
    snap = snapshot_selectors.snapshot_done(snapshot_id=deployment.calibration_snapshot_id)
    cells = ((snap.result or {}).get("cells") or []) if snap is not None else []
    cell = next((c for c in cells if c.get("judge_version") == version
                 and c.get("criterion") == key and c.get("stratum") == ""), None)
    if cell is None or not (cell.get("curve") or {}).get("x"):
        return {}
    after = (cell.get("diagnostics") or {}).get("after") or {}
    ece = (after.get("ece") or {}).get("value")
    brier = after.get("brier")
    brier = brier.get("value") if isinstance(brier, Mapping) else brier
    return {"curve_x": tuple(float(v) for v in cell["curve"]["x"]),
            "curve_y": tuple(float(v) for v in cell["curve"]["y"]),
            "snapshot_ece": None if ece is None else float(ece),
            "snapshot_brier": None if brier is None else float(brier),
            "thresholds": cell.get("thresholds")}


def _agreement_part(deployment: Deployment, version: int, key: str) -> dict[str, Any]:
    snap = snapshot_selectors.latest_done(study_id=deployment.study_id,
                                         kind=ReportSnapshot.Kind.AGREEMENT)
    if snap is None:
        return {}
    ids = set(Criterion.objects.filter(rubric__study_id=deployment.study_id, key=key)
              .values_list("pk", flat=True))
    dim = deployment.watch_dimension
    agreement: dict[str, Mapping[str, float | None]] = {}
    ceiling: dict[str, float | None] = {}
    for cell in (snap.result or {}).get("cells") or []:
        if cell.get("judge_version") != version or cell.get("criterion") not in ids:
            continue
        if cell.get("dimension", "") == "":
            label = ""
        elif cell.get("dimension") == dim:
            label = str(cell.get("label", ""))
        else:
            continue
        acc = (cell.get("metrics") or {}).get("accuracy") or {}
        if acc.get("value") is not None:
            agreement[label] = {k: acc.get(k) for k in ("value", "ci_low", "ci_high")}
        pooled = ((cell.get("ceiling") or {}).get("pooled_agreement") or {}).get("value")
        ceiling[label] = None if pooled is None else float(pooled)
    return {"agreement": agreement, "ceiling": ceiling}


def selection_agreement(deployment: Deployment) -> dict[str, Any]:
    """``{"agreement": ..., "ceiling": ...}`` of `SelectionReference` alone (empty without a
    judge, a pass-rate criterion or an agreement report)."""
    version = min((v.pk for v in deployment.judge_versions.all()), default=None)
    key = criterion_key(deployment)
    if version is None or key is None:
        return {}
    return _agreement_part(deployment, version, key)


def selection_reference(deployment: Deployment) -> SelectionReference:
    """The selection-time evidence of the deployment's study (module docstring)."""
    parts: dict[str, Any] = {}
    version = min((v.pk for v in deployment.judge_versions.all()), default=None)
    key = criterion_key(deployment)
    if version is not None and key is not None:
        parts.update(_calibration_part(deployment, version, key))
        parts.update(_agreement_part(deployment, version, key))
    dim = deployment.watch_dimension
    if dim:
        mix: Counter[str] = Counter()
        for strata in Item.objects.filter(study_id=deployment.study_id).values_list(
                "strata", flat=True).iterator(chunk_size=5000):
            mix[str((strata or {}).get(dim, "unknown"))] += 1
        parts["selection_mix"] = dict(sorted(mix.items()))
    finish = (Output.objects.filter(candidate_id=deployment.candidate_id)
              .values("finish_reason").annotate(n=Count("id")))
    parts["reference_finish"] = {r["finish_reason"] or "(none)": r["n"] for r in finish}
    return SelectionReference(**parts)


def gate_limits(deployment: Deployment) -> tuple[float | None, float | None]:
    """The plan's p95 latency gate (ms) and the per-row cost clip (None: no such gate)."""
    gates = plan_selection(deployment.plan.spec)["gates"]
    latency_gate = gates.get("latency_p95_ms")
    cost_gate = gates.get("cost_per_1000")
    clip = None if cost_gate is None else COST_CLIP_FACTOR * cost_gate / 1000.0
    return (None if latency_gate is None else float(latency_gate)), clip


def gate_counts_assemble(finish: Mapping[str, Mapping[str, int]],
                         sums: Mapping[str, Mapping[str, Any]], clip: float | None
                         ) -> tuple[dict[str, GateCounts], GateCounts]:
    """`GateCounts` per stratum and for all traffic from each stratum's finish counts and
    stream sums (keys of `GateCounts`; a missing key is 0), whichever query read them: the
    totals are the strata's, summed in label order, so both paths add them alike."""
    cells: dict[str, GateCounts] = {}
    every: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for label in sorted(finish):
        values = {k: v for k, v in sums.get(label, {}).items() if v}
        cells[label] = GateCounts(finish=dict(sorted(finish[label].items())), cost_clip=clip,
                                  **values)
        total.update(values)
        every.update(finish[label])
    overall = GateCounts(finish=dict(sorted(every.items())), cost_clip=clip, **total)
    return cells, overall


def gate_counts(deployment: Deployment, params: WindowParams
                ) -> tuple[dict[str, GateCounts], GateCounts]:
    """Per stratum and for all traffic: the counts the gate streams and the finish-reason
    signal read (module docstring), by the ORM. On PostgreSQL the window statement reads the
    same counts in its one pass (`window.load`); this is the path of other databases."""
    latency_gate, clip = gate_limits(deployment)
    rows = TrafficRow.objects.filter(deployment=deployment, occurred_at__gte=params.start,
                                     occurred_at__lt=params.end)
    agg: dict[str, Any] = {
        "n_schema": Count("id", filter=Q(schema_valid__isnull=False)),
        "n_schema_valid": Count("id", filter=Q(schema_valid=True)),
        "n_latency": Count("id", filter=Q(latency_ms__isnull=False)),
        "n_cost": Count("id", filter=Q(cost__isnull=False)),
    }
    if latency_gate is not None:
        agg["n_slow"] = Count("id", filter=Q(latency_ms__gt=latency_gate))
    if clip is not None:
        # LEAST ignores NULLs: without the filter a row that reported no cost would add the
        # whole clip to the sum (and not to n_cost), raising the cost stream's mean.
        agg["cost_clipped_sum"] = Sum(Least(F("cost"), Value(clip)),
                                      filter=Q(cost__isnull=False))
    # One GROUP BY (stratum, finish reason) pass: the finish counts per stratum, and the
    # stream counts summed over a stratum's reasons in Python.
    finish: dict[str, Counter[str]] = {}
    sums: dict[str, Counter[str]] = {}
    names = list(agg)
    for stratum, reason, n, *found in (
            rows.values("stratum", "finish_reason").annotate(n=Count("id"), **agg)
            .values_list("stratum", "finish_reason", "n", *names)):
        label = str(stratum)
        finish.setdefault(label, Counter())[reason or NO_REASON] += int(n)
        sums.setdefault(label, Counter()).update(
            {k: (v or 0) for k, v in zip(names, found, strict=True)})
    return gate_counts_assemble(finish, sums, clip)
