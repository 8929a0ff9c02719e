"""Figures from one schemathesis NDJSON report (written by `.ci/fuzz`).

Prints the cases run, the failing checks grouped by (operation, check, status code) and the
distinct 5xx, and exits 1 when any check failed or the server log shows a traceback. Standard
library only: it runs beside the server, not inside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path


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
    for line in args.ndjson.read_text().splitlines():
        event = json.loads(line)
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

    tracebacks = 0
    if args.server_log and args.server_log.exists():
        tracebacks = args.server_log.read_text(errors="replace").count("Traceback (most recent")
        print(f"{label}server log tracebacks so far: {tracebacks}")
    return 1 if failures or server_errors or tracebacks else 0


if __name__ == "__main__":
    sys.exit(main())
