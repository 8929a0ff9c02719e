"""The strata section of a study spec: dimensions, their sources and their labels."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from reviewhub.errors import Problems
from studies.spec.common import (
    DIMENSION_KINDS,
    is_int,
    is_number,
    join,
    keyed_entries_validate,
)
from studies.spec.entries import entry_open, problems_of
from studies.strata import (
    DERIVED_SOURCES,
    METADATA_PREFIX,
    UNKNOWN,
    bin_labels,
)

# --- Strata dimensions ------------------------------------------------------------------------

_DIMENSION_FIELDS = {"key", "name", "kind", "source", "config"}
_CONFIG_FIELDS = {
    "categorical": {"values", "other"},
    "numeric_bins": {"edges", "quantiles", "labels"},
    "boolean": {"true_label", "false_label"},
}


def _label_ok(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) and len(value) <= 200


def _categorical_config(config_raw: Mapping[str, Any], cpath: str, label: str,
                        problems: Problems) -> dict[str, Any]:
    """A categorical dimension's listed values and its label for the rest."""
    config: dict[str, Any] = {}
    values = config_raw.get("values")
    if values is not None:
        if not isinstance(values, list) or not all(_label_ok(v) for v in values):
            problems.add(join(cpath, "values"),
                         f"{label}: values must be a list of non-empty strings")
        elif len(set(values)) != len(values):
            problems.add(join(cpath, "values"), f"{label}: values must be unique")
        else:
            config["values"] = list(values)
    other = config_raw.get("other", "other")
    if not _label_ok(other):
        problems.add(join(cpath, "other"), f"{label}: other must be a non-empty string")
    elif other == UNKNOWN or other in config.get("values", ()):  # only a valid list
        problems.add(join(cpath, "other"),
                     f"{label}: other label {other!r} clashes with another label")
    elif "values" in config:
        config["other"] = other
    return config


def _boolean_config(config_raw: Mapping[str, Any], cpath: str, label: str,
                    problems: Problems) -> dict[str, Any]:
    """A boolean dimension's two labels."""
    t = config_raw.get("true_label", "yes")
    f = config_raw.get("false_label", "no")
    if not _label_ok(t):
        problems.add(join(cpath, "true_label"), f"{label}: must be a non-empty string")
    if not _label_ok(f):
        problems.add(join(cpath, "false_label"), f"{label}: must be a non-empty string")
    if _label_ok(t) and _label_ok(f) and (t == f or UNKNOWN in (t, f)):
        problems.add(cpath, f"{label}: true_label and false_label must differ from each "
                            "other and from 'unknown'")
    return {"true_label": t, "false_label": f}


def _numeric_bins_config(config_raw: Mapping[str, Any], cpath: str, label: str,
                         problems: Problems) -> dict[str, Any]:
    """A numeric_bins dimension's edges (optionally labelled) or quantiles."""
    config: dict[str, Any] = {}
    has_edges, has_q = "edges" in config_raw, "quantiles" in config_raw
    if has_edges == has_q:
        problems.add(cpath, f"{label}: numeric_bins needs exactly one of edges or "
                            "quantiles")
    elif has_edges:
        edges = config_raw["edges"]
        if (not isinstance(edges, list) or not edges
                or not all(is_number(e) for e in edges)):
            problems.add(join(cpath, "edges"),
                         f"{label}: edges must be a non-empty list of numbers")
        elif any(b <= a for a, b in itertools.pairwise(edges)):
            problems.add(join(cpath, "edges"),
                         f"{label}: edges must be strictly increasing (got {edges})")
        else:
            config["edges"] = list(edges)
            labels = config_raw.get("labels")
            if labels is not None:
                if not isinstance(labels, list) or not all(_label_ok(x) for x in labels):
                    problems.add(join(cpath, "labels"),
                                 f"{label}: labels must be a list of non-empty strings")
                elif len(set(labels)) != len(labels) or UNKNOWN in labels:
                    problems.add(join(cpath, "labels"),
                                 f"{label}: labels must be unique and not 'unknown'")
                else:
                    try:
                        bin_labels([float(e) for e in edges], labels)
                    except ValueError as exc:
                        problems.add(join(cpath, "labels"), f"{label}: {exc}")
                    else:
                        config["labels"] = list(labels)
    else:
        q = config_raw["quantiles"]
        if "labels" in config_raw:
            problems.add(join(cpath, "labels"),
                         f"{label}: quantile bins are labelled by their edges (their "
                         "number depends on ties in the data); use edges to name bins")
        if is_int(q):
            if not 2 <= q <= 100:
                problems.add(join(cpath, "quantiles"),
                             f"{label}: a bin count must be between 2 and 100")
            else:
                config["quantiles"] = int(q)
        elif (isinstance(q, list) and q and all(is_number(x) and 0 < x < 1 for x in q)
              and all(b > a for a, b in itertools.pairwise(q))):
            config["quantiles"] = [float(x) for x in q]
        else:
            problems.add(join(cpath, "quantiles"),
                         f"{label}: quantiles must be a bin count (int >= 2) or a "
                         "strictly increasing list of probabilities in (0, 1)")
    return config


