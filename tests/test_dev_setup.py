"""`python3 dev.py setup` leaves a working local configuration, so the documented `manage.py`
commands run right after it without DJANGO_SECRET_KEY exported (issue: they failed until it was)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _dev(tmp_root: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev_under_test", ROOT / "dev.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.ROOT = tmp_root  # type: ignore[attr-defined]
    return module


def test_setup_writes_the_local_env_file_a_manage_command_then_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = _dev(tmp_path)
    monkeypatch.setattr(dev, "ensure_venv", lambda extra: None)
    monkeypatch.delenv("DJANGO_SECRET_KEY", raising=False)
    monkeypatch.setattr(sys, "argv", ["dev.py", "setup"])
    assert dev.main() == 0
    env_file = tmp_path / ".env"
    values = dict(line.split("=", 1) for line in env_file.read_text().splitlines()
                  if line and not line.startswith("#"))
    assert len(values["DJANGO_SECRET_KEY"]) >= 40

    # The settings read a .env beside manage.py: with only that file (no exported key), a
    # manage.py command starts. The project's own .env is left alone: the copy goes to a
    # scratch tree that links the project's packages.
    # reviewhub/ is copied, not linked: the settings find the .env beside their resolved path.
    shutil.copytree(ROOT / "reviewhub", tmp_path / "reviewhub",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "manage.py", tmp_path / "manage.py")  # sys.path[0] is its real folder
    for entry in ROOT.iterdir():
        if entry.name not in {".env", ".git", "var"} and not (tmp_path / entry.name).exists():
            (tmp_path / entry.name).symlink_to(entry)
    env: dict[str, Any] = {k: v for k, v in os.environ.items()
                           if k not in {"DJANGO_SECRET_KEY", "DATABASE_URL"}}
    env["REVIEWHUB_VAR_DIR"] = str(tmp_path / "var")
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_an_exported_secret_key_wins_and_no_file_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = _dev(tmp_path)
    monkeypatch.setattr(dev, "ensure_venv", lambda extra: None)
    monkeypatch.setenv("DJANGO_SECRET_KEY", "exported-" + "k" * 40)
    monkeypatch.setattr(sys, "argv", ["dev.py", "setup"])
    assert dev.main() == 0
    assert not (tmp_path / ".env").exists()
