"""Write services for studies: studies and memberships, API tokens, strata, rubrics and the
analysis plan. Each service owns its transaction; they nest (as savepoints) inside an outer
`transaction.atomic`, which is how ingest and `import_study` make a whole import atomic.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Case, IntegerField, Max, Value, When
from django.db.models.functions import Length
from django.utils import timezone

from reviewhub.capabilities import Capability
from reviewhub.errors import Conflict, NotFound, ValidationFailed

from .access import study_capabilities
from .authentication import token_generate
from .models import (
    AnalysisPlan,
    ApiToken,
    Criterion,
    Item,
    Membership,
    RubricVersion,
    StratumDimension,
    Study,
)
from .selectors import dimensions_current, rubric_criteria_as_specs, rubric_current
from .spec import (
    PlanContext,
    Problems,
    StudyFile,
    criteria_validate,
    dimensions_validate,
    plan_spec_validate,
    rubric_aggregate_validate,
    study_fields_validate,
    study_file_validate,
)
from .strata import (
    DERIVED_SOURCES,
    DimensionAssigner,
    as_number,
    assign_strata,
    dimension_needs_quantiles,
    quantile_edges,
    source_value,
)

Outcome = Literal["created", "updated", "unchanged"]
STATUS_NEXT = {Study.Status.DRAFT: Study.Status.OPEN, Study.Status.OPEN: Study.Status.CLOSED}
RECOMPUTE_BATCH = 2000


def _lock_study(study: Study) -> Study:
    """Serialise version numbering per study (a no-op lock on SQLite, which serialises
    writers anyway)."""
    return Study.objects.select_for_update().get(pk=study.pk)


# --- Studies and members ----------------------------------------------------------------------

def study_create(*, owner: User, fields: Mapping[str, Any]) -> Study:
    """Create a study from raw fields (validated here); the owner becomes its lead."""
    data = study_fields_validate(fields, partial=False)
    if data.get("status", Study.Status.DRAFT) == Study.Status.CLOSED:
        raise ValidationFailed("A study cannot be created closed.",
                               details={"errors": [{"path": "status",
                                                    "message": "must be draft or open"}]})
    with transaction.atomic():
        if Study.objects.filter(slug=data["slug"]).exists():
            raise Conflict(f"A study with slug '{data['slug']}' already exists.",
                           details={"errors": [{"path": "slug", "message": "already taken"}]})
        study = Study.objects.create(owner=owner, **data)
        Membership.objects.create(study=study, user=owner, role=Membership.Role.LEAD)
    return study


def study_status_check(*, study: Study, status: str) -> None:
    """Refuse any status change other than draft -> open -> closed (one step forward)."""
    if status == study.status:
        return
    if STATUS_NEXT.get(Study.Status(study.status)) != status:
        allowed = STATUS_NEXT.get(Study.Status(study.status))
        hint = (f"the only allowed change is to '{allowed}'" if allowed
                else "a closed study stays closed")
        raise ValidationFailed(
            f"Cannot change status from '{study.status}' to '{status}': {hint}.",
            details={"errors": [{"path": "status", "message": f"{study.status} -> {status} is "
                                                              "not allowed"}]},
        )


def study_update(*, study: Study, fields: Mapping[str, Any]) -> tuple[Study, Outcome]:
    """Update study fields (partial). The slug is fixed after creation (URLs and tokens name
    it); status moves only forward (draft -> open -> closed)."""
    data = study_fields_validate(fields, partial=True)
    if "slug" in data and data["slug"] != study.slug:
        raise ValidationFailed("The slug of a study cannot change.",
                               details={"errors": [{"path": "slug", "message": "is fixed"}]})
    data.pop("slug", None)
    if "status" in data:
        study_status_check(study=study, status=data["status"])
    changed = [name for name, value in data.items() if getattr(study, name) != value]
    if not changed:
        return study, "unchanged"
    with transaction.atomic():
        for name in changed:
            setattr(study, name, data[name])
        study.save(update_fields=[*changed, "updated_at"])
    return study, "updated"


def membership_set(
    *, study: Study, user: User, role: str, created_account: bool = False
) -> tuple[Membership, Outcome]:
    """Add a member or change their role. The owner always stays a lead.

    `created_account`: the account was created by this study's invite, in the caller's
    transaction (annotations' invite). Only such a membership lets the study's leads reset the
    password (annotations/services/members.py); it is recorded when the membership is made and
    never set on an existing one, so re-inviting an account grants nothing more."""
    if role not in Membership.Role.values:
        raise ValidationFailed(f"Unknown role '{role}'.", details={"errors": [
            {"path": "role", "message": f"must be one of {', '.join(Membership.Role.values)}"}]})
    if user.pk == study.owner_id and role != Membership.Role.LEAD:
        raise Conflict("The study owner is always a lead.")
    with transaction.atomic():
        membership, created = Membership.objects.get_or_create(
            study=study, user=user, defaults={"role": role, "created_account": created_account}
        )
        if created:
            return membership, "created"
        if membership.role == role:
            return membership, "unchanged"
        if membership.role == Membership.Role.LEAD:
            _other_lead_check(study=study, user=user, what="change the role of")
        membership.role = role
        membership.save(update_fields=["role"])
    return membership, "updated"


def membership_remove(*, study: Study, user: User) -> None:
    """Remove a member (not the owner)."""
    if user.pk == study.owner_id:
        raise Conflict("The study owner cannot be removed.")
    with transaction.atomic():
        if Membership.objects.filter(study=study, user=user,
                                     role=Membership.Role.LEAD).exists():
            _other_lead_check(study=study, user=user, what="remove")
        deleted, _ = Membership.objects.filter(study=study, user=user).delete()
    if not deleted:
        raise NotFound("No such member.")


def _other_lead_check(*, study: Study, user: User, what: str) -> None:
    """A study keeps at least one lead: the lead rows are locked so that two leads removing
    each other at once cannot both succeed."""
    leads = Membership.objects.filter(study=study, role=Membership.Role.LEAD)
    if connection.features.has_select_for_update:
        leads = leads.select_for_update()
    if not any(pk != user.pk for pk in leads.values_list("user_id", flat=True)):
        raise Conflict(f"Cannot {what} the study's last lead: make another member a lead first.",
                       details={"reason": "last_lead"})


# --- API tokens -------------------------------------------------------------------------------

def api_token_create(
    *, user: User, name: str, study: Study | None = None, can_write: bool = False
) -> tuple[ApiToken, str]:
    """Create a token; returns (token, secret). The secret is never stored or shown again."""
    problems = Problems()
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        problems.add("name", "must be a non-empty string of at most 100 characters")
    problems.raise_if_any("The token")
    if study is not None and Capability.VIEW_STUDY not in study_capabilities(user=user,
                                                                             study=study):
        raise NotFound(f"Study '{study.slug}' not found.")
    secret, prefix, digest = token_generate()
    with transaction.atomic():
        token = ApiToken.objects.create(user=user, name=name.strip(), prefix=prefix,
                                        key_hash=digest, study=study, can_write=can_write)
    return token, secret


def api_token_revoke(*, token: ApiToken) -> ApiToken:
    """Revoke a token (idempotent: revoking twice keeps the first time)."""
    if token.revoked_at is None:
        with transaction.atomic():
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
    return token


# --- Strata -----------------------------------------------------------------------------------

def _length_annotations(sources: set[str]) -> dict[str, Any]:
    ann: dict[str, Any] = {}
    if "input_length" in sources:
        ann["input_length"] = Length("input")
    if "context_length" in sources:
        ann["context_length"] = Length("context")
    if "reference_length" in sources:
        # No reference answer means no reference length ("unknown"), not a length of 0.
        ann["reference_length"] = Case(
            When(reference="", then=Value(None)), default=Length("reference"),
            output_field=IntegerField(),
        )
    return ann


def _bulk_write_strata(rows: Sequence[tuple[int, dict[str, str]]]) -> None:
    if not rows:
        return
    if connection.vendor == "postgresql":
        # One UPDATE ... FROM (VALUES ...) per batch: several times faster than bulk_update's
        # CASE WHEN chain on 100k rows.
        import json

        table = Item._meta.db_table
        placeholders = ", ".join(["(%s, %s::jsonb)"] * len(rows))
        params: list[Any] = []
        for pk, strata in rows:
            params.extend([pk, json.dumps(strata)])
        with connection.cursor() as cursor:
            cursor.execute(
                f'UPDATE "{table}" AS t SET strata = v.strata FROM (VALUES {placeholders}) '
                "AS v(id, strata) WHERE t.id = v.id",
                params,
            )
        return
    Item.objects.bulk_update([Item(id=pk, strata=s) for pk, s in rows], ["strata"],
                             batch_size=500)


def _item_batches(
    base: Any, fields: list[str], batch_size: int, item_ids: Sequence[int] | None
) -> Iterator[list[dict[str, Any]]]:
    """Item rows in id order, `batch_size` at a time: an id keyset over the study (index
    item_study_id), or chunks of the given ids (bounded IN lists, for SQLite's variable cap)."""
    if item_ids is not None:
        ids = sorted(set(item_ids))
        for start in range(0, len(ids), batch_size):
            chunk = ids[start:start + batch_size]
            yield list(base.filter(pk__in=chunk).order_by("id").values(*fields))
        return
    last_id = 0
    while True:
        rows = list(base.filter(id__gt=last_id).order_by("id").values(*fields)[:batch_size])
        if not rows:
            return
        last_id = rows[-1]["id"]
        yield rows


def study_strata_recompute(
    *, study: Study, item_ids: Sequence[int] | None = None, batch_size: int = RECOMPUTE_BATCH
) -> int:
    """Recompute `Item.strata` for the items of the study from its current scheme.

    Returns the number of items whose labels changed (only those are written). Reads items in
    id-keyset batches with lengths computed in the database (large inputs are never loaded),
    so it runs in bounded memory on 100k items. Usable inside an outer atomic block (it then
    becomes a savepoint and commits with the caller).

    `item_ids` limits the work to those items (e.g. the rows an ingest created or updated).
    It is ignored when the scheme has quantile bins: their edges depend on every item, so a
    new item can move the labels of the others.
    """
    dims = list(study.dimensions.order_by("position", "id").values("key", "kind", "source",
                                                                    "config"))
    sources = {d["source"] for d in dims}
    lengths_needed = sources & set(DERIVED_SOURCES)
    need_metadata = any(s.startswith("metadata.") for s in sources)
    fields = ["id", "strata", *(["metadata"] if need_metadata else []), *sorted(lengths_needed)]
    base = Item.objects.filter(study=study).annotate(**_length_annotations(lengths_needed))
    if not dims and item_ids is None:
        # No scheme: only items still carrying old labels need a write.
        base = base.exclude(strata={})

    with transaction.atomic():
        quantile_dims = [d for d in dims if dimension_needs_quantiles(d)]
        edges: dict[str, list[float]] = {}
        if quantile_dims:
            values: dict[str, list[float]] = {d["key"]: [] for d in quantile_dims}
            qfields = ["id", *(["metadata"] if any(d["source"].startswith("metadata.")
                                                   for d in quantile_dims) else []),
                       *sorted(lengths_needed)]
            for row in base.values(*qfields).iterator(chunk_size=batch_size):
                for d in quantile_dims:
                    raw = source_value(d["source"], metadata=row.get("metadata"), lengths=row)
                    number = as_number(raw)
                    if number is not None:
                        values[d["key"]].append(number)
            for d in quantile_dims:
                edges[d["key"]] = quantile_edges(values[d["key"]], d["config"]["quantiles"])
        assigners = [DimensionAssigner(d, edges=edges.get(d["key"])) for d in dims]
        changed = 0
        for rows in _item_batches(base, fields, batch_size,
                                  None if quantile_dims else item_ids):
            updates: list[tuple[int, dict[str, str]]] = []
            for row in rows:
                strata = assign_strata(assigners, metadata=row.get("metadata"), lengths=row)
                if strata != row["strata"]:
                    updates.append((row["id"], strata))
            _bulk_write_strata(updates)
            changed += len(updates)
    return changed


def _locked_plan_dimension_refs(study: Study) -> set[str]:
    refs: set[str] = set()
    for spec in AnalysisPlan.objects.filter(study=study, locked_at__isnull=False).values_list(
        "spec", flat=True
    ):
        refs.update(spec.get("strata", []) or [])
        refs.update((spec.get("deployment_mix") or {}).keys())
    return refs


def dimension_set(
    *, study: Study, dimensions: list[dict[str, Any]]
) -> tuple[list[StratumDimension], int]:
    """Validate and replace the study's strata scheme, then recompute every item's labels.

    Returns (dimensions in order, number of items whose labels changed). Removing a dimension
    that a locked analysis plan names is refused (409): the plan could no longer be reported.
    """
    normalised = dimensions_validate(dimensions)
    with transaction.atomic():
        _lock_study(study)
        new_keys = {d["key"] for d in normalised}
        missing = sorted(_locked_plan_dimension_refs(study) - new_keys)
        if missing:
            raise Conflict(
                f"A locked analysis plan uses dimension(s) {', '.join(missing)}; keep them or "
                "save a new plan version first.",
                details={"dimensions": missing},
            )
        if dimensions_current(study=study) == normalised:
            return list(study.dimensions.order_by("position", "id")), 0
        existing = {d.key: d for d in study.dimensions.all()}
        StratumDimension.objects.filter(study=study).exclude(key__in=new_keys).delete()
        out: list[StratumDimension] = []
        for position, d in enumerate(normalised):
            obj = existing.get(d["key"]) or StratumDimension(study=study, key=d["key"])
            obj.name, obj.kind, obj.source, obj.config = d["name"], d["kind"], d["source"], \
                d["config"]
            obj.position = position
            obj.save()
            out.append(obj)
        changed = study_strata_recompute(study=study)
    return out, changed


# --- Rubric -----------------------------------------------------------------------------------

def rubric_in_use(*, rubric: RubricVersion) -> bool:
    """Whether anything downstream refers to the rubric's criteria: an active sampling plan,
    verdicts, annotations, judge jobs (queued work would judge against changed text), gold
    labels, adjudications.
    Looked up through the app registry so that studies does not import the apps above it."""
    criteria = Criterion.objects.filter(rubric=rubric)
    try:
        plan_cls = apps.get_model("annotations", "SamplingPlan")
    except LookupError:
        plan_cls = None
    # An active sampling plan is use too: annotators holding leases grade against this text,
    # and a criterion edited under them would mix two meanings in one plan's labels.
    if plan_cls is not None and plan_cls._default_manager.filter(
        rubric=rubric, is_active=True
    ).exists():
        return True
    for label, model in (("judges", "Verdict"), ("annotations", "Annotation"),
                         ("judges", "JudgeJob"), ("annotations", "GoldLabel"),
                         ("annotations", "Adjudication")):
        try:
            model_cls = apps.get_model(label, model)
        except LookupError:
            continue
        if model_cls._default_manager.filter(criterion__in=criteria).exists():
            return True
    return False


def _criteria_write(rubric: RubricVersion, criteria: list[dict[str, Any]]) -> None:
    existing = {c.key: c for c in rubric.criteria.all()}
    keys = {c["key"] for c in criteria}
    Criterion.objects.filter(rubric=rubric).exclude(key__in=keys).delete()
    for position, c in enumerate(criteria):
        obj = existing.get(c["key"]) or Criterion(rubric=rubric, key=c["key"])
        for name, value in c.items():
            setattr(obj, name, value)
        obj.position = position
        obj.save()


def rubric_create(
    *, study: Study, criteria: list[dict[str, Any]], created_by: User | None,
    notes: str = "", aggregate: Any = None,
) -> RubricVersion:
    """Create the next rubric version (v1 for a new study) holding exactly `criteria`, with
    the rubric's rule `aggregate` (default: every pass/fail criterion must pass)."""
    normalised = criteria_validate(criteria)
    rule = rubric_aggregate_validate(aggregate)
    with transaction.atomic():
        _lock_study(study)
        last = RubricVersion.objects.filter(study=study).aggregate(m=Max("version"))["m"] or 0
        rubric = RubricVersion.objects.create(study=study, version=last + 1, notes=notes or "",
                                              created_by=created_by, aggregate=rule)
        _criteria_write(rubric, normalised)
    return rubric


def rubric_update(
    *, study: Study, criteria: list[dict[str, Any]], created_by: User | None,
    notes: str = "", aggregate: Any = None,
) -> tuple[RubricVersion, Outcome]:
    """Make `criteria` the study's rubric.

    - no rubric yet: creates v1 ("created");
    - same criteria as the current version: nothing changes ("unchanged");
    - current version not yet used (no verdict, annotation, judge job, gold label or
      adjudication refers to its criteria): edited in place ("updated");
    - otherwise: version n+1 holding exactly the new criteria ("created"); the old version
      stays as it was for everything that refers to it.
    """
    normalised = criteria_validate(criteria)
    rule = rubric_aggregate_validate(aggregate)
    with transaction.atomic():
        _lock_study(study)
        current = rubric_current(study=study)
        if current is None:
            return rubric_create(study=study, criteria=normalised, created_by=created_by,
                                 notes=notes, aggregate=rule), "created"
        same_rule = (current.aggregate or {"kind": "all"}) == rule
        if rubric_criteria_as_specs(rubric=current) == normalised and same_rule and (
            not notes or notes == current.notes
        ):
            return current, "unchanged"
        if rubric_in_use(rubric=current):
            return rubric_create(study=study, criteria=normalised, created_by=created_by,
                                 notes=notes, aggregate=rule), "created"
        _criteria_write(current, normalised)
        if notes and notes != current.notes:
            current.notes = notes
            current.save(update_fields=["notes"])
        if not same_rule:
            current.aggregate = rule
            current.save(update_fields=["aggregate"])
    return current, "updated"


# --- Analysis plan ----------------------------------------------------------------------------

def plan_context(*, study: Study) -> PlanContext:
    """The rubric and strata a plan of this study is checked against."""
    rubric = rubric_current(study=study)
    criteria = {c.key: c for c in rubric.criteria.all()} if rubric else {}
    dims = {d["key"]: d for d in dimensions_current(study=study)}
    return PlanContext(rubric_version=rubric.version if rubric else None, criteria=criteria,
                       dimensions=dims)


def _plan_validate(study: Study, spec: Any) -> dict[str, Any]:
    return plan_spec_validate(spec, context=plan_context(study=study))


def plan_create(
    *, study: Study, spec: Any, created_by: User | None, notes: str = ""
) -> AnalysisPlan:
    """Create the study's first analysis plan (v1); later versions use `plan_new_version`."""
    normalised = _plan_validate(study, spec)
    with transaction.atomic():
        _lock_study(study)
        if AnalysisPlan.objects.filter(study=study).exists():
            raise Conflict("The study already has an analysis plan; edit it, or save a new "
                           "version (POST .../plans/<version>/new-version).")
        return AnalysisPlan.objects.create(study=study, version=1, spec=normalised,
                                           notes=notes or "", created_by=created_by)


def plan_update(*, plan: AnalysisPlan, spec: Any, notes: str | None = None) -> AnalysisPlan:
    """Edit an unlocked plan in place; a locked plan is refused with 409."""
    normalised = _plan_validate(plan.study, spec)
    with transaction.atomic():
        plan = AnalysisPlan.objects.select_for_update().get(pk=plan.pk)
        if plan.is_locked:
            raise Conflict(
                f"Plan v{plan.version} is locked (by {plan.locked_by or 'unknown'} at "
                f"{plan.locked_at:%Y-%m-%d %H:%M} UTC); save it as a new version instead.",
                details={"version": plan.version, "locked_at": plan.locked_at.isoformat()
                         if plan.locked_at else None},
            )
        plan.spec = normalised
        update = ["spec"]
        if notes is not None:
            plan.notes = notes
            update.append("notes")
        plan.save(update_fields=update)
    return plan


def plan_new_version(
    *, study: Study, spec: Any, created_by: User | None, notes: str = ""
) -> AnalysisPlan:
    """Save `spec` as the next plan version; earlier versions (locked or not) stay as they are."""
    normalised = _plan_validate(study, spec)
    with transaction.atomic():
        _lock_study(study)
        last = AnalysisPlan.objects.filter(study=study).aggregate(m=Max("version"))["m"] or 0
        return AnalysisPlan.objects.create(study=study, version=last + 1, spec=normalised,
                                           notes=notes or "", created_by=created_by)


def plan_lock(*, plan: AnalysisPlan, user: User) -> AnalysisPlan:
    """Lock (pre-register) a plan, recording who and when. The spec is re-checked against the
    current rubric and strata first: a plan must not be frozen against a rubric it no longer
    matches."""
    _plan_validate(plan.study, plan.spec)
    with transaction.atomic():
        plan = AnalysisPlan.objects.select_for_update().get(pk=plan.pk)
        if plan.is_locked:
            raise Conflict(f"Plan v{plan.version} is already locked.")
        plan.locked_at = timezone.now()
        plan.locked_by = user
        plan.save(update_fields=["locked_at", "locked_by"])
    return plan


# --- import_study -----------------------------------------------------------------------------

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


# --- outputs made by candidate runs (generation/) ------------------------------------------

GENERATED_BY = "generation"


@dataclass(frozen=True)
class GeneratedOutput:
    """What a candidate run measured for one (candidate, item): the study's ordinary output."""

    candidate_id: int
    item_id: int
    text: str
    error: str
    finish_reason: str
    latency_ms: float | None
    tokens_in: int | None
    tokens_out: int | None
    cost: float | None
    schema_valid: bool | None
    # {"generated_by": "generation", "config_version", "config_hash", "run", "request_hash",
    #  "error_kind", "overhead_ms", "schema_violation", "concurrency"}
    metadata: dict[str, Any]


def outputs_generated_conflicts(*, candidate_id: int, item_ids: Sequence[int],
                                config_hash: str) -> int:
    """How many of these items already have an output of the candidate that another source
    made (an import, or another generation config): a run must not overwrite them."""
    from .models import Output

    # Read, not filtered in SQL: a JSON key the row lacks compares as NULL, which an
    # `exclude` on it would silently drop.
    metas = Output.objects.filter(candidate_id=candidate_id,
                                  item_id__in=list(item_ids)).values_list("metadata", flat=True)
    return sum(1 for m in metas if not (isinstance(m, dict)
                                        and m.get("generated_by") == GENERATED_BY
                                        and m.get("config_hash") == config_hash))


def outputs_record_generated(*, outs: Sequence[GeneratedOutput]) -> dict[tuple[int, int], int]:
    """Create (or refresh) the outputs a candidate run produced; {(candidate, item): id}.

    Called inside the caller's transaction, together with the conditional update that ends
    the jobs: a job ends once, so its output is written once. A few statements per chunk,
    whatever its size. An output of the same (candidate, item) from another source is left
    alone (the run refused to start over it; one that appeared since is kept) and its id
    returned unchanged.
    """
    from .models import Output

    if not outs:
        return {}

    def fields(out: GeneratedOutput) -> dict[str, Any]:
        return {"text": out.text, "error": out.error, "finish_reason": out.finish_reason[:50],
                "latency_ms": out.latency_ms, "tokens_in": out.tokens_in,
                "tokens_out": out.tokens_out, "cost": out.cost,
                "schema_valid": out.schema_valid,
                "metadata": {**out.metadata, "generated_by": GENERATED_BY}}

    if connection.vendor == "postgresql":
        return _outputs_upsert_postgres(outs)
    wanted = {(o.candidate_id, o.item_id): o for o in outs}
    cands = {o.candidate_id for o in outs}
    items = {o.item_id for o in outs}
    with transaction.atomic():
        existing = {(o.candidate_id, o.item_id): o for o in Output.objects.select_for_update()
                    .filter(candidate_id__in=cands, item_id__in=items)
                    if (o.candidate_id, o.item_id) in wanted}
        refresh = []
        for key, row in existing.items():
            meta = row.metadata or {}
            new = wanted[key]
            if (meta.get("generated_by") == GENERATED_BY
                    and meta.get("config_hash") == new.metadata.get("config_hash")):
                for name, value in fields(new).items():
                    setattr(row, name, value)
                refresh.append(row)
        if refresh:
            Output.objects.bulk_update(refresh, [*fields(outs[0]), "updated_at"])
        study_of = dict(Item.objects.filter(id__in=items).values_list("id", "study_id"))
        created = Output.objects.bulk_create([
            Output(study_id=study_of[o.item_id], candidate_id=o.candidate_id,
                   item_id=o.item_id, **fields(o))
            for key, o in wanted.items() if key not in existing])
    ids = {key: int(row.pk) for key, row in existing.items()}
    ids.update({(row.candidate_id, row.item_id): int(row.pk) for row in created})
    return ids


# One INSERT … ON CONFLICT for a chunk of generated outputs: a drain records many outputs a
# second, and building them through the ORM (select, bulk_update's CASE per field,
# bulk_create) cost more CPU than the calls it records. An existing row is refreshed only if
# the same generation config made it (the WHERE of DO UPDATE); other rows are left alone
# and their ids read afterwards.
_OUTPUT_UPSERT_SQL = """
INSERT INTO {output} AS o (study_id, candidate_id, item_id, text, parsed_json, latency_ms,
    tokens_in, tokens_out, cost, error, finish_reason, schema_valid, metadata, created_at,
    updated_at)
SELECT i.study_id, v.candidate_id, v.item_id, v.text, NULL, v.latency_ms, v.tokens_in,
    v.tokens_out, v.cost, v.error, v.finish_reason, v.schema_valid, v.metadata::jsonb,
    %(now)s, %(now)s
FROM json_to_recordset(%(rows)s::json) AS v(candidate_id bigint, item_id bigint, text text,
    latency_ms double precision, tokens_in integer, tokens_out integer, cost double precision,
    error text, finish_reason varchar, schema_valid boolean, metadata json)
JOIN {item} i ON i.id = v.item_id
ON CONFLICT (candidate_id, item_id) DO UPDATE SET text = EXCLUDED.text,
    latency_ms = EXCLUDED.latency_ms, tokens_in = EXCLUDED.tokens_in,
    tokens_out = EXCLUDED.tokens_out, cost = EXCLUDED.cost, error = EXCLUDED.error,
    finish_reason = EXCLUDED.finish_reason, schema_valid = EXCLUDED.schema_valid,
    metadata = EXCLUDED.metadata, updated_at = EXCLUDED.updated_at
WHERE o.metadata->>'generated_by' = %(by)s
    AND o.metadata->>'config_hash' = EXCLUDED.metadata->>'config_hash'
RETURNING o.id, o.candidate_id, o.item_id
"""


def _outputs_upsert_postgres(outs: Sequence[GeneratedOutput]) -> dict[tuple[int, int], int]:
    import json
    import math
    import re

    from .models import Output

    # PostgreSQL text cannot hold NUL, and a lone surrogate cannot even be encoded to send:
    # a model's answer is recorded rather than refused, so both become U+FFFD.
    unstorable = re.compile("[\x00\ud800-\udfff]")

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return unstorable.sub("\ufffd", value)
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    def num(v: float | None) -> float | str | None:
        return v if v is None or math.isfinite(v) else str(v)

    rows = [{"candidate_id": o.candidate_id, "item_id": o.item_id, "text": o.text,
             "latency_ms": num(o.latency_ms), "tokens_in": o.tokens_in,
             "tokens_out": o.tokens_out, "cost": num(o.cost), "error": o.error,
             "finish_reason": o.finish_reason[:50], "schema_valid": o.schema_valid,
             "metadata": {**o.metadata, "generated_by": GENERATED_BY}} for o in outs]
    sql = _OUTPUT_UPSERT_SQL.format(output=Output._meta.db_table, item=Item._meta.db_table)
    with connection.cursor() as cursor:
        payload = json.dumps(clean(rows), ensure_ascii=False)
        cursor.execute(sql, {"rows": payload, "now": timezone.now(),
                             "by": GENERATED_BY})
        ids = {(c, i): int(pk) for pk, c, i in cursor.fetchall()}
    missing = [(o.candidate_id, o.item_id) for o in outs
               if (o.candidate_id, o.item_id) not in ids]
    if missing:  # rows another source made: kept as they are
        for pk, c, i in Output.objects.filter(
                candidate_id__in={m[0] for m in missing},
                item_id__in={m[1] for m in missing}).values_list("id", "candidate_id",
                                                                 "item_id"):
            if (c, i) in missing:
                ids[(c, i)] = int(pk)
    return ids
