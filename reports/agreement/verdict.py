"""The verdict rule: its text with the parameters in force, and its decision per cell.

Pure module: no Django, no numpy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TRUSTWORTHY = "trustworthy"
NOT_TRUSTWORTHY = "not trustworthy"
TOO_FEW = "too few labels"


def rule_text(p: Mapping[str, Any]) -> str:
    """The verdict rule, written out with the parameters in force."""
    return (
        f"A cell (judge version x criterion x stratum) with fewer than {p['min_items']} subjects "
        "rated by both the judge and at least one human is 'too few labels'. Otherwise, when at "
        f"least {p['min_alt_annotators']} annotators each share {p['min_items']} or more "
        "subjects with the judge and another human, the alternative annotator test decides "
        f"(Calderon, Reichart & Dror 2025; epsilon = {p['epsilon']:g} for "
        f"{p['annotator_type']} annotators, Benjamini-Yekutieli at q = {p['q']:g}): "
        "'trustworthy' iff the judge's winning rate is at least 0.5. Without that overlap, the "
        "judge's primary coefficient against the human consensus (Cohen's kappa for binary, "
        "categorical and pairwise criteria, quadratic-weighted kappa for ordinal ones, "
        "Krippendorff's interval alpha with the human mean for interval ones) is "
        "compared with the human ceiling on the same subjects (mean pairwise Cohen's kappa "
        "between annotators, quadratic-weighted for ordinal; Krippendorff's alpha when no pair "
        f"shares {p['min_pair_items']} subjects, and always for interval criteria): "
        "'trustworthy' iff the lower end of the "
        f"judge's {p['level']:.0%} interval is at least the ceiling minus {p['margin']:g}. "
        "Continuous-score judges have no kappa and are decided by the alternative annotator test "
        "only. With no ceiling to compare against, the cell is 'too few labels'. Intervals: "
        f"{p['ci']} bootstrap, {p['n_resamples']} resamples of items (all ratings of an item "
        f"move together), seed {p['seed']}. Human consensus: majority vote, ties broken by the "
        "first annotator (lowest account id; for imports the order of first appearance) whose "
        "label has the top count; for ordinal criteria the mean (rounded half up where a scale "
        "point is needed); for interval criteria the mean, not rounded."
    )


def rule_items(p: Mapping[str, Any]) -> list[str]:
    """The rule of `rule_text` as a short list, one step per item (the audit page shows it so;
    the stored result keeps the paragraph)."""
    return [
        f"Fewer than {p['min_items']} subjects rated by the judge and at least one human: "
        "too few labels.",
        f"At least {p['min_alt_annotators']} annotators each share {p['min_items']} or more "
        "subjects with the judge and another human: the alternative annotator test decides "
        f"(Calderon, Reichart & Dror 2025; epsilon {p['epsilon']:g} for {p['annotator_type']} "
        f"annotators, Benjamini-Yekutieli at q = {p['q']:g}); trustworthy iff the winning rate "
        "is at least 0.5.",
        "Otherwise the judge's primary coefficient against the human consensus (Cohen's kappa; "
        "quadratic-weighted for ordinal criteria; interval alpha for interval ones) is held to "
        "the human ceiling on the same subjects (mean pairwise kappa between annotators; "
        f"Krippendorff's alpha when no pair shares {p['min_pair_items']} subjects, and for "
        "interval criteria): trustworthy iff the lower end of its "
        f"{p['level']:.0%} interval is at least the ceiling minus {p['margin']:g}.",
        "Continuous scores are decided by the alternative annotator test only; without it, or "
        "with no ceiling, the cell is too few labels.",
        f"Intervals: {p['ci']} bootstrap, {p['n_resamples']} resamples of items (all ratings "
        f"of an item move together), seed {p['seed']}.",
        "Human consensus: majority vote, ties broken by the first annotator with the top "
        "label (lowest account id; for imports the order of first appearance); the mean for "
        "ordinal and interval criteria (interval: not rounded).",
    ]


def cell_verdict(
    n: int,
    primary: dict[str, Any],
    ceiling: dict[str, Any],
    alt: dict[str, Any] | None,
    continuous: bool,
    p: Mapping[str, Any],
) -> tuple[str, str, str]:
    """(verdict, basis, reason) by the rule of `rule_text`."""
    if n < p["min_items"]:
        return (
            TOO_FEW,
            "min_items",
            f"{n} subjects with judge and human labels (< {p['min_items']})",
        )
    if alt is not None and alt["n_tested"] >= p["min_alt_annotators"]:
        rate = alt["winning_rate"] or 0.0
        verdict = TRUSTWORTHY if alt["passed"] else NOT_TRUSTWORTHY
        return (
            verdict,
            "alt_test",
            (
                f"alternative annotator test: winning rate {rate:.2f} over "
                f"{alt['n_tested']} annotators (needs >= 0.5), epsilon "
                f"{alt['epsilon']:g}"
            ),
        )
    if continuous:
        return (
            TOO_FEW,
            "none",
            (
                "continuous scores need the alternative annotator test, and too "
                "few annotators share enough subjects with the judge"
            ),
        )
    ceil = ceiling.get("point")
    low = primary.get("ci_low")
    if ceil is None or low is None:
        return TOO_FEW, "none", "no human-human overlap on these subjects to set a ceiling"
    verdict = TRUSTWORTHY if low >= ceil - p["margin"] else NOT_TRUSTWORTHY
    return (
        verdict,
        "ceiling",
        (
            f"interval lower bound {low:.3f} vs ceiling {ceil:.3f} "
            f"({ceiling['point_metric']}) - margin {p['margin']:g}"
        ),
    )


__all__ = ["NOT_TRUSTWORTHY", "TOO_FEW", "TRUSTWORTHY", "cell_verdict", "rule_items", "rule_text"]
