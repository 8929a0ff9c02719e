"""The selection report's gates carry the provenance of the candidate runs that measured
the outputs: "measured at C = 3, <date>"."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from generation.selectors import gate_provenance
from tests.reports.test_selection_page import selection_snapshot

from .fixtures import KEY_ENV, build, make_config, make_template
from .load_server import LoadServer
from .test_runs import _start, drain_all

pytestmark = pytest.mark.django_db


def test_the_gates_say_where_and_at_what_load_they_were_measured(
        study: Any, lead: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from studies.models import Membership, Output

    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")
    data = build(study, n_items=3, n_candidates=2)
    with LoadServer() as server:
        config = make_config(data.candidates[0], server.openai_base_url)
        run = _start(study, make_template(study), [config], concurrency=3)
        drain_all(run)
    # The other candidate's outputs came from elsewhere: no provenance for it.
    for item in data.items:
        Output.objects.create(study=study, candidate=data.candidates[1], item=item, text="x")
    rows = gate_provenance(study=study)
    assert [(r["candidate"], r["run"], r["concurrency"], r["outputs"]) for r in rows] == [
        ("cand-0", run.pk, 3, 3)]
    Membership.objects.get_or_create(study=study, user=lead,
                                     defaults={"role": Membership.Role.LEAD})
    client = Client()
    client.force_login(lead)
    snap = selection_snapshot(study)
    html = client.get(reverse("reports-selection-detail", kwargs={
        "slug": study.slug, "snapshot_id": snap.pk})).content.decode()
    assert 'id="gate-provenance"' in html
    assert "cand-0 measured at C = 3, " in html and f"(run #{run.pk}, 3 outputs)" in html
    assert "cand-1 measured" not in html
