"""Browser-test fixtures (see harness.py); tests elsewhere import them from the harness."""

from tests.browser.harness import *  # noqa: F403
