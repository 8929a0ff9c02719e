"""The importers of other tools' exports read files with the ingest's parsers: the strict JSON
decoder (no duplicate keys, no number beyond a double) and the one CSV dialect (strict quoting),
so that a file the ingest would refuse is not read differently by a peer importer."""

from __future__ import annotations

import pytest

from imports.peers import ExportError, labelstudio, langfuse, promptfoo
from imports.peers.translation import load_json

# A stray character after a closing quote: the lenient csv dialect reads it as `xy`.
BAD_QUOTING = b'a,b,id\n"x"y,1,2\n'


def test_json_export_with_a_duplicate_key_is_refused() -> None:
    with pytest.raises(ExportError) as info:
        load_json(b'[{"id": 1, "id": 2}]', what="the export")
    assert "duplicate" in str(info.value).lower()


def test_json_export_with_a_number_beyond_a_double_is_refused() -> None:
    with pytest.raises(ExportError):
        load_json(b'[{"score": 1e400}]', what="the export")


def test_a_well_formed_json_export_still_reads() -> None:
    assert load_json(b'[{"id": 1, "score": 0.5}]', what="the export") == [{"id": 1, "score": 0.5}]


def test_promptfoo_csv_with_bad_quoting_is_refused() -> None:
    with pytest.raises(ExportError):
        promptfoo._csv_table(BAD_QUOTING)


def test_langfuse_csv_with_bad_quoting_is_refused() -> None:
    with pytest.raises(ExportError):
        langfuse._csv_table(BAD_QUOTING, "(file)", "the Langfuse export")


def test_labelstudio_csv_with_bad_quoting_in_a_row_is_refused() -> None:
    with pytest.raises(ExportError):
        labelstudio._csv_tasks(BAD_QUOTING, ",", {"results": "a"})


def test_well_formed_csv_reads_as_before() -> None:
    header, rows = langfuse._csv_table(b'a,b\n"x,1",2\n', "(file)", "the export")
    assert header == ["a", "b"] and rows == [{"a": "x,1", "b": "2"}]
