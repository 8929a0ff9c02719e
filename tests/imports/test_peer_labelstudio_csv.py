"""Issue 25 §3, Label Studio's CSV export (Export -> CSV / TSV).

The shared fixtures hold JSON exports only, so the CSV files here are written from them, and
from the 40-task export of test_peer_labelstudio.py, by `_ls_csv`: label-studio-sdk's own CSV
writer (`converter/exports/csv2.py` with `annotation_result_from_task` and `prettify_result` of
`converter/utils.py`) followed line by line — one row per annotation not cancelled, newest
first, a task without annotations as one row of its own, columns in name order, each result
under its `from_name` as a single choice's text or the JSON list of the tag's values without
their type, `annotator` the e-mail (else the id), `csv.QUOTE_NONNUMERIC`. Each CSV must import
the same ratings as the JSON export it was written from.
"""

from __future__ import annotations

import csv
import io
import json
from copy import deepcopy
from pathlib import Path
from typing import Any

import pytest

from annotations.models import Annotation
from studies.models import Item, Output

from .cli import peer_error, run_peer
from .test_peer_labelstudio import _built, _labels, _opts

pytestmark = pytest.mark.django_db

# The control tags of the exported project (Label Studio writes only the results of tags in
# the project's labeling config): from_name -> tag type.
TAGS = {"verdict": "Choices", "stars": "Rating", "comment": "TextArea", "pw": "Pairwise",
        "sentiment": "Choices"}


def _prettify(values: list[dict[str, Any]]) -> Any:
    out, tag_type = [], None
    for v in values:
        j = deepcopy(v)
        tag_type = j.pop("type")
        if tag_type == "Choices" and len(j["choices"]) == 1:
            out.append(j["choices"][0])
        elif tag_type == "TextArea" and len(j["text"]) == 1:
            out.append(j["text"][0])
        else:
            out.append(j)
    return out[0] if tag_type in ("Choices", "TextArea") and len(out) == 1 else out


def _ls_csv(tasks: list[dict[str, Any]], tags: dict[str, str], sep: str = ",") -> str:
    items = []
    for task in tasks:
        anns = task.get("annotations") or []
        base = {"id": task["id"], "input": task["data"]}
        if not anns:
            items.append({**base, "output": {}, "completed_by": {}, "annotation_id": None,
                          "created_at": None, "updated_at": None, "lead_time": None})
        kept = [a for a in anns if not (a.get("skipped") or a.get("was_cancelled"))]
        for ann in sorted(kept, key=lambda a: a.get("created_at", 0), reverse=True):
            outputs: dict[str, list[dict[str, Any]]] = {}
            for r in ann["result"]:
                if r.get("from_name") in tags:
                    outputs.setdefault(r["from_name"], []).append(
                        {**deepcopy(r["value"]), "type": tags[r["from_name"]]})
            items.append({**base, "output": outputs, "completed_by": ann.get("completed_by", {}),
                          "annotation_id": ann.get("id"), "created_at": ann.get("created_at"),
                          "updated_at": ann.get("updated_at"), "lead_time": ann.get("lead_time")})
    keys = {"annotator", "annotation_id", "created_at", "updated_at", "lead_time"}
    for item in items:
        keys.update(item["input"], item["output"], ["id"])
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=sorted(keys), quoting=csv.QUOTE_NONNUMERIC,
                            delimiter=sep)
    writer.writeheader()
    for item in items:
        record: dict[str, Any] = {"id": item["id"]}
        for name, value in item["output"].items():
            pretty = _prettify(value)
            record[name] = pretty if isinstance(pretty, str) else json.dumps(
                pretty, ensure_ascii=False)
        for name, value in item["input"].items():
            record[name] = json.dumps(value, ensure_ascii=False) \
                if isinstance(value, (dict, list)) else value
        who = item["completed_by"]
        record["annotator"] = who.get("email") if isinstance(who, dict) else str(who)
        for k in ("annotation_id", "created_at", "updated_at", "lead_time"):
            record[k] = item[k]
        writer.writerow(record)
    return buf.getvalue()


