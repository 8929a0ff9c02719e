"""The generic long ratings format: one row per rating, CSV or JSON Lines (docs/import-ratings.md).

Reading (`ratings_read`) yields ``(line number, row dict)``; `ratings_validate` checks every row
and resolves it against the study without writing; `ratings_import` (the service) validates
everything first and then writes ordinary ReviewHub rows in one transaction, so that reports
treat imported and native data the same: Items (with strata), Candidates, Outputs,
Comparisons, imported Judges / JudgeVersions / Verdicts, inactive annotator users with
memberships, and Annotations, each through the import services of the app that owns the table
(`studies.imports_service`, `judges.services`, `annotations.imports_service`), which also hold
the rules the rows must obey. Re-importing the same rows changes nothing (upsert by natural
keys); any invalid row means nothing is written.

Where a guess could silently invert or re-type data the importer refuses to guess: pairwise
files declare what their values refer to (`pairwise_values`), numeric values never become
categorical labels by inference, and a misspelt optional column is an error while other extra
columns are ignored with a warning. Where comparisons were rated in both orders, the orders are
checked against each other (`imports.pairwise_check`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from django.db import transaction

from annotations.imports_service import annotation_import_clean, annotations_import_bulk
from annotations.services.labels import CleanLabel
from judges.services import (
    ImportedSample,
    VerdictImport,
    judge_imported_version_get_or_create,
    verdicts_import_bulk,
)
from reviewhub.errors import ValidationFailed
from studies import imports_service as studies_imports
from studies.criteria import (
    PAIRWISE_VALUES,
    criterion_allowed_values,
    interval_bounds,
    interval_value,
)
from studies.imports_service import (
    criterion_import_problems,
    criterion_unsaved,
    importer_username,
)
from studies.models import Criterion, Study
from studies.strata import as_number

from ._ratings_read import ReadError, ratings_read
from ._ratings_rows import (
    DEFAULT_CANDIDATE,
    DEFAULT_JUDGE_VERSION,
    PAIRWISE_CONVENTIONS,
    POSITION_CANDIDATES,
    _missing_columns,
    _probability_problem,
    _Problems,
    _Rating,
    _State,
    _strata_conflicts,
    _validate_row,
)
from ._ratings_scales import ScaleSpec, _CriterionView, _infer_scale, scale_parse
from ._ratings_texts import _apply_texts, _texts_read
from .pairwise_check import PairwiseVote, order_consistency_warnings

# The importer's interface: reading (imports/_ratings_read.py), scales (_ratings_scales.py), the
# row checks (_ratings_rows.py) and the texts file (_ratings_texts.py) are its parts; this
# module resolves criteria, checks the values and writes through the owning apps' services.
__all__ = [
    "BATCH",
    "DEFAULT_CANDIDATE",
    "DEFAULT_JUDGE_VERSION",
    "PAIRWISE_CONVENTIONS",
    "POSITION_CANDIDATES",
    "SCALES",
    "ImportSummary",
    "ReadError",
    "ScaleSpec",
    "importer_username",
    "ratings_import",
    "ratings_read",
    "ratings_validate",
    "scale_parse",
]

BATCH = 5000
SCALES = ("binary", "ordinal", "pairwise", "categorical", "interval")
_SWAP = {"A": "B", "B": "A", "tie": "tie"}


@dataclass
class ImportSummary:
    """What an import found and did; `created`/`updated`/`unchanged` count rows per model.

    `criteria` says, per criterion of the file, its scale and whether it existed, was stated
    (`--scale`) or was inferred (and from what); `warnings` are findings that do not stop the
    import but that a user must look at (also printed by the command). `dry_run`: validated
    and written in a transaction that was rolled back, so the counts are what an import would do.
    """

    rows: int = 0
    created: dict[str, int] = field(default_factory=dict)
    updated: dict[str, int] = field(default_factory=dict)
    unchanged: dict[str, int] = field(default_factory=dict)
    criteria_created: list[str] = field(default_factory=list)
    criteria: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dry_run: bool = False

    def bump(self, which: str, model: str, n: int = 1) -> None:
        target = getattr(self, which)
        target[model] = target.get(model, 0) + n

    def as_dict(self) -> dict[str, Any]:
        """Every field, in order (the objects themselves, not copies)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class _Plan:
    """Everything validated and resolved, ready to be written."""

    ratings: list[_Rating]
    criteria: dict[str, _CriterionView]
    new_criteria: dict[str, ScaleSpec]
    items: dict[str, dict[str, Any]]  # external id -> {"input", "strata", "meta"}
    outputs: dict[tuple[str, str], dict[str, Any]]  # (item, candidate) -> {"text", "output_id"}
    pairs: list[tuple[tuple[str, str], tuple[str, str]]]
    judge_value_types: dict[tuple[str, str], str]
    criteria_info: dict[str, dict[str, Any]] = field(default_factory=dict)
    rater_attributes: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _label_field(exc: ValidationFailed, criterion: str) -> str:
    """The file column a label-rule error is about ("labels.KEY.severity" -> "severity")."""
    details = exc.details if isinstance(exc.details, dict) else {}
    for entry in details.get("errors") or []:
        name = str(entry.get("path", "")) if isinstance(entry, dict) else ""
        tail = name[len(criterion) + 1 :] if name.startswith(criterion + ".") else ""
        if tail in ("severity", "severity_note"):
            return "severity"
    return "value"


