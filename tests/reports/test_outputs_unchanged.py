"""Behaviour unchanged: the agreement, calibration and selection reports of the demo and of the
visible real data show exactly what tests/golden/ recorded (result JSON, CSV, SVG, PDF text,
pages).

The golden files were written from the code before the report kinds were reshaped (the
agreement ones, `agreement*` and `reports-list.html`, from the code before the agreement kind
was; the others were left as they were and still matched); any
difference fails with a diff of the first differing file. A change that is meant to alter an
output rewrites them with `python tests/golden/update.py --update` and commits the diff beside
the change (tests/golden/README.md). Sequences are reset so that ids are the same every run.
"""

from __future__ import annotations

import difflib
import json
import math
import os
from pathlib import Path

import pytest

from .golden_outputs import CASES, artefacts

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
UPDATE = os.environ.get("REVIEWHUB_GOLDEN_UPDATE") == "1"

# HANNA's three reports with every output fetched take longer than the suite's 600 s on a
# loaded two-core machine.
pytestmark = [pytest.mark.postgres,
              pytest.mark.django_db(transaction=True, reset_sequences=True),
              pytest.mark.timeout(2400)]


def _diff(name: str, want: str, got: str) -> str:
    lines = difflib.unified_diff(want.splitlines(), got.splitlines(), f"golden/{name}",
                                 f"now/{name}", lineterm="", n=2)
    return "\n".join(list(lines)[:80])


# Floats of a result JSON are compared to 1e-12 relative: the last digit of a p-value from
# scipy's special functions differs between CPUs (the same code and wheels gave
# 0.6128387422784163 on an AMD EPYC and ...164 on an Intel Xeon), which is not a change a
# reader sees; every other byte of every output must match.
REL = 1e-12


def _same_json(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=REL, abs_tol=1e-300)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _same(name: str, want: str, got: str) -> bool:
    if got == want:
        return True
    if name.endswith(".json"):
        try:
            return _same_json(json.loads(want), json.loads(got))
        except json.JSONDecodeError:
            return False
    return False


def test_the_json_comparison_sees_a_change() -> None:
    assert _same("r.json", '{"p": 0.6128387422784163}', '{"p": 0.6128387422784164}')
    assert not _same("r.json", '{"p": 0.6128387422784163}', '{"p": 0.6128387422}')
    assert not _same("r.json", '{"n": 3}', '{"n": 3.0}')
    assert not _same("r.csv", "p\n0.6128387422784163\n", "p\n0.6128387422784164\n")


@pytest.mark.parametrize("case", list(CASES))
def test_outputs_unchanged(case: str) -> None:
    got = artefacts(CASES[case]())
    folder = GOLDEN / case
    if UPDATE:
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for name, text in got.items():
            (folder / name).write_bytes(text.encode("utf-8"))
        return
    assert folder.is_dir(), f"no golden files for {case}: run tests/golden/update.py --update"
    want = {p.name: p.read_bytes().decode("utf-8") for p in folder.iterdir()}
    assert sorted(got) == sorted(want), "the set of outputs changed"
    changed = [name for name in sorted(want) if not _same(name, want[name], got[name])]
    assert not changed, (f"{len(changed)} outputs of {case} changed: {changed[:10]}\n"
                         + _diff(changed[0], want[changed[0]], got[changed[0]]))
