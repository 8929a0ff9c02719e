"""The evidence read model: every rating of a study as column frames (the one reader of ratings
for statistics; reports and calibration read through `rating_data_load`).

The package owns the reading of ratings and the rules read with them: `reader` (a queryset
into columns), `ratings` (verdicts and annotations as codes with their evidence), `load`
(`rating_data_load` and `RatingData`), `labels` (THE human-label rule), `rubric` (THE rubric
rule), `codes` (pairwise codes and stored values) and `evidence` (one flat frame).

The loaders read `values_list` querysets (no model instances) straight into columns, because a
report may read a million verdicts: model instances would cost tens of seconds. On PostgreSQL
the compiled query runs inside `COPY (...) TO STDOUT` and pandas parses the CSV stream, so no
Python object is made per value (bench/agreement.py's 1.1 M ratings with their subjects and
strata: 1.3-1.5 s instead of 3.2-3.5 s with tuples); other databases (SQLite) iterate the tuples
and give the same frames. Everything per rating (probability, severity, inclusion probability,
timestamps) comes through the same statement as the rating itself (joins, never a query per
row); gold labels and adjudications are one query each, joined on (subject, criterion) in
pandas. A load costs at most `LOAD_MAX_QUERIES` queries whatever the study's size.

Subjects (what a rating is about) are encoded as one integer: ``2 * output_id`` for a single
output and ``2 * comparison_id + 1`` for a comparison (`studies.subjects`: ``SubjectRef.code``,
and `subject_codes` / `subject_split` for whole columns).

``RatingData.ratings``, one row per rating with a value the statistics can read (a stored
value outside the criterion's scale is dropped):

=====================  ==================  ===================================================
column                 dtype               meaning (NULL/NaN when)
=====================  ==================  ===================================================
subject                int64               encoded subject (see above)
criterion              int64               criterion id (``RatingData.criteria``)
rater                  int64               judge version id (judges) or user id (annotators)
is_judge               bool                True for a judge verdict, False for an annotation
continuous             bool                the rater is a continuous-score judge version
num                    float64             the code the statistics use: category index
                                           (categorical), tie 0 / A 1 / B 2 (pairwise), the
                                           number otherwise (pass 1 / fail 0, ordinal level,
                                           continuous score); never NaN
value                  str                 the stored value as text ("pass", "3", "A", ...)
value_num              float64             the stored numeric value (NaN for categorical
                                           labels and whenever none was stored)
probability            float64             the judge's probability or confidence of its
                                           verdict (NaN for annotations and for verdicts
                                           whose provider gave none)
severity               float64             the annotator's 1-5 severity of a failure (NaN for
                                           verdicts and for annotations that gave none)
inclusion_probability  float64             first-order inclusion probability of the subject
                                           in the human sample, from the queue entry the
                                           annotation was graded from (NaN for verdicts,
                                           imported annotations and non-random draws)
draw_kind              object (str|None)   how that queue entry was drawn: "random",
                                           "census", "gold" or "escalation" (None for
                                           verdicts and for annotations not graded from the
                                           queue)
gold                   bool                the (subject, criterion) has a gold label
gold_label             object (str|None)   the gold label's stored value (None without one)
adjudicated_label      object (str|None)   the latest adjudication's stored value for the
                                           (subject, criterion) (None without one)
created_at             datetime64[us, UTC] when the verdict or annotation was recorded
=====================  ==================  ===================================================

``RatingData.subjects`` (index ``subject``): item (int64), candidate (int64), candidate_b
(int64, -1 for outputs), length and length_b (float64 text lengths, length_b NaN for outputs).
``RatingData.items`` (index ``item``): external_id plus one str column per stratum dimension
(``RatingData.dimensions``; "unknown" when the item has no label). ``RatingData.orders``: the
presentation orders of pairwise judge verdicts that record both (subject, criterion, rater,
ab, ba as pairwise codes). ``RatingData.rater_attributes``: the attributes of the study's
members (user id -> {key: value}, from `Membership.metadata`, e.g. the `rater.group` an import
gave a human rater; one query), read by the agreement report's rater groups.
`evidence_frame` joins them all into one flat frame.

Selections (`rating_data_load`): criteria by key, judge versions by id, candidates by name (a
comparison is kept when both its candidates are), strata by dimension -> labels (a subject is
kept when its item's label is listed for every dimension given), and a time window on the
ratings' `created_at` (``since`` inclusive, ``until`` exclusive).

Column sets (`rating_data_load(columns=...)`): ``"evidence"`` (the default) gives every column
above. ``"agreement"`` gives only the six the agreement report reads (subject, criterion,
rater, num, is_judge, continuous, in that order; `AGREEMENT_COLUMNS`) and its statements read
nothing else: per criterion group one value column (value_num, or value for categorical
criteria), no join to the assignment and queue entry, no gold label or adjudication query, no
created_at in the select list (a time window still filters on it in WHERE). The evidence
columns nearly double a load (bench/agreement.py's 1.1 M ratings: 3.9 s -> 7.3 s; a tenth of
that study: 0.23 s -> 0.35 s), so a caller that reads none of them (the agreement report,
reports/kinds.py) asks for ``"agreement"``; the `subjects`, `items` and `orders` frames
are the same in both sets. An agreement load costs at most `LOAD_MAX_QUERIES_AGREEMENT`
queries.
"""

from calibration.frames.codes import PAIRWISE_CODE, label_reading, value_text
from calibration.frames.evidence import evidence_frame
from calibration.frames.labels import HumanLabels, human_labels, pairwise_a_wins, pairwise_side
from calibration.frames.load import (
    AGREEMENT_COLUMNS,
    LOAD_MAX_QUERIES,
    LOAD_MAX_QUERIES_AGREEMENT,
    ColumnSet,
    RatingData,
    rating_data_load,
)
from calibration.frames.ratings import stored_labels_load
from calibration.frames.reader import rows_frame, values_frame
from calibration.frames.rubric import (
    rubric_pass_columns,
    rubric_predictor_columns,
    rubric_rule,
)
from calibration.refs import CriterionRef, JudgeRef

__all__ = [
    "AGREEMENT_COLUMNS",
    "LOAD_MAX_QUERIES",
    "LOAD_MAX_QUERIES_AGREEMENT",
    "PAIRWISE_CODE",
    "ColumnSet",
    "CriterionRef",
    "HumanLabels",
    "JudgeRef",
    "RatingData",
    "evidence_frame",
    "human_labels",
    "label_reading",
    "pairwise_a_wins",
    "pairwise_side",
    "rating_data_load",
    "rows_frame",
    "rubric_pass_columns",
    "rubric_predictor_columns",
    "rubric_rule",
    "stored_labels_load",
    "value_text",
    "values_frame",
]
