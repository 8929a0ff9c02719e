"""Writes for judges and their immutable versions (runs live in `judges/runs.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from reviewhub.api.errors import Conflict, ValidationFailed
from studies.models import Study

from .config import config_hash, config_validate
from .models import Judge, JudgeVersion

MAX_NAME_CHARS = 200


def judge_config_validate(config: Any, *, kind: str | None = None) -> dict[str, Any]:
    """Validate a judge config and return its canonical form (every default explicit).

    `kind` is the judge's kind ("llm" | "programmatic" | "imported"); None infers it from the
    config (a "check" field means programmatic). Raises ValidationFailed naming the field.
    """
    return config_validate(
        config, kind=kind, allowed_base_urls=list(settings.REVIEWHUB_JUDGE_ALLOWED_BASE_URLS)
    )


def judge_create(
    *, study: Study, name: str, kind: str, description: str = "", created_by: Any = None
) -> Judge:
    """Create a judge (no version yet). Names are unique within a study."""
    name = (name or "").strip()
    if not name or len(name) > MAX_NAME_CHARS:
        raise ValidationFailed("name is required (at most 200 characters).",
                               details={"field": "name"})
    if kind not in Judge.Kind.values:
        raise ValidationFailed(f"kind must be one of {', '.join(Judge.Kind.values)}.",
                               details={"field": "kind"})
    try:
        with transaction.atomic():
            return Judge.objects.create(study=study, name=name, kind=kind,
                                        description=description or "", created_by=created_by)
    except IntegrityError:
        raise Conflict(f"A judge named {name!r} already exists in this study.",
                       details={"field": "name"}) from None


@dataclass(frozen=True)
class VersionOutcome:
    version: JudgeVersion
    created: bool


def judge_version_get_or_create(*, judge: Judge, config: Any) -> VersionOutcome:
    """The version for this config: the existing one with the same content hash, or version
    n+1. Validation and hashing happen before the transaction; the unique constraints on
    (judge, version) and (judge, content_hash) settle concurrent creators."""
    canonical = judge_config_validate(config, kind=judge.kind)
    digest = config_hash(canonical)
    family = str(canonical.get("model_family") or "")
    for _attempt in range(5):
        existing = JudgeVersion.objects.filter(judge=judge, content_hash=digest).first()
        if existing is not None:
            return VersionOutcome(existing, False)
        try:
            with transaction.atomic():
                # Lock the judge row so that concurrent creators number versions in turn.
                Judge.objects.select_for_update().filter(pk=judge.pk).first()
                last = (
                    JudgeVersion.objects.filter(judge=judge).order_by("-version")
                    .values_list("version", flat=True).first()
                )
                version = JudgeVersion.objects.create(
                    judge=judge, version=(last or 0) + 1, content_hash=digest,
                    config=canonical, model_family=family,
                )
            return VersionOutcome(version, True)
        except IntegrityError:
            continue  # someone else created this hash or this number first: look again
    raise Conflict("Could not create the judge version (concurrent updates); retry.")


def judge_version_for_config(*, judge: Judge, config: Any) -> JudgeVersion:
    """The contract entry point: validate, canonicalise, hash; existing or new version."""
    return judge_version_get_or_create(judge=judge, config=config).version
