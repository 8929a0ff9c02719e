"""Project-level Celery tasks: the background-work heartbeat (reviewhub/heartbeat.py)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from reviewhub.embedded_broker import prune_delivered
from reviewhub.heartbeat import heartbeat_stamp

logger = logging.getLogger(__name__)

#: Delivered broker messages are kept this long before the heartbeat prunes them.
BROKER_PRUNE_AFTER_S = 3600.0


@shared_task(name="reviewhub.heartbeat", ignore_result=True)
def heartbeat() -> None:
    """Stamp the heartbeat; on the embedded broker, also drop old delivered messages."""
    heartbeat_stamp()
    if not settings.CELERY_BROKER_URL_SET:
        pruned = prune_delivered(settings.VAR_DIR, older_than_s=BROKER_PRUNE_AFTER_S)
        if pruned:
            logger.info("embedded broker: pruned %d delivered messages", pruned)
