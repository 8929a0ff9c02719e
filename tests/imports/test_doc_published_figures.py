"""docs/import-ratings.md, "Reproducing published figures" (issue 25, §2): the steps printed
there, run exactly as printed on the real releases (PandaLM, HANNA), give the published
figures.

The section's ```python block is written to the file it names and run with this interpreter
(`$REVIEWHUB_DATA_DIR` expanded, standard output redirected to the named file, as the shell
would); its `python manage.py` lines run through `call_command`. Each row of the figures table
is then checked three ways: the published column is what the data README records from the
paper, the report's figure rounds to it at the paper's precision, and the ReviewHub column is
the report's figure. A second test counts the same figures from the raw release files with
scikit-learn (the majority computed here), so the published figure is not only matched by
the report but also by an independent reading of the data.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sklearn.metrics import accuracy_score, precision_recall_fscore_support

from tests.imports.test_doc_examples_conventions import _figure, _run

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parents[2] / "docs" / "import-ratings.md"
SECTION = re.compile(r"<!-- published: ([\w-]+) -->\n(.*?)<!-- /published -->", re.S)
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)
FIGURE_ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+?) \| ([^|]+?) \|$", re.M)

# The PandaLM README / data/compute_metrics.py, as recorded in $REVIEWHUB_DATA_DIR/README.md.
PUBLISHED = {
    ("gpt-3.5-turbo", "accuracy"): "0.7107",
    ("gpt-3.5-turbo", "macro_precision"): "0.5879",
    ("gpt-3.5-turbo", "macro_recall"): "0.5736",
    ("gpt-3.5-turbo", "macro_f1"): "0.5755",
    ("pandalm-7b", "accuracy"): "0.6677",
    ("pandalm-7b", "macro_precision"): "0.5738",
    ("pandalm-7b", "macro_recall"): "0.5750",
    ("pandalm-7b", "macro_f1"): "0.5743",
}


@dataclass
class Published:
    name: str
    scripts: dict[str, str] = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)
    figures: list[tuple[str, str, str]] = field(default_factory=list)


def _sections() -> list[Published]:
    out = []
    for name, body in SECTION.findall(DOC.read_text(encoding="utf-8")):
        sec = Published(name)
        for m in FENCE.finditer(body):
            lang, content = m.group(1), m.group(2)
            if lang == "python":
                [*_, fname] = re.findall(r"`([\w.-]+\.py)`", body[: m.start()])
                sec.scripts[fname] = content
            elif lang == "console":
                sec.commands += [ln[2:] for ln in content.splitlines() if ln.startswith("$ ")]
        sec.figures = [(m.group(1), m.group(2).strip(), m.group(3).strip())
                       for m in FIGURE_ROW.finditer(body)]
        out.append(sec)
    return out


SECTIONS = _sections()


def _data_dir() -> Path:
    value = os.environ.get("REVIEWHUB_DATA_DIR")
    if not value or not (Path(value) / "pandalm").is_dir():
        if os.environ.get("CI"):
            pytest.fail("REVIEWHUB_DATA_DIR must point at ../shared/data in CI")
        pytest.skip("REVIEWHUB_DATA_DIR is not set to the shared data folder")
    return Path(value)


def test_the_section_has_its_examples() -> None:
    assert [s.name for s in SECTIONS] == ["pandalm", "hanna"]
    sec = SECTIONS[0]
    assert list(sec.scripts) == ["pandalm_to_csv.py"]
    assert [c.split()[:2] for c in sec.commands] == [
        ["python", "pandalm_to_csv.py"], ["python", "manage.py"], ["python", "manage.py"]]
    # Every published figure of the data README is in the table, and no other.
    got = {}
    for path, published, _ in sec.figures:
        m = re.fullmatch(r"cells\[judge=([\w.-]+), stratum=overall\]\.metrics\.(\w+)", path)
        assert m, path
        got[m.group(1), m.group(2)] = published
    assert got == PUBLISHED


# The data README's and the authors' published HANNA figures (BLEU vs the human Relevance
# mean; tests/reports/test_judgebench_hanna_report.py checks the same against scipy).
PUBLISHED_HANNA = {
    "cells[judge=BLEU, stratum=overall].metrics.pearson": "0.1124278",
    "cells[judge=BLEU, stratum=overall].metrics.spearman": "0.1040944",
    "cells[judge=BLEU, stratum=overall].metrics.kendall": "0.0737787",
    "correlation_levels[judge=BLEU, stratum=overall].system.pearson": "0.7988772",
    "correlation_levels[judge=BLEU, stratum=overall].system.spearman": "0.7212121",
    "correlation_levels[judge=BLEU, stratum=overall].system.kendall": "0.5555556",
}


def test_the_hanna_table_is_the_published_one() -> None:
    assert {path: published for path, published, _ in SECTIONS[1].figures} == PUBLISHED_HANNA


@pytest.mark.parametrize("sec", SECTIONS, ids=lambda s: s.name)
def test_the_printed_steps_reproduce_the_published_figures(
    sec: Published, lead: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = _data_dir()
    for fname, content in sec.scripts.items():
        (tmp_path / fname).write_text(content, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result: dict[str, Any] | None = None
    for command in sec.commands:
        words = shlex.split(command.replace("$REVIEWHUB_DATA_DIR", str(data_dir)))
        if words[:2] == ["python", "manage.py"]:
            out, err, error = _run(words[2:])
            assert error is None, f"{command}: {error}"
            assert "warning" not in err, err  # the printed steps run clean
            if words[2] == "import_ratings" and sec.name == "pandalm":
                summary = json.loads(out[out.index("{\n"):])
                assert summary["created"]["annotation"] == 2997
                assert summary["created"]["verdict"] == 1998
            elif words[2] == "report":
                result = json.loads(Path(words[words.index("--out") + 1]).read_text())["result"]
            continue
        # A script of the section, its standard output redirected as the shell would.
        assert words[0] == "python" and words[-2] == ">", command
        with open(words[-1], "w", encoding="utf-8") as fh:
            subprocess.run([sys.executable, *words[1:-2]], stdout=fh, check=True, timeout=120)
    assert result is not None
    for path, published, shown in sec.figures:
        got = _figure(path, result, None)
        places = len(published.split(".")[1])
        assert round(got, places) == float(published), f"{path}: published {published}, {got}"
        assert shown == f"{got:.{places}f}", f"{path}: the page shows {shown}, the report {got}"


def test_the_published_figures_from_the_raw_files(tmp_path: Path) -> None:
    """The same figures counted from the release with scikit-learn: the majority of the three
    annotators (their labels never split three ways), the judges read by the paper's rule."""
    folder = _data_dir() / "pandalm"
    tests = json.loads((folder / "testset-v1.json").read_text())
    gold = []
    for t in tests:
        votes = [int(t[f"annotator{k}"]) for k in (1, 2, 3)]
        top = max(votes, key=votes.count)
        assert votes.count(top) >= 2
        gold.append(top)
    for judge, fname, key in (("gpt-3.5-turbo", "gpt-3.5-turbo-testset-v1.json", "gpt_result"),
                              ("pandalm-7b", "pandalm-7b-testset-v1.json", "pandalm_result")):
        got = {r["idx"]: str(r[key]).strip() for r in json.loads((folder / fname).read_text())}
        pred = [{"1": 1, "2": 2}.get(got[t["idx"]], 0) for t in tests]
        p, r, f, _ = precision_recall_fscore_support(gold, pred, average="macro")
        counted = {"accuracy": accuracy_score(gold, pred), "macro_precision": p,
                   "macro_recall": r, "macro_f1": f}
        for metric, value in counted.items():
            assert f"{value:.4f}" == PUBLISHED[judge, metric], (judge, metric, value)
