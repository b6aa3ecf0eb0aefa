"""REST endpoints under ``/api/instances/`` (thin: authorise, call a service, render).

A caller sees only the instances they are a member of; any other slug answers 404
``not_found``, as an unknown one does. Members read the instance and its mates; owners
and admins (and superusers) also read its configuration (tier map, prompt sections,
secret names, limits) and change it; a member trying a write gets 403
``permission_denied``. Secrets are write-only: their names are listed, values are set
(``PUT``) or deleted, never read. Errors are ``{"code", "message"}``
(docs/architecture.md §11); endpoints are listed in docs/api.md §1.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from instances import selectors, services
from instances import serializers as io
from instances.models import Instance, InstanceMember, InstanceSecret, Mate
from openmates import vault
from openmates.rest import IdCursorPagination, JsonOnlyApi, TimestampCursorPagination


class InstancePagination(TimestampCursorPagination):
    ordering = ("-created_at", "-id")


class MemberPagination(TimestampCursorPagination):
    ordering = ("created_at", "id")


def instance_or_404(request: Request, slug: str) -> Instance:
    """The instance ``slug`` when the caller is a member of it.

    Raises:
        Http404: not a member, or no such instance (the same answer for both).
    """
    instance = selectors.instance_get_for_user(slug=slug, user=request.user)
    if instance is None:
        raise Http404("instance not found")
    return instance


def admin_instance_or_error(request: Request, slug: str) -> Instance:
    """The instance ``slug`` when the caller may administer it.

    Raises:
        Http404: not a member (existence stays private).
        PermissionDenied: a member without the owner or admin role (403).
    """
    instance = instance_or_404(request, slug)
    if not selectors.user_can_administer(instance=instance, user=request.user):
        raise PermissionDenied("only the instance's owners and admins may do this")
    return instance


def _invalid(exc: DjangoValidationError) -> serializers.ValidationError:
    if hasattr(exc, "error_dict"):
        return serializers.ValidationError({k: list(v) for k, v in exc.message_dict.items()})
    return serializers.ValidationError({"non_field_errors": exc.messages})


def _configuration(instance: Instance) -> dict[str, Any]:
    """What owners and admins see besides the member view (never a secret's value)."""
    secrets = InstanceSecret.objects.filter(instance=instance).order_by("name")
    return {
        "tier_map": instance.tier_map,
        "embedding_model": instance.embedding_model,
        "embedding_dimensions": instance.embedding_dimensions,
        "api_requests_per_minute": instance.api_requests_per_minute,
        "api_tokens_per_day": instance.api_tokens_per_day,
        "tools_offer_all_up_to": instance.tools_offer_all_up_to,
        "model_tool_preselection": instance.model_tool_preselection,
        "prompt_sections": selectors.prompt_sections_get(instance),
        "secrets": [{"name": s.name, "updated_at": s.updated_at.isoformat()} for s in secrets],
        "tier_secrets_missing": selectors.tier_secrets_missing(instance),
    }


def instance_json(request: Request, instance: Instance) -> dict[str, Any]:
    """The detail body: the member view, the mates and, for admins, the configuration."""
    role = selectors.instance_role_for_user(instance=instance, user=request.user)
    body: dict[str, Any] = dict(
        io.InstanceOut(instance, context={"roles": {instance.pk: role}}).data
    )
    administers = selectors.user_can_administer(instance=instance, user=request.user)
    mates = io.mate_serializer(administers)
    body["mates"] = mates(selectors.mates_for_instance(instance), many=True).data
    if administers:
        body["configuration"] = _configuration(instance)
    return body


class InstanceListApi(JsonOnlyApi):
    """GET: the caller's instances, newest first (cursor pagination, ``page_size`` ≤ 200),
    each with the caller's ``role``."""

    pagination_class = InstancePagination

    @extend_schema(operation_id="instances_list", responses={200: io.InstanceOut(many=True)})
    def get(self, request: Request) -> Response:
        rows = selectors.instances_for_user(user=request.user)
        paginator = InstancePagination()
        page = list(paginator.paginate_queryset(rows, request, view=self) or [])
        roles = dict(
            InstanceMember.objects.filter(
                user_id=int(request.user.pk or 0), instance_id__in=[i.pk for i in page]
            ).values_list("instance_id", "role")
        )
        data = io.InstanceOut(page, many=True, context={"roles": roles}).data
        return paginator.get_paginated_response(data)


class InstanceDetailApi(JsonOnlyApi):
    """GET one instance. PATCH its settings (owners/admins; body ``InstanceUpdateIn``)."""

    @extend_schema(operation_id="instances_retrieve", responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request, slug: str) -> Response:
        return Response(instance_json(request, instance_or_404(request, slug)))

    @extend_schema(
        operation_id="instances_update",
        request=io.InstanceUpdateIn,
        responses={200: OpenApiTypes.OBJECT},
    )
    def patch(self, request: Request, slug: str) -> Response:
        instance = admin_instance_or_error(request, slug)
        body = io.InstanceUpdateIn(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            services.instance_settings_update(instance=instance, **body.validated_data)
        except DjangoValidationError as exc:
            raise _invalid(exc) from exc
        return Response(instance_json(request, instance))


class InstanceMembersApi(JsonOnlyApi):
    """GET: the instance's members with their roles, oldest first (owners/admins; cursor
    pagination, ``page_size`` ≤ 200)."""

    pagination_class = MemberPagination

    @extend_schema(operation_id="instances_members", responses={200: io.MemberOut(many=True)})
    def get(self, request: Request, slug: str) -> Response:
        instance = admin_instance_or_error(request, slug)
        members = InstanceMember.objects.filter(instance=instance).select_related("user")
        paginator = MemberPagination()
        page = list(paginator.paginate_queryset(members, request, view=self) or [])
        return paginator.get_paginated_response(io.MemberOut(page, many=True).data)


class PromptSectionApi(JsonOnlyApi):
    """PUT ``{"content"}``: replace one of the eight prompt sections (owners/admins)."""

    @extend_schema(
        operation_id="instances_prompt_section_update",
        request=io.PromptSectionIn,
        responses={200: OpenApiTypes.OBJECT},
    )
    def put(self, request: Request, slug: str, key: str) -> Response:
        instance = admin_instance_or_error(request, slug)
        if not io.section_key_valid(key):
            raise Http404("no such prompt section")
        body = io.PromptSectionIn(data=request.data)
        body.is_valid(raise_exception=True)
        section = services.prompt_section_update(
            instance=instance, key=key, content=body.validated_data["content"]
        )
        return Response({"key": section.key, "content": section.content})


class MateListApi(JsonOnlyApi):
    """GET the mates in the order they were made (members, who do not see their system
    prompts; cursor pagination, ``page_size`` ≤ 200; ``is_default`` marks the default
    one). POST a new one (owners/admins; body ``MateIn``)."""

    pagination_class = IdCursorPagination

    @extend_schema(operation_id="instances_mates_list", responses={200: io.MateOut(many=True)})
    def get(self, request: Request, slug: str) -> Response:
        instance = instance_or_404(request, slug)
        paginator = IdCursorPagination()
        mates = Mate.objects.filter(instance=instance)
        page = list(paginator.paginate_queryset(mates, request, view=self) or [])
        out = io.mate_serializer(
            selectors.user_can_administer(instance=instance, user=request.user)
        )
        return paginator.get_paginated_response(out(page, many=True).data)

    @extend_schema(
        operation_id="instances_mates_create", request=io.MateIn, responses={201: io.MateOut}
    )
    def post(self, request: Request, slug: str) -> Response:
        instance = admin_instance_or_error(request, slug)
        body = io.MateIn(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            mate = services.mate_save(mate=Mate(instance=instance), **body.validated_data)
        except DjangoValidationError as exc:
            raise _invalid(exc) from exc
        return Response(io.MateOut(mate).data, status=status.HTTP_201_CREATED)


class MateDetailApi(JsonOnlyApi):
    """PATCH a mate (any ``MateIn`` fields) or DELETE it (owners/admins)."""

    def _mate(self, request: Request, slug: str, mate_id: int) -> Mate:
        instance = admin_instance_or_error(request, slug)
        mate = Mate.objects.filter(instance=instance, pk=mate_id).first()
        if mate is None:
            raise Http404("mate not found")
        return mate

    @extend_schema(
        operation_id="instances_mates_update", request=io.MateIn, responses={200: io.MateOut}
    )
    def patch(self, request: Request, slug: str, mate_id: int) -> Response:
        mate = self._mate(request, slug, mate_id)
        body = io.MateIn(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        try:
            services.mate_save(mate=mate, **body.validated_data)
        except DjangoValidationError as exc:
            raise _invalid(exc) from exc
        return Response(io.MateOut(mate).data)

    @extend_schema(operation_id="instances_mates_destroy", responses={204: None})
    def delete(self, request: Request, slug: str, mate_id: int) -> Response:
        services.mate_delete(mate=self._mate(request, slug, mate_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class SecretApi(JsonOnlyApi):
    """PUT ``{"value"}``: set secret ``name`` (sealed; 204). DELETE it (204; 404 when not
    set). Owners/admins only; no method reads a value back."""

    def _instance(self, request: Request, slug: str, name: str) -> Instance:
        instance = admin_instance_or_error(request, slug)
        if not io.secret_name_valid(name):
            raise Http404("no such secret")
        return instance

    @extend_schema(operation_id="instances_secrets_set", request=io.SecretIn, responses={204: None})
    def put(self, request: Request, slug: str, name: str) -> Response:
        instance = self._instance(request, slug, name)
        body = io.SecretIn(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            services.instance_secret_set(
                instance=instance, name=name, value=body.validated_data["value"]
            )
        except vault.VaultError as exc:
            raise _VaultUnavailable() from exc
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(operation_id="instances_secrets_destroy", responses={204: None})
    def delete(self, request: Request, slug: str, name: str) -> Response:
        instance = self._instance(request, slug, name)
        if not services.instance_secret_delete(instance=instance, name=name):
            raise Http404("secret not set")
        return Response(status=status.HTTP_204_NO_CONTENT)


class _VaultUnavailable(APIException):
    """503 ``vault_unavailable``: the secret could not be sealed (nothing stored)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE

    def __init__(self) -> None:
        super().__init__({"code": "vault_unavailable", "message": "the key service is unavailable"})
