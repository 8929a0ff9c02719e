"""`manage.py import_study FILE`: create or update a study from a JSON or YAML file.

The format is documented in docs/study-spec.md (example: docs/examples/study.yaml). The import
is all or nothing and idempotent: re-running with the same file reports "unchanged" everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from reviewhub.api import strictjson
from reviewhub.errors import AppError
from studies.services import study_import


class _StrictYamlLoader(yaml.SafeLoader):
    """SafeLoader that refuses a repeated key (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults` merges; the keys given beside it win, by design
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
            except TypeError:
                continue  # unhashable: SafeLoader reports it below
            if repeated:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"duplicate key {key!r}",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_study_file(path: Path) -> Any:
    """Parse FILE as JSON (.json) or YAML (.yaml/.yml; anything else: JSON, then YAML).

    Strictly, as the REST API parses bodies: NaN/Infinity (and numbers such as 1e400 that
    overflow), NUL characters, lone surrogates and duplicate keys are refused with the line
    (syntax errors, YAML duplicates) or the path of the value.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"Cannot read {path}: {exc}") from exc
    if not text.strip():
        raise CommandError(f"{path} is empty.")
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            return strictjson.loads(text)
        except strictjson.StrictJSONError as exc:
            if exc.line is not None:
                raise CommandError(f"{path}: line {exc.line}, column {exc.column}: "
                                   f"{exc.reason}") from exc
            raise CommandError(f"{path}: {exc.path}: {exc.reason}") from exc
    try:
        doc = yaml.load(text, Loader=_StrictYamlLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise CommandError(f"{path}: {where}{problem}") from exc
    try:
        strictjson.check_value(doc)
    except strictjson.StrictJSONError as exc:
        raise CommandError(f"{path}: {exc.path}: {exc.reason}") from exc
    return doc


class Command(BaseCommand):
    help = "Create or update a study (fields, rubric, strata, plan, members) from a JSON/YAML file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--owner", help="Owner's username for a new study (unless the file "
                                            "sets study.owner).")
        parser.add_argument("--new-plan-version", action="store_true",
                            help="When the latest plan is locked and the file's plan differs, "
                                 "save the file's plan as the next version.")

    def handle(self, *args: Any, **options: Any) -> None:
        doc = load_study_file(options["file"])
        try:
            report = study_import(doc=doc, owner_username=options.get("owner"),
                                  allow_new_plan_version=options["new_plan_version"])
        except AppError as exc:
            lines = [exc.message]
            for err in (exc.details or {}).get("errors", []) if isinstance(exc.details,
                                                                           dict) else []:
                lines.append(f"  {err['path']}: {err['message']}")
            raise CommandError("\n".join([*lines, "Nothing was written."])) from exc
        for section, outcome, detail in report.lines:
            self.stdout.write(f"{section}: {outcome}" + (f" ({detail})" if detail else ""))
        summary = "changes applied" if report.changed else "nothing to change"
        self.stdout.write(self.style.SUCCESS(f"Study '{report.study.slug}': {summary}."))
