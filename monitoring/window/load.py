"""Load a monitoring window's input: the window's totals per stratum, its sampled rows with
their labels, a random subsample for the rank tests, and what they are compared with (the
plan's mix and gates, the shipped candidate's selection outputs as the reference of the
label-free signals).

The only module of the window kind that touches the database; `compute` is pure.

Reading every row of a 100k-row day through the ORM took ~4.6 s a window, so the heavy part is
the database's:

* **Totals** (`CellTotals` per stratum and for all traffic: counts of rows, errors, refusals,
  injection matches and escalations, mean output length and cost, latency p50/p95 with
  ``percentile_cont``, the schema-valid rate) and the gate streams' counts (`GateCounts`:
  schema, latency over the p95 gate, clipped cost, finish reasons) are one GROUP BY GROUPING
  SETS query on PostgreSQL, in the same single pass over the window's rows as the two
  row-level reads below (`_WINDOW_SQL`); other databases read the gate counts with
  `context.gate_counts`. On SQLite (no ``percentile_cont``, no grouping sets) the same
  totals come from the rows in Python (`compute.cell_totals`); both give the same counts and
  rates, and means and percentiles equal up to floating-point rounding
  (tests/monitoring/test_window_sql.py).
* **Pass rates** read only the rows drawn for the judges or humans (about the judge rate of
  the window), every one of them: the estimates are unchanged.
* **Rank tests** of output length and latency run on the `SIGNAL_SAMPLE` rows of the window
  with the smallest permanent random numbers ``sample_u`` (ties by id). ``u`` is a hash of the
  deployment and request id, independent of the row's content and uniform, so the rows with
  the k smallest values are a simple random sample without replacement of the window's rows
  (all of them when the window has fewer): the Mann-Whitney test of that sample against the
  reference is the same valid test of "the window's distribution equals the reference's", on
  fewer rows. The sample is over the whole window, not k per stratum: equal numbers per
  stratum would weight the strata equally, and a mix shift would then read as a changed model.
  The sample is deterministic (a recomputed window tests the same rows) and the same on both
  databases. With 20,000 rows the test already detects a shift of a few hundredths of a
  standard deviation at the signals' strict level, so more rows buy nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import connection, transaction
from django.db.models import Avg, Q, TextField
from django.db.models.functions import Cast, Length, Substr

from studies.models import Output
from studies.spec import plan_selection

from .. import signals
from ..models import Deployment, TrafficLabel, TrafficRow
from . import context as window_context
from .compute import CellTotals, GateCounts, WindowInput, cell_totals
from .params import WindowParams
from .trust import NO_REASON

# The reference sample is capped: a rank test gains nothing from more than this.
REFERENCE_LIMIT = 20_000
# Rows of a window the rank tests of the label-free signals run on (module docstring).
SIGNAL_SAMPLE = 20_000
# How many more rows than SIGNAL_SAMPLE the cut-off on u is expected to let through: 1,000 is
# seven standard deviations of the count at 20,000 (`_WINDOW_SQL`).
SIGNAL_SLACK = 1_000
# For the window statement only (SET LOCAL, the end of its transaction): no JIT (compiling
# its expressions cost more than running them: ~30 ms of server CPU a 100k-row day, far more
# wall time on a loaded machine) and room to keep the window's rows and sorts in memory
# (the default 4 MB spilled the materialised rows and the totals' sort to temporary files).
_STATEMENT_SETTINGS = ("SET LOCAL jit = off", "SET LOCAL work_mem = '32MB'")
# An empty JSON list as PostgreSQL's jsonb and SQLite's JSON text both print it.
EMPTY_LIST = "[]"


def _floats(values: list[Any]) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def _reference(deployment: Deployment) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    rows = list(
        Output.objects.filter(candidate_id=deployment.candidate_id, error="")
        .annotate(chars=Length("text"), head=Substr("text", 1, 200))
        .order_by("id").values_list("chars", "latency_ms", "head")[:REFERENCE_LIMIT]
    )
    chars = _floats([r[0] for r in rows])
    latency = _floats([r[1] for r in rows])
    refusals = sum(signals.is_refusal(r[2] or "") for r in rows)
    return chars, latency, (refusals, len(rows))


# One pass over the window's rows (PostgreSQL): the narrow columns every part needs are read
# once (an index or bitmap scan of the window) into a materialised CTE; the totals, the signal
# subsample, the sampled rows with their labels and the finish reasons per stratum are
# computed from it and returned as four documents. The gate streams' counts
# (`context.GateCounts`) are more aggregates of the totals' GROUP BY and the finish reasons a
# hash aggregate of the materialised rows: read by a query of their own
# (`context.gate_counts`, now the path of other databases) they cost a second scan of the
# window's rows. p50 and p95 come from one ordered-set aggregate (one sort of each cell's
# latencies). The signal subsample sorts only the rows whose u lies below a cut-off that
# SIGNAL_SLACK rows more than SIGNAL_SAMPLE are expected to pass (u is uniform; the slack is
# several standard deviations), instead of keeping a top-N heap over every row of the window;
# in the rare window where fewer pass, `_signal_rows` reads the sample again without the cut,
# so the rows are always exactly the SIGNAL_SAMPLE smallest.
_WINDOW_SQL = """
WITH w AS MATERIALIZED (
    SELECT id, stratum, error <> '' AS is_error, refusal,
           injection_rules <> '[]'::jsonb AS is_injection, escalated AND NOT to_human AS esc,
           output_chars, cost, latency_ms, schema_valid::int AS valid, sample_u,
           to_judge, judge_pi, to_human, human_pi, finish_reason
    FROM {rows}
    WHERE deployment_id = %(deployment)s AND occurred_at >= %(start)s AND occurred_at < %(end)s
), cells AS (
    SELECT stratum, GROUPING(stratum) AS is_all, count(*) AS n,
           count(*) FILTER (WHERE is_error) AS errors,
           count(*) FILTER (WHERE refusal) AS refusals,
           count(*) FILTER (WHERE is_injection) AS injections,
           count(*) FILTER (WHERE esc) AS escalated,
           avg(output_chars)::float8 AS chars, avg(cost) AS cost,
           percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY latency_ms) AS p,
           avg(valid)::float8 AS valid,
           count(valid) AS n_schema, coalesce(sum(valid), 0) AS n_schema_valid,
           count(latency_ms) AS n_latency,
           count(*) FILTER (WHERE latency_ms > %(slow)s::float8) AS n_slow,
           count(cost) AS n_cost,
           coalesce(sum(least(cost, %(clip)s::float8)) FILTER (WHERE cost IS NOT NULL),
                    0)::float8 AS cost_clipped_sum
    FROM w GROUP BY GROUPING SETS ((stratum), ())
), finish AS (
    SELECT stratum, finish_reason, count(*) AS n FROM w GROUP BY stratum, finish_reason
), signal AS (
    SELECT output_chars, latency_ms FROM w
    WHERE sample_u <= (SELECT (%(signal)s + %(slack)s)::float8 / greatest(n, 1)
                       FROM cells WHERE is_all = 1)
    ORDER BY sample_u, id LIMIT %(signal)s
), sampled AS (
    SELECT w.id, w.stratum, w.to_judge, w.judge_pi, w.to_human, w.human_pi,
           avg(l.value) FILTER (WHERE l.source = 'judge') AS judge_value,
           avg(l.value) FILTER (WHERE l.source = 'human') AS human_value
    FROM w LEFT JOIN {labels} l ON l.row_id = w.id
    WHERE w.to_judge OR w.to_human
    GROUP BY w.id, w.stratum, w.to_judge, w.judge_pi, w.to_human, w.human_pi
)
SELECT
    (SELECT coalesce(json_agg(json_build_array(stratum, is_all, n, errors, refusals,
                                               injections, escalated, chars, cost, p[1],
                                               p[2], valid, n_schema, n_schema_valid,
                                               n_latency, n_slow, n_cost, cost_clipped_sum)),
                     '[]') FROM cells),
    (SELECT array_to_string(array_agg(output_chars), ',') || ';'
            || array_to_string(array_agg(latency_ms), ',', 'NaN') FROM signal),
    (SELECT coalesce(json_agg(json_build_array(stratum, to_judge, judge_pi, judge_value,
                                               to_human, human_pi, human_value) ORDER BY id),
                     '[]') FROM sampled),
    (SELECT coalesce(json_agg(json_build_array(stratum, finish_reason, n)), '[]') FROM finish)
