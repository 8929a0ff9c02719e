"""Strata assignment: pure functions that give every item exactly one label per dimension.

No ORM access here; `studies.services.study_strata_recompute` feeds these functions item values
and writes the labels back. A dimension is a plain dict (the validated form produced by
`studies.spec.dimensions_validate`): ``{"key", "kind", "source", "config"}``.

Rules (documented for users in docs/study-spec.md):

- **Sources.** ``metadata.<key>`` reads the item's metadata (dots walk nested objects; a key
  that itself contains dots is matched first as a whole). ``input_length``,
  ``context_length`` and ``reference_length`` are lengths in characters; an item without a
  reference answer has *no* reference length (-> "unknown"), while an empty context has
  length 0 (an item can legitimately have no context).
- **unknown.** A missing key, a null, an empty string, or a value the dimension cannot read
  (a non-number for numeric bins, a list for a categorical) gets the explicit label "unknown".
  Items are never dropped.
- **categorical.** The value as a string (booleans as "true"/"false", integral floats without
  ".0"). With a ``values`` whitelist, anything else gets ``other`` (default "other").
- **numeric_bins, edges.** Strictly increasing edges ``e0 < e1 < ... < en`` make the bins
  ``[e0, e1) ... [e(n-1), en)`` and ``>= en``; a value below ``e0`` gets ``< e0``. Given
  ``labels`` name either those ``n + 1`` bins, or ``n + 2`` labels with the first one naming
  the "below e0" bin. Numeric strings such as "12.5" are read as numbers (CSV metadata);
  NaN and infinities are "unknown".
- **numeric_bins, quantiles.** ``quantiles`` is a bin count (int >= 2) or a list of cut
  probabilities in (0, 1). Edges are computed from the known values of the study's items: the
  minimum, then the cut points taken with the "inverted CDF" definition (so every edge is an
  observed value and labels read as data). Ties make adjacent edges coincide; duplicate edges
  are dropped, giving fewer bins rather than empty ones, so a heavily tied measure may end up
  with a single bin. A value equal to an edge goes to the bin that starts at that edge.
  Quantile bins are always labelled by their edges (their number depends on the data).
- **boolean.** True booleans, non-zero numbers, the strings true/yes/y/t/1 (any case) and
  non-empty lists/objects are true -> ``true_label`` (default "yes"); false, 0, the strings
  false/no/n/f/0 and empty lists/objects -> ``false_label`` (default "no"); anything else
  (including an unreadable string) -> "unknown".
- **cross.** ``cross_label(a, b)`` joins two labels with the multiplication sign (U+00D7),
  e.g. "en" and "long" give "en\u00d7long"; ``strata_cross`` reads it from an item's strata.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

UNKNOWN = "unknown"
CROSS_SEPARATOR = "\u00d7"  # the multiplication sign
DERIVED_SOURCES = ("input_length", "context_length", "reference_length")
METADATA_PREFIX = "metadata."
_TRUE_STRINGS = frozenset({"true", "yes", "y", "t", "1"})
_FALSE_STRINGS = frozenset({"false", "no", "n", "f", "0"})

_MISSING = object()


def cross_label(a: str, b: str) -> str:
    """The label of the cross of two strata: "<a>" U+00D7 "<b>" (see the module docstring)."""
    return f"{a}{CROSS_SEPARATOR}{b}"


def strata_cross(strata: Mapping[str, str], dim_a: str, dim_b: str) -> str:
    """The cross label of two dimensions from an item's stored strata ("unknown" parts kept)."""
    return cross_label(strata.get(dim_a, UNKNOWN), strata.get(dim_b, UNKNOWN))


def format_number(x: float) -> str:
    """Edge formatting for labels: integral values without a decimal point."""
    if float(x).is_integer():
        return str(int(x))
    return repr(float(x))


def metadata_lookup(metadata: Any, key: str) -> Any:
    """The value at `key` in metadata (dotted path for nested objects), or a sentinel."""
    if not isinstance(metadata, Mapping):
        return _MISSING
    if key in metadata:
        return metadata[key]
    node: Any = metadata
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def source_value(source: str, *, metadata: Any, lengths: Mapping[str, int | None]) -> Any:
    """Raw value of a dimension source for one item; the sentinel `_MISSING` when absent.

    `lengths` maps the derived source names to character counts (None: not defined)."""
    if source.startswith(METADATA_PREFIX):
        value = metadata_lookup(metadata, source[len(METADATA_PREFIX):])
    elif source in DERIVED_SOURCES:
        value = lengths.get(source)
    else:
        raise ValueError(f"unknown stratum source {source!r}")
    if value is None:
        return _MISSING
    return value


def is_missing(value: Any) -> bool:
    return value is _MISSING


def as_number(value: Any) -> float | None:
    """A finite float from a metadata value, or None (booleans are not numbers here)."""
    if isinstance(value, bool) or value is _MISSING or value is None:
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def categorical_label(value: Any, config: Mapping[str, Any]) -> str:
    if value is _MISSING or value is None or isinstance(value, list | dict):
        return UNKNOWN
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float) and value.is_integer():
        text = str(int(value))
    else:
        text = str(value).strip()
    if not text:
        return UNKNOWN
    whitelist = config.get("values")
    if whitelist and text not in whitelist:
        return str(config.get("other") or "other")
    return text


