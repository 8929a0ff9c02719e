"""Settings for the type checker only: mypy's Django plugin imports the settings module, and the
real one refuses to load without a secret key when DEBUG is off. A placeholder key lets
`mypy` run on a fresh checkout with an empty environment; nothing serves with this module."""

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "typecheck-only-placeholder")

from reviewhub.settings import *  # noqa: F403
