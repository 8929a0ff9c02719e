"""Read selectors for studies. List selectors return querysets shaped for their serializers
(select_related / only), so list endpoints run a fixed number of queries per page.

The criterion value helpers are re-exported here: other apps import them from
`studies.selectors` (they live in the pure module `studies.criteria`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet
from django.db.models.fields.json import KeyTransform

from reviewhub.capabilities import counts_as_lead
from reviewhub.errors import ValidationFailed

from .criteria import (
    criterion_allowed_values,
    criterion_has_pass_reading,
    criterion_is_pass,
    criterion_value_labels,
    criterion_value_num,
)
from .models import AnalysisPlan, ApiToken, Candidate, Item, Output, RubricVersion, Study

__all__ = [
    "criterion_allowed_values",
    "criterion_has_pass_reading",
    "criterion_is_pass",
    "criterion_value_labels",
    "criterion_value_num",
    "dimensions_current",
    "plan_current",
    "rubric_criteria_as_specs",
    "rubric_current",
]


def rubric_current(study: Study) -> RubricVersion | None:
    """The study's newest rubric version (with its criteria prefetched), or None."""
    return (
        RubricVersion.objects.filter(study=study).prefetch_related("criteria")
        .order_by("-version").first()
    )


def rubric_criteria_as_specs(*, rubric: RubricVersion) -> list[dict[str, Any]]:
    """The criteria of a version in the normalised spec form (as `criteria_validate` returns)."""
    return [
        {"key": c.key, "name": c.name, "guidance": c.guidance, "scale": c.scale,
         "points": c.points, "pass_threshold": c.pass_threshold, "pass_labels": c.pass_labels,
         "is_hard_gate": c.is_hard_gate, "weight": c.weight, "needs_context": c.needs_context,
         "min": c.min, "max": c.max}
        for c in sorted(rubric.criteria.all(), key=lambda c: (c.position, c.id))
    ]


def dimensions_current(*, study: Study) -> list[dict[str, Any]]:
    """The strata scheme in its normalised spec form, in order."""
    return [
        {"key": d.key, "name": d.name, "kind": d.kind, "source": d.source, "config": d.config}
        for d in study.dimensions.order_by("position", "id")
    ]


def plan_current(*, study: Study) -> AnalysisPlan | None:
    """The newest analysis plan version of the study, or None."""
    return AnalysisPlan.objects.filter(study=study).order_by("-version").first()


def studies_visible(
    *, user: AbstractBaseUser | AnonymousUser, token: Any = None
) -> QuerySet[Study]:
    """Studies the caller may see: memberships (all for superusers), narrowed to the token's
    study for a study-scoped token."""
    if not user.is_authenticated:
        return Study.objects.none()
    qs = Study.objects.select_related("owner")
    every = counts_as_lead(is_superuser=bool(getattr(user, "is_superuser", False)))
    if not every:
        qs = qs.filter(memberships__user_id=user.pk)
    if isinstance(token, ApiToken) and token.study_id is not None:
        qs = qs.filter(pk=token.study_id)
    return qs if every else qs.distinct()


# --- List filters -----------------------------------------------------------------------------

def _json_scalar_variants(raw: str) -> list[Any]:
    """Query-string values are strings; metadata may hold numbers or booleans. `meta.n=3`
    matches both "3" and 3, `meta.flag=true` both "true" and true."""
    variants: list[Any] = [raw]
    try:
        parsed = json.loads(raw)
    except ValueError:
        return variants
    # NaN, Infinity and 1e400 parse as floats that JSON (and PostgreSQL's jsonb) cannot hold:
    # such a value is matched as the string it is.
    if isinstance(parsed, float) and not math.isfinite(parsed):
        return variants
    if isinstance(parsed, bool | int | float) and parsed != raw:
        variants.append(parsed)
    return variants


def _key_path(field: str, dotted: str) -> KeyTransform:
    """A JSON key path as explicit KeyTransforms (never parsed as lookups, so a key such as
    `x__contains` is just a key)."""
    node: Any = field
    for part in dotted.split("."):
        node = KeyTransform(part, node)
    return node


# Deepest JSON key path a filter parameter may name. Each segment nests one KeyTransform, and
# compiling a few hundred of them overflows Python's recursion limit (a 500); real metadata is
# a few levels deep.
MAX_KEY_DEPTH = 16


def json_key_filter(qs: QuerySet[Any], field: str, dotted_key: str, values: Iterable[str],
                    *, scalar_variants: bool = True, param: str | None = None) -> QuerySet[Any]:
    """Keep rows where `field[dotted_key]` equals any of the values (repeated parameters).

    The key path is an alias built from explicit KeyTransforms, then filtered with the JSON
    field's own exact lookup, so values are compared as JSON on every backend and a key named
    like a lookup (`contains`) is still just a key. A path deeper than MAX_KEY_DEPTH is a 400
    naming `param` (the query parameter)."""
    depth = dotted_key.count(".") + 1
    if depth > MAX_KEY_DEPTH:
        name = param or dotted_key
        shown = name if len(name) <= 80 else name[:77] + "..."
        raise ValidationFailed.at(
            name,
            f"The filter parameter {shown!r} names a key {depth} levels deep; at most "
            f"{MAX_KEY_DEPTH} levels are allowed.",
            code="filter_too_deep",
        )
    name = f"_jk{len(qs.query.annotations)}"
    qs = qs.alias(**{name: _key_path(field, dotted_key)})
    q = Q()
    for raw in values:
        for variant in (_json_scalar_variants(raw) if scalar_variants else [raw]):
            q |= Q(**{name: variant})
    return qs.filter(q)


