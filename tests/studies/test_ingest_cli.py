"""The import_outputs / import_items / import_candidates commands: same validation as REST,
errors as `line N: field: reason`, non-zero exit, nothing written; streaming in batches."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, ManagementUtility, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from studies import ingest
from studies.models import Candidate, Item, Output, Study
from tests.factories import CandidateFactory, ItemFactory

from .factories_ingest import csv_bytes, ndjson, seeded, snapshot

__all__ = ["seeded"]

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def run_failing(*args: str) -> str:
    err = io.StringIO()
    with pytest.raises(CommandError) as exc:
        call_command(*args, stdout=io.StringIO(), stderr=err)
    assert "nothing was written" in str(exc.value) or "no rows" in err.getvalue()
    return err.getvalue()


@pytest.mark.django_db
@pytest.mark.parametrize("ext", ["jsonl", "json", "csv"])
def test_imports_the_docs_examples(study, ext, capsys):
    study.output_schema = json.loads((EXAMPLES / "outputs.schema.json").read_text())
    study.save()
    out, _ = run("import_items", "--study", "alpha", str(EXAMPLES / f"items.{ext}"))
    assert out.strip() == "items: created 4, updated 0, unchanged 0"
    bars = capsys.readouterr().err  # tqdm writes to the process's stderr
    assert "validating: 100%" in bars and "writing: 100%" in bars and "4/4" in bars
    run("import_candidates", "--study", "alpha", str(EXAMPLES / f"candidates.{ext}"))
    out, _ = run("import_outputs", "--study", "alpha", str(EXAMPLES / f"outputs.{ext}"))
    assert out.strip() == "outputs: created 5, updated 0, unchanged 0"
    out, _ = run("import_outputs", "--study", "alpha", "--no-progress",
                 str(EXAMPLES / f"outputs.{ext}"))
    assert out.strip() == "outputs: created 0, updated 0, unchanged 5"
    assert Output.objects.filter(study=study).count() == 5
    assert Item.objects.get(study=study, external_id="q-004").input_format == "json"


@pytest.mark.django_db
def test_kind_option_and_format_override(study, tmp_path):
    path = tmp_path / "candidates.txt"
    path.write_bytes(ndjson([{"name": "m1"}, {"name": "m2", "provider": "x"}]))
    with pytest.raises(CommandError, match="cannot tell the format"):
        run("import_outputs", "--study", "alpha", "--kind", "candidates", str(path))
    out, _ = run("import_outputs", "--study", "alpha", "--kind", "candidates", "--format",
                 "ndjson", "--no-progress", str(path))
    assert "created 2" in out
    assert set(Candidate.objects.filter(study=study).values_list("name", flat=True)) == {
        "m1", "m2"}


@pytest.mark.django_db
def test_unknown_study_and_missing_file(study, tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"{}\n")
    with pytest.raises(CommandError, match="Study 'nope' not found"):
        run("import_outputs", "--study", "nope", str(path))
    with pytest.raises(CommandError, match="no such file"):
        run("import_outputs", "--study", "alpha", str(tmp_path / "missing.jsonl"))


@pytest.mark.django_db
@pytest.mark.parametrize(("kind", "name", "body", "expected"), [
    ("outputs", "o.jsonl", b'{"item": "i1", "candidate": "A"}\n{"item": \n',
     "line 2: (row): not valid JSON"),
    ("outputs", "o.jsonl", b'{"item": "i1", "candidate": "A"}\n{"item": "zz", "candidate": "A"}\n',
     "line 2: item: unknown item 'zz'"),
    ("outputs", "o.jsonl", b'{"item": "i1", "candidate": "A", "tokens_in": -4}\n',
     "line 1: tokens_in: must not be negative, got -4"),
    ("items", "i.jsonl", b'{"external_id": "n", "input": "a\\u0000"}\n',
     "line 1: input: contains a NUL character"),
    ("items", "i.csv", b"external_id,text\n", "line 1: input: required column is missing"),
    ("items", "i.jsonl", b"", "line 1: (file): the file is empty"),
    ("items", "i.json", b'[{"external_id": "a", "input": "b"}, {"external_id": "a", '
     b'"input": "c"}]', "line 1 (element [1]): external_id: duplicate external_id 'a'"),
])
def test_bad_input_prints_line_field_reason_and_writes_nothing(seeded, tmp_path, kind, name,
                                                               body, expected):
    before = snapshot(seeded)
    path = tmp_path / name
    path.write_bytes(body)
    err = run_failing("import_outputs", "--study", "alpha", "--kind", kind, "--no-progress",
                      str(path))
    assert expected in err
    assert snapshot(seeded) == before


@pytest.mark.django_db
def test_error_output_is_capped(seeded, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(ndjson([{"external_id": f"x{n}", "input": 1} for n in range(55)]))
    err = run_failing("import_items", "--study", "alpha", "--no-progress", str(path))
    lines = err.strip().splitlines()
    assert len(lines) == 51
    assert lines[0] == "line 1: input: must be a string or a JSON object/array, got number"
    assert lines[-1] == "... and 5 more errors"


@pytest.mark.django_db
def test_exit_code_is_non_zero_on_errors(seeded, tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"nope\n")
    with pytest.raises(SystemExit) as exc:
        ManagementUtility(["manage.py", "import_items", "--study", "alpha", "--no-progress",
                           "--skip-checks", str(path)]).execute()
    assert exc.value.code == 1
    captured = capsys.readouterr()
    assert "line 1: (row): not valid JSON" in captured.err
    assert "nothing was written" in captured.err


# --- streaming and batches -------------------------------------------------------------------


@pytest.fixture
def wide(study: Study) -> Study:
    """1,000 items and 3 candidates: a 3,000-output file."""
    Item.objects.bulk_create(Item(study=study, external_id=f"it-{n:04d}", input=f"q{n}")
                             for n in range(1000))
    for name in ("c0", "c1", "c2"):
        CandidateFactory(study=study, name=name)
    return study


def _outputs_file(tmp_path: Path, text: str = "answer", **extra: Any) -> Path:
    rows = ({"item": f"it-{n:04d}", "candidate": f"c{c}", "text": f"{text} {n}{c}",
             "tokens_in": n, "latency_ms": 1.5 * n, **extra}
            for n in range(1000) for c in range(3))
    path = tmp_path / "outputs.jsonl"
    with path.open("wb") as f:
        for row in rows:
            f.write(json.dumps(row).encode() + b"\n")
    return path


@pytest.mark.django_db
def test_writes_in_batches_with_a_bounded_number_of_queries(wide, tmp_path):
    path = _outputs_file(tmp_path)
    batches: list[int] = []
    with CaptureQueriesContext(connection) as queries, path.open("rb") as stream:
        result = ingest.ingest_run(study=wide, kind="outputs", stream=stream, fmt="ndjson",
                                   batch_size=500, on_batch=batches.append)
    assert result.as_dict() == {"created": 3000, "updated": 0, "unchanged": 0}
    assert batches == [500] * 6
    # Per batch: one item lookup in pass 1 and, in pass 2, truncate + COPY + merge on
    # PostgreSQL; on SQLite a select plus bulk_create's inserts, which Django splits to fit
    # SQLite's 999 query parameters. Either way the count depends on batches, never on rows.
    if connection.vendor == "postgresql":
        per_batch = 4
    else:
        per_batch = 2 + -(-500 // connection.ops.bulk_batch_size(
            [f.name for f in Output._meta.concrete_fields], []))
    assert len(queries) <= 10 + per_batch * len(batches), [q["sql"][:80] for q in queries]
    assert Output.objects.filter(study=wide).count() == 3000
    out = Output.objects.get(item__external_id="it-0999", candidate__name="c2")
    assert (out.text, out.tokens_in, out.latency_ms) == ("answer 9992", 999, 1498.5)


@pytest.mark.django_db
def test_cli_batch_size_option_and_rerun(wide, tmp_path):
    path = _outputs_file(tmp_path)
    with CaptureQueriesContext(connection) as small_batches:
        run("import_outputs", "--study", "alpha", "--batch-size", "300", "--no-progress",
            str(path))
    out, _ = run("import_outputs", "--study", "alpha", "--no-progress", str(path))
    assert out.strip() == "outputs: created 0, updated 0, unchanged 3000"
    assert len(small_batches) < 100


@pytest.mark.django_db
def test_memory_stays_far_below_the_file_size(wide, tmp_path):
    """Neither pass keeps the file or its rows: the peak of Python allocations is a fraction
    of an ~8 MB file (a batch of rows plus compact keys)."""
    path = _outputs_file(tmp_path, text="x" * 2500)
    size = path.stat().st_size
    assert size > 7_000_000
    tracemalloc.start()
    try:
        with path.open("rb") as stream:
            ingest.ingest_run(study=wide, kind="outputs", stream=stream, fmt="ndjson",
                              batch_size=200)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert Output.objects.filter(study=wide).count() == 3000
    # A batch of 200 rows of 2.5 KB is ~0.5 MB; the ORM path's INSERT SQL doubles that.
    assert peak < size / 3, (peak, size)


@pytest.mark.django_db
def test_invalid_row_at_the_end_of_a_large_file_writes_nothing(wide, tmp_path):
    path = _outputs_file(tmp_path)
    with path.open("ab") as f:
        f.write(b'{"item": "it-0001", "candidate": "c9"}\n')
    err = run_failing("import_outputs", "--study", "alpha", "--batch-size", "250",
                      "--no-progress", str(path))
    assert "line 3001: candidate: unknown candidate 'c9'" in err
    assert not Output.objects.filter(study=wide).exists()


@pytest.mark.django_db
def test_csv_cli_import_with_metadata_columns(study, tmp_path):
    path = tmp_path / "items.csv"
    path.write_bytes(csv_bytes(["external_id", "input", "metadata.lang"],
                               [["a", "hello", "en"], ["b", "hallo", "de"]]))
    out, _ = run("import_items", "--study", "alpha", "--no-progress", str(path))
    assert "created 2" in out
    assert Item.objects.get(study=study, external_id="b").metadata == {"lang": "de"}


@pytest.mark.django_db
def test_items_import_keeps_existing_outputs(seeded, tmp_path):
    from tests.factories import OutputFactory

    item = Item.objects.get(study=seeded, external_id="i1")
    OutputFactory(study=seeded, item=item, candidate=Candidate.objects.get(name="A"))
    path = tmp_path / "items.jsonl"
    path.write_bytes(ndjson([{"external_id": "i1", "input": "new text"}]))
    run("import_items", "--study", "alpha", "--no-progress", str(path))
    item.refresh_from_db()
    assert item.input == "new text"
    assert Output.objects.filter(item=item).count() == 1  # same row id: updated in place
    assert ItemFactory._meta.model.objects.filter(study=seeded).count() == 3
