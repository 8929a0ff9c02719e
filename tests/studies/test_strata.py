"""Strata assignment: edges (boundaries included), quantiles, categorical, flags, unknown,
cross labels, and the bulk recompute."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from reviewhub.api.errors import ValidationFailed
from studies.models import Item
from studies.services import dimension_set, study_strata_recompute
from studies.strata import (
    UNKNOWN,
    DimensionAssigner,
    assign_strata,
    bin_labels,
    cross_label,
    quantile_edges,
    strata_cross,
)
from tests.factories import ItemFactory


def label(dim: dict[str, Any], metadata: Any = None, **lengths: int | None) -> str:
    a = DimensionAssigner(dim)
    return assign_strata([a], metadata=metadata or {}, lengths=lengths)[dim["key"]]


EDGES = {"key": "len", "kind": "numeric_bins", "source": "input_length",
         "config": {"edges": [0, 500, 2000]}}


@pytest.mark.parametrize(
    ("n", "expected"),
    [(0, "[0, 500)"), (1, "[0, 500)"), (499, "[0, 500)"), (500, "[500, 2000)"),
     (1999, "[500, 2000)"), (2000, ">= 2000"), (10**7, ">= 2000")],
)
def test_edges_boundaries_go_to_the_bin_starting_there(n, expected):
    assert label(EDGES, input_length=n) == expected


def test_edges_below_first_edge_and_missing():
    dim = {**EDGES, "source": "metadata.score", "config": {"edges": [0.5, 1.5]}}
    assert label(dim, {"score": 0.25}) == "< 0.5"
    assert label(dim, {"score": 1.5}) == ">= 1.5"
    assert label(dim, {"score": "1.0"}) == "[0.5, 1.5)"  # numeric strings (CSV metadata)
    for bad in ({"score": "high"}, {"score": None}, {}, {"score": True}, {"score": [1]},
                {"score": float("nan")}, {"score": float("inf")}):
        assert label(dim, bad) == UNKNOWN


def test_edge_labels_given():
    named = {**EDGES, "config": {"edges": [0, 500, 2000], "labels": ["short", "medium", "long"]}}
    assert [label(named, input_length=n) for n in (10, 500, 5000)] == ["short", "medium", "long"]
    with_below = {**EDGES, "config": {"edges": [10, 20], "labels": ["tiny", "small", "big"]}}
    assert [label(with_below, input_length=n) for n in (5, 10, 20)] == ["tiny", "small", "big"]
    with pytest.raises(ValueError):
        bin_labels([1, 2], ["a"])


def test_reference_length_unknown_without_reference():
    dim = {**EDGES, "source": "reference_length"}
    assert label(dim, reference_length=None) == UNKNOWN
    assert label(dim, reference_length=3) == "[0, 500)"


def test_categorical_whitelist_other_and_unknown():
    dim = {"key": "lang", "kind": "categorical", "source": "metadata.language",
           "config": {"values": ["en", "de"], "other": "other"}}
    assert label(dim, {"language": "en"}) == "en"
    assert label(dim, {"language": "fr"}) == "other"
    assert label(dim, {}) == UNKNOWN
    assert label(dim, {"language": ""}) == UNKNOWN
    assert label(dim, {"language": None}) == UNKNOWN
    assert label(dim, {"language": ["en"]}) == UNKNOWN
    open_dim = {**dim, "config": {}}
    assert label(open_dim, {"language": "fr"}) == "fr"
    assert label(open_dim, {"language": 3.0}) == "3"
    assert label(open_dim, {"language": True}) == "true"
    nested = {**open_dim, "source": "metadata.source.kind"}
    assert label(nested, {"source": {"kind": "email"}}) == "email"
    assert label(nested, {"source.kind": "chat"}) == "chat"  # a dotted key matches first
    assert label(nested, {"source": "email"}) == UNKNOWN


def test_boolean_flags():
    dim = {"key": "noisy", "kind": "boolean", "source": "metadata.noisy",
           "config": {"true_label": "noisy", "false_label": "clean"}}
    truthy = [True, 1, 2.5, "yes", "TRUE", "1", "y", ["x"], {"a": 1}]
    falsy = [False, 0, "no", "false", "0", [], {}]
    assert {label(dim, {"noisy": v}) for v in truthy} == {"noisy"}
    assert {label(dim, {"noisy": v}) for v in falsy} == {"clean"}
    assert label(dim, {}) == UNKNOWN
    assert label(dim, {"noisy": None}) == UNKNOWN
    assert label(dim, {"noisy": "maybe"}) == UNKNOWN
    default = {**dim, "config": {}}
    assert label(default, {"noisy": True}) == "yes"


def test_quantile_edges_match_numpy_and_handle_ties():
    values = list(range(1, 101))
    edges = quantile_edges(values, 4)
    expected = np.quantile(values, [0.25, 0.5, 0.75], method="inverted_cdf")
    assert edges == [1.0, *[float(x) for x in expected]]
    # Ties: 90% of the values equal -> duplicate edges are dropped, fewer bins.
    tied = [5] * 90 + list(range(6, 16))
    edges = quantile_edges(tied, 4)
    assert edges == sorted(set(edges))
    assert edges[0] == 5.0 and len(edges) < 4
    assert quantile_edges([], 4) == []
    assert quantile_edges([3, 3, 3], [0.5]) == [3.0]


def test_cross_label():
    assert cross_label("en", "long") == "en\u00d7long"
    assert strata_cross({"lang": "de"}, "lang", "len") == "de\u00d7unknown"


# --- Recompute over the database --------------------------------------------------------------

SCHEME = [
    {"key": "lang", "kind": "categorical", "source": "metadata.language",
     "config": {"values": ["en", "de"]}},
    {"key": "len", "kind": "numeric_bins", "source": "input_length",
     "config": {"edges": [0, 10, 20], "labels": ["short", "medium", "long"]}},
    {"key": "noisy", "kind": "boolean", "source": "metadata.noisy"},
    {"key": "ctxq", "kind": "numeric_bins", "source": "context_length",
     "config": {"quantiles": 2}},
    {"key": "ref", "kind": "numeric_bins", "source": "reference_length",
     "config": {"edges": [1]}},
]


@pytest.mark.django_db
def test_dimension_set_recomputes_every_item(study):
    a = ItemFactory(study=study, input="x" * 5, context="c" * 10, reference="r",
                    metadata={"language": "en", "noisy": True})
    b = ItemFactory(study=study, input="ü" * 10, context="", reference="",
                    metadata={"language": "fr"})
    c = ItemFactory(study=study, input="y" * 25, context="c" * 100, metadata={"noisy": "no"})
    dims, changed = dimension_set(study=study, dimensions=SCHEME)
    assert [d.key for d in dims] == ["lang", "len", "noisy", "ctxq", "ref"]
    assert changed == 3
    strata = {i.pk: i.strata for i in Item.objects.filter(study=study)}
    # Quantile edges over context lengths [10, 0, 100]: min 0, median 10 (an edge value goes
    # to the bin that starts there).
    assert strata[a.pk] == {"lang": "en", "len": "short", "noisy": "yes",
                            "ctxq": ">= 10", "ref": ">= 1"}
    # Characters, not bytes: 10 "ü" are 10 characters.
    assert strata[b.pk] == {"lang": "other", "len": "medium", "noisy": UNKNOWN,
                            "ctxq": "[0, 10)", "ref": UNKNOWN}
    assert strata[c.pk] == {"lang": UNKNOWN, "len": "long", "noisy": "no",
                            "ctxq": ">= 10", "ref": UNKNOWN}
    # Same scheme again: nothing to write.
    assert dimension_set(study=study, dimensions=SCHEME)[1] == 0
    assert study_strata_recompute(study=study) == 0


@pytest.mark.django_db
def test_recompute_after_metadata_change_and_in_outer_atomic(study):
    from django.db import transaction

    dimension_set(study=study, dimensions=SCHEME[:1])
    items = [ItemFactory(study=study, metadata={"language": "de"}) for _ in range(7)]
    with transaction.atomic():
        assert study_strata_recompute(study=study, batch_size=3) == 7
        Item.objects.filter(pk=items[0].pk).update(metadata={"language": "en"})
        assert study_strata_recompute(study=study, batch_size=3) == 1
    assert Item.objects.get(pk=items[0].pk).strata == {"lang": "en"}
    assert Item.objects.get(pk=items[1].pk).strata == {"lang": "de"}


@pytest.mark.django_db
def test_removing_all_dimensions_clears_labels(study):
    dimension_set(study=study, dimensions=SCHEME[:1])
    item = ItemFactory(study=study, metadata={"language": "de"})
    study_strata_recompute(study=study)
    dimension_set(study=study, dimensions=[])
    item.refresh_from_db()
    assert item.strata == {}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("dims", "path", "fragment"),
    [
        ([{"key": "x", "kind": "numeric_bins", "source": "input_length",
           "config": {"edges": [5, 5]}}], "dimensions[0].config.edges", "strictly increasing"),
        ([{"key": "x", "kind": "numeric_bins", "source": "input_length", "config": {}}],
         "dimensions[0].config", "exactly one of edges or quantiles"),
        ([{"key": "x", "kind": "numeric_bins", "source": "input_length",
           "config": {"quantiles": 4, "labels": ["a"]}}], "dimensions[0].config.labels",
         "labelled by their edges"),
        ([{"key": "x", "kind": "categorical", "source": "input_length"}],
         "dimensions[0].source", "reads metadata"),
        ([{"key": "x", "kind": "categorical", "source": "language"}],
         "dimensions[0].source", "metadata.<key>"),
        ([{"key": "x", "kind": "boolean", "source": "metadata.a"},
          {"key": "x", "kind": "boolean", "source": "metadata.b"}],
         "dimensions[1].key", "already used"),
        ([{"key": "Bad Key", "kind": "boolean", "source": "metadata.a"}],
         "dimensions[0].key", "slug"),
        ([{"key": "x", "kind": "numeric_bins", "source": "input_length",
           "config": {"edges": [0, 1], "labels": ["a"]}}], "dimensions[0].config.labels",
         "labels for 2 edges"),
    ],
)
def test_dimension_validation_names_the_path(study, dims, path, fragment):
    with pytest.raises(ValidationFailed) as exc:
        dimension_set(study=study, dimensions=dims)
    errors = exc.value.details["errors"]
    assert any(e["path"] == path and fragment in e["message"] for e in errors), errors
    assert not study.dimensions.exists()


@pytest.mark.django_db
def test_recompute_limited_to_item_ids_unless_quantiles(study):
    dimension_set(study=study, dimensions=SCHEME[:1])
    a, b = (ItemFactory(study=study, metadata={"language": "de"}) for _ in range(2))
    assert study_strata_recompute(study=study, item_ids=[a.pk], batch_size=1) == 1
    assert Item.objects.get(pk=b.pk).strata == {}  # not asked for
    assert study_strata_recompute(study=study, item_ids=[]) == 0
    # With quantile bins every item is recomputed: new items move the edges.
    dimension_set(study=study, dimensions=[SCHEME[3]])
    c = ItemFactory(study=study, context="c" * 50)
    Item.objects.filter(pk=c.pk).update(strata={})
    assert study_strata_recompute(study=study, item_ids=[]) >= 1
    assert Item.objects.get(pk=c.pk).strata == {"ctxq": ">= 0"}
