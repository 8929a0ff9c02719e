"""`manage.py token_create` prints the secret and nothing else on stdout.

So that `TOKEN=$(python manage.py token_create alice --write)` works, everything else the
process says (the start-up log line naming the backends, the command's own note, errors) goes
to stderr.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from studies.authentication import token_hash
from studies.models import ApiToken, Membership
from tests.factories import MembershipFactory, StudyFactory, UserFactory

ROOT = Path(__file__).resolve().parents[2]
SECRET_LINE = r"rh_[A-Za-z0-9_-]{20,}\n"


@pytest.mark.django_db
def test_stdout_is_exactly_the_secret() -> None:
    lead = UserFactory(username="cli-lead")
    study = StudyFactory(owner=lead, slug="cli-study")
    MembershipFactory(study=study, user=lead, role=Membership.Role.LEAD)
    out, err = StringIO(), StringIO()
    call_command("token_create", "cli-lead", "--name", "ci", "--study", "cli-study", "--write",
                 stdout=out, stderr=err)
    secret = out.getvalue()
    assert secret.endswith("\n") and secret.count("\n") == 1, secret
    token = ApiToken.objects.get(key_hash=token_hash(secret.strip()))
    assert token.study == study and token.can_write and token.name == "ci"
    # The note about the token (prefix, scope, mode) is for the person, on stderr.
    note = err.getvalue()
    assert token.prefix in note and "cli-study" in note and "read-write" in note
    assert secret.strip() not in note


@pytest.mark.django_db
def test_errors_leave_stdout_empty() -> None:
    UserFactory(username="cli-user")
    for args in (["nobody"], ["cli-user", "--study", "no-such-study"]):
        out, err = StringIO(), StringIO()
        with pytest.raises(CommandError):
            call_command("token_create", *args, stdout=out, stderr=err)
        assert out.getvalue() == ""
    assert not ApiToken.objects.exists()


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_command_substitution_gets_only_the_secret(tmp_path: Path) -> None:
    """The real process: Django's start-up (the backend log line) must not reach stdout.

    Runs on a fresh embedded database in `tmp_path`, so it needs no test database access.
    """
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL"}}
    env.update({"REVIEWHUB_VAR_DIR": str(tmp_path / "var"), "REVIEWHUB_LOG_LEVEL": "INFO",
                "DJANGO_SECRET_KEY": "token-cli-test-key", "DJANGO_DEBUG": "0",
                "DJANGO_SUPERUSER_PASSWORD": "pw-for-tests-123"})
    migrate = _manage("migrate", "--noinput", env=env)
    assert migrate.returncode == 0, migrate.stderr[-2000:]
    made = _manage("createsuperuser", "--noinput", "--username", "alice",
                   "--email", "alice@example.test", env=env)
    assert made.returncode == 0, made.stderr[-2000:]

    created = _manage("token_create", "alice", "--name", "laptop", "--write", env=env)
    assert created.returncode == 0, created.stderr[-2000:]
    assert re.fullmatch(SECRET_LINE, created.stdout), created.stdout
    # The log line and the note went to stderr.
    assert "database=sqlite3" in created.stderr and "shown only once" in created.stderr

    failed = _manage("token_create", "nobody", env=env)
    assert failed.returncode != 0
    assert failed.stdout == "" and "No user 'nobody'" in failed.stderr
