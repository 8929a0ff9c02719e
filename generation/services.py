"""Write services for generation configs and prompt templates (versions by content hash)."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max

from judges.config import JudgeNetworkPolicy
from reviewhub.errors import ValidationFailed
from studies.models import Candidate, Item, Study

from .config import config_hash, generation_config_validate, template_validate
from .models import GenerationConfig, PromptTemplate


def generation_config_create(*, candidate: Candidate, config: Any,
                             created_by: Any = None) -> tuple[GenerationConfig, bool]:
    """(the version for this config, whether it was created): the same canonical config is
    the same version (its hash names it), anything else is the next version."""
    policy = JudgeNetworkPolicy.from_settings()
    canonical = generation_config_validate(
        config, allowed_base_urls=policy.allowed_base_urls,
        allowed_key_env=policy.key_env_allowed, reserved_key_env=policy.reserved_key_env,
        allow_private_base_urls=policy.allow_private)
    digest = config_hash(canonical)
    with transaction.atomic():
        Candidate.objects.select_for_update().filter(pk=candidate.pk).first()
        existing = GenerationConfig.objects.filter(candidate=candidate,
                                                   content_hash=digest).first()
        if existing is not None:
            return existing, False
        last = GenerationConfig.objects.filter(candidate=candidate).aggregate(
            m=Max("version"))["m"] or 0
        try:
            row = GenerationConfig.objects.create(candidate=candidate, version=last + 1,
                                                  content_hash=digest, config=canonical,
                                                  created_by=created_by)
        except IntegrityError:  # pragma: no cover - serialised by the candidate row lock
            raise ValidationFailed.at("config", "a concurrent change made this version; "
                                                "retry") from None
    return row, True


def study_metadata_keys(*, study: Study) -> set[str]:
    """The metadata keys any item of the study has (what `{metadata.KEY}` may name)."""
    keys: set[str] = set()
    for meta in Item.objects.filter(study=study).values_list("metadata", flat=True).iterator():
        if isinstance(meta, dict):
            keys.update(meta)
    return keys


def prompt_template_create(*, study: Study, template: Any,
                           created_by: Any = None) -> tuple[PromptTemplate, bool]:
    """(the version for this template, whether it was created); ValidationFailed names the
    field (an unknown placeholder, a metadata key no item has, a schema that is not one)."""
    canonical = template_validate(template, metadata_keys=study_metadata_keys(study=study))
    digest = config_hash(canonical)
    with transaction.atomic():
        Study.objects.select_for_update().filter(pk=study.pk).first()
        existing = PromptTemplate.objects.filter(study=study, content_hash=digest).first()
        if existing is not None:
            return existing, False
        last = PromptTemplate.objects.filter(study=study).aggregate(m=Max("version"))["m"] or 0
        row = PromptTemplate.objects.create(study=study, version=last + 1, content_hash=digest,
                                            template=canonical, created_by=created_by)
    return row, True
