"""Input that the database cannot hold is refused with a 400 naming where it is (issue 11 #5).

NUL characters, lone surrogates, non-finite numbers (NaN, Infinity, 1e400) and duplicate keys:
every JSON write endpoint and field (walked from the OpenAPI schema, so a new endpoint is
covered the day it is added), every string query filter, form posts, and the CLI importers.
Also the other 500s the fuzzer found (OPTIONS on views without a queryset, bias.svg of a report
without bias audits) and the places where the schema and the responses disagreed.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator
from rest_framework.parsers import MultiPartParser
from rest_framework.test import APIClient

from demo import demo_data
from reviewhub.api.parsers import StrictJSONParser
from reviewhub.api.strictjson import StrictJSONError, loads
from studies.ingest_views import StreamedBodyParser
from studies.models import ApiToken, Study

from .factories import api_token_create

pytestmark = pytest.mark.django_db

NUL = "bad\u0000value"
SURROGATE = "bad\ud800value"


def _schema() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _json_write_fields() -> list[tuple[str, str, str]]:
    """(method, path, top-level field) of every JSON request body in the schema."""
    schema = _schema()
    out = []
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if not body or "schema" not in body:
                continue
            props = _resolve(schema, body["schema"]).get("properties", {})
            for field in props:
                out.append((method.upper(), path, field))
    return out


def _string_filters() -> list[tuple[str, str]]:
    """(path, parameter) of every string query parameter of a GET operation."""
    schema = _schema()
    out = []
    for path, item in schema["paths"].items():
        operation = item.get("get")
        if not operation:
            continue
        for param in operation.get("parameters", []):
            if param.get("in") != "query":
                continue
            kind = param.get("schema", {})
            kind = kind.get("items", kind) if kind.get("type") == "array" else kind
            if kind.get("type") in ("string", None):
                out.append((path, param["name"]))
    return out


# --- The world: the demo study, with one of everything a URL can name --------------------------

@pytest.fixture
def world(db: Any) -> dict[str, Any]:
    from annotations.models import Annotation, SamplingPlan
    from judges.models import Judge, JudgeRun

    call_command("demo_seed", items=12, stdout=io.StringIO())
    users = get_user_model().objects
    lead, annotator = users.get(username="lead"), users.get(username="annotator")
    study = Study.objects.get(slug=demo_data.DEMO_SLUG)
    lead_c, annotator_c = APIClient(), APIClient()
    lead_c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=lead)}")
    annotator_c.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=annotator)}")
    nxt = annotator_c.post(f"/api/studies/{study.slug}/queue/next", format="json")
    assert nxt.status_code in (200, 201), nxt.content
    assignment_id = nxt.json()["assignment"]["assignment_id"]
    done = Annotation.objects.filter(annotator__username__startswith="sim-").first()
    assert done is not None
    own = Annotation.objects.create(
        annotator=annotator, criterion=done.criterion, output=done.output, value=done.value,
        value_num=done.value_num, plan=done.plan)
    judge = Judge.objects.filter(study=study).first()
    assert judge is not None
    version = judge.versions.order_by("version").first()
    assert version is not None
    run = JudgeRun.objects.create(study=study, judge_version=version, created_by=lead,
                                  status=JudgeRun.Status.DONE)
    from snapshots.models import ReportSnapshot

    report = ReportSnapshot.objects.filter(study=study).first()
    assert report is not None
    from monitoring.models import Deployment
    from studies.models import AnalysisPlan, Output

    shipped = Output.objects.filter(study=study).order_by("id").first()
    assert shipped is not None
    deployment = Deployment.objects.create(
        study=study, name="prod", candidate_id=shipped.candidate_id,
        plan=AnalysisPlan.objects.get(study=study, version=1),
        sampling={"judge": {"default": 0.5}, "human": {"default": 0.1}})
    params = {
        "slug": study.slug, "user_id": annotator.pk, "deployment_id": deployment.pk,
        "assignment_id": assignment_id,
        "annotation_id": own.pk, "judge_id": judge.pk, "version_id": version.pk,
        "run_id": run.pk, "version": 1, "report_id": report.pk,
        "token_id": ApiToken.objects.filter(user=lead).first().pk,  # type: ignore[union-attr]
    }
    assert SamplingPlan.objects.filter(study=study, version=1).exists()
    return {"params": params, "clients": [lead_c, annotator_c], "study": study, "lead": lead,
            "annotator": annotator}


def _url(path: str, params: dict[str, Any]) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: str(params[m.group(1)]), path)


def _send(world: dict[str, Any], method: str, path: str, raw: str) -> Any:
    """The response of the first client (lead, then annotator) that gets past the access
    check: a 403/404 from one role means the endpoint is the other role's."""
    url = _url(path, world["params"])
    response = None
    for client in world["clients"]:
        response = client.generic(method, url, raw.encode("utf-8", "surrogatepass"),
                                  content_type="application/json")
        if response.status_code not in (403, 404):
            return response
    return response


