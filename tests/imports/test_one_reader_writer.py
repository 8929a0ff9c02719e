"""One reader and one writer for items, candidates and outputs (issue 29, §2).

The ratings importer parses its files with the ingest's CSV dialect and strict JSON decoder
(studies/ingest/reading.py), and writes items, candidates and outputs through the ingest's
writer (studies/ingest/upsert.py `Upserter`). Each test here fails with the importer's former
own reader (`csv.DictReader`, `json.loads`) or writer (`bulk_create` / `bulk_update` of only
the fields it sets).
"""

from __future__ import annotations

import io
from typing import Any

import pytest

from imports.generic import ReadError, ratings_import, ratings_read
from studies.ingest import upsert
from studies.models import Candidate, Item, Output, Study

pytestmark = pytest.mark.django_db
HEADER = "item_id,output_id,candidate,rater_id,rater_kind,criterion,value"


def _csv(*rows: str, header: str = HEADER) -> list[tuple[int, dict[str, Any]]]:
    return list(ratings_read(io.StringIO("\n".join([header, *rows]) + "\n"), fmt="csv"))


def test_a_field_longer_than_the_csv_modules_default_cap_is_read() -> None:
    # csv's default cap is 131,072 characters: a long output text used to stop the import
    # with an unhandled csv.Error; the ingest's cap admits any field ingest accepts.
    text = "x" * 200_000
    [(line, row)] = _csv(f"q1,o1,m1,ann,human,correct,pass,{text}",
                         header=HEADER + ",output_text")
    assert line == 2 and row["output_text"] == text


def test_a_byte_order_mark_does_not_rename_the_first_column() -> None:
    rows = list(ratings_read(io.StringIO("\ufeff" + HEADER + "\nq1,o1,m1,ann,human,c,pass\n"),
                             fmt="csv"))
    assert rows == [(2, {"item_id": "q1", "output_id": "o1", "candidate": "m1",
                         "rater_id": "ann", "rater_kind": "human", "criterion": "c",
                         "value": "pass"})]


def test_short_rows_read_as_before_and_long_rows_are_refused_with_their_line() -> None:
    [(_, row)] = _csv("q1,o1,m1,ann,human,c")
    assert row["value"] is None  # as csv.DictReader gave it: the cell is absent
    with pytest.raises(ReadError, match="line 3: row: more cells than header columns"):
        _csv("q1,o1,m1,ann,human,c,pass", "q2,o2,m1,ann,human,c,pass,extra")


@pytest.mark.parametrize(("line", "message"), [
    ('{"item_id": "q1", "item_id": "q2"}', 'row: not accepted: duplicate key "item_id"'),
    ('{"item_id": "q1", "value": 1e400}', "row: not accepted: 1e400 is not a finite number"),
    ("not json", "row: not valid JSON (Expecting value)"),
])
def test_json_lines_are_decoded_by_the_ingests_strict_decoder(line: str, message: str) -> None:
    first = '{"item_id": "q0"}'
    with pytest.raises(ReadError) as info:
        list(ratings_read(io.StringIO(f"{first}\n{line}\n"), fmt="jsonl"))
    assert info.value.line == 2 and info.value.message.startswith(message), info.value.message


def test_items_candidates_and_outputs_are_written_by_the_ingest_writer(
    study: Study, monkeypatch: pytest.MonkeyPatch
) -> None:
    kinds: list[str] = []
    real_write = upsert.Upserter.write

    def spy(self: upsert.Upserter, rows: list[tuple[Any, ...]]) -> None:
        kinds.append(self.model.__name__)
        real_write(self, rows)

    monkeypatch.setattr(upsert.Upserter, "write", spy)
    summary = ratings_import(study=study, rows=_csv("q1,o1,m1,ann,human,correct,pass"))
    assert sorted(set(kinds)) == ["Candidate", "Item", "Output"]
    assert summary.created["item"] == summary.created["output"] == 1
    assert Output.objects.get(study=study).text == ""


def test_an_import_keeps_what_it_does_not_set(study: Study) -> None:
    """Fields the ratings file cannot carry (an item's context and reference, an output's
    measurements, a candidate's provider) survive an import that updates the same rows."""
    cand = Candidate.objects.create(study=study, name="m1", model_id="m1", provider="acme")
    item = Item.objects.create(study=study, external_id="q1", input="Q", context="ctx",
                               reference="ref", metadata={"source": "ingest"})
    Output.objects.create(study=study, item=item, candidate=cand, text="old", latency_ms=12.5,
                          tokens_in=7, metadata={"run": 3})
    rows = _csv("q1,o1,m1,ann,human,correct,pass,new text,fr",
                header=HEADER + ",output_text,meta.lang")
    summary = ratings_import(study=study, rows=rows)
    item.refresh_from_db()
    out = Output.objects.get(study=study)
    assert (item.context, item.reference, item.input) == ("ctx", "ref", "Q")
    assert item.metadata == {"source": "ingest", "lang": "fr"}
    assert (out.text, out.latency_ms, out.tokens_in, out.metadata) == ("new text", 12.5, 7,
                                                                      {"run": 3})
    assert Candidate.objects.get(pk=cand.pk).provider == "acme"
    assert summary.updated["item"] == summary.updated["output"] == 1
    again = ratings_import(study=study, rows=rows)
    assert again.updated["item"] == again.updated["output"] == 0
