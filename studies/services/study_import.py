"""`import_study`: a whole study from one spec file (study, members, rubric, strata, plan)
in one transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from reviewhub.errors import Conflict, ValidationFailed

from ..models import (
    AnalysisPlan,
    Membership,
    Study,
)
from ..selectors import dimensions_current
from ..spec import (
    Problems,
    StudyFile,
    plan_spec_validate,
    study_file_validate,
)
from .plans import plan_context, plan_create, plan_lock, plan_new_version, plan_update
from .rubrics import rubric_update
from .strata import dimension_set
from .study import membership_set, study_create, study_update


@dataclass
class ImportReport:
    """What `study_import` did, one (section, outcome, detail) line per thing it touched."""

    study: Study
    lines: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, section: str, outcome: str, detail: str = "") -> None:
        self.lines.append((section, outcome, detail))

    @property
    def changed(self) -> bool:
        return any(outcome != "unchanged" for _, outcome, _ in self.lines)


def _study_of_file(
    spec_file: StudyFile, owner_username: str | None, *, new_only: bool,
) -> tuple[Study, Any, ImportReport]:
    """The file's study, created (with its owner) or updated; its owner and the report."""
    User = get_user_model()
    study = Study.objects.filter(slug=spec_file.study["slug"]).first()
    if study is not None and new_only:
        raise Conflict(
            f"A study with the slug '{study.slug}' exists already; choose another slug.",
            details={"errors": [{"path": "study.slug", "message": "is taken"}]})
    owner_name = spec_file.owner or owner_username
    if study is None:
        if not owner_name:
            raise ValidationFailed(
                "A new study needs an owner: set study.owner or pass --owner.",
                details={"errors": [{"path": "study.owner", "message": "is required for a "
                                                                       "new study"}]})
        owner = User.objects.filter(username=owner_name).first()
        if owner is None:
            raise ValidationFailed(f"Unknown owner '{owner_name}'.", details={
                "errors": [{"path": "study.owner", "message": "no such user"}]})
        study = study_create(owner=owner, fields=spec_file.study)
        report = ImportReport(study=study)
        report.add("study", "created", study.slug)
    else:
        if spec_file.owner and spec_file.owner != study.owner.get_username():
            raise ValidationFailed(
                f"study.owner '{spec_file.owner}' differs from the study's owner "
                f"'{study.owner.get_username()}'; the owner cannot change by import.",
                details={"errors": [{"path": "study.owner", "message": "cannot change"}]})
        owner = study.owner
        study, outcome = study_update(study=study, fields=spec_file.study)
        report = ImportReport(study=study)
        report.add("study", outcome, study.slug)
    return study, owner, report


def _members_of_file(spec_file: StudyFile, study: Study) -> dict[str, Any]:
    """The users the file's members name; every problem with them is raised at once."""
    User = get_user_model()
    users: dict[str, Any] = {}
    problems = Problems()
    for i, m in enumerate(spec_file.members):
        user = User.objects.filter(username=m["username"]).first()
        if user is None:
            problems.add(f"members[{i}].username", f"no such user '{m['username']}'")
        elif user.pk == study.owner_id and m["role"] != Membership.Role.LEAD:
            problems.add(f"members[{i}].role", "the study owner is always a lead")
        else:
            users[m["username"]] = user
    problems.raise_if_any("The study file")
    return users


def _plan_of_file(
    spec_file: StudyFile, study: Study, owner: Any, report: ImportReport, *,
    allow_new_plan_version: bool,
) -> None:
    """The file's plan: created, unchanged, updated, or a new version after a locked one (only
    when allowed); locked when the file says so."""
    if spec_file.plan_spec is None:
        return
    normalised = plan_spec_validate(spec_file.plan_spec, context=plan_context(study=study),
                                    path="plan.spec")
    latest = AnalysisPlan.objects.filter(study=study).order_by("-version").first()
    notes = spec_file.plan_notes
    if latest is None:
        plan = plan_create(study=study, spec=normalised, created_by=owner, notes=notes)
        report.add("plan", "created", f"v{plan.version}")
    elif latest.spec == normalised and latest.notes == notes:
        plan = latest
        report.add("plan", "unchanged", f"v{plan.version}")
    elif not latest.is_locked:
        plan = plan_update(plan=latest, spec=normalised, notes=notes)
        report.add("plan", "updated", f"v{plan.version}")
    elif allow_new_plan_version:
        plan = plan_new_version(study=study, spec=normalised, created_by=owner,
                                notes=notes)
        report.add("plan", "created", f"v{plan.version} (v{latest.version} is locked)")
    else:
        raise Conflict(
            f"Plan v{latest.version} is locked and differs from the file's plan; "
            "re-run with --new-plan-version to save the file's plan as "
            f"v{latest.version + 1}.")
    if spec_file.plan_lock and not plan.is_locked:
        plan_lock(plan=plan, user=owner)
        report.add("plan lock", "updated", f"v{plan.version} locked")


def study_import(
    *, doc: Any, owner_username: str | None = None, allow_new_plan_version: bool = False,
    new_only: bool = False,
) -> ImportReport:
    """Create or update a study from an `import_study` document, all or nothing.

    Re-running with the same document changes nothing and reports every section "unchanged".
    Members not listed are left alone. A locked plan that differs from the file is refused
    (409) unless `allow_new_plan_version`, which saves the file's plan as the next version.
    `new_only` (the browser's "New study" page, where the signed-in user becomes the owner)
    refuses a slug that exists (409) instead of updating that study, and an owner in the file
    other than `owner_username`.
    """
    spec_file = study_file_validate(doc)
    if new_only and spec_file.owner and spec_file.owner != owner_username:
        raise ValidationFailed(
            "study.owner must be you (or left out): a new study is owned by its creator.",
            details={"errors": [{"path": "study.owner", "message": "must be you or left out"}]})
    with transaction.atomic():
        study, owner, report = _study_of_file(spec_file, owner_username, new_only=new_only)
        users = _members_of_file(spec_file, study)
        if spec_file.rubric is not None:
            rubric, outcome = rubric_update(study=study, criteria=spec_file.rubric,
                                            created_by=owner, notes=spec_file.rubric_notes,
                                            aggregate=spec_file.rubric_aggregate)
            report.add("rubric", outcome, f"v{rubric.version}, {len(spec_file.rubric)} criteria")

        if spec_file.dimensions is not None:
            if dimensions_current(study=study) == spec_file.dimensions:
                report.add("strata", "unchanged", f"{len(spec_file.dimensions)} dimensions")
            else:
                _, changed = dimension_set(study=study, dimensions=spec_file.dimensions)
                report.add("strata", "updated", f"{len(spec_file.dimensions)} dimensions, "
                                                f"{changed} items relabelled")

        if spec_file.plan_spec is not None:
            _plan_of_file(spec_file, study, owner, report,
                          allow_new_plan_version=allow_new_plan_version)

        for m in spec_file.members:
            _, outcome = membership_set(study=study, user=users[m["username"]], role=m["role"])
            report.add(f"member {m['username']}", outcome, m["role"])
    return report