def _expect_400(response: Any, *, code: str, path: str | None = None) -> list[str]:
    problems = []
    if response.status_code != 400:
        problems.append(f"{response.status_code} {response.content[:200]!r}")
        return problems
    body = response.json()["error"]
    if body["code"] != code:
        problems.append(f"code {body['code']}")
    if path is not None:
        paths = [e["path"] for e in body["details"].get("errors", [])]
        if path not in paths:
            problems.append(f"paths {paths} (wanted {path})")
    return problems


# --- JSON bodies ------------------------------------------------------------------------------

def test_schema_lists_the_write_endpoints() -> None:
    fields = _json_write_fields()
    assert len({(m, p) for m, p, _ in fields}) >= 20, fields
    assert ("PATCH", "/api/studies/{slug}/my/annotations/{annotation_id}", "severity_note") in (
        fields)


@pytest.mark.parametrize(("text", "what"), [(NUL, "NUL"), (SURROGATE, "lone surrogate")])
def test_every_json_write_field_refuses_unstorable_text(world: dict[str, Any], text: str,
                                                        what: str) -> None:
    failures = []
    for method, path, field in _json_write_fields():
        # As a value, and as a key one level down (fields that hold objects take any key).
        for body, where in (({field: text}, field), ({field: {text: 1}}, field)):
            raw = json.dumps(body)  # escapes: "\u0000", "\ud800"
            response = _send(world, method, path, raw)
            for problem in _expect_400(response, code="invalid_json", path=where):
                failures.append(f"{method} {path} {field}: {problem}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("literal", "named"), [
    ("1e400", "1e400"), ("-1e400", "-1e400"), ("NaN", "NaN"), ("Infinity", "Infinity"),
    ("-Infinity", "-Infinity"),
])
def test_every_json_write_field_refuses_non_finite_numbers(world: dict[str, Any], literal: str,
                                                           named: str) -> None:
    failures = []
    for method, path, field in _json_write_fields():
        raw = f'{{"{field}": {{"nested": [1, {literal}]}}}}'
        response = _send(world, method, path, raw)
        problems = _expect_400(response, code="invalid_json", path=f"{field}.nested[1]")
        if not problems and named not in response.json()["error"]["message"]:
            problems.append("message does not name the number")
        failures += [f"{method} {path} {field}: {p}" for p in problems]
    assert not failures, "\n".join(failures)


def test_every_json_write_endpoint_refuses_duplicate_keys(world: dict[str, Any]) -> None:
    failures = []
    for method, path, field in _json_write_fields():
        raw = f'{{"{field}": 1, "{field}": 2}}'
        response = _send(world, method, path, raw)
        problems = _expect_400(response, code="invalid_json", path="$")
        if not problems and f'"{field}"' not in response.json()["error"]["message"]:
            problems.append("message does not name the key")
        failures += [f"{method} {path} {field}: {p}" for p in problems]
    assert not failures, "\n".join(failures)


def test_nothing_is_stored_as_infinity(world: dict[str, Any]) -> None:
    lead_c = world["clients"][0]
    r = lead_c.post("/api/studies", data=b'{"name": "x", "slug": "inf", "run_conditions": '
                    b'{"a": 1e400}}', content_type="application/json")
    assert r.status_code == 400
    assert r.json()["error"]["details"]["errors"] == [
        {"path": "run_conditions.a", "message": r.json()["error"]["details"]["errors"][0][
            "message"]}]
    assert not Study.objects.filter(slug="inf").exists()


