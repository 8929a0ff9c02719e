"""Benchmark: a full agreement report on 1,000,000 judge verdicts and 100,000 human annotations.

Shape (issue 5, section 5): 3 judges x 4 criteria (binary, ordinal 1-5, categorical with 3
labels, binary) over 83,334 outputs (41,667 items x 2 candidates) = 1,000,008 verdicts; 8,334
outputs per criterion sampled for humans, 3 annotators each (from a pool of 15) = 100,008
annotations; one stratum dimension with 20 labels. Report: every judge x criterion x stratum
(overall + 20) = 252 cells with 1,000 bootstrap resamples each, ceilings, alternative annotator
tests, bias audits and examples.

Prints: the in-memory report time (frames built directly), the PostgreSQL load time of the same
data through `calibration.frames.rating_data_load` (with --db), the fingerprint time, peak RSS,
and the naive approach (a Python loop calling krippendorff.alpha / sklearn / scipy.stats once
per resample per cell) timed on a subset of cells and extrapolated linearly to all 252.

    DATABASE_URL=postgres://... .venv/bin/python bench/agreement.py \
        [--db [--reuse]] [--naive-cells 4] [--workers N]

With --reuse, the study written by an earlier run is loaded again when it holds exactly this
synthetic data (a digest of the arrays is kept in the study's name); otherwise it is rewritten.
--workers sets compute_report's threads (default: its DEFAULT_WORKERS; 1 = criteria in turn).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")

N_ITEMS = 41_667
N_CANDIDATES = 2
N_STRATA = 20
N_JUDGES = 3
N_ANNOTATORS = 15
HUMANS_PER_OUTPUT = 3
SAMPLED_PER_CRITERION = 8_334
B = 1000


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def digest(raw: dict[str, Any]) -> str:
    """Short digest of the synthetic arrays: a reused study must hold exactly these ratings."""
    h = hashlib.sha256()
    for key in ("out_item", "out_cand", "item_stratum", "lengths"):
        h.update(np.ascontiguousarray(raw[key], dtype=np.int64).tobytes())
    for key in ("verdicts", "annotations"):
        for arr in raw[key]:
            h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
    h.update(repr(raw["scales"]).encode())
    return h.hexdigest()[:16]


def synthesise(seed: int = 1) -> dict[str, Any]:
    """Raw arrays of the synthetic study (ids are 0-based positions)."""
    rng = np.random.default_rng(seed)
    n_out = N_ITEMS * N_CANDIDATES
    out_item = np.repeat(np.arange(N_ITEMS), N_CANDIDATES)
    out_cand = np.tile(np.arange(N_CANDIDATES), N_ITEMS)
    item_stratum = rng.integers(0, N_STRATA, N_ITEMS)
    lengths = rng.integers(50, 2000, n_out)
    scales = [
        ("correct", "binary", 2),
        ("helpful", "ordinal", 5),
        ("tone", "categorical", 3),
        ("safe", "binary", 2),
    ]
    verdicts, annotations = [], []
    for ci, (_, scale, k) in enumerate(scales):
        truth = rng.integers(0, k, n_out)
        # Judges are good in most strata and poor in a few (stratum-dependent accuracy).
        for j in range(N_JUDGES):
            acc = np.where(item_stratum[out_item] % (5 + j) == 0, 0.45, 0.85)
            right = rng.random(n_out) < acc
            noise = rng.integers(0, k, n_out)
            if scale == "ordinal":
                noise = np.clip(truth + rng.integers(-1, 2, n_out), 0, k - 1)
            val = np.where(right, truth, noise)
            verdicts.append((np.arange(n_out), np.full(n_out, ci), np.full(n_out, j), val))
        sampled = rng.choice(n_out, SAMPLED_PER_CRITERION, replace=False)
        raters = np.stack(
            [
                rng.choice(N_ANNOTATORS, HUMANS_PER_OUTPUT, replace=False)
                for _ in range(sampled.size)
            ]
        )
        for slot in range(HUMANS_PER_OUTPUT):
            right = rng.random(sampled.size) < 0.8
            noise = rng.integers(0, k, sampled.size)
            if scale == "ordinal":
                noise = np.clip(truth[sampled] + rng.integers(-1, 2, sampled.size), 0, k - 1)
            val = np.where(right, truth[sampled], noise)
            annotations.append((sampled, np.full(sampled.size, ci), raters[:, slot], val))
    cat = lambda parts, i: np.concatenate([p[i] for p in parts])  # noqa: E731
    return {
        "out_item": out_item,
        "out_cand": out_cand,
        "item_stratum": item_stratum,
        "lengths": lengths,
        "scales": scales,
        "verdicts": [cat(verdicts, i) for i in range(4)],
        "annotations": [cat(annotations, i) for i in range(4)],
    }


def frames(raw: dict[str, Any]) -> Any:
    """RatingData built directly from the arrays (the in-memory path)."""
    from calibration.frames import CriterionRef, JudgeRef, RatingData

    crits = {}
    for ci, (key, scale, k) in enumerate(raw["scales"]):
        values = (
            ("fail", "pass")
            if scale == "binary"
            else tuple(str(v) for v in range(1, k + 1))
            if scale == "ordinal"
            else ("calm", "neutral", "rude")
        )
        crits[ci + 1] = CriterionRef(
            id=ci + 1, key=key, name=key, scale=scale, values=values, rubric_version=1
        )
    judges = {
        j + 1: JudgeRef.of(
            id=j + 1,
            judge=f"judge-{j}",
            version=1,
            label="",
            model_family="",
            value_type="label",
            kind="llm",
        )
        for j in range(N_JUDGES)
    }

    def part(arrs: list[np.ndarray], is_judge: bool) -> pd.DataFrame:
        subj, ci, rater, val = arrs
        scale_of = np.array([s for _, s, _ in raw["scales"]])[ci]
        num = np.where(scale_of == "ordinal", val + 1, val).astype(np.float64)
        return pd.DataFrame(
            {
                "subject": subj * 2,
                "criterion": ci + 1,
                "rater": rater + (1 if is_judge else 1000),
                "num": num,
                "is_judge": is_judge,
                "continuous": False,
            }
        )

    ratings = pd.concat(
        [part(raw["verdicts"], True), part(raw["annotations"], False)], ignore_index=True
    )
    n_out = raw["out_item"].size
    subjects = pd.DataFrame(
        {
            "item": raw["out_item"],
            "candidate": raw["out_cand"],
            "candidate_b": -1,
            "length": raw["lengths"].astype(float),
            "length_b": np.nan,
        },
        index=pd.Index(np.arange(n_out) * 2, name="subject"),
    )
    items = pd.DataFrame(
        {
            "external_id": [f"i{i}" for i in range(N_ITEMS)],
            "segment": [f"s{s:02d}" for s in raw["item_stratum"]],
        },
        index=pd.Index(np.arange(N_ITEMS), name="item"),
    )
    return RatingData(
        criteria=crits,
        judges=judges,
        candidates={0: ("a", ""), 1: ("b", "")},
        ratings=ratings,
        subjects=subjects,
        items=items,
        dimensions=["segment"],
    )


def naive(data: Any, n_cells: int, n_resamples: int) -> tuple[float, int]:
    """Seconds for `n_cells` cells computed the naive way, resampling in a Python loop.

    Per resample and cell: krippendorff.alpha of the humans (ceiling), sklearn's Cohen's kappa
    of judge vs consensus (quadratic for ordinal) and, for ordinal, scipy's Spearman; per-item
    resampling with integer indices. Fewer coefficients than the real report computes.
    """
    import krippendorff
    from scipy import stats
    from sklearn.metrics import cohen_kappa_score

    from reports.agreement import human_block, params_validate

    p = params_validate({})
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    done = 0
    per_criterion = max(1, n_cells // len(data.criteria))
    for crit in list(data.criteria.values()):
        # The same number of strata from every criterion, so the sample mixes the scales.
        block = human_block(data, crit, p)
        r = data.ratings
        jr = r[(r["is_judge"]) & (r["criterion"] == crit.id) & (r["rater"] == 1)]
        j = (
            pd.Series(jr["num"].to_numpy(), index=jr["subject"].to_numpy())
            .reindex(block.subjects)
            .to_numpy()
        )
        for st in block.strata[1 : 1 + per_criterion]:
            idx = np.nonzero(st.mask)[0]
            humans = block.matrix[:, idx]
            humans = humans[(~np.isnan(humans)).any(axis=1)]
            level = "ordinal" if crit.scale == "ordinal" else "nominal"
            weights = "quadratic" if crit.scale == "ordinal" else None
            for _ in range(n_resamples):
                pick = rng.integers(0, idx.size, idx.size)
                krippendorff.alpha(reliability_data=humans[:, pick], level_of_measurement=level)
                cohen_kappa_score(block.rounded[idx][pick], j[idx][pick], weights=weights)
                if crit.scale == "ordinal":
                    stats.spearmanr(j[idx][pick], block.consensus[idx][pick])
            done += 1
    return time.perf_counter() - t0, done


SLUG = "bench-agreement"


def db_reusable(raw: dict[str, Any]) -> bool:
    """True when the database already holds this synthetic study, complete."""
    from annotations.models import Annotation
    from judges.models import Verdict
    from studies.models import Study

    study = Study.objects.filter(slug=SLUG).first()
    if study is None or study.name != f"bench {digest(raw)}":
        return False
    n_verdicts = Verdict.objects.filter(criterion__rubric__study=study).count()
    n_annotations = Annotation.objects.filter(criterion__rubric__study=study).count()
    return n_verdicts == raw["verdicts"][0].size and n_annotations == raw["annotations"][0].size


def db_write(raw: dict[str, Any]) -> float:
    """Write the synthetic study to the database (replacing an earlier one); seconds taken."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.db import connection, transaction

    from annotations.models import Annotation
    from judges.models import Judge, JudgeVersion, Verdict
    from reviewhub.bulkcopy import bulk_insert
    from studies.models import Candidate, Criterion, Item, Output, RubricVersion, Study

    User = get_user_model()
    slug = SLUG
    old = Study.objects.filter(slug=slug).first()
    if old is not None:
        Verdict.objects.filter(criterion__rubric__study=old).delete()
        Annotation.objects.filter(criterion__rubric__study=old).delete()
        old.delete()
    owner, _ = User.objects.get_or_create(username="bench-owner")
    t_write = time.perf_counter()
    with transaction.atomic():
        # The digest in the name lets --reuse tell this data from an older synthetic study.
        study = Study.objects.create(
            slug=slug, name=f"bench {digest(raw)}", owner=owner, is_simulated=True
        )
        rubric = RubricVersion.objects.create(study=study, version=1)
        crit_ids = []
        for pos, (key, scale, k) in enumerate(raw["scales"]):
            points = (
                [{"value": v, "label": str(v)} for v in range(1, k + 1)]
                if scale == "ordinal"
                else [{"value": x, "label": x} for x in ("calm", "neutral", "rude")]
                if scale == "categorical"
                else []
            )
            crit_ids.append(
                Criterion.objects.create(
                    rubric=rubric, key=key, name=key, scale=scale, points=points, position=pos
                ).pk
            )
        Item.objects.bulk_create(
            [
                Item(
                    study=study, external_id=f"i{i}", input=f"q{i}", strata={"segment": f"s{s:02d}"}
                )
                for i, s in enumerate(raw["item_stratum"])
            ],
            batch_size=5000,
        )
        item_ids = dict(Item.objects.filter(study=study).values_list("external_id", "id"))
        cands = [
            Candidate.objects.create(study=study, name=f"m{c}").pk for c in range(N_CANDIDATES)
        ]
        bulk_insert(
            Output,
            [
                {
                    "study_id": study.pk,
                    "candidate_id": cands[c],
                    "item_id": item_ids[f"i{i}"],
                    "text": "x" * int(n),
                }
                for i, c, n in zip(raw["out_item"], raw["out_cand"], raw["lengths"], strict=True)
            ],
        )
        out_ids = {
            (i, c): oid
            for oid, i, c in Output.objects.filter(study=study).values_list(
                "id", "item_id", "candidate_id"
            )
        }
        out_of = np.array(
            [
                out_ids[(item_ids[f"i{i}"], cands[c])]
                for i, c in zip(raw["out_item"], raw["out_cand"], strict=True)
            ]
        )
        jvs = []
        for j in range(N_JUDGES):
            judge = Judge.objects.create(study=study, name=f"judge-{j}", kind="llm")
            jvs.append(
                JudgeVersion.objects.create(judge=judge, version=1, content_hash=f"{j}" * 8).pk
            )
        unusable = make_password(None)
        users = [
            User.objects.create(username=f"bench-ann-{a}", is_active=False, password=unusable).pk
            if not User.objects.filter(username=f"bench-ann-{a}").exists()
            else User.objects.get(username=f"bench-ann-{a}").pk
            for a in range(N_ANNOTATORS)
        ]

        def value(ci: int, v: int) -> tuple[str, float | None]:
            scale = raw["scales"][ci][1]
            if scale == "binary":
                return ("pass", 1.0) if v == 1 else ("fail", 0.0)
            if scale == "ordinal":
                return str(v + 1), float(v + 1)
            return ("calm", "neutral", "rude")[v], None

        subj, ci, rater, val = raw["verdicts"]
        bulk_insert(
            Verdict,
            [
                {
                    "judge_version_id": jvs[r],
                    "criterion_id": crit_ids[c],
                    "output_id": int(out_of[s]),
                    "value": value(c, v)[0],
                    "value_num": value(c, v)[1],
                    "is_scored": True,
                }
                for s, c, r, v in zip(subj, ci, rater, val, strict=True)
            ],
        )
        subj, ci, rater, val = raw["annotations"]
        bulk_insert(
            Annotation,
            [
                {
                    "annotator_id": users[r],
                    "criterion_id": crit_ids[c],
                    "output_id": int(out_of[s]),
                    "value": value(c, v)[0],
                    "value_num": value(c, v)[1],
                    "source": "import",
                }
                for s, c, r, v in zip(subj, ci, rater, val, strict=True)
            ],
        )
    with connection.cursor() as cur:
        cur.execute(
            "ANALYZE judges_verdict; ANALYZE annotations_annotation; ANALYZE studies_output"
        )
    return time.perf_counter() - t_write


