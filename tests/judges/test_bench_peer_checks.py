"""The judge-throughput benchmark refuses to print a figure for a setup that did not do its
work (bench/judge_throughput.py): counted at the simulated server, and by the peer's own
account (Inspect's log status and samples, promptfoo's results and errors)."""

from __future__ import annotations

import importlib.util
import json
import stat
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from tests.judges.provider_server import ProviderServer, server_error

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_judge_throughput",
                                                  ROOT / "bench" / "judge_throughput.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def server() -> Any:
    with ProviderServer(latency_s=0.0) as s:
        yield s


def _chat(url: str, n: int, path: str = "/v1/chat/completions") -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client() as client:
        for _ in range(n):
            client.post(url + path, json=body)


def test_server_count_measures_only_complete_runs(bench: ModuleType, server: Any) -> None:
    bench.server_reset(server.url)
    _chat(server.url, 3)
    measured = bench.server_measure(server.url, expected=3, what="x")
    assert measured["server_calls"] == 3
    assert measured["calls_per_s"] > 0 and measured["wall_s"] > 0
    # One call short: no figure.
    with pytest.raises(bench.NotMeasured, match="2 successful calls of 3"):
        bench.server_reset(server.url)
        _chat(server.url, 2)
        bench.server_measure(server.url, expected=3, what="x")


def test_requests_elsewhere_or_errors_are_refused(bench: ModuleType, server: Any) -> None:
    # What the old Inspect row measured: requests to the Responses API, answered 404.
    bench.server_reset(server.url)
    _chat(server.url, 4, path="/v1/responses")
    with pytest.raises(bench.NotMeasured, match=r"0 successful calls of 4.*404.*/v1/responses"):
        bench.server_measure(server.url, expected=4, what="inspect-ai")
    # The right count, but one answer was an error (its retry made up the count).
    bench.server_reset(server.url)
    server.enqueue(server_error(500))
    _chat(server.url, 4)
    with pytest.raises(bench.NotMeasured, match="500"):
        bench.server_measure(server.url, expected=3, what="x")


def _fake(tmp_path: Path, name: str, script: str) -> str:
    exe = tmp_path / name
    exe.write_text(f"#!{sys.executable}\n{script}")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_failed_inspect_eval_is_refused(bench: ModuleType, server: Any, tmp_path: Path) -> None:
    # An "inspect" whose eval ended in error after 4 samples, while the server saw 4 calls.
    report = {"version": "0.3.285", "status": "error", "error": "404 Not Found",
              "completed": 4, "scored": 4, "sample_errors": 0, "e2e_s": 1.0}
    python = _fake(tmp_path, "python", f"""
import httpx, sys
url = sys.argv[-3]
for _ in range(4):
    httpx.post(url + "/v1/chat/completions", json={{"model": "m", "messages": []}})
print({json.dumps(json.dumps(report))})
""")
    with pytest.raises(bench.NotMeasured, match="eval status error, 4 samples completed"):
        bench.inspect_run(python, server.url, calls=4, concurrency=2)


def test_successful_inspect_eval_is_measured(bench: ModuleType, server: Any,
                                             tmp_path: Path) -> None:
    report = {"version": "0.3.285", "status": "success", "error": "", "completed": 4,
              "scored": 4, "sample_errors": 0, "e2e_s": 1.0}
    python = _fake(tmp_path, "python", f"""
import httpx, sys
url = sys.argv[-3]
for _ in range(4):
    httpx.post(url + "/v1/chat/completions", json={{"model": "m", "messages": []}})
print({json.dumps(json.dumps(report))})
""")
    measured = bench.inspect_run(python, server.url, calls=4, concurrency=2)
    assert measured["server_calls"] == 4 and measured["version"] == "0.3.285"


def _fake_promptfoo(tmp_path: Path, rows: list[dict[str, Any]], errors: int, calls: int) -> Path:
    results = {"results": {"results": rows, "stats": {"successes": len(rows) - errors,
                                                      "failures": 0, "errors": errors}}}
    exe = _fake(tmp_path, "promptfoo", f"""
import httpx, sys, json
args = sys.argv[1:]
if args == ["--version"]:
    print("0.121.20"); sys.exit(0)
config = json.load(open(args[args.index("-c") + 1]))
url = config["defaultTest"]["options"]["provider"]["config"]["apiBaseUrl"]
for _ in range({calls}):
    httpx.post(url + "/chat/completions", json={{"model": "m", "messages": []}})
open(args[args.index("-o") + 1], "w").write({json.dumps(json.dumps(results))})
""")
    return Path(exe)


def test_promptfoo_errors_are_refused(bench: ModuleType, server: Any, tmp_path: Path) -> None:
    rows = [{"success": True}, {"success": False, "error": "API error 404", "failureReason": 2},
            {"success": True}]
    exe = _fake_promptfoo(tmp_path, rows, errors=1, calls=3)
    with pytest.raises(bench.NotMeasured, match="3 results of 3, 1 errors"):
        bench.promptfoo_run(exe, server.url, calls=3, concurrency=2)
    exe = _fake_promptfoo(tmp_path, rows[:1], errors=0, calls=1)
    with pytest.raises(bench.NotMeasured, match="1 results of 3"):
        bench.promptfoo_run(exe, server.url, calls=3, concurrency=2)


def test_promptfoo_complete_run_is_measured(bench: ModuleType, server: Any,
                                            tmp_path: Path) -> None:
    exe = _fake_promptfoo(tmp_path, [{"success": True}] * 3, errors=0, calls=3)
    measured = bench.promptfoo_run(exe, server.url, calls=3, concurrency=2)
    assert measured["server_calls"] == 3 and measured["version"] == "0.121.20"
    # Each test is graded by exactly one call: a second call per test is refused.
    exe = _fake_promptfoo(tmp_path, [{"success": True}] * 3, errors=0, calls=6)
    with pytest.raises(bench.NotMeasured, match="6 successful calls of 3"):
        bench.promptfoo_run(exe, server.url, calls=3, concurrency=2)


def test_promptfoo_config_is_one_graded_call_per_test(bench: ModuleType) -> None:
    config = bench.promptfoo_config("http://127.0.0.1:1", 5)
    assert config["providers"] == ["echo"]  # the candidate's answer costs no call
    assert [a["type"] for a in config["defaultTest"]["assert"]] == ["llm-rubric"]
    assert config["defaultTest"]["options"]["provider"]["config"]["apiBaseUrl"] == \
        "http://127.0.0.1:1/v1"
    assert len(config["tests"]) == 5


def test_promptfoo_skipped_with_a_reason_without_npm(bench: ModuleType,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench.shutil, "which", lambda name: None)
    assert bench.promptfoo_install("") == (None, "npm is not installed")
