"""The project package.

The Celery application is created when Django starts (`ReviewHubConfig.ready`) or when
`celery -A reviewhub` loads `reviewhub.celery`, not when this package is imported: importing
Celery with DJANGO_SETTINGS_MODULE set loads Django, and the plain modules of the project
(`reviewhub.errors`, `reviewhub.api.strictjson`) must import without it
(tests/test_pure_imports.py).
"""

from typing import Any

__all__ = ["celery_app"]


def __getattr__(name: str) -> Any:
    # `from reviewhub import celery_app` keeps working, loading the app on first use.
    if name == "celery_app":
        from .celery import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