def db_load(raw: dict[str, Any], reuse: bool) -> dict[str, Any]:
    """Write the synthetic study (untimed; skipped with `reuse` when present), time the loader."""
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from calibration.frames import rating_data_load
    from reports.agreement import input_fingerprint
    from studies.models import Study

    # A fresh database (a new machine) has no tables yet; migrating an up-to-date one is a no-op.
    call_command("migrate", verbosity=0)
    reused = reuse and db_reusable(raw)
    t_write = 0.0 if reused else db_write(raw)
    # A fresh connection, as a report task would have.
    connection.close()
    t0 = time.perf_counter()
    data = rating_data_load(study=Study.objects.get(slug=SLUG), columns="agreement")
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    input_fingerprint(data)
    t_fp = time.perf_counter() - t0
    return {
        "reused": reused,
        "write_s": t_write,
        "load_s": t_load,
        "fingerprint_s": t_fp,
        "rows": float(len(data.ratings)),
        "data": data,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", action="store_true", help="also load from the database (PostgreSQL)")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="with --db: keep the study of an earlier run when it holds this data",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=None,
        help="threads of compute_report (default: reports.agreement.DEFAULT_WORKERS)",
    )
    ap.add_argument("--naive-cells", type=int, default=4)
    ap.add_argument("--naive-resamples", type=int, default=1000)
    args = ap.parse_args()
    import django

    django.setup()
    from reports.agreement import DEFAULT_WORKERS, compute_report, params_validate

    workers = DEFAULT_WORKERS if args.workers is None else args.workers

    print(
        f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()}; "
        f"compute_report workers={workers}"
    )
    t0 = time.perf_counter()
    raw = synthesise()
    data = frames(raw)
    print(
        f"synthesised {int(data.ratings['is_judge'].sum()):,} verdicts and "
        f"{int((~data.ratings['is_judge']).sum()):,} annotations "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    params = params_validate({"n_resamples": B, "seed": 1})
    t0 = time.perf_counter()
    result = compute_report(data, params, workers=workers)
    t_mem = time.perf_counter() - t0
    n_cells = len(result["cells"])
    print(
        f"in-memory report: {n_cells} cells x {B} resamples in {t_mem:.2f} s; "
        f"peak RSS so far {rss_mb():.0f} MB"
    )
    t_db = None
    if args.db:
        info = db_load(raw, args.reuse)
        setup = (
            "reused the study of an earlier run"
            if info["reused"]
            else f"wrote the study in {info['write_s']:.1f} s (untimed setup)"
        )
        print(
            f"PostgreSQL: {setup}; load {info['rows']:,.0f} ratings in {info['load_s']:.2f} s; "
            f"fingerprint {info['fingerprint_s']:.2f} s"
        )
        t0 = time.perf_counter()
        compute_report(info["data"], params, workers=workers)
        t_c = time.perf_counter() - t0
        t_db = info["load_s"] + info["fingerprint_s"] + t_c
        print(
            f"end to end from PostgreSQL (load {info['load_s']:.2f} + fingerprint "
            f"{info['fingerprint_s']:.2f} + compute {t_c:.2f}): {t_db:.2f} s; "
            f"peak RSS {rss_mb():.0f} MB"
        )
    secs, done = naive(data, args.naive_cells, args.naive_resamples)
    per_cell = secs / max(done, 1) * (B / args.naive_resamples)
    naive_total = per_cell * n_cells
    print(
        f"naive: {done} cells x {args.naive_resamples} resamples in {secs:.1f} s -> "
        f"{per_cell:.2f} s per cell, extrapolated linearly to {n_cells} cells: {naive_total:.0f} s"
    )
    print(
        f"speed-up vs naive (in-memory report, which computes more coefficients): "
        f"{naive_total / t_mem:.0f}x"
    )
    if t_db is not None:
        print(f"speed-up vs naive (end to end from PostgreSQL): {naive_total / t_db:.0f}x")
    print(f"peak RSS {rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