def test_the_built_export_as_csv_imports_what_its_json_does(lead: Any, tmp_path: Path) -> None:
    f, want = _built(tmp_path / "big.json")
    text = _ls_csv(json.loads(f.read_text()), TAGS)
    header = next(csv.reader(io.StringIO(text)))
    assert header == ["annotation_id", "annotator", "comment", "created_at", "id", "lead_time",
                      "prompt", "response", "stars", "updated_at", "verdict"]
    assert '"[{""rating"": ' in text  # a rating is the JSON list of its values
    path = tmp_path / "project-1.csv"
    path.write_text(text, encoding="utf-8")
    # The result columns must be named: the header cannot tell them from the data fields.
    err = peer_error("labelstudio", path, "--study", "csv", "--owner", "lead", *_opts())
    assert "results=NAME" in err and "comment, prompt, response, stars, verdict" in err
    # A text area's one text is written as a single choice is: named as a result column, its
    # free texts are refused as a criterion with no scale, not imported as labels.
    err = peer_error("labelstudio", path, "--study", "csv", "--owner", "lead", *_opts(),
                     "--option", "results=verdict,stars,comment")
    assert "cannot infer the scale of 'comment'" in err and Item.objects.count() == 0
    summary, err = run_peer("labelstudio", path, "--study", "csv", "--owner", "lead", *_opts(),
                            "--option", "results=verdict,stars")
    assert summary["created"]["item"] == 40 and summary["created"]["output"] == 40
    # The exporter left the cancelled annotation out.
    assert summary["created"]["annotation"] == 2 * len(want) == 238
    assert _labels("verdict") == want
    stars = Annotation.objects.get(criterion__key="stars", output__item__external_id="507",
                                   annotator__username__endswith="ben@example.test")
    assert stars.value == str(1 + (7 * 7 + 1) % 5)
    assert Item.objects.get(external_id="507").input == "question 7"
    assert Output.objects.get(item__external_id="507").text == "answer 7 <b>bold</b>"
    # The JSON export of the same project then changes nothing: the same items, raters, values.
    again, _ = run_peer("labelstudio", f, "--study", "csv", *_opts())
    assert again["unchanged"]["annotation"] == 238 and not again["created"].get("annotation")


def test_a_tsv_export_and_a_task_without_annotations(lead: Any, tmp_path: Path) -> None:
    f, want = _built(tmp_path / "big.json")
    tasks = json.loads(f.read_text())
    tasks.append({"id": 999, "data": {"prompt": "never rated", "response": "x"},
                  "annotations": []})
    path = tmp_path / "project-1.tsv"
    path.write_text(_ls_csv(tasks, TAGS, sep="\t"), encoding="utf-8")
    summary, err = run_peer("labelstudio", path, "--study", "tsv", "--owner", "lead", *_opts(),
                            "--option", "results=verdict,stars")
    assert summary["created"]["annotation"] == 238
    assert "dropped: 1 tasks without annotations" in err
    assert _labels("verdict") == want


def test_the_real_fixtures_as_csv(lead: Any, data_dir: Path, tmp_path: Path) -> None:
    folder = data_dir / "peer-exports" / "label-studio"
    if not folder.is_dir():
        pytest.skip(f"{folder} is missing")
    # A full server export: completed_by {id, email}, lead_time, history.
    tasks = json.loads((folder / "sdk_csv_test_history.json").read_text())
    path = tmp_path / "history.csv"
    path.write_text(_ls_csv(tasks, TAGS), encoding="utf-8")
    summary, _ = run_peer("labelstudio", path, "--study", "hist", "--owner", "lead",
                            "--option", "output_field=text", "--option", "candidate=tweets",
                            "--option", "results=sentiment",
                            "--scale", "sentiment=categorical:Positive,Neutral,Negative")
    assert summary["created"]["annotation"] == 1
    assert _labels("sentiment") == {("sergei@heartex.test", "6141"): "Positive"}
    assert any("lead_time" in n for n in summary["notes"])
    # Quotes, tabs, newlines and Cyrillic in a choice survive the CSV quoting; list-valued
    # data fields are JSON text.
    tasks = json.loads((folder / "sdk_csv_test2.json").read_text())
    res = tasks[0]["annotations"][0]["result"][0]
    choice = res["value"]["choices"][0]
    path = tmp_path / "test2.csv"
    path.write_text(_ls_csv(tasks, {res["from_name"]: "Choices"}), encoding="utf-8")
    run_peer("labelstudio", path, "--study", "t2", "--owner", "lead",
             "--option", "output_field=title", "--option", "input_field=writers",
             "--option", "candidate=c", "--option", f"results={res['from_name']}",
             "--scale", f"{res['from_name']}=categorical:{choice.strip()},No")
    [ann] = Annotation.objects.filter(criterion__rubric__study__slug="t2")
    assert ann.value == choice.strip() and ann.annotator.username.endswith("test@heartex.com")
    item = Item.objects.get(study__slug="t2")
    assert json.loads(item.input) == tasks[0]["data"]["writers"]


