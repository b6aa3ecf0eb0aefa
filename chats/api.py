"""REST endpoints under ``/api/chats/`` (thin: authorise, call, return).

Only the owner sees a chat; for everyone else every chat URL answers 404. Bodies carry
client ciphertext (docs/crypto.md §3) as standard base64 text; a stale ``version`` answers 409
with ``{"code": "conflict", "version": <current>}``.

The same rules as the WebSocket protocol (``pipeline/protocol.py``, via
:mod:`openmates.ids`): ids are lowercase UUIDv7, ciphertext is a docs/crypto.md §3 envelope,
integers and booleans are JSON integers and booleans (no strings), bodies are JSON only
(anything else answers 415) and nested at most ``openmates.rest.MAX_JSON_DEPTH`` levels
(deeper answers 400 ``{"code": "too_deeply_nested"}``). An id in the path that is not a UUIDv7
answers 404 ``not_found`` like an unknown one. Error bodies are
``{"code": ..., "message": ...}`` (``openmates.api_errors``).
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.base_user import AbstractBaseUser
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle, ScopedRateThrottle

from accounts.permissions import SessionOnlyForWrites
from chats import notify, selectors, services
from chats.models import Chat, Embed
from chats.sync import chat_metadata, message_metadata, with_server_copies
from instances.selectors import instance_get_for_user
from openmates import ids, vault
from openmates.ids import FILE_EMBED_CIPHERTEXT_CHARS, MAX_MESSAGE_CIPHERTEXT_CHARS
from openmates.rest import (
    JsonOnlyApi,
    NoUnknownFields,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictRegexField,
    StrictSlugField,
    TimestampCursorPagination,
)

_B64 = r"^[A-Za-z0-9+/]*={0,2}$"
# Metadata fields and wrapped keys; message and embed content may be as long as the
# envelope of the longest reply (MAX_MESSAGE_CIPHERTEXT_CHARS, as over the WebSocket).
_MAX_CIPHERTEXT = 180_000
_MAX_VERSION = 2**63 - 1  # versions are PostgreSQL bigints


class Uuid7Field(StrictCharField):
    """A lowercase UUIDv7 string (docs/crypto.md §1), exactly as the WebSocket protocol takes it."""

    default_error_messages = {"uuid7": "must be a lowercase UUIDv7 string"}

    def to_internal_value(self, data: Any) -> str:
        if not ids.is_uuid7(data):
            self.fail("uuid7")
        return str(data)


class EnvelopeField(StrictCharField):
    """Standard base64 of a docs/crypto.md §3 envelope of at most ``max_length`` characters."""

    default_error_messages = {"ciphertext": "{problem}"}

    def __init__(self, *, max_length: int = _MAX_CIPHERTEXT, **kwargs: Any) -> None:
        super().__init__(max_length=max_length, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("ciphertext", problem="must be standard base64")
        value = super().to_internal_value(data)
        problem = ids.envelope_problem(value)
        if problem is not None:
            self.fail("ciphertext", problem=problem)
        return value


class KdfField(serializers.JSONField):
    """A JSON object of KDF parameters; no string in it may hold a NUL (PostgreSQL's jsonb
    refuses those). Whether the parameters are strong enough is ``services.kdf_check``'s."""

    default_error_messages = {"kdf": "must be a JSON object without NUL characters"}

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            self.fail("kdf")
        stack: list[Any] = [data]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)
            elif isinstance(item, str) and "\x00" in item:
                self.fail("kdf")
        return dict(data)


def _ciphertext(required: bool = True, max_length: int = _MAX_CIPHERTEXT) -> EnvelopeField:
    return EnvelopeField(required=required, allow_null=not required, max_length=max_length)


def _b64(required: bool = True) -> StrictRegexField:
    """Base64 text that is not an envelope of §3 (the wrapped master keys)."""
    return StrictRegexField(
        _B64, max_length=_MAX_CIPHERTEXT, required=required, allow_null=not required
    )


def _id_or_404(value: str, what: str) -> str:
    # A path id that cannot exist (NUL bytes would even fail in PostgreSQL) is unknown.
    if not ids.is_uuid7(value):
        raise NotFound(f"{what} not found")
    return value


