"""Fixtures for the annotation backend tests."""

from __future__ import annotations

from typing import Any

import pytest

from studies.models import Study

from .factories import World, annotators_make, world_build


@pytest.fixture
def world(study: Study) -> World:
    """Study 'alpha': strata en=6, de=3, fr=1 items, one candidate (10 outputs)."""
    return world_build(study=study, strata={"en": 6, "de": 3, "fr": 1})


@pytest.fixture
def annotators(study: Study) -> list[Any]:
    return annotators_make(study, 4)


@pytest.fixture(autouse=True)
def _sweep_every_call(settings: Any) -> None:
    # Tests move lease expiry into the past and expect the next call to see it.
    settings.REVIEWHUB_LEASE_SWEEP_SECONDS = 0
