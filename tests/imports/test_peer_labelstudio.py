"""Issue 25 §3, Label Studio JSON export -> items, outputs, human labels (and predictions as
judge verdicts when the user says they are): on the real export files of
`peer-exports/label-studio/` and on a larger export built from Label Studio's documented task
format with several named annotators per task, a choices and a rating template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from annotations.models import Annotation
from judges.models import Verdict
from studies.models import Item, Output

from .cli import peer_error, run_peer

pytestmark = pytest.mark.django_db


@pytest.fixture
def ls_dir(data_dir: Path) -> Path:
    path = data_dir / "peer-exports" / "label-studio"
    if not path.is_dir():
        pytest.skip(f"{path} is missing")
    return path


def _labels(criterion: str) -> dict[tuple[str, str], str]:
    return {(a.annotator.username.split(":", 1)[1], a.output.item.external_id
             if a.output else a.comparison.item.external_id): a.value
            for a in Annotation.objects.filter(criterion__key=criterion).select_related(
                "annotator", "output__item", "comparison__item")}


def test_tasks_without_ids_and_anonymous_annotations_are_asked_about(
        lead: Any, ls_dir: Path) -> None:
    f = ls_dir / "tasks_annotations_predictions.json"
    err = peer_error("labelstudio", f, "--study", "ls", "--owner", "lead")
    assert "output_field" in err and "text" in err  # names the data fields it saw
    err = peer_error("labelstudio", f, "--study", "ls", "--owner", "lead",
                     "--option", "output_field=text", "--option", "candidate=c")
    assert "tasks[0].id" in err and "task_ids=position" in err
    # Every annotation of this file is anonymous: without a rule for them nothing is left.
    err = peer_error("labelstudio", f, "--study", "ls", "--owner", "lead",
                     "--option", "output_field=text", "--option", "candidate=c",
                     "--option", "task_ids=position")
    assert "no rating that can be imported" in err and "4 annotations without completed_by" in err
    assert Item.objects.count() == 0


def test_the_multi_annotation_file_with_each_annotation_its_own_rater(
        lead: Any, ls_dir: Path) -> None:
    summary, err = run_peer(
        "labelstudio", ls_dir / "tasks_annotations_predictions.json", "--study", "ls",
        "--owner", "lead", "--option", "output_field=text", "--option", "candidate=c",
        "--option", "task_ids=position", "--option", "anonymous_annotators=per-annotation")
    # Tasks 1-3 have annotations (task 2 two of them); tasks 4-5 none (bare); task 6 only a
    # prediction, which stays a pre-label by default.
    assert summary["created"]["item"] == 3 and summary["created"]["annotation"] == 4
    assert "dropped: 3 tasks without annotations" in err
    assert "dropped: 3 predictions" in err
    labels = _labels("text_class")
    assert sorted(labels.values()) == ["class_A", "class_A", "class_A", "class_TESTING"]
    assert Output.objects.get(item__external_id="task-3").text == "yoyo"
    assert any("lead_time" in n for n in summary["notes"])


def test_predictions_as_judge_verdicts_when_asked(lead: Any, ls_dir: Path) -> None:
    summary, _ = run_peer(
        "labelstudio", ls_dir / "tasks_annotations_predictions.json", "--study", "ls",
        "--owner", "lead", "--option", "output_field=text", "--option", "candidate=c",
        "--option", "task_ids=position", "--option", "anonymous_annotators=per-annotation",
        "--option", "predictions=judge")
    assert summary["created"]["verdict"] == 3
    assert sorted(Verdict.objects.values_list("value", flat=True)) == [
        "class_A", "class_A", "class_PREDICTIONS_TESTING"]
    assert set(Verdict.objects.values_list("judge_version__judge__name", flat=True)) == {
        "ls-predictions"}


def test_full_export_named_annotator(lead: Any, ls_dir: Path) -> None:
    summary, _ = run_peer("labelstudio", ls_dir / "sdk_csv_test_history.json", "--study", "ls",
                          "--owner", "lead", "--option", "output_field=text",
                          "--option", "candidate=tweets",
                          "--scale", "sentiment=categorical:Positive,Neutral,Negative")
    assert summary["created"]["annotation"] == 1
    assert _labels("sentiment") == {("sergei@heartex.test", "6141"): "Positive"}
    # Quotes, tabs, newlines and Cyrillic in a choice survive as they are.
    f = ls_dir / "sdk_csv_test2.json"
    task = json.loads(f.read_text())[0]
    res = task["annotations"][0]["result"][0]
    field = next(k for k, v in task["data"].items() if isinstance(v, str))
    run_peer("labelstudio", f, "--study", "ls2", "--owner", "lead",
             "--option", f"output_field={field}", "--option", "candidate=c",
             "--scale", f"{res['from_name']}=categorical:{res['value']['choices'][0].strip()},No")
    [value] = Annotation.objects.filter(criterion__key=res["from_name"],
                                        criterion__rubric__study__slug="ls2").values_list(
        "value", flat=True)
    # (the generic format trims the ends of a value, as it does for every CSV cell)
    assert value == res["value"]["choices"][0].strip()


def test_pairwise_template(lead: Any, ls_dir: Path) -> None:
    f = ls_dir / "frontend_pairwise_annotation.json"
    summary, _ = run_peer("labelstudio", f, "--study", "pw", "--owner", "lead",
                          "--option", "pair_fields=text1,text2",
                          "--option", "pair_candidates=left-model,right-model",
                          "--option", "anonymous_annotators=per-annotation")
    assert summary["created"]["comparison"] == 1
    [ann] = Annotation.objects.select_related("comparison__output_a__candidate")
    # "right" = text2 = the second candidate is preferred.
    assert ann.comparison is not None
    winner = ann.comparison.output_a if ann.value == "A" else ann.comparison.output_b
    assert winner.candidate.name == "right-model"
    assert winner.text.startswith("Death remembered")


def test_mixed_results_map_what_they_can(lead: Any, ls_dir: Path) -> None:
    f = ls_dir / "frontend_classification_mixed_annotation.json"
    task = json.loads(f.read_text())
    data = task.get("data") or task
    field = next(k for k, v in data.items() if isinstance(v, str))
    summary, err = run_peer("labelstudio", f, "--study", "mx", "--owner", "lead",
                            "--option", f"output_field={field}", "--option", "candidate=c",
                            "--option", "anonymous_annotators=per-annotation",
                            "--option", "task_ids=position",
                            "--scale", "num=ordinal:1-5",
                            "--scale", "choices=categorical:Choice 1,Choice 2")
    types = [r["type"] for r in task["annotations"][0]["result"]]
    kept = [t for t in types if t in ("number", "choices")]
    assert summary["created"]["annotation"] == len(kept)
    for t in set(types) - {"number", "choices"}:
        assert f"'{t}' results" in err


# A larger export in Label Studio's documented format ("Export -> JSON": tasks with data,
# annotations[] with completed_by {id, email}, result[] of {from_name, to_name, type, value}):
# 40 tasks, three named annotators each rating every task on a choices criterion and a
# <Rating> criterion, one annotation cancelled, built here because the fixtures have neither.
ANNOTATORS = ["ana@example.test", "ben@example.test", "chi@example.test"]


def _built(path: Path, *, bad: bool = False) -> tuple[Path, dict[tuple[str, str], str]]:
    tasks, want = [], {}
    for t in range(40):
        anns = []
        for k, who in enumerate(ANNOTATORS):
            verdict = "good" if (t + k) % 3 else "bad"
            stars = 1 + (t * 7 + k) % 5
            anns.append({"id": 1000 + t * 10 + k, "completed_by": {"id": k + 1, "email": who},
                         "was_cancelled": t == 5 and k == 2, "lead_time": 4.2,
                         "result": [
                             {"from_name": "verdict", "to_name": "response", "type": "choices",
                              "value": {"choices": [verdict]}},
                             {"from_name": "stars", "to_name": "response", "type": "rating",
                              "value": {"rating": 7 if bad and t == 30 else stars}},
                             {"from_name": "comment", "to_name": "response",
                              "type": "textarea", "value": {"text": ["ok"]}}]})
            if not (t == 5 and k == 2):
                want[(who, f"{500 + t}")] = verdict
        tasks.append({"id": 500 + t, "data": {"prompt": f"question {t}",
                                              "response": f"answer {t} <b>bold</b>"},
                      "annotations": anns, "predictions": []})
    path.write_text(json.dumps(tasks))
    return path, want


def _opts() -> list[str]:
    return ["--option", "input_field=prompt", "--option", "output_field=response",
            "--option", "candidate=model-x", "--scale", "stars=ordinal:1-5",
            "--pass-threshold", "stars=4"]


def test_several_named_annotators_per_task(lead: Any, tmp_path: Path) -> None:
    f, want = _built(tmp_path / "big.json")
    summary, err = run_peer("labelstudio", f, "--study", "big", "--owner", "lead", *_opts())
    assert summary["created"]["item"] == 40 and summary["created"]["output"] == 40
    assert summary["created"]["annotation"] == 2 * len(want) == 2 * 119
    assert "dropped: 1 cancelled (skipped) annotations" in err
    assert "dropped: 119 'textarea' results" in err
    assert _labels("verdict") == want
    stars = Annotation.objects.filter(criterion__key="stars", annotator__username__endswith=
                                      "ben@example.test", output__item__external_id="507")
    assert [a.value for a in stars] == [str(1 + (7 * 7 + 1) % 5)]
    assert Item.objects.get(external_id="507").input == "question 7"
    assert Output.objects.get(item__external_id="507").text == "answer 7 <b>bold</b>"
    again, _ = run_peer("labelstudio", f, "--study", "big", *_opts())
    assert again["created"].get("annotation", 0) == 0
    assert again["unchanged"]["annotation"] == 238


def test_one_bad_value_writes_nothing_and_names_the_task(lead: Any, tmp_path: Path) -> None:
    f, _ = _built(tmp_path / "bad.json", bad=True)
    err = peer_error("labelstudio", f, "--study", "bad", "--owner", "lead", *_opts())
    assert "value: task 530, annotation 1300: '7' is not a value" in err
    assert Item.objects.count() == 0 and Annotation.objects.count() == 0
    # The study --owner would have created is not left behind either.
    from studies.models import Study
    assert not Study.objects.filter(slug="bad").exists()


def test_dry_run_writes_nothing(lead: Any, tmp_path: Path) -> None:
    f, _ = _built(tmp_path / "big.json")
    summary, _ = run_peer("labelstudio", f, "--study", "dry", "--owner", "lead", "--dry-run",
                          *_opts())
    assert summary["dry_run"] is True and summary["created"]["annotation"] == 238
    assert Item.objects.count() == 0 and Annotation.objects.count() == 0


def test_rest_endpoint(client_for: Any, study: Any, lead: Any, tmp_path: Path) -> None:
    from studies.models import Membership
    Membership.objects.get_or_create(study=study, user=lead, defaults={"role": "lead"})
    f, want = _built(tmp_path / "big.json")
    client = client_for(lead)
    url = f"/api/studies/{study.slug}/imports/labelstudio"
    q = ("?input_field=prompt&output_field=response&candidate=model-x&scale=stars=ordinal:1-5"
         "&pass_threshold=stars=4")
    resp = client.post(url + q + "&dry_run=1", data=f.read_bytes(),
                       content_type="application/json")
    assert resp.status_code == 200, resp.content
    assert resp.json()["dry_run"] is True and Annotation.objects.count() == 0
    resp = client.post(url + q, data=f.read_bytes(), content_type="application/json")
    body = resp.json()
    assert resp.status_code == 200, body
    assert body["created"]["annotation"] == 2 * len(want) == 238
    assert body["dropped"]["cancelled (skipped) annotations"] == 1
    # The one error shape: an unknown option and a bad file.
    resp = client.post(url + "?colour=red", data=b"[]", content_type="application/json")
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["code"] == "validation_failed"
    assert err["details"]["errors"][0]["path"] == "colour"
    resp = client.post(url + "?output_field=x&candidate=c", data=b"[{",
                       content_type="application/json")
    assert resp.status_code == 400 and "not valid JSON" in resp.json()["error"]["message"]
    bad, _ = _built(tmp_path / "bad.json", bad=True)
    resp = client.post(url + q, data=bad.read_bytes(), content_type="application/json")
    entry = resp.json()["error"]["details"]["errors"][0]
    assert resp.status_code == 400 and entry["record"] == "task 530, annotation 1300"
    assert entry["path"] == "value"
    assert client.post(f"/api/studies/{study.slug}/imports/nosuch", data=b"[]",
                       content_type="application/json").status_code == 404


def test_pairwise_tasks_with_several_named_annotators(lead: Any, tmp_path: Path) -> None:
    """Built in the pairwise template's export shape (`data.text1` / `data.text2`, a
    `pairwise` result `{"selected": "left"|"right"}`): 12 tasks, two named annotators each."""
    tasks, want = [], {}
    for t in range(12):
        anns = []
        for k, who in enumerate(ANNOTATORS[:2]):
            side = "left" if (t + k) % 3 else "right"
            anns.append({"id": 5000 + 10 * t + k, "completed_by": {"id": k + 1, "email": who},
                         "result": [{"from_name": "pw", "to_name": "pw", "type": "pairwise",
                                     "value": {"selected": side}}]})
            want[(who, str(t))] = "model-l" if side == "left" else "model-r"
        tasks.append({"id": t, "data": {"prompt": f"p{t}", "text1": f"L{t}", "text2": f"R{t}"},
                      "annotations": anns})
    f = tmp_path / "pw.json"
    f.write_text(json.dumps(tasks))
    summary, _ = run_peer("labelstudio", f, "--study", "pw", "--owner", "lead",
                          "--option", "input_field=prompt",
                          "--option", "pair_fields=text1,text2",
                          "--option", "pair_candidates=model-l,model-r")
    assert summary["created"]["comparison"] == 12 and summary["created"]["annotation"] == 24
    got = {}
    for a in Annotation.objects.select_related("annotator", "comparison__item",
                                               "comparison__output_a__candidate",
                                               "comparison__output_b__candidate"):
        assert a.comparison is not None
        winner = a.comparison.output_a if a.value == "A" else a.comparison.output_b
        assert a.value in ("A", "B")
        got[(a.annotator.username.split(":", 1)[1], a.comparison.item.external_id)] = \
            winner.candidate.name
    assert got == want
