"""The answer to a request refused by django-axes' sign-in lockout
(``settings.AXES_LOCKOUT_CALLABLE``): the lockout page, or for a script's request (one
that accepts JSON, as the encryption pages' password check does) a JSON error with a
stable code and the wait."""

from __future__ import annotations

from typing import Any

from axes.helpers import get_cool_off
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from accounts.templatetags.account_text import duration_words

LOCKOUT_STATUS = 429


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: Any = None
) -> HttpResponse:
    """429: ``accounts/locked_out.html``, or ``{"code": "locked_out", "message",
    "retry_after"}`` (seconds; absent without a cool-off) when the request accepts JSON."""
    cool_off = get_cool_off(request)
    if "application/json" in request.headers.get("Accept", ""):
        wait = f" Try again in {duration_words(cool_off)}." if cool_off else " Try again later."
        body: dict[str, Any] = {
            "code": "locked_out",
            "message": "Too many wrong passwords: sign-in is paused for this account from "
            "your address." + wait,
        }
        if cool_off:
            body["retry_after"] = int(cool_off.total_seconds())
        return JsonResponse(body, status=LOCKOUT_STATUS)
    return render(
        request, "accounts/locked_out.html", {"cooloff_timedelta": cool_off}, status=LOCKOUT_STATUS
    )