def ratings_validate(
    *,
    study: Study,
    rows: Iterable[tuple[int, Mapping[str, Any]]],
    scales: Mapping[str, ScaleSpec] | None = None,
    pairwise_values: str | None = None,
    texts: Iterable[tuple[int, Mapping[str, Any]]] | None = None,
    pass_thresholds: Mapping[str, int] | None = None,
) -> _Plan:
    """Check every row (collecting "line N: field: reason" problems) and resolve criteria.

    `pairwise_values` ("outputs" or "presented") says what pairwise values refer to for rows
    without a `pairwise_values` column; a pairwise row with neither is refused. `texts` are the
    rows of a JSON Lines file of input and output texts keyed by `item_id` / `output_id`.
    `pass_thresholds` (`--pass-threshold KEY=N`) gives the first passing point of an ordinal
    criterion the import creates; on an existing criterion it must equal the stored threshold.
    Raises ValidationFailed listing the problems (capped at 50, with the total) when any row is
    invalid; returns the resolved plan otherwise. Reads the database, never writes.
    """
    scales = dict(scales or {})
    thresholds = dict(pass_thresholds or {})
    if pairwise_values is not None and pairwise_values not in PAIRWISE_CONVENTIONS:
        raise ValidationFailed.at(
            "pairwise_values",
            f"pairwise_values must be one of {', '.join(PAIRWISE_CONVENTIONS)}, "
            f"got {pairwise_values!r}",
        )
    problems = _Problems()
    st = _State(problems=problems, pairwise_values=pairwise_values)
    # The texts file is read first: the candidate of an output may come from it.
    text_rows = _texts_read(texts, st) if texts is not None else None
    n_rows = _rows_read(rows, st)
    _missing_columns(st, n_rows)
    _strata_conflicts(st)
    warnings: list[str] = []
    if text_rows is not None:
        _apply_texts(text_rows, st, warnings)
    problems.raise_if_any()
    ratings = st.ratings
    criteria, new_criteria, info = _criteria_resolve(study, st, scales, thresholds)
    problems.raise_if_any()
    _ratings_check(ratings, criteria, problems)
    problems.raise_if_any()
    notes = _plan_notes(st, criteria, info, warnings)
    pairs = list({r.pair: None for r in ratings if r.pair is not None})
    return _Plan(
        ratings=ratings,
        criteria=criteria,
        new_criteria=new_criteria,
        items=st.items,
        outputs=st.outputs,
        pairs=pairs,
        judge_value_types=st.judge_value_types,
        criteria_info=info,
        rater_attributes=st.rater_attributes,
        notes=notes,
        warnings=warnings,
    )


def _rows_read(rows: Iterable[tuple[int, Mapping[str, Any]]], st: _State) -> int:
    """Validate every row into ``st``; the number of rows read (a read error ends the file)."""
    problems = st.problems
    n_rows = 0
    try:
        for line, row in rows:
            n_rows += 1
            _validate_row(line, row, st)
    except ReadError as exc:
        problems.add(exc.line, exc.message.split(":", 1)[0], exc.message.split(":", 1)[-1].strip())
    if n_rows == 0 and not problems.items:
        problems.add(1, "file", "no rating rows")
    return n_rows


