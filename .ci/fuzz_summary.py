"""Figures from one schemathesis NDJSON report (written by `.ci/fuzz`).

Prints the cases run, the failing checks grouped by (operation, check, status code), the
distinct 5xx and the errors the fuzzer reported, and exits 1 when any check failed, the server
answered 5xx, a request failed at the network level (refused, reset, timed out: the server is in
trouble), the report is incomplete (the fuzzer itself crashed) or the server log shows a
traceback. An error raised inside the fuzzer while it generates cases (schemathesis' "Runtime
Error", e.g. a generation strategy that raised) says nothing about the server: it is printed with
its type and message, and does not fail the run, because it is not reproducible by seed (case
generation is bounded by time) and no change to the server can fix it. Standard library only: it
runs beside the server, not inside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

# Exception types schemathesis reports that mean the server did not answer properly.
SERVER_TROUBLE = frozenset({
    "ConnectionError", "ConnectTimeout", "ReadTimeout", "Timeout", "ChunkedEncodingError",
    "ContentDecodingError", "ProxyError", "SSLError", "TooManyRedirects", "RequestException",
    "UnhealthyAPIError", "UnresponsiveOperationError", "ServerUnavailable",
})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("ndjson", type=Path)
    parser.add_argument("server_log", type=Path, nargs="?")
    parser.add_argument("--label", default="")
    args = parser.parse_args()

    cases = 0
    failures: Counter[tuple[str, str, str, int]] = Counter()
    server_errors: Counter[tuple[str, int]] = Counter()
    samples: dict[tuple[str, str, str, int], str] = {}
    server_trouble: list[str] = []
    fuzzer_errors: list[str] = []
    finished_engine = False
    for line in args.ndjson.read_text().splitlines():
        event = json.loads(line)
        if "EngineFinished" in event:
            finished_engine = True
        error = event.get("NonFatalError")
        if error:
            value = error.get("value") or {}
            kind = str(value.get("type", "?"))
            text = (f"{kind} in {error.get('label', '?')} (phase {error.get('phase')}): "
                    f"{str(value.get('message', ''))[:400]}")
            (server_trouble if kind in SERVER_TROUBLE else fuzzer_errors).append(text)
            continue
        finished = event.get("ScenarioFinished")
        if not finished:
            continue
        recorder = finished["recorder"]
        cases += len(recorder.get("cases", {}))
        interactions = recorder.get("interactions", {})
        for case_id, checks in recorder.get("checks", {}).items():
            response = (interactions.get(case_id) or {}).get("response") or {}
            status = int(response.get("status_code") or 0)
            request = (interactions.get(case_id) or {}).get("request") or {}
            for check in checks:
                if check.get("status") != "failure":
                    continue
                info = (check.get("failure_info") or {}).get("failure") or {}
                key = (recorder["label"], info.get("code", "?"), info.get("title", check["name"]),
                       status)
                failures[key] += 1
                first = ((info.get("message") or "").strip().splitlines() or [""])[0]
                samples.setdefault(key, f"{request.get('method', '')} {request.get('uri', '')}"
                                        f" :: {first}"[:300])
                if status >= 500:
                    server_errors[(recorder["label"], status)] += 1

    label = f"[{args.label}] " if args.label else ""
    print(f"{label}cases: {cases}; unique failures (operation x check x status): "
          f"{len(failures)}; distinct 5xx (operation x status): {len(server_errors)}")
    for key, n in sorted(failures.items()):
        operation, code, title, status = key
        print(f"  {code} {title}: {operation} -> {status} ({n}x)")
        print(f"      e.g. {samples[key]}")

    for text in server_trouble:
        print(f"  server trouble: {text}")
    for text in fuzzer_errors:
        print(f"  fuzzer error (not a finding about the server): {text}")
    if not finished_engine:
        print(f"{label}the report is incomplete: the fuzzer did not finish")

    tracebacks = 0
    if args.server_log and args.server_log.exists():
        tracebacks = args.server_log.read_text(errors="replace").count("Traceback (most recent")
        print(f"{label}server log tracebacks so far: {tracebacks}")
    if cases == 0:
        print(f"{label}no case ran")
    bad = (failures or server_errors or tracebacks or server_trouble or not finished_engine
           or cases == 0)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
