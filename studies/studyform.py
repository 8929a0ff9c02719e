"""The "New study" page's form: the study's name, slug and task, its rubric (criteria: key, name,
scale, labels, pass threshold, primary) and its strata (key, metadata field, values), turned
into the same study file a lead would upload. Pure: no Django.

The form's field names are the study file's JSON paths (``rubric.criteria[0].key``,
``strata[1].source``), so the errors of `studies.spec.study_file_validate` — which checks the
form's file exactly as it checks an uploaded one — name the form's fields. A criterion's
"pass" box holds the ordinal or interval pass_threshold, or a categorical criterion's passing
labels; its "labels" box holds the ordinal points (in order, 1..k) or the categorical labels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reviewhub.errors import Problems

__all__ = ["MAX_ROWS", "SCALE_CHOICES", "StudyForm", "field_errors", "form_doc", "form_read"]

# Rows the form shows at first, and at most (the "add" buttons stop there).
CRITERIA_ROWS = 2
STRATA_ROWS = 1
MAX_ROWS = 30
SCALE_CHOICES = [
    ("binary", "binary: pass or fail"),
    ("ordinal", "ordinal: points 1..k"),
    ("categorical", "categorical: labels"),
    ("interval", "interval: a score from min to max"),
    ("pairwise", "pairwise: the better of two"),
]
_CRITERION_FIELDS = ("key", "name", "scale", "labels", "pass", "min", "max")
_STRATUM_FIELDS = ("key", "source", "values")


@dataclass
class StudyForm:
    """What the form holds: the study fields, criteria rows and strata rows (text as typed),
    the primary criterion (its row index, or "") and its target."""

    study: dict[str, str] = field(default_factory=lambda: {
        "name": "", "slug": "", "task_description": ""})
    criteria: list[dict[str, str]] = field(default_factory=list)
    strata: list[dict[str, str]] = field(default_factory=list)
    primary: str = ""
    primary_target: str = ""

    @classmethod
    def empty(cls) -> StudyForm:
        form = cls()
        form.criteria = [dict.fromkeys(_CRITERION_FIELDS, "") | {"scale": "binary"}
                         for _ in range(CRITERIA_ROWS)]
        form.strata = [dict.fromkeys(_STRATUM_FIELDS, "") for _ in range(STRATA_ROWS)]
        return form


def _count(post: Mapping[str, Any], name: str, default: int) -> int:
    text = str(post.get(name, "") or "")
    return min(int(text), MAX_ROWS) if text.isdigit() else default


def form_read(post: Mapping[str, Any]) -> StudyForm:
    """The form's values from a POST; the "add a criterion/stratum" actions add a blank row."""
    form = StudyForm()
    form.study = {k: str(post.get(f"study.{k}", "") or "").strip()
                  for k in ("name", "slug", "task_description")}
    n_criteria = _count(post, "n_criteria", CRITERIA_ROWS)
    n_strata = _count(post, "n_strata", STRATA_ROWS)
    action = post.get("action")
    if action == "form-add-criterion":
        n_criteria = min(n_criteria + 1, MAX_ROWS)
    if action == "form-add-stratum":
        n_strata = min(n_strata + 1, MAX_ROWS)
    form.criteria = [
        {f: str(post.get(f"rubric.criteria[{i}].{f}", "") or "").strip()
         for f in _CRITERION_FIELDS}
        for i in range(n_criteria)
    ]
    for row in form.criteria:
        row["scale"] = row["scale"] or "binary"
    form.strata = [
        {f: str(post.get(f"strata[{j}].{f}", "") or "").strip() for f in _STRATUM_FIELDS}
        for j in range(n_strata)
    ]
    form.primary = str(post.get("primary", "") or "")
    form.primary_target = str(post.get("primary_target", "") or "").strip()
    return form


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _number(text: str, cast: type) -> Any:
    """The number typed, or the text itself, so that the validator names the field."""
    try:
        return cast(text)
    except ValueError:
        return text


def _blank(row: Mapping[str, str], fields: tuple[str, ...]) -> bool:
    return not any(row.get(f) for f in fields if f != "scale")


def form_doc(form: StudyForm) -> tuple[dict[str, Any], Problems]:
    """The study file the form describes (study, rubric, strata and, with a primary criterion,
    a plan naming it), and the problems the file cannot express (a primary without a target).
    Blank rows are left out; the rest is for `study_file_validate` to judge."""
    problems = Problems()
    study = {k: v for k, v in form.study.items() if v or k in ("name", "slug")}
    doc: dict[str, Any] = {"study": study}
    criteria: list[dict[str, Any]] = []
    primary_key = ""
    for i, row in enumerate(form.criteria):
        if _blank(row, _CRITERION_FIELDS):
            if form.primary == str(i):
                problems.add(f"rubric.criteria[{i}].key", "the primary criterion needs a key")
            continue
        scale = row["scale"]
        c: dict[str, Any] = {"key": row["key"], "scale": scale}
        if row["name"]:
            c["name"] = row["name"]
        labels = _split(row["labels"])
        if scale == "ordinal":
            if labels:
                c["points"] = [{"value": n, "label": label}
                               for n, label in enumerate(labels, start=1)]
            if row["pass"]:
                c["pass_threshold"] = _number(row["pass"], int)
        elif scale == "categorical":
            if labels:
                c["points"] = labels
            if row["pass"]:
                c["pass_labels"] = _split(row["pass"])
        elif scale == "interval":
            for bound in ("min", "max"):
                if row[bound]:
                    c[bound] = _number(row[bound], float)
            if row["pass"]:
                c["pass_threshold"] = _number(row["pass"], float)
        else:
            if labels:
                c["points"] = labels  # refused by the validator, at this field
            if row["pass"]:
                c["pass_threshold"] = row["pass"]
        criteria.append(c)
        if form.primary == str(i):
            primary_key = row["key"]
            if not form.primary_target:
                problems.add("primary_target", "the primary criterion needs a target (a pass "
                                               "rate from 0 to 1, e.g. 0.8)")
            metric = "win_rate" if scale == "pairwise" else "pass_rate"
            doc["plan"] = {"spec": {
                "criteria": {row["key"]: {"metric": metric,
                                          "threshold": _number(form.primary_target, float),
                                          "primary": True}},
                "primary_metric": row["key"],
            }}
    doc["rubric"] = {"criteria": criteria}
    strata = []
    for row in form.strata:
        if _blank(row, _STRATUM_FIELDS):
            continue
        source = row["source"]
        if source and not source.startswith("metadata."):
            source = f"metadata.{source}"
        d: dict[str, Any] = {"key": row["key"], "name": row["key"], "kind": "categorical",
                             "source": source}
        values = _split(row["values"])
        if values:
            d["config"] = {"values": values}
        strata.append(d)
    doc["strata"] = strata
    if form.primary and not primary_key and not problems:
        problems.add("primary", "the primary criterion is not one of the rows")
    return doc, problems


