"""Alert notifications: a webhook with a Slack-compatible JSON body, and e-mail through
Django's mail settings. Network I/O only here, never inside a transaction.

The webhook body is an incoming-webhook message Slack accepts as it is (``text`` for
notifications and clients without blocks, ``blocks`` with one mrkdwn section); other chat
tools with Slack-compatible hooks (Mattermost, Rocket.Chat) read ``text``. A failed delivery
is logged and recorded in the alert's history; it is retried at the next evaluation after the
cool-down, like a reminder.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from django.conf import settings
from django.core.mail import send_mail
from django.utils import timezone

from judges.network import UrlRefused, host_is_private, resolve_host, url_parts

from .models import Alert, AlertEvent

logger = logging.getLogger(__name__)
WEBHOOK_TIMEOUT_S = 5.0


PRIVATE_SETTING = "REVIEWHUB_WEBHOOK_ALLOW_PRIVATE_NETWORKS"


def webhook_refusal(url: str, *, at_send: bool = False) -> str | None:
    """Why the server must not POST to `url`, or None. A lead sets the URL, but the request
    leaves from the server: a loopback, private or link-local target (the metadata service,
    the database, an admin port) is refused unless the operator allows private networks, as
    for judges (docs/monitoring.md). The name is resolved when the URL is saved and again
    before each delivery, so a name that later points inside is caught then; a name that does
    not resolve is accepted when saved (the delivery will fail and be recorded) but not sent."""
    if not url.startswith(("https://", "http://")):
        return "must be an http(s) URL"
    try:
        host = url_parts(url).host
    except UrlRefused as exc:
        return f"is not a URL a webhook can be sent to: it {exc}"
    if getattr(settings, PRIVATE_SETTING, False):
        return None
    private = host_is_private(host, resolve_host)
    if private or (at_send and private is None):
        where = ("does not resolve to a public address" if private is None
                 else "points at a loopback, private or link-local address")
        return f"{where} (the operator allows those with {PRIVATE_SETTING}=1)"
    return None


def slack_body(alert: Alert) -> dict[str, Any]:
    """The webhook's JSON body for one alert."""
    status = alert.status.upper()
    text = f"[ReviewHub {status}] {alert.message}"
    return {
        "text": text,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
        "reviewhub": {"alert_id": alert.pk, "deployment_id": alert.deployment_id,
                      "kind": alert.kind, "stratum": alert.stratum, "status": alert.status,
                      "details": alert.details},
    }


def alert_notify(alert: Alert, *, client: httpx.Client | None = None) -> dict[str, Any]:
    """Send the alert to the deployment's webhook and e-mail addresses; record the outcome."""
    alerting = alert.deployment.alerting or {}
    outcome: dict[str, Any] = {}
    url = alerting.get("webhook_url")
    refused = webhook_refusal(str(url), at_send=True) if url else None
    if refused:
        logger.warning("alert %s: webhook not sent: %s", alert.pk, refused)
        outcome["webhook"] = f"refused: {refused}"
    elif url:
        try:
            if client is None:
                with httpx.Client(timeout=WEBHOOK_TIMEOUT_S) as own:
                    response = own.post(url, json=slack_body(alert))
            else:
                response = client.post(url, json=slack_body(alert))
            outcome["webhook"] = response.status_code
        except httpx.HTTPError as exc:
            logger.warning("alert %s: webhook failed: %s", alert.pk, exc)
            outcome["webhook"] = f"failed: {type(exc).__name__}"
    emails = [str(e) for e in alerting.get("emails") or []]
    if emails:
        subject = f"[ReviewHub] {alert.kind.replace('_', ' ')} alert: {alert.deployment.name}"
        sent = send_mail(subject, alert.message, settings.DEFAULT_FROM_EMAIL, emails,
                         fail_silently=True)
        outcome["email"] = sent
    now = timezone.now()
    Alert.objects.filter(pk=alert.pk).update(notified_at=now)
    AlertEvent.objects.create(alert=alert, at=now, event="notified", detail=outcome)
    return outcome