def parse_strata_filters(values: Iterable[str]) -> list[tuple[str, str]]:
    """`stratum=dimension:label` parameters -> [(dimension, label)] (400 on a bad one)."""
    out = []
    for raw in values:
        dim, sep, label = raw.partition(":")
        if not sep or not dim or not label:
            raise ValidationFailed(
                f"Bad stratum filter {raw!r}: use stratum=<dimension>:<label>.",
                details={"errors": [{"path": "stratum", "message": f"{raw!r} is not "
                                                                   "dimension:label"}]},
            )
        out.append((dim, label))
    return out


def _apply_item_filters(qs: QuerySet[Any], params: Mapping[str, list[str]], *,
                        prefix: str = "") -> QuerySet[Any]:
    item_field = f"{prefix}strata" if prefix else "strata"
    meta_field = f"{prefix}metadata" if prefix else "metadata"
    for dim, label in parse_strata_filters(params.get("stratum", [])):
        # Strata labels are strings; several stratum= parameters all have to hold.
        qs = json_key_filter(qs, item_field, dim, [label], scalar_variants=False,
                             param="stratum")
    for name, values in params.items():
        if name.startswith("meta.") and len(name) > len("meta."):
            qs = json_key_filter(qs, meta_field, name[len("meta."):], values, param=name)
    return qs


def _bool_param(params: Mapping[str, list[str]], name: str) -> bool | str | None:
    values = params.get(name)
    if not values:
        return "absent"
    raw = values[-1].strip().lower()
    if raw in ("true", "1", "yes"):
        return True
    if raw in ("false", "0", "no"):
        return False
    if raw in ("null", "none"):
        return None
    raise ValidationFailed(f"Bad value for {name}: {values[-1]!r} (use true or false).",
                           details={"errors": [{"path": name, "message": "must be true or "
                                                                         "false"}]})


def items_list(*, study: Study, params: Mapping[str, list[str]]) -> QuerySet[Item]:
    """Items of a study filtered by `stratum=dim:label` (repeatable, all must hold),
    `meta.<key>=value` (repeat a key to OR values) and `external_id`."""
    qs: QuerySet[Item] = Item.objects.filter(study=study)
    qs = _apply_item_filters(qs, params)
    if params.get("external_id"):
        qs = qs.filter(external_id__in=params["external_id"])
    return qs


def candidates_list(*, study: Study, params: Mapping[str, list[str]]) -> QuerySet[Candidate]:
    qs: QuerySet[Candidate] = Candidate.objects.filter(study=study)
    if params.get("name"):
        qs = qs.filter(name__in=params["name"])
    return qs


def outputs_list(*, study: Study, params: Mapping[str, list[str]]) -> QuerySet[Output]:
    """Outputs of a study with their item and candidate in the same query.

    Filters: `candidate` (name, repeatable = any of), `stratum=dim:label` and `meta.<key>`
    on the item, `output_meta.<key>` on the output's own metadata, `item` (external id),
    `has_error`, `schema_valid` (true / false / null)."""
    qs: QuerySet[Output] = (
        Output.objects.filter(study=study)
        .select_related("item", "candidate")
        # The item's large text fields are not needed to list outputs.
        .defer("item__input", "item__context", "item__reference", "item__metadata")
    )
    if params.get("candidate"):
        qs = qs.filter(candidate__name__in=params["candidate"])
    if params.get("item"):
        qs = qs.filter(item__external_id__in=params["item"])
    qs = _apply_item_filters(qs, params, prefix="item__")
    for name, values in params.items():
        if name.startswith("output_meta.") and len(name) > len("output_meta."):
            qs = json_key_filter(qs, "metadata", name[len("output_meta."):], values,
                                 param=name)
    has_error = _bool_param(params, "has_error")
    if has_error is True:
        qs = qs.exclude(error="")
    elif has_error is False:
        qs = qs.filter(error="")
    schema_valid = _bool_param(params, "schema_valid")
    if schema_valid is None:
        qs = qs.filter(schema_valid__isnull=True)
    elif isinstance(schema_valid, bool):
        qs = qs.filter(schema_valid=schema_valid)
    return qs


def candidate_outputs_page(
    *, candidate: Candidate, item_prefix: str = "", after_id: int = 0, size: int = 50
) -> tuple[list[Output], bool]:
    """One page of a candidate's outputs in id order, from `after_id` on (keyset paging:
    every page costs one indexed range read, however deep), optionally only the outputs of
    items whose external id starts with `item_prefix`. Returns the page and whether more
    follow (one extra row is read to know)."""
    qs = (
        Output.objects.filter(candidate=candidate, id__gt=after_id)
        .select_related("item")
        .defer("item__input", "item__context", "item__reference", "item__metadata")
        .order_by("id")
    )
    if item_prefix:
        qs = qs.filter(item__external_id__startswith=item_prefix)
    rows = list(qs[: size + 1])
    return rows[:size], len(rows) > size
