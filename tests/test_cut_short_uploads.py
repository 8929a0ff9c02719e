"""A bulk upload whose body ends early is never imported (studies/ingest/spool.py).

Each way a body can end before its declared end is sent over a raw socket to a live server:
the client aborts (close, or reset), half-closes, cuts a CSV inside its last row's text, or
sends a chunked body without its last chunk (with and without a Content-Length beside it).
Every case must write 0 rows; where the client can still read, it gets a 4xx in the one error
shape. The view is wrapped so the test waits for the server to have finished the request
before counting rows (an abort gets no answer to wait for).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from studies.ingest_views import BulkIngestView
from studies.models import Candidate, Item, Membership, Output
from tests.factories import (
    CandidateFactory,
    ItemFactory,
    MembershipFactory,
    StudyFactory,
    UserFactory,
    api_token_create,
)

ROWS_DECLARED = 1000
ROWS_SENT = 600


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set when the live server has finished a bulk request (answered or failed)."""
    done = threading.Event()
    original = BulkIngestView.post

    def post(self: Any, request: Any, slug: str) -> Any:
        try:
            return original(self, request, slug)
        finally:
            done.set()

    monkeypatch.setattr(BulkIngestView, "post", post)
    return done


@pytest.fixture
def world(transactional_db: Any) -> dict[str, Any]:
    lead = UserFactory(username="cut-lead")
    study = StudyFactory(owner=lead, slug="cut")
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    return {"study": study, "token": api_token_create(user=lead)}


def _items_ndjson(n: int) -> bytes:
    return b"".join(json.dumps({"external_id": f"i{k}", "input": f"question {k}"}).encode()
                    + b"\n" for k in range(n))


def _candidates_ndjson(n: int) -> bytes:
    return b"".join(json.dumps({"name": f"cand-{k}"}).encode() + b"\n" for k in range(n))


def _outputs_ndjson(n: int) -> bytes:
    return b"".join(json.dumps({"item": f"o{k}", "candidate": "m", "text": f"answer {k}"})
                    .encode() + b"\n" for k in range(n))


def _head(url: str, path: str, token: str, content_type: str, extra: list[str]) -> bytes:
    parts = urlsplit(url)
    lines = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}", "Connection: close",
             f"Authorization: Bearer {token}", f"Content-Type: {content_type}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80),
                                    timeout=15)