def _chat_or_404(request: Request, chat_id: str) -> Chat:
    chat = selectors.chat_get_for_user(chat_id=_id_or_404(chat_id, "chat"), user=request.user)
    if chat is None:
        raise Http404("chat not found")
    return chat


def _read_only(exc: services.ReadOnlyChat) -> Response:
    """409 ``read_only``: a client write a server-managed chat does not take (docs/api.md §1)."""
    return Response({"code": "read_only", "message": str(exc)}, status=status.HTTP_409_CONFLICT)


def _conflict(exc: services.VersionConflict) -> Response:
    return Response(
        {"code": "conflict", "message": str(exc), "version": exc.current_version},
        status=status.HTTP_409_CONFLICT,
    )


class ChatPagination(TimestampCursorPagination):
    ordering = ("-updated_at", "-id")


class ChatListApi(JsonOnlyApi):
    """GET: the user's chats, newest first, paginated. POST: create a chat."""

    class ChatCreateSerializer(NoUnknownFields):
        chat_id = Uuid7Field()
        instance = StrictSlugField()
        encrypted_chat_key = _ciphertext()
        encrypted_title = _ciphertext(required=False)

    @extend_schema(operation_id="chats_list", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        paginator = ChatPagination()
        page = paginator.paginate_queryset(
            selectors.chat_list_for_user(user=request.user), request, view=self
        )
        return paginator.get_paginated_response([chat_metadata(c) for c in page or []])

    @extend_schema(
        operation_id="chats_create",
        request=ChatCreateSerializer,
        responses={201: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request) -> Response:
        body = self.ChatCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        instance = instance_get_for_user(slug=body.validated_data["instance"], user=request.user)
        if instance is None:
            raise Http404("instance not found")
        try:
            chat = services.chat_create(
                user=request.user,
                chat_id=body.validated_data["chat_id"],
                instance=instance,
                encrypted_chat_key=body.validated_data["encrypted_chat_key"],
                encrypted_title=body.validated_data.get("encrypted_title"),
            )
        except services.IdInUse:
            # Another user's chat (a repeat of one's own create answers it again); the
            # message names no id.
            message = "This chat id is already in use: create the chat under a fresh id."
            return Response({"code": "id_in_use", "message": message}, status=409)
        notify.chat_changed(
            user_id=chat.owner_id, kind="chat.created", chat_id=chat.pk, version=chat.version
        )
        return Response(chat_metadata(chat), status=status.HTTP_201_CREATED)


class ChatDetailApi(JsonOnlyApi):
    """GET: one chat's metadata. PATCH: change metadata (409 ``conflict`` on a stale version;
    409 ``read_only`` for an encrypted field of a server-managed chat, whose ``pinned``
    still changes). DELETE."""

    class UpdateSerializer(NoUnknownFields):
        version = StrictIntegerField(min_value=0, max_value=_MAX_VERSION)
        encrypted_title = _ciphertext(required=False)
        encrypted_summary = _ciphertext(required=False)
        encrypted_tags = _ciphertext(required=False)
        encrypted_category = _ciphertext(required=False)
        encrypted_icon = _ciphertext(required=False)
        pinned = StrictBooleanField(required=False)

    @extend_schema(operation_id="chats_retrieve", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, chat_id: str) -> Response:
        return Response(chat_metadata(_chat_or_404(request, chat_id)))

    @extend_schema(
        operation_id="chats_update", request=UpdateSerializer, responses={200: OpenApiTypes.OBJECT}
    )
    def patch(self, request: Request, chat_id: str) -> Response:
        chat = _chat_or_404(request, chat_id)
        body = self.UpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        fields: dict[str, Any] = dict(body.validated_data)
        try:
            chat = services.chat_update(chat=chat, **fields)
        except services.VersionConflict as exc:
            return _conflict(exc)
        except services.ReadOnlyChat as exc:
            return _read_only(exc)
        notify.chat_changed(
            user_id=chat.owner_id, kind="chat.updated", chat_id=chat.pk, version=chat.version
        )
        return Response(chat_metadata(chat))

    @extend_schema(operation_id="chats_destroy", responses={204: None})
    def delete(self, request: Request, chat_id: str) -> Response:
        chat = _chat_or_404(request, chat_id)
        services.chat_delete(chat=chat)
        notify.chat_changed(
            user_id=chat.owner_id, kind="chat.deleted", chat_id=chat.pk, version=chat.version + 1
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class ChatMessagesApi(JsonOnlyApi):
    """GET ``?since=<chat version>``: the chat's messages changed after that version."""

    @extend_schema(
        operation_id="chats_messages_list",
        parameters=[OpenApiParameter("since", int, description="chat version already held")],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, chat_id: str) -> Response:
        chat = _chat_or_404(request, chat_id)
        try:
            since = max(0, int(request.query_params.get("since", "0")))
        except ValueError:
            since = -1
        if not 0 <= since <= _MAX_VERSION:
            raise serializers.ValidationError({"since": ["must be an integer chat version"]})
        messages = with_server_copies(
            chat, [message_metadata(m) for m in selectors.messages_since(chat=chat, version=since)]
        )
        return Response({"chat_id": chat.pk, "version": chat.version, "messages": messages})


class MessageStoreApi(JsonOnlyApi):
    """PUT: store the client's ciphertext of a message (409 ``conflict`` on a stale
    version, 409 ``read_only`` in a server-managed chat)."""

    class MessageStoreSerializer(NoUnknownFields):
        encrypted_content = _ciphertext(max_length=MAX_MESSAGE_CIPHERTEXT_CHARS)
        version = StrictIntegerField(min_value=0, max_value=_MAX_VERSION)

    @extend_schema(
        operation_id="messages_store",
        request=MessageStoreSerializer,
        responses={200: OpenApiTypes.OBJECT},
    )
    def put(self, request: Request, chat_id: str, message_id: str) -> Response:
        chat = _chat_or_404(request, chat_id)
        message_id = _id_or_404(message_id, "message")
        body = self.MessageStoreSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            message = services.message_store(
                chat=chat, message_id=message_id, **body.validated_data
            )
        except services.NotFound as exc:
            raise Http404("message not found") from exc
        except services.VersionConflict as exc:
            return _conflict(exc)
        except services.ReadOnlyChat as exc:
            return _read_only(exc)
        notify.message_stored(
            user_id=chat.owner_id, chat_id=chat.pk, message_id=message.pk, version=message.version
        )
        return Response({"chat_id": chat.pk, "message_id": message.pk, "version": message.version})


def _embed_out(embed: Embed, *, content: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "embed_id": embed.pk,
        "message_id": embed.message_id,
        "tool": embed.tool,
        "status": embed.status,
        "version": embed.version,
    }
    if content:
        out["encrypted_content"] = embed.encrypted_content
    return out


class EmbedListApi(JsonOnlyApi):
    """GET: the chat's embeds without their ciphertext, oldest first (docs/protocol.md
    §13: a client lists the file embeds of the messages it shows)."""

    @extend_schema(operation_id="embeds_list", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, chat_id: str) -> Response:
        chat = _chat_or_404(request, chat_id)
        embeds = selectors.chat_embeds(chat_id=chat.pk)
        return Response({"embeds": [_embed_out(e, content=False) for e in embeds]})


class EmbedStoreApi(JsonOnlyApi):
    """GET: an embed with its ciphertext (null before a client stored it). PUT: store
    the client's ciphertext of an embed (409 ``conflict`` on a stale version, ``read_only``
    in a server-managed chat; a file's embed may be
    as long as ``FILE_EMBED_CIPHERTEXT_CHARS``, a tool's as a reply's envelope)."""

    class EmbedStoreSerializer(NoUnknownFields):
        encrypted_content = _ciphertext(max_length=FILE_EMBED_CIPHERTEXT_CHARS)
        version = StrictIntegerField(min_value=0, max_value=_MAX_VERSION)

    @extend_schema(operation_id="embeds_read", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, chat_id: str, embed_id: str) -> Response:
        chat = _chat_or_404(request, chat_id)
        embed = selectors.chat_embed(chat_id=chat.pk, embed_id=_id_or_404(embed_id, "embed"))
        if embed is None:
            raise Http404("embed not found")
        return Response(_embed_out(embed, content=True))

    @extend_schema(
        operation_id="embeds_store",
        request=EmbedStoreSerializer,
        responses={200: OpenApiTypes.OBJECT},
    )
    def put(self, request: Request, chat_id: str, embed_id: str) -> Response:
        chat = _chat_or_404(request, chat_id)
        embed_id = _id_or_404(embed_id, "embed")
        body = self.EmbedStoreSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            embed = services.embed_store(chat=chat, embed_id=embed_id, **body.validated_data)
        except services.NotFound as exc:
            raise Http404("embed not found") from exc
        except services.VersionConflict as exc:
            return _conflict(exc)
        except services.ReadOnlyChat as exc:
            return _read_only(exc)
        except ValueError as exc:
            raise serializers.ValidationError({"encrypted_content": [str(exc)]}) from None
        return Response({"chat_id": chat.pk, "embed_id": embed.pk, "version": embed.version})


class UserKeysApi(JsonOnlyApi):
    """GET: the user's wrapped keys (404 before set-up). PUT: create or replace them.

    GET is open to API tokens: a client without a browser needs its wrapped master key to
    unwrap it with the user's passphrase and decrypt chats. PUT needs a browser session
    (403 ``session_required`` for a token) and the user's login password (``password``;
    a wrong one is 403 ``permission_denied``): replacing the wrapped keys with material the
    user cannot unwrap makes every encrypted chat unreadable, too much for a leaked token,
    a stolen cookie or a script injected into the page. PUT's password check is throttled
    per user like account deletion's (scope ``password``: 429 ``throttled`` with
    ``retry_after``); GET is not throttled.
    """

    permission_classes = [IsAuthenticated, SessionOnlyForWrites]
    throttle_scope = "password"

    class KeysSerializer(NoUnknownFields):
        wrapped_master_key = _b64()
        recovery_wrapped_master_key = _b64()
        master_key_id = StrictCharField(max_length=24)
        recovery_key_id = StrictCharField(max_length=24)
        kdf = KdfField()
        version = StrictIntegerField(
            min_value=1, max_value=_MAX_VERSION, required=False, allow_null=True
        )

    class KeysPutSerializer(KeysSerializer):
        # Exactly as typed: a password may begin or end with spaces.
        password = StrictCharField(write_only=True, trim_whitespace=False, max_length=4096)

    def get_throttles(self) -> list[BaseThrottle]:
        """The password throttle for PUT only: reading the keys checks no password."""
        return [ScopedRateThrottle()] if self.request.method == "PUT" else []

    @extend_schema(operation_id="keys_retrieve", responses={200: KeysSerializer})
    def get(self, request: Request) -> Response:
        keys = selectors.user_keys_get(user=request.user)
        if keys is None:
            raise Http404("no keys yet")
        return Response(
            {
                "wrapped_master_key": keys.wrapped_master_key,
                "recovery_wrapped_master_key": keys.recovery_wrapped_master_key,
                "master_key_id": keys.master_key_id,
                "recovery_key_id": keys.recovery_key_id,
                "kdf": keys.kdf,
                "version": keys.version,
            }
        )

    @extend_schema(
        operation_id="keys_update",
        request=KeysPutSerializer,
        responses={200: OpenApiTypes.OBJECT},
    )
    def put(self, request: Request) -> Response:
        body = self.KeysPutSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        fields = dict(body.validated_data)
        user = cast("AbstractBaseUser", request.user)  # IsAuthenticated let only a user in
        if not user.check_password(fields.pop("password")):
            return Response(
                {"code": "permission_denied", "message": "wrong password"},
                status=status.HTTP_403_FORBIDDEN,
            )
        try:
            keys = services.user_keys_set(user=request.user, **fields)
        except services.VersionConflict as exc:
            return _conflict(exc)
        except ValueError as exc:
            raise serializers.ValidationError({"kdf": [str(exc)]}) from None
        except vault.VaultError:
            return Response(
                {"code": "vault_unavailable", "message": "the key service is unavailable"},
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
            )
        return Response({"version": keys.version})