def _criteria_resolve(
    study: Study,
    st: _State,
    scales: Mapping[str, ScaleSpec],
    thresholds: Mapping[str, int],
) -> tuple[dict[str, _CriterionView], dict[str, ScaleSpec], dict[str, dict[str, Any]]]:
    """Each criterion of the file, as the rubric has it or as the import will create it
    (criteria, the new ones, and how each was decided); problems are added to ``st``."""
    problems = st.problems
    ratings = st.ratings
    rubric = study.rubric_versions.order_by("-version").first()
    existing = {c.key: c for c in Criterion.objects.filter(rubric=rubric)} if rubric else {}
    criteria: dict[str, _CriterionView] = {}
    new_criteria: dict[str, ScaleSpec] = {}
    info: dict[str, dict[str, Any]] = {}
    first_line = {r.criterion: r.line for r in reversed(ratings)}
    unrated = sorted(set(thresholds) - set(st.values_by_criterion))
    if unrated:
        raise ValidationFailed.at(
            "pass_threshold",
            "--pass-threshold names "
            + ", ".join(f"'{k}'" for k in unrated)
            + ", not a criterion of the file",
            criteria=unrated,
        )
    for key in st.values_by_criterion:
        line = first_line[key]
        if key in st.pairwise_criteria and key in st.single_criteria:
            problems.add(line, "criterion", f"'{key}' has both single-output and pairwise rows")
            continue
        if key in existing:
            _existing_criterion(key, existing[key], line, scales, thresholds, problems,
                                criteria, info)
        else:
            _new_criterion(key, line, st, scales, thresholds, problems, criteria,
                           new_criteria, info)
    for key, view in criteria.items():
        if (view.scale == "pairwise") != (key in st.pairwise_criteria):
            problems.add(
                first_line[key],
                "criterion",
                f"'{key}' is {view.scale} but the rows are "
                f"{'pairwise' if key in st.pairwise_criteria else 'single-output'}",
            )
    return criteria, new_criteria, info


def _existing_criterion(
    key: str,
    crit: Criterion,
    line: int,
    scales: Mapping[str, ScaleSpec],
    thresholds: Mapping[str, int],
    problems: _Problems,
    criteria: dict[str, _CriterionView],
    info: dict[str, dict[str, Any]],
) -> None:
    """A criterion of the file that the rubric has: the file's --scale and --pass-threshold
    must agree with it."""
    criteria[key] = _CriterionView(key, crit.scale, criterion_allowed_values(crit), crit)
    info[key] = {"scale": crit.scale, "how": "existing"}
    if key in scales and scales[key].scale != crit.scale:
        problems.add(
            line,
            "criterion",
            f"'{key}' exists as {crit.scale}; --scale says {scales[key].scale}",
        )
    elif key in scales and crit.scale == "interval":
        _interval_range_check(line, key, crit, scales[key], problems)
    if key in thresholds:
        n = thresholds[key]
        if crit.scale != "ordinal":
            problems.add(line, "criterion", _threshold_not_ordinal(key, n, crit.scale))
        elif crit.pass_threshold != n:
            stored = crit.pass_threshold
            problems.add(
                line,
                "criterion",
                f"--pass-threshold {key}={n}: '{key}' exists with "
                + (f"pass_threshold {stored}" if stored is not None else
                   "no pass_threshold")
                + "; an import does not change a criterion's threshold (set it in "
                "the rubric, or pass the stored one)",
            )
        else:
            info[key]["pass_threshold"] = n


