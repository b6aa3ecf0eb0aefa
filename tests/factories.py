"""factory_boy factories shared by the tests (each app adds its own below)."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model


class UserFactory(factory.django.DjangoModelFactory):
    """A user with a usable password (``password``)."""

    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.test")
    password = factory.django.Password("correct horse battery staple")


class InstanceFactory(factory.django.DjangoModelFactory):
    """A bare instance row (no prompts, mate, skills or transit key: use ``instance_create``
    via the ``instance`` fixture when those matter)."""

    class Meta:
        model = "instances.Instance"
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"instance-{n}")
    name = factory.LazyAttribute(lambda i: i.slug.replace("-", " ").title())


class InstanceMemberFactory(factory.django.DjangoModelFactory):
    """A membership; ``role`` defaults to ``member``."""

    class Meta:
        model = "instances.InstanceMember"

    instance = factory.SubFactory(InstanceFactory)
    user = factory.SubFactory(UserFactory)
    role = "member"


class SkillFactory(factory.django.DjangoModelFactory):
    """A catalog skill without versions."""

    class Meta:
        model = "skills.Skill"
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"skill-{n}")
    name = factory.LazyAttribute(lambda s: s.slug.replace("-", " ").title())


class SkillVersionFactory(factory.django.DjangoModelFactory):
    """Version 1 of a skill naming ``tool_names``."""

    class Meta:
        model = "skills.SkillVersion"

    skill = factory.SubFactory(SkillFactory)
    version = 1
    description = factory.LazyAttribute(lambda v: f"{v.skill.name} skill")
    instructions = "Use the tools."
    tool_names = factory.LazyFunction(list)
