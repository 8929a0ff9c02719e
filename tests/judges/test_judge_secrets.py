"""Secrets and the network from judge configs (issue 11, item 3).

- `api_key_env` may only name a variable on the operator's allow-list, never one of
  ReviewHub's own (DJANGO_SECRET_KEY, DATABASE_URL, ...): refused at validation (400 naming
  `api_key_env`) and again by the worker for configs stored before the rule.
- Loopback and private base URLs are called only when the operator lists them (or admits
  private networks); an unlisted endpoint's error body never reaches a lead.
- The base-URL allow-list compares normalised URLs (`base_url_under`).
"""

from __future__ import annotations

import copy
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from judges.config import (
    base_url_access,
    base_url_under,
    config_validate,
    host_is_private,
    key_env_refusal,
)
from judges.executor import error_reason_shown, run_drain
from judges.models import Judge, JudgeJob, JudgeRun, JudgeVersion, Verdict
from judges.providers import PermanentProviderError, TransientProviderError
from judges.runs import judge_run_start
from reviewhub.api.errors import ValidationFailed
from tests.judges.provider_server import ProviderServer, raw, server_error

from . import run_fixtures
from .run_fixtures import KEY_ENV, EnqueueSpy, build_study_data, llm_config, make_version

provider_server = run_fixtures.provider_server
judge_key_env = run_fixtures.judge_key_env

# What the worker would have sent as a bearer token before the fix.
SECRET_VALUE = "django-secret-value-that-must-never-leave-the-server"
BODY_SECRET = "INTERNAL-SERVICE-REPLY-redis_password=hunter2"


def versions_url(judge_id: int) -> str:
    return f"/api/studies/alpha/judges/{judge_id}/versions"


def create_judge(client: Any, config: dict[str, Any]) -> Any:
    return client.post("/api/studies/alpha/judges",
                       {"name": "gpt-judge", "kind": "llm", "config": config}, format="json")


@pytest.fixture(autouse=True)
def fast_retries(settings: Any) -> None:
    settings.REVIEWHUB_JUDGE_BACKOFF_BASE_S = 0.01
    settings.REVIEWHUB_JUDGE_BACKOFF_CAP_S = 0.05
    settings.REVIEWHUB_JUDGE_MAX_ATTEMPTS = 2
    settings.REVIEWHUB_PROVIDER_LIMITS = {}


def drive(run: JudgeRun, rounds: int = 30) -> None:
    from django.utils import timezone

    for _ in range(rounds):
        report = run_drain(run_id=run.pk, concurrency=4, slice_s=30)
        run.refresh_from_db()
        if run.status != JudgeRun.Status.RUNNING:
            return
        if report.next_available_at is not None:
            time.sleep(max(0.0, (report.next_available_at - timezone.now()).total_seconds()))
    raise AssertionError(f"run still {run.status}")


def legacy_version(study: Any, config: dict[str, Any]) -> JudgeVersion:
    """A version stored as it was before the allow-lists: written directly, not validated."""
    judge, _ = Judge.objects.get_or_create(study=study, name="legacy",
                                           defaults={"kind": Judge.Kind.LLM})
    n = judge.versions.count() + 1
    return JudgeVersion.objects.create(judge=judge, version=n, content_hash=f"{n:064x}",
                                       config=config)


def start(study_data: Any, version: JudgeVersion) -> JudgeRun:
    return judge_run_start(study=study_data.study, judge_version=version,
                           criteria=[study_data.binary], enqueue=EnqueueSpy())


# --- api_key_env: validation --------------------------------------------------------------

OWN_VARIABLES = ["DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "PATH",
                 "HOME", "SECRET_KEY", "PGPASSWORD", "HTTPS_PROXY",
                 # match the default `*_API_KEY` but are ReviewHub's own
                 "DJANGO_API_KEY", "REVIEWHUB_JUDGE_API_KEY", "CELERY_API_KEY"]


