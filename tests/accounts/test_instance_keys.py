"""Instance /v1 keys (accounts.instance_keys): hashed, one pseudo-user each, created in the
admin (shown once on the answer page) and by create_api_key --instance, revoked by
revoke_api_key."""

from __future__ import annotations

import io
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.messages import get_messages
from django.core.management import CommandError, call_command
from django.test import Client

from accounts.instance_keys import instance_key_create, instance_key_get_usable, key_digest
from accounts.models import InstanceApiKey
from instances.models import Instance, InstanceMember
from memories import search, selectors, services

pytestmark = pytest.mark.django_db


def test_a_key_is_stored_hashed_with_a_pseudo_user_of_its_own(instance: Instance) -> None:
    first, raw = instance_key_create(instance=instance, name="script")
    second, _ = instance_key_create(instance=instance, name="other")

    assert raw.startswith(f"omk_{first.prefix}_")
    assert first.digest == key_digest(raw)
    assert raw not in first.digest
    assert first.user_id != second.user_id
    assert first.user.username == f"apikey:{first.prefix}"
    assert not first.user.has_usable_password()
    assert not InstanceMember.objects.filter(user=first.user).exists()
    assert instance_key_get_usable(raw) == first
    assert instance_key_get_usable(raw[:-1] + ("A" if raw[-1] != "A" else "B")) is None


def test_the_command_prints_the_key_once_and_revoke_ends_it(instance: Instance) -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "create_api_key", instance="demo", name="cli", expires_days=2, stdout=out, stderr=err
    )
    raw = out.getvalue().strip()
    key = InstanceApiKey.objects.get(instance=instance)
    revoked = io.StringIO()
    call_command("revoke_api_key", key.prefix, stdout=revoked)

    assert raw.startswith(f"omk_{key.prefix}_")
    assert raw not in err.getvalue()
    assert key.expires_at is not None
    assert "revoked" in revoked.getvalue()
    assert instance_key_get_usable(raw) is None
    with pytest.raises(CommandError, match="no instance"):
        call_command("create_api_key", instance="nope", name="x", stdout=io.StringIO())


def test_the_admin_creates_a_key_and_shows_it_once(instance: Instance, admin_user: Any) -> None:
    client = Client()
    client.force_login(admin_user)

    page = client.post(
        "/admin/accounts/instanceapikey/add/",
        {"instance": instance.pk, "name": "from admin", "expires_at_0": "", "expires_at_1": ""},
    )
    key = InstanceApiKey.objects.get(name="from admin")
    html = page.content.decode()
    start = html.index('id="instance-key">') + len('id="instance-key">')
    raw = html[start : html.index("<", start)]
    listing = client.get("/admin/accounts/instanceapikey/").content.decode()

    assert page.status_code == 200
    assert instance_key_get_usable(raw) == key
    assert raw not in listing


def test_the_admin_revoke_action_ends_the_selected_keys_only(
    instance: Instance, admin_user: Any
) -> None:
    chosen, chosen_raw = instance_key_create(instance=instance, name="leaked")
    again, again_raw = instance_key_create(instance=instance, name="leaked too")
    kept, kept_raw = instance_key_create(instance=instance, name="in use")
    client = Client()
    client.force_login(admin_user)

    response = client.post(
        "/admin/accounts/instanceapikey/",
        {"action": "revoke", "_selected_action": [chosen.pk, again.pk]},
        follow=True,
    )
    first_revocation = InstanceApiKey.objects.get(pk=chosen.pk).revoked_at
    client.post(
        "/admin/accounts/instanceapikey/",
        {"action": "revoke", "_selected_action": [chosen.pk]},
    )

    assert response.status_code == 200
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert shown == ["Revoked 2 key(s)."]
    assert instance_key_get_usable(chosen_raw) is None
    assert instance_key_get_usable(again_raw) is None
    assert instance_key_get_usable(kept_raw) == kept
    revoked = {k.name: k.revoked_at for k in InstanceApiKey.objects.filter(instance=instance)}
    assert revoked["in use"] is None
    assert first_revocation is not None
    # Revoking again keeps the first revocation time; the key and its user stay.
    assert revoked["leaked"] == first_revocation
    assert InstanceApiKey.objects.get(pk=chosen.pk).user_id == chosen.user_id


@pytest.mark.django_db(transaction=True)  # a new instance's vector index has its own transaction
def test_two_keys_of_one_instance_never_see_each_others_memories() -> None:
    local_instance = Instance.objects.create(slug="keys-memories", name="Keys")  # local embedder
    first, _ = instance_key_create(instance=local_instance, name="a")
    second, _ = instance_key_create(instance=local_instance, name="b")
    async_to_sync(services.amemory_create)(
        instance=local_instance, user_id=first.user_id, category="fact", content="Likes tea"
    )

    mine = selectors.memories_for_user(instance_id=local_instance.pk, user_id=first.user_id)
    theirs = selectors.memories_for_user(instance_id=local_instance.pk, user_id=second.user_id)
    found = async_to_sync(search.ahybrid_search)(
        instance=local_instance, user_id=second.user_id, query="tea", limit=5
    )

    assert mine.count() == 1
    assert theirs.count() == 0
    assert found == []
