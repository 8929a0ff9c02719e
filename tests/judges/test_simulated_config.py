"""A judge version is simulated because its config records it (`simulated: true`, validated,
part of the config hash), never because of its name: the flag reaches JudgeVersion.simulated
through the config path (runnable and imported judges, the demo seed's path), the judge API
and the judges page show it, and the selection report stamps its result from it alone."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from annotations.models import Annotation
from judges.config import config_hash, config_simulated, config_validate
from judges.models import JudgeVersion, Verdict
from judges.services import (
    judge_create_with_config,
    judge_imported_version_get_or_create,
    judge_version_get_or_create,
)
from reviewhub.errors import ValidationFailed
from studies.models import Output
from tests.reports.test_decision_table import A, B, build, small_study

LLM = {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
ALLOWED = ["http://127.0.0.1:*"]


def _canonical(config: dict[str, Any], kind: str | None = "llm") -> dict[str, Any]:
    return config_validate(config, kind=kind, allowed_base_urls=ALLOWED)


def test_simulated_is_validated_and_versions() -> None:
    plain = _canonical(LLM)
    flagged = _canonical({**LLM, "simulated": True})
    assert "simulated" not in plain and not config_simulated(plain)
    assert flagged["simulated"] is True and config_simulated(flagged)
    # Part of the hash: a flagged config is another version; false is the default (same hash).
    assert config_hash(flagged) != config_hash(plain)
    assert config_hash(_canonical({**LLM, "simulated": False})) == config_hash(plain)
    for kind, cfg in (("programmatic", {"check": "match"}), ("imported", {"source": "x"})):
        assert _canonical({**cfg, "simulated": True}, kind)["simulated"] is True
        assert "simulated" not in _canonical(cfg, kind)
    with pytest.raises(ValidationFailed) as exc:
        _canonical({**LLM, "simulated": "yes"})
    assert exc.value.details["errors"][0]["path"] == "simulated"


def _with_judge(slug: str, name: str, config: dict[str, Any]) -> dict[str, Any]:
    """The decision-table study (every output human-labelled) with a judge created through the
    config path, agreeing with the humans on every output."""
    kw: dict[str, Any] = {"correct": {A: list(range(20)), B: list(range(10))},
                          "labelled": {A: list(range(30)), B: list(range(30))}}
    data = small_study(slug, judge=False, **kw)
    _, version = judge_create_with_config(study=data["study"], name=name, kind="llm",
                                          config=config)
    assert version is not None
    Verdict.objects.bulk_create([
        Verdict(judge_version=version, criterion=a.criterion, output_id=a.output_id,
                value=a.value, value_num=a.value_num)
        for a in Annotation.objects.filter(output__study=data["study"])])
    data["version"] = version
    return data


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_sim_name_without_the_flag_is_not_simulated() -> None:
    data = _with_judge("simcfg-name", "sim-anything", LLM)
    assert data["version"].simulated is False
    _, r = build(data)
    assert r.judge is not None and r.judge.display.startswith("sim-anything")
    assert r.simulated is False and r.judge.simulated is False


@pytest.mark.postgres
@pytest.mark.django_db
def test_another_name_with_the_flag_is_simulated(client: Any) -> None:
    data = _with_judge("simcfg-flag", "gpt-grader", {**LLM, "simulated": True})
    version: JudgeVersion = data["version"]
    assert version.simulated is True and version.config["simulated"] is True
    _, r = build(data)
    assert r.simulated is True and r.judge is not None and r.judge.simulated is True
    # The same config without the flag is another version, not simulated.
    plain = judge_version_get_or_create(judge=version.judge, config=LLM)
    assert plain.created and plain.version.simulated is False
    # The judge API and the judges page show the flag.
    client.force_login(data["owner"])
    study = data["study"]
    resp = client.get(reverse("api-judge-versions", args=[study.slug, version.judge_id]))
    assert resp.status_code == 200, resp.content
    rows = resp.json()
    rows = rows.get("results", rows) if isinstance(rows, dict) else rows
    by_version = {row["version"]: row["simulated"] for row in rows}
    assert by_version == {1: True, 2: False}
    page = client.get(reverse("judge-list-page", args=[study.slug]))
    assert page.status_code == 200
    assert b'<span class="badge badge-simulated">simulated</span>' in page.content


@pytest.mark.postgres
@pytest.mark.django_db
def test_imported_judge_flag_comes_from_its_config() -> None:
    data = small_study("simcfg-imp", judge=False, correct={A: [], B: []},
                       labelled={A: [], B: []})
    study = data["study"]
    real = judge_imported_version_get_or_create(study=study, name="sim-file", label="v1",
                                                value_type="label", config={"source": "file"})
    assert real.version.simulated is False and "simulated" not in real.version.config
    sim = judge_imported_version_get_or_create(study=study, name="file-judge", label="v1",
                                               value_type="label",
                                               config={"source": "demo", "simulated": True})
    assert sim.version.simulated is True and sim.version.config["simulated"] is True
    with pytest.raises(ValidationFailed):
        judge_imported_version_get_or_create(study=study, name="bad", label="v1",
                                             value_type="label", config={"simulated": 1})
    assert Output.objects.filter(study=study).exists()
