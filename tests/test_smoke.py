import pytest


@pytest.mark.django_db
def test_healthz_reports_database(client):
    response = client.get("/healthz")
    body = response.json()
    assert body["database"]["ok"] is True
    assert "broker" in body


def test_evalstats_never_imports_django():
    import subprocess
    import sys

    code = (
        "import importlib, pkgutil, sys, evalstats\n"
        "for m in pkgutil.walk_packages(evalstats.__path__, 'evalstats.'):\n"
        "    importlib.import_module(m.name)\n"
        "assert 'django' not in sys.modules, 'evalstats imported django'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