@pytest.mark.django_db
@pytest.mark.parametrize("name", [*OWN_VARIABLES, "AWS_SECRET_ACCESS_KEY", "RH_JUDGE_KEY"])
def test_api_refuses_key_variables_off_the_allow_list(lead_client: Any, study: Any,
                                                       name: str) -> None:
    response = create_judge(lead_client, llm_config("https://api.openai.com/v1",
                                                    api_key_env=name))
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["details"]["errors"][0]["path"] == "api_key_env"
    assert error["code"] == "api_key_env_not_allowed"
    assert name in error["message"]
    assert not JudgeVersion.objects.exists() and not Judge.objects.exists()


@pytest.mark.django_db
def test_new_version_with_a_refused_key_variable_is_400(lead_client: Any, study: Any) -> None:
    first = create_judge(lead_client, llm_config("https://api.openai.com/v1",
                                                 api_key_env="OPENAI_API_KEY"))
    assert first.status_code == 201, first.json()
    judge_id = first.json()["judge"]["id"]
    response = lead_client.post(versions_url(judge_id), {"config": llm_config(
        "https://api.openai.com/v1", api_key_env="DJANGO_SECRET_KEY")}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"]["errors"][0]["path"] == "api_key_env"
    assert JudgeVersion.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("name", [*OWN_VARIABLES, "EMAIL_HOST_PASSWORD", "DATABASES"])
def test_own_variables_are_refused_even_when_the_operator_allows_everything(
    lead_client: Any, study: Any, settings: Any, name: str
) -> None:
    settings.REVIEWHUB_JUDGE_KEY_ENV_ALLOWED = ["*"]
    response = create_judge(lead_client, llm_config("https://api.openai.com/v1",
                                                    api_key_env=name))
    assert response.status_code == 400
    assert response.json()["error"]["details"]["errors"][0]["path"] == "api_key_env"


@pytest.mark.django_db
def test_operator_allow_list_admits_names_and_globs(lead_client: Any, study: Any,
                                                    settings: Any) -> None:
    settings.REVIEWHUB_JUDGE_KEY_ENV_ALLOWED = ["RH_JUDGE_KEY", "VLLM_*"]
    first = create_judge(lead_client, llm_config("https://api.openai.com/v1",
                                                 api_key_env="RH_JUDGE_KEY"))
    assert first.status_code == 201, first.json()
    url = versions_url(first.json()["judge"]["id"])
    glob = lead_client.post(url, {"config": llm_config(
        "https://api.openai.com/v1", api_key_env="VLLM_GPU_TOKEN")}, format="json")
    assert glob.status_code == 201, glob.json()
    # The default glob is not on this operator's list.
    refused = lead_client.post(url, {"config": llm_config(
        "https://api.openai.com/v1", api_key_env="OPENAI_API_KEY")}, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["details"]["errors"][0]["path"] == "api_key_env"


@pytest.mark.parametrize(("name", "allowed", "refused"), [
    ("OPENAI_API_KEY", ["*_API_KEY"], False),
    ("GROQ_API_KEY", ["*_API_KEY"], False),
    ("OPENAI_API_KEY_OLD", ["*_API_KEY"], True),
    ("OPENAI_KEY", ["*_API_KEY"], True),
    ("MY_TOKEN", ["MY_TOKEN"], False),
    ("MY_TOKEN2", ["MY_TOKEN"], True),
    ("DJANGO_SECRET_KEY", ["*"], True),
    ("REVIEWHUB_ANY_API_KEY", ["*_API_KEY"], True),
    ("DATABASE_API_KEY", ["*_API_KEY"], True),
    ("X_API_KEY", [], True),
    ("X_API_KEY", [" *_api_key "], False),  # patterns are trimmed and upper-cased
])
def test_key_env_refusal(name: str, allowed: list[str], refused: bool) -> None:
    assert (key_env_refusal(name, allowed=allowed) is not None) is refused


# --- api_key_env: the worker never sends a refused variable -------------------------------


def _legacy_config(server: ProviderServer, key_env: str) -> dict[str, Any]:
    canonical = config_validate(llm_config(server.openai_base_url), kind="llm",
                                allowed_base_urls=[server.url])
    config = copy.deepcopy(canonical)
    config["api_key_env"] = key_env  # what validation used to accept
    return config


@pytest.mark.django_db
@pytest.mark.parametrize("key_env", ["DJANGO_SECRET_KEY", "DATABASE_URL", "PATH"])
def test_stored_config_naming_an_own_variable_never_sends_it(
    study: Any, provider_server: ProviderServer, monkeypatch: pytest.MonkeyPatch, key_env: str
) -> None:
    monkeypatch.setenv(key_env, SECRET_VALUE)
    data = build_study_data(study, n_items=2, n_candidates=1)
    run = start(data, legacy_version(study, _legacy_config(provider_server, key_env)))
    drive(run)
    jobs = list(JudgeJob.objects.filter(run=run))
    assert jobs and all(j.status == "failed" and j.error_kind == "permanent" for j in jobs)
    assert all(key_env in j.error and "api_key_env" in j.error for j in jobs)
    assert all(SECRET_VALUE not in j.error for j in jobs)
    # Nothing was sent at all, so no Authorization header (with or without the secret).
    assert provider_server.count() == 0
    assert not any(SECRET_VALUE in str(r.headers) for r in provider_server.requests)


@pytest.mark.django_db
def test_stored_config_with_an_allowed_variable_sends_the_bearer_key(
    study: Any, provider_server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The control for the test above: the same legacy route does deliver an allowed key.
    monkeypatch.setenv("RH_LEGACY_API_KEY", "sk-test-allowed-value")
    data = build_study_data(study, n_items=1, n_candidates=1)
    run = start(data, legacy_version(study, _legacy_config(provider_server,
                                                           "RH_LEGACY_API_KEY")))
    drive(run)
    assert JudgeJob.objects.get(run=run).status == "done"
    assert [r.headers.get("authorization") for r in provider_server.requests] == [
        "Bearer sk-test-allowed-value"]


@pytest.mark.django_db
def test_operator_narrowing_the_key_allow_list_stops_a_stored_version(
    study: Any, provider_server: ProviderServer, judge_key_env: str, settings: Any
) -> None:
    data = build_study_data(study, n_items=1, n_candidates=1)
    version = make_version(study, llm_config(provider_server.openai_base_url))
    settings.REVIEWHUB_JUDGE_KEY_ENV_ALLOWED = ["OPENAI_API_KEY"]
    run = start(data, version)
    drive(run)
    job = JudgeJob.objects.get(run=run)
    assert job.status == "failed" and job.error_kind == "permanent"
    assert KEY_ENV in job.error and "REVIEWHUB_JUDGE_KEY_ENV_ALLOWED" in job.error
    assert provider_server.count() == 0


@pytest.mark.django_db
def test_preview_of_a_stored_config_naming_an_own_variable_is_refused(
    study: Any, provider_server: ProviderServer
) -> None:
    from judges.preview import judge_version_preview

    data = build_study_data(study, n_items=1, n_candidates=1)
    version = legacy_version(study, _legacy_config(provider_server, "DJANGO_SECRET_KEY"))
    with pytest.raises(ValidationFailed) as info:
        judge_version_preview(version=version, criterion=data.binary, subject=data.outputs[0])
    assert "DJANGO_SECRET_KEY" in info.value.message


# --- loopback and private networks --------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["http://127.0.0.1:6379", "http://localhost:8000/v1",
                                 "http://[::1]:8000/v1", "http://10.0.0.5/v1",
                                 "http://169.254.169.254/latest", "http://0.0.0.0:8000",
                                 "http://2130706433:8000/v1", "http://[fd00::1]/v1"])
def test_loopback_and_private_urls_are_refused_unless_listed(
    lead_client: Any, study: Any, settings: Any, url: str
) -> None:
    settings.REVIEWHUB_JUDGE_ALLOWED_BASE_URLS = ["https://api.openai.com"]
    response = create_judge(lead_client, llm_config(url, api_key_env=None))
    assert response.status_code == 400
    assert response.json()["error"]["details"]["errors"][0]["path"] == "base_url"
    assert not Judge.objects.exists()


@pytest.mark.django_db
def test_a_listed_loopback_prefix_is_allowed(lead_client: Any, study: Any,
                                            settings: Any) -> None:
    settings.REVIEWHUB_JUDGE_ALLOWED_BASE_URLS = ["http://127.0.0.1:8000/v1"]
    ok = create_judge(lead_client, llm_config("http://127.0.0.1:8000/v1",
                                              api_key_env="LOCAL_API_KEY"))
    assert ok.status_code == 201, ok.json()
    for url in ("http://127.0.0.1:8001/v1", "http://localhost:8000/v1",
                "http://127.0.0.1:8000/admin"):
        refused = lead_client.post(versions_url(ok.json()["judge"]["id"]),
                                   {"config": llm_config(url, api_key_env=None)}, format="json")
        assert refused.status_code == 400, url
        assert refused.json()["error"]["details"]["errors"][0]["path"] == "base_url"


@pytest.mark.django_db
def test_private_network_flag_admits_private_hosts_without_a_key(
    lead_client: Any, study: Any, settings: Any
) -> None:
    settings.REVIEWHUB_JUDGE_ALLOWED_BASE_URLS = ["https://api.openai.com"]
    settings.REVIEWHUB_JUDGE_ALLOW_PRIVATE_NETWORKS = True
    ok = create_judge(lead_client, llm_config("http://localhost:11434/v1", api_key_env=None))
    assert ok.status_code == 201, ok.json()
    # A key goes only to a listed URL: a name that resolved to 127.0.0.1 when checked may
    # point elsewhere when connected.
    keyed = lead_client.post(versions_url(ok.json()["judge"]["id"]), {"config": llm_config(
        "http://127.0.0.1:11434/v1", api_key_env="OPENAI_API_KEY")}, format="json")
    assert keyed.status_code == 400
    assert keyed.json()["error"]["details"]["errors"][0]["path"] == "api_key_env"
    public = lead_client.post(versions_url(ok.json()["judge"]["id"]), {"config": llm_config(
        "http://93.184.216.34/v1", api_key_env=None)}, format="json")
    assert public.status_code == 400
    assert public.json()["error"]["details"]["errors"][0]["path"] == "base_url"


def _fake_dns(table: dict[str, list[str]]) -> Any:
    def resolve(host: str) -> list[str]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]
    return resolve


