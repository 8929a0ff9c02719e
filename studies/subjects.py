"""What a rating is about: one output, or one comparison of two outputs (`SubjectRef`).

Verdicts, annotations, queue entries, gold labels and adjudications each point at a subject
through two nullable foreign keys, ``output_id`` and ``comparison_id``, exactly one of which is
set. The code passes subjects around in a few encodings, each converted here and nowhere else:

- a `SubjectRef` (``SubjectRef.output(7)``): the typed value, hashable and ordered;
- the column that holds the id (``ref.field``: ``"output_id"`` or ``"comparison_id"``), and a
  `Q` that selects rows about some subjects (``subjects_q``);
- one integer (``ref.code``): ``2 * id`` for an output, ``2 * id + 1`` for a comparison, which
  lets the evidence frames (calibration/frames/) hold a subject in one int64 column. Columns
  of codes are built and split by `subject_codes` / `subject_split` (vectorised, numpy) and in
  SQL by `subject_code_expr`, so the hot paths keep their raw integers;
- short tuples ``("o" | "c", id)`` and long ones ``("output" | "comparison", id)``, used as
  keys (``ref.short``, ``ref.pair``).

Plain Python and numpy: Django is imported only inside the two functions that build ORM
objects, so the module imports without settings (tests/test_pure_imports.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from django.db.models import Q

__all__ = [
    "COMPARISON",
    "OUTPUT",
    "SubjectKind",
    "SubjectRef",
    "comparison_codes",
    "output_codes",
    "subject_code_expr",
    "subject_codes",
    "subject_field",
    "subject_split",
    "subjects_q",
]

OUTPUT: Literal["output"] = "output"
COMPARISON: Literal["comparison"] = "comparison"
SubjectKind = Literal["output", "comparison"]

_FIELD = {OUTPUT: "output_id", COMPARISON: "comparison_id"}
_SHORT = {OUTPUT: "o", COMPARISON: "c"}
_FROM_SHORT: dict[str, SubjectKind] = {"o": OUTPUT, "c": COMPARISON}


def subject_field(kind: str) -> str:
    """The foreign-key column naming a subject of `kind` ("output" / "comparison", or the
    short "o" / "c")."""
    return _FIELD[_FROM_SHORT.get(kind, kind)]


@dataclass(frozen=True, slots=True, order=True)
class SubjectRef:
    """One subject: an output or a comparison, by id."""

    kind: SubjectKind
    id: int

    def __post_init__(self) -> None:
        if self.kind not in _FIELD:
            raise ValueError(f"unknown subject kind {self.kind!r}")
        if isinstance(self.id, bool) or not isinstance(self.id, int | np.integer):
            raise TypeError(f"a subject id is an integer, not {self.id!r}")
        object.__setattr__(self, "id", int(self.id))

    @classmethod
    def output(cls, output_id: int) -> SubjectRef:
        return cls(OUTPUT, output_id)

    @classmethod
    def comparison(cls, comparison_id: int) -> SubjectRef:
        return cls(COMPARISON, comparison_id)

    @classmethod
    def of(cls, output_id: int | None, comparison_id: int | None) -> SubjectRef:
        """The subject of a row from its two foreign keys (exactly one is set)."""
        if (output_id is None) == (comparison_id is None):
            raise ValueError("exactly one of output_id and comparison_id must be set, not "
                             f"{output_id!r} and {comparison_id!r}")
        if output_id is not None:
            return cls(OUTPUT, output_id)
        assert comparison_id is not None
        return cls(COMPARISON, comparison_id)

    @property
    def is_output(self) -> bool:
        return self.kind == OUTPUT

    @property
    def field(self) -> str:
        """The column holding this subject's id: "output_id" or "comparison_id"."""
        return _FIELD[self.kind]

    def fields(self) -> dict[str, int]:
        """``{field: id}``: keyword arguments for a filter or a create."""
        return {self.field: self.id}

    def q(self, prefix: str = "") -> Q:
        """A `Q` selecting rows about this subject (`prefix`: a relation path ending in "__")."""
        from django.db.models import Q

        return Q(**{prefix + self.field: self.id})

    # --- the integer code (2n / 2n + 1) ---

    @property
    def code(self) -> int:
        return 2 * self.id + (0 if self.kind == OUTPUT else 1)

    @classmethod
    def from_code(cls, code: int) -> SubjectRef:
        code = int(code)
        if code < 0:
            raise ValueError(f"a subject code is not negative, not {code}")
        return cls(OUTPUT if code % 2 == 0 else COMPARISON, code // 2)

    # --- the tuples ---

    @property
    def short(self) -> tuple[str, int]:
        """``("o" | "c", id)``."""
        return (_SHORT[self.kind], self.id)

    @classmethod
    def from_short(cls, pair: tuple[str, int]) -> SubjectRef:
        letter, sid = pair
        if letter not in _FROM_SHORT:
            raise ValueError(f"unknown subject letter {letter!r}")
        return cls(_FROM_SHORT[letter], sid)

    @property
    def pair(self) -> tuple[str, int]:
        """``("output" | "comparison", id)``."""
        return (self.kind, self.id)

    @classmethod
    def from_pair(cls, pair: tuple[str, int]) -> SubjectRef:
        kind, sid = pair
        if kind not in _FIELD:
            raise ValueError(f"unknown subject kind {kind!r}")
        return cls(kind, sid)  # type: ignore[arg-type]


def subjects_q(refs: Iterable[SubjectRef], prefix: str = "") -> Q:
    """A `Q` selecting rows about any of `refs` (one ``IN`` per kind); matches nothing when
    `refs` is empty."""
    from django.db.models import Q

    ids: dict[str, list[int]] = {OUTPUT: [], COMPARISON: []}
    for ref in refs:
        ids[ref.kind].append(ref.id)
    q = Q(pk__in=[])
    for kind, kind_ids in ids.items():
        if kind_ids:
            q |= Q(**{f"{prefix}{_FIELD[kind]}__in": kind_ids})
    return q


def subject_code_expr(prefix: str = "") -> Any:
    """The subject code of each row as an SQL expression (for `annotate`)."""
    from django.db.models import F, IntegerField
    from django.db.models.functions import Coalesce

    return Coalesce(F(f"{prefix}output_id") * 2, F(f"{prefix}comparison_id") * 2 + 1,
                    output_field=IntegerField())


# --- vectorised codes --------------------------------------------------------------------------

def _kinds_to_bool(kinds: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    arr = np.asarray(kinds)
    if arr.dtype.kind in "US" or arr.dtype == object:
        out = np.isin(arr, [COMPARISON, "c"])
        if not np.isin(arr, [OUTPUT, COMPARISON, "o", "c"]).all():
            raise ValueError("subject kinds are 'output' / 'comparison' (or 'o' / 'c')")
        return out
    return arr.astype(bool)


def subject_codes(kinds: npt.ArrayLike, ids: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """The codes of many subjects at once. `kinds`: True (or 1, "comparison", "c") for a
    comparison, False (0, "output", "o") for an output; `ids`: their ids."""
    is_comparison = _kinds_to_bool(kinds)
    id_arr = np.asarray(ids, dtype="int64")
    return id_arr * 2 + is_comparison.astype("int64")


def output_codes(ids: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """The codes of outputs with these ids."""
    return np.asarray(ids, dtype="int64") * 2


def comparison_codes(ids: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """The codes of comparisons with these ids."""
    return np.asarray(ids, dtype="int64") * 2 + 1


def subject_split(
    codes: npt.ArrayLike,
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    """(is_comparison, id) arrays of many codes at once: the inverse of `subject_codes`."""
    arr = np.asarray(codes, dtype="int64")
    return (arr % 2 == 1), arr // 2
