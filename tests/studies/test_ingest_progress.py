"""Bulk ingest with `?progress=ndjson`: the server streams its progress (validating by bytes of
the file, then writing by rows) and then exactly the answer a plain request gets, as the last
line; a rejected file streams the same error body and writes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import override_settings

from studies.models import Item, Membership
from tests.factories import MembershipFactory, StudyFactory, UserFactory

# The service runs in a thread with its own connection, which sees only committed rows.
pytestmark = pytest.mark.django_db(transaction=True)
URL = "/api/studies/prog/items/bulk"


def _client(api_client: Any) -> Any:
    lead = UserFactory(username="prog-lead")
    study = StudyFactory(slug="prog", owner=lead)
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    api_client.force_authenticate(lead)
    return api_client, study


def _body(n: int, bad_line: int | None = None) -> bytes:
    rows = []
    for i in range(n):
        row: dict[str, Any] = {"external_id": f"x{i}", "input": "q " * 50}
        if bad_line is not None and i + 1 == bad_line:
            row["input"] = 5
        rows.append(json.dumps(row))
    return ("\n".join(rows) + "\n").encode()


def _events(response: Any) -> list[dict[str, Any]]:
    assert response["Content-Type"] == "application/x-ndjson"
    text = b"".join(response.streaming_content).decode()
    return [json.loads(line) for line in text.splitlines()]


@override_settings(REVIEWHUB_INGEST_PROGRESS_SECONDS=0)
def test_progress_then_the_plain_answer(api_client: Any) -> None:
    client, study = _client(api_client)
    body = _body(3000)
    r = client.post(URL + "?progress=ndjson", body, content_type="application/x-ndjson")
    assert r.status_code == 200
    # Passed on line by line by a proxy, and never kept by a cache.
    assert r["X-Accel-Buffering"] == "no" and r["Cache-Control"] == "no-store"
    events = _events(r)
    phases = [e for e in events if "phase" in e]
    validating = [e for e in phases if e["phase"] == "validating"]
    writing = [e for e in phases if e["phase"] == "writing"]
    assert validating and writing and phases.index(validating[0]) < phases.index(writing[0])
    assert all(e["unit"] == "bytes" and e["total"] == len(body) for e in validating)
    assert all(e["unit"] == "rows" and e["total"] == 3000 for e in writing)
    # More than the phase changes: the file is read in several pieces.
    assert len(validating) >= 2
    done = [e["done"] for e in validating]
    assert done == sorted(done) and done[-1] <= len(body)
    assert events[-1] == {"result": {"created": 3000, "updated": 0, "unchanged": 0}}
    assert Item.objects.filter(study=study).count() == 3000
    # The same file again, without progress: the plain answer is the streamed result's.
    plain = client.post(URL, body, content_type="application/x-ndjson")
    assert plain.json() == {"created": 0, "updated": 0, "unchanged": 3000}


def test_a_rejected_file_streams_the_same_error_and_writes_nothing(api_client: Any) -> None:
    client, study = _client(api_client)
    body = _body(50, bad_line=7)
    streamed = _events(client.post(URL + "?progress=ndjson", body,
                                   content_type="application/x-ndjson"))
    plain = client.post(URL, body, content_type="application/x-ndjson")
    assert plain.status_code == 400
    last = streamed[-1]
    assert last["status"] == 400 and last["error"] == plain.json()["error"]
    assert last["error"]["details"]["errors"][0]["line"] == 7
    assert not Item.objects.filter(study=study).exists()


def test_access_and_size_are_checked_before_streaming(api_client: Any, settings: Any) -> None:
    client, _study = _client(api_client)
    settings.REVIEWHUB_MAX_UPLOAD_BYTES = 100
    r = client.post(URL + "?progress=ndjson", _body(10), content_type="application/x-ndjson")
    assert r.status_code == 413 and r["Content-Type"].startswith("application/json")
    other = UserFactory()
    client.force_authenticate(other)
    r = client.post(URL + "?progress=ndjson", _body(1), content_type="application/x-ndjson")
    assert r.status_code == 404


@override_settings(REVIEWHUB_INGEST_PROGRESS_SECONDS=0)
def test_events_count_the_rows_read_then_written(api_client: Any) -> None:
    client, _study = _client(api_client)
    body = _body(6000)  # ~0.7 MB: read in several ~256 KB pieces; two batches of 5000 written
    events = _events(client.post(URL + "?progress=ndjson", body,
                                 content_type="application/x-ndjson"))
    validating = [e for e in events if e.get("phase") == "validating"]
    writing = [e for e in events if e.get("phase") == "writing"]
    read = [e["rows"] for e in validating]
    # Rows read so far, growing with the bytes read; never more than the file holds.
    assert read == sorted(read) and read[0] == 0 and 0 < read[-1] <= 6000, read
    assert len(set(read)) >= 3, read
    # Each event's count is consistent with its bytes: about 117 bytes a row here.
    per_row = len(body) / 6000
    for e in validating[1:]:
        assert abs(e["rows"] * per_row - e["done"]) <= 2 * 65536 + per_row, e
    assert [e["rows"] for e in writing] == [e["done"] for e in writing] == [0, 5000, 6000]
    assert events[-1] == {"result": {"created": 6000, "updated": 0, "unchanged": 0}}


def test_a_failure_while_writing_leaves_nothing_half_written(
        api_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from studies.ingest import service

    client, study = _client(api_client)
    written: list[int] = []

    class FailingUpserter(service._Upserter):
        def write(self, rows: list[tuple[Any, ...]]) -> None:
            if written:  # the first batch of 5000 goes in; the second fails
                raise RuntimeError("disk full")
            super().write(rows)
            written.append(len(rows))

    monkeypatch.setattr(service, "_Upserter", FailingUpserter)
    events = _events(client.post(URL + "?progress=ndjson", _body(12000),
                                 content_type="application/x-ndjson"))
    assert written == [5000]
    assert any(e.get("phase") == "writing" for e in events)
    last = events[-1]
    assert last["status"] == 500 and last["error"]["code"] == "server_error", last
    assert "nothing was written" in last["error"]["message"]
    # The one transaction rolled back the batch that had gone in.
    assert not Item.objects.filter(study=study).exists()
