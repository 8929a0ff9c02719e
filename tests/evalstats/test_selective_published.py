"""The guaranteed-agreement policy with the product's defaults against the procedure as Jung,
Brahman & Choi state it ("Trust or Escalate", ICLR 2025, §3: fixed-sequence testing of
thresholds from the highest down, each with the exact binomial p-value, stopping at the first
that fails), written here from that description without evalstats (issue 24 §3).

Simulated judges (labelled simulated) with known accuracy-confidence curves; 240 seeded
calibration/test splits each. Checked: the product's coverage on the test half is within 0.02
of the direct procedure's, and the guarantee (agreement on the trusted population >= 1 - alpha,
from the known curve) holds in at least 1 - delta of the splits, less 3 standard errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalstats.selective import threshold_grid, trust_threshold
from studies.spec import DEFAULT_PLAN_POLICY

ALPHA, DELTA = 0.15, 0.10
SPLITS = 240
N = 500  # 250 calibration rows, 250 test rows, as the halves of a 500-pair set


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P(Binom(n, p) <= k), summed term by term (no scipy)."""
    return math.fsum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def direct_threshold(conf: list[float], correct: list[int], *, alpha: float, delta: float,
                     step: float, min_count: int) -> float | None:
    """The paper's procedure, step by step: candidate lambdas 1, 1 - step, ..., 0.5 in that
    fixed order; at each, the calibration rows with confidence >= lambda, their error count k
    out of n, p = P(Binom(n, alpha) <= k); accept while p <= delta, stop at the first p > delta.
    lambdas that trust fewer than `min_count` rows are not tested (too few to test at all)."""
    chosen = None
    lam_count = round(0.5 / step)
    for j in range(lam_count + 1):
        lam = round(1.0 - j * step, 12)
        trusted = [c >= lam for c in conf]
        n = sum(trusted)
        if n < min_count:
            continue
        k = sum(1 for t, ok in zip(trusted, correct, strict=True) if t and not ok)
        if _binom_cdf(k, n, alpha) > delta:
            break
        chosen = lam
    return chosen