DNS = _fake_dns({
    "vllm.lan": ["10.1.2.3"], "metadata.lan": ["169.254.169.254"], "v6.lan": ["fd12::7"],
    "mapped.lan": ["::ffff:127.0.0.1"], "public.example": ["93.184.216.34"],
    "mixed.example": ["10.0.0.1", "93.184.216.34"], "cgnat.lan": ["100.64.1.1"],
    "empty.lan": [],
})


@pytest.mark.parametrize(("host", "expected"), [
    ("localhost", True), ("api.localhost", True), ("127.0.0.1", True), ("127.9.9.9", True),
    ("::1", True), ("10.0.0.1", True), ("172.16.0.1", True), ("172.31.255.255", True),
    ("172.32.0.1", False), ("192.168.1.1", True), ("169.254.169.254", True),
    ("fc00::1", True), ("fe80::1", True), ("0.0.0.0", True), ("::ffff:10.0.0.1", True),
    ("224.0.0.1", True), ("8.8.8.8", False), ("2606:4700::1111", False),
    ("vllm.lan", True), ("metadata.lan", True), ("v6.lan", True), ("mapped.lan", True),
    ("cgnat.lan", True), ("public.example", False), ("mixed.example", False),
    ("nowhere.lan", None), ("empty.lan", None),
])
def test_host_is_private(host: str, expected: bool | None) -> None:
    assert host_is_private(host, DNS) is expected


