"""The data page: a lead uploads items, candidates and outputs (the examples in docs/examples)
through the ingest service, sees per-candidate outputs, and bad rows are listed with their line
and field with nothing written; in Chromium the file goes to the REST bulk endpoint with a
progress bar, and untrusted output text stays inert."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from studies.models import Candidate, Item, Membership, Output
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.factories import MembershipFactory, StudyFactory, UserFactory

pytestmark = pytest.mark.django_db
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
PAGE = "/studies/alpha/data/"
PAYLOAD = "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">"
# Session, user, study and role, candidates, outputs, and the background-work heartbeat that
# lead pages read (reviewhub/heartbeat.py): whatever the number of candidates.
QUERY_BOUND = 7


def _lead(password: str = "pw-lead-data-1") -> tuple[Any, Any]:
    lead = UserFactory(username="data-lead")
    lead.set_password(password)
    lead.save()
    study = StudyFactory(slug="alpha", owner=lead)
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    return lead, study


def _post(client: Client, kind: str, name: str, body: bytes) -> Any:
    return client.post(PAGE, {"kind": kind, "file": SimpleUploadedFile(name, body)})


def test_examples_upload_in_order_and_the_page_lists_them() -> None:
    lead, study = _lead()
    client = Client()
    client.force_login(lead)
    for kind in ("items", "candidates", "outputs"):
        body = (EXAMPLES / f"{kind}.jsonl").read_bytes()
        r = _post(client, kind, f"{kind}.jsonl", body)
        assert r.status_code == 200, r.content.decode()[:500]
        n = len(body.splitlines())
        assert f"{n} created, 0 updated, 0 unchanged" in r.content.decode()
    assert Item.objects.filter(study=study).count() == len(
        (EXAMPLES / "items.jsonl").read_bytes().splitlines())
    html = client.get(PAGE).content.decode()
    for c in Candidate.objects.filter(study=study):
        assert c.name in html
    # Uploading the same file again changes nothing.
    again = _post(client, "items", "items.jsonl", (EXAMPLES / "items.jsonl").read_bytes())
    assert "0 created, 0 updated" in again.content.decode()


def test_bad_rows_are_listed_by_line_and_field_and_nothing_is_written() -> None:
    lead, study = _lead()
    client = Client()
    client.force_login(lead)
    body = b'{"external_id": "a", "input": "ok"}\n{"external_id": "b", "input": 5}\n'
    r = _post(client, "items", "items.jsonl", body)
    assert r.status_code == 400
    html = r.content.decode()
    assert "line 2" in html and "<strong>input</strong>" in html
    assert not Item.objects.filter(study=study).exists()
    for data, needle in (({"kind": "items"}, "no file chosen"),
                         ({"kind": "nope", "file": SimpleUploadedFile("a.jsonl", b"{}")},
                          "<strong>kind</strong>"),
                         ({"kind": "items", "file": SimpleUploadedFile("a.txt", b"{}")},
                          "unknown file type")):
        r = client.post(PAGE, data)
        assert r.status_code == 400 and needle in r.content.decode()


def test_only_leads_and_output_text_is_escaped() -> None:
    lead, study = _lead()
    client = Client()
    client.force_login(lead)
    _post(client, "items", "i.jsonl", b'{"external_id": "x", "input": "q"}\n')
    _post(client, "candidates", "c.jsonl", b'{"name": "m"}\n')
    _post(client, "outputs", "o.jsonl",
          json.dumps({"item": "x", "candidate": "m", "text": PAYLOAD}).encode() + b"\n")
    assert Output.objects.filter(study=study).count() == 1
    html = client.get(PAGE).content.decode()
    assert "<script>window.__pwned" not in html and "&lt;script&gt;" in html
    for role in (Membership.Role.VIEWER, Membership.Role.ANNOTATOR):
        user = UserFactory()
        MembershipFactory(study=study, user=user, role=role)
        other = Client()
        other.force_login(user)
        assert other.get(PAGE).status_code == 404
        assert _post(other, "items", "i.jsonl", b'{"external_id": "y", "input": "q"}\n'
                     ).status_code == 404
    assert not Item.objects.filter(external_id="y").exists()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_upload_with_progress_through_the_api_in_chromium(new_session: Any, viewport: str,
                                                          tmp_path: Path) -> None:
    _lead_user, study = _lead()
    s = new_session(viewport)
    s.login("data-lead", "pw-lead-data-1")
    page = s.page
    page.goto(s.url("/studies/alpha/"))
    page.get_by_role("link", name="Data", exact=True).click()
    assert page.url.endswith(PAGE)
    # The harness re-sends every fetch/XHR itself to record its body, and Playwright drops a
    # request body that is a File (Blob): let the uploads go out as the browser sends them.
    s.context.unroute("**/*")
    # A bad file first: the rows' problems appear as text, nothing is written.
    bad = tmp_path / "items.jsonl"
    bad.write_text('{"external_id": "a", "input": ' + json.dumps(PAYLOAD) + '}\n'
                   '{"external_id": "b"}\n')
    page.locator("#ingest-kind").select_option("items")
    page.locator("#ingest-file").set_input_files(str(bad))
    page.get_by_role("button", name="Upload").click()
    page.locator("#ingest-errors").wait_for()
    assert "line 2" in page.locator("#ingest-errors").inner_text()
    assert not Item.objects.filter(study=study).exists()
    # Every text the status line shows, as it changes. Each record's added text node, not the
    # element's text when the observer runs: two events that arrive in one chunk set the text
    # twice in one task, and the observer's callback runs once after both.
    page.evaluate("""() => { window.__statuses = [];
        new MutationObserver((records) => records.forEach((r) => r.addedNodes.forEach(
            (n) => window.__statuses.push(n.textContent))))
          .observe(document.getElementById('ingest-status'), {childList: true}); }""")
    for kind in ("items", "candidates", "outputs"):
        page.locator("#ingest-kind").select_option(kind)
        page.locator("#ingest-file").set_input_files(str(EXAMPLES / f"{kind}.jsonl"))
        # The file goes to the REST bulk endpoint, the API's own code path, which streams
        # the server's progress (checking, then writing) before its answer.
        with page.expect_response(lambda r, k=kind: r.url.endswith(
                f"/api/studies/alpha/{k}/bulk?progress=ndjson")) as answered:
            page.get_by_role("button", name="Upload").click()
        assert answered.value.status == 200
        page.locator("#ingest-result").wait_for()
        assert f"{kind.capitalize()}: " in page.locator("#ingest-result").inner_text()
    assert Output.objects.filter(study=study).count() == len(
        (EXAMPLES / "outputs.jsonl").read_bytes().splitlines())
    # The server's progress reached the page: checking the file, then writing its rows.
    statuses = page.evaluate("window.__statuses")
    assert any(t.startswith("Checking the rows: ") for t in statuses), statuses
    assert any(t.startswith("Writing the rows: ") for t in statuses), statuses
    page.reload()
    assert page.evaluate("window.__pwned === undefined")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"horizontal scroll: {width}px"
    if viewport == "desktop":
        s.screenshot("docs/img/study-data.png")
    assert not s.page_errors  # (the console logs the bad file's deliberate 400)


def test_outputs_per_candidate_take_a_fixed_number_of_queries(
        django_assert_max_num_queries: Any) -> None:
    lead, _study = _lead()
    client = Client()
    client.force_login(lead)
    items = b"".join(json.dumps({"external_id": f"i{i}", "input": "q"}).encode() + b"\n"
                     for i in range(25))
    _post(client, "items", "i.jsonl", items)
    _post(client, "candidates", "c.jsonl",
          b"".join(json.dumps({"name": f"m{c}"}).encode() + b"\n" for c in range(6)))
    _post(client, "outputs", "o.jsonl", b"".join(
        json.dumps({"item": f"i{i}", "candidate": f"m{c}", "text": f"t{c}-{i}"}).encode() + b"\n"
        for c in range(6) for i in range(25)))
    with django_assert_max_num_queries(QUERY_BOUND):
        html = client.get(PAGE).content.decode()
    # 20 of each candidate's 25 outputs, the first by id.
    assert "t5-19" in html and "t5-20" not in html and "t0-0" in html


def test_the_data_page_costs_the_same_queries_at_any_size() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    lead, _study = _lead()
    client = Client()
    client.force_login(lead)

    def grow(n_candidates: int, n_items: int) -> int:
        _post(client, "items", "i.jsonl", b"".join(
            json.dumps({"external_id": f"i{i}", "input": "q"}).encode() + b"\n"
            for i in range(n_items)))
        _post(client, "candidates", "c.jsonl", b"".join(
            json.dumps({"name": f"m{c}"}).encode() + b"\n" for c in range(n_candidates)))
        _post(client, "outputs", "o.jsonl", b"".join(
            json.dumps({"item": f"i{i}", "candidate": f"m{c}", "text": "t"}).encode() + b"\n"
            for c in range(n_candidates) for i in range(n_items)))
        with CaptureQueriesContext(connection) as queries:
            assert client.get(PAGE).status_code == 200
        return len(queries)

    small = grow(1, 3)
    assert small == grow(8, 40)  # 8 candidates of 40 outputs: the same queries as 1 of 3
