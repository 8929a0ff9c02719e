"""PPI's shared pieces: the estimate type, input checks and interval arithmetic."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import numpy as np
import numpy.typing as npt
from scipy.special import ndtri, stdtrit

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
#: ``"normal"``: the z interval of ``ppi_py``; ``"t"``: the small-sample interval (see module doc).
Interval = Literal["normal", "t"]


class PPIMeanOptions(TypedDict, total=False):
    """The keyword options of :func:`evalstats.ppi.ppi_mean` (defaults and meaning there),
    which the paired differences pass on unchanged."""

    w: npt.ArrayLike | None
    w_unlabelled: npt.ArrayLike | None
    lam: float | None
    level: float
    interval: Interval
    census: bool
INTERVALS: tuple[Interval, ...] = ("normal", "t")

#: Tolerance on the deployment mix summing to 1.
MIX_TOLERANCE = 1e-6
#: The most human labels :func:`neyman_allocation` plans; a target that needs more is infeasible.
MAX_LABELS = 10**12


def _num(x: float | None) -> float | None:
    """A float for JSON: non-finite values become null (strict JSON has no NaN)."""
    if x is None or not math.isfinite(x):
        return None
    return float(x)


@dataclass(frozen=True, kw_only=True)
class PPIEstimate:
    """A mean (or difference, or strength) with its normal interval.

    ``se`` is the standard error the interval is built from; ``ci_low``, ``ci_high`` and
    ``se`` are ``None`` when no interval exists (fewer than two labels); ``df`` is the degrees
    of freedom of a Student t interval (``None``: a normal interval). ``lam`` is the
    PPI++ weight of the judge (0 = human-only, 1 = plain PPI), ``None`` where it does not
    apply (human-only, judge-only, a mix of strata with their own ``lam``). ``n_labelled``
    counts the human-labelled outputs used, ``n_unlabelled`` the judge-only ones.
    """

    value: float
    ci_low: float | None
    ci_high: float | None
    se: float | None
    n_labelled: int
    n_unlabelled: int
    lam: float | None
    method: str
    level: float
    warnings: tuple[str, ...] = ()
    df: float | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict; NaN and infinities become ``None``.

        The key ``df`` is present only for a Student t interval (``df`` not ``None``), so
        that the default (normal) shape has exactly the ten documented keys.
        """
        out: dict[str, Any] = {
            "value": _num(self.value),
            "ci_low": _num(self.ci_low),
            "ci_high": _num(self.ci_high),
            "se": _num(self.se),
            "n_labelled": self.n_labelled,
            "n_unlabelled": self.n_unlabelled,
            "lam": _num(self.lam),
            "method": self.method,
            "level": self.level,
            "warnings": list(self.warnings),
        }
        if self.df is not None:
            out["df"] = _num(self.df)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PPIEstimate:
        """Inverse of :meth:`to_json` (a null value reads back as NaN)."""

        def opt(key: str) -> float | None:
            v = d.get(key)
            return None if v is None else float(v)

        value = d.get("value")
        return cls(
            value=math.nan if value is None else float(value),
            ci_low=opt("ci_low"),
            ci_high=opt("ci_high"),
            se=opt("se"),
            n_labelled=int(d["n_labelled"]),
            n_unlabelled=int(d["n_unlabelled"]),
            lam=opt("lam"),
            method=str(d["method"]),
            level=float(d["level"]),
            warnings=tuple(str(w) for w in d.get("warnings", ())),
            df=opt("df"),
        )


# --- input checks -----------------------------------------------------------------------------


def _vec(x: npt.ArrayLike, name: str) -> FloatArray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (drop missing values first)")
    return arr


def _same_length(*pairs: tuple[FloatArray | IntArray, str]) -> None:
    lengths = {len(a) for a, _ in pairs}
    if len(lengths) > 1:
        names = ", ".join(n for _, n in pairs)
        raise ValueError(f"{names} must have the same length")


def _level(level: float) -> float:
    if not (0.0 < float(level) < 1.0):
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    return float(level)


@functools.lru_cache(maxsize=64)
def _z(level: float) -> float:
    # ndtri is what norm.ppf evaluates, without its argument-checking overhead.
    return float(ndtri(1.0 - (1.0 - level) / 2.0))


def _weights(w: npt.ArrayLike | None, n: int, name: str) -> FloatArray:
    """Weights rescaled to mean 1 (``w / w.sum() * n``, as ``ppi_py``); ones when ``None``."""
    if w is None:
        return np.ones(n)
    arr = _vec(w, name)
    if len(arr) != n:
        raise ValueError(f"{name} must have one weight per value ({n}), got {len(arr)}")
    if n and np.any(arr <= 0):
        raise ValueError(f"{name} must be positive")
    return arr / arr.sum() * n if n else arr


def _codes(s: npt.ArrayLike, name: str) -> IntArray:
    arr = np.asarray(s)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            return arr.astype(np.int64)
        raise ValueError(f"{name} must hold integer stratum codes")
    return arr.astype(np.int64)


def _check_mix(mix: Mapping[int, float]) -> dict[int, float]:
    out: dict[int, float] = {}
    for k, v in mix.items():
        fv = float(v)
        if not math.isfinite(fv) or fv < 0:
            raise ValueError(f"mix weight of stratum {k} must be a finite number >= 0, got {v!r}")
        out[int(k)] = fv
    total = sum(out.values())
    if abs(total - 1.0) > MIX_TOLERANCE:
        raise ValueError(f"mix weights must sum to 1, got {total:.6g}")
    return out


def _estimate(
    value: float,
    se: float | None,
    *,
    n_labelled: int,
    n_unlabelled: int,
    lam: float | None,
    method: str,
    level: float,
    warnings: tuple[str, ...] = (),
    df: float | None = None,
) -> PPIEstimate:
    if se is None or not math.isfinite(se):
        lo = hi = None
        se = None
        df = None
    else:
        half = (_z(level) if df is None else _t(level, df)) * se
        lo, hi = value - half, value + half
    return PPIEstimate(
        value=float(value),
        ci_low=lo,
        ci_high=hi,
        se=se,
        n_labelled=n_labelled,
        n_unlabelled=n_unlabelled,
        lam=lam,
        method=method,
        level=level,
        warnings=warnings,
        df=df,
    )


def _t(level: float, df: float) -> float:
    # stdtrit is what scipy.stats.t.ppf evaluates.
    return float(stdtrit(df, 1.0 - (1.0 - level) / 2.0))


def _check_interval(interval: str) -> Interval:
    if interval not in INTERVALS:
        raise ValueError(f"interval must be one of {INTERVALS}, got {interval!r}")
    return "t" if interval == "t" else "normal"


def _interval_text(df: float | None) -> str:
    if df is None:
        return "normal interval"
    return f"Student t interval (df={df:.3g})"


def _welch_df(parts: Sequence[tuple[float, float]]) -> float | None:
    """Welch-Satterthwaite degrees of freedom of a sum of variances ``(v_k, df_k)``."""
    total = sum(v for v, _ in parts)
    denom = sum(v * v / d for v, d in parts if v > 0 and d > 0)
    if not (total > 0) or not (denom > 0):
        return None
    return total * total / denom


def _few_labels(n: int) -> tuple[str, ...]:
    return (f"only {n} human label(s) (< 2): no interval",) if n < 2 else ()