def _new_criterion(
    key: str,
    line: int,
    st: _State,
    scales: Mapping[str, ScaleSpec],
    thresholds: Mapping[str, int],
    problems: _Problems,
    criteria: dict[str, _CriterionView],
    new_criteria: dict[str, ScaleSpec],
    info: dict[str, dict[str, Any]],
) -> None:
    """A criterion the import creates: its scale stated or inferred, its threshold, and the
    rubric's own rules."""
    if key in scales:
        spec = scales[key]
        how = "stated (--scale)"
    else:
        inferred = _infer_scale(
            key, st.values_by_criterion[key], key in st.pairwise_criteria
        )
        if inferred.spec is None:
            problems.add(line, "criterion", inferred.reason)
            return
        spec = inferred.spec
        how = f"inferred: {inferred.reason}"
    if key in thresholds:
        n = thresholds[key]
        if spec.scale != "ordinal":
            problems.add(line, "criterion", _threshold_not_ordinal(key, n, spec.scale))
            return
        if not 1 <= n <= len(spec.points):
            problems.add(
                line,
                "criterion",
                f"--pass-threshold {key}={n}: {n} is outside the scale "
                f"{spec.points[0]}..{spec.points[-1]} of '{key}'",
            )
            return
        spec = replace(spec, pass_threshold=n)
    # The rubric's own rules decide whether the criterion may be created.
    refused = criterion_import_problems(spec.criterion_fields(key))
    if refused:
        for message in refused:
            problems.add(line, "criterion", message)
        return
    new_criteria[key] = spec
    info[key] = {"scale": spec.describe(), "how": how}
    if spec.pass_threshold is not None:
        info[key]["pass_threshold"] = spec.pass_threshold
    values = (
        list(PAIRWISE_VALUES)
        if spec.scale == "pairwise"
        else (["pass", "fail"] if spec.scale == "binary" else list(spec.points))
    )
    criteria[key] = _CriterionView(
        key, spec.scale, values, None, criterion_unsaved(spec.criterion_fields(key))
    )


def _ratings_check(
    ratings: list[_Rating], criteria: Mapping[str, _CriterionView], problems: _Problems,
) -> None:
    """Every rating's value against its criterion (and, for human labels, the annotations
    app's label rule), and no subject rated twice by the same rater."""
    seen: dict[tuple[Any, ...], tuple[int, str]] = {}
    for r in ratings:
        view = criteria[r.criterion]
        continuous = r.value_type == "continuous"
        if _unparseable(r):
            pass  # no value to check: stored unscored
        elif continuous:
            if view.scale != "ordinal":
                hint = (
                    ": a judge's score on an interval criterion is its value, leave value_type "
                    "empty"
                    if view.scale == "interval"
                    else ""
                )
                problems.add(
                    r.line,
                    "value_type",
                    "continuous scores are only allowed on "
                    f"ordinal criteria ('{r.criterion}' is {view.scale}{hint})",
                )
            elif as_number(r.raw_value) is None:
                problems.add(r.line, "value", f"{r.raw_value!r} is not a finite number")
            elif (why := _probability_problem(r, view, _continuous_text(r.raw_value))):
                problems.add(r.line, "probability", why)
        elif (canon := view.canonical(r.raw_value)) is None:
            problems.add(r.line, "value", _not_a_value(r, view))
        elif r.kind == "judge" and (why := _probability_problem(r, view, canon)) is not None:
            problems.add(r.line, "probability", why)
        elif r.kind == "human" and view.model is not None:
            # The annotations app's label rule (values, severity only on failures) applies to
            # imported labels exactly as to submitted ones.
            try:
                annotation_import_clean(
                    criterion=view.model, value=canon, severity=r.severity, field=r.criterion
                )
            except ValidationFailed as exc:
                problems.add(r.line, _label_field(exc, r.criterion), exc.message)
        subject = r.output if r.output is not None else r.pair
        dedupe = (
            r.kind,
            r.rater,
            r.judge_version,
            r.criterion,
            subject,
            r.order if r.kind == "judge" else "",
            r.sample,
        )
        if dedupe in seen:
            problems.add(
                r.line,
                "rater_id",
                f"duplicate rating of this subject for criterion "
                f"'{r.criterion}' by '{r.rater}' (first on line {seen[dedupe][0]})",
            )
        else:
            seen[dedupe] = (r.line, r.raw_value)
    problems.raise_if_any()