def test_pairwise_results_in_a_csv(lead: Any, tmp_path: Path) -> None:
    tasks, want = [], {}
    for t in range(6):
        anns = []
        for k, who in enumerate(["ana@example.test", "ben@example.test"]):
            side = "left" if (t + k) % 3 else "right"
            anns.append({"id": 50 + 10 * t + k, "completed_by": {"id": k + 1, "email": who},
                         "result": [{"from_name": "pw", "to_name": "pw", "type": "pairwise",
                                     "value": {"selected": side}}]})
            want[(who, str(t))] = "A" if side == "left" else "B"
        tasks.append({"id": t, "data": {"text1": f"L{t}", "text2": f"R{t}"},
                      "annotations": anns})
    path = tmp_path / "pw.csv"
    path.write_text(_ls_csv(tasks, TAGS), encoding="utf-8")
    summary, _ = run_peer("labelstudio", path, "--study", "pwcsv", "--owner", "lead",
                          "--option", "pair_fields=text1,text2",
                          "--option", "pair_candidates=model-l,model-r",
                          "--option", "results=pw")
    assert summary["created"]["comparison"] == 6
    assert _labels("pw") == want


def test_a_csv_is_refused_with_predictions_or_without_task_ids(lead: Any, tmp_path: Path) -> None:
    f, _ = _built(tmp_path / "big.json")
    path = tmp_path / "p.csv"
    path.write_text(_ls_csv(json.loads(f.read_text()), TAGS), encoding="utf-8")
    err = peer_error("labelstudio", path, "--study", "x", "--owner", "lead", *_opts(),
                     "--option", "results=verdict", "--option", "predictions=judge")
    assert "annotations only" in err
    err = peer_error("labelstudio", path, "--study", "x", "--owner", "lead", *_opts(),
                     "--option", "results=verdict,nosuch")
    assert "no column 'nosuch'" in err
    no_ids = tmp_path / "noid.csv"
    no_ids.write_text("annotator,verdict,response\nana@example.test,good,x\n", encoding="utf-8")
    err = peer_error("labelstudio", no_ids, "--study", "x", "--owner", "lead", *_opts(),
                     "--option", "results=verdict")
    assert "no 'id' column" in err
    assert Item.objects.count() == 0


def test_the_csv_through_the_rest_endpoint(client_for: Any, study: Any, lead: Any,
                                           tmp_path: Path) -> None:
    from studies.models import Membership
    Membership.objects.get_or_create(study=study, user=lead, defaults={"role": "lead"})
    f, want = _built(tmp_path / "big.json")
    body = _ls_csv(json.loads(f.read_text()), TAGS).encode()
    url = (f"/api/studies/{study.slug}/imports/labelstudio?input_field=prompt"
           "&output_field=response&candidate=model-x&scale=stars=ordinal:1-5")
    client = client_for(lead)
    # The upload has no file name: the format is an option.
    resp = client.post(url + "&results=verdict,stars", data=body, content_type="text/csv")
    assert resp.status_code == 400, resp.content
    assert "not valid JSON" in resp.json()["error"]["message"]
    resp = client.post(url + "&file_format=csv", data=body, content_type="text/csv")
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["details"]["errors"][0]["path"] == "results"
    resp = client.post(url + "&file_format=csv&results=verdict,stars", data=body,
                       content_type="text/csv")
    assert resp.status_code == 200, resp.content
    assert resp.json()["created"]["annotation"] == 238
    assert _labels("verdict") == want
