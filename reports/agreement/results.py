"""The agreement report's typed, versioned result: frozen dataclasses read and written by the
result codec of `reports.results` (which also derives their JSON schema).

A snapshot's `result` column holds `to_json()` of one of these; readers (the API's exports,
the CLI, the audit pages) call `from_json`, which checks every field's type
and refuses an unknown `version`, so a reader never silently misreads a result written by
another version of the code. The JSON schema is derived from the same dataclasses
(`json_schema`), so it cannot drift from them.

Pure module: no Django, no numpy (a test imports it without settings).

Version 1 of the agreement result types every part of it: the top level, every cell's
identity, counts, coefficients (`Estimate`), human ceiling (`HumanCeiling`), alternative annotator
test (`AltTest`) and verdict, and the rows of the confusion, bias, ceiling, system and
disagreement tables. (The tables were first read as objects keyed by name; typing them changed
how the JSON is read, not the JSON.)

Version 2 adds the `correlation_levels` table (sample-, dataset- and system-level correlation
per judge version x criterion x stratum of ordinal criteria), the `orders` table (pairwise
verdicts in both presentation orders, per stratum) and, on nominal criteria, the
per-vote agreement coefficients in a cell's `metrics` and the pooled pair agreement of the
humans in the ceiling (`pooled_agreement`, `pooled_agreement_without_ties`). A version 1
result is still read: its new tables are empty and the new ceiling keys are None.

Version 3 adds agreement by rater group, present only in a report computed with the
`rater_groups` parameter (absent keys otherwise, read as None): `rater_group_members` (per
criterion, the attribute, each group's raters and the raters without the attribute) and
`rater_groups` (judge vs group, group vs group and within-group figures per criterion x
stratum). Versions 1 and 2 are still read (without them).

Version 4 adds, on nominal criteria, the judge against each of a rater group's votes in the
`judge_vs_group` rows' metrics (`agreement_per_vote`, `agreement_per_vote_without_ties`), and
the `by_candidate` table, present only in a report computed with the `by_candidate` parameter
(every cell metric per judge version x criterion x stratum x candidate). Versions 1 to 3 are
still read (without them: the key absent, read as None).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from calibration.refs import OMIT_IF_NONE, CriterionRef, JudgeRef
from reports.results import ResultFormatError, json_safe
from reports.stored_result import StoredResult, result_object

AGREEMENT_RESULT_VERSION = 4
# Versions `AgreementResult.from_json` reads: version 1 has no `correlation_levels` table (read
# as empty), and none of the per-vote keys (absent keys are None); versions 1 and 2 have no
# rater groups (None); versions 1 to 3 no `by_candidate` table (None).
AGREEMENT_READABLE_VERSIONS = (1, 2, 3, 4)
# Tables a version 1 result does not have.
_TABLES_SINCE_2 = ("correlation_levels", "orders")
# A key that the report writes only where it applies: absent from the JSON when None.
_OMIT: dict[str, Any] = {OMIT_IF_NONE: True}


@dataclass(frozen=True)
class Estimate:
    """A coefficient with its interval (null where it could not be computed) and its n."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    method: str
    warnings: tuple[str, ...]
    # Only tests report a p-value; the key is absent from the JSON of other estimates.
    p_value: float | None = field(default=None, metadata={OMIT_IF_NONE: True})


@dataclass(frozen=True)
class StratumRef:
    """A stratum: dimension "" and label "overall" is every subject."""

    dimension: str
    label: str


@dataclass(frozen=True, kw_only=True)
class RaterPair:
    """Cohen's kappa of two annotators (account ids) on the ``n`` subjects both rated."""

    a: int
    b: int
    kappa: float | None
    n: int


@dataclass(frozen=True, kw_only=True)
class HumanCeiling:
    """Human-human agreement on a cell's subjects: the ceiling a judge is held to.

    ``point`` is the mean pairwise kappa (``point_metric`` says so) or, when no pair of
    annotators shares enough subjects, Krippendorff's alpha; None (with ``n_pairs`` 0 and no
    ``pairwise_kappa_weights``) when fewer than two subjects have two ratings.
    """

    n_subjects: int
    n_items: int
    n_humans: int
    n_ratings: int
    level: str
    alpha: Estimate
    # Listed only while there are few pairs (reports.agreement.MAX_LISTED_PAIRS).
    pairs: tuple[RaterPair, ...] | None = field(default=None, metadata=_OMIT)
    pairwise_kappa: float | None
    pairwise_kappa_weights: str | None = field(default=None, metadata=_OMIT)
    n_pairs: int
    point: float | None
    point_metric: str | None
    # Nominal scales (result version 2): the share of agreeing pairs of distinct humans on the
    # same subject, pooled over pairs, with ties and (pairwise scales) without.
    pooled_agreement: Estimate | None = field(default=None, metadata=_OMIT)
    pooled_agreement_without_ties: Estimate | None = field(default=None, metadata=_OMIT)


