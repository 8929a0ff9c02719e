"""The data page's counts follow an upload without a reload: after "Outputs: 6 created" the
candidate cards say how many outputs each has (they said "0 outputs" until the page was
reloaded), and the heading counts the items an items upload created."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from studies.models import Candidate, Item, Membership
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.factories import MembershipFactory, StudyFactory, UserFactory

PAGE = "/studies/echo/data/"


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_candidate_cards_count_the_outputs_just_uploaded(new_session: Any,
                                                         tmp_path: Path) -> None:
    lead = UserFactory(username="counts-lead")
    lead.set_password("pw-counts-lead-1")
    lead.save()
    study = StudyFactory(slug="echo", owner=lead)
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    for name in ("cand-a", "cand-b"):
        Candidate.objects.create(study=study, name=name)
    s = new_session("desktop")
    s.login("counts-lead", "pw-counts-lead-1")
    page = s.page
    page.goto(s.url(PAGE))
    # The harness's recording route drops File bodies.
    s.context.unroute("**/*")
    assert page.locator("#cands-h").inner_text() == "0 items · 2 candidates"

    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"external_id": f"q-{i}", "input": f"Question {i}?"})
                             + "\n" for i in range(3)))
    page.locator("#ingest-kind").select_option("items")
    page.locator("#ingest-file").set_input_files(str(items))
    page.get_by_role("button", name="Upload").click()
    page.locator("#ingest-result").wait_for()
    page.locator("#cands-h", has_text="3 items · 2 candidates").wait_for(timeout=5_000)
    assert Item.objects.filter(study=study).count() == 3

    outputs = tmp_path / "outputs.jsonl"
    outputs.write_text("".join(
        json.dumps({"item": f"q-{i}", "candidate": c, "text": f"Answer {i} from {c}"}) + "\n"
        for i in range(3) for c in ("cand-a", "cand-b")))
    page.locator("#ingest-kind").select_option("outputs")
    page.locator("#ingest-file").set_input_files(str(outputs))
    page.get_by_role("button", name="Upload").click()
    page.locator("#ingest-result").wait_for()
    assert page.locator("#ingest-result").inner_text() == (
        "Outputs: 6 created, 0 updated, 0 unchanged.")
    card = page.get_by_role("region", name="cand-a")
    card.get_by_text("3 outputs.").wait_for(timeout=5_000)
    assert "0 outputs" not in page.locator("#data-listing").inner_text()
    assert page.get_by_role("region", name="cand-b").get_by_text("3 outputs.").count() == 1
    # The refreshed cards are the server's: their outputs and links are there too.
    assert card.get_by_text("Answer 0 from cand-a").count() == 1
    assert card.get_by_role("link", name="All outputs of cand-a").count() == 1
    assert not s.page_errors