def row_paths(doc: Mapping[str, Any], form: StudyForm) -> dict[str, str]:
    """Map each file path prefix of the built document to the form row it came from, since
    blank rows are dropped from the file (`rubric.criteria[1]` may be the form's third row)."""
    mapping: dict[str, str] = {}
    shown = [i for i, row in enumerate(form.criteria) if not _blank(row, _CRITERION_FIELDS)]
    for n, i in enumerate(shown):
        mapping[f"rubric.criteria[{n}]"] = f"rubric.criteria[{i}]"
    shown = [j for j, row in enumerate(form.strata) if not _blank(row, _STRATUM_FIELDS)]
    for n, j in enumerate(shown):
        mapping[f"strata[{n}]"] = f"strata[{j}]"
    return mapping


# Where a file path's problem is shown: the form field that holds that part of the file.
_FIELD_OF = {"pass_threshold": "pass", "pass_labels": "pass", "points": "labels",
             "config": "values", "name": "name", "kind": "source"}


def field_errors(errors: Sequence[Mapping[str, Any]], form: StudyForm, doc: Mapping[str, Any]
                 ) -> dict[str, str]:
    """Form field name -> message, for the problems of the built file (paths of the file)."""
    rows = row_paths(doc, form)
    out: dict[str, str] = {}
    for e in errors:
        path = str(e.get("path", ""))
        message = str(e.get("message", ""))
        target = path
        for prefix in ("rubric.criteria[", "strata["):
            if path.startswith(prefix):
                head, _, rest = path.partition("]")
                head += "]"
                row = rows.get(head, head)
                part = rest.lstrip(".").split(".")[0].split("[")[0]
                target = f"{row}.{_FIELD_OF.get(part, part)}" if part else f"{row}.key"
                break
        if path.startswith("plan."):
            target = "primary_target" if path.endswith(".threshold") else "primary"
        out.setdefault(target, message)
    return out


_CRITERION_LABELS = {
    "key": "Key", "name": "Name", "scale": "Scale",
    "labels": "Labels (comma-separated; ordinal: worst to best)",
    "pass": "Pass threshold (ordinal: lowest passing point; interval: lowest passing score; "
            "categorical: the passing labels)",
    "min": "Min (interval)", "max": "Max (interval)",
}
_STRATUM_LABELS = {"key": "Key", "source": "Metadata field of the items",
                   "values": "Values (comma-separated; others count as \u201cother\u201d)"}


def form_layout(form: StudyForm, errors: Mapping[str, str]) -> dict[str, Any]:
    """Every field of the form with its name (a study file path), id, label, value and error,
    for the template."""

    def f(name: str, fid: str, label: str, value: str, **extra: Any) -> dict[str, Any]:
        return {"name": name, "id": fid, "label": label, "value": value,
                "error": errors.get(name, ""), **extra}

    study = [f(f"study.{k}", f"f-study-{k}", label, form.study.get(k, ""))
             for k, label in (("name", "Study name"), ("slug", "Slug (in the study's address)"),
                              ("task_description", "Task (what the model must do)"))]
    criteria = []
    for i, row in enumerate(form.criteria):
        fields = {k: f(f"rubric.criteria[{i}].{k}", f"f-c{i}-{k}", _CRITERION_LABELS[k],
                       row.get(k, ""), **({"choices": SCALE_CHOICES} if k == "scale" else {}))
                  for k in _CRITERION_FIELDS}
        criteria.append({"index": i, "fields": fields,
                         "primary": form.primary == str(i)})
    strata = []
    for j, row in enumerate(form.strata):
        strata.append({"index": j, "fields": [
            f(f"strata[{j}].{k}", f"f-s{j}-{k}", _STRATUM_LABELS[k], row.get(k, ""))
            for k in _STRATUM_FIELDS]})
    return {"study": study, "criteria": criteria, "strata": strata,
            "n_criteria": len(form.criteria), "n_strata": len(form.strata),
            "primary_error": errors.get("primary", ""),
            "target": f("primary_target", "f-primary-target",
                        "Target for the primary criterion (a pass rate from 0 to 1, e.g. 0.8)",
                        form.primary_target),
            "can_add_criterion": len(form.criteria) < MAX_ROWS,
            "can_add_stratum": len(form.strata) < MAX_ROWS}
