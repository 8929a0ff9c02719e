"""The "New study" page: upload a study file, preview what it holds (nothing written), create
it with the signed-in user as owner and lead through the import service; errors name the line
or the field and write nothing; an existing slug is never updated from here; untrusted text is
inert; and the flow in Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from studies.models import Membership, Study
from tests.browser.harness import *  # noqa: F403 - fixtures (chromium, new_session, ...)
from tests.factories import StudyFactory, UserFactory

pytestmark = pytest.mark.django_db
PAGE = "/new-study/"
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "study.yaml"
N_CRITERIA = len(yaml.safe_load(EXAMPLE.read_text())["rubric"]["criteria"])
PAYLOAD = "<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">"


def _example(**study: Any) -> str:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["study"].pop("owner", None)
    doc["study"].update(study)
    doc.pop("members", None)  # the example names accounts this test does not have
    return yaml.safe_dump(doc, sort_keys=False)


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _upload(text: str, name: str = "study.yaml") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, text.encode(), content_type="text/yaml")


def test_preview_writes_nothing_then_create_makes_the_user_owner_and_lead() -> None:
    user = UserFactory(username="maker")
    client = _client(user)
    r = client.post(PAGE, {"action": "preview", "file": _upload(_example())})
    assert r.status_code == 200
    html = r.content.decode()
    assert "Support answers (EN/DE)" in html and "schema-valid" in html and "≥ 3" in html
    assert not Study.objects.exists()
    # The preview sends the text back with the Create button: no second upload needed.
    text = _example()
    r = client.post(PAGE, {"action": "create", "text": text, "file_name": "study.yaml"})
    assert r.status_code == 302 and r["Location"] == "/studies/support-answers/"
    study = Study.objects.get(slug="support-answers")
    assert study.owner == user
    assert Membership.objects.get(study=study, user=user).role == Membership.Role.LEAD
    assert study.rubric_versions.get().criteria.count() == N_CRITERIA
    follow = client.get(r["Location"]).content.decode()
    assert "Support answers (EN/DE)" in follow


@pytest.mark.parametrize(("text", "name", "needle"), [
    ("study: {slug: x, name: [unclosed", "s.yaml", "line 1"),
    ('{"study": {"slug": "x", "name": NaN}}', "s.json", "<strong>study.name</strong>: NaN"),
    ('{"study": {"slug": "x",, }}', "s.json", "line 1, column"),
    ('{"study": {"slug": "x", "name": "a\\u0000"}}', "s.json", "<strong>study.name</strong>"),
    ("study:\n  slug: a\n  slug: b\n", "s.yaml", "duplicate key"),
    ("study:\n  slug: Not A Slug\n  name: x\n", "s.yaml", "<strong>study.slug</strong>"),
    ("rubric: {}\n", "s.yaml", "<strong>study</strong>"),
    ("", "s.yaml", "no file chosen"),
])
def test_bad_files_are_a_400_naming_the_line_or_field(text: str, name: str, needle: str
                                                       ) -> None:
    client = _client(UserFactory())
    for action in ("preview", "create"):
        data: dict[str, Any] = {"action": action}
        if text:
            data["file"] = _upload(text, name)
        r = client.post(PAGE, data)
        assert r.status_code == 400, r.content.decode()[:300]
        assert needle in r.content.decode()
    assert not Study.objects.exists()


def test_an_existing_slug_or_another_owner_is_refused_and_nothing_changes() -> None:
    other = UserFactory(username="someone-else")
    existing = StudyFactory(slug="support-answers", name="Theirs", owner=other)
    client = _client(UserFactory(username="maker"))
    preview = client.post(PAGE, {"action": "preview", "file": _upload(_example())})
    assert "exists already" in preview.content.decode()
    r = client.post(PAGE, {"action": "create", "text": _example()})
    assert r.status_code == 409 and "<strong>study.slug</strong>" in r.content.decode()
    existing.refresh_from_db()
    assert existing.name == "Theirs" and existing.owner == other
    r = client.post(PAGE, {"action": "create",
                           "text": _example(slug="fresh", owner="someone-else")})
    assert r.status_code == 400 and "<strong>study.owner</strong>" in r.content.decode()
    assert not Study.objects.filter(slug="fresh").exists()


def test_untrusted_text_is_escaped_and_anonymous_users_sign_in() -> None:
    client = _client(UserFactory())
    r = client.post(PAGE, {"action": "preview",
                           "file": _upload(_example(name=PAYLOAD, task_description=PAYLOAD))})
    html = r.content.decode()
    assert "<script>window.__pwned" not in html and "&lt;script&gt;" in html
    r = Client().get(PAGE)
    assert r.status_code == 302 and "/accounts/login/" in r["Location"]
    assert 'href="/new-study/"' in client.get("/").content.decode()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("viewport", ["desktop", "phone"])
def test_upload_preview_and_create_in_chromium(new_session: Any, viewport: str,
                                               tmp_path: Path) -> None:
    user = UserFactory(username="maker")
    user.set_password("pw-maker-1")
    user.save()
    hostile = viewport == "phone"
    path = tmp_path / "study.yaml"
    path.write_text(_example(name=PAYLOAD if hostile else "Support answers (EN/DE)"))
    s = new_session(viewport)
    s.login("maker", "pw-maker-1")
    page = s.page
    page.get_by_role("link", name="New study from a file").click()
    page.locator("#study-file").set_input_files(str(path))
    with page.expect_navigation():
        page.get_by_role("button", name="Preview").press("Enter")
    assert page.locator("#preview-criteria tbody tr").count() == N_CRITERIA
    assert page.evaluate("window.__pwned === undefined")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], f"horizontal scroll: {width}px"
    if viewport == "desktop":
        s.screenshot("docs/img/new-study-preview.png")
    with page.expect_navigation():
        page.get_by_role("button", name="Create study").press("Enter")
    assert page.url.endswith("/studies/support-answers/")
    assert Study.objects.get(slug="support-answers").owner == user
    assert not s.page_errors
