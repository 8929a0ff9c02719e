"""What a statistic knows of a criterion and of a judge version: the evidence read model's
descriptors (`calibration.frames.RatingData.criteria` / `.judges`) and, unchanged, what a report
stores of them (`reports.agreement.results`), so the two cannot drift apart.

Pure module: no Django, no numpy (reports/results.py, which imports it, imports without
settings).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Metadata of a dataclass field whose key the stored JSON leaves out when it is None
# (reports.results reads it; kept here so that the refs need not import reports).
OMIT_IF_NONE = "omit_if_none"


@dataclass(frozen=True)
class CriterionRef:
    """A criterion as it was read (the rubric may change after a report)."""

    id: int
    key: str
    name: str
    scale: str
    # Stored values in scale order (ordinal "1".."k", categorical labels, pass/fail, A/B/tie).
    values: tuple[str, ...]
    rubric_version: int
    # Interval criteria only: the closed range (min, max) of a score and the pass threshold
    # (None: no pass/fail reading); absent from a stored report for the other scales.
    bounds: tuple[float, ...] | None = field(default=None, metadata={OMIT_IF_NONE: True})
    pass_threshold: float | None = field(default=None, metadata={OMIT_IF_NONE: True})


def judge_display(judge: str, version: int, label: str) -> str:
    """A judge version's name in reports: "name label" for an imported judge's labelled
    version, else "name vN". A label the name already ends with in parentheses is not
    repeated: the demo's "sim-judge (simulated)" labelled "simulated" is not "sim-judge
    (simulated) simulated". Only that exact form: a label that is merely part of the name
    ("gpt-4" of "gpt-4-0613") is kept, so two labelled versions never share a name."""
    if not label:
        return f"{judge} v{version}"
    if judge.casefold().endswith(f"({label.casefold()})"):
        return judge
    return f"{judge} {label}"


@dataclass(frozen=True)
class JudgeRef:
    """A judge version as it was read. `display` is stored (not derived on reading) so that a
    stored report keeps the name it was computed under."""

    id: int
    judge: str
    version: int
    label: str
    display: str
    model_family: str
    value_type: str  # "label" | "continuous"
    kind: str

    @classmethod
    def of(
        cls, id: int, judge: str, version: int, label: str, model_family: str,
        value_type: str, kind: str,
    ) -> JudgeRef:
        """The ref with its display name (`judge_display`)."""
        display = judge_display(judge, version, label)
        return cls(id=id, judge=judge, version=version, label=label, display=display,
                   model_family=model_family, value_type=value_type, kind=kind)


__all__ = ["OMIT_IF_NONE", "CriterionRef", "JudgeRef", "judge_display"]