def test_private_access_is_decided_by_resolution() -> None:
    def access(url: str) -> Any:
        return base_url_access(url, allowed_prefixes=["https://api.openai.com"],
                               allow_private=True, resolve=DNS)

    assert access("http://vllm.lan:8000/v1").kind == "private"
    assert access("https://api.openai.com/v1").kind == "listed"
    assert access("http://public.example/v1").kind == "refused"
    assert access("http://mixed.example/v1").kind == "refused"
    unresolved = access("http://nowhere.lan/v1")
    assert unresolved.kind == "refused" and unresolved.transient
    # Without the flag a private name is refused like any unlisted URL, resolver or not.
    assert base_url_access("http://vllm.lan:8000/v1", allowed_prefixes=[],
                           allow_private=False, resolve=DNS).kind == "refused"


@pytest.mark.django_db
def test_worker_refuses_a_stored_loopback_url_the_operator_no_longer_lists(
    study: Any, provider_server: ProviderServer, judge_key_env: str, settings: Any
) -> None:
    data = build_study_data(study, n_items=1, n_candidates=1)
    version = make_version(study, llm_config(provider_server.openai_base_url))
    settings.REVIEWHUB_JUDGE_ALLOWED_BASE_URLS = ["https://api.openai.com"]
    run = start(data, version)
    drive(run)
    job = JudgeJob.objects.get(run=run)
    assert job.status == "failed" and job.error_kind == "permanent"
    assert "REVIEWHUB_JUDGE_ALLOWED_BASE_URLS" in job.error
    assert provider_server.count() == 0


