"""Reading a study file (docs/study-spec.md) from text: JSON or YAML, strictly. Pure: no Django.

The `import_study` command and the "New study" page read files through `study_file_parse`, so
both refuse the same things with the same messages: NaN/Infinity (and numbers such as 1e400
that overflow), NUL characters, lone surrogates and duplicate keys, with the line (syntax
errors, YAML duplicates) or the path of the value. Validation of the content is
`studies.spec.study_file_validate`.
"""

from __future__ import annotations

from typing import Any

import yaml

from reviewhub.api import strictjson
from reviewhub.errors import ValidationFailed

# Larger than any rubric, strata scheme and plan; the page's upload limit is the same.
MAX_STUDY_FILE_BYTES = 1024 * 1024


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


def _refused(where: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"{where}: {message}" if where else message,
                            details={"errors": [{"path": where or "$", "message": message}]})


def study_file_parse(text: str, *, name: str = "") -> Any:
    """Parse a study file's text: JSON when `name` ends in .json, else YAML (which reads JSON
    too). Raises ValidationFailed whose details name the line or the JSON path."""
    if not text.strip():
        raise _refused("", f"{name or 'the file'} is empty")
    if name.lower().endswith(".json"):
        try:
            return strictjson.loads(text)
        except strictjson.StrictJSONError as exc:
            if exc.line is not None:
                raise _refused(f"line {exc.line}, column {exc.column}", exc.reason) from exc
            raise _refused(exc.path, exc.reason) from exc
    try:
        doc = yaml.load(text, Loader=_StrictYamlLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise _refused(where, str(problem)) from exc
    try:
        strictjson.check_value(doc)
    except strictjson.StrictJSONError as exc:
        raise _refused(exc.path, exc.reason) from exc
    return doc
