"""The data page follows the server's own work on a big file in Chromium: after the upload bar,
the phase and the rows read (while the file is checked) then written, several times over; a big
file with one bad row near its end still lists that row by line and field, with nothing written.
Progress events come every REVIEWHUB_INGEST_PROGRESS_SECONDS, set to 0 here so that a file of
a few hundred kilobytes gives several of them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from studies.models import Item, Membership
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.factories import MembershipFactory, StudyFactory, UserFactory

PAGE = "/studies/delta/data/"
N_ROWS = 6000  # ~1.6 MB: read in ~256 KB pieces, written in two batches of 5000
PAYLOAD = "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">"
CHECKING = re.compile(r"^Checking the rows: ([\d,]+) read, (\d+) % of the file…$")
WRITING = re.compile(r"^Writing the rows: ([\d,]+) of ([\d,]+) written…$")

# Every text the status line takes, with the page's width at that moment: textContent replaces
# the text node, so each value is an added node of some mutation record (a callback may batch
# several changes, so reading the element in the callback would lose some).
RECORD_STATUSES = """() => { window.__statuses = [];
    new MutationObserver(records => records.forEach(r => r.addedNodes.forEach(n =>
        window.__statuses.push([n.textContent, document.documentElement.scrollWidth]))))
      .observe(document.getElementById('ingest-status'), {childList: true}); }"""


def _file(path: Path, bad_line: int | None = None) -> Path:
    with path.open("w") as f:
        for i in range(1, N_ROWS + 1):
            text: Any = f"question {i}: " + "lorem ipsum " * 18
            if i == 1:
                text = PAYLOAD  # untrusted text in the file stays text
            if i == bad_line:
                text = 5
            f.write(json.dumps({"external_id": f"q-{i:05d}", "input": text}) + "\n")
    return path


def _count(text: str) -> int:
    return int(text.replace(",", ""))


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_big_upload_shows_the_servers_progress_in_chromium(
        new_session: Any, viewport: str, tmp_path: Path, settings: Any) -> None:
    settings.REVIEWHUB_INGEST_PROGRESS_SECONDS = 0
    lead = UserFactory(username="progress-lead")
    lead.set_password("pw-progress-lead-1")
    lead.save()
    study = StudyFactory(slug="delta", owner=lead)
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    s = new_session(viewport)
    s.login("progress-lead", "pw-progress-lead-1")
    page = s.page
    page.goto(s.url(PAGE))
    # The harness's recording route would buffer the streamed answer (and drops File bodies).
    s.context.unroute("**/*")
    page.evaluate(RECORD_STATUSES)
    width = page.viewport_size["width"]

    # A big file with one bad row near its end: checked to the end, listed, nothing written.
    page.locator("#ingest-kind").select_option("items")
    page.locator("#ingest-file").set_input_files(str(_file(tmp_path / "bad.jsonl",
                                                           bad_line=N_ROWS - 1)))
    page.get_by_role("button", name="Upload").click()
    page.locator("#ingest-errors").wait_for(timeout=60_000)
    errors = page.locator("#ingest-errors").inner_text()
    assert f"line {N_ROWS - 1}, input" in errors, errors
    assert "nothing was written" in errors
    assert not Item.objects.filter(study=study).exists()
    assert page.locator("#ingest-status").inner_text() == ""

    # The same file without the bad row: the page follows the checking, then the writing.
    page.evaluate("window.__statuses = []")
    page.locator("#ingest-file").set_input_files(str(_file(tmp_path / "items.jsonl")))
    page.get_by_role("button", name="Upload").click()
    page.locator("#ingest-result").wait_for(timeout=60_000)
    assert page.locator("#ingest-result").inner_text() == (
        f"Items: {N_ROWS} created, 0 updated, 0 unchanged.")
    assert Item.objects.filter(study=study).count() == N_ROWS
    statuses: list[list[Any]] = page.evaluate("window.__statuses")
    texts = [t for t, _w in statuses]
    checking = [(_count(m[1]), int(m[2])) for t in texts if (m := CHECKING.match(t))]
    writing = [(_count(m[1]), _count(m[2])) for t in texts if (m := WRITING.match(t))]
    # Several checking events with growing row counts, then the writing with its counts.
    assert len(checking) >= 3 and len({rows for rows, _pct in checking}) >= 3, texts
    assert checking == sorted(checking) and 0 < checking[-1][0] <= N_ROWS, checking
    assert writing == [(0, N_ROWS), (5000, N_ROWS), (N_ROWS, N_ROWS)], texts
    last_checking = max(i for i, t in enumerate(texts) if CHECKING.match(t))
    first_writing = min(i for i, t in enumerate(texts) if WRITING.match(t))
    assert last_checking < first_writing
    # No status line ever pushed the page sideways (390 px included).
    assert max(w for _t, w in statuses) <= width, statuses
    assert page.evaluate("window.__pwned === undefined")
    # Keyboard: the form's controls are reached in order by Tab.
    page.locator("#ingest-kind").focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "ingest-file"
    assert not s.page_errors
