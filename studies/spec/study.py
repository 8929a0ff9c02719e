"""The study fields and the whole study file (study, rubric, strata, plan, members)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from reviewhub.errors import Problems
from studies.spec.common import join, slug_problem
from studies.spec.dimensions import dimensions_validate
from studies.spec.plan import PlanContext, plan_spec_validate
from studies.spec.rubric import CriterionShape, criteria_validate, rubric_aggregate_validate

# --- Study fields -----------------------------------------------------------------------------

STUDY_FIELDS = ("name", "slug", "task_description", "deployment_context", "run_conditions",
                "output_schema", "status", "show_reference", "is_simulated")


def study_fields_validate(raw: Mapping[str, Any], *, partial: bool, path: str = "",
                          problems: Problems | None = None) -> dict[str, Any]:
    """Validate study fields (create: name and slug required; partial: only those given)."""
    own = problems is None
    problems = problems if problems is not None else Problems()
    out: dict[str, Any] = {}
    for name in ("name", "slug"):
        if name not in raw and not partial:
            problems.add(join(path, name), "is required")
    if "name" in raw:
        v = raw["name"]
        if not isinstance(v, str) or not v.strip() or len(v) > 200:
            problems.add(join(path, "name"), "must be a non-empty string of at most 200 "
                                             "characters")
        else:
            out["name"] = v.strip()
    if "slug" in raw:
        if (msg := slug_problem(raw["slug"], 80)) is not None:
            problems.add(join(path, "slug"), msg)
        else:
            out["slug"] = raw["slug"]
    for name in ("task_description", "deployment_context"):
        if name in raw:
            if not isinstance(raw[name], str):
                problems.add(join(path, name), "must be a string")
            else:
                out[name] = raw[name]
    if "run_conditions" in raw:
        if not isinstance(raw["run_conditions"], Mapping):
            problems.add(join(path, "run_conditions"),
                         "must be an object (prompt template, parameters, ...)")
        else:
            out["run_conditions"] = dict(raw["run_conditions"])
    if "output_schema" in raw:
        schema = raw["output_schema"]
        if schema is not None:
            if not isinstance(schema, Mapping):
                problems.add(join(path, "output_schema"), "must be a JSON Schema object or null")
            else:
                try:
                    jsonschema.validators.validator_for(schema).check_schema(schema)
                except jsonschema.SchemaError as exc:
                    problems.add(join(path, "output_schema"),
                                 f"is not a valid JSON Schema: {exc.message}")
                else:
                    out["output_schema"] = dict(schema)
        else:
            out["output_schema"] = None
    if "status" in raw:
        if raw["status"] not in ("draft", "open", "closed"):
            problems.add(join(path, "status"), "must be one of draft, open, closed")
        else:
            out["status"] = raw["status"]
    for name in ("show_reference", "is_simulated"):
        if name in raw:
            if not isinstance(raw[name], bool):
                problems.add(join(path, name), "must be true or false")
            else:
                out[name] = raw[name]
    if own:
        problems.raise_if_any("The study")
    return out


# --- import_study file ------------------------------------------------------------------------

STUDY_FILE_SECTIONS = {"study", "rubric", "strata", "plan", "members"}
ROLES = ("lead", "annotator", "viewer")


@dataclass
class StudyFile:
    """A validated `import_study` document, normalised section by section."""

    study: dict[str, Any]
    owner: str | None
    rubric: list[dict[str, Any]] | None
    rubric_notes: str
    dimensions: list[dict[str, Any]] | None
    plan_spec: dict[str, Any] | None
    plan_notes: str
    plan_lock: bool
    members: list[dict[str, str]]
    rubric_aggregate: dict[str, Any] = field(default_factory=lambda: {"kind": "all"})


def _study_section(raw_study: Any, problems: Problems) -> tuple[dict[str, Any], str | None]:
    """The file's ``study`` section: the study fields and the optional owner's username."""
    study: dict[str, Any] = {}
    owner: str | None = None
    if not isinstance(raw_study, Mapping):
        problems.add("study", "is required and must be an object")
        return study, owner
    known = {*STUDY_FIELDS, "owner"}
    for extra in sorted(set(raw_study) - known):
        problems.add(join("study", extra), "unknown field")
    study = study_fields_validate({k: v for k, v in raw_study.items() if k in STUDY_FIELDS},
                                  partial=False, path="study", problems=problems)
    if "owner" in raw_study:
        if not isinstance(raw_study["owner"], str) or not raw_study["owner"]:
            problems.add("study.owner", "must be a username")
        else:
            owner = raw_study["owner"]
    return study, owner


def _rubric_section(
    raw: Any, problems: Problems,
) -> tuple[list[dict[str, Any]] | None, str, dict[str, Any]]:
    """The file's ``rubric`` section: criteria, notes and the rubric rule."""
    rubric: list[dict[str, Any]] | None = None
    rubric_notes = ""
    rubric_aggregate: dict[str, Any] = {"kind": "all"}
    if not isinstance(raw, Mapping):
        problems.add("rubric", "must be an object with 'criteria' (and optional 'notes', "
                               "'aggregate')")
        return rubric, rubric_notes, rubric_aggregate
    rubric_aggregate = rubric_aggregate_validate(
        raw.get("aggregate"), path="rubric.aggregate", problems=problems)
    for extra in sorted(set(raw) - {"criteria", "notes", "aggregate"}):
        problems.add(join("rubric", extra), "unknown field")
    if not isinstance(raw.get("notes", ""), str):
        problems.add("rubric.notes", "must be a string")
    else:
        rubric_notes = raw.get("notes", "")
    rubric = criteria_validate(raw.get("criteria"), path="rubric.criteria", problems=problems)
    return rubric, rubric_notes, rubric_aggregate