def test_every_api_view_parses_json_strictly() -> None:
    """A new view that sets its own parser_classes must keep the strict JSON parser (or read
    its body raw, as bulk ingest does, and check it itself)."""
    views = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern) and (prefix + str(p.pattern)).startswith("api/"):
                cls = getattr(p.callback, "cls", None)
                if cls is not None and hasattr(cls, "parser_classes"):
                    views.append((prefix + str(p.pattern), cls))

    walk(get_resolver().url_patterns, "")
    assert len(views) > 40
    for route, cls in views:
        parsers = cls.parser_classes
        json_parsers = [p for p in parsers if "json" in (p.media_type or "")]
        # Bulk ingest reads its body raw: its parser claims the body and reads none of it. The
        # import endpoints also take a multipart form whose parts are files the importer reads
        # and checks itself (no JSON parser at all).
        assert parsers in ([], [StreamedBodyParser], [MultiPartParser, StreamedBodyParser]) \
            or json_parsers == [StrictJSONParser], (route, parsers)


def test_strictjson_paths_and_reasons() -> None:
    cases = {
        '{"a": [0, {"b\\u0000": 1}]}': ("a[1]", "NUL"),
        '[1, "\\udfff"]': ("$[1]", "lone surrogate"),
        '{"x": {"y": 1, "y": 2}}': ("x", 'duplicate key "y"'),
        '{"n": 1e309}': ("n", "1e309"),
        '{"weird key": NaN}': ('$["weird key"]', "NaN"),
    }
    for text, (path, reason) in cases.items():
        with pytest.raises(StrictJSONError) as info:
            loads(text)
        assert info.value.path == path and reason in str(info.value), (text, info.value)
    # Well-formed pairs, big finite numbers and plain NULs-free text pass unchanged.
    assert loads('{"e": "\\ud83d\\ude00", "n": 1e308, "i": 12345678901234567890}') == {
        "e": "\U0001f600", "n": 1e308, "i": 12345678901234567890}


# --- Query parameters and forms ---------------------------------------------------------------

def test_every_string_filter_refuses_nul(world: dict[str, Any]) -> None:
    filters = _string_filters()
    assert len(filters) >= 10, filters
    failures = []
    for path, name in filters:
        url = _url(path, world["params"])
        for client in world["clients"]:
            response = client.get(url, {name: NUL})
            for problem in _expect_400(response, code="invalid_parameter", path=name):
                failures.append(f"GET {path} ?{name}: {problem}")
            if response.status_code == 400:
                assert name in response.json()["error"]["message"]
    assert not failures, "\n".join(failures)


def test_filter_names_with_nul_and_meta_filters(world: dict[str, Any]) -> None:
    lead_c = world["clients"][0]
    slug = world["params"]["slug"]
    r = lead_c.get(f"/api/studies/{slug}/items", {"meta.lang\x00uage": "en"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_parameter"
    r = lead_c.get(f"/api/studies/{slug}/outputs", {"output_meta.k": NUL})
    assert r.status_code == 400
    assert r.json()["error"]["details"]["errors"][0]["path"] == "output_meta.k"
    assert r.json()["error"]["details"]["errors"][0]["in"] == "query"


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "nan"])
def test_metadata_filters_with_non_finite_numbers_match_as_text(world: dict[str, Any],
                                                                literal: str) -> None:
    """`meta.k=NaN` once became the jsonb literal NaN, which PostgreSQL refuses (500)."""
    lead_c = world["clients"][0]
    slug = world["params"]["slug"]
    for path, name in ((f"/api/studies/{slug}/items", "meta.language"),
                       (f"/api/studies/{slug}/outputs", "meta.language"),
                       (f"/api/studies/{slug}/outputs", "output_meta.k")):
        r = lead_c.get(path, {name: literal})
        assert r.status_code == 200, (path, name, r.content[:300])
        assert r.json()["results"] == []


def test_the_web_servers_own_refusals_are_documented() -> None:
    """gunicorn answers an over-long request line (414) or oversized headers (431) itself,
    with a small HTML page; every operation says so."""
    paths = _schema()["paths"]
    for path, item in paths.items():
        for method, operation in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            for code in ("414", "431"):
                assert "text/html" in operation["responses"][code]["content"], (path, method)


def test_login_and_form_posts_refuse_nul(world: dict[str, Any], client: Any) -> None:
    r = client.post("/accounts/login/", {"username": "le\x00ad", "password": "x"})
    assert r.status_code == 400 and b"username" in r.content
    r = client.get("/accounts/login/", {"next": "/\x00"})
    assert r.status_code == 400
    # A form-encoded API body gets the API's error shape.
    lead_c = world["clients"][0]
    r = lead_c.post("/api/tokens", {"name": NUL})
    assert r.status_code == 400
    assert r.json()["error"]["details"]["errors"][0] == {
        "path": "name", "in": "form", "message": r.json()["error"]["details"]["errors"][0][
            "message"]}


