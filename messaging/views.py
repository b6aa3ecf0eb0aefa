"""Webhook endpoints of the chat channels (docs/channels.md §3).

``POST /channels/telegram/<config id>/`` and ``POST /channels/slack/<config id>/``. A
channel this process does not run answers 404, a request that fails the channel's check
(Telegram's secret token, Slack's signature and timestamp window) 403, a body that is not
a JSON object 400, else 200 at once: the update is deduplicated and queued, and the turn
runs in the background. Slack's ``url_verification`` gets its ``challenge`` back.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from messaging import runtime


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"code": code, "message": message}, status=status)


async def _webhook(request: HttpRequest, kind: str, config_id: int) -> HttpResponse:
    manager = runtime.current()
    adapter = manager.adapter(config_id) if manager is not None else None
    if adapter is None or adapter.kind != kind:
        return _error(404, "not_found", "No such channel runs here.")
    body = request.body
    if not adapter.verify(request.headers, body):
        return _error(403, "permission_denied", "The request's secret or signature is wrong.")
    try:
        payload: Any = json.loads(body)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        return _error(400, "parse_error", "The body must be a JSON object.")
    if kind == "slack" and payload.get("type") == "url_verification":
        return JsonResponse({"challenge": str(payload.get("challenge", ""))})
    await runtime.call(adapter.handle(payload))
    return HttpResponse(status=200)


@csrf_exempt
@require_POST
async def telegram_webhook(request: HttpRequest, config_id: int) -> HttpResponse:
    """Telegram's webhook (``X-Telegram-Bot-Api-Secret-Token`` checked)."""
    return await _webhook(request, "telegram", config_id)


@csrf_exempt
@require_POST
async def slack_events(request: HttpRequest, config_id: int) -> HttpResponse:
    """Slack's Events API request URL (signature and ±5-minute window checked)."""
    return await _webhook(request, "slack", config_id)
