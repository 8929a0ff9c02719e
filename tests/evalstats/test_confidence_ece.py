"""ECE of a pairwise judge in confidence bins over [0.5, 1] (issue 24 §2): the confidence in
the chosen side, max(p, 1 - p), against whether that side is the human's, in equal-width bins
of [0.5, 1]; checked against the textbook sum written out here (Guo et al. 2017, eq. 3)."""

from __future__ import annotations

import numpy as np

from evalstats.calibration import calibration_diagnostics, confidence_of
from evalstats.options import BootstrapOptions


def _textbook_ece(conf: np.ndarray, correct: np.ndarray, low: float, n_bins: int) -> float:
    edges = np.linspace(low, 1.0, n_bins + 1)
    total = 0.0
    for b in range(n_bins):
        lo, hi = edges[b], edges[b + 1]
        # Guo et al.'s bins are (lo, hi]; the first also takes its lower edge.
        m = (conf > lo) & (conf <= hi) if b else (conf >= lo) & (conf <= hi)
        if m.any():
            total += m.sum() / conf.size * abs(correct[m].mean() - conf[m].mean())
    return float(total)


def test_pairwise_ece_in_confidence_bins() -> None:
    rng = np.random.default_rng(11)
    p_a = rng.uniform(0, 1, 3000)  # a simulated judge's P(A better)
    p_side = np.maximum(p_a, 1 - p_a)  # P(its chosen side is right), as it states it
    human_agrees = rng.random(p_a.size) < 0.5 + 0.8 * (p_side - 0.5)  # over-confident
    correct, conf = confidence_of(human_agrees.astype(float), p_side)
    assert conf.min() >= 0.5
    options = BootstrapOptions(n_resamples=50)
    d = calibration_diagnostics(correct, conf, n_bins=10, rng=np.random.default_rng(0),
                                options=options, low=0.5)
    # With continuous confidences no value sits on a bin edge, so the edge conventions agree.
    assert abs(d.ece.value - _textbook_ece(conf, correct, 0.5, 10)) < 1e-12
    # The [0, 1] binning of the same numbers uses only the upper 5 of its 10 bins: a coarser,
    # different figure, which is why both binnings are documented.
    d01 = calibration_diagnostics(correct, conf, n_bins=10, rng=np.random.default_rng(0),
                                  options=options)
    assert abs(d01.ece.value - _textbook_ece(conf, correct, 0.0, 10)) < 1e-12
    assert d01.ece.value != d.ece.value
    # A probability below 0.5 counts for the other side.
    c2, k2 = confidence_of(np.array([1.0, 0.0]), np.array([0.2, 0.3]))
    assert list(k2) == [0.8, 0.7] and list(c2) == [0.0, 1.0]