@dataclass(frozen=True, kw_only=True)
class _CeilingKey:
    criterion: int
    judge_version: int | None
    dimension: str
    label: str


@dataclass(frozen=True, kw_only=True)
class CeilingRow(HumanCeiling, _CeilingKey):
    """A row of the ceiling table: the ceiling on every human-rated subject of a criterion x
    stratum (``judge_version`` None), its identity first."""


@dataclass(frozen=True, kw_only=True)
class AltTestAnnotator:
    """One annotator in the alternative annotator test: how often the judge (``rho_judge``) and
    this annotator (``rho_human``) align with the other humans, and the one-sided test of the
    judge against the annotator (``rejected`` after the Benjamini-Yekutieli correction)."""

    rho_judge: float | None
    rho_human: float | None
    n_items: int
    p_value: float | None
    p_adjusted: float | None
    rejected: bool


@dataclass(frozen=True, kw_only=True)
class AltTest:
    """The alternative annotator test of a cell (Calderon, Reichart & Dror 2025)."""

    winning_rate: float | None
    passed: bool
    advantage_probability: float | None
    epsilon: float
    q: float
    alignment: str
    n_tested: int
    n_skipped: int
    method: str
    warnings: tuple[str, ...]
    annotators: tuple[AltTestAnnotator, ...]


@dataclass(frozen=True, kw_only=True)
class ClassScores:
    """Precision, recall and F1 of one category (judge vs human majority), with its support."""

    label: str
    precision: float | None
    recall: float | None
    f1: float | None
    support: int


@dataclass(frozen=True, kw_only=True)
class ConfusionRow:
    """A cell's confusion matrix: ``matrix[i][k]`` counts human majority ``labels[i]`` with
    judge ``labels[k]``."""

    judge_version: int
    criterion: int
    dimension: str
    label: str
    labels: tuple[str, ...]
    matrix: tuple[tuple[int, ...], ...]
    rows: str
    columns: str
    per_class: tuple[ClassScores, ...]


@dataclass(frozen=True, kw_only=True)
class BiasRow:
    """One bias audit of a judge version on a criterion: the estimate and what it means."""

    judge_version: int
    criterion: int
    audit: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    method: str
    warnings: tuple[str, ...]
    p_value: float | None = field(default=None, metadata=_OMIT)
    note: str
    # Only the position flip-rate audit has it.
    strict_flip_rate: float | None = field(default=None, metadata=_OMIT)
    # Only the self-preference audits have it.
    n_pairs: int | None = field(default=None, metadata=_OMIT)


@dataclass(frozen=True, kw_only=True)
class CandidateMeans:
    """A candidate's mean judge and human score over its subjects (system level)."""

    name: str
    judge_mean: float | None
    human_mean: float | None


@dataclass(frozen=True, kw_only=True)
class SystemRow:
    """System level: the candidates' judge means against their human means, three ways.

    ``per_subject_kendall`` is the cell's own (per-subject) Kendall tau beside it, None where
    the scale has none.
    """

    judge_version: int
    criterion: int
    n_candidates: int
    n_items: int
    n_subjects: int
    candidates: tuple[CandidateMeans, ...]
    kendall: Estimate
    spearman: Estimate
    pearson: Estimate
    per_subject_kendall: Estimate | None


@dataclass(frozen=True, kw_only=True)
class SampleLevel:
    """Sample level: the within-item correlation of judge and human mean scores across the
    item's subjects (one per candidate), averaged over items.

    ``n_items`` items are averaged; ``n_items_constant`` were skipped because the judge's or
    the humans' scores are constant across the item's subjects, ``n_items_too_few`` because
    fewer than three subjects have both scores. ``n_subjects`` counts the averaged items'
    subjects.
    """

    n_items: int
    n_items_constant: int
    n_items_too_few: int
    n_subjects: int
    spearman: Estimate
    pearson: Estimate
    kendall: Estimate


@dataclass(frozen=True, kw_only=True)
class DatasetLevel:
    """Dataset level: one correlation over every subject (item x candidate) of the cell; the
    cell's own Spearman, Pearson and Kendall."""

    n_items: int
    n_subjects: int
    spearman: Estimate
    pearson: Estimate
    kendall: Estimate


@dataclass(frozen=True, kw_only=True)
class SystemLevel:
    """System level: the correlation of the candidates' judge and human means on the cell's
    subjects (percentile interval, items resampled)."""

    n_candidates: int
    n_items: int
    n_subjects: int
    spearman: Estimate
    pearson: Estimate
    kendall: Estimate