def _strata_section(raw: Any, problems: Problems) -> list[dict[str, Any]] | None:
    """The file's ``strata`` section: either the list itself or {"dimensions": [...]}, like
    the REST body."""
    if isinstance(raw, Mapping):
        for extra in sorted(set(raw) - {"dimensions"}):
            problems.add(join("strata", extra), "unknown field")
        return dimensions_validate(raw.get("dimensions"), path="strata.dimensions",
                                   problems=problems)
    return dimensions_validate(raw, path="strata", problems=problems)


def _plan_of_file(
    raw: Any,
    rubric: list[dict[str, Any]] | None,
    dimensions: list[dict[str, Any]] | None,
    problems: Problems,
) -> tuple[dict[str, Any] | None, str, bool]:
    """The file's ``plan`` section: the spec (checked against the file's rubric and strata
    when it has both), notes and whether to lock it."""
    plan_spec: dict[str, Any] | None = None
    plan_notes = ""
    plan_lock = False
    if not isinstance(raw, Mapping) or "spec" not in raw:
        problems.add("plan", "must be an object with 'spec' (and optional 'notes', 'lock')")
        return plan_spec, plan_notes, plan_lock
    for extra in sorted(set(raw) - {"spec", "notes", "lock"}):
        problems.add(join("plan", extra), "unknown field")
    if not isinstance(raw.get("notes", ""), str):
        problems.add("plan.notes", "must be a string")
    else:
        plan_notes = raw.get("notes", "")
    if not isinstance(raw.get("lock", False), bool):
        problems.add("plan.lock", "must be true or false")
    else:
        plan_lock = raw.get("lock", False)
    if not isinstance(raw["spec"], Mapping):
        problems.add("plan.spec", "must be an object")
    elif rubric is not None and dimensions is not None:
        # Both sections are in the file: check the plan against them now, so that every
        # problem of the file is reported at once. Otherwise `study_import` checks it
        # against the study's stored rubric/strata before writing it.
        context = PlanContext(
            rubric_version=None,
            criteria={c["key"]: CriterionShape(c) for c in rubric},
            dimensions={d["key"]: d for d in dimensions},
        )
        plan_spec_validate(raw["spec"], context=context, path="plan.spec", problems=problems)
        plan_spec = dict(raw["spec"])
    else:
        plan_spec = dict(raw["spec"])
    return plan_spec, plan_notes, plan_lock


def _members_section(raw: Any, problems: Problems) -> list[dict[str, str]]:
    """The file's ``members`` section: {username, role} pairs, each username once."""
    members: list[dict[str, str]] = []
    if not isinstance(raw, list):
        problems.add("members", "must be a list of {username, role}")
        return members
    seen: set[str] = set()
    for i, m in enumerate(raw):
        mpath = join("members", i)
        if not isinstance(m, Mapping):
            problems.add(mpath, "must be an object {username, role}")
            continue
        for extra in sorted(set(m) - {"username", "role"}):
            problems.add(join(mpath, extra), "unknown field")
        username, role = m.get("username"), m.get("role")
        if not isinstance(username, str) or not username:
            problems.add(join(mpath, "username"), "is required")
            continue
        if role not in ROLES:
            problems.add(join(mpath, "role"), f"must be one of {', '.join(ROLES)}")
            continue
        if username in seen:
            problems.add(join(mpath, "username"), f"'{username}' is listed twice")
            continue
        seen.add(username)
        members.append({"username": username, "role": role})
    return members


def study_file_validate(doc: Any) -> StudyFile:
    """Validate a whole `import_study` document; every problem is reported with its path."""
    problems = Problems()
    if not isinstance(doc, Mapping):
        problems.add("$", "the file must hold an object with a 'study' section")
        problems.raise_if_any("The study file")
        raise AssertionError("unreachable")
    for extra in sorted(set(doc) - STUDY_FILE_SECTIONS):
        expected = ", ".join(sorted(STUDY_FILE_SECTIONS))
        problems.add(extra, f"unknown section (expected: {expected})")
    study, owner = _study_section(doc.get("study"), problems)
    rubric: list[dict[str, Any]] | None = None
    rubric_notes = ""
    rubric_aggregate: dict[str, Any] = {"kind": "all"}
    if "rubric" in doc:
        rubric, rubric_notes, rubric_aggregate = _rubric_section(doc["rubric"], problems)
    dimensions = _strata_section(doc["strata"], problems) if "strata" in doc else None
    plan_spec: dict[str, Any] | None = None
    plan_notes = ""
    plan_lock = False
    if "plan" in doc:
        plan_spec, plan_notes, plan_lock = _plan_of_file(doc["plan"], rubric, dimensions,
                                                         problems)
    members = _members_section(doc["members"], problems) if "members" in doc else []
    problems.raise_if_any("The study file")
    return StudyFile(study=study, owner=owner, rubric=rubric, rubric_notes=rubric_notes,
                     dimensions=dimensions, plan_spec=plan_spec, plan_notes=plan_notes,
                     plan_lock=plan_lock, members=members,
                     rubric_aggregate=rubric_aggregate)
