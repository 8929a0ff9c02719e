"""The background-work heartbeat (reviewhub/heartbeat.py), the lead-page banner and the
embedded broker's housekeeping (reviewhub/embedded_broker.py)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from reviewhub.celery_tasks import heartbeat
from reviewhub.embedded_broker import MESSAGE_TABLE, broker_settings, prune_delivered
from reviewhub.heartbeat import background_status, heartbeat_stamp
from reviewhub.models import BackgroundHeartbeat
from studies.models import Membership, Study
from tests.factories import MembershipFactory, UserFactory

ROOT = Path(__file__).resolve().parent.parent
BANNER = "Background work is not running since"


def page(client: Any, user: Any, study: Study) -> str:
    client.force_login(user)
    response = client.get(f"/studies/{study.slug}/")
    assert response.status_code == 200
    return str(response.content.decode())


@pytest.mark.django_db
def test_the_beat_task_stamps_the_heartbeat() -> None:
    assert not BackgroundHeartbeat.objects.exists()
    before = timezone.now()
    heartbeat.run()
    row = BackgroundHeartbeat.objects.get(name="beat")
    assert row.beat_at >= before
    status = background_status()
    assert status.stale is False and status.last_beat_at == row.beat_at


@pytest.mark.django_db
@override_settings(REVIEWHUB_HEARTBEAT_STALE_S=120)
def test_a_stale_heartbeat_puts_the_banner_on_lead_pages(client: Any, lead: Any,
                                                         study: Study) -> None:
    heartbeat_stamp(at=timezone.now() - timedelta(seconds=30))
    assert BANNER not in page(client, lead, study)

    last = (timezone.now() - timedelta(minutes=10)).replace(second=5)
    heartbeat_stamp(at=last)
    html = page(client, lead, study)
    # The one date format of every page (reviewhub_ui's `when`), in a <time> element.
    shown = last.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    assert (f'{BANNER} <time class="nowrap" datetime="{last.isoformat(timespec="seconds")}">'
            f'{shown}</time>: judge runs and reports will wait.') in html, html
    assert background_status(now=last + timedelta(seconds=121)).stale is True
    assert background_status(now=last + timedelta(seconds=119)).stale is False


def banner_for(user: Any, study: Study) -> bool:
    """Whether base.html shows the banner to `user` on a page of `study`."""
    from django.template.loader import render_to_string
    from django.test import RequestFactory

    request = RequestFactory().get("/")
    request.user = user
    return BANNER in render_to_string("base.html", {"study": study}, request=request)


@pytest.mark.django_db
def test_no_banner_before_the_first_heartbeat_nor_for_annotators(client: Any, lead: Any,
                                                                 study: Study) -> None:
    # A fresh database whose worker has not run its first beat yet says nothing.
    assert BANNER not in page(client, lead, study)
    assert banner_for(lead, study) is False
    heartbeat_stamp(at=timezone.now() - timedelta(hours=2))
    annotator = UserFactory(username="ann")
    MembershipFactory(study=study, user=annotator, role=Membership.Role.ANNOTATOR)
    # Annotators' grading does not wait on the worker: their pages stay quiet.
    assert banner_for(annotator, study) is False
    assert banner_for(lead, study) is True


def test_delivered_messages_are_pruned_and_pending_ones_kept(tmp_path: Path) -> None:
    from kombu import Connection

    url, options = broker_settings(tmp_path, queues=("q",))
    with Connection(url, transport_options=options) as conn:
        queue = conn.SimpleQueue("q")
        for n in range(5):
            queue.put({"n": n})
        for _ in range(3):
            queue.get(timeout=5).ack()
        queue.close()
    db = sqlite3.connect(tmp_path / "broker.sqlite3")
    assert db.execute(f"SELECT count(*) FROM {MESSAGE_TABLE} WHERE visible = 0").fetchone() == (3,)
    # Delivered just now: kept for the hour.
    assert prune_delivered(tmp_path, older_than_s=3600) == 0
    db.execute(f"UPDATE {MESSAGE_TABLE} SET timestamp = datetime('now', 'localtime', "
               "'-2 hours') WHERE visible = 0")
    db.commit()
    assert prune_delivered(tmp_path, older_than_s=3600) == 3
    assert db.execute(f"SELECT count(*) FROM {MESSAGE_TABLE}").fetchone() == (2,)
    db.close()


def _settings_in_subprocess(tmp_path: Path, **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL"}}
    env.update({"REVIEWHUB_VAR_DIR": str(tmp_path / "var"), "DJANGO_SECRET_KEY": "k",
                "DJANGO_SETTINGS_MODULE": "reviewhub.settings", **env_extra})
    code = ("from django.conf import settings; print(settings.CELERY_BROKER_URL); "
            "print(settings.CELERY_BROKER_TRANSPORT_OPTIONS); "
            "print(getattr(settings, 'CELERY_WORKER_ENABLE_REMOTE_CONTROL', None))")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_embedded_default_is_the_sqlite_broker_and_filesystem_is_refused(
        tmp_path: Path) -> None:
    done = _settings_in_subprocess(tmp_path)
    assert done.returncode == 0, done.stderr
    url, options, remote_control = done.stdout.splitlines()
    assert url == f"sqla+sqlite:///{tmp_path / 'var' / 'broker.sqlite3'}"
    assert "'connect_args': {'timeout': 30}" in options
    assert remote_control == "False"  # no fanout, no pidbox files, said explicitly
    refused = _settings_in_subprocess(tmp_path, CELERY_BROKER_URL="filesystem://")
    assert refused.returncode != 0
    assert "kombu #1551" in refused.stderr and "not supported" in refused.stderr
    redis = _settings_in_subprocess(tmp_path, CELERY_BROKER_URL="redis://127.0.0.1:6379/9")
    assert redis.returncode == 0, redis.stderr
    assert redis.stdout.splitlines() == ["redis://127.0.0.1:6379/9",
                                         "{'visibility_timeout': 3600}", "None"]
