"""The typed, versioned result of a monitoring window (pure: no Django).

Stored as JSON in `monitoring.Window.result`; `WindowResult.from_json` reads it back and
refuses a version it does not know (a result written by a newer release). Version history:

1. First version: per-stratum counts, pass rates (judge-only, human-only, prediction-powered),
   judge-human agreement on the random human draws, gates, label-free signals against a
   reference, the traffic mix against the plan's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

RESULT_VERSION = 1


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


@dataclass(frozen=True)
class MixRow:
    label: str
    n: int
    share: float
    plan_share: float | None


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
    version: int = RESULT_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WindowResult:
        version = d.get("version")
        if version != RESULT_VERSION:
            raise ValueError(f"window result version {version!r} is not {RESULT_VERSION}")

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
                chi2_p=mix["chi2_p"]),
            gates=tuple(GateRow(**g) for g in d["gates"]),
            signals=tuple(SignalRow(**s) for s in d["signals"]),
            injection_rules=dict(d.get("injection_rules", {})),
            version=version,
        )
