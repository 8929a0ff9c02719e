"""Deterministic generator of the SIMULATED demo study.

Nothing here came from a real model or a real person: items, candidate outputs, the judge's
verdicts and the annotators' labels are all drawn from the probabilities below, so that the
demo shows what ReviewHub is for — a ranking that flips between strata and a judge that can be
trusted in one stratum and not in another. Every name carries "simulated".
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

DEMO_SLUG = "demo-support-answers"

# P(pass) of each simulated candidate by (language, document length); noisy input lowers it.
# The numbers are chosen so that the selection report has something to show (docs/selection.md):
# atlas is best on the deployment mix (70% English) by a clear margin; borealis, a model tuned
# for German, is clearly better in German (a ranking flip); cirrus is cheap with a fast median
# but a long latency tail that fails the plan's p95 gate.
CANDIDATE_QUALITY: dict[str, dict[tuple[str, str], float]] = {
    "atlas-70b (simulated)": {
        ("en", "short"): 0.96, ("en", "long"): 0.93, ("de", "short"): 0.62, ("de", "long"): 0.54,
    },
    "borealis-8b (simulated)": {
        ("en", "short"): 0.56, ("en", "long"): 0.46, ("de", "short"): 0.95, ("de", "long"): 0.92,
    },
    "cirrus-mini (simulated)": {
        ("en", "short"): 0.86, ("en", "long"): 0.56, ("de", "short"): 0.62, ("de", "long"): 0.46,
    },
}
NOISE_PENALTY = {"atlas-70b (simulated)": 0.08, "borealis-8b (simulated)": 0.05,
                 "cirrus-mini (simulated)": 0.25}
CANDIDATE_META = {
    "atlas-70b (simulated)": ("simulated", "atlas-70b", "atlas"),
    "borealis-8b (simulated)": ("simulated", "borealis-8b", "borealis"),
    "cirrus-mini (simulated)": ("simulated", "cirrus-mini", "cirrus"),
}
# Simulated public benchmark scores: cirrus leads the public table yet sits mid-pack on the
# team's own items, the pattern the report's public-vs-private view flags.
PUBLIC_SCORES: dict[str, dict[str, float]] = {
    "atlas-70b (simulated)": {"mmlu": 0.79, "arena_elo": 1228},
    "borealis-8b (simulated)": {"mmlu": 0.68, "arena_elo": 1151},
    "cirrus-mini (simulated)": {"mmlu": 0.83, "arena_elo": 1262},
}
# Simulated latency in ms: a uniform body scaled by model size, and for cirrus a share of
# calls that queue behind a shared, rate-limited endpoint (the tail a p95 gate is for).
LATENCY_SCALE = {"atlas-70b (simulated)": 3.5, "borealis-8b (simulated)": 2.0,
                 "cirrus-mini (simulated)": 0.8}
LATENCY_TAIL = {"cirrus-mini (simulated)": (0.12, 4_800.0, 9_000.0)}  # share, low, high
# Cost per token by model size (simulated prices).
PRICE_SCALE = {"atlas-70b (simulated)": 6.0, "borealis-8b (simulated)": 2.5,
               "cirrus-mini (simulated)": 1.0}
# The simulated judge agrees with the simulated truth this often, by language: trustworthy in
# English, not in German.
JUDGE_ACCURACY = {"en": 0.94, "de": 0.68}
ANNOTATOR_ACCURACY = 0.92

_PRODUCTS = ["router X200", "thermostat T5", "e-bike Volt", "espresso machine Crema",
             "printer P9", "vacuum robot R2", "smart lock L1", "headphones H7"]
_TOPICS_EN = [
    ("How do I reset the {p} to factory settings?", "hold the reset button for {n} seconds"),
    ("What is the warranty period of the {p}?", "the warranty lasts {n} months"),
    ("How often should I clean the filter of the {p}?", "clean the filter every {n} weeks"),
    ("Which power supply does the {p} need?", "use the {n} W power supply from the box"),
    ("How do I pair the {p} with my phone?", "open the app and press pair for {n} seconds"),
]
_TOPICS_DE = [
    ("Wie setze ich {p} auf Werkseinstellungen zurück?", "die Reset-Taste {n} Sekunden halten"),
    ("Wie lange gilt die Garantie für {p}?", "die Garantie gilt {n} Monate"),
    ("Wie oft muss ich den Filter von {p} reinigen?", "den Filter alle {n} Wochen reinigen"),
    ("Welches Netzteil braucht {p}?", "das {n}-W-Netzteil aus dem Karton verwenden"),
    ("Wie verbinde ich {p} mit meinem Handy?", "in der App {n} Sekunden lang Koppeln drücken"),
]
_FILLER_EN = ("This section of the manual covers safety notes, the contents of the box and "
              "the meaning of the status lights. ")
_FILLER_DE = ("Dieser Abschnitt des Handbuchs behandelt Sicherheitshinweise, den Lieferumfang "
              "und die Bedeutung der Statusleuchten. ")


@dataclass(frozen=True)
class DemoItem:
    external_id: str
    question: str
    document: str
    language: str
    length: str
    noisy: bool
    fact: str
    wrong_fact: str


def _noisy(text: str, rng: random.Random) -> str:
    # Noise as it arrives from real traffic: stray markup, doubled spaces, dropped letters.
    chars = list(text)
    for _ in range(max(1, len(chars) // 25)):
        i = rng.randrange(len(chars))
        chars[i] = ""
    return "<div class='msg'>" + "".join(chars).replace(" ", "  ", 3) + "</div>&nbsp;"


def demo_items(n_items: int = 300, seed: int = 7) -> list[DemoItem]:
    rng = random.Random(seed)
    items: list[DemoItem] = []
    for i in range(n_items):
        language = "de" if rng.random() < 0.4 else "en"
        length = "long" if rng.random() < 0.45 else "short"
        noisy = rng.random() < 0.2
        product = rng.choice(_PRODUCTS)
        topics = _TOPICS_DE if language == "de" else _TOPICS_EN
        question_t, fact_t = rng.choice(topics)
        n = rng.choice([3, 5, 6, 10, 12, 18, 24, 30, 45, 65])
        wrong = rng.choice([x for x in [2, 4, 7, 8, 15, 20, 36, 90] if x != n])
        fact = fact_t.format(p=product, n=n)
        wrong_fact = fact_t.format(p=product, n=wrong)
        filler = _FILLER_DE if language == "de" else _FILLER_EN
        repeats = rng.randint(12, 20) if length == "long" else rng.randint(1, 3)
        pos = rng.randint(0, repeats)
        parts = [filler] * repeats
        parts.insert(pos, f"{product}: {fact}. ")
        document = "".join(parts)
        question = question_t.format(p=product)
        if noisy:
            question = _noisy(question, rng)
        items.append(DemoItem(f"sim-{i:04d}", question, document, language, length, noisy,
                              fact, wrong_fact))
    return items


def pass_probability(candidate: str, item: DemoItem) -> float:
    p = CANDIDATE_QUALITY[candidate][(item.language, item.length)]
    if item.noisy:
        p -= NOISE_PENALTY[candidate]
    return max(0.02, min(0.98, p))


@dataclass(frozen=True)
class DemoOutput:
    item: DemoItem
    candidate: str
    text: str
    correct: bool
    helpfulness: int
    latency_ms: float
    tokens_in: int
    tokens_out: int
    cost: float
    error: str


def demo_outputs(items: list[DemoItem], seed: int = 11) -> list[DemoOutput]:
    rng = random.Random(seed)
    out: list[DemoOutput] = []
    for item in items:
        for candidate in CANDIDATE_QUALITY:
            correct = rng.random() < pass_probability(candidate, item)
            error = ""
            if rng.random() < 0.01:
                error = "simulated provider error: 503 upstream overloaded"
                correct = False
                text = ""
            elif item.language == "de":
                text = (f"Laut Handbuch: {item.fact}." if correct
                        else f"Soweit ich weiß, sollten Sie {item.wrong_fact}.")
            else:
                text = (f"According to the manual, {item.fact}." if correct
                        else f"As far as I know, {item.wrong_fact}.")
            helpfulness = rng.choice([4, 4, 5, 5, 5] if correct else [1, 2, 2, 3])
            tokens_in = len(item.document) // 4 + 40
            tokens_out = len(text) // 4 + 5
            latency = rng.uniform(300, 900) * LATENCY_SCALE[candidate]
            tail = LATENCY_TAIL.get(candidate)
            if tail is not None and rng.random() < tail[0]:
                latency = rng.uniform(tail[1], tail[2])
            out.append(DemoOutput(
                item, candidate, text, correct, helpfulness,
                latency_ms=round(latency, 1), tokens_in=tokens_in, tokens_out=tokens_out,
                cost=round((tokens_in + 3 * tokens_out) * PRICE_SCALE[candidate] * 1e-7, 7),
                error=error,
            ))
    return out


def simulated_judge_label(output: DemoOutput, rng: random.Random) -> str:
    # Leniency on long outputs (a length bias) on top of the per-language accuracy.
    if rng.random() < JUDGE_ACCURACY[output.item.language]:
        return "pass" if output.correct else "fail"
    return "fail" if output.correct else "pass"


def simulated_annotator_labels(
    output: DemoOutput, annotators: list[str], rng: random.Random
) -> Iterator[tuple[str, str, int, int | None]]:
    """(annotator, correctness label, helpfulness, severity of a failure)."""
    for name in annotators:
        correct = output.correct if rng.random() < ANNOTATOR_ACCURACY else not output.correct
        helpful = max(1, min(5, output.helpfulness + rng.choice([-1, 0, 0, 0, 1])))
        severity = None
        if not correct:
            severity = rng.choice([2, 3, 3, 4]) if "wrong" not in output.text else 3
        yield name, ("pass" if correct else "fail"), helpful, severity
