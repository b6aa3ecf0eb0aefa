"""REST endpoints under ``/api/memories/<instance>/`` (thin: authorise, call, return).

Only the user themselves sees their memories of an instance they belong to: another
instance, another user's memory and a malformed id all answer 404 ``not_found``. Bodies
are JSON only (``openmates.rest.JsonOnlyApi``); errors are ``{"code", "message"}``
(``openmates.api_errors``): 400 ``invalid`` with ``fields`` for a bad body or query, 503
``vault_unavailable`` or ``embedding_unavailable`` when Vault or the embedding model
cannot be used, 502 ``embedding_invalid`` when the model's vector may not be stored
(wrong dimension, zeros, NaN). Memory texts travel in clear over TLS: the server keeps
them sealed (docs/crypto.md §4), unlike chats, which the browser encrypts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import async_to_sync
from django.http import Http404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from instances.models import Instance
from instances.selectors import instance_get_for_user
from memories import search, selectors, services, vectors
from memories.models import Memory
from openmates import llm, vault
from openmates.rest import (
    JsonOnlyApi,
    NoUnknownFields,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    TimestampCursorPagination,
)

T = TypeVar("T")
_CATEGORIES = Memory.Category.choices


class _Unavailable(APIException):
    """A service the request needs cannot be used (503, stable code)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE

    def __init__(self, code: str, message: str) -> None:
        super().__init__({"code": code, "message": message})


class _BadEmbedding(APIException):
    """The embedding model answered a vector that must not be stored (502)."""

    status_code = status.HTTP_502_BAD_GATEWAY

    def __init__(self, message: str) -> None:
        super().__init__({"code": "embedding_invalid", "message": message})


def _call(function: Callable[..., T], /, **kwargs: Any) -> T:
    """Run a service, turning its failures into the REST error contract."""
    try:
        return function(**kwargs)
    except services.MemoryInputError as exc:
        raise serializers.ValidationError({exc.field: [str(exc)]}) from exc
    except vectors.VectorError as exc:
        raise _BadEmbedding(str(exc)) from exc
    except llm.LLMError as exc:
        raise _Unavailable("embedding_unavailable", "the embedding model is unavailable") from exc
    except vault.VaultError as exc:
        raise _Unavailable("vault_unavailable", "the key service is unavailable") from exc


def _uid(request: Request) -> int:
    # The default permission (IsAuthenticated) ran: the user has a primary key.
    return int(request.user.pk or 0)


def _instance_or_404(request: Request, slug: str) -> Instance:
    instance = instance_get_for_user(slug=slug, user=request.user)
    if instance is None:
        raise Http404("instance not found")
    return instance


def _memory_or_404(request: Request, instance: Instance, memory_id: str) -> Memory:
    memory = selectors.memory_get_for_user(
        instance_id=instance.pk, user_id=_uid(request), memory_id=memory_id
    )
    if memory is None:
        raise NotFound("memory not found")
    return memory


def memory_json(memory: Memory, content: str) -> dict[str, Any]:
    """A memory as the API shows it to its owner."""
    return {
        "id": str(memory.pk),
        "category": memory.category,
        "content": content,
        "source_chat_id": memory.source_chat_id or None,
        "created_at": memory.created_at.isoformat(),
        "updated_at": memory.updated_at.isoformat(),
    }


def _opened(request: Request, instance: Instance, memories: list[Memory]) -> list[dict[str, Any]]:
    pairs = _call(
        selectors.memories_open, memories=memories, instance_id=instance.pk, user_id=_uid(request)
    )
    return [memory_json(memory, text) for memory, text in pairs]


class MemoryPagination(TimestampCursorPagination):
    ordering = ("-created_at", "-id")


class _CategoryQuery(serializers.Serializer):
    category = StrictChoiceField(choices=_CATEGORIES, required=False)


_CATEGORY_PARAM = OpenApiParameter(
    "category", str, enum=list(Memory.Category.values), description="only this category"
)


