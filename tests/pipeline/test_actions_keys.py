"""The user's keys before a turn (pipeline.actions.user_key_warm / user_key_ensure): a
socket's connect warms the turn data key without ever creating the transit key, and a
warm-up that found the key spares the turn its Vault call (real OpenBao)."""

from __future__ import annotations

import secrets

import pytest
from asgiref.sync import sync_to_async

from chats import services as chat_services
from openmates import crypto, vault
from pipeline import actions, state

pytestmark = pytest.mark.timeout(60)


async def test_a_warm_up_of_an_existing_key_spares_the_turn_its_vault_call(
    cache_user_id: int,
) -> None:
    name = vault.user_key_name(cache_user_id)
    crypto.forget_key(name)
    actions._keyed_users.discard(cache_user_id)
    assert crypto._warm_data_key(name, chat_services.SERVER_MANAGED_PURPOSE) is None

    actions.user_key_warm(cache_user_id)
    actions.user_key_warm(cache_user_id)  # a second socket: the same warm-up
    assert len([u for u in actions._warmups if u == cache_user_id]) == 1
    await actions.user_key_ensure(cache_user_id)  # waits for it
    calls = vault.call_count()
    await actions.user_key_ensure(cache_user_id)

    assert vault.call_count() == calls
    assert cache_user_id in actions._keyed_users
    assert crypto._warm_data_key(name, state.SNAPSHOT_PURPOSE) is not None
    # The reply's server copy, sealed when the turn finishes, needs no Vault call either.
    assert crypto._warm_data_key(name, chat_services.SERVER_MANAGED_PURPOSE) is not None
    assert cache_user_id not in actions._warmups


async def test_a_warm_up_never_creates_a_missing_transit_key_but_the_turn_does() -> None:
    user_id = 10_000_000 + secrets.randbelow(80_000_000)
    name = vault.user_key_name(user_id)
    try:
        actions.user_key_warm(user_id)
        warming = actions._warmups[user_id]
        await warming
        with pytest.raises(vault.VaultError) as missing:
            await sync_to_async(vault.key_latest_version)(name)
        assert missing.value.reason == "not_found"
        assert user_id not in actions._keyed_users

        await actions.user_key_ensure(user_id)

        assert await sync_to_async(vault.key_latest_version)(name) == 1
        assert user_id in actions._keyed_users
    finally:
        actions._keyed_users.discard(user_id)
        await sync_to_async(vault.delete_key)(name)
