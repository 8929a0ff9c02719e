"""The generic ratings importer, the report API, CSV export, the audit pages and access."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from annotations.models import Annotation
from imports.generic import ratings_import, ratings_read, scale_parse
from judges.models import Judge, Verdict
from reviewhub.api.errors import ValidationFailed
from snapshots.models import ReportSnapshot
from studies.models import Comparison, Criterion, Item, Membership, Output, StratumDimension, Study
from tests.factories import MembershipFactory, UserFactory

from .conftest import computed_report

pytestmark = pytest.mark.django_db

EXAMPLE_CSV = Path(__file__).resolve().parents[2] / "docs" / "examples" / "ratings-example.csv"


def _rows(text: str, fmt: str) -> list[tuple[int, dict[str, Any]]]:
    return list(ratings_read(io.StringIO(text), fmt=fmt))


def _single(n_items: int = 40, *, judge_flip: int = 5) -> str:
    lines = [
        "item_id,stratum.language,output_id,candidate,output_text,rater_id,rater_kind,"
        "judge_version,criterion,value,severity"
    ]
    for i in range(n_items):
        lang = "en" if i % 2 else "de"
        truth = "pass" if i % 3 else "fail"
        for r in ("ann", "bob"):
            sev = "2" if truth == "fail" else ""
            lines.append(f"q{i},{lang},o{i},m1,answer {i},{r},human,,correct,{truth},{sev}")
        jv = truth if i >= judge_flip else ("fail" if truth == "pass" else "pass")
        lines.append(f"q{i},{lang},o{i},m1,answer {i},gpt-judge,judge,v1,correct,{jv},")
    return "\n".join(lines) + "\n"


def test_docs_example_imports(study: Study) -> None:
    summary = ratings_import(study=study, rows=ratings_read(EXAMPLE_CSV))
    assert summary.created["annotation"] > 0 and summary.created["verdict"] > 0
    scales = dict(Criterion.objects.filter(rubric__study=study).values_list("key", "scale"))
    assert scales == {"helpful": "ordinal", "correct": "binary", "preference": "pairwise"}
    assert any("inferred" in n or "created" in n for n in summary.notes)
    again = ratings_import(study=study, rows=ratings_read(EXAMPLE_CSV))
    assert sum(again.created.values()) == 0 and sum(again.updated.values()) == 0


def test_generic_import_writes_ordinary_rows(study: Study) -> None:
    summary = ratings_import(study=study, rows=_rows(_single(), "csv"))
    assert summary.created["item"] == 40 and summary.created["output"] == 40
    assert summary.created["annotation"] == 80 and summary.created["verdict"] == 40
    item = Item.objects.get(study=study, external_id="q1")
    assert item.strata == {"language": "en"} and item.metadata["language"] == "en"
    assert StratumDimension.objects.get(study=study, key="language").source == "metadata.language"
    ann = Annotation.objects.filter(criterion__rubric__study=study).select_related("annotator")
    assert {a.source for a in ann} == {"import"}
    user = ann[0].annotator
    assert user.username.startswith(f"{study.slug}:") and not user.is_active
    assert not user.has_usable_password()
    assert Membership.objects.get(study=study, user=user).role == "annotator"
    assert Judge.objects.get(study=study, name="gpt-judge").kind == "imported"
    assert Annotation.objects.filter(
        criterion__rubric__study=study, value="fail", severity=2
    ).exists()
    # Changing one rating updates exactly that row.
    changed = _single().replace(
        "q7,en,o7,m1,answer 7,ann,human,,correct,pass,",
        "q7,en,o7,m1,answer 7,ann,human,,correct,fail,3",
    )
    again = ratings_import(study=study, rows=_rows(changed, "csv"))
    assert again.updated["annotation"] == 1 and again.created.get("annotation", 0) == 0


def test_pairwise_orders_map_to_canonical_and_feed_position_bias(study: Study) -> None:
    rows = []
    for i in range(40):
        base = {
            "item_id": f"p{i}",
            "output_a": f"p{i}-x",
            "output_b": f"p{i}-y",
            "candidate_a": "x",
            "candidate_b": "y",
            "output_a_text": "short",
            "output_b_text": "a much longer answer",
            "criterion": "pref",
            "pairwise_values": "presented",
        }
        rows.append({**base, "rater_id": "h1", "rater_kind": "human", "value": "A"})
        rows.append({**base, "rater_id": "h2", "rater_kind": "human", "value": "A", "order": "ba"})
        # A third annotator gives the comparison a human label by the one rule (the side most
        # chose: A); h1 and h2 alone split A / B, which is no label.
        rows.append({**base, "rater_id": "h3", "rater_kind": "human", "value": "A"})
        # The judge always picks the first slot: A when shown AB, "A" (= output_b) when BA.
        rows.append({**base, "rater_id": "j", "rater_kind": "judge", "order": "ab", "value": "A"})
        rows.append({**base, "rater_id": "j", "rater_kind": "judge", "order": "ba", "value": "A"})
    text = "\n".join(json.dumps(r) for r in rows)
    ratings_import(study=study, rows=_rows(text, "jsonl"))
    assert Comparison.objects.filter(study=study).count() == 40
    vals = sorted(Annotation.objects.filter(criterion__key="pref").values_list("value", flat=True))
    assert vals == ["A"] * 80 + ["B"] * 40
    v = Verdict.objects.filter(criterion__key="pref").first()
    assert v is not None and v.value == "tie"
    assert v.details["orders"] == {"ab": "A", "ba": "B"} and v.details["position_inconsistent"]
    result = computed_report(study, {"n_resamples": 200}).result
    flip = next(b for b in result["bias"] if b["audit"] == "position: flip rate")
    assert flip["value"] == 1.0
    first = next(b for b in result["bias"] if b["audit"] == "position: first-slot preference")
    assert first["value"] == 1.0


@pytest.mark.parametrize(
    ("text", "fmt", "expected"),
    [
        (
            "item_id,output_id,rater_id,rater_kind,criterion,value\nq1,o1,a,human,c,pass\n"
            "q1,o1,b,robot,c,pass\n",
            "csv",
            "line 3: rater_kind:",
        ),
        (
            "item_id,output_id,rater_id,rater_kind,criterion,value\nq1,o1,a,human,c,\n",
            "csv",
            "line 2: value: required",
        ),
        (
            "item_id,output_id,rater_id,rater_kind,criterion,value\nq1,o1,a,human,c,pass\n"
            "q1,o1,a,human,c,fail\n",
            "csv",
            "line 3: rater_id: duplicate rating",
        ),
        (
            "item_id,output_id,rater_id,rater_kind,criterion,value,severity\n"
            "q1,o1,a,human,c,fail,9\n",
            "csv",
            "line 2: severity:",
        ),
        (
            "item_id,output_id,rater_id,rater_kind,criterion,value,ordr\nq1,o1,a,human,c,pass,ba\n",
            "csv",
            "line 2: ordr: unknown column; did you mean 'order'?",
        ),
        (
            '{"item_id": "q1", "output_id": "o1", "rater_id": "a", "rater_kind": "human", '
            '"criterion": "c", "value": "pass"}\nnot json\n',
            "jsonl",
            "line 2: row: not valid JSON",
        ),
        (
            "item_id,output_id,rater_id,rater_kind,criterion,value\nq\x001,o1,a,human,c,pass\n",
            "csv",
            "line 2: item_id: contains a NUL byte",
        ),
        (
            "item_id,stratum.lang,output_id,rater_id,rater_kind,criterion,value\n"
            "q1,en,o1,a,human,c,pass\nq1,de,o1,b,human,c,pass\n",
            "csv",
            "line 3: stratum.lang:",
        ),
        ("", "csv", "line 1: file:"),
    ],
)
def test_bad_rows_are_named_and_nothing_is_written(
    study: Study, text: str, fmt: str, expected: str
) -> None:
    with pytest.raises(ValidationFailed) as info:
        ratings_import(study=study, rows=ratings_read(io.StringIO(text), fmt=fmt))
    assert expected in info.value.message
    assert all(isinstance(e["line"], int) and e["path"] and e["message"]
               for e in info.value.details["errors"])
    assert not Item.objects.filter(study=study).exists()
    assert not Criterion.objects.filter(rubric__study=study).exists()


def test_value_outside_existing_scale_and_scale_option(study: Study) -> None:
    text = "item_id,output_id,rater_id,rater_kind,criterion,value\nq1,o1,a,human,tone,4\n"
    ratings_import(
        study=study, rows=_rows(text, "csv"), scales={"tone": scale_parse("ordinal:1-7")}
    )
    crit = Criterion.objects.get(rubric__study=study, key="tone")
    assert [p["value"] for p in crit.points] == list(range(1, 8))
    bad = "item_id,output_id,rater_id,rater_kind,criterion,value\nq2,o2,a,human,tone,9\n"
    with pytest.raises(ValidationFailed, match="line 2: value: '9' is not a value"):
        ratings_import(study=study, rows=_rows(bad, "csv"))
    assert not Output.objects.filter(study=study, item__external_id="q2").exists()


def test_import_ratings_command(study: Study, tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text(_single(10), encoding="utf-8")
    out = io.StringIO()
    call_command("import_ratings", str(path), "--study", study.slug, stdout=out)
    assert '"verdict": 10' in out.getvalue()
    bad = tmp_path / "bad.csv"
    bad.write_text("item_id,output_id,rater_id,rater_kind,criterion,value\nq,o,a,x,c,pass\n")
    with pytest.raises(CommandError, match="line 2: rater_kind"):
        call_command("import_ratings", str(bad), "--study", study.slug)
    with pytest.raises(CommandError, match="does not exist"):
        call_command("import_ratings", str(path), "--study", "nope")


# --- API, export, pages, access ---------------------------------------------------------------


@pytest.fixture
def imported(study: Study) -> Study:
    ratings_import(study=study, rows=_rows(_single(60), "csv"))
    return study


def test_api_create_list_detail_export(
    imported: Study, lead_client: Any, django_capture_on_commit_callbacks: Any
) -> None:
    url = reverse("reports-api-list", kwargs={"slug": imported.slug})
    with django_capture_on_commit_callbacks(execute=True):
        resp = lead_client.post(url, {"params": {"n_resamples": 200, "seed": 5}}, format="json")
    assert resp.status_code == 202, resp.content
    rid = resp.json()["id"]
    detail = lead_client.get(
        reverse("reports-api-detail", kwargs={"slug": imported.slug, "report_id": rid})
    )
    body = detail.json()
    assert body["status"] == "done" and body["params"]["seed"] == 5
    cells = body["result"]["cells"]
    overall = next(c for c in cells if c["label"] == "overall")
    assert overall["n_subjects"] == 60 and round(
        overall["metrics"]["accuracy"]["value"], 4
    ) == round(55 / 60, 4)
    listing = lead_client.get(url).json()
    assert [r["id"] for r in listing["results"]] == [rid] and "result" not in listing["results"][0]
    export = reverse("reports-api-export", kwargs={"slug": imported.slug, "report_id": rid})
    for table in ("cells", "confusion", "bias", "ceiling", "system"):
        r = lead_client.get(export, {"table": table})
        assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
        assert r.content.decode().splitlines()[0].count(",") >= 5
    cells_csv = lead_client.get(export, {"table": "cells"}).content.decode()
    assert "gpt-judge v1" in cells_csv and "language" in cells_csv
    assert lead_client.get(export, {"table": "nope"}).status_code == 400
    bad = lead_client.post(url, {"params": {"n_resamples": 5, "colour": 1}}, format="json")
    assert bad.status_code == 400 and "params.colour" in json.dumps(bad.json())


def test_access_control(imported: Study, client_for: Any, lead: Any) -> None:
    report = computed_report(imported, {"n_resamples": 200})
    list_url = reverse("reports-api-list", kwargs={"slug": imported.slug})
    detail = reverse("reports-api-detail", kwargs={"slug": imported.slug, "report_id": report.pk})
    viewer, annotator, stranger = (UserFactory(username=n) for n in ("v", "a", "s"))
    MembershipFactory(study=imported, user=viewer, role=Membership.Role.VIEWER)
    MembershipFactory(study=imported, user=annotator, role=Membership.Role.ANNOTATOR)
    v = client_for(viewer)
    assert v.get(detail).status_code == 200
    assert v.post(list_url, {}, format="json").status_code == 403
    assert client_for(annotator).get(detail).status_code == 403
    assert client_for(stranger).get(detail).status_code == 404
    assert client_for(lead, can_write=False).post(list_url, {}, format="json").status_code == 403
    other = Study.objects.create(slug="other", name="o", owner=lead)
    assert client_for(lead, study=other).get(detail).status_code == 404
    from rest_framework.test import APIClient

    assert APIClient().get(detail).status_code in (401, 403)


def test_audit_pages(imported: Study, lead: Any, client: Any) -> None:
    out = Output.objects.get(study=imported, item__external_id="q0")
    out.text = "<script>alert(1)</script>"
    out.save()
    imported.is_simulated = True
    imported.save()
    report = computed_report(imported, {"n_resamples": 200})
    client.force_login(lead)
    kw = {"slug": imported.slug, "report_id": report.pk}
    page = client.get(reverse("reports-audit", kwargs=kw))
    html = page.content.decode()
    assert page.status_code == 200
    assert "alternative annotator test" in html and "heatmap.svg" in html
    assert "Human ceiling" in html and "Simulated data" in html and "table=cells" in html
    crit = report.result["criteria"][0]["id"]
    svg = client.get(reverse("reports-heatmap", kwargs=kw), {"criterion": crit})
    assert svg.status_code == 200 and svg["Content-Type"] == "image/svg+xml"
    assert svg.content.lstrip().startswith(b"<?xml")
    jv = report.result["judges"][0]["id"]
    dis = client.get(reverse("reports-disagreements", kwargs=kw), {"judge": jv, "criterion": crit})
    body = dis.content.decode()
    assert dis.status_code == 200 and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<script>alert(1)" not in body
    listing = client.get(reverse("reports-list", kwargs={"slug": imported.slug}))
    assert listing.status_code == 200 and f"#{report.pk}" in listing.content.decode()
    created = client.post(
        reverse("reports-list", kwargs={"slug": imported.slug}),
        {"seed": "1", "n_resamples": "200", "annotator_type": "crowd"},
    )
    assert created.status_code == 302
    viewer = UserFactory(username="viewer2")
    MembershipFactory(study=imported, user=viewer, role=Membership.Role.VIEWER)
    client.force_login(viewer)
    # Pages answer 404 to anyone who may not see them (tests/test_access_matrix.py: all roles).
    assert client.get(reverse("reports-audit", kwargs=kw)).status_code == 404
    assert ReportSnapshot.objects.filter(study=imported).count() == 2
