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
    changed = [name for name in sorted(want) if got[name] != want[name]]
    assert not changed, (f"{len(changed)} outputs of {case} changed: {changed[:10]}\n"
                         + _diff(changed[0], want[changed[0]], got[changed[0]]))
