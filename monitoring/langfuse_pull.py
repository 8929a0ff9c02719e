"""Pulling a deployment's traffic from Langfuse (docs/monitoring.md, "Pull from Langfuse").

A deployment's `LangfuseSource` names a Langfuse host and the environment variables holding
its public and secret key. Each monitoring tick (and "pull now") pages through Langfuse's public
API, `GET /api/public/observations?type=GENERATION&fromStartTime=..&toStartTime=..&page=..`
(Basic auth public:secret; the answer is `{"data": [...], "meta": {"page", "limit",
"totalItems", "totalPages"}}`), maps each observation through the Langfuse file importer's
mapping (`imports.peers.langfuse.generation_mapped`) into a traffic row whose request id is the
observation id, and ingests each page through `services.traffic_ingest` (the same validation,
strata and sampling as POSTed traffic; a request id already recorded is left as it was).

The cursor: a pull covers [cursor_from, pull_to), pull_to fixed when the pull starts so that
pages do not shift under it; `next_page` moves only after a page is committed. When the last
page is in, cursor_from becomes pull_to minus an overlap (Langfuse serves observations late,
up to minutes after they started), whose rows are found again and left unchanged. A failure
(HTTP error, timeout, a body that is not the API's shape) is recorded on the source and the
same page is asked again at the next tick: nothing lost, nothing twice.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from imports.peers.langfuse import generation_mapped
from judges.network import JudgeNetworkPolicy
from reviewhub.errors import Conflict, Problems, ValidationFailed

from . import services
from .models import Deployment, LangfuseSource

SOURCE_FIELDS = ("host", "public_key_env", "secret_key_env", "filters", "start_from")
FILTER_KEYS = ("name", "environment", "trace_name", "tags")
OBSERVATIONS_PATH = "/api/public/observations"
TRACE_PATH = "/api/public/traces/"


class PullFailed(Exception):
    """A page could not be fetched or read; the message is what the source records."""


def _page_limit() -> int:
    return int(getattr(settings, "REVIEWHUB_LANGFUSE_PAGE_LIMIT", 100))


def _max_pages() -> int:
    return int(getattr(settings, "REVIEWHUB_LANGFUSE_MAX_PAGES", 50))


def _overlap() -> dt.timedelta:
    return dt.timedelta(seconds=float(getattr(settings, "REVIEWHUB_LANGFUSE_OVERLAP_S", 900)))


def _timeout() -> float:
    return float(getattr(settings, "REVIEWHUB_LANGFUSE_TIMEOUT_S", 30.0))


# --- the source's settings --------------------------------------------------------------------

def _filters_check(raw: Any, problems: Problems) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.add("filters", "must be an object: name, environment, trace_name, tags")
        return {}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in FILTER_KEYS:
            problems.add(f"filters.{key}", f"unknown filter (one of {', '.join(FILTER_KEYS)})")
        elif key == "tags":
            if not isinstance(value, list) or not all(
                    isinstance(t, str) and t and len(t) <= 200 for t in value):
                problems.add("filters.tags", "must be a list of tags (non-empty strings)")
            elif value:
                out["tags"] = list(value)
        elif not isinstance(value, str) or len(value) > 200:
            problems.add(f"filters.{key}", "must be a string of at most 200 characters")
        elif value:
            out[key] = value
    return out


def _start_from(raw: Any, problems: Problems) -> dt.datetime | None:
    if raw is None:
        return None
    try:
        when = dt.datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        problems.add("start_from", "must be an ISO 8601 date-time")
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def source_settings_validate(raw: Any, *, partial: bool = False) -> dict[str, Any]:
    """The source's settings, checked: the host by the judges' base-URL allow-list (a key is
    only ever sent to a listed base URL, so a private-network host that is not listed is
    refused too), the key variables by the judges' key-variable allow-list. 400 naming the
    field."""
    problems = Problems()
    if not isinstance(raw, Mapping):
        raise ValidationFailed.at("$", "the body must be a JSON object")
    for key in raw:
        if key not in SOURCE_FIELDS:
            problems.add(str(key), f"unknown field (one of {', '.join(SOURCE_FIELDS)})")
    policy = JudgeNetworkPolicy.from_settings()
    out: dict[str, Any] = {}
    if "host" in raw or not partial:
        host = raw.get("host")
        if not isinstance(host, str) or not host.strip():
            problems.add("host", "the Langfuse base URL is required (e.g. "
                                 "https://cloud.langfuse.com)")
        else:
            host = host.strip().rstrip("/")
            access = policy.base_url_access(host)
            if not access.listed:
                problems.add("host", access.reason or (
                    f"host {host!r} is not under a prefix listed in the base-URL allow-list; "
                    "keys are only sent to listed base URLs"))
            out["host"] = host
    for field in ("public_key_env", "secret_key_env"):
        if field not in raw and partial:
            continue
        name = raw.get(field)
        if not isinstance(name, str) or not name.strip():
            problems.add(field, "the NAME of the environment variable holding the key")
            continue
        refusal = policy.key_env_refusal(name.strip())
        if refusal:
            problems.add(field, refusal.replace("api_key_env", field))
        out[field] = name.strip()
    if "filters" in raw:
        out["filters"] = _filters_check(raw.get("filters"), problems)
    if "start_from" in raw:
        out["start_from"] = _start_from(raw.get("start_from"), problems)
    problems.raise_if_any("The Langfuse source")
    return out


def source_create(*, deployment: Deployment, raw: Any) -> LangfuseSource:
    v = source_settings_validate(raw)
    if LangfuseSource.objects.filter(deployment=deployment).exists():
        raise Conflict("This deployment already has a Langfuse source; change it with PATCH "
                       "or delete it first.")
    return LangfuseSource.objects.create(
        deployment=deployment, host=v["host"], public_key_env=v["public_key_env"],
        secret_key_env=v["secret_key_env"], filters=v.get("filters", {}),
        cursor_from=v.get("start_from") or timezone.now())


def source_update(*, deployment: Deployment, raw: Any) -> LangfuseSource:
    """Change the host, keys, filters or the cursor (`start_from`); a pull under way starts
    over from the cursor (its rows already in are found again and left unchanged). The body is
    checked first (400), then the source looked up (409 when there is none)."""
    v = source_settings_validate(raw, partial=True)
    source = source_get(deployment=deployment)
    for field in ("host", "public_key_env", "secret_key_env", "filters"):
        if field in v:
            setattr(source, field, v[field])
    if v.get("start_from") is not None:
        source.cursor_from = v["start_from"]
    source.pull_to, source.next_page = None, 1
    source.save()
    return source


def source_get(*, deployment: Deployment) -> LangfuseSource:
    """The deployment's source, or 409 (a deployment without one is not an error of access)."""
    source = LangfuseSource.objects.filter(deployment=deployment).first()
    if source is None:
        raise Conflict(f"Deployment {deployment.pk} has no Langfuse source; create it with "
                       f"POST /api/deployments/{deployment.pk}/langfuse.")
    source.deployment = deployment
    return source


