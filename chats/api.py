"""REST endpoints under ``/api/chats/`` and ``/api/account/`` (thin: authorise, call, return).

Only the owner sees a chat; for everyone else every chat URL answers 404. Bodies carry
client ciphertext (CRYPTO.md §3) as standard base64 text; a stale ``version`` answers 409
with ``{"code": "conflict", "version": <current>}``.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework import serializers, status
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from chats import selectors, services
from chats.models import Chat
from chats.sync import chat_metadata, message_metadata, with_server_copies
from instances.selectors import instance_get_for_user

_B64 = r"^[A-Za-z0-9+/]*={0,2}$"
_MAX_CIPHERTEXT = 180_000  # 64 KiB of UTF-8 plus envelope and base64 overhead


def _ciphertext(required: bool = True) -> serializers.RegexField:
    return serializers.RegexField(
        _B64, max_length=_MAX_CIPHERTEXT, required=required, allow_null=not required
    )


def _chat_or_404(request: Request, chat_id: str) -> Chat:
    chat = selectors.chat_get_for_user(chat_id=chat_id, user=request.user)
    if chat is None:
        raise Http404("chat not found")
    return chat


def _conflict(exc: services.VersionConflict) -> Response:
    return Response(
        {"code": "conflict", "message": str(exc), "version": exc.current_version},
        status=status.HTTP_409_CONFLICT,
    )


class ChatPagination(CursorPagination):
    ordering = ("-updated_at", "-id")
    page_size = 50
    max_page_size = 200
    page_size_query_param = "page_size"


class ChatListApi(APIView):
    """GET: the user's chats, newest first, paginated. POST: create a chat."""

    class InputSerializer(serializers.Serializer):
        chat_id = serializers.UUIDField(format="hex_verbose")
        instance = serializers.SlugField()
        encrypted_chat_key = _ciphertext()
        encrypted_title = _ciphertext(required=False)

    def get(self, request: Request) -> Response:
        paginator = ChatPagination()
        page = paginator.paginate_queryset(
            selectors.chat_list_for_user(user=request.user), request, view=self
        )
        return paginator.get_paginated_response([chat_metadata(c) for c in page or []])

    def post(self, request: Request) -> Response:
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        instance = instance_get_for_user(slug=body.validated_data["instance"], user=request.user)
        if instance is None:
            raise Http404("instance not found")
        try:
            chat = services.chat_create(
                user=request.user,
                chat_id=str(body.validated_data["chat_id"]),
                instance=instance,
                encrypted_chat_key=body.validated_data["encrypted_chat_key"],
                encrypted_title=body.validated_data.get("encrypted_title"),
            )
        except services.IdInUse as exc:
            return Response({"code": "invalid_frame", "message": str(exc)}, status=400)
        return Response(chat_metadata(chat), status=status.HTTP_201_CREATED)


class ChatDetailApi(APIView):
    """GET: one chat's metadata. PATCH: change metadata (409 on a stale version). DELETE."""

    class UpdateSerializer(serializers.Serializer):
        version = serializers.IntegerField(min_value=0)
        encrypted_title = _ciphertext(required=False)
        encrypted_summary = _ciphertext(required=False)
        encrypted_tags = _ciphertext(required=False)
        encrypted_category = _ciphertext(required=False)
        encrypted_icon = _ciphertext(required=False)
        pinned = serializers.BooleanField(required=False)

    def get(self, request: Request, chat_id: str) -> Response:
        return Response(chat_metadata(_chat_or_404(request, chat_id)))

    def patch(self, request: Request, chat_id: str) -> Response:
        chat = _chat_or_404(request, chat_id)
        body = self.UpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        fields: dict[str, Any] = dict(body.validated_data)
        try:
            chat = services.chat_update(chat=chat, **fields)
        except services.VersionConflict as exc:
            return _conflict(exc)
        return Response(chat_metadata(chat))

    def delete(self, request: Request, chat_id: str) -> Response:
        services.chat_delete(chat=_chat_or_404(request, chat_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class ChatMessagesApi(APIView):
    """GET ``?since=<chat version>``: the chat's messages changed after that version."""

    def get(self, request: Request, chat_id: str) -> Response:
        chat = _chat_or_404(request, chat_id)
        try:
            since = max(0, int(request.query_params.get("since", "0")))
        except ValueError:
            return Response({"code": "invalid_request", "message": "since is an integer"}, 400)
        messages = with_server_copies(
            chat, [message_metadata(m) for m in selectors.messages_since(chat=chat, version=since)]
        )
        return Response({"chat_id": chat.pk, "version": chat.version, "messages": messages})


class MessageStoreApi(APIView):
    """PUT: store the client's ciphertext of a message (409 on a stale version)."""

    class InputSerializer(serializers.Serializer):
        encrypted_content = _ciphertext()
        version = serializers.IntegerField(min_value=0)

    def put(self, request: Request, chat_id: str, message_id: str) -> Response:
        chat = _chat_or_404(request, chat_id)
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            message = services.message_store(
                chat=chat, message_id=message_id, **body.validated_data
            )
        except services.NotFound as exc:
            raise Http404("message not found") from exc
        except services.VersionConflict as exc:
            return _conflict(exc)
        except ValueError as exc:
            return Response({"code": "invalid_request", "message": str(exc)}, status=400)
        return Response({"chat_id": chat.pk, "message_id": message.pk, "version": message.version})


class EmbedStoreApi(APIView):
    """PUT: store the client's ciphertext of an embed (409 on a stale version)."""

    class InputSerializer(serializers.Serializer):
        encrypted_content = _ciphertext()
        version = serializers.IntegerField(min_value=0)

    def put(self, request: Request, chat_id: str, embed_id: str) -> Response:
        chat = _chat_or_404(request, chat_id)
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            embed = services.embed_store(chat=chat, embed_id=embed_id, **body.validated_data)
        except services.NotFound as exc:
            raise Http404("embed not found") from exc
        except services.VersionConflict as exc:
            return _conflict(exc)
        return Response({"chat_id": chat.pk, "embed_id": embed.pk, "version": embed.version})


class UserKeysApi(APIView):
    """GET: the user's wrapped keys (404 before set-up). PUT: create or replace them."""

    class KeysSerializer(serializers.Serializer):
        wrapped_master_key = _ciphertext()
        recovery_wrapped_master_key = _ciphertext()
        master_key_id = serializers.CharField(max_length=24)
        recovery_key_id = serializers.CharField(max_length=24)
        kdf = serializers.JSONField()
        version = serializers.IntegerField(min_value=1, required=False, allow_null=True)

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

    def put(self, request: Request) -> Response:
        body = self.KeysSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            keys = services.user_keys_set(user=request.user, **body.validated_data)
        except services.VersionConflict as exc:
            return _conflict(exc)
        except ValueError as exc:
            return Response({"code": "invalid_request", "message": str(exc)}, status=400)
        return Response({"version": keys.version})


class AccountDeleteApi(APIView):
    """DELETE with ``{"password": ...}``: delete the account; nothing of it decrypts after."""

    class InputSerializer(serializers.Serializer):
        password = serializers.CharField()

    def delete(self, request: Request) -> Response:
        body = self.InputSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if not request.user.check_password(body.validated_data["password"]):
            return Response(
                {"code": "permission_denied", "message": "wrong password"},
                status=status.HTTP_403_FORBIDDEN,
            )
        services.account_delete(user=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