"""


@dataclass(frozen=True)
class _Loaded:
    """What the window statement returns, decoded."""

    cells: dict[str, CellTotals]
    totals: CellTotals
    signal: tuple[np.ndarray, np.ndarray]
    sampled: list[Any]
    gate_cells: dict[str, GateCounts]
    gate_totals: GateCounts


# The gate streams' counts in the order the statement returns them after `CellTotals`.
_GATE_KEYS = ("n_schema", "n_schema_valid", "n_latency", "n_slow", "n_cost",
              "cost_clipped_sum")


def _load_sql(deployment: Deployment, params: WindowParams) -> _Loaded:
    """Totals per stratum and for all traffic, the signal subsample, the sampled rows and the
    gate counts, by PostgreSQL in one statement."""
    sql = _WINDOW_SQL.format(rows=TrafficRow._meta.db_table,
                             labels=TrafficLabel._meta.db_table)
    latency_gate, clip = window_context.gate_limits(deployment)
    cells: dict[str, CellTotals] = {}
    totals = CellTotals(0, 0, 0, 0, 0, None, None, None, None, None)
    with transaction.atomic(), connection.cursor() as cur:
        for setting in _STATEMENT_SETTINGS:
            cur.execute(setting)
        cur.execute(sql, {"deployment": deployment.pk, "start": params.start,
                          "end": params.end, "signal": SIGNAL_SAMPLE, "slack": SIGNAL_SLACK,
                          "slow": latency_gate, "clip": clip})
        cell_rows, signal, sampled, finish_rows = cur.fetchone()
    sums: dict[str, dict[str, Any]] = {}
    for stratum, is_all, *rest in _json(cell_rows):
        ints = [int(v) for v in rest[:5]]
        floats = [None if v is None else float(v) for v in rest[5:10]]
        cell = CellTotals(*ints, *floats)
        if is_all:
            totals = cell
        else:
            cells[str(stratum)] = cell
            sums[str(stratum)] = dict(zip(_GATE_KEYS, rest[10:], strict=True))
            if clip is None:  # no cost gate: least(cost, NULL) is the cost itself
                sums[str(stratum)]["cost_clipped_sum"] = 0.0
    finish: dict[str, Counter[str]] = {}
    for stratum, reason, n in _json(finish_rows):
        finish.setdefault(str(stratum), Counter())[reason or NO_REASON] += int(n)
    gate_cells, gate_totals = window_context.gate_counts_assemble(finish, sums, clip)
    # The subsample comes as two comma-separated lists ("chars;latencies", NaN for a missing
    # latency): parsed by numpy, a third of the client CPU of 20,000 JSON pairs.
    chars, latency = np.zeros(0), np.zeros(0)
    if signal:  # NULL: no row
        text_chars, text_latency = signal.split(";")
        chars = np.fromstring(text_chars, sep=",")
        latency = np.fromstring(text_latency, sep=",")
    if chars.size < min(SIGNAL_SAMPLE, totals.n_rows):
        chars, latency = _signal_rows(deployment, params)  # the cut-off let too few through
    return _Loaded(cells, totals, (chars, latency), _json(sampled), gate_cells, gate_totals)


def _signal_rows(deployment: Deployment, params: WindowParams) -> tuple[np.ndarray, np.ndarray]:
    """The rows with the SIGNAL_SAMPLE smallest u, without a cut-off: output chars, latency."""
    rows = list(TrafficRow.objects.filter(deployment=deployment, occurred_at__gte=params.start,
                                          occurred_at__lt=params.end)
                .order_by("sample_u", "id").values_list("output_chars", "latency_ms")
                [:SIGNAL_SAMPLE])
    return _floats([r[0] for r in rows]), _floats([r[1] for r in rows])


def _json(value: Any) -> Any:
    # psycopg decodes json itself; a driver that hands back text is decoded here.
    return json.loads(value) if isinstance(value, str) else value


def _cells_python(in_window: Any) -> tuple[dict[str, CellTotals], CellTotals]:
    """The same totals from every row, in Python (SQLite)."""
    rows = list(in_window.annotate(rules_text=Cast("injection_rules", output_field=TextField()))
                .values_list("stratum", "error", "refusal", "rules_text", "escalated",
                             "to_human", "output_chars", "cost", "latency_ms", "schema_valid"))
    cols: list[tuple[Any, ...]] = (list(zip(*rows, strict=True)) if rows
                                   else [() for _ in range(10)])
    stratum = np.array([str(v) for v in cols[0]], dtype=object)
    arrays = {
        "error": np.array([bool(e) for e in cols[1]], dtype=bool),
        "refusal": np.array(list(cols[2]), dtype=bool),
        "injection": np.array([t != EMPTY_LIST for t in cols[3]], dtype=bool),
        "escalated_only": (np.array(list(cols[4]), dtype=bool)
                           & ~np.array(list(cols[5]), dtype=bool)),
        "output_chars": _floats(list(cols[6])),
        "cost": _floats(list(cols[7])),
        "latency_ms": _floats(list(cols[8])),
        "schema_valid": _floats([None if v is None else float(v) for v in cols[9]]),
    }
    cells = {}
    for label in sorted(set(stratum)):
        mask = stratum == label
        cells[label] = cell_totals(**{k: v[mask] for k, v in arrays.items()})
    return cells, cell_totals(**arrays)


def window_input_load(*, deployment: Deployment, params: WindowParams,
                      in_database: bool | None = None) -> WindowInput:
    """The window's input (see `compute.WindowInput` and the module docstring).
    `in_database`: totals by the database (default: on PostgreSQL) or from the rows."""
    in_window = TrafficRow.objects.filter(deployment=deployment, occurred_at__gte=params.start,
                                          occurred_at__lt=params.end)
    if in_database is None:
        in_database = connection.vendor == "postgresql"
    rows: list[Any]
    signal: tuple[np.ndarray, np.ndarray]
    if in_database:
        loaded = _load_sql(deployment, params)
        cells, totals, signal, rows = loaded.cells, loaded.totals, loaded.signal, loaded.sampled
        gate_cells, gate_totals = loaded.gate_cells, loaded.gate_totals
    else:
        cells, totals = _cells_python(in_window)
        gate_cells, gate_totals = window_context.gate_counts(deployment, params)
        rows = list(
            in_window.filter(Q(to_judge=True) | Q(to_human=True))
            .annotate(judge_value=Avg("labels__value", filter=Q(labels__source="judge")),
                      human_value=Avg("labels__value", filter=Q(labels__source="human")))
            .order_by("id")
            .values_list("stratum", "to_judge", "judge_pi", "judge_value", "to_human",
                         "human_pi", "human_value")
        )
        signal = _signal_rows(deployment, params)
    cols: list[tuple[Any, ...]] = (list(zip(*rows, strict=True)) if rows
                                   else [() for _ in range(7)])
    rules: Counter[str] = Counter()
    if totals.n_injections:
        # Only the flagged rows' lists are decoded, for the per-rule counts.
        rules_text = Cast("injection_rules", output_field=TextField())
        for names in (in_window.annotate(rules_text=rules_text).exclude(rules_text=EMPTY_LIST)
                      .values_list("injection_rules", flat=True)):
            rules.update(names)
    plan = plan_selection(deployment.plan.spec)
    mix_shares = plan["mixes"].get(deployment.watch_dimension, {})
    ref_chars, ref_latency, ref_refusals = _reference(deployment)
    return WindowInput(
        granularity=params.granularity,
        start=params.start.isoformat(),
        end=params.end.isoformat(),
        cells=cells,
        totals=totals,
        stratum=np.array([str(v) for v in cols[0]], dtype=object),
        to_judge=np.array(list(cols[1]), dtype=bool),
        judge_pi=_floats(list(cols[2])),
        judge_value=_floats(list(cols[3])),
        to_human=np.array(list(cols[4]), dtype=bool),
        human_pi=_floats(list(cols[5])),
        human_value=_floats(list(cols[6])),
        signal_output_chars=signal[0],
        signal_latency_ms=signal[1],
        injection_rules=dict(sorted(rules.items())),
        mix_dimension=deployment.watch_dimension,
        plan_mix=mix_shares,
        plan_gates=plan["gates"],
        level=plan["level"],
        reference_output_chars=ref_chars,
        reference_latency_ms=ref_latency,
        reference_refusals=ref_refusals,
        gate_cells=gate_cells,
        gate_totals=gate_totals,
    )
