"""Admin forms: channel credentials, secrets and member roles are validated before saving."""

from __future__ import annotations

from typing import Any

import pytest
from django.forms import inlineformset_factory

from instances.admin import (
    ChannelConfigForm,
    InstanceMemberForm,
    InstanceMemberFormSet,
    InstanceSecretForm,
)
from instances.models import Instance, InstanceMember
from instances.services import instance_create, instance_delete, instance_secret_set
from openmates import vault
from openmates.vault import VaultError
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_channel_form_needs_every_credential_of_its_kind():
    form = ChannelConfigForm(
        data={"kind": "slack", "enabled": "on", "credentials": '{"bot_token": "xoxb-1"}'}
    )

    assert not form.is_valid()
    assert form.errors["credentials"] == ["Missing: signing_secret."]


def test_channel_form_refuses_enabling_without_credentials_and_bad_json():
    enabling = ChannelConfigForm(data={"kind": "telegram", "enabled": "on", "credentials": ""})
    bad_json = ChannelConfigForm(data={"kind": "telegram", "credentials": "bot_token=1"})

    assert "enabled" in enabling.errors
    assert bad_json.errors["credentials"] == ["Enter a JSON object of non-empty strings."]


def test_channel_form_parses_valid_credentials():
    form = ChannelConfigForm(
        data={"kind": "telegram", "enabled": "on", "credentials": '{"bot_token": "123:abc"}'}
    )

    assert form.is_valid(), form.errors
    assert form.cleaned_data["credentials_parsed"] == {"bot_token": "123:abc"}


def test_secret_form_needs_a_value_for_a_new_secret_and_locks_existing_names(instance):
    new = InstanceSecretForm(data={"name": "NEW_KEY", "value": ""})
    secret = instance_secret_set(instance=instance, name="OLD_KEY", value="sk-form-hidden")
    existing = InstanceSecretForm(instance=secret)

    assert new.errors["value"] == ["A new secret needs a value."]
    assert existing.fields["name"].disabled is True
    assert "sk-form-hidden" not in existing["value"].as_widget()
    assert 'value="' not in existing["value"].as_widget()


def _member_formset(instance, data, *, may_manage_owners):
    formset_class: Any = inlineformset_factory(
        Instance,
        InstanceMember,
        form=InstanceMemberForm,
        formset=InstanceMemberFormSet,
        fields=("username", "role"),
        extra=0,
    )
    formset_class.may_manage_owners = may_manage_owners
    return formset_class(data, instance=instance, prefix="members")


def _member_data(instance, changes, new_rows=()):
    """The members formset's data: existing rows (their username is shown, not posted) with
    role ``changes`` (user id -> role), then ``new_rows`` of (username, role)."""
    rows = list(InstanceMember.objects.filter(instance=instance).order_by("pk"))
    data = {
        "members-TOTAL_FORMS": str(len(rows) + len(new_rows)),
        "members-INITIAL_FORMS": str(len(rows)),
        "members-MIN_NUM_FORMS": "0",
        "members-MAX_NUM_FORMS": "1000",
    }
    for i, row in enumerate(rows):
        data[f"members-{i}-id"] = str(row.pk)
        data[f"members-{i}-instance"] = str(instance.pk)
        data[f"members-{i}-role"] = changes.get(row.user_id, row.role)
    for i, (username, role) in enumerate(new_rows, start=len(rows)):
        data[f"members-{i}-username"] = username
        data[f"members-{i}-role"] = role
    return data


def test_the_last_owner_cannot_be_demoted(instance, owner):
    data = _member_data(instance, {owner.pk: "admin"})

    formset = _member_formset(instance, data, may_manage_owners=True)

    assert not formset.is_valid()
    assert formset.non_form_errors() == ["An instance keeps at least one owner."]


def test_an_admin_cannot_grant_the_owner_role(instance):
    admin_user: Any = UserFactory()
    InstanceMember.objects.create(instance=instance, user=admin_user, role="admin")
    data = _member_data(instance, {admin_user.pk: "owner"})

    refused = _member_formset(instance, data, may_manage_owners=False)
    allowed = _member_formset(instance, data, may_manage_owners=True)

    assert refused.non_form_errors() == ["Only an owner can grant or remove the owner role."]
    assert allowed.is_valid(), allowed.non_form_errors()


def test_a_user_is_listed_once_and_an_existing_row_keeps_its_user(instance, owner):
    UserFactory(username="nora")
    twice = _member_data(instance, {}, [("nora", "member"), ("nora", "admin")])
    renamed = {**_member_data(instance, {}), "members-0-username": "nora"}

    refused = _member_formset(instance, twice, may_manage_owners=True)
    kept = _member_formset(instance, renamed, may_manage_owners=True)

    assert refused.non_form_errors() == ["Each user can be listed once."]
    assert kept.is_valid(), kept.errors
    kept.save()
    assert list(instance.members.values_list("user__username", flat=True)) == ["owner"]


@pytest.mark.django_db(transaction=True)
def test_deleting_an_instance_shreds_its_transit_key(owner, skill_catalog):
    instance = instance_create(slug="doomed", name="Doomed", owner=owner)
    instance_secret_set(instance=instance, name="K", value="v")
    key_name = vault.instance_key_name(instance.pk)

    instance_delete(instance=instance)

    assert not Instance.objects.filter(slug="doomed").exists()
    with pytest.raises(VaultError) as caught:
        vault.key_latest_version(key_name)
    assert caught.value.reason == "not_found"