@dataclass(frozen=True, kw_only=True)
class CorrelationLevelsRow:
    """The three levels of correlation of a judge version on an ordinal criterion in one
    stratum (``system`` None with fewer than three candidates)."""

    judge_version: int
    criterion: int
    dimension: str
    label: str
    sample: SampleLevel
    dataset: DatasetLevel
    system: SystemLevel | None


@dataclass(frozen=True, kw_only=True)
class OrderFigures:
    """A judge's pairwise verdicts in both presentation orders against the human majority:
    accuracy in each order and their mean, accuracy in both orders at once, and positional
    agreement (the same label in both orders)."""

    accuracy_ab: Estimate
    accuracy_ba: Estimate
    accuracy_mean: Estimate
    accuracy_consistent: Estimate
    positional_agreement: Estimate


@dataclass(frozen=True, kw_only=True)
class OrderRow:
    """The presentation-order figures of a judge version on a pairwise criterion in one
    stratum: ``counted`` reads an unparseable verdict as ``unparseable_as`` ("miss" or "tie"),
    ``parseable`` leaves it out of the figures that need it."""

    judge_version: int
    criterion: int
    dimension: str
    label: str
    n_pairs: int
    n_unparseable_ab: int
    n_unparseable_ba: int
    unparseable_as: str
    counted: OrderFigures
    parseable: OrderFigures


@dataclass(frozen=True, kw_only=True)
class DisagreementExample:
    """A subject where the judge and the humans differ, both values as stored text."""

    subject: int
    item: str
    judge: str
    human: str


@dataclass(frozen=True, kw_only=True)
class DisagreementRow:
    """The disagreeing examples of a judge version on a criterion (largest gaps first)."""

    judge_version: int
    criterion: int
    n_disagreements: int
    n_subjects: int
    rule: str
    examples: tuple[DisagreementExample, ...]


@dataclass(frozen=True, kw_only=True)
class RaterGroupSize:
    """A group of raters (one value of the attribute) and how many of a criterion's raters are
    in it."""

    group: str
    n_raters: int


@dataclass(frozen=True, kw_only=True)
class RaterGroupMembers:
    """The rater groups of one criterion by ``attribute``; ``n_raters_without`` raters have no
    value for it and are in no group."""

    criterion: int
    attribute: str
    groups: tuple[RaterGroupSize, ...]
    n_raters_without: int


@dataclass(frozen=True, kw_only=True)
class RaterGroupRow:
    """One figure by rater group of a criterion x stratum (reports/agreement/groups.py).

    ``kind`` is "judge_vs_group" (``judge_version`` against ``group``'s consensus, the main
    table's coefficients), "group_vs_group" (``group``'s consensus against ``other_group``'s)
    or "within_group" (Krippendorff's alpha and pooled pair agreement among ``group``'s
    raters; ``n_pairs`` pairs of raters). ``too_few``: fewer than ``min_items`` subjects, and
    ``metrics`` is empty.
    """

    criterion: int
    dimension: str
    label: str
    kind: str
    judge_version: int | None
    group: str
    other_group: str | None
    n_subjects: int
    n_items: int
    n_raters: int
    too_few: bool
    primary_metric: str
    metrics: Mapping[str, Estimate]
    n_pairs: int | None = field(default=None, metadata=_OMIT)

    @property
    def primary(self) -> Estimate | None:
        return self.metrics.get(self.primary_metric)

    def title(self, judge: str = "judge") -> str:
        """A readable name: "judge vs expert", "expert vs crowd", "within expert"."""
        if self.kind == "judge_vs_group":
            return f"{judge} vs {self.group}"
        if self.kind == "group_vs_group":
            return f"{self.group} vs {self.other_group}"
        return f"within {self.group}"


@dataclass(frozen=True, kw_only=True)
class CandidateRow:
    """A cell's metrics on the subjects of one candidate (reports/agreement/candidates.py): its
    outputs, or the comparisons it took part in (on either side)."""

    judge_version: int
    criterion: int
    dimension: str
    label: str
    candidate: str
    n_subjects: int
    n_items: int
    primary_metric: str
    metrics: Mapping[str, Estimate]

    @property
    def primary(self) -> Estimate | None:
        return self.metrics.get(self.primary_metric)


@dataclass(frozen=True)
class AgreementCell:
    """One judge version x criterion x stratum: coefficients, ceiling, test and verdict."""

    judge_version: int
    criterion: int
    dimension: str
    label: str
    n_subjects: int
    n_items: int
    n_humans: int
    primary_metric: str
    metrics: Mapping[str, Estimate]
    ceiling: HumanCeiling
    alt_test: AltTest | None
    verdict: str
    verdict_basis: str
    verdict_reason: str

    @property
    def primary(self) -> Estimate | None:
        """The primary coefficient's estimate (None when the cell has none)."""
        return self.metrics.get(self.primary_metric)


