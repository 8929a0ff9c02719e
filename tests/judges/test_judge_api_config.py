"""Judge config validation (allow-list, key-looking values) and versioning by content hash."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from judges.config import base_url_allowed, config_hash, config_validate
from judges.models import Judge, JudgeVersion
from judges.prompts import DEFAULT_USER_PROMPTS
from judges.services import (
    judge_config_validate,
    judge_create,
    judge_version_for_config,
    judge_version_get_or_create,
)
from reviewhub.api.errors import Conflict, ValidationFailed
from tests.judges.judge_fixtures import llm_config

LOCAL = "http://127.0.0.1:8000/v1"
# Loopback is callable only because it is listed (nothing is implicit).
ALLOWED = ["https://api.openai.com", "https://api.anthropic.com", "https://gw.corp.example/llm",
           "http://127.0.0.1:8000"]
KEYS_ALLOWED = ["*_API_KEY", "RH_TEST_JUDGE_KEY", "RH_JUDGE_KEY", "_PRIVATE", "VLLM_*"]


def validate(config: dict[str, Any]) -> dict[str, Any]:
    return config_validate(config, kind="llm", allowed_base_urls=ALLOWED,
                           allowed_key_env=KEYS_ALLOWED)


# --- allow-list ----------------------------------------------------------------------------


@pytest.mark.parametrize("url", [
    "https://api.openai.com/v1", "https://api.openai.com:443/v1", "https://api.anthropic.com",
    "https://gw.corp.example/llm", "https://gw.corp.example/llm/v1",
    "https://gw.corp.example/llm/", "https://API.OpenAI.com/v1", "http://127.0.0.1:8000/v1",
    "http://127.0.0.1:8000",
])
def test_allowed_urls(url: str) -> None:
    assert base_url_allowed(url, ALLOWED)
    assert validate(llm_config(url))["base_url"] == url.rstrip("/")


@pytest.mark.parametrize("url", [
    "https://api.openai.com.evil.example/v1", "http://api.openai.com/v1",
    "https://api.openai.com:8443/v1", "https://gw.corp.example/llm-other",
    "https://gw.corp.example/", "http://10.0.0.5:8000/v1", "http://169.254.169.254/latest",
    "http://0.0.0.0:8000/v1", "https://evil.example/v1",
    # loopback is no longer implicit: only the listed host and port are
    "http://127.0.0.1:8001/v1", "http://127.8.9.10:1/v1", "http://localhost:8000/v1",
    "http://localhost:11434/v1", "http://[::1]:8000/v1", "http://LOCALHOST:4000",
])
def test_refused_urls_name_the_url_and_the_setting(url: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate(llm_config(url))
    assert info.value.code == "base_url_not_allowed"
    assert url in info.value.message
    assert "REVIEWHUB_JUDGE_ALLOWED_BASE_URLS" in info.value.message
    assert info.value.details["errors"][0]["url"] == url


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/v1", "127.0.0.1:8000", "http://user:pw@127.0.0.1/v1",
                                 "http://127.0.0.1:8000/v1?key=1", "http://127.0.0.1:99999/v1", ""])
def test_malformed_urls(url: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate(llm_config(url))
    assert info.value.details["errors"][0]["path"] == "base_url"


def test_service_reads_the_allow_list_setting() -> None:
    config = llm_config("https://vllm.internal.example/v1")
    with pytest.raises(ValidationFailed):
        judge_config_validate(config)
    with override_settings(REVIEWHUB_JUDGE_ALLOWED_BASE_URLS=["https://vllm.internal.example"]):
        assert judge_config_validate(config)["base_url"] == "https://vllm.internal.example/v1"


def test_service_reads_the_key_allow_list_setting() -> None:
    config = llm_config("https://api.openai.com/v1", api_key_env="VLLM_TOKEN")
    with pytest.raises(ValidationFailed) as info:
        judge_config_validate(config)
    assert info.value.details["errors"][0]["path"] == "api_key_env"
    assert "REVIEWHUB_JUDGE_KEY_ENV_ALLOWED" in info.value.message
    with override_settings(REVIEWHUB_JUDGE_KEY_ENV_ALLOWED=["VLLM_TOKEN"]):
        assert judge_config_validate(config)["api_key_env"] == "VLLM_TOKEN"


def test_service_reads_the_private_network_setting() -> None:
    config = llm_config("http://localhost:11434/v1", api_key_env=None)
    with override_settings(REVIEWHUB_JUDGE_ALLOWED_BASE_URLS=["https://api.openai.com"]):
        with pytest.raises(ValidationFailed) as info:
            judge_config_validate(config)
        assert info.value.code == "base_url_not_allowed"
        with override_settings(REVIEWHUB_JUDGE_ALLOW_PRIVATE_NETWORKS=True):
            assert judge_config_validate(config)["base_url"] == "http://localhost:11434/v1"


def test_default_settings_list_no_loopback_and_only_api_key_names() -> None:
    """What an operator gets without setting anything (the test run itself lists its
    loopback provider in pyproject.toml, as an operator would)."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("REVIEWHUB_JUDGE_")}
    code = ("import json, reviewhub.settings as s; print(json.dumps(["
            "s.REVIEWHUB_JUDGE_ALLOWED_BASE_URLS, s.REVIEWHUB_JUDGE_ALLOW_PRIVATE_NETWORKS, "
            "s.REVIEWHUB_JUDGE_KEY_ENV_ALLOWED]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__)))))
    urls, private, keys = json.loads(out.stdout.strip().splitlines()[-1])
    assert urls == ["https://api.openai.com", "https://api.anthropic.com"]
    assert private is False and keys == ["*_API_KEY"]


# --- keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [
    "sk-proj-abcdefghijklmnopqrstuvwxyz0123", "sk-ant-api03-abcdefghijklmnop", "sk_live_x",
    "AKIAIOSFODNN7EXAMPLE", "openai_api_key", "OPENAI-API-KEY", "1KEY", "Bearer abc",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567",
])
def test_api_key_env_must_be_a_variable_name(value: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate(llm_config(LOCAL, api_key_env=value))
    assert info.value.details["errors"][0]["path"] == "api_key_env"
    assert value not in info.value.message or "looks like" not in info.value.message


@pytest.mark.parametrize("value", ["OPENAI_API_KEY", "RH_JUDGE_KEY", "_PRIVATE", "VLLM_KEY_2"])
def test_api_key_env_names_accepted(value: str) -> None:
    assert validate(llm_config(LOCAL, api_key_env=value))["api_key_env"] == value


@pytest.mark.parametrize("value", ["DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL",
                                   "CELERY_BROKER_URL", "PATH", "REVIEWHUB_API_KEY",
                                   "DJANGO_API_KEY", "OTHER_SECRET"])
def test_api_key_env_off_the_allow_list_names_the_field(value: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate(llm_config(LOCAL, api_key_env=value))
    assert info.value.details["errors"][0]["path"] == "api_key_env"
    assert info.value.code == "api_key_env_not_allowed"


def test_no_key_env_is_allowed_for_local_servers() -> None:
    assert validate(llm_config(LOCAL, api_key_env=None))["api_key_env"] is None


@pytest.mark.parametrize("config", [
    llm_config(LOCAL, api_key="sk-whatever"),
    llm_config(LOCAL, extra_body={"api_key": "x"}),
    llm_config(LOCAL, extra_body={"headers": {"Authorization": "x"}}),
    llm_config(LOCAL, system_prompt="Use key sk-proj-abcdefghijklmnopqrstuvwxyz123 please"),
    llm_config(LOCAL, model_family="sk-ant-abcdefghijklmnopqrstuvwxyz"),
])
def test_keys_refused_anywhere(config: dict[str, Any]) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate(config)
    assert "api_key_env" in info.value.message or "unknown field" in info.value.message


# --- other fields -------------------------------------------------------------------------


@pytest.mark.parametrize(("overrides", "field"), [
    ({"provider": "cohere"}, "provider"),
    ({"model": ""}, "model"),
    ({"samples": 0}, "samples"),
    ({"samples": 1.5}, "samples"),
    ({"parameters": {"temperature": 3}}, "parameters.temperature"),
    ({"parameters": {"temperature": "hot"}}, "parameters.temperature"),
    ({"parameters": {"max_tokens": 0}}, "parameters.max_tokens"),
    ({"parameters": {"seed": 1.5}}, "parameters.seed"),
    ({"parameters": {"frequency": 1}}, "parameters.frequency"),
    ({"response_format": "xml"}, "response_format"),
    ({"parser": {"name": "regex"}}, "parser.name"),
    ({"parser": {"name": "json_verdict", "version": 9}}, "parser.version"),
    ({"parser": {"fallback": "anything"}}, "parser.fallback"),
    ({"logprobs": "yes"}, "logprobs"),
    ({"top_logprobs": 5}, "top_logprobs"),
    ({"logprobs": True, "top_logprobs": 50}, "top_logprobs"),
    ({"prices": {"input_per_mtok": 1}}, "prices.output_per_mtok"),
    ({"prices": {"input_per_mtok": -1, "output_per_mtok": 1}}, "prices.input_per_mtok"),
    ({"timeout_s": 0}, "timeout_s"),
    ({"extra_body": {"stream": True}}, "extra_body"),
    ({"colour": "blue"}, "colour"),
])
def test_field_errors_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        validate(llm_config(LOCAL, **overrides))
    assert info.value.details["errors"][0]["path"] == field


def test_anthropic_specific_rules() -> None:
    base = llm_config("https://api.anthropic.com", provider="anthropic", parameters={})
    assert validate(base)["parameters"]["max_tokens"] == 1024
    with pytest.raises(ValidationFailed, match="logprobs"):
        validate({**base, "logprobs": True})
    with pytest.raises(ValidationFailed, match="seed"):
        validate({**base, "parameters": {"seed": 1}})


def test_canonical_form_materialises_defaults() -> None:
    config = validate(llm_config(LOCAL))
    assert config["user_prompt"] == DEFAULT_USER_PROMPTS
    assert config["parser"] == {"name": "json_verdict", "version": 1, "fallback": "final_line"}
    assert config["samples"] == 1 and config["response_format"] == "json_schema"
    assert validate(config) == config  # idempotent


def test_string_prompt_applies_to_matching_scales() -> None:
    config = validate(llm_config(LOCAL, user_prompt="Grade: {output}"))
    assert config["user_prompt"]["binary"] == "Grade: {output}"
    assert config["user_prompt"]["ordinal"] == "Grade: {output}"
    assert config["user_prompt"]["pairwise"] == DEFAULT_USER_PROMPTS["pairwise"]


# --- hashing and versions -------------------------------------------------------------------


def test_hash_ignores_key_order_but_not_content() -> None:
    a = validate(llm_config(LOCAL))
    b = dict(reversed(list(copy.deepcopy(a).items())))
    assert config_hash(a) == config_hash(b)
    changes: list[dict[str, Any]] = [
        {"model": "other"}, {"parameters": {"temperature": 0.5, "max_tokens": 128, "seed": 7}},
        {"parameters": {"temperature": 0.0, "max_tokens": 129, "seed": 7}},
        {"parameters": {"temperature": 0.0, "max_tokens": 128, "seed": 8}},
        {"user_prompt": {"binary": "Grade {output} strictly."}},
        {"system_prompt": "Be harsh."}, {"response_format": "text"},
        {"parser": {"fallback": "none"}}, {"samples": 3}, {"logprobs": True},
        {"base_url": "https://gw.corp.example/llm/v1"},
    ]
    hashes = {config_hash(a)}
    for change in changes:
        hashes.add(config_hash(validate({**llm_config(LOCAL), **change})))
    assert len(hashes) == len(changes) + 1


@pytest.mark.django_db
def test_same_config_same_version_any_change_new_version(study: Any) -> None:
    judge = judge_create(study=study, name="gpt", kind=Judge.Kind.LLM, description="",
                         created_by=None)
    first = judge_version_get_or_create(judge=judge, config=llm_config(LOCAL))
    assert first.created and first.version.version == 1
    again = judge_version_get_or_create(judge=judge, config=llm_config(LOCAL))
    assert not again.created and again.version.pk == first.version.pk
    # The defaults written out explicitly are the same config.
    explicit = judge_version_get_or_create(judge=judge, config=first.version.config)
    assert explicit.version.pk == first.version.pk
    changed = judge_version_get_or_create(judge=judge,
                                          config=llm_config(LOCAL, model="sim-judge-2"))
    assert changed.created and changed.version.version == 2
    assert changed.version.content_hash == config_hash(changed.version.config)
    assert judge_version_for_config(judge=judge, config=llm_config(LOCAL)).version == 1
    assert JudgeVersion.objects.filter(judge=judge).count() == 2


@pytest.mark.django_db
def test_versions_are_per_judge_and_model_family_recorded(study: Any) -> None:
    one = judge_create(study=study, name="a", kind=Judge.Kind.LLM)
    two = judge_create(study=study, name="b", kind=Judge.Kind.LLM)
    config = llm_config(LOCAL, model_family="gpt-4")
    v1 = judge_version_for_config(judge=one, config=config)
    v2 = judge_version_for_config(judge=two, config=config)
    assert v1.pk != v2.pk and v1.version == v2.version == 1
    assert v1.model_family == "gpt-4"


@pytest.mark.django_db
def test_programmatic_and_imported_versions(study: Any) -> None:
    check = judge_create(study=study, name="len", kind=Judge.Kind.PROGRAMMATIC)
    v = judge_version_for_config(judge=check, config={"check": "length", "max": 10})
    assert v.config == {"check": "length", "unit": "chars", "min": None, "max": 10}
    with pytest.raises(ValidationFailed):
        judge_version_for_config(judge=check, config=llm_config(LOCAL))
    imported = judge_create(study=study, name="mt-bench", kind=Judge.Kind.IMPORTED)
    version = judge_version_for_config(judge=imported, config={"source": "MT-Bench GPT-4"})
    assert version.version == 1


@pytest.mark.django_db
def test_judge_create_rules(study: Any) -> None:
    judge_create(study=study, name="x", kind=Judge.Kind.LLM)
    with pytest.raises(Conflict):
        judge_create(study=study, name="x", kind=Judge.Kind.LLM)
    with pytest.raises(ValidationFailed):
        judge_create(study=study, name=" ", kind=Judge.Kind.LLM)
    with pytest.raises(ValidationFailed):
        judge_create(study=study, name="y", kind="oracle")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_creators_get_one_version(study: Any) -> None:
    judge = judge_create(study=study, name="race", kind=Judge.Kind.LLM)
    results: list[int] = []
    errors: list[BaseException] = []

    def create(model: str) -> None:
        try:
            results.append(judge_version_for_config(
                judge=judge, config=llm_config(LOCAL, model=model)).version)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(f"m{i % 3}",)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(set(results)) == [1, 2, 3]
    assert sorted(JudgeVersion.objects.filter(judge=judge).values_list("version", flat=True)) == [
        1, 2, 3]
