"""The pure modules import with no Django settings, and load neither Django nor DRF.

ARCHITECTURE.md keeps statistics (`evalstats`) and the validation a request needs before any
database work (sampling designs, judge config, the analysis plan spec, report result types,
application errors, strict JSON) in plain Python, so that they can be used, tested and
benchmarked without a configured project. One stray import (a model for a type hint, DRF's
`status` for a constant, the project package loading Celery) silently ties them to Django
again; this test imports each one in a fresh interpreter and says which one did.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Every module of evalstats (found on disk, so that a new module is covered without editing
# this list) plus the pure modules of the apps.
EVALSTATS = [
    "evalstats",
    *sorted(f"evalstats.{p.stem}" for p in (ROOT / "evalstats").glob("*.py")
            if p.stem != "__init__"),
]
APP_PURE = [
    "annotations.sampling",
    "judges.config",
    "judges.prompts",
    "judges.templates",
    "judges.network",
    "generation.config",
    "generation.schema",
    "studies.spec",
    "studies.criteria",
    "studies.strata",
    "studies.planform",
    "studies.studyform",
    "studies.ingest",
    "studies.ingest.formats",
    "studies.ingest.errors",
    "studies.ingest.schema",
    "studies.ingest.reading",
    "reports.results",
    "reports.agreement.params",
    "reports.agreement.verdict",
    "reports.agreement.results",
    "reports.agreement.present.summary",
    "calibration.params",
    "reports.selection.params",
    "reports.selection.results",
    "reviewhub.errors",
    "reviewhub.params",
    "monitoring.sampling",
    "monitoring.signals",
    "monitoring.traffic",
    "monitoring.window.params",
    "monitoring.window.results",
    "monitoring.window.compute",
    "reviewhub.capabilities",
    "reviewhub.api.strictjson",
    "reviewhub.embedded_broker",
    "studies.subjects",
]
PURE_MODULES = EVALSTATS + APP_PURE

_CHECK = """
import importlib, sys
importlib.import_module(sys.argv[1])
loaded = sorted(m for m in sys.modules
                if m.split('.')[0] in ('django', 'rest_framework', 'celery'))
if loaded:
    sys.exit(f"{sys.argv[1]} loaded {', '.join(loaded[:8])}")
"""


def _clean_env() -> dict[str, str]:
    # pytest-django exports DJANGO_SETTINGS_MODULE into this process; the check must run as a
    # plain script would, without it.
    return {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}


@pytest.mark.parametrize("module", PURE_MODULES)
def test_module_imports_without_django(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CHECK, module],
        cwd=ROOT, env=_clean_env(), capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr.strip().splitlines()[-1:]


def test_the_check_catches_a_module_that_loads_django() -> None:
    """The check itself can fail: a module that needs Django models is reported."""
    result = subprocess.run(
        [sys.executable, "-c", _CHECK, "reviewhub.api.errors"],
        cwd=ROOT, env=_clean_env(), capture_output=True, text=True, timeout=120,
    )
    assert result.returncode != 0
    assert "reviewhub.api.errors loaded django" in result.stderr
