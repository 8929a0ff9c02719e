"""The consistency check of pairwise ratings across presentation orders (docs/import-ratings.md).

A pairwise value is in terms of the outputs (A = output_a is better) or of the presentation
(A = the output shown first is better); a file that declares the wrong one inverts every
swapped-order rating. Where a comparison was rated in both orders, the two orders should
mostly name the same winner once the values are read in the declared convention: when they
name opposite winners far more often than not (a one-sided binomial test against 1/2 at 1 %),
the import warns. The warning cannot tell a wrong declaration from a rater that strongly
prefers one position; both make the agreement figures misleading, so the user must look.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from scipy.stats import binomtest

ALPHA = 0.01
_MEANING = {
    "outputs": "A = output_a is better",
    "presented": "A = the output shown first is better",
}


@dataclass(frozen=True, kw_only=True)
class PairwiseVote:
    """One pairwise rating, already read in its declared convention.

    `order` is which output was shown first and `value` the winner, both in terms of `pair`
    (the comparison's orientation): order "ab" = pair[0] first, value "A" = pair[0] better.
    """

    kind: str  # "human" | "judge"
    rater: str
    version: str
    criterion: str
    pair: Hashable
    order: str
    value: str  # "A" | "B" | "tie"
    convention: str


@dataclass(frozen=True, kw_only=True)
class OrderConsistency:
    """Comparisons decided in both orders, and how many of them name opposite winners."""

    who: str
    criterion: str
    n: int
    opposite: int
    p_value: float
    conventions: tuple[str, ...]

    @property
    def suspicious(self) -> bool:
        return self.n > 0 and self.p_value < ALPHA

    def message(self) -> str:
        declared = "; ".join(f"pairwise_values={c}: {_MEANING.get(c, c)}" for c in self.conventions)
        return (
            f"pairwise criterion '{self.criterion}', {self.who}: of {self.n} comparisons decided "
            f"in both presentation orders, the two orders name opposite winners in "
            f"{self.opposite} ({self.opposite / self.n:.0%}; one-sided binomial test against "
            f"1/2: p = {self.p_value:.2g} < {ALPHA:g}). Either the values are not in the "
            f"declared convention ({declared}) or the rater mostly picks the same position; "
            "check the file before trusting its agreement figures"
        )


def _majority(values: list[str]) -> str:
    a, b = values.count("A"), values.count("B")
    return "A" if a > b else ("B" if b > a else "tie")


def order_consistency(votes: Iterable[PairwiseVote]) -> list[OrderConsistency]:
    """Per judge version and criterion (a judge's two verdicts on a comparison) and per
    criterion for humans (the majority of the votes given in each order), the comparisons
    decided (not a tie) in both orders and how many name opposite winners."""
    judge_orders: dict[tuple[str, str, str], dict[Hashable, dict[str, str]]] = {}
    human_orders: dict[str, dict[Hashable, dict[str, list[str]]]] = {}
    conventions: dict[tuple[str, ...], set[str]] = {}
    for v in votes:
        if v.kind == "judge":
            group: tuple[str, ...] = (v.rater, v.version, v.criterion)
            judge_orders.setdefault((v.rater, v.version, v.criterion), {}).setdefault(
                v.pair, {}
            )[v.order] = v.value
        else:
            group = (v.criterion,)
            human_orders.setdefault(v.criterion, {}).setdefault(v.pair, {}).setdefault(
                v.order, []
            ).append(v.value)
        conventions.setdefault(group, set()).add(v.convention)
    out: list[OrderConsistency] = []

    def add(who: str, criterion: str, both: list[tuple[str, str]], group: tuple[str, ...]) -> None:
        decided = [(x, y) for x, y in both if x != "tie" and y != "tie"]
        if not decided:
            return
        opposite = sum(x != y for x, y in decided)
        p = float(binomtest(opposite, len(decided), 0.5, alternative="greater").pvalue)
        out.append(
            OrderConsistency(
                who=who,
                criterion=criterion,
                n=len(decided),
                opposite=opposite,
                p_value=p,
                conventions=tuple(sorted(conventions[group])),
            )
        )

    for (rater, version, criterion), pairs in judge_orders.items():
        both = [(o["ab"], o["ba"]) for o in pairs.values() if "ab" in o and "ba" in o]
        add(f"judge '{rater}' version '{version}'", criterion, both, (rater, version, criterion))
    for criterion, hpairs in human_orders.items():
        both = [
            (_majority(o["ab"]), _majority(o["ba"]))
            for o in hpairs.values()
            if "ab" in o and "ba" in o
        ]
        add("human raters (majority per order)", criterion, both, (criterion,))
    return out


def order_consistency_warnings(*, ratings: Iterable[PairwiseVote]) -> list[str]:
    """The warning of every group whose orders disagree far more than chance."""
    return [c.message() for c in order_consistency(ratings) if c.suspicious]