def _plan_notes(
    st: _State,
    criteria: Mapping[str, _CriterionView],
    info: Mapping[str, dict[str, Any]],
    warnings: list[str],
) -> list[str]:
    """What the import says it did (notes), and the warnings it adds to ``warnings``."""
    ratings = st.ratings
    notes: list[str] = []
    for key, entry in info.items():
        if entry["how"] != "existing":
            notes.append(f"criterion '{key}': {entry['scale']} ({entry['how']})")
    if st.position_candidate_rows:
        notes.append(
            f"{st.position_candidate_rows} pairwise rows have no candidate_a/candidate_b: the "
            f"positions stand in as candidates '{POSITION_CANDIDATES[0]}' and "
            f"'{POSITION_CANDIDATES[1]}' (per-candidate figures then describe positions)"
        )
    for col, line in st.ignored_columns.items():
        warnings.append(
            f"column '{col}' (first on line {line}) is not a column of the format and was "
            f"ignored; name it meta.{col} to keep it as item metadata or rater.{col} for an "
            "attribute of the rater"
        )
    for key, line in st.judge_attribute_keys.items():
        warnings.append(
            f"rater.{key} (first on line {line}) on judge rows was ignored: rater attributes are "
            "kept for human raters only (a judge's identity is its name and version)"
        )
    warnings.extend(
        order_consistency_warnings(
            ratings=[
                PairwiseVote(
                    kind=r.kind,
                    rater=r.rater,
                    version=r.judge_version,
                    criterion=r.criterion,
                    pair=r.pair,
                    order=r.order,
                    value=_pair_value(criteria[r.criterion], r),
                    convention=r.convention,
                )
                for r in ratings
                if r.pair is not None and not _unparseable(r)
            ]
        )
    )
    unparseable = sum(1 for r in ratings if _unparseable(r))
    if unparseable:
        notes.append(
            f"{unparseable} judge rating{'s' if unparseable != 1 else ''} with an empty value: "
            "stored as unparseable verdicts (unscored, except that a pair rated in both orders "
            "keeps the order that parsed as its verdict; the orders table counts them, as a "
            "miss or a tie where it says so, beside the figures on parseable verdicts)"
        )
    return notes


def _threshold_not_ordinal(key: str, n: int, scale: str) -> str:
    return (
        f"--pass-threshold {key}={n}: '{key}' is {scale}; only an ordinal criterion has a "
        "pass threshold"
    )


def _unparseable(r: _Rating) -> bool:
    """A judge rating whose value is empty: the judge's answer could not be read."""
    return r.kind == "judge" and r.raw_value == ""


def _pair_value(view: _CriterionView, r: _Rating) -> str:
    """A pairwise rating's value in terms of its `pair` (A = pair[0] is better)."""
    value = view.canonical(r.raw_value)
    assert value is not None
    return _SWAP[value] if r.flip else value


def _interval_range_check(
    line: int, key: str, crit: Criterion, spec: ScaleSpec, problems: _Problems
) -> None:
    """--scale KEY=interval:MIN-MAX on an existing interval criterion must state its range."""
    if spec.bounds is not None and spec.bounds != interval_bounds(crit):
        problems.add(
            line,
            "criterion",
            f"'{key}' exists as {ScaleSpec('interval', bounds=interval_bounds(crit)).describe()}; "
            f"--scale says {spec.describe()}",
        )


def _not_a_value(r: _Rating, view: _CriterionView) -> str:
    if view.scale == "interval":
        assert view.model is not None
        try:
            interval_value(view.model, r.raw_value)
        except ValueError as exc:
            reason = str(exc)
        else:  # pragma: no cover - canonical() accepted it
            reason = "not a value"
        return f"{r.raw_value!r} is not a value of the interval criterion '{r.criterion}': {reason}"
    message = (
        f"{r.raw_value!r} is not a value of the {view.scale} "
        f"criterion '{r.criterion}' (allowed: {', '.join(view.values)})"
    )
    num = as_number(r.raw_value)
    if view.scale == "ordinal" and num is not None and not float(num).is_integer():
        if r.kind == "judge":
            message += "; a judge's continuous scores need value_type=continuous"
        else:
            message += (
                "; continuous human scores (such as a mean over raters) import under an "
                "interval criterion: give them a criterion key of their own with --scale "
                "KEY=interval:MIN-MAX"
            )
    return message


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def _continuous_text(raw: str) -> str:
    return repr(float(raw))


