"""factory_boy factories shared by all test packages."""

from __future__ import annotations

from typing import Any

import factory
from django.contrib.auth import get_user_model

from studies.authentication import token_generate
from studies.models import (
    ApiToken,
    Candidate,
    Comparison,
    Criterion,
    Item,
    Membership,
    Output,
    RubricVersion,
    Study,
)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.test")
    password = factory.django.Password("pw-for-tests-123")


class StudyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Study

    name = factory.Sequence(lambda n: f"Study {n}")
    slug = factory.Sequence(lambda n: f"study-{n}")
    owner = factory.SubFactory(UserFactory)
    status = Study.Status.OPEN


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    study = factory.SubFactory(StudyFactory)
    user = factory.SubFactory(UserFactory)
    role = Membership.Role.LEAD


class RubricVersionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RubricVersion

    study = factory.SubFactory(StudyFactory)
    version = 1


class CriterionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Criterion

    rubric = factory.SubFactory(RubricVersionFactory)
    key = factory.Sequence(lambda n: f"crit{n}")
    name = factory.LazyAttribute(lambda c: c.key.title())
    guidance = "Is the answer correct and complete?"
    scale = Criterion.Scale.BINARY


class ItemFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Item

    study = factory.SubFactory(StudyFactory)
    external_id = factory.Sequence(lambda n: f"item-{n}")
    input = factory.Sequence(lambda n: f"Question number {n}?")
    metadata = factory.LazyFunction(dict)


class CandidateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Candidate

    study = factory.SubFactory(StudyFactory)
    name = factory.Sequence(lambda n: f"model-{n}")
    provider = "openai"
    model_id = factory.LazyAttribute(lambda c: c.name)


class OutputFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Output

    candidate = factory.SubFactory(CandidateFactory)
    study = factory.LazyAttribute(lambda o: o.candidate.study)
    item = factory.SubFactory(ItemFactory, study=factory.SelfAttribute("..study"))
    text = factory.Sequence(lambda n: f"Answer {n}.")


class ComparisonFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Comparison

    output_a = factory.SubFactory(OutputFactory)
    study = factory.LazyAttribute(lambda c: c.output_a.study)
    item = factory.LazyAttribute(lambda c: c.output_a.item)
    output_b = factory.SubFactory(
        OutputFactory,
        item=factory.SelfAttribute("..item"),
        candidate__study=factory.SelfAttribute("...study"),
    )


def api_token_create(
    *, user: Any, study: Study | None = None, can_write: bool = True, name: str = "test"
) -> str:
    """Create a token for tests and return its secret."""
    secret, prefix, digest = token_generate()
    ApiToken.objects.create(
        user=user, name=name, prefix=prefix, key_hash=digest, study=study, can_write=can_write
    )
    return secret