@dataclass(frozen=True)
class AgreementResult(StoredResult):
    """The agreement report (docs/reports.md), version `AGREEMENT_RESULT_VERSION`."""

    SCHEMA_CONSTS: ClassVar[Mapping[str, Any]] = {"version": AGREEMENT_RESULT_VERSION}

    version: int
    rule: str
    params: Mapping[str, Any]
    plan_version: int | None
    fingerprint: str
    criteria: tuple[CriterionRef, ...]
    judges: tuple[JudgeRef, ...]
    strata: tuple[StratumRef, ...]
    cells: tuple[AgreementCell, ...]
    confusion: tuple[ConfusionRow, ...]
    bias: tuple[BiasRow, ...]
    ceiling: tuple[CeilingRow, ...]
    system: tuple[SystemRow, ...]
    disagreements: tuple[DisagreementRow, ...]
    warnings: tuple[str, ...]
    # Version 2; a version 1 result reads them as empty.
    correlation_levels: tuple[CorrelationLevelsRow, ...] = ()
    orders: tuple[OrderRow, ...] = ()
    # Version 3, only with the `rater_groups` parameter (absent from the JSON otherwise).
    rater_group_members: tuple[RaterGroupMembers, ...] | None = field(
        default=None, metadata=_OMIT
    )
    rater_groups: tuple[RaterGroupRow, ...] | None = field(default=None, metadata=_OMIT)
    # Version 4, only with the `by_candidate` parameter (absent from the JSON otherwise).
    by_candidate: tuple[CandidateRow, ...] | None = field(default=None, metadata=_OMIT)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AgreementResult:
        """Read a stored result; ResultFormatError names the first field that does not fit.

        Reads every version in `AGREEMENT_READABLE_VERSIONS`; ``version`` keeps the stored one.
        """
        version = result_object(data).get("version")
        if isinstance(version, bool) or version not in AGREEMENT_READABLE_VERSIONS:
            readable = ", ".join(str(v) for v in AGREEMENT_READABLE_VERSIONS)
            raise ResultFormatError(
                "version", f"agreement result version {version!r} is not one this code reads "
                f"({readable})"
            )
        raw = dict(data)
        if version == 1:
            for table in _TABLES_SINCE_2:
                raw.setdefault(table, [])
        return cls.decode(raw)

    def to_json(self) -> dict[str, Any]:
        """The stored (and served) JSON form: from_json(to_json()) == self (and a version 1
        result read by from_json writes back exactly what was stored)."""
        out = super().to_json()
        if self.version == 1:
            for table in _TABLES_SINCE_2:
                if not out[table]:
                    del out[table]
        return out

    def criteria_by_id(self) -> dict[int, CriterionRef]:
        return {c.id: c for c in self.criteria}

    def judges_by_id(self) -> dict[int, JudgeRef]:
        return {j.id: j for j in self.judges}

    def cells_for(
        self, *, criterion: int | None = None, judge_version: int | None = None
    ) -> list[AgreementCell]:
        """Cells filtered by criterion and/or judge version, in report order."""
        return [
            c
            for c in self.cells
            if (criterion is None or c.criterion == criterion)
            and (judge_version is None or c.judge_version == judge_version)
        ]

    def rows(self, table: str) -> Iterable[Any]:
        """The typed rows of one of the other tables (confusion, bias, ceiling, system,
        disagreements, correlation_levels, orders)."""
        if table not in (
            "confusion", "bias", "ceiling", "system", "disagreements", *_TABLES_SINCE_2
        ):
            raise ValueError(f"unknown table {table!r}")
        rows: tuple[Any, ...] = getattr(self, table)
        return rows


__all__ = [
    "AGREEMENT_READABLE_VERSIONS",
    "AGREEMENT_RESULT_VERSION",
    "AgreementCell",
    "AgreementResult",
    "AltTest",
    "AltTestAnnotator",
    "BiasRow",
    "CandidateMeans",
    "CandidateRow",
    "CeilingRow",
    "ClassScores",
    "ConfusionRow",
    "CorrelationLevelsRow",
    "CriterionRef",
    "DatasetLevel",
    "DisagreementExample",
    "DisagreementRow",
    "Estimate",
    "HumanCeiling",
    "JudgeRef",
    "OrderFigures",
    "OrderRow",
    "RaterGroupMembers",
    "RaterGroupRow",
    "RaterGroupSize",
    "RaterPair",
    "ResultFormatError",
    "SampleLevel",
    "StratumRef",
    "SystemLevel",
    "SystemRow",
    "json_safe",
]
