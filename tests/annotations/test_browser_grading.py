"""The grading page in a real browser (Debian's Chromium through Playwright).

Covers: keyboard-only grading of three outputs with progress and a revision; untrusted output
that tries to run script; blinding of the page and of every network response; the severity
question appearing exactly when a criterion fails; the phone layout; the screenshots in docs/.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from annotations.models import Annotation, AnnotationRevision, Assignment
from annotations.selectors import grading_context
from annotations.services import annotation_submit, assignment_next
from judges.models import Judge, JudgeJob, JudgeRun, JudgeVersion, Verdict
from tests.browser.factories import PASSWORD, SUPPORT_ITEMS, grading_study
from tests.browser.harness import *  # noqa: F403

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

GRADE = "/studies/support/grade/"


def _severity_visible(page: Any, key: str) -> bool:
    return bool(page.locator(f"#severity-{key}").is_visible())


def _wait_progress(page: Any, done_today: int) -> None:
    page.wait_for_function(
        "n => document.getElementById('progress-today').textContent.trim() === String(n)",
        arg=done_today,
    )


def _press_and_wait_for_next(page: Any, key: str = "Enter") -> None:
    with page.expect_navigation():
        page.keyboard.press(key)


def _tab_to(page: Any, selector: str, limit: int = 150) -> None:
    """Press Tab until `selector` has focus: reaching it by keyboard, as a user would."""
    for _ in range(limit):
        if page.evaluate("s => document.activeElement === document.querySelector(s)", selector):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached {selector}")


def _current_output_id(annotator: Any) -> int:
    live = Assignment.objects.select_related("entry").get(
        annotator=annotator, status=Assignment.Status.LEASED
    )
    assert live.entry.output_id is not None
    return live.entry.output_id


def test_keyboard_only_grading_of_three_outputs_with_progress_and_a_revision(
    browser_session: Any,
) -> None:
    gs = grading_study(n_annotators=1, k=1)
    ann = gs.annotators[0]
    s = browser_session
    page = s.page
    s.login(ann.username, PASSWORD)
    s.goto(GRADE)
    assert page.locator("#progress-today").inner_text() == "0"
    # Left after the current one (which is leased to this annotator now).
    assert page.locator("#progress-left").inner_text() == "3"

    # 1: everything passes. Each digit answers the current criterion, which then advances.
    first = _current_output_id(ann)
    assert "is-current" in (page.locator("#crit-correct").get_attribute("class") or "")
    page.keyboard.press("1")
    assert "is-current" in (page.locator("#crit-clarity").get_attribute("class") or "")
    page.keyboard.press("4")
    page.keyboard.press("1")
    assert page.evaluate("document.activeElement.id") == "submit-button"
    _press_and_wait_for_next(page)
    _wait_progress(page, 1)
    assert page.locator("#progress-left").inner_text() == "2"

    # 2: every criterion fails; each failure asks for its severity, answered by digit too.
    # A note typed into the severity text box must not trigger shortcuts (digits, S, Enter).
    second = _current_output_id(ann)
    assert second != first
    page.keyboard.press("2")  # Correctness: fail
    assert _severity_visible(page, "correct")
    page.keyboard.press("3")  # its severity
    page.keyboard.press("Shift+Tab")  # back into the note box of the severity question
    assert page.evaluate("document.activeElement.id") == "severity_note-correct"
    page.keyboard.type("Steps 1 and 2 are wrong; support would get the ticket back. S?")
    page.keyboard.press("Tab")
    page.keyboard.press("2")  # Clarity 2 < threshold 3: fails
    assert _severity_visible(page, "clarity")
    page.keyboard.press("4")
    page.keyboard.press("3")  # Tone: rude (not a pass label)
    assert _severity_visible(page, "tone")
    page.keyboard.press("2")
    _press_and_wait_for_next(page)
    _wait_progress(page, 2)

    # 3: J/K move by hand; ? toggles the shortcut list; Enter on Submit submits.
    third = _current_output_id(ann)
    page.keyboard.press("1")  # Correctness pass -> Clarity
    page.keyboard.press("k")  # back to Correctness
    page.keyboard.press("2")  # change to fail -> its severity question
    assert _severity_visible(page, "correct")
    page.keyboard.press("1")
    page.keyboard.press("5")
    page.keyboard.press("j")  # already on Tone: j stays on the last target
    page.keyboard.press("2")  # Tone neutral
    page.keyboard.press("?")
    assert page.locator("#shortcuts").is_visible()
    page.keyboard.press("Escape")
    assert not page.locator("#shortcuts").is_visible()
    _press_and_wait_for_next(page)
    _wait_progress(page, 3)
    assert page.locator("#progress-total").inner_text() == "3"
    assert page.locator("#progress-left").inner_text() == "0"

    by_output = {
        (a.output_id, a.criterion.key): a
        for a in Annotation.objects.filter(annotator=ann).select_related("criterion")
    }
    assert len(by_output) == 9
    assert {k: by_output[(first, k)].value for k in ("correct", "clarity", "tone")} == {
        "correct": "pass", "clarity": "4", "tone": "friendly"
    }
    assert all(by_output[(first, k)].severity is None for k in ("correct", "clarity", "tone"))
    assert [(by_output[(second, k)].value, by_output[(second, k)].severity)
            for k in ("correct", "clarity", "tone")] == [("fail", 3), ("2", 4), ("rude", 2)]
    assert by_output[(second, "correct")].severity_note.startswith("Steps 1 and 2 are wrong")
    assert (by_output[(third, "correct")].value, by_output[(third, "correct")].severity) == (
        "fail", 1
    )
    assert all(a.time_on_task_ms and a.time_on_task_ms > 0 for a in by_output.values())
    assert all(a.source == "ui" for a in by_output.values())
    assert Assignment.objects.filter(annotator=ann, status="submitted").count() == 3

    # Revise the third output's Correctness (fail, severity 1) to a pass, by keyboard.
    target = by_output[(third, "correct")]
    link = f"#recent-list a[href$='/my-annotations/{target.pk}/revise/']"
    _tab_to(page, link)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert _severity_visible(page, "correct")  # it was a failure
    page.keyboard.press("1")  # pass: the severity question goes away
    assert not _severity_visible(page, "correct")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "Revised" in page.locator(".messages").inner_text()
    target.refresh_from_db()
    assert (target.value, target.severity, target.revised_at is not None) == ("pass", None, True)
    history = AnnotationRevision.objects.get(annotation=target)
    assert (history.value, history.severity) == ("fail", 1)
    assert not s.page_errors, s.page_errors


PAYLOAD = (
    "<script>window.__pwned=1;alert('script')</script>\n"
    "<img src=x onerror=\"window.__pwned=2;alert('img')\">\n"
    "<a href=\"javascript:window.__pwned=3;alert('link')\">click me</a>\n"
    "[markdown link](javascript:window.__pwned=4) <b onmouseover=\"window.__pwned=5\">bold</b>"
)


def test_untrusted_output_is_shown_as_text_and_runs_nothing(browser_session: Any) -> None:
    gs = grading_study(n_annotators=1, k=1, texts=[PAYLOAD])
    item = gs.outputs[0].item
    item.input = "Question with markup: " + PAYLOAD
    item.context = "Context: <iframe src=\"javascript:window.__pwned=6\"></iframe>"
    item.reference = "Reference: <svg onload=\"window.__pwned=7\"></svg>"
    item.save()
    s = browser_session
    page = s.page
    s.login(gs.annotators[0].username, PASSWORD)
    s.goto(GRADE)

    output = page.locator("#output-text")
    assert output.is_visible()
    text = output.inner_text()
    assert "<script>window.__pwned=1;alert('script')</script>" in text
    assert "<img src=x onerror=\"window.__pwned=2;alert('img')\">" in text
    assert "<a href=\"javascript:window.__pwned=3;alert('link')\">click me</a>" in text
    assert page.get_by_text("<script>window.__pwned=1", exact=False).first.is_visible()
    assert "<svg onload" in page.locator("#reference-text").inner_text()
    # Interact with the text the way a user might: nothing it contains is live.
    output.click()
    output.hover()
    page.locator("#input-text").click()
    page.mouse.move(5, 5)
    page.wait_for_timeout(300)

    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert s.dialogs == []
    subject = page.locator("#subject")
    for selector in ("script", "img", "a", "iframe", "svg", "b"):
        assert subject.locator(selector).count() == 0, selector
    assert page.locator("a[href^='javascript']").count() == 0
    assert not s.page_errors, s.page_errors

    # The same text after grading, in "My recent annotations" and on the revision page.
    for key in ("1", "4", "1"):
        page.keyboard.press(key)
    _press_and_wait_for_next(page)
    assert "<script>window.__pwned" in page.locator("#recent-list").inner_text()
    page.locator("#recent-list a").first.click()
    page.wait_for_load_state()
    assert "<script>window.__pwned=1" in page.locator("#output-text").inner_text()
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert s.dialogs == []


CANDIDATE_SECRET = "CandidateSecretZx81"
SECRETS = [
    CANDIDATE_SECRET,
    "ProviderSecretQw55",
    "ModelIdSecretPo09",
    "CandidateNotesSecretLk32",
    "JudgeNameSecretMn12",
    "JudgeRationaleSecretVb77",
    "JudgeDetailsSecretCx66",
    "JudgeRawResponseSecretAs43",
    "0.8137249",  # a judge probability
    "OtherAnnotatorRationaleSecretTy90",
    "OtherAnnotatorSeveritySecretGh21",
    "OutputErrorSecretRe44",
    "OutputMetadataSecretWq13",
]


def test_page_and_network_responses_never_reveal_candidate_judges_or_other_labels(
    browser_session: Any,
) -> None:
    gs = grading_study(n_annotators=2, k=2, candidate_name=CANDIDATE_SECRET)
    candidate = gs.candidates[0]
    candidate.provider = "ProviderSecretQw55"
    candidate.model_id = "ModelIdSecretPo09"
    candidate.notes = "CandidateNotesSecretLk32"
    candidate.save()
    for output in gs.outputs:
        output.metadata = {"trace": "OutputMetadataSecretWq13"}
        output.save()
    judge = Judge.objects.create(study=gs.study, name="JudgeNameSecretMn12", kind="llm")
    version = JudgeVersion.objects.create(judge=judge, version=1, content_hash="f" * 64,
                                          config={"model": "x"})
    run = JudgeRun.objects.create(study=gs.study, judge_version=version)
    for output in gs.outputs:
        for key, value in (("correct", "fail"), ("clarity", "2"), ("tone", "rude")):
            criterion = gs.criteria[key]
            Verdict.objects.create(
                judge_version=version, criterion=criterion, output=output, value=value,
                value_num=0.0, probability=0.8137249, rationale="JudgeRationaleSecretVb77",
                details={"why": "JudgeDetailsSecretCx66"}, run=run,
            )
            JudgeJob.objects.create(
                run=run, judge_version=version, criterion=criterion, output=output,
                status="done", raw_response="JudgeRawResponseSecretAs43", parsed_value=value,
            )
    # The other annotator labels every output first (through the real services).
    other = gs.annotators[1]
    while (assignment := assignment_next(study=gs.study, annotator=other)) is not None:
        annotation_submit(
            assignment=assignment, annotator=other, submission_id=uuid.uuid4(),
            labels={
                "correct": {"value": "fail", "severity": 4,
                            "severity_note": "OtherAnnotatorSeveritySecretGh21"},
                "clarity": {"value": "5"},
                "tone": {"value": "neutral"},
            },
            rationale="OtherAnnotatorRationaleSecretTy90",
        )
    assert Annotation.objects.filter(annotator=other).count() == 12

    s = browser_session
    page = s.page
    page.clock.install()
    s.login(gs.annotators[0].username, PASSWORD)
    s.goto(GRADE)
    # Nothing is preselected: the page does not hint at anybody's label.
    assert page.locator("input[type=radio]:checked").count() == 0
    leased = Assignment.objects.get(annotator=gs.annotators[0], status="leased")
    before = leased.lease_expires_at
    with page.expect_response(lambda r: "/heartbeat/" in r.url) as heartbeat:
        page.clock.run_for(61_000)  # the page's one-minute heartbeat
    assert heartbeat.value.status == 200
    leased.refresh_from_db()
    assert leased.lease_expires_at is not None and before is not None
    assert leased.lease_expires_at > before
    html_pages = [page.content()]
    # Grade one (fetch submit), skip one with S, grade one more; then the revision page.
    for key in ("1", "4", "1"):
        page.keyboard.press(key)
    _press_and_wait_for_next(page)
    html_pages.append(page.content())
    _press_and_wait_for_next(page, "s")
    html_pages.append(page.content())
    assert page.locator("#progress-today").inner_text() == "1"
    page.locator("#recent-list a").first.click()
    page.wait_for_load_state()
    html_pages.append(page.content())

    urls = [url for url, _ in s.bodies()]
    assert any("/submit/" in u for u in urls) and any("/heartbeat/" in u for u in urls)
    assert any("/skip/" in u for u in urls)
    # Every response the page received was recorded with its body, and (positive control) the
    # recorded bodies do hold what the page showed.
    assert set(s.seen_urls) <= set(urls)
    assert not [url for url, body in s.bodies() if body == b"<body unavailable>"]
    assert any(b"Is every factual claim right" in body for _, body in s.bodies())
    assert any(b'"ok": true' in body for url, body in s.bodies() if "/submit/" in url)
    for url, body in s.bodies():
        text = body.decode("utf-8", "replace")
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} leaked in {url}"
    for html in html_pages:
        for secret in SECRETS:
            assert secret not in html, f"{secret!r} leaked in the page"
    assert not s.page_errors, s.page_errors


def test_severity_question_appears_exactly_when_a_criterion_fails(browser_session: Any) -> None:
    gs = grading_study(n_annotators=1, k=1, rows=[2])
    s = browser_session
    page = s.page
    s.login(gs.annotators[0].username, PASSWORD)
    s.goto(GRADE)
    for key in ("correct", "clarity", "tone"):
        assert not _severity_visible(page, key)

    label = page.locator
    # Binary: fail asks, pass does not.
    label("label[for='label-correct-2']").click()
    assert _severity_visible(page, "correct")
    question = "If this output reached a user, how bad would it be?"
    assert page.locator("#severity-correct legend").inner_text() == question
    label("label[for='label-correct-1']").click()
    assert not _severity_visible(page, "correct")
    # Ordinal: below the pass threshold (3) asks; at or above it does not.
    for point, fails in ((1, True), (3, False), (2, True), (5, False), (4, False)):
        label(f"label[for='label-clarity-{point}']").click()
        assert _severity_visible(page, "clarity") is fails, point
    # Categorical: a label outside the pass labels asks.
    for position, fails in ((3, True), (1, False), (3, True), (2, False)):
        label(f"label[for='label-tone-{position}']").click()
        assert _severity_visible(page, "tone") is fails, position
    # Keyboard: the same rule.
    page.locator("#label-correct-1").focus()
    page.keyboard.press("2")
    assert _severity_visible(page, "correct")

    # Submit refuses a failure without its severity (and nothing is saved).
    page.locator("#submit-button").click()
    assert "Correctness" in page.locator("#grade-error").inner_text()
    assert page.evaluate("document.activeElement.name") == "severity-correct"
    assert not Annotation.objects.exists()
    # Changing back to a pass removes the question and the requirement.
    label("label[for='label-correct-1']").click()
    assert not _severity_visible(page, "correct")
    with page.expect_navigation():
        page.locator("#submit-button").click()
    saved = {a.criterion.key: (a.value, a.severity)
             for a in Annotation.objects.select_related("criterion")}
    assert saved == {"correct": ("pass", None), "clarity": ("4", None), "tone": ("neutral", None)}


def test_double_submit_and_retry_create_one_submission(browser_session: Any) -> None:
    gs = grading_study(n_annotators=1, k=1, rows=[0, 1])
    s = browser_session
    page = s.page
    s.login(gs.annotators[0].username, PASSWORD)
    s.goto(GRADE)
    for key in ("1", "4", "1"):
        page.keyboard.press(key)
    submission_id = page.locator("input[name=submission_id]").input_value()
    # The first attempt fails in the network; the retry reuses the same submission id.
    page.route("**/submit/", lambda route: route.abort())
    page.keyboard.press("Enter")
    # A locator wait, not a wait_for_function string: Playwright evaluates a bare expression
    # with eval() inside the page, which the page's CSP (script-src 'self') rightly refuses.
    page.locator("#grade-status.is-error").wait_for()
    assert not page.locator("#submit-button").is_disabled()
    page.unroute("**/submit/")
    # A double press: the button is disabled while the request is in flight.
    with page.expect_navigation():
        page.keyboard.press("Enter")
        page.keyboard.press("Enter")
    assert Annotation.objects.filter(submission_id=submission_id).count() == 3
    assert Annotation.objects.count() == 3
    assert Assignment.objects.filter(status="submitted").count() == 1


def _no_horizontal_scroll(page: Any, width: int) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= width, page.url


@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_layout_without_horizontal_scroll_and_screenshots(
    new_session: Any, viewport: str
) -> None:
    gs = grading_study(n_annotators=1, k=1, rows=[2], texts=[SUPPORT_ITEMS[2][3]])
    s = new_session(viewport)
    page = s.page
    width = 390 if viewport == "phone" else 1280
    s.login(gs.annotators[0].username, PASSWORD)
    s.goto(GRADE)
    _no_horizontal_scroll(page, width)
    page.keyboard.press("2")  # Correctness: fail (the answer is wrong) -> severity question
    page.keyboard.press("3")
    page.keyboard.press("4")  # Clarity: 4
    assert _severity_visible(page, "correct")
    _no_horizontal_scroll(page, width)
    for control in ("#submit-button", "#skip-button", "label[for='label-correct-1']",
                    "label[for='severity-correct-5']"):
        box = page.locator(control).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, control
    # Screenshot from the top of the page (and of the grading panel, which scrolls itself on
    # wide screens to follow the current criterion).
    page.evaluate("document.querySelector('.grade-panel').scrollTop = 0; window.scrollTo(0, 0)")
    size = "1280x800" if viewport == "desktop" else "390x844"
    path = s.screenshot(f"docs/img/grading-{size}.png")
    assert path.stat().st_size > 10_000

    # An unbreakable 400-character token in the context and the output must wrap, not scroll.
    item = gs.outputs[0].item
    item.context = item.context + "\nLog excerpt: " + "x" * 400
    item.save()
    output = gs.outputs[0]
    output.text = output.text + " " + "y" * 400
    output.save()
    s.goto(GRADE)
    _no_horizontal_scroll(page, width)
    page.keyboard.press("m")  # monospace makes characters wider
    assert "mono" in (page.locator("#subject").get_attribute("class") or "")
    _no_horizontal_scroll(page, width)
    for url in ("/", "/studies/support/"):
        s.goto(url)
        _no_horizontal_scroll(page, width)
    s.login(gs.lead.username, PASSWORD)
    for url in ("/studies/support/", "/studies/support/annotation/queue/",
                "/studies/support/annotation/members/",
                "/studies/support/annotation/disagreements/"):
        s.goto(url)
        _no_horizontal_scroll(page, width)
    assert not s.page_errors, s.page_errors


def test_grading_context_is_what_the_page_shows(browser_session: Any) -> None:
    """The page renders the selector's blind context verbatim (input, context, reference)."""
    gs = grading_study(n_annotators=1, k=1, rows=[0])
    s = browser_session
    s.login(gs.annotators[0].username, PASSWORD)
    s.goto(GRADE)
    assignment = Assignment.objects.get(status="leased")
    ctx = grading_context(assignment=assignment)
    page = s.page
    assert page.locator("#input-text").inner_text() == ctx.item_input
    assert page.locator("#output-text").inner_text() == ctx.output_text
    assert page.locator("#reference-text").inner_text() == ctx.item_reference
    assert page.locator("details.context #context-text").inner_text() == ctx.item_context


