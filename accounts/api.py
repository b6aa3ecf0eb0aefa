"""REST endpoint ``/api/account/``: deleting the signed-in account (thin: check, call, answer)."""

from __future__ import annotations

from typing import cast

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle

from accounts import services
from accounts.permissions import SessionOnly
from openmates.rest import JsonOnlyApi, NoUnknownFields, StrictCharField
from openmates.vault import VaultError


class AccountDeleteApi(JsonOnlyApi):
    """DELETE with ``{"password": ...}``: delete the account; nothing of it decrypts after.

    Browser sessions only: an API token answers 403 ``session_required``. The password
    check is throttled per user (``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["password"]``,
    5 a minute by default): past that, 429 ``{"code": "throttled", "retry_after": <s>}``.
    Vault unreachable: 503 ``vault_unavailable`` and nothing is deleted.
    """

    permission_classes = [IsAuthenticated, SessionOnly]
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "password"

    class AccountDeleteSerializer(NoUnknownFields):
        password = StrictCharField()

    @extend_schema(
        operation_id="account_destroy", request=AccountDeleteSerializer, responses={204: None}
    )
    def delete(self, request: Request) -> Response:
        body = self.AccountDeleteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        user = cast("User", request.user)  # IsAuthenticated let only a signed-in user in
        if not user.check_password(body.validated_data["password"]):
            return Response(
                {"code": "permission_denied", "message": "wrong password"},
                status=status.HTTP_403_FORBIDDEN,
            )
        try:
            services.account_delete(user=user)
        except VaultError:
            return Response(
                {"code": "vault_unavailable", "message": "the key service is unavailable"},
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
            )
        return Response(status=status.HTTP_204_NO_CONTENT)