def source_json(s: LangfuseSource) -> dict[str, Any]:
    def when(x: dt.datetime | None) -> str | None:
        return x.isoformat() if x else None

    return {
        "host": s.host, "public_key_env": s.public_key_env, "secret_key_env": s.secret_key_env,
        "filters": s.filters,
        "cursor": {"from": when(s.cursor_from), "pull_to": when(s.pull_to),
                   "next_page": s.next_page},
        "rows_created": s.rows_created, "rows_skipped": s.rows_skipped,
        "last_pull_at": when(s.last_pull_at), "last_success_at": when(s.last_success_at),
        "last_error": s.last_error, "last_error_at": when(s.last_error_at),
        "failures": s.failures,
    }


# --- the pull ---------------------------------------------------------------------------------

def _iso(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def _keys(source: LangfuseSource) -> tuple[str, str]:
    """The key pair, read now from the named variables; refused (no request sent) when a name
    or the host is no longer allowed by the operator's allow-lists."""
    policy = JudgeNetworkPolicy.from_settings()
    for name in (source.public_key_env, source.secret_key_env):
        refusal = policy.key_send_refusal(name, base_url=source.host)
        if refusal:
            raise PullFailed(refusal)
    public = os.environ.get(source.public_key_env, "")
    secret = os.environ.get(source.secret_key_env, "")
    missing = [n for n, v in ((source.public_key_env, public),
                              (source.secret_key_env, secret)) if not v]
    if missing:
        raise PullFailed(f"the environment variable(s) {', '.join(missing)} are not set on "
                         "the worker; no request was sent")
    return public, secret


def _get_json(client: httpx.Client, url: str, params: Mapping[str, Any] | None = None, *,
              missing_ok: bool = False) -> Any:
    try:
        resp = client.get(url, params=params)
    except httpx.TimeoutException:
        raise PullFailed(f"timed out after {_timeout():g} s: GET {url}") from None
    except httpx.HTTPError as exc:
        raise PullFailed(f"could not reach {url}: {type(exc).__name__}") from None
    if resp.status_code == 404 and missing_ok:
        return None
    if resp.status_code != 200:
        # The host is on the operator's allow-list, so the start of its answer may be shown.
        raise PullFailed(f"HTTP {resp.status_code} from GET {url}: {resp.text[:300]}")
    try:
        return resp.json()
    except ValueError:
        raise PullFailed(f"GET {url} answered with a body that is not JSON") from None


def _page_fetch(client: httpx.Client, source: LangfuseSource, page: int
                ) -> tuple[list[Mapping[str, Any]], int]:
    """One page of GENERATION observations and the total number of pages."""
    assert source.pull_to is not None
    params: dict[str, Any] = {"type": "GENERATION", "fromStartTime": _iso(source.cursor_from),
                              "toStartTime": _iso(source.pull_to), "page": page,
                              "limit": _page_limit()}
    for key in ("name", "environment"):
        if source.filters.get(key):
            params[key] = source.filters[key]
    body = _get_json(client, source.host + OBSERVATIONS_PATH, params)
    data = body.get("data") if isinstance(body, Mapping) else None
    meta = body.get("meta") if isinstance(body, Mapping) else None
    pages = meta.get("totalPages") if isinstance(meta, Mapping) else None
    if not isinstance(data, list) or isinstance(pages, bool) or not isinstance(pages, int):
        raise PullFailed("the observations answer is not {\"data\": [...], \"meta\": "
                         "{\"totalPages\": n, ...}} (is the host a Langfuse server?)")
    return [o for o in data if isinstance(o, Mapping)], pages


def _trace_matches(client: httpx.Client, source: LangfuseSource, trace_id: str,
                   cache: dict[str, bool]) -> bool:
    """Whether the observation's trace has the filters' trace name and all their tags (the
    observations endpoint does not filter by either: each trace is read once per pull)."""
    if trace_id not in cache:
        # A trace Langfuse no longer has (404) matches nothing; any other failure is the pull's.
        found = _get_json(client, source.host + TRACE_PATH + quote(trace_id, safe=""),
                          missing_ok=True)
        trace: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        name_ok = not source.filters.get("trace_name") or (
            trace.get("name") == source.filters["trace_name"])
        raw_tags = trace.get("tags")
        tags: list[Any] = raw_tags if isinstance(raw_tags, list) else []
        cache[trace_id] = bool(trace) and name_ok and all(
            t in tags for t in source.filters.get("tags", []))
    return cache[trace_id]


def observation_row(obs: Mapping[str, Any]) -> dict[str, Any] | None:
    """A GENERATION observation as a traffic row (None when it logged no input: a traffic row
    needs one). The request id is the observation id, so pulling it again changes nothing."""
    mapped = generation_mapped(obs)
    if not mapped["input"].strip():
        return None
    metadata = dict(obs["metadata"]) if isinstance(obs.get("metadata"), Mapping) else {}
    metadata["langfuse"] = {k: obs.get(k) for k in ("traceId", "name", "model", "environment")
                            if isinstance(obs.get(k), str)}
    row: dict[str, Any] = {"request_id": str(obs.get("id") or ""), "input": mapped["input"],
                           "output": mapped["output"], "metadata": metadata,
                           "request": mapped["request"]}
    if isinstance(obs.get("startTime"), str):
        row["occurred_at"] = obs["startTime"]
    for key in ("latency_ms", "tokens_in", "tokens_out", "cost"):
        if key in mapped:
            row[key] = mapped[key]
    if obs.get("level") == "ERROR":
        row["error"] = str(obs.get("statusMessage") or "ERROR")
    return row


def _page_rows(client: httpx.Client, source: LangfuseSource, observations: list[Any],
               traces: dict[str, bool]) -> tuple[list[dict[str, Any]], int]:
    rows, skipped = [], 0
    need_trace = bool(source.filters.get("trace_name") or source.filters.get("tags"))
    for obs in observations:
        if obs.get("type") not in (None, "GENERATION"):
            continue
        if need_trace and not _trace_matches(client, source, str(obs.get("traceId") or ""),
                                             traces):
            continue
        row = observation_row(obs)
        if row is None:
            skipped += 1
        else:
            rows.append(row)
    return rows, skipped


def _ingest(deployment: Deployment, rows: list[dict[str, Any]]) -> tuple[int, int]:
    """(created, skipped): the page through the traffic service; rows its validation refuses
    (e.g. a text over the size limit) are left out and counted, so that one bad observation
    does not stop the pull forever."""
    if not rows:
        return 0, 0
    try:
        return services.traffic_ingest(deployment=deployment, rows=rows)["created"], 0
    except ValidationFailed as exc:
        details = exc.details if isinstance(exc.details, Mapping) else {}
        bad = {e.get("index") for e in details.get("errors", []) if isinstance(e, Mapping)}
        kept = [r for i, r in enumerate(rows) if i not in bad]
        if not bad - {None} or len(kept) == len(rows):
            raise PullFailed(f"the traffic service refused the page: {exc}") from None
        created = services.traffic_ingest(deployment=deployment, rows=kept)["created"] \
            if kept else 0
        return created, len(rows) - len(kept)


def _failed(source: LangfuseSource, reason: str, now: dt.datetime) -> None:
    source.last_error, source.last_error_at = reason[:2000], now
    source.failures += 1
    source.save(update_fields=["last_error", "last_error_at", "failures", "last_pull_at",
                               "pull_to", "next_page", "updated_at"])


def source_pull(*, source: LangfuseSource, client: httpx.Client | None = None,
                now: dt.datetime | None = None) -> dict[str, Any]:
    """Pull the source's new GENERATION observations into its deployment's traffic, at most
    REVIEWHUB_LANGFUSE_MAX_PAGES pages (the rest at the next tick). Never raises for a pull
    that fails: the reason is recorded on the source and returned."""
    deployment = source.deployment
    if deployment.status != Deployment.Status.ACTIVE:
        raise Conflict(f"Deployment {deployment.pk} is {deployment.status}; it takes no traffic.")
    now = now or timezone.now()
    source.last_pull_at = now
    if source.pull_to is None:
        source.pull_to, source.next_page = now, 1
    report: dict[str, Any] = {"pages": 0, "created": 0, "skipped": 0, "done": False}
    try:
        public, secret = _keys(source)
        with (client or httpx.Client(timeout=_timeout(), follow_redirects=False)) as http:
            http.auth = httpx.BasicAuth(public, secret)
            traces: dict[str, bool] = {}
            while report["pages"] < _max_pages():
                observations, total = _page_fetch(http, source, source.next_page)
                rows, skipped = _page_rows(http, source, observations, traces)
                with transaction.atomic():
                    created, refused = _ingest(deployment, rows)
                    report["pages"] += 1
                    report["created"] += created
                    report["skipped"] += skipped + refused
                    source.rows_created += created
                    source.rows_skipped += skipped + refused
                    if source.next_page >= total or not observations:
                        _finish(source, now)
                        report["done"] = True
                        return report
                    source.next_page += 1
                    source.save()
    except PullFailed as exc:
        _failed(source, str(exc), now)
        report["error"] = source.last_error
        return report
    source.save()
    return report


def _finish(source: LangfuseSource, now: dt.datetime) -> None:
    """The last page is in: the cursor moves to the pull's end minus the overlap (never back)."""
    assert source.pull_to is not None
    source.cursor_from = max(source.cursor_from, source.pull_to - _overlap())
    source.pull_to, source.next_page = None, 1
    source.last_success_at, source.last_error, source.failures = now, "", 0
    source.save()


def deployment_pull(*, deployment: Deployment) -> dict[str, Any] | None:
    """The tick's step: pull the deployment's Langfuse source when it has one."""
    source = LangfuseSource.objects.filter(deployment=deployment).first()
    if source is None:
        return None
    source.deployment = deployment
    return source_pull(source=source)