def boolean_label(value: Any, config: Mapping[str, Any]) -> str:
    true_label = str(config.get("true_label") or "yes")
    false_label = str(config.get("false_label") or "no")
    if value is _MISSING or value is None:
        return UNKNOWN
    if isinstance(value, bool):
        return true_label if value else false_label
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return UNKNOWN
        return true_label if value != 0 else false_label
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE_STRINGS:
            return true_label
        if text in _FALSE_STRINGS:
            return false_label
        return UNKNOWN
    if isinstance(value, list | dict):
        return true_label if value else false_label
    return UNKNOWN


def edge_labels(edges: Sequence[float]) -> list[str]:
    """Auto labels for edges: ``["< e0", "[e0, e1)", ..., ">= en"]`` (n + 2 labels)."""
    out = [f"< {format_number(edges[0])}"]
    for lo, hi in itertools.pairwise(edges):
        out.append(f"[{format_number(lo)}, {format_number(hi)})")
    out.append(f">= {format_number(edges[-1])}")
    return out


def bin_labels(edges: Sequence[float], labels: Sequence[str] | None = None) -> list[str]:
    """All n + 2 bin labels for edges (index 0 is "below e0"), applying user `labels`."""
    auto = edge_labels(edges)
    if not labels:
        return auto
    if len(labels) == len(edges):  # names the bins from e0 upwards; below e0 stays automatic
        return [auto[0], *labels]
    if len(labels) == len(edges) + 1:
        return list(labels)
    raise ValueError(
        f"{len(labels)} labels for {len(edges)} edges: give {len(edges)} (bins from the first "
        f"edge up) or {len(edges) + 1} (the first naming values below the first edge)"
    )


def numeric_label(value: Any, edges: Sequence[float], labels: Sequence[str]) -> str:
    """Bin label of a value given edges and the n + 2 labels from `bin_labels`."""
    number = as_number(value)
    if number is None:
        return UNKNOWN
    # bisect_right: a value equal to an edge belongs to the bin starting at that edge.
    return labels[bisect.bisect_right(edges, number)]


def quantile_edges(values: Iterable[float], quantiles: int | Sequence[float]) -> list[float]:
    """Edges for quantile bins over the known values: min, then the cut points (inverted CDF),
    duplicates dropped. Empty when there are no values."""
    data = np.asarray([v for v in values], dtype=float)
    if data.size == 0:
        return []
    if isinstance(quantiles, int):
        probs = [i / quantiles for i in range(1, quantiles)]
    else:
        probs = [float(q) for q in quantiles]
    cuts = np.quantile(data, probs, method="inverted_cdf") if probs else np.array([])
    edges = sorted({float(data.min()), *(float(c) for c in cuts)})
    return edges


class DimensionAssigner:
    """Assigns one dimension's labels; built once per recompute (quantile edges precomputed)."""

    def __init__(self, dimension: Mapping[str, Any], *, edges: Sequence[float] | None = None):
        self.key = str(dimension["key"])
        self.kind = str(dimension["kind"])
        self.source = str(dimension["source"])
        self.config: Mapping[str, Any] = dimension.get("config") or {}
        self.edges: list[float] = []
        self.labels: list[str] = []
        if self.kind == "numeric_bins":
            if "edges" in self.config:
                self.edges = [float(e) for e in self.config["edges"]]
                self.labels = bin_labels(self.edges, self.config.get("labels"))
            else:
                if edges is None:
                    raise ValueError(f"dimension {self.key!r}: quantile edges not computed")
                self.edges = list(edges)
                self.labels = bin_labels(self.edges) if self.edges else []

    @property
    def needs_quantiles(self) -> bool:
        return self.kind == "numeric_bins" and "quantiles" in self.config

    def label(self, value: Any) -> str:
        if self.kind == "categorical":
            return categorical_label(value, self.config)
        if self.kind == "boolean":
            return boolean_label(value, self.config)
        if self.kind == "numeric_bins":
            if not self.edges:
                return UNKNOWN  # quantiles over a study with no known value
            return numeric_label(value, self.edges, self.labels)
        raise ValueError(f"unknown dimension kind {self.kind!r}")


def dimension_needs_quantiles(dimension: Mapping[str, Any]) -> bool:
    return dimension.get("kind") == "numeric_bins" and "quantiles" in (
        dimension.get("config") or {}
    )


def assign_strata(
    assigners: Sequence[DimensionAssigner], *, metadata: Any, lengths: Mapping[str, int | None]
) -> dict[str, str]:
    """The {dimension key: label} of one item."""
    return {
        a.key: a.label(source_value(a.source, metadata=metadata, lengths=lengths))
        for a in assigners
    }


def dimension_possible_labels(dimension: Mapping[str, Any]) -> list[str] | None:
    """Every label the dimension can produce, when that is known without data (None for open
    categoricals and quantile bins)."""
    kind = dimension.get("kind")
    config = dimension.get("config") or {}
    if kind == "boolean":
        return [str(config.get("true_label") or "yes"), str(config.get("false_label") or "no"),
                UNKNOWN]
    if kind == "categorical":
        if not config.get("values"):
            return None
        return [*[str(v) for v in config["values"]], str(config.get("other") or "other"), UNKNOWN]
    if kind == "numeric_bins" and "edges" in config:
        return [*bin_labels([float(e) for e in config["edges"]], config.get("labels")), UNKNOWN]
    return None
