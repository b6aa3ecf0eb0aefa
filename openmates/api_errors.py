"""REST error bodies with a stable code (docs/architecture.md §11): DRF's ``EXCEPTION_HANDLER``.

Every error DRF handles (its ``APIException`` family, Django's ``Http404`` and
``PermissionDenied``) answers::

    {"code": "<stable code>", "message": "<human text>", ...}

with DRF's own codes (``not_authenticated``, ``not_found``, ``permission_denied``,
``parse_error``, ``method_not_allowed``, ``unsupported_media_type``, ``throttled``,
``invalid``, ...). A validation error adds ``"fields"``: ``{"<field>": ["<message>", ...]}``
as DRF reports them; a throttled request adds ``"retry_after"`` (whole seconds, also in the
``Retry-After`` header). An exception whose detail already is such a body (for example
``invalid_token`` or ``too_deeply_nested``) is sent as it is. Status codes and headers
(``WWW-Authenticate``, ``Retry-After``) are DRF's.

Errors Django answers itself before or around DRF get the same shape under ``/api/``
(``handler400``, ``handler404``, ``handler500``): a body larger than
``DATA_UPLOAD_MAX_MEMORY_SIZE`` is 413 ``request_too_large``, too many form fields or
files 400 ``too_many_fields``, a ``Host`` header outside ``ALLOWED_HOSTS`` 400
``invalid_host``, any other suspicious request 400 ``bad_request``, an unknown route 404
``not_found`` and an unexpected error 500 ``internal``. Other pages keep Django's own.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.core.exceptions import (
    DisallowedHost,
    RequestDataTooBig,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler with the body replaced by :func:`error_body`; None for anything else."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(*exc.args)
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    response = drf_exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.APIException):
        response.data = error_body(exc)
    return response


def error_body(exc: exceptions.APIException) -> dict[str, Any]:
    """The JSON body for ``exc``: ``code`` and ``message``, plus ``fields``/``retry_after``."""
    detail = exc.detail
    if isinstance(detail, dict) and "code" in detail and "message" in detail:
        return {key: str(value) for key, value in detail.items()}
    if isinstance(exc, exceptions.ValidationError):
        return _validation_body(detail)
    codes = exc.get_codes()
    body: dict[str, Any] = {
        "code": codes if isinstance(codes, str) else exc.default_code,
        "message": _text(detail),
    }
    wait = getattr(exc, "wait", None)  # Throttled's (the DRF stubs do not declare it)
    if isinstance(exc, exceptions.Throttled) and wait is not None:
        body["retry_after"] = math.ceil(wait)
    return body


def _validation_body(detail: Any) -> dict[str, Any]:
    if not isinstance(detail, dict):
        return {"code": "invalid", "message": _text(detail)}
    fields = {name: _plain(errors) for name, errors in detail.items()}
    problems = [f"{name}: {_text(errors)}" for name, errors in fields.items()]
    return {"code": "invalid", "message": "; ".join(problems) or "Invalid input.", "fields": fields}


def _plain(value: Any) -> Any:
    """DRF's nested ``ErrorDetail`` lists/dicts as plain JSON values."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return str(value)


def _text(value: Any) -> str:
    """The first message in a (possibly nested) detail, for ``message``."""
    while isinstance(value, list | dict) and value:
        value = next(iter(value.values())) if isinstance(value, dict) else value[0]
    return str(value) if not isinstance(value, list | dict) else "Invalid input."


# Shared with openmates.body_limit, which refuses bodies before Django sees them.
BAD_REQUEST_BODY = {
    "code": "bad_request",
    "message": "The request was refused as malformed or suspicious.",
}


def request_too_large_body() -> dict[str, str]:
    """The 413 body for a request over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (read per call, so
    ``override_settings`` applies)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return {"code": "request_too_large", "message": f"Request bodies are at most {limit} bytes."}


def server_error(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """Django's ``handler500``: JSON ``{"code": "internal", ...}`` under ``/api/``, else
    Django's own error page. Django has logged the exception before calling this."""
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"code": "internal", "message": "Something went wrong on the server."}, status=500
        )
    return defaults.server_error(request)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's ``handler404``: JSON ``{"code": "not_found", ...}`` under ``/api/`` (an
    unknown route), else Django's own page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"code": "not_found", "message": "No such API route."}, status=404)
    return defaults.page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's ``handler400`` (a ``SuspiciousOperation`` Django caught): JSON under
    ``/api/`` (413 ``request_too_large``, 400 ``too_many_fields``, ``invalid_host`` or
    ``bad_request``), else Django's own page. Django has logged it to
    ``django.security`` before calling this."""
    if not request.path.startswith("/api/"):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        return JsonResponse(request_too_large_body(), status=413)
    if isinstance(exception, TooManyFieldsSent | TooManyFilesSent):
        code, message = "too_many_fields", "The request has too many fields or files."
    elif isinstance(exception, DisallowedHost):
        code, message = "invalid_host", "The Host header names no host this server serves."
    else:
        code, message = BAD_REQUEST_BODY["code"], BAD_REQUEST_BODY["message"]
    return JsonResponse({"code": code, "message": message}, status=400)
