"""The texts file beside a ratings file: inputs, output texts and candidates keyed by id."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._ratings_read import ReadError
from ._ratings_rows import _State, _text

_TEXT_KEYS = frozenset(
    {
        "item_id",
        "output_id",
        "input",
        "item_input",
        "text",
        "output_text",
        "candidate",
        "output_a",
        "output_b",
        "candidate_a",
        "candidate_b",
    }
)
# Where a texts row names an output's candidate: (output column, candidate column).
_TEXT_CANDIDATE_KEYS = (
    ("output_id", "candidate"),
    ("output_a", "candidate_a"),
    ("output_b", "candidate_b"),
)


def _texts_read(
    texts: Iterable[tuple[int, Mapping[str, Any]]], st: _State
) -> list[tuple[int, Mapping[str, Any]]]:
    """Read the texts file once, before the ratings: the candidate of an output may come from
    it (a ``candidate`` key on the output's row, or ``candidate_a``/``candidate_b`` beside
    ``output_a``/``output_b``). One output named as two candidates in it is an error."""
    rows: list[tuple[int, Mapping[str, Any]]] = []
    try:
        for line, row in texts:
            rows.append((line, row))
            for out_key, cand_key in _TEXT_CANDIDATE_KEYS:
                out, cand = _text(row, out_key), _text(row, cand_key)
                if cand and not out:
                    st.problems.add(
                        line, out_key, f"a {cand_key} needs its {out_key}", where="texts line"
                    )
                if not out or not cand:
                    continue
                if len(cand) > 200:
                    st.problems.add(
                        line, cand_key, "candidate names are at most 200 characters",
                        where="texts line",
                    )
                    continue
                known = st.text_candidates.setdefault(out, (cand, line))
                if known[0] != cand:
                    st.problems.add(
                        line,
                        cand_key,
                        f"output '{out}' is candidate '{cand}' on line {line} of the texts file "
                        f"but '{known[0]}' on line {known[1]} of the texts file",
                        where="texts line",
                    )
    except ReadError as exc:
        field_name, _, message = exc.message.partition(":")
        st.problems.add(exc.line, field_name, message.strip(), where="texts line")
    return rows


def _apply_text(
    line: int, kind: str, ident: str, text: str, item: str, st: _State,
    given: dict[tuple[str, str], int],
) -> bool:
    """One text of the texts file onto its item or output; True when the ratings file does not
    name that item or output."""
    problems = st.problems
    entry: dict[str, Any] | None
    if kind == "item":
        entry = st.items.get(ident)
        slot = "input"
    else:
        out_key = st.output_ids.get(ident)
        if out_key is not None and item and out_key[0] != item:
            problems.add(
                line,
                "output_id",
                f"output '{ident}' is of item '{out_key[0]}' in the ratings file, "
                f"not '{item}'",
                where="texts line",
            )
            return False
        entry = st.outputs.get(out_key) if out_key is not None else None
        slot = "text"
    if entry is None:
        return True
    first = given.get((kind, ident))
    if first is not None and entry[slot] != text:
        problems.add(
            line,
            "output_id" if kind == "output" else "item_id",
            f"{kind} '{ident}' has another text on texts line {first}",
            where="texts line",
        )
    elif first is None and entry[slot] and entry[slot] != text:
        problems.add(
            line,
            "output_id" if kind == "output" else "item_id",
            f"{kind} '{ident}' has a different text in the ratings file",
            where="texts line",
        )
    else:
        entry[slot] = text
        given.setdefault((kind, ident), line)
    return False


def _apply_texts(
    texts: Iterable[tuple[int, Mapping[str, Any]]], st: _State, warnings: list[str]
) -> None:
    """Fill item inputs and output texts from a texts file (JSON Lines keyed by id).

    A text the ratings file also gives must be the same; ids the ratings do not name are
    counted and ignored (a release's texts file often covers more than the rated subset).
    """
    problems = st.problems
    unmatched = 0
    ignored: dict[str, int] = {}
    given: dict[tuple[str, str], int] = {}
    try:
        for line, row in texts:
            for key in row:
                if key not in _TEXT_KEYS:
                    ignored.setdefault(str(key), line)
            item, out = _text(row, "item_id"), _text(row, "output_id")
            item_input = _text(row, "input") or _text(row, "item_input")
            out_text = _text(row, "text") or _text(row, "output_text")
            if not item and not out:
                if _text(row, "output_a") or _text(row, "output_b"):
                    continue  # candidates of a pair's outputs only (read by _texts_read)
                problems.add(
                    line, "item_id", "each row needs item_id or output_id", where="texts line"
                )
                continue
            if item_input and not item:
                problems.add(line, "item_id", "an input needs its item_id", where="texts line")
            if out_text and not out:
                problems.add(line, "output_id", "a text needs its output_id", where="texts line")
            for kind, ident, text in (("item", item, item_input), ("output", out, out_text)):
                if ident and text and _apply_text(line, kind, ident, text, item, st, given):
                    unmatched += 1
    except ReadError as exc:  # a caller passing an unread file (read errors once)
        field_name, _, message = exc.message.partition(":")
        problems.add(exc.line, field_name, message.strip(), where="texts line")
    if unmatched:
        warnings.append(
            f"{unmatched} texts of the texts file name an item or output that is not in the "
            "ratings file; they were ignored"
        )
    for key, line in ignored.items():
        warnings.append(
            f"texts file: key '{key}' (first on line {line}) is not item_id, output_id, input, "
            "text or candidate and was ignored"
        )