def test_interval_criterion_is_a_number_input_usable_by_keyboard(browser_session: Any) -> None:
    gs = grading_study(n_annotators=1, k=1, rows=[2, 3], criteria=("correct", "score"))
    s = browser_session
    page = s.page
    s.login(gs.annotators[0].username, PASSWORD)
    s.goto(GRADE)
    box = page.locator("#label-score-number")
    assert box.get_attribute("type") == "number"
    assert (box.get_attribute("min"), box.get_attribute("max"), box.get_attribute("step")) == (
        "1", "5", "any")
    assert not _severity_visible(page, "score")
    # Below the threshold (3.5) the severity question appears; at or above it, it goes.
    for typed, fails in (("2.5", True), ("3.5", False), ("1", True), ("4.75", False)):
        box.fill(typed)
        assert _severity_visible(page, "score") is fails, typed
    # Keyboard only: 1 answers "correct" (pass) and moves to the score; typing a failing
    # score and Enter moves to its severity, a digit answers it, Enter submits.
    page.locator("#label-correct-1").focus()
    page.keyboard.press("1")
    assert page.evaluate("document.activeElement.id") == "label-score-number"
    page.keyboard.press("Control+A")
    page.keyboard.type("2.25")
    page.keyboard.press("Enter")
    assert _severity_visible(page, "score")
    assert page.evaluate("document.activeElement.name") == "severity-score"
    assert not Annotation.objects.exists()  # Enter in the number moved on, it did not submit
    page.keyboard.press("3")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    saved = {a.criterion.key: (a.value, a.value_num, a.severity)
             for a in Annotation.objects.select_related("criterion")}
    assert saved == {"correct": ("pass", 1.0, None), "score": ("2.25", 2.25, 3)}
