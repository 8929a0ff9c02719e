"""How fast are evalstats' vectorised clustered bootstraps, against a naive per-resample loop?

    .venv/bin/python bench/evalstats_bootstrap.py [--resamples 1000] [--naive-resamples 10]
        [--scale 5] [--only kappa,alpha,rank,groups]

Every evalstats figure is a full run: B resamples, BCa (so the jackknife is included), in CPU
seconds of this process (the dev box is shared; wall time is printed for the by-group run). The
naive figure is a Python loop that calls the reference library once per resample (sklearn's
``cohen_kappa_score``, ``krippendorff.alpha``, ``scipy.stats.kendalltau`` / ``spearmanr``...);
it is timed on ``--naive-resamples`` resamples and **extrapolated linearly** to B, and it leaves
out the n extra calls the BCa jackknife would need, so the ratios understate the gain.

Sections:
* kappa: 50k items, quadratic Cohen's kappa;
* alpha: 10k units x 3 raters (10% missing), all four levels;
* rank: Kendall tau-b and Spearman on 50k paired ordinal scores (c x c table route);
* groups: a report's shape -- 1M judge verdicts (3 judges x 4 criteria on ~83k items) and
  100k human labels (25k items x 4 criteria), joined on (item, criterion) into 300k pairs, then
  ``bootstrap_by_group`` over 3 judges x 4 criteria x 20 strata = 240 groups with every
  statistic of ``PAIRED_STATS``. The naive figure times each statistic's library call on one
  typical group and multiplies by B x 240.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import krippendorff
import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, cohen_kappa_score, f1_score, mean_absolute_error

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import evalstats as es  # noqa: E402


# The machine is shared (load often above its 2 cores), so every evalstats figure is CPU time
# of this process (time.process_time), which contention inflates far less than wall time; the
# wall time of the headline by-group run is printed too.
def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def naive_seconds(
    call: Callable[[np.ndarray], Any], n_items: int, n_resamples: int, sample: int, seed: int = 0
) -> float:
    """Seconds of ``n_resamples`` calls of ``call(idx)``, extrapolated from ``sample`` calls."""
    rng = np.random.default_rng(seed)
    start = time.process_time()
    for _ in range(sample):
        call(rng.integers(0, n_items, n_items))
    return (time.process_time() - start) / sample * n_resamples


def row(label: str, fast: float, naive: float) -> None:
    print(f"  {label:<44} {fast:8.3f} s   naive {naive:9.1f} s   x{naive / fast:,.0f}")


def likert(n: int, scale: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    human = rng.integers(1, scale + 1, n)
    judge = np.clip(human + rng.choice([-1, 0, 0, 1, 1], n), 1, scale)
    noisy = rng.random(n) < 0.15
    judge[noisy] = rng.integers(1, scale + 1, int(noisy.sum()))
    return judge, human


def bench_kappa(b: int, sample: int, scale: int) -> None:
    print(f"kappa: 50,000 items, 1-{scale} scale, quadratic, B={b}, BCa")
    rng = np.random.default_rng(1)
    j, h = likert(50_000, scale, rng)
    cats = list(range(1, scale + 1))
    fast, _ = timed(
        lambda: es.bootstrap_kappa(
            j,
            h,
            categories=cats,
            weights="quadratic",
            rng=rng,
            options=es.BootstrapOptions(n_resamples=b),
        )
    )
    naive = naive_seconds(
        lambda i: cohen_kappa_score(j[i], h[i], labels=cats, weights="quadratic"),
        j.size,
        b,
        sample,
    )
    row("bootstrap_kappa vs loop(sklearn)", fast, naive)


def bench_alpha(b: int, sample: int, scale: int) -> None:
    print(f"alpha: 10,000 units x 3 raters, 10% missing, 1-{scale} scale, B={b}, BCa")
    rng = np.random.default_rng(2)
    truth = rng.integers(1, scale + 1, 10_000)
    data = np.where(
        rng.random((3, 10_000)) < 0.7, truth, rng.integers(1, scale + 1, (3, 10_000))
    ).astype(float)
    data[rng.random(data.shape) < 0.1] = np.nan
    for level in ("nominal", "ordinal", "interval", "ratio"):
        fast, _ = timed(
            lambda level=level: es.bootstrap_alpha(
                data,
                level_of_measurement=level,
                rng=rng,
                options=es.BootstrapOptions(n_resamples=b),
            )
        )
        naive = naive_seconds(
            lambda i, level=level: krippendorff.alpha(
                reliability_data=data[:, i], level_of_measurement=level
            ),
            data.shape[1],
            b,
            max(2, sample // 2),
        )
        row(f"bootstrap_alpha[{level}] vs loop(krippendorff)", fast, naive)


def bench_rank(b: int, sample: int, scale: int) -> None:
    print(f"rank correlations: 50,000 paired 1-{scale} scores, B={b}, BCa (c x c tables)")
    rng = np.random.default_rng(3)
    j, h = likert(50_000, scale, rng)
    cats = list(range(1, scale + 1))
    for name, fn, ref in (
        ("bootstrap_kendall_tau", es.bootstrap_kendall_tau, stats.kendalltau),
        ("bootstrap_spearman", es.bootstrap_spearman, stats.spearmanr),
    ):
        fast, _ = timed(
            lambda fn=fn: fn(
                j, h, categories=cats, rng=rng, options=es.BootstrapOptions(n_resamples=b)
            )
        )
        naive = naive_seconds(lambda i, ref=ref: ref(j[i], h[i]), j.size, b, sample)
        row(f"{name} vs loop(scipy)", fast, naive)


def report_data(scale: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """1M verdicts and 100k human labels in the shape of the judges / annotations tables."""
    n_items, n_judges, n_criteria, n_strata = 83_334, 3, 4, 20
    stratum_share = rng.dirichlet(np.full(n_strata, 3.0))
    stratum = rng.choice(n_strata, size=n_items, p=stratum_share)
    truth = rng.integers(1, scale + 1, (n_items, n_criteria))
    # Verdicts: every judge scores every criterion of every item (order shuffled).
    item = np.repeat(np.arange(n_items), n_judges * n_criteria)
    judge = np.tile(np.repeat(np.arange(n_judges), n_criteria), n_items)
    crit = np.tile(np.arange(n_criteria), n_items * n_judges)
    bias = np.array([0, 1, -1])[judge] * (rng.random(item.size) < 0.3)
    score = np.clip(truth[item, crit] + bias + rng.choice([-1, 0, 0, 0, 1], item.size), 1, scale)
    noisy = rng.random(item.size) < 0.1
    score[noisy] = rng.integers(1, scale + 1, int(noisy.sum()))
    perm = rng.permutation(item.size)
    # Human labels: 25k items x 4 criteria, close to the truth.
    labelled = rng.choice(n_items, size=25_000, replace=False)
    h_item = np.repeat(labelled, n_criteria)
    h_crit = np.tile(np.arange(n_criteria), labelled.size)
    h_score = np.clip(
        truth[h_item, h_crit] + rng.choice([-1, 0, 0, 0, 0, 1], h_item.size), 1, scale
    )
    return {
        "item": item[perm],
        "judge": judge[perm],
        "criterion": crit[perm],
        "score": score[perm].astype(float),
        "stratum_of_item": stratum,
        "h_item": h_item,
        "h_criterion": h_crit,
        "h_score": h_score.astype(float),
    }


def join(d: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(judge, criterion, stratum) keys and aligned (judge score, human score) pairs."""
    n_crit = 4
    human = np.full(d["stratum_of_item"].size * n_crit, np.nan)
    human[d["h_item"] * n_crit + d["h_criterion"]] = d["h_score"]
    paired_human = human[d["item"] * n_crit + d["criterion"]]
    keep = ~np.isnan(paired_human)
    keys = np.column_stack(
        [d["judge"][keep], d["criterion"][keep], d["stratum_of_item"][d["item"][keep]]]
    )
    return keys, d["score"][keep], paired_human[keep]


