"""Template context of ``chats``: whether the signed-in user has set up browser encryption."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest

from chats import selectors


def user_keys(request: HttpRequest) -> dict[str, Callable[[], bool]]:
    """``{"user_keys_set_up": callable}``: True when the signed-in user has wrapped keys
    (docs/crypto.md §2). A callable, so only a page that shows it queries: the app page
    puts it in ``json_script`` and the browser then asks for the keys only when there are
    some (a first visit goes straight to set-up, without a 404 in the console)."""

    def set_up() -> bool:
        user: Any = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return False
        return selectors.user_keys_get(user=user) is not None

    return {"user_keys_set_up": set_up}
