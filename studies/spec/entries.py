"""What the checks of a spec's keyed sections share: collecting their problems (raised at the
end unless the caller collects them) and the opening of each keyed entry's check (a rubric
criterion, a strata dimension): an object, no unknown field, a slug key, a label to name it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from reviewhub.errors import Problems
from studies.spec.common import join, slug_problem


@contextmanager
def problems_of(problems: Problems | None, what: str) -> Iterator[Problems]:
    """The collector to check into: the caller's, or one of its own that raises
    ValidationFailed (naming `what`) when the block ends with problems in it."""
    own = problems is None
    collector = problems if problems is not None else Problems()
    yield collector
    if own:
        collector.raise_if_any(what)


@dataclass(frozen=True)
class EntryCheck:
    """One keyed entry under check: its problems are said at `path`, prefixed by `label`."""

    key: Any
    path: str
    problems: Problems
    label: str
    # How many problems there were before the entry was checked.
    start: int

    def bad(self, field_name: str, message: str) -> None:
        self.problems.add(join(self.path, field_name), f"{self.label}: {message}")

    def failed(self) -> bool:
        """Whether checking the entry added a problem."""
        return len(self.problems.items) > self.start


def entry_open(raw: Any, path: str, problems: Problems, *, noun: str,
               fields: set[str]) -> EntryCheck | None:
    """The opening of a keyed entry's check: None (a problem said) when `raw` is no object;
    else its check, with unknown fields and a key that is no slug already refused."""
    if not isinstance(raw, Mapping):
        problems.add(path, "must be an object")
        return None
    key = raw.get("key")
    check = EntryCheck(key=key, path=path, problems=problems, start=len(problems.items),
                       label=f"{noun} '{key}'" if isinstance(key, str) and key else noun)
    for extra in sorted(set(raw) - fields):
        check.bad(extra, "unknown field")
    if (msg := slug_problem(key)) is not None:
        check.bad("key", f"key {msg}")
    return check


__all__ = ["EntryCheck", "entry_open", "problems_of"]
