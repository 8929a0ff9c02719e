"""The report's fast paths give what the plain ones give.

* worker threads: the same result, to the last bit, as computing criteria in turn;
* the vectorised input fingerprint: the sha256 of its definition, row by row;
* the COPY loader on PostgreSQL: the frames the driver's tuples give.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pandas as pd
import pytest
from django.contrib.auth import get_user_model

from annotations.models import Annotation
from calibration import frames
from calibration.frames import CriterionRef, JudgeRef, RatingData, rating_data_load, value_text
from judges.models import Judge, JudgeVersion, Verdict
from reports.agreement import compute_report, input_fingerprint, params_validate
from studies.models import Candidate, Criterion, Item, Output, RubricVersion, Study


def _rating_data(seed: int = 3) -> RatingData:
    """A small study: binary, ordinal and categorical criteria, two label judges and one
    continuous judge, eight annotators (three per sampled output), three strata."""
    rng = np.random.default_rng(seed)
    n_items, n_out = 150, 300
    crits = {
        1: CriterionRef(1, "correct", "Correct", "binary", ("fail", "pass"), 1),
        2: CriterionRef(2, "helpful", "Helpful", "ordinal", ("1", "2", "3", "4", "5"), 1),
        3: CriterionRef(3, "tone", "Tone", "categorical", ("calm", "neutral", "rude"), 1),
    }
    judges = {
        10: JudgeRef.of(10, "judge-a", 1, "", "fam-a", "label", "llm"),
        11: JudgeRef.of(11, "judge-b", 1, "", "", "label", "llm"),
        12: JudgeRef.of(12, "metric", 1, "", "", "continuous", "imported"),
    }
    rows: list[tuple[int, int, int, float, bool, bool]] = []
    for cid, crit in crits.items():
        k = len(crit.values)
        lo = 1 if crit.scale == "ordinal" else 0
        truth = rng.integers(0, k, n_out)
        for jv in (10, 11):
            right = rng.random(n_out) < 0.75
            val = np.where(right, truth, rng.integers(0, k, n_out)) + lo
            rows += [(2 * s, cid, jv, float(v), True, False) for s, v in enumerate(val)]
        if crit.scale == "ordinal":
            score = truth + lo + rng.normal(0, 0.7, n_out)
            rows += [(2 * s, cid, 12, float(v), True, True) for s, v in enumerate(score)]
        for s in rng.choice(n_out, 120, replace=False):
            for a in rng.choice(8, 3, replace=False):
                v = truth[s] if rng.random() < 0.8 else rng.integers(0, k)
                rows.append((2 * int(s), cid, 100 + int(a), float(v + lo), False, False))
    ratings = pd.DataFrame(
        rows, columns=["subject", "criterion", "rater", "num", "is_judge", "continuous"]
    )
    subjects = pd.DataFrame(
        {
            "item": np.arange(n_out) // 2,
            "candidate": np.arange(n_out) % 2 + 1,
            "candidate_b": -1,
            "length": rng.integers(20, 900, n_out).astype(float),
            "length_b": np.nan,
        },
        index=pd.Index(np.arange(n_out) * 2, name="subject"),
    )
    items = pd.DataFrame(
        {
            "external_id": [f"i{i}" for i in range(n_items)],
            "lang": rng.choice(["de", "en", "fr"], n_items),
        },
        index=pd.Index(np.arange(n_items), name="item"),
    )
    return RatingData(
        criteria=crits,
        judges=judges,
        candidates={1: ("small", "fam-a"), 2: ("large", "fam-b")},
        ratings=ratings,
        subjects=subjects,
        items=items,
        dimensions=["lang"],
    )


def test_worker_threads_do_not_change_the_report() -> None:
    data = _rating_data()
    p = params_validate({"n_resamples": 200, "seed": 11, "min_items": 10, "system_level": True})
    serial = compute_report(data, p, workers=1)
    threaded = compute_report(data, p, workers=3)
    assert len(serial["cells"]) == 3 * (3 + 1) * 2 + (3 + 1)  # label judges + continuous
    assert any(c["alt_test"] is not None for c in serial["cells"])
    # repr compares floats to the last bit (and NaN with NaN).
    assert repr(threaded) == repr(serial)


def _fingerprint_by_rows(data: RatingData) -> str:
    """The fingerprint's definition: sorted rows, then one canonical text per rating."""
    frame = data.ratings.sort_values(
        ["subject", "criterion", "is_judge", "rater"], kind="mergesort"
    )
    h = hashlib.sha256()
    ids = np.column_stack(
        [
            frame["subject"].to_numpy(dtype=np.int64),
            frame["criterion"].to_numpy(dtype=np.int64),
            frame["rater"].to_numpy(dtype=np.int64) * 2
            + frame["is_judge"].to_numpy(dtype=np.int64),
        ]
    )
    h.update(np.ascontiguousarray(ids).tobytes())
    texts = [
        value_text(data.criteria[int(c)].scale, data.criteria[int(c)].values, float(x), bool(k))
        for c, x, k in zip(frame["criterion"], frame["num"], frame["continuous"], strict=True)
    ]
    h.update("\x1f".join(texts).encode())
    return h.hexdigest()


