"""The streaming readers on their own: line numbers, element indexes, chunk boundaries."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from studies import ingest

ITEMS = ingest.SPECS["items"]


class Trickle(io.RawIOBase):
    """A stream that returns at most `step` bytes per read, like a slow socket."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.pos, self.step = data, 0, step

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        n = self.step if n < 0 else min(n, self.step)
        chunk = self.data[self.pos:self.pos + n]
        self.pos += len(chunk)
        return chunk


def records(data: bytes, fmt: ingest.Format, step: int | None = None) -> list[ingest.RawRecord]:
    stream: Any = Trickle(data, step) if step else io.BytesIO(data)
    return list(ingest.iter_records(stream, fmt, ITEMS))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
rows = st.lists(st.dictionaries(st.text(max_size=8), json_values, max_size=4), min_size=1,
                max_size=8)


@settings(max_examples=150, deadline=None)
@given(rows=rows, step=st.integers(1, 40), indent=st.sampled_from([None, 0, 2]),
       ascii_only=st.booleans())
def test_json_array_reader_matches_json_loads(rows, step, indent, ascii_only):
    doc = json.dumps(rows, indent=indent, ensure_ascii=ascii_only).encode()
    got = records(doc, "json", step)
    assert [r.data for r in got] == rows
    assert [r.index for r in got] == list(range(len(rows)))
    # Each element's line is where it starts in the file.
    text = doc.decode()
    expected_lines = []
    decoder, pos = json.JSONDecoder(), text.index("[") + 1
    for _ in rows:
        while text[pos] in " \t\r\n,":
            pos += 1
        expected_lines.append(text.count("\n", 0, pos) + 1)
        _, pos = decoder.raw_decode(text, pos)
    assert [r.line for r in got] == expected_lines


@settings(max_examples=60, deadline=None)
@given(rows=rows)
def test_ndjson_reader_matches_json_loads(rows):
    doc = ("\n".join(json.dumps(r) for r in rows) + "\n\n").encode()
    got = records(doc, "ndjson")
    assert [r.data for r in got] == rows
    assert [r.line for r in got] == list(range(1, len(rows) + 1))


def test_json_array_with_a_huge_element_and_numbers_at_chunk_edges():
    big = "é" * 300_000  # 600 kB of two-byte characters: many buffer refills
    doc = json.dumps([{"n": 12345}, {"s": big}, {"n": 6.5e-7}]).encode()
    for step in (1, 3, 1 << 16):
        got = records(doc, "json", step if step > 1 else None)
        assert [r.data for r in got] == [{"n": 12345}, {"s": big}, {"n": 6.5e-7}]


def test_bom_is_skipped():
    bom = b"\xef\xbb\xbf"
    assert records(bom + b'{"a": 1}\n', "ndjson")[0].data == {"a": 1}
    assert records(bom + b'[{"a": 1}]', "json")[0].data == {"a": 1}
    assert records(bom + b"external_id,input\nx,y\n", "csv")[0].data == {
        "external_id": "x", "input": "y"}


def test_csv_line_numbers_follow_multiline_cells():
    doc = b'external_id,input\na,"line one\nline two"\n\nb,plain\r\nc,"x"\n'
    got = records(doc, "csv")
    assert [(r.line, (r.data or {})["external_id"]) for r in got] == [
        (2, "a"), (5, "b"), (6, "c")]
    assert (got[0].data or {})["input"] == "line one\nline two"


def test_csv_malformed_quotes_are_reported_with_the_line():
    got = records(b'external_id,input\na,b\nc,"d"e\n', "csv")
    assert got[-1].errors is not None
    err = got[-1].errors[0]
    assert (err.line, err.field) == (3, "(row)") and "malformed CSV" in err.reason


def test_data_after_the_json_array_is_an_error():
    got = records(b'[{"a": 1}]\n{"b": 2}', "json")
    assert got[-1].errors and "after the closing ']'" in got[-1].errors[0].reason


def test_row_error_text_and_dict():
    err = ingest.RowError(7, "text", "too long", index=3)
    assert str(err) == "line 7 (element [3]): text: too long"
    assert err.as_dict() == {"line": 7, "path": "text", "message": "too long", "index": 3}
    assert str(ingest.RowError(2, "item", "unknown")) == "line 2: item: unknown"


@pytest.mark.parametrize(("content_type", "fmt"), [
    ("application/json", "json"), ("application/json; charset=utf-8", "json"),
    ("application/x-ndjson", "ndjson"), ("APPLICATION/X-NDJSON", "ndjson"),
    ("text/csv; charset=UTF-8", "csv"),
])
def test_content_type_mapping(content_type, fmt):
    assert ingest.format_for_content_type(content_type) == fmt


def test_file_extension_mapping():
    assert ingest.format_for_path("a/b.JSONL") == "ndjson"
    assert ingest.format_for_path("x.ndjson") == "ndjson"
    assert ingest.format_for_path("x.csv") == "csv"
    assert ingest.format_for_path("x.json") == "json"
    assert ingest.format_for_path("x.txt") is None
