"""The Celery application. Tasks live in each app's `celery_tasks.py` (see ARCHITECTURE.md)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reviewhub.settings")

app = Celery("reviewhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(related_name="celery_tasks")