def _dimension_validate(raw: Any, path: str, problems: Problems) -> dict[str, Any] | None:
    check = entry_open(raw, path, problems, noun="dimension", fields=_DIMENSION_FIELDS)
    if check is None:
        return None
    key, bad, label = check.key, check.bad, check.label
    name = raw.get("name", "")
    if not isinstance(name, str) or len(name) > 200:
        bad("name", "name must be a string of at most 200 characters")
    kind = raw.get("kind")
    if kind not in DIMENSION_KINDS:
        bad("kind", f"kind must be one of {', '.join(DIMENSION_KINDS)} (got {kind!r})")
    source = raw.get("source")
    if not isinstance(source, str) or not (
        (source.startswith(METADATA_PREFIX) and len(source) > len(METADATA_PREFIX))
        or source in DERIVED_SOURCES
    ):
        bad("source", "source must be 'metadata.<key>' or one of "
                      f"{', '.join(DERIVED_SOURCES)} (got {source!r})")
    elif source in DERIVED_SOURCES and kind in ("categorical", "boolean"):
        bad("source", f"a {kind} dimension reads metadata ('metadata.<key>'); derived lengths "
                      "need numeric_bins")
    elif isinstance(source, str) and len(source) > 200:
        bad("source", "source must be at most 200 characters")
    config_raw = raw.get("config", {})
    if config_raw is None:
        config_raw = {}
    config: dict[str, Any] = {}
    cpath = join(path, "config")
    if not isinstance(config_raw, Mapping):
        bad("config", "config must be an object")
    elif isinstance(kind, str) and kind in _CONFIG_FIELDS:  # a list or object is unhashable
        for extra in sorted(set(config_raw) - _CONFIG_FIELDS[kind]):
            problems.add(join(cpath, extra), f"{label}: unknown config field for {kind}")
        if kind == "categorical":
            config = _categorical_config(config_raw, cpath, label, problems)
        elif kind == "boolean":
            config = _boolean_config(config_raw, cpath, label, problems)
        else:
            config = _numeric_bins_config(config_raw, cpath, label, problems)
    if check.failed():
        return None
    return {"key": key, "name": name or "", "kind": kind, "source": source, "config": config}


def dimensions_validate(dimensions: Any, *, path: str = "dimensions",
                        problems: Problems | None = None) -> list[dict[str, Any]]:
    """Validate a strata scheme (a list of dimensions, possibly empty); return it normalised."""
    with problems_of(problems, "The strata scheme") as found:
        return keyed_entries_validate(
            dimensions, path, found, entry_validate=_dimension_validate, noun="dimension",
            list_problem="must be a list of dimensions", non_empty=False)