def test_malformed_multipart_is_a_400(world: dict[str, Any]) -> None:
    r = world["clients"][0].generic("POST", "/api/tokens", b"x",
                                    content_type="multipart/form-data")
    assert r.status_code == 400


# --- CLI importers ----------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "reason"), [
    ('{"external_id": "b", "input": "hi", "metadata": {"x": 1e400}}', "1e400"),
    ('{"external_id": "b", "input": "hi", "metadata": {"x": -12e3456}}', "-12e3456"),
    ('{"external_id": "b", "input": "hi", "metadata": {"x": Infinity}}', "Infinity"),
    ('{"external_id": "b", "input": "hi", "metadata": {"x": NaN}}', "NaN"),
    ('{"external_id": "b", "input": "hi", "input": "again"}', 'duplicate key "input"'),
    ('{"external_id": "b", "input": "hi", "metadata": {"x": "\\u0000"}}', "NUL"),
])
def test_import_items_cli_names_the_line(study: Study, tmp_path: Path, line: str,
                                         reason: str) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text('{"external_id": "a", "input": "fine"}\n' + line + "\n")
    message = _import_items_errors(study, path)
    assert "line 2" in message and reason in message, message
    assert not study.items.exists()


def _import_items_errors(study: Study, path: Path) -> str:
    """The row errors import_items prints (stderr) when it refuses a file."""
    err = io.StringIO()
    with pytest.raises(CommandError):
        call_command("import_items", str(path), study=study.slug, stdout=io.StringIO(),
                     stderr=err, no_progress=True)
    return err.getvalue()


def test_import_outputs_json_array_refusal_is_a_row_error(study: Study, tmp_path: Path) -> None:
    path = tmp_path / "items.json"
    path.write_text('[\n{"external_id": "a", "input": "x", "metadata": {"n": -1e999}},\n'
                    '{"external_id": "b", "input": "y", "metadata": {"n": 1, "n": 2}}\n]\n')
    message = _import_items_errors(study, path)
    # Both elements are reported: a refused element does not end the file.
    assert "line 2" in message and "-1e999" in message, message
    assert "line 3" in message and 'duplicate key "n"' in message, message


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("s.json", '{"study": {"slug": "x", "run_conditions": {"t": 1e400}}}',
     "study.run_conditions.t: 1e400"),
    ("s.json", '{"study": {"slug": "x",\n "slug": "y"}}', 'duplicate key "slug"'),
    ("s.yaml", "study:\n  slug: x\n  slug: y\n", "line 3, column 3: duplicate key 'slug'"),
    ("s.yaml", "study:\n  slug: x\n  name: \"a\\0b\"\n", "study.name: the string contains a NUL"),
    ("s.yaml", "study:\n  slug: x\n  run_conditions: {t: .nan}\n", "study.run_conditions.t"),
])
def test_import_study_cli_refuses_strictly(db: Any, tmp_path: Path, name: str, text: str,
                                           expected: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(CommandError) as info:
        call_command("import_study", str(path))
    assert expected in str(info.value), str(info.value)
    assert not Study.objects.exists()


# --- The other 500s ---------------------------------------------------------------------------

def test_options_answers_on_every_view_kind(world: dict[str, Any]) -> None:
    slug = world["params"]["slug"]
    for client in world["clients"]:
        for url in (f"/api/studies/{slug}/rubric", f"/api/studies/{slug}/strata",
                    f"/api/studies/{slug}/items", "/api/tokens", f"/api/studies/{slug}"):
            r = client.options(url)
            assert r.status_code == 200, (url, r.content[:300])
            assert "application/json" in r.json()["parses"]
            assert "actions" not in r.json()  # nothing is described without an access check


def test_bias_svg_of_a_report_without_bias_audits(world: dict[str, Any], client: Any) -> None:
    from snapshots.models import ReportSnapshot

    report = ReportSnapshot.objects.filter(study=world["study"], kind="agreement").first()
    assert report is not None
    # A finished report whose judges had no pairwise or tied outputs: no bias rows at all.
    # (Results are read typed: an empty one supplies every field the report has not computed.)
    from reports.agreement.results import AGREEMENT_RESULT_VERSION, AgreementResult

    empty = AgreementResult(
        version=AGREEMENT_RESULT_VERSION, rule="", params={}, plan_version=None, fingerprint="",
        criteria=(), judges=(), strata=(), cells=(), confusion=(), bias=(), ceiling=(),
        system=(), disagreements=(), warnings=(),
    ).to_json()
    report.result = {**empty, **(report.result or {}), "bias": [], "judges": [],
                     "criteria": []}
    report.status = ReportSnapshot.Status.DONE
    report.save(update_fields=["result", "status"])
    client.force_login(world["lead"])
    r = client.get(f"/studies/{world['study'].slug}/reports/{report.pk}/bias.svg")
    assert r.status_code == 200 and r["Content-Type"].startswith("image/svg+xml")
    assert b"No bias audits" in r.content


def test_unknown_api_url_is_a_json_404(world: dict[str, Any]) -> None:
    r = world["clients"][0].get("/api/tokens/not-a-number")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


# --- Schema truth -----------------------------------------------------------------------------

def test_revoked_tokens_are_gone(world: dict[str, Any]) -> None:
    lead_c = world["clients"][0]
    created = lead_c.post("/api/tokens", {"name": "tmp"}, format="json").json()
    assert lead_c.delete(f"/api/tokens/{created['id']}").json()["revoked_at"]
    assert lead_c.get(f"/api/tokens/{created['id']}").status_code == 404
    assert lead_c.delete(f"/api/tokens/{created['id']}").status_code == 404
    listed = [t["id"] for t in lead_c.get("/api/tokens").json()["results"]]
    assert created["id"] not in listed and listed


def test_responses_match_the_schema(world: dict[str, Any]) -> None:
    """Every parameter-free GET the roles can reach answers what the schema documents."""
    import schemathesis
    from django.core import signals
    from django.core.wsgi import get_wsgi_application
    from django.db import close_old_connections

    schema = schemathesis.openapi.from_dict(_schema())
    app = get_wsgi_application()
    # As Django's test client does: the request must not close the test's transaction.
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        _validate_gets(world, schema, app)
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


def _validate_gets(world: dict[str, Any], schema: Any, app: Any) -> None:
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    # The checks about this one response (the others send requests of their own).
    CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_schema_conformance]
    failures, checked = [], 0
    tokens = [api_token_create(user=world["lead"]), api_token_create(user=world["annotator"])]
    paths = [p for p in schema.raw_schema["paths"] if set(re.findall(r"\{(\w+)\}", p)) <= set(
        world["params"])]
    for path in paths:
        if "get" not in schema.raw_schema["paths"][path]:
            continue
        operation = schema[path]["GET"]
        for token in tokens:
            case = operation.Case(
                path_parameters={k: world["params"][k] for k in re.findall(r"\{(\w+)\}", path)},
                headers={"Authorization": f"Bearer {token}"})
            response = case.call(app=app)
            checked += 1
            try:
                case.validate_response(response, checks=CHECKS)
            except Exception as exc:  # schemathesis groups its check failures
                failures.append(f"GET {path} -> {response.status_code}: {exc}"[:600])
    assert checked > 40
    assert not failures, "\n\n".join(failures)


