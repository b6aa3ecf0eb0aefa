"""Instance creation, prompt sections and their cache, members, channels."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import connection

from instances.models import ChannelConfig, Instance, InstanceMember, Mate, PromptSection
from instances.selectors import prompt_cache_key, prompt_sections_get, tier_secrets_missing
from instances.services import (
    channel_config_set,
    channel_credentials_get,
    instance_config_saved,
    instance_create,
    instance_member_set,
    instance_secret_set,
    prompt_section_update,
)
from openmates import vault
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_instance_create_seeds_owner_prompts_mate_and_transit_key(owner, skill_catalog):
    instance = instance_create(slug="acme", name="Acme Helper", owner=owner)

    assert InstanceMember.objects.get(instance=instance).role == "owner"
    sections = prompt_sections_get(instance)
    assert list(sections) == [
        "identity",
        "persona",
        "tooling",
        "safety",
        "skills",
        "memory",
        "user",
        "datetime",
    ]
    assert sections["identity"].startswith("You are Acme Helper,")
    assert all(sections.values())
    mate = Mate.objects.get(instance=instance)
    assert (mate.name, mate.category, mate.is_default) == ("General", "general", True)
    assert vault.key_latest_version(vault.instance_key_name(instance.pk)) == 1
    assert instance.key_version == 1


def test_instance_create_refuses_a_bad_tier_map(owner):
    with pytest.raises(ValidationError, match="provider/name"):
        instance_create(slug="bad", name="Bad", owner=owner, tier_map={"fast": [{"model": "gpt"}]})
    with pytest.raises(ValidationError, match="Unknown tier"):
        instance_create(slug="bad", name="Bad", owner=owner, tier_map={"turbo": [{"model": "a/b"}]})
    assert not Instance.objects.filter(slug="bad").exists()


def test_instance_create_accepts_a_fallback_chain(owner, skill_catalog):
    tiers = {
        "standard": [
            {"model": "openai/gpt-4o-mini", "secret": "OPENAI_API_KEY"},
            {"model": "ollama/llama3", "api_base": "http://127.0.0.1:11434"},
        ]
    }

    instance = instance_create(slug="chain", name="Chain", owner=owner, tier_map=tiers)

    assert Instance.objects.get(pk=instance.pk).tier_map == tiers


def test_duplicate_slug_is_refused(instance, owner):
    with pytest.raises(ValidationError):
        instance_create(slug="demo", name="Again", owner=owner)


def test_prompt_sections_are_cached_for_60_seconds(instance, django_assert_num_queries):
    prompt_sections_get(instance)

    with django_assert_num_queries(0):
        cached = prompt_sections_get(instance)
    assert cache.ttl(prompt_cache_key(instance.pk)) <= 60  # type: ignore[attr-defined]
    assert cached["persona"].startswith("Be friendly")


@pytest.mark.django_db(transaction=True)
def test_saving_a_section_invalidates_the_cache(owner, skill_catalog):
    instance = instance_create(slug="cachey", name="Cachey", owner=owner)
    assert prompt_sections_get(instance)["persona"].startswith("Be friendly")

    prompt_section_update(instance=instance, key="persona", content="Speak like a pirate.")

    assert cache.get(prompt_cache_key(instance.pk)) is None
    assert prompt_sections_get(instance)["persona"] == "Speak like a pirate."


@pytest.mark.django_db(transaction=True)
def test_admin_style_save_invalidates_the_cache(owner, skill_catalog):
    instance = instance_create(slug="cachey2", name="Cachey", owner=owner)
    prompt_sections_get(instance)
    PromptSection.objects.filter(instance=instance, key="user").update(content="Be brief.")

    assert prompt_sections_get(instance)["user"] != "Be brief."  # still cached
    instance_config_saved(instance=instance)

    assert prompt_sections_get(instance)["user"] == "Be brief."


def test_unknown_section_is_refused(instance):
    with pytest.raises(ValidationError):
        prompt_section_update(instance=instance, key="mood", content="x")


def test_member_roles(instance):
    user = UserFactory()

    member = instance_member_set(instance=instance, user=user, role="admin")
    again = instance_member_set(instance=instance, user=user, role="member")

    assert member.pk == again.pk
    assert InstanceMember.objects.get(pk=member.pk).role == "member"
    with pytest.raises(ValidationError):
        instance_member_set(instance=instance, user=user, role="king")


def test_channel_credentials_are_sealed_and_read_back(instance):
    token = "123456:AA-telegram-bot-token"

    channel = channel_config_set(
        instance=instance, kind="telegram", credentials={"bot_token": token}, enabled=True
    )

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT credentials_sealed FROM instances_channelconfig WHERE id = %s", [channel.pk]
        )
        (stored,) = cursor.fetchone()
    assert token.encode() not in bytes(stored)
    assert channel_credentials_get(channel=ChannelConfig.objects.get(pk=channel.pk)) == {
        "bot_token": token
    }
    assert channel.enabled is True
    assert channel.credentials_set_at is not None


def test_channel_needs_complete_credentials_before_enabling(instance):
    with pytest.raises(ValidationError, match="signing_secret"):
        channel_config_set(instance=instance, kind="slack", credentials={"bot_token": "x"})
    with pytest.raises(ValidationError, match="needs credentials"):
        channel_config_set(instance=instance, kind="slack", enabled=True)
    assert not ChannelConfig.objects.filter(instance=instance, kind="slack", enabled=True).exists()


def test_tier_secrets_missing_names_unset_secrets(instance):
    instance.tier_map = {
        "fast": [{"model": "openai/gpt-4o-mini", "secret": "OPENAI_API_KEY"}],
        "heavy": [{"model": "anthropic/claude", "secret": "ANTHROPIC_API_KEY"}],
    }
    instance.save()
    instance_secret_set(instance=instance, name="OPENAI_API_KEY", value="sk-1")

    assert tier_secrets_missing(instance) == ["ANTHROPIC_API_KEY"]


def test_prompt_sections_fall_back_to_the_database_when_redis_is_away(instance, settings):
    prompt_section_update(instance=instance, key="user", content="Call me Al.")
    free_port = 1  # nothing listens there: connections are refused at once
    settings.CACHES = {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{free_port}/0",
            "OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 1},
        }
    }

    assert prompt_sections_get(instance)["user"] == "Call me Al."
