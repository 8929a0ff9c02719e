"""A lead starts a candidate run in Chromium: the cost estimate shows before the run can
start, the run page then shows its progress, its errors by kind and the candidates' outputs
as text (a hostile answer is shown, never run)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from generation.models import GenerationRun
from generation.services import generation_config_create, prompt_template_create
from studies.models import Candidate
from tests.browser.factories import PASSWORD, grading_study
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.generation.load_server import LoadServer
from tests.generation.test_runs import drain_all
from tests.judges.provider_server import raw

HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_estimate_start_and_follow_a_candidate_run(new_session: Any, settings: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS = 1
    monkeypatch.setattr("generation.runs._default_enqueue", lambda r, c: None)
    g = grading_study()
    candidate = Candidate.objects.create(study=g.study, name="cand-generated")
    refused = raw(200, json.dumps({"id": "r", "choices": [{"index": 0, "finish_reason": "stop",
                  "message": {"role": "assistant", "content": None, "refusal": "no"}}]}))
    first_item = g.study.items.order_by("id").first()
    assert first_item is not None
    with LoadServer(answer=lambda req: HOSTILE,
                    scripts={first_item.input[:40]: [refused]}) as server:
        config, _ = generation_config_create(candidate=candidate, config={
            "provider": "openai", "base_url": server.openai_base_url, "model": "sim-model",
            "parameters": {"max_tokens": 32},
            "prices": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}})
        prompt_template_create(study=g.study, template={"system": "Be brief.",
                                                        "user": "{input}"})
        s = new_session("desktop")
        s.login(g.lead.username, PASSWORD)
        page = s.page
        page.goto(s.url("/studies/support/generation/"))
        assert page.locator("#btn-start").count() == 0
        page.locator(f"input[name=configs][value='{config.pk}']").check()
        page.locator("input[name=concurrency]").fill("2")
        page.locator("#btn-estimate").click()
        page.locator("#estimate").wait_for()
        n = g.study.items.count()
        assert page.locator("#est-requests").inner_text() == str(n)
        assert "USD" in page.locator("#est-cost").inner_text()
        assert GenerationRun.objects.count() == 0
        page.locator("#btn-start").click()
        page.locator("#run-h").wait_for()
        run = GenerationRun.objects.get()
        assert "Measured at C = 2" in page.locator("#run-h").inner_text()
        drain_all(run)
        page.reload()
        assert page.locator("#p-status").inner_text() == "Done"
        assert "refused" in page.locator("#p-errors").inner_text()
        cells = page.locator("#recent td.output-text")
        texts = [cells.nth(i).inner_text() for i in range(cells.count())]
        assert any("<script>" in t for t in texts)  # shown as text
        assert page.locator("#recent img").count() == 0 and page.title() != "pwned"
        assert not s.page_errors
        s.screenshot("docs/img/candidate-run.png")