def bench_groups(b: int, sample: int, scale: int) -> None:
    rng = np.random.default_rng(4)
    gen, data = timed(lambda: report_data(scale, rng))
    t_join, (keys, j, h) = timed(lambda: join(data))
    cats = list(range(1, scale + 1))
    print(
        f"groups: {data['item'].size:,} verdicts + {data['h_item'].size:,} human labels -> "
        f"{j.size:,} pairs, 1-{scale} scale, B={b}, BCa, {len(es.PAIRED_STATS)} statistics"
    )
    wall = time.perf_counter()
    t_groups, res = timed(
        lambda: es.bootstrap_by_group(
            keys,
            j,
            h,
            stats=es.PAIRED_STATS,
            categories=cats,
            rng=rng,
            options=es.BootstrapOptions(n_resamples=b),
        )
    )
    wall = time.perf_counter() - wall
    sizes = np.array([r["kappa"].n_items for r in res.values()])
    print(
        f"  {len(res)} groups of {sizes.min()}-{sizes.max()} pairs "
        f"(median {int(np.median(sizes))}); data generation {gen:.2f} s (not counted), "
        f"join {t_join:.2f} s"
    )
    typical = next(k for k, r in res.items() if r["kappa"].n_items >= np.median(sizes))
    mask = (keys == np.array(typical)).all(axis=1)
    gj, gh = j[mask], h[mask]

    def alpha(level: str) -> Callable[[np.ndarray], float]:
        return lambda i: krippendorff.alpha(
            reliability_data=np.vstack([gj[i], gh[i]]),
            level_of_measurement=level,
            value_domain=cats,
        )

    library: dict[str, Callable[[np.ndarray], Any]] = {
        "percent_agreement": lambda i: accuracy_score(gh[i], gj[i]),
        "accuracy": lambda i: accuracy_score(gh[i], gj[i]),
        "kappa": lambda i: cohen_kappa_score(gj[i], gh[i], labels=cats),
        "kappa_linear": lambda i: cohen_kappa_score(gj[i], gh[i], labels=cats, weights="linear"),
        "kappa_quadratic": lambda i: cohen_kappa_score(
            gj[i], gh[i], labels=cats, weights="quadratic"
        ),
        "gwet_ac1": lambda i: es.gwet_ac1(gj[i], gh[i], categories=cats),  # no library AC1
        "spearman": lambda i: stats.spearmanr(gj[i], gh[i]),
        "kendall_tau_b": lambda i: stats.kendalltau(gj[i], gh[i]),
        "pearson": lambda i: stats.pearsonr(gj[i], gh[i]),
        "mae": lambda i: mean_absolute_error(gh[i], gj[i]),
        "signed_bias": lambda i: np.mean(gj[i] - gh[i]),
        "macro_f1": lambda i: f1_score(gh[i], gj[i], labels=cats, average="macro", zero_division=0),
        "alpha_nominal": alpha("nominal"),
        "alpha_ordinal": alpha("ordinal"),
        "alpha_interval": alpha("interval"),
        "alpha_ratio": alpha("ratio"),
    }
    per_resample = sum(naive_seconds(fn, gj.size, 1, sample) for name, fn in library.items())
    naive = per_resample * b * len(res)
    row("bootstrap_by_group (all statistics)", t_groups, naive)
    print(f"    (wall time of that run: {wall:.2f} s)")
    row("  + join of verdicts and labels", t_groups + t_join, naive)
    t_kq, _ = timed(
        lambda: es.bootstrap_by_group(
            keys,
            j,
            h,
            stats=["kappa_quadratic"],
            categories=cats,
            rng=rng,
            options=es.BootstrapOptions(n_resamples=b),
        )
    )
    naive_kq = naive_seconds(library["kappa_quadratic"], gj.size, b, sample) * len(res)
    row("bootstrap_by_group (kappa_quadratic only)", t_kq, naive_kq)
    # The same per-group work without the one-pass grouping: mask + bootstrap_paired per group.
    flat = (keys[:, 0] * 4 + keys[:, 1]) * 20 + keys[:, 2]
    some = sorted(res)[:24]
    start = time.process_time()
    for key in some:
        m = flat == (key[0] * 4 + key[1]) * 20 + key[2]
        es.bootstrap_paired(
            j[m],
            h[m],
            stats=es.PAIRED_STATS,
            categories=cats,
            rng=rng,
            options=es.BootstrapOptions(n_resamples=b),
        )
    per_group = (time.process_time() - start) / len(some) * len(res)
    print(
        f"  (masking + bootstrap_paired per group instead: {per_group:.2f} s, "
        f"extrapolated from {len(some)} groups)"
    )


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    free = subprocess.run(["free", "-h"], capture_output=True, text=True).stdout.splitlines()
    mem = free[1].split()[1] if len(free) > 1 else "?"
    load = os.getloadavg()
    return (
        f"nproc {os.cpu_count()}, {cpu}, RAM {mem}, Python {platform.python_version()}, "
        f"numpy {np.__version__}; load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--naive-resamples", type=int, default=10)
    parser.add_argument("--scale", type=int, default=5, help="ordinal scale 1..k")
    parser.add_argument("--only", default="kappa,alpha,rank,groups")
    args = parser.parse_args()
    print(machine())
    sections = {
        "kappa": bench_kappa,
        "alpha": bench_alpha,
        "rank": bench_rank,
        "groups": bench_groups,
    }
    for name in args.only.split(","):
        sections[name](args.resamples, args.naive_resamples, args.scale)


if __name__ == "__main__":
    main()