class MemoryListApi(JsonOnlyApi):
    """GET: the user's memories in the instance, newest first, paginated (``?category=``).
    POST: add one (``{"category"?, "content", "source_chat_id"?}``, ``category``
    ``general`` when absent, as the tool's and the memories page's; no dedup)."""

    class MemoryCreateSerializer(NoUnknownFields):
        category = StrictChoiceField(
            choices=_CATEGORIES, required=False, default=Memory.Category.GENERAL.value
        )
        content = StrictCharField(max_length=services.MAX_CONTENT_CHARS)
        source_chat_id = StrictCharField(
            max_length=36, required=False, allow_blank=True, allow_null=True
        )

    @extend_schema(
        operation_id="memories_list",
        parameters=[_CATEGORY_PARAM],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, instance: str) -> Response:
        found = _instance_or_404(request, instance)
        query = _CategoryQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        rows = selectors.memories_for_user(
            instance_id=found.pk,
            user_id=_uid(request),
            category=query.validated_data.get("category"),
        )
        paginator = MemoryPagination()
        page = paginator.paginate_queryset(rows, request, view=self) or []
        return paginator.get_paginated_response(_opened(request, found, list(page)))

    @extend_schema(
        operation_id="memories_create",
        request=MemoryCreateSerializer,
        responses={201: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request, instance: str) -> Response:
        found = _instance_or_404(request, instance)
        body = self.MemoryCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        memory = _call(
            async_to_sync(services.amemory_create),
            instance=found,
            user_id=_uid(request),
            category=body.validated_data["category"],
            content=body.validated_data["content"],
            source_chat_id=body.validated_data.get("source_chat_id") or "",
        )
        text = body.validated_data["content"].strip()
        return Response(memory_json(memory, text), status=status.HTTP_201_CREATED)


class MemorySearchApi(JsonOnlyApi):
    """GET ``?q=…&limit=…&category=…``: hybrid search over the user's memories."""

    class MemorySearchQuery(serializers.Serializer):
        q = StrictCharField(max_length=500, allow_blank=True, trim_whitespace=False)
        # A query string is text: the limit is parsed from it.
        limit = serializers.IntegerField(min_value=1, max_value=search.MAX_LIMIT, required=False)
        category = StrictChoiceField(choices=_CATEGORIES, required=False)

    @extend_schema(
        operation_id="memories_search",
        parameters=[
            OpenApiParameter("q", str, required=True, description="the search query"),
            OpenApiParameter("limit", int, description=f"1-{search.MAX_LIMIT}, default 10"),
            _CATEGORY_PARAM,
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    def get(self, request: Request, instance: str) -> Response:
        found = _instance_or_404(request, instance)
        query = self.MemorySearchQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        category = query.validated_data.get("category")
        hits = _call(
            async_to_sync(search.ahybrid_search),
            instance=found,
            user_id=_uid(request),
            query=query.validated_data["q"],
            limit=query.validated_data.get("limit", search.DEFAULT_LIMIT),
            categories=[category] if category else None,
        )
        return Response({"results": [hit.as_dict() for hit in hits]})


class MemoryDetailApi(JsonOnlyApi):
    """GET one memory. PATCH ``{"category"?, "content"?}``. DELETE it."""

    class MemoryUpdateSerializer(NoUnknownFields):
        category = StrictChoiceField(choices=_CATEGORIES, required=False)
        content = StrictCharField(max_length=services.MAX_CONTENT_CHARS, required=False)

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            if not attrs:
                raise serializers.ValidationError("give a category, a content or both")
            return attrs

    @extend_schema(operation_id="memories_retrieve", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, instance: str, memory_id: str) -> Response:
        found = _instance_or_404(request, instance)
        memory = _memory_or_404(request, found, memory_id)
        return Response(_opened(request, found, [memory])[0])

    @extend_schema(
        operation_id="memories_update",
        request=MemoryUpdateSerializer,
        responses={200: OpenApiTypes.OBJECT},
    )
    def patch(self, request: Request, instance: str, memory_id: str) -> Response:
        found = _instance_or_404(request, instance)
        body = self.MemoryUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        updated = _call(
            async_to_sync(services.amemory_update),
            instance=found,
            user_id=_uid(request),
            memory_id=memory_id,
            category=body.validated_data.get("category"),
            content=body.validated_data.get("content"),
        )
        if updated is None:
            raise NotFound("memory not found")
        memory = _memory_or_404(request, found, str(updated.pk))
        return Response(_opened(request, found, [memory])[0])

    @extend_schema(operation_id="memories_destroy", responses={204: None})
    def delete(self, request: Request, instance: str, memory_id: str) -> Response:
        found = _instance_or_404(request, instance)
        if not services.memory_delete(
            instance_id=found.pk, user_id=_uid(request), memory_id=memory_id
        ):
            raise NotFound("memory not found")
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemoryExportApi(JsonOnlyApi):
    """GET: every memory of the user in the instance as one JSON file."""

    @extend_schema(operation_id="memories_export", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, instance: str) -> Response:
        found = _instance_or_404(request, instance)
        rows = list(selectors.memories_for_user(instance_id=found.pk, user_id=_uid(request)))
        body = {
            "instance": found.slug,
            "exported_at": timezone.now().isoformat(),
            "memories": _opened(request, found, rows),
        }
        filename = f"memories-{found.slug}.json"
        return Response(body, headers={"Content-Disposition": f'attachment; filename="{filename}"'})


class MemorySettingsApi(JsonOnlyApi):
    """GET: the memory switch and counts per category. PUT ``{"enabled": bool}``."""

    class MemorySettingsSerializer(NoUnknownFields):
        enabled = StrictBooleanField()

    @extend_schema(operation_id="memories_settings_retrieve", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, instance: str) -> Response:
        found = _instance_or_404(request, instance)
        return Response(_settings_json(found, _uid(request)))

    @extend_schema(
        operation_id="memories_settings_update",
        request=MemorySettingsSerializer,
        responses={200: OpenApiTypes.OBJECT},
    )
    def put(self, request: Request, instance: str) -> Response:
        found = _instance_or_404(request, instance)
        body = self.MemorySettingsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.memory_settings_set(
            instance_id=found.pk, user_id=_uid(request), enabled=body.validated_data["enabled"]
        )
        return Response(_settings_json(found, _uid(request)))


def _settings_json(instance: Instance, user_id: int) -> dict[str, Any]:
    row = selectors.memory_settings_get(instance_id=instance.pk, user_id=user_id)
    return {
        "enabled": row is None or row.enabled,
        "instance_enabled": instance.memory_enabled,
        "categories": selectors.memory_categories_for_user(
            instance_id=instance.pk, user_id=user_id
        ),
    }


class MemoryForgetApi(JsonOnlyApi):
    """POST ``{"confirm": true}``: forget everything (crypto-shred, then the rows)."""

    class MemoryForgetSerializer(NoUnknownFields):
        confirm = StrictBooleanField(
            # DRF formats its messages: braces doubled.
            error_messages={"required": 'required: the JSON boolean true ({{"confirm": true}})'}
        )

        def validate_confirm(self, value: bool) -> bool:
            if value is not True:
                raise serializers.ValidationError("must be the JSON boolean true")
            return value

    @extend_schema(
        operation_id="memories_forget",
        request=MemoryForgetSerializer,
        responses={200: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request, instance: str) -> Response:
        found = _instance_or_404(request, instance)
        body = self.MemoryForgetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        deleted = _call(services.memories_forget, instance_id=found.pk, user_id=_uid(request))
        return Response({"deleted": deleted})