def _judge(kind: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A simulated judge: confidence in its own decision and P(the human agrees | confidence)."""
    if kind == "logprob":  # most confidences piled up just below 1, as logprobs give
        top = rng.random(n) < 0.45
        c = np.where(top, 1 - np.clip(rng.exponential(0.002, n), 0, 0.5),
                     0.5 + 0.5 * rng.beta(2, 1.5, n))
        acc = 0.55 + 0.40 * (c - 0.5) / 0.5
    elif kind == "calibrated":
        c = 0.5 + 0.5 * rng.beta(2, 1, n)
        acc = c
    else:  # overconfident
        c = 0.5 + 0.5 * rng.beta(3, 1, n)
        acc = 0.5 + 0.8 * (c - 0.5)
    return np.round(c, 4), acc


@pytest.mark.parametrize("kind", ["logprob", "calibrated", "overconfident"])
def test_product_matches_the_published_procedure_and_keeps_its_guarantee(kind: str) -> None:
    step = float(DEFAULT_PLAN_POLICY["grid_step"])
    m = int(DEFAULT_PLAN_POLICY["min_count"])
    grid = threshold_grid(step)
    # The population: agreement above each lambda, from a large draw of the known curve.
    big_c, big_acc = _judge(kind, 400_000, np.random.default_rng(12345))
    order = np.argsort(-big_c)
    cum = np.cumsum(big_acc[order])
    sorted_c = big_c[order]

    def population_agreement(lam: float) -> float:
        k = int(np.searchsorted(-sorted_c, -lam, side="right"))
        return float(cum[k - 1] / k) if k else 1.0

    diffs, held, covs = [], [], []
    for split in range(SPLITS):
        rng = np.random.default_rng([24, split])
        c, acc = _judge(kind, N, rng)
        ok = (rng.random(N) < acc).astype(int)
        cal, test = slice(0, N // 2), slice(N // 2, N)
        product = trust_threshold(c[cal], ok[cal], alpha=ALPHA, delta=DELTA, min_count=m,
                                  thresholds=grid)
        direct = direct_threshold(c[cal].tolist(), ok[cal].tolist(), alpha=ALPHA,
                                  delta=DELTA, step=step, min_count=m)
        cov_p = float(np.mean(product.trusted(c[test])))
        cov_d = 0.0 if direct is None else float(np.mean(c[test] >= direct))
        diffs.append(abs(cov_p - cov_d))
        covs.append(cov_p)
        held.append(product.threshold is None
                    or population_agreement(product.threshold) >= 1 - ALPHA)
    assert float(np.mean(diffs)) <= 0.02 and max(diffs) <= 0.02, max(diffs)
    rate = float(np.mean(held))
    se = math.sqrt(DELTA * (1 - DELTA) / SPLITS)
    assert rate >= 1 - DELTA - 3 * se, rate
    if kind != "overconfident":
        # Where the judge is good at the top, the defaults trust most verdicts.
        assert float(np.mean(covs)) > 0.5, np.mean(covs)


def test_the_defaults_trust_where_the_first_rows_hold_two_errors() -> None:
    """The failure the defaults were chosen against: 120 calibration rows at confidence
    0.999 with 6 errors, two of them among the 30 most confident. Testing only distinct
    confidences from exactly 30 rows up stops at once; the grid with the product's minimum
    count tests all 120 together and trusts them, as the direct procedure does."""
    c = np.r_[np.linspace(0.9999, 0.9990, 120), np.linspace(0.98, 0.5, 80)]
    ok = np.ones(200, dtype=int)
    ok[[3, 17, 45, 70, 90, 110]] = 0
    ok[120:] = (np.arange(80) % 2).astype(int)
    old = trust_threshold(c, ok, alpha=ALPHA, delta=DELTA, min_count=30)
    assert old.threshold is None
    new = trust_threshold(c, ok, alpha=ALPHA, delta=DELTA,
                          min_count=int(DEFAULT_PLAN_POLICY["min_count"]),
                          thresholds=threshold_grid(float(DEFAULT_PLAN_POLICY["grid_step"])))
    direct = direct_threshold(c.tolist(), ok.tolist(), alpha=ALPHA, delta=DELTA, step=0.001,
                              min_count=int(DEFAULT_PLAN_POLICY["min_count"]))
    assert new.threshold == direct and new.n_trusted >= 120


def test_agreement_interval_is_clopper_pearson() -> None:
    """The reported interval of trusted agreement is the exact (Clopper-Pearson) interval at
    level 1 - delta, as statsmodels computes it; the cascade's is that of all trusted rows."""
    from statsmodels.stats.proportion import proportion_confint

    from evalstats.selective import trust_cascade

    rng = np.random.default_rng(5)
    c, acc = _judge("calibrated", 400, rng)
    ok = (rng.random(400) < acc).astype(int)
    res = trust_threshold(c, ok, alpha=ALPHA, delta=DELTA, min_count=30,
                          thresholds=threshold_grid(0.001)).to_json()
    agree = res["n_trusted"] - res["errors_trusted"]
    lo, hi = proportion_confint(agree, res["n_trusted"], alpha=DELTA, method="beta")
    assert res["agreement_interval"] == pytest.approx([lo, hi], abs=1e-9)
    c2, acc2 = _judge("overconfident", 400, rng)
    ok2 = (rng.random(400) < acc2).astype(int)
    cas = trust_cascade([c2, c], [ok2, ok], alpha=ALPHA, delta=DELTA, min_count=30,
                        thresholds=threshold_grid(0.001)).to_json()
    lo, hi = proportion_confint(cas["n_trusted"] - cas["errors_trusted"], cas["n_trusted"],
                                alpha=DELTA, method="beta")
    assert cas["agreement_interval"] == pytest.approx([lo, hi], abs=1e-9)
    assert sum(cas["shares"]) == pytest.approx(cas["coverage"])