@pytest.mark.django_db
def test_worker_refuses_a_key_for_an_endpoint_admitted_only_as_private(
    study: Any, provider_server: ProviderServer, monkeypatch: pytest.MonkeyPatch,
    settings: Any
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-would-leak")
    data = build_study_data(study, n_items=1, n_candidates=1)
    version = legacy_version(study, _legacy_config(provider_server, "OPENAI_API_KEY"))
    settings.REVIEWHUB_JUDGE_ALLOWED_BASE_URLS = ["https://api.openai.com"]
    settings.REVIEWHUB_JUDGE_ALLOW_PRIVATE_NETWORKS = True
    run = start(data, version)
    drive(run)
    job = JudgeJob.objects.get(run=run)
    assert job.status == "failed" and "only sent to base URLs listed" in job.error
    assert provider_server.count() == 0


# --- provider error bodies ----------------------------------------------------------------


def _run_against_error(study: Any, server: ProviderServer, settings: Any, *, listed: bool,
                       behaviour: Any) -> tuple[JudgeJob, Verdict]:
    data = build_study_data(study, n_items=1, n_candidates=1)
    version = make_version(study, llm_config(server.openai_base_url, api_key_env=None))
    if not listed:
        settings.REVIEWHUB_JUDGE_ALLOWED_BASE_URLS = ["https://api.openai.com"]
        settings.REVIEWHUB_JUDGE_ALLOW_PRIVATE_NETWORKS = True
    server.enqueue(behaviour, behaviour)
    run = start(data, version)
    drive(run)
    return JudgeJob.objects.get(run=run), Verdict.objects.get(run=run)


ERROR_BODIES = [
    pytest.param(lambda: raw(400, f'{{"error": {{"message": "{BODY_SECRET}"}}}}',
                             {"content-type": "application/json"}), id="json-400"),
    pytest.param(lambda: raw(200, f"+OK {BODY_SECRET}\r\n"), id="not-json-200"),
    pytest.param(lambda: server_error(500, BODY_SECRET), id="5xx"),
]


@pytest.mark.django_db
@pytest.mark.parametrize("make", ERROR_BODIES)
def test_error_body_of_an_unlisted_endpoint_is_never_shown(
    study: Any, provider_server: ProviderServer, settings: Any, make: Any
) -> None:
    job, verdict = _run_against_error(study, provider_server, settings, listed=False,
                                      behaviour=make())
    assert provider_server.count() >= 1  # the endpoint was called, and answered
    assert job.status == "failed" and job.http_status in (200, 400, 500)
    assert job.raw_response == ""
    assert f"HTTP {job.http_status}" in job.error
    assert "not listed in REVIEWHUB_JUDGE_ALLOWED_BASE_URLS" in job.error
    shown = [job.error, str(job.details), str(verdict.details), verdict.rationale]
    assert not any(BODY_SECRET in text for text in shown)
    assert all("raw_excerpt" not in s for s in verdict.details.get("samples", []))


@pytest.mark.django_db
@pytest.mark.parametrize("make", ERROR_BODIES)
def test_error_body_of_a_listed_endpoint_is_kept_for_the_lead(
    study: Any, provider_server: ProviderServer, settings: Any, make: Any
) -> None:
    job, verdict = _run_against_error(study, provider_server, settings, listed=True,
                                      behaviour=make())
    assert job.status == "failed"
    assert BODY_SECRET in job.raw_response
    assert any(BODY_SECRET in s.get("raw_excerpt", "") for s in verdict.details["samples"])


@pytest.fixture
def non_http_service() -> Iterator[str]:
    """A loopback service that is not HTTP (answers like Redis) and then closes."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    conn.recv(65536)
                    conn.sendall(f"-ERR {BODY_SECRET}\r\n-ERR unknown command\r\n\r\n".encode())
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join(2)
        sock.close()


@pytest.mark.django_db
def test_reply_of_a_non_http_loopback_service_is_not_echoed(
    study: Any, settings: Any, non_http_service: str
) -> None:
    settings.REVIEWHUB_JUDGE_ALLOWED_BASE_URLS = ["https://api.openai.com"]
    settings.REVIEWHUB_JUDGE_ALLOW_PRIVATE_NETWORKS = True
    data = build_study_data(study, n_items=1, n_candidates=1)
    version = make_version(study, llm_config(non_http_service, api_key_env=None))
    run = start(data, version)
    drive(run)
    job = JudgeJob.objects.get(run=run)
    assert job.status == "failed"
    assert BODY_SECRET not in job.error and BODY_SECRET not in str(job.details)
    assert BODY_SECRET not in str(Verdict.objects.get(run=run).details)


@pytest.mark.parametrize(("exc", "expected"), [
    (PermanentProviderError(f"HTTP 403: {BODY_SECRET}", http_status=403,
                            body_excerpt=BODY_SECRET), "provider error (HTTP 403)"),
    (TransientProviderError(f"HTTP 503: {BODY_SECRET}", http_status=503), "provider error "
                                                                         "(HTTP 503)"),
    (TransientProviderError("connection error (RemoteProtocolError): illegal status line: "
                            f"bytearray(b'-ERR {BODY_SECRET}')"), "connection error;"),
    (TransientProviderError(f"timeout (ReadTimeout): {BODY_SECRET}"), "timeout;"),
    (PermanentProviderError(f"model refused: {BODY_SECRET}", http_status=200),
     "provider error (HTTP 200)"),
])
def test_error_reason_of_an_unlisted_endpoint_is_generic(exc: Any, expected: str) -> None:
    shown = error_reason_shown(exc, show_body=False)
    assert shown.startswith(expected) and BODY_SECRET not in shown
    assert BODY_SECRET in error_reason_shown(exc, show_body=True)


# --- base-URL prefixes are compared normalised --------------------------------------------


@pytest.mark.parametrize(("url", "prefix"), [
    ("https://gw.example/llm", "https://gw.example/llm"),
    ("https://gw.example/llm/", "https://gw.example/llm"),
    ("https://gw.example/llm", "https://gw.example/llm/"),
    ("https://gw.example/llm/v1", "https://gw.example/llm"),
    ("https://gw.example/llm/v1/chat", "https://gw.example/llm/"),
    ("https://GW.Example/llm/v1", "https://gw.example/llm"),
    ("HTTPS://gw.example/llm", "https://gw.example/llm"),
    ("https://gw.example:443/llm", "https://gw.example/llm"),
    ("https://gw.example/llm", "https://gw.example:443/llm"),
    ("http://gw.example:80/llm", "http://gw.example/llm"),
    ("https://gw.example/ll%6d/v1", "https://gw.example/llm"),
    ("https://gw.example/anything", "https://gw.example"),
    ("https://gw.example", "https://gw.example/"),
    ("http://127.0.0.1:5123/v1", "http://127.0.0.1:*"),
    ("http://[::1]:8080/v1", "http://[0:0:0:0:0:0:0:1]:8080"),
])
def test_url_under_prefix(url: str, prefix: str) -> None:
    assert base_url_under(url, prefix)


@pytest.mark.parametrize(("url", "prefix"), [
    # dot segments, plain and encoded, and the '..;' that some servers read as '..'
    ("https://gw.example/llm/../admin", "https://gw.example/llm"),
    ("https://gw.example/llm/./v1", "https://gw.example/llm"),
    ("https://gw.example/llm/%2e%2e/admin", "https://gw.example/llm"),
    ("https://gw.example/llm/%2E%2E/admin", "https://gw.example/llm"),
    ("https://gw.example/llm/.%2e/admin", "https://gw.example/llm"),
    ("https://gw.example/llm/..;/admin", "https://gw.example/llm"),
    ("https://gw.example/llm/%252e%252e/admin", "https://gw.example/llm"),
    ("https://gw.example/llm/..", "https://gw.example/llm"),
    # encoded slashes and backslashes
    ("https://gw.example/llm%2f..%2fadmin", "https://gw.example/llm"),
    ("https://gw.example/llm/%5c..%5cadmin", "https://gw.example/llm"),
    ("https://gw.example/llm\\..\\admin", "https://gw.example/llm"),
    # empty segments
    ("https://gw.example//llm", "https://gw.example/llm"),
    ("https://gw.example/llm//admin", "https://gw.example/llm"),
    # sibling paths and shorter paths
    ("https://gw.example/llm-other", "https://gw.example/llm"),
    ("https://gw.example/llmx/v1", "https://gw.example/llm/"),
    ("https://gw.example/", "https://gw.example/llm"),
    ("https://gw.example", "https://gw.example/llm"),
    ("https://gw.example/LLM", "https://gw.example/llm"),
    # userinfo: the host is what follows '@'
    ("https://gw.example@evil.example/llm", "https://gw.example/llm"),
    ("https://gw.example:443@evil.example/llm", "https://gw.example/llm"),
    ("https://user:pw@gw.example/llm", "https://gw.example/llm"),
    # hosts
    ("https://gw.example.evil.example/llm", "https://gw.example/llm"),
    ("https://evilgw.example/llm", "https://gw.example/llm"),
    ("https://gw.example./llm", "https://gw.example/llm"),
    ("https://gw%2eexample/llm", "https://gw.example/llm"),
    ("https://xn--gw-example/llm", "https://gw.example/llm"),
    ("https://gw.exämple/llm", "https://gw.example/llm"),
    # ports and schemes
    ("https://gw.example:8443/llm", "https://gw.example/llm"),
    ("https://gw.example:443/llm", "https://gw.example:8443/llm"),
    ("http://gw.example/llm", "https://gw.example/llm"),
    ("http://gw.example:443/llm", "https://gw.example/llm"),
    ("https://gw.example:/llm", "https://gw.example/llm"),
    ("https://gw.example:0443x/llm", "https://gw.example/llm"),
    ("https://gw.example:*/llm", "https://gw.example:*/llm"),
    # queries, fragments, whitespace, control characters
    ("https://gw.example/llm?x=/../admin", "https://gw.example/llm"),
    ("https://gw.example/llm#/../admin", "https://gw.example/llm"),
    ("https://gw.example/llm/%00", "https://gw.example/llm"),
    ("https://gw.example/llm/\t../admin", "https://gw.example/llm"),
    (" https://gw.example/llm", "https://gw.example/llm"),
    # other spellings of an address are not the listed address
    ("http://2130706433:8000/v1", "http://127.0.0.1:*"),
    ("http://0x7f.0.0.1:8000/v1", "http://127.0.0.1:*"),
    ("http://127.1:8000/v1", "http://127.0.0.1:*"),
    ("http://0177.0.0.1:8000/v1", "http://127.0.0.1:*"),
    ("http://localhost:8000/v1", "http://127.0.0.1:*"),
    ("http://[::ffff:127.0.0.1]:8000/v1", "http://127.0.0.1:*"),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8001"),
    # a malformed prefix admits nothing
    ("https://gw.example/llm", "https://gw.example/llm/../"),
    ("https://gw.example/llm", "gw.example/llm"),
    ("https://gw.example/llm", ""),
])
def test_url_not_under_prefix(url: str, prefix: str) -> None:
    assert not base_url_under(url, prefix)


@pytest.mark.parametrize("url", [
    "https://gw.example/llm/../admin", "https://gw.example/llm/%2e%2e/admin",
    "https://gw.example//llm", "https://gw.example@evil.example/llm",
    "http://0x7f.0.0.1:8000/v1", "https://gw.example/llm%2fadmin", "https://gw.example:*/v1",
])
def test_validation_refuses_ambiguous_urls_naming_base_url(url: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        config_validate(llm_config(url), kind="llm", allowed_base_urls=["https://gw.example"])
    assert info.value.details["errors"][0]["path"] == "base_url"
