"""The import and report commands as the import tests drive them (call_command, as a user's
shell would run `manage.py import_ratings` / `manage.py report agreement`)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command


def run_import(path: Path, *args: str) -> tuple[dict[str, Any], str, str]:
    """Run import_ratings; return (summary JSON, stdout before it, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    call_command("import_ratings", str(path), *args, stdout=out, stderr=err)
    text = out.getvalue()
    start = text.index("{\n")
    return json.loads(text[start:]), text[:start], err.getvalue()


def import_error(path: Path, *args: str) -> str:
    """The CommandError text of an import_ratings run that must be refused."""
    with pytest.raises(CommandError) as info:
        call_command("import_ratings", str(path), *args, stdout=io.StringIO())
    return str(info.value)


def agreement_report(slug: str, tmp_path: Path) -> dict[str, Any]:
    """`report agreement` through the CLI (200 resamples, seed 1); the stored result."""
    out = tmp_path / f"{slug}-report.json"
    call_command(
        "report", "agreement", "--study", slug, "--params", '{"n_resamples": 200, "seed": 1}',
        "--out", str(out), stdout=io.StringIO(),
    )
    return json.loads(out.read_text())["result"]


def run_peer(tool: str, path: Path, *args: str) -> tuple[dict[str, Any], str]:
    """Run import_peer; return (summary JSON, stderr: the dropped lines and warnings)."""
    out, err = io.StringIO(), io.StringIO()
    call_command("import_peer", tool, str(path), *args, stdout=out, stderr=err)
    text = out.getvalue()
    return json.loads(text[text.index("{\n"):]), err.getvalue()


def peer_error(tool: str, path: Path, *args: str) -> str:
    """The CommandError text of an import_peer run that must be refused."""
    with pytest.raises(CommandError) as info:
        call_command("import_peer", tool, str(path), *args, stdout=io.StringIO(),
                     stderr=io.StringIO())
    return str(info.value)
