"""Celery adapters for monitoring: ids in, service calls, the retry policy.

`monitoring.tick` runs from celery beat (`CELERY_BEAT_SCHEDULE["monitoring-tick"]`): for every
active deployment it pulls new traffic from its Langfuse source if it has one
(`monitoring.langfuse_pull`: the cursor moves only after a page is committed, rows are
idempotent on the observation id), dispatches the sampled rows (judge runs, the calibrated
policy's decisions, the human queue; `monitoring.dispatch`), recomputes the windows that can
still change (the current and previous hour and day), evaluates the alerts, and sends the
notifications that are due. Every step is idempotent (a row is dispatched once; one window per
deployment, granularity and start, left untouched when its input did not change; one unresolved
alert per stream), so a tick that runs twice, or a worker killed mid-tick whose message is
redelivered (`acks_late`), leaves the same state: the rows are in the database, and the next
tick computes what the killed one did not.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from . import alerts, dispatch, langfuse_pull, notify, services
from .models import Deployment

logger = logging.getLogger(__name__)


def deployment_tick(*, deployment_id: int) -> dict[str, Any]:
    """One deployment's tick: windows, alerts, notifications (outside any transaction)."""
    deployment = Deployment.objects.select_related("plan").get(pk=deployment_id)
    now = timezone.now()
    # New traffic from the deployment's Langfuse source first, so this tick samples and
    # windows it. A failed fetch is recorded on the source and retried next tick; anything
    # else (a bug, the deployment paused mid-pull) is logged and must not stop the windows.
    try:
        pulled = langfuse_pull.deployment_pull(deployment=deployment)
    except (OperationalError, InterfaceError):
        raise
    except Exception as exc:
        logger.exception("Langfuse pull failed for deployment %s", deployment_id)
        pulled = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    # Judge work and the human queue first, so the windows read the labels collected now. A
    # dispatch that fails (a row the live study's import refuses, a judge config gone bad) is
    # logged and retried next tick; it must not stop the windows and alerts.
    try:
        dispatched = dispatch.deployment_dispatch(deployment=deployment)
    except (OperationalError, InterfaceError):
        raise
    except Exception as exc:
        logger.exception("monitoring dispatch failed for deployment %s", deployment_id)
        dispatched = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    windows = services.windows_recent_compute(deployment=deployment, now=now)
    due = alerts.alerts_evaluate(deployment=deployment, now=now)
    for alert in due:
        notify.alert_notify(alert)
    return {"windows": len(windows), "notified": len(due), "dispatch": dispatched,
            "langfuse": pulled}


@shared_task(name="monitoring.tick", acks_late=True,
             autoretry_for=(OperationalError, InterfaceError), retry_backoff=2, max_retries=3)
def monitoring_tick() -> dict[str, Any]:
    done, failed = 0, 0
    for pk in Deployment.objects.filter(status=Deployment.Status.ACTIVE).values_list(
            "pk", flat=True):
        try:
            deployment_tick(deployment_id=pk)
            done += 1
        except (OperationalError, InterfaceError):
            raise  # the database is gone: the task's retry policy takes over
        except Exception:
            # One deployment's failure (a bad plan, a bug) must not stop the others' windows
            # and alerts; it is logged and tried again at the next tick.
            logger.exception("monitoring tick failed for deployment %s", pk)
            failed += 1
    return {"deployments": done, "failed": failed}