def test_fingerprint_equals_its_row_by_row_definition() -> None:
    data = _rating_data()
    r = data.ratings.sample(frac=1.0, random_state=4).reset_index(drop=True)
    cont = r.index[r["continuous"]]
    # Signed zeros print differently ("-0.0" vs "0.0") and must stay apart.
    r.loc[cont[:3], "num"] = -0.0
    r.loc[cont[3:6], "num"] = 0.0
    data.ratings = r
    assert input_fingerprint(data) == _fingerprint_by_rows(data)
    r.loc[cont[0], "num"] = 0.0
    assert input_fingerprint(data) == _fingerprint_by_rows(data)


def _tuples_frame(qs: Any, names: Any, text: Any = ()) -> pd.DataFrame:
    return frames.rows_frame(list(qs), names)


@pytest.mark.django_db
@pytest.mark.postgres
def test_copy_loader_equals_the_tuple_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    user_model = get_user_model()
    owner = user_model.objects.create(username="copy-owner")
    study = Study.objects.create(slug="copy-loader", name="copy", owner=owner)
    rubric = RubricVersion.objects.create(study=study, version=1)
    # Labels that CSV quoting or pandas' NA detection could mangle.
    labels = ["NA", "None", 'say "hi", ok', "null", "two\nlines", " padded "]
    tone = Criterion.objects.create(
        rubric=rubric,
        key="tone",
        name="Tone",
        scale="categorical",
        points=[{"value": v, "label": v} for v in labels],
        position=0,
    )
    score = Criterion.objects.create(
        rubric=rubric,
        key="helpful",
        name="Helpful",
        scale="ordinal",
        points=[{"value": v, "label": str(v)} for v in range(1, 6)],
        position=1,
    )
    cand = Candidate.objects.create(study=study, name="m1")
    outputs = []
    for i in range(30):
        item = Item.objects.create(study=study, external_id=f"q{i}", strata={"lang": "en"})
        outputs.append(Output.objects.create(study=study, item=item, candidate=cand, text="x" * i))
    judge = Judge.objects.create(study=study, name="metric", kind="imported")
    jv = JudgeVersion.objects.create(
        judge=judge, version=1, content_hash="c" * 8, config={"value_type": "continuous"}
    )
    floats = [0.1, 1 / 3, 1e-300, -0.0, 2.5e17, 0.30000000000000004]
    for i, out in enumerate(outputs):
        x = floats[i % len(floats)] + i
        Verdict.objects.create(
            judge_version=jv, criterion=score, output=out, value=repr(x), value_num=x
        )
        Verdict.objects.create(
            judge_version=jv, criterion=tone, output=out, value=labels[i % len(labels)]
        )
        if i % 3 == 0:  # a NULL value_num on an ordinal rating: dropped by the loader
            Verdict.objects.create(
                judge_version=JudgeVersion.objects.get_or_create(
                    judge=judge, version=2, content_hash="d" * 8
                )[0],
                criterion=score,
                output=out,
                value="",
                value_num=None,
            )
    annotators = [user_model.objects.create(username=f"copy-ann-{a}") for a in range(2)]
    for i, out in enumerate(outputs[:20]):
        for a, user in enumerate(annotators):
            Annotation.objects.create(
                annotator=user, criterion=tone, output=out, value=labels[(i + a) % len(labels)]
            )
            v = 1 + (i + a) % 5
            Annotation.objects.create(
                annotator=user, criterion=score, output=out, value=str(v), value_num=v
            )
    fast = rating_data_load(study=study)
    monkeypatch.setattr(frames.reader, "values_frame", _tuples_frame)
    plain = rating_data_load(study=study)
    assert len(fast.ratings) == 30 * 2 + 20 * 4
    assert set(fast.ratings["num"][fast.ratings["criterion"] == tone.pk]) == set(range(len(labels)))
    for name in ("ratings", "subjects", "items", "orders"):
        pd.testing.assert_frame_equal(getattr(fast, name), getattr(plain, name), check_exact=True)
    # Bit patterns, not just ==: -0.0 and 0.0 compare equal.
    assert (
        fast.ratings["num"].to_numpy().view(np.int64)
        == plain.ratings["num"].to_numpy().view(np.int64)
    ).all()
