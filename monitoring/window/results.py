"""The typed, versioned result of a monitoring window (pure: no Django).

Stored as JSON in `monitoring.Window.result`; `WindowResult.from_json` reads it back and
refuses a version it does not know (a result written by a newer release). Version history:

1. First version: per-stratum counts, pass rates (judge-only, human-only, prediction-powered),
   judge-human agreement on the random human draws, gates, label-free signals against a
   reference, the traffic mix against the plan's.
2. The calibrated pass rate, judge trust (agreement on the random human draws against the
   selection-time agreement and the human ceiling), calibration drift, the mix against the
   selection sample, finish reasons, and the counts the gate streams accumulate (schema
   validity, latency over the p95 gate, clipped cost). A version-1 result reads with these
   empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

RESULT_VERSION = 2
# Versions `from_json` reads: a version-1 window reads with the version-2 figures empty.
READABLE_VERSIONS = (1, 2)


@dataclass(frozen=True)
class StratumWindow:
    """One stratum of the window ("" = all traffic).

    ``pass_*`` are `evalstats.PPIEstimate.to_json()` dicts (None: not estimable). The counts
    ``n_human`` / ``human_pass_sum`` (random human draws only) and ``n_rows`` / ``n_errors``
    are what the anytime-valid alerts accumulate across windows.
    """

    stratum: str
    n_rows: int
    share: float | None
    plan_share: float | None
    n_judged: int
    n_human: int
    n_escalated: int
    human_pass_sum: float
    n_errors: int
    pass_judge: dict[str, Any] | None
    pass_human: dict[str, Any] | None
    pass_ppi: dict[str, Any] | None
    error_rate: float | None
    latency_p95_ms: float | None
    cost_per_1000: float | None
    refusal_rate: float | None
    injection_rate: float | None
    mean_output_chars: float | None
    # Judge and human on the same random draws: the share where the judge's value, read as
    # pass at >= 0.5, matches the human's (None without such rows).
    judge_agreement: float | None = None
    warnings: tuple[str, ...] = ()
    # The judge's values mapped through the calibration curve in force (None: no curve).
    pass_calibrated: dict[str, Any] | None = None
    # Random human draws with a judge value beside them, and how many of those agree.
    n_agree_pairs: int = 0
    n_agree: int = 0
    # {"agreement": Wilson estimate, "selection": {"value", "ci_low", "ci_high"} | None,
    #  "ceiling": float | None, "state": "agrees" | "no_longer" | "no_reference" | "unknown"}
    judge_trust: dict[str, Any] | None = None
    # Counts of the gate streams (monitoring.window.context.GateCounts).
    n_schema: int = 0
    n_schema_valid: int = 0
    n_latency: int = 0
    n_slow: int = 0
    n_cost: int = 0
    cost_clipped_sum: float = 0.0
    finish_reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class MixRow:
    label: str
    n: int
    share: float
    plan_share: float | None
    # The label's share of the selection study's items (None: no selection sample read).
    selection_share: float | None = None


@dataclass(frozen=True)
class MixResult:
    """The window's traffic mix over the watched dimension against the plan's deployment mix.

    ``new_labels``: labels the plan's mix does not name; ``unknown``: rows whose value could
    not be read (the "unknown" stratum); ``chi2_p``: goodness of fit of the counts on the
    plan's labels to the plan's shares (None without a plan mix or traffic)."""

    dimension: str
    rows: tuple[MixRow, ...]
    unknown: int
    new_labels: tuple[str, ...]
    chi2_p: float | None
    # Goodness of fit to the selection sample's shares, and the labels it never saw.
    selection_chi2_p: float | None = None
    unseen_in_selection: tuple[str, ...] = ()


@dataclass(frozen=True)
class GateRow:
    metric: str
    value: float | None
    limit: float
    direction: str  # "max" or "min"
    passed: bool | None


@dataclass(frozen=True)
class SignalRow:
    """A label-free behaviour signal against the reference sample (the shipped candidate's
    outputs in the selection study)."""

    signal: str
    window_value: float | None
    reference_value: float | None
    n_window: int
    n_reference: int
    p_value: float | None
    changed: bool | None
    test: str


@dataclass(frozen=True)
class WindowResult:
    granularity: str
    start: str
    end: str
    level: float
    signal_alpha: float
    n_rows: int
    overall: StratumWindow
    strata: tuple[StratumWindow, ...]
    mix: MixResult | None
    gates: tuple[GateRow, ...]
    signals: tuple[SignalRow, ...]
    injection_rules: dict[str, int] = field(default_factory=dict)
    # Reliability of the calibrated judge on the window's random human draws against the
    # snapshot's (see compute_trust.calibration_drift); None without a curve or labels.
    calibration_drift: dict[str, Any] | None = None
    version: int = RESULT_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WindowResult:
        version = d.get("version")
        if version not in READABLE_VERSIONS:
            raise ValueError(f"window result version {version!r} is not one of "
                             f"{READABLE_VERSIONS}")

        def stratum(s: Mapping[str, Any]) -> StratumWindow:
            return StratumWindow(**{**s, "warnings": tuple(s.get("warnings", ()))})

        mix = d.get("mix")
        return cls(
            granularity=d["granularity"], start=d["start"], end=d["end"], level=d["level"],
            signal_alpha=d["signal_alpha"], n_rows=d["n_rows"],
            overall=stratum(d["overall"]),
            strata=tuple(stratum(s) for s in d["strata"]),
            mix=None if mix is None else MixResult(
                dimension=mix["dimension"], rows=tuple(MixRow(**r) for r in mix["rows"]),
                unknown=mix["unknown"], new_labels=tuple(mix["new_labels"]),
                chi2_p=mix["chi2_p"], selection_chi2_p=mix.get("selection_chi2_p"),
                unseen_in_selection=tuple(mix.get("unseen_in_selection", ()))),
            gates=tuple(GateRow(**g) for g in d["gates"]),
            signals=tuple(SignalRow(**s) for s in d["signals"]),
            injection_rules=dict(d.get("injection_rules", {})),
            calibration_drift=d.get("calibration_drift"),
            version=version,
        )
