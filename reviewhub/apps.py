import logging

from django.apps import AppConfig
from django.conf import settings

logger = logging.getLogger("reviewhub")


class ReviewHubConfig(AppConfig):
    name = "reviewhub"
    verbose_name = "ReviewHub"

    def ready(self) -> None:
        # Say which backends are in use, so that nobody mistakes the embedded default for the
        # full stack (and the reverse).
        db = settings.DATABASES["default"]
        broker = settings.CELERY_BROKER_URL.split("@")[-1]
        logger.info(
            "database=%s (%s) broker=%s (%s)",
            db["ENGINE"].rsplit(".", 1)[-1],
            "DATABASE_URL" if settings.DATABASE_URL_SET else "embedded default",
            broker.split("://")[0] + "://" + (broker.split("://")[1] if "://" in broker else ""),
            "CELERY_BROKER_URL" if settings.CELERY_BROKER_URL_SET else "embedded default",
        )