def ratings_import(
    *,
    study: Study,
    rows: Iterable[tuple[int, Mapping[str, Any]]],
    scales: Mapping[str, ScaleSpec] | None = None,
    families: Mapping[str, str] | None = None,
    created_by: Any = None,
    pairwise_values: str | None = None,
    texts: Iterable[tuple[int, Mapping[str, Any]]] | None = None,
    dry_run: bool = False,
    pass_thresholds: Mapping[str, int] | None = None,
) -> ImportSummary:
    """Validate all rows, then write them in one transaction (all-or-nothing, idempotent).

    `scales` gives the scale of criteria that do not exist yet (otherwise inferred from the
    values where that cannot re-type them, and stated in the summary); `families` maps
    candidate and judge names to a model family (for the self-preference audit);
    `pairwise_values` ("outputs" | "presented") what pairwise values refer to where the rows
    do not say; `texts` the rows of a texts file (JSON Lines keyed by item_id / output_id);
    `pass_thresholds` the first passing point of ordinal criteria (see `ratings_validate`).
    `dry_run` writes everything and rolls it back, so the summary says what an import would
    do and nothing stays. Every table is written by its owning app's import services
    (studies, judges, annotations), which also hold the rules the rows obey.
    """
    plan = ratings_validate(
        study=study,
        rows=rows,
        scales=scales,
        pairwise_values=pairwise_values,
        texts=texts,
        pass_thresholds=pass_thresholds,
    )
    families = dict(families or {})
    summary = ImportSummary(
        rows=len(plan.ratings),
        criteria=plan.criteria_info,
        notes=list(plan.notes),
        warnings=list(plan.warnings),
        dry_run=dry_run,
    )
    with transaction.atomic():
        _write(study, plan, families, created_by, summary)
        if dry_run:
            # Everything was checked by the writing services too; nothing may stay.
            transaction.set_rollback(True)
    return summary


def _write(
    study: Study,
    plan: _Plan,
    families: Mapping[str, str],
    created_by: Any,
    summary: ImportSummary,
) -> None:
    crit_by_key = _write_criteria(study, plan, summary, created_by)
    item_ids, counts, n_dims = studies_imports.items_import_bulk(study=study, items=plan.items)
    _bump(summary, "item", counts)
    if n_dims:
        summary.bump("created", "stratum_dimension", n_dims)
    cand_ids, counts = studies_imports.candidates_import_bulk(
        study=study, names={cand for (_, cand) in plan.outputs}, families=families
    )
    summary.bump("created", "candidate", counts.created)
    if counts.updated:
        summary.bump("updated", "candidate", counts.updated)
    by_ids, counts = studies_imports.outputs_import_bulk(
        study=study,
        outputs={
            (item_ids[item], cand_ids[cand]): spec for (item, cand), spec in plan.outputs.items()
        },
    )
    summary.bump("created", "output", counts.created)
    summary.bump("updated", "output", counts.updated)
    output_ids = {
        (item, cand): by_ids[(item_ids[item], cand_ids[cand])] for (item, cand) in plan.outputs
    }
    comparison_of: dict[tuple[tuple[str, str], tuple[str, str]], tuple[int, bool]] = {}
    if plan.pairs:
        stored, counts = studies_imports.comparisons_import_bulk(
            study=study,
            pairs=[(item_ids[a[0]], output_ids[a], output_ids[b]) for a, b in plan.pairs],
        )
        summary.bump("created", "comparison", counts.created)
        comparison_of = {
            pair: stored[(output_ids[pair[0]], output_ids[pair[1]])] for pair in plan.pairs
        }
    raters = list({r.rater: None for r in plan.ratings if r.kind == "human"})
    user_ids, n_users, n_members = studies_imports.annotator_accounts_import(
        study=study, rater_ids=raters
    )
    summary.bump("created", "user", n_users)
    summary.bump("created", "membership", n_members)
    if plan.rater_attributes:
        n_attr = studies_imports.annotator_attributes_import(
            study=study,
            attributes={user_ids[r]: attrs for r, attrs in plan.rater_attributes.items() if attrs},
        )
        if n_attr:
            summary.bump("updated", "rater_attributes", n_attr)
    version_ids = _write_judges(study, plan, families, created_by, summary)
    _write_ratings(plan, crit_by_key, output_ids, comparison_of, user_ids, version_ids, summary)


def _bump(summary: ImportSummary, model: str, counts: studies_imports.Counts) -> None:
    summary.bump("created", model, counts.created)
    summary.bump("updated", model, counts.updated)
    if counts.unchanged:
        summary.bump("unchanged", model, counts.unchanged)


