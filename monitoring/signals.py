"""Label-free signals of one traffic row (pure, no Django): refusals and prompt injection.

**Refusal.** The output is a refusal when its first 200 characters, lower-cased, match one of
`REFUSAL_PATTERNS` (an apology or "I can't / I cannot / I won't / I'm unable to" followed by a
verb of helping or answering, or "as an AI"). A refusal rate that moves is one of the signs
that the model behind an unchanged API name has changed.

**Prompt injection.** A heuristic detector on the *input*: each rule of `INJECTION_RULES` is a
regular expression for a known family of attempts (instruction override, role reassignment,
prompt extraction, chat-template tokens smuggled into the text, "jailbreak" personas, hidden
instructions in a long encoded blob). A row is flagged when any rule matches; the rules that
matched are stored, so the rate can be read per rule. It is a tripwire for the *rate over
time*, not a classifier: it misses paraphrased attacks and flags text that quotes one, and
both errors are stable over time, which is what a rate needs. docs/monitoring.md lists the
rules.
"""

from __future__ import annotations

import re

REFUSAL_PATTERNS: tuple[re.Pattern[str], ...] = tuple(re.compile(p) for p in (
    r"^\s*(i'?m|i am) sorry,? but",
    r"\bi (can(no|')t|cannot|won'?t|am unable to|'m unable to|am not able to) "
    r"(help|assist|provide|answer|comply|do that|fulfil|fulfill|share)",
    r"\bas an ai( language model)?\b",
    r"^\s*sorry,? (but )?i (can(no|')t|cannot)",
))

INJECTION_RULES: dict[str, re.Pattern[str]] = {
    "override": re.compile(
        r"\b(ignore|disregard|forget|override)\b[^.\n]{0,40}\b(previous|prior|above|earlier|"
        r"all|any|the|your)\b[^.\n]{0,20}\b(instructions?|prompts?|rules|directions)\b",
        re.IGNORECASE),
    "role_reassignment": re.compile(
        r"\byou are (now|no longer)\b|\bfrom now on,? you\b|\bact as (an?|the) (unfiltered|"
        r"unrestricted|jailbroken)\b", re.IGNORECASE),
    "prompt_extraction": re.compile(
        r"\b(reveal|print|show|repeat|output|tell me)\b[^.\n]{0,30}\b(system|hidden|initial|"
        r"original) (prompt|instructions?|message)\b", re.IGNORECASE),
    "template_tokens": re.compile(
        r"<\|(im_start|im_end|system|endoftext)\|>|\[/?INST\]|<<SYS>>|^\s*#{2,}\s*system\b",
        re.IGNORECASE | re.MULTILINE),
    "jailbreak_persona": re.compile(
        r"\b(DAN|do anything now|developer mode|jailbreak(ed)?)\b", re.IGNORECASE),
    "encoded_blob": re.compile(r"[A-Za-z0-9+/]{200,}={0,2}"),
}


def is_refusal(output: str) -> bool:
    """Whether the output reads as a refusal (see the module docstring)."""
    head = output[:200].lower()
    return any(p.search(head) for p in REFUSAL_PATTERNS)


def injection_rules(text: str) -> list[str]:
    """The names of the injection rules the input matches, in rule order ([] = not flagged)."""
    return [name for name, rule in INJECTION_RULES.items() if rule.search(text)]