def test_list_endpoints_document_their_pages() -> None:
    schema = _schema()
    for path in ("/api/studies/{slug}/adjudications", "/api/studies/{slug}/gold-labels",
                 "/api/studies/{slug}/my/annotations", "/api/studies/{slug}/reports/agreement/"):
        ok = schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
        page = _resolve(schema, ok["schema"])
        assert page["type"] == "object" and set(page["properties"]) == {
            "next", "previous", "results"}, path
    strata = _resolve(schema, schema["paths"]["/api/studies/{slug}/strata"]["get"][
        "responses"]["200"]["content"]["application/json"]["schema"])
    assert "items_changed" not in strata.get("required", [])


@pytest.mark.parametrize(("kind", "row"), [
    ("candidates", '{"name": "c", "parameters": {"temperature": 1e400}}'),
    ("items", '{"external_id": "a", "input": "x", "metadata": {"k": 1, "k": 2}}'),
])
def test_rest_ingest_refuses_overflow_and_duplicates_by_line(lead_client: APIClient,
                                                             study: Study, kind: str,
                                                             row: str) -> None:
    body = ('{"name": "ok"}\n' if kind == "candidates" else
            '{"external_id": "ok", "input": "y"}\n') + row + "\n"
    r = lead_client.generic("POST", f"/api/studies/{study.slug}/{kind}/bulk", body.encode(),
                            content_type="application/x-ndjson")
    assert r.status_code == 400, r.content
    assert [e["line"] for e in r.json()["error"]["details"]["errors"]] == [2]
    assert not study.candidates.exists() and not study.items.exists()