def _write_criteria(
    study: Study, plan: _Plan, summary: ImportSummary, created_by: Any
) -> dict[str, Criterion]:
    out = {k: v.existing for k, v in plan.criteria.items() if v.existing is not None}
    created, rubric = studies_imports.criteria_import_create(
        study=study,
        specs=[spec.criterion_fields(key) for key, spec in plan.new_criteria.items()],
        created_by=created_by,
    )
    for key, spec in plan.new_criteria.items():
        out[key] = created[key]
        assert rubric is not None
        summary.criteria_created.append(key)
        summary.criteria[key] = {**summary.criteria.get(key, {}), "rubric": f"v{rubric.version}"}
        summary.notes.append(
            f"criterion '{key}' created in rubric v{rubric.version} as {spec.describe()}"
        )
        summary.bump("created", "criterion")
    return out


def _write_judges(
    study: Study,
    plan: _Plan,
    families: Mapping[str, str],
    created_by: Any,
    summary: ImportSummary,
) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for (name, label), value_type in plan.judge_value_types.items():
        outcome = judge_imported_version_get_or_create(
            study=study,
            name=name,
            label=label,
            value_type=value_type,
            model_family=families.get(name, ""),
            created_by=created_by,
        )
        if outcome.judge_created:
            summary.bump("created", "judge")
        if outcome.version_created:
            summary.bump("created", "judge_version")
        out[(name, label)] = outcome.version.pk
    return out


def _write_ratings(
    plan: _Plan,
    crit_by_key: Mapping[str, Criterion],
    output_ids: Mapping[tuple[str, str], int],
    comparison_of: Mapping[tuple[tuple[str, str], tuple[str, str]], tuple[int, bool]],
    user_ids: Mapping[str, int],
    version_ids: Mapping[tuple[str, str], int],
    summary: ImportSummary,
) -> None:
    # Canonical values per (rater, criterion, subject); judges may give both orders of a pair.
    ann: dict[tuple[int, int, str, int], CleanLabel] = {}
    ver: dict[tuple[int, int, str, int], list[ImportedSample]] = {}
    ver_crit: dict[tuple[int, int, str, int], tuple[Criterion, bool]] = {}
    for r in plan.ratings:
        view = plan.criteria[r.criterion]
        crit = crit_by_key[r.criterion]
        continuous = r.value_type == "continuous"
        value: str | None
        if _unparseable(r):
            value = ""  # unparseable: no value to canonicalise or swap
        else:
            value = _continuous_text(r.raw_value) if continuous else view.canonical(r.raw_value)
        assert value is not None
        if r.pair is not None:
            cid, reversed_ = comparison_of[r.pair]
            # In terms of the file's first orientation of the pair (r.flip), then of the
            # comparison as stored (reversed_ when an earlier import stored it the other way).
            value = _SWAP[value] if value and r.flip != reversed_ else value
            subject = ("comparison", cid)
        else:
            assert r.output is not None
            subject = ("output", output_ids[r.output])
        if r.kind == "human":
            # Validated in ratings_validate; this gives the stored form (value_num).
            ann[(user_ids[r.rater], crit.pk, *subject)] = annotation_import_clean(
                criterion=crit, value=value, severity=r.severity, field=r.criterion
            )
        else:
            key = (version_ids[(r.rater, r.judge_version)], crit.pk, *subject)
            calls = ver.setdefault(key, [])
            ver_crit[key] = (crit, continuous)
            # The order key records which output the judge saw first, in canonical terms.
            prob = r.probability
            if r.pair is not None:
                cid, reversed_ = comparison_of[r.pair]
                order = "ab" if (r.order == "ab") != reversed_ else "ba"
                # P(A better) turns with the value when A and B are swapped.
                if prob is not None and r.flip != reversed_:
                    prob = 1.0 - prob
            else:
                order = ""
            calls.append(ImportedSample(order=order, sample=r.sample, value=value,
                                        probability=prob))
    counts = annotations_import_bulk(labels=ann)
    if ann:
        summary.bump("created", "annotation", counts.created)
        summary.bump("updated", "annotation", counts.updated)
        if counts.unchanged:
            summary.bump("unchanged", "annotation", counts.unchanged)
    vcounts = verdicts_import_bulk(
        verdicts={
            key: VerdictImport(criterion=crit, continuous=continuous, samples=tuple(calls))
            for key, calls in ver.items()
            for crit, continuous in (ver_crit[key],)
        }
    )
    if ver:
        summary.bump("created", "verdict", vcounts.created)
        summary.bump("updated", "verdict", vcounts.updated)
        if vcounts.unchanged:
            summary.bump("unchanged", "verdict", vcounts.unchanged)
