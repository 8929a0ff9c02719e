import logging

from django.apps import AppConfig
from django.conf import settings
from kombu.utils.url import maybe_sanitize_url

logger = logging.getLogger("reviewhub")


class ReviewHubConfig(AppConfig):
    name = "reviewhub"
    verbose_name = "ReviewHub"

    def ready(self) -> None:
        # Create the Celery app before any task is sent, so that `shared_task`s bind to it
        # (and its broker settings) rather than to Celery's default app.
        from . import celery  # noqa: F401

        # Say which backends are in use, so that nobody mistakes the embedded default for the
        # full stack (and the reverse). The broker URL is logged with its password masked.
        db = settings.DATABASES["default"]
        logger.info(
            "database=%s (%s) broker=%s (%s)",
            db["ENGINE"].rsplit(".", 1)[-1],
            "DATABASE_URL" if settings.DATABASE_URL_SET else "embedded default",
            maybe_sanitize_url(settings.CELERY_BROKER_URL),
            "CELERY_BROKER_URL" if settings.CELERY_BROKER_URL_SET else "embedded default",
        )