def _read_answer(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


def _rows(kind: str) -> int:
    model = {"items": Item, "candidates": Candidate, "outputs": Output}[kind]
    return int(model.objects.count())


def _body(kind: str, world: dict[str, Any], n: int) -> bytes:
    if kind == "items":
        return _items_ndjson(n)
    if kind == "candidates":
        return _candidates_ndjson(n)
    study = world["study"]
    CandidateFactory(study=study, name="m")
    for k in range(ROWS_DECLARED):
        ItemFactory(study=study, external_id=f"o{k}")
    return _outputs_ndjson(n)


KINDS = ["items", "candidates", "outputs"]



@pytest.mark.parametrize("kind", KINDS)
def test_a_half_closed_upload_is_refused_and_nothing_written(
        live_server: Any, world: dict[str, Any], served: threading.Event, kind: str) -> None:
    whole = _body(kind, world, ROWS_DECLARED)
    before = _rows(kind)
    sent = whole[: len(_body_prefix(kind, ROWS_SENT, whole))]
    with _connect(live_server.url) as sock:
        sock.sendall(_head(live_server.url, f"/api/studies/cut/{kind}/bulk", world["token"],
                           "application/x-ndjson", [f"Content-Length: {len(whole)}"]) + sent)
        sock.shutdown(socket.SHUT_WR)
        status, body = _read_answer(sock)
    assert served.wait(15)
    assert status == 400, body
    error = body["error"]
    assert error["code"] == "incomplete_body"
    assert f"{len(sent):,} of the {len(whole):,} bytes" in error["message"]
    assert error["details"]["errors"][0]["received_bytes"] == len(sent)
    assert _rows(kind) == before


def _body_prefix(kind: str, n: int, whole: bytes) -> bytes:
    """The first `n` lines of an NDJSON body."""
    return b"".join(line + b"\n" for line in whole.split(b"\n")[:n])


@pytest.mark.parametrize("how", ["close", "reset"])
def test_an_aborted_upload_writes_nothing(live_server: Any, world: dict[str, Any],
                                         served: threading.Event, how: str) -> None:
    whole = _items_ndjson(ROWS_DECLARED)
    sent = _body_prefix("items", ROWS_SENT, whole)
    sock = _connect(live_server.url)
    sock.sendall(_head(live_server.url, "/api/studies/cut/items/bulk", world["token"],
                       "application/x-ndjson", [f"Content-Length: {len(whole)}"]) + sent)
    if how == "reset":
        # SO_LINGER 0: close sends an RST, the abrupt end of a dropped connection.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    assert served.wait(15), "the server never finished the request"
    assert Item.objects.count() == 0


def _csv(rows: int) -> bytes:
    lines = ["external_id,input"] + [f'c{k},"The full answer is {k}, said the model."'
                                     for k in range(rows)]
    lines[-1] = 'last,"The full answer is 42, and here is why: first, the premise."'
    return ("\r\n".join(lines) + "\r\n").encode()


def test_a_csv_cut_inside_its_last_row_is_not_stored_truncated(
        live_server: Any, world: dict[str, Any], served: threading.Event) -> None:
    whole = _csv(50)
    cut = whole[: whole.index(b"is 42") + len(b"is 4")]  # "The full answer is 4"
    with _connect(live_server.url) as sock:
        sock.sendall(_head(live_server.url, "/api/studies/cut/items/bulk", world["token"],
                           "text/csv", [f"Content-Length: {len(whole)}"]) + cut)
        sock.shutdown(socket.SHUT_WR)
        status, body = _read_answer(sock)
    assert served.wait(15)
    assert status == 400 and body["error"]["code"] == "incomplete_body", body
    assert Item.objects.count() == 0


def test_a_csv_whose_declared_length_ends_inside_a_quoted_field_is_refused(
        live_server: Any, world: dict[str, Any], served: threading.Event) -> None:
    # The file itself was cut (the length matches what was sent): the open quote shows it.
    whole = _csv(5)
    cut = whole[: whole.index(b"is 42") + len(b"is 4")]
    with _connect(live_server.url) as sock:
        sock.sendall(_head(live_server.url, "/api/studies/cut/items/bulk", world["token"],
                           "text/csv", [f"Content-Length: {len(cut)}"]) + cut)
        status, body = _read_answer(sock)
    assert status == 400, body
    assert body["error"]["details"]["errors"][0]["line"] == 6
    assert Item.objects.count() == 0


def _chunks(body: bytes, size: int = 4096) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        piece = body[start:start + size]
        yield f"{len(piece):x}\r\n".encode() + piece + b"\r\n"


@pytest.mark.parametrize("with_length", [False, True])
def test_a_chunked_upload_without_its_last_chunk_writes_nothing(
        live_server: Any, world: dict[str, Any], served: threading.Event,
        with_length: bool) -> None:
    whole = _csv(400)
    chunks = list(_chunks(whole))
    sent = b"".join(chunks[:-1])  # neither the last data chunk nor the 0-length terminator
    extra = ["Transfer-Encoding: chunked"]
    if with_length:
        # Both headers: a server framing by the length would read chunk markers as CSV rows.
        extra.append(f"Content-Length: {len(sent)}")
    with _connect(live_server.url) as sock:
        sock.sendall(_head(live_server.url, "/api/studies/cut/items/bulk", world["token"],
                           "text/csv", extra) + sent)
        sock.shutdown(socket.SHUT_WR)
        status, body = _read_answer(sock)
    assert status == 411, body
    assert body["error"]["code"] == "length_required"
    assert Item.objects.count() == 0


def test_a_whole_body_is_still_imported(live_server: Any, world: dict[str, Any],
                                        served: threading.Event) -> None:
    whole = _items_ndjson(ROWS_DECLARED)
    with _connect(live_server.url) as sock:
        sock.sendall(_head(live_server.url, "/api/studies/cut/items/bulk", world["token"],
                           "application/x-ndjson", [f"Content-Length: {len(whole)}"]) + whole)
        status, body = _read_answer(sock)
    assert status == 200, body
    assert body["created"] == ROWS_DECLARED
    assert Item.objects.count() == ROWS_DECLARED
