"""Strict JSON: the one decoder for every JSON document a client sends (REST bodies, ingest rows,
study files).

Python's `json` accepts things that the rest of ReviewHub cannot hold or would misread:

- `NaN`, `Infinity`, `-Infinity` and numbers that overflow a double (`1e400` becomes `inf`):
  not JSON (RFC 8259), rejected by PostgreSQL jsonb and written back by `json.dumps` as the
  invalid literal `Infinity`;
- a NUL character (`\\u0000`): PostgreSQL text and jsonb cannot store it;
- a lone surrogate (`\\ud800`): not Unicode, so it cannot be encoded to UTF-8 for the database;
- a duplicate key (`{"a": 1, "a": 2}`): the last one silently wins, so what a client meant and
  what is stored can differ.

`loads` refuses all of them (keys included) with a `StrictJSONError` that names the JSON path
(`$` is the document, then `criteria[0].name`, the style of every other validation error).
`decoder_fast` is for the ingest hot loop: its hooks refuse non-finite numbers and duplicate
keys as they are parsed (naming the key, without a path) and leave the character checks to the
caller, which already does them per field.

Pure Python: no Django import, so the CLI readers and the ingest parser use it as they are.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["StrictJSONError", "check_text", "check_value", "decoder_fast", "json_path", "loads"]

# NUL, and the surrogate range (a well-formed pair is already one code point after decoding).
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_\-]+\Z")
MAX_DEPTH = 200


class StrictJSONError(ValueError):
    """A JSON document that parsed but holds something ReviewHub refuses (or did not parse).

    `path` locates the value (`$` for the whole document); `reason` is the message without
    the path; `line`/`column` are set for syntax errors.
    """

    def __init__(self, reason: str, *, path: str = "$", line: int | None = None,
                 column: int | None = None) -> None:
        self.reason = reason
        self.path = path
        self.line = line
        self.column = column
        where = f"at {path}: " if path != "$" else ""
        super().__init__(f"{where}{reason}")


@dataclass(frozen=True)
class _NonFinite:
    """Stands in for a non-finite number until the walk knows its path."""

    literal: str


class _DuplicateKeyDict(dict[str, Any]):
    """An object that had a repeated key; `duplicate` is the first one repeated."""

    duplicate: str = ""


def json_path(parts: tuple[str | int, ...]) -> str:
    """`("criteria", 0, "name")` -> `criteria[0].name`; `(0,)` -> `$[0]`; `()` -> `$`."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return ("$" + out if out.startswith("[") else out) or "$"


def check_text(value: str) -> str | None:
    """Why a string cannot be stored (NUL, lone surrogate), or None when it can."""
    match = _BAD_CHARS.search(value)
    if match is None:
        return None
    char, pos = match.group(), match.start() + 1
    if char == "\x00":
        return f"contains a NUL character (\\u0000) at position {pos}, which cannot be stored"
    return (f"contains a lone surrogate (\\u{ord(char):04x}) at position {pos}, which is not "
            "valid Unicode")


def _pairs_to_dict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) == len(pairs):
        return result
    seen: set[str] = set()
    duplicate = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
    marked = _DuplicateKeyDict(result)
    marked.duplicate = duplicate
    return marked


_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs_to_dict,
    parse_float=lambda s: _NonFinite(s) if math.isinf(f := float(s)) else f,
    parse_constant=_NonFinite,
)


def _syntax_error(exc: Exception) -> StrictJSONError:
    if isinstance(exc, json.JSONDecodeError):
        return StrictJSONError(f"not valid JSON: {exc.msg} (line {exc.lineno}, column "
                               f"{exc.colno})", line=exc.lineno, column=exc.colno)
    if isinstance(exc, RecursionError):
        return StrictJSONError("not valid JSON: nested too deeply")
    # int() refuses integers of more than sys.get_int_max_str_digits() digits.
    return StrictJSONError(f"not valid JSON: {exc}")


def _walk(value: Any) -> None:
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            reason = check_text(node)
            if reason:
                raise StrictJSONError(f"the string {reason}", path=json_path(path))
        elif isinstance(node, _NonFinite) or (isinstance(node, float)
                                               and not math.isfinite(node)):
            literal = node.literal if isinstance(node, _NonFinite) else repr(node)
            raise StrictJSONError(
                f"{literal} is not a finite number; JSON has no NaN or Infinity and "
                "numbers must fit a double", path=json_path(path))
        elif isinstance(node, dict):
            if len(path) > MAX_DEPTH:
                raise StrictJSONError(f"nested more than {MAX_DEPTH} levels deep",
                                      path=json_path(path))
            if isinstance(node, _DuplicateKeyDict):
                raise StrictJSONError(f"duplicate key {json.dumps(node.duplicate)} in one "
                                      "object", path=json_path(path))
            children = []
            for key, child in node.items():
                reason = check_text(key) if isinstance(key, str) else None
                if reason:
                    raise StrictJSONError(f"the key {json.dumps(key)} {reason}",
                                          path=json_path(path))
                children.append((child, (*path, key if isinstance(key, str) else str(key))))
            # Reversed so that the first problem in document order is the one reported.
            stack.extend(reversed(children))
        elif isinstance(node, list):
            if len(path) > MAX_DEPTH:
                raise StrictJSONError(f"nested more than {MAX_DEPTH} levels deep",
                                      path=json_path(path))
            stack.extend(reversed([(child, (*path, i)) for i, child in enumerate(node)]))


def check_value(value: Any) -> None:
    """The checks of `loads` on an already-parsed value (a YAML document, say): NUL and lone
    surrogates in strings and keys, non-finite floats. Raises StrictJSONError."""
    _walk(value)


def loads(text: str | bytes) -> Any:
    """Parse a JSON document strictly (see the module docstring) or raise StrictJSONError."""
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJSONError(f"not valid UTF-8 (byte {exc.start + 1})") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise _syntax_error(exc) from None
    _walk(value)
    return value


def _raise_non_finite(literal: str) -> Any:
    raise ValueError(f"{literal} is not a finite number (JSON has no NaN or Infinity and "
                     "numbers must fit a double)")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        _raise_non_finite(literal)
    return value


def _pairs_no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        duplicate = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate key {json.dumps(duplicate)} in one object")
    return result


def decoder_fast(*, allow_nan_literals: bool = False) -> json.JSONDecoder:
    """A decoder whose hooks raise ValueError on a duplicate key, a number that overflows a
    double (1e400) and, unless `allow_nan_literals`, the literals NaN / Infinity.

    Strings are not checked: the caller checks NUL and surrogates itself (ingest does, per
    field, with the line number, and checks NaN / Infinity per field too, so that the error
    names the field: it passes `allow_nan_literals=True`). A number such as 1e400 has no
    literal to look for in the text, so it is refused here, where it is parsed, at no cost to
    the other numbers. `json.JSONDecodeError` still signals a syntax error.
    """
    if allow_nan_literals:
        return json.JSONDecoder(object_pairs_hook=_pairs_no_duplicates,
                                parse_float=_finite_float)
    return json.JSONDecoder(object_pairs_hook=_pairs_no_duplicates, parse_float=_finite_float,
                            parse_constant=_raise_non_finite)
