"""Sending a frame to every chat socket of one user (docs/protocol.md §4, §5).

Every ``/ws/chat/`` socket joins the channel-layer group :func:`user_socket_group` of its
user, on every server process. A change to a user's chats, whichever way it was made (a
socket's frame, REST, a chat the server creates for a ``/v1`` or channel conversation),
reaches the user's sockets as a ``chat.event`` message of that group; the consumer
(``pipeline.consumers.ChatConsumer.chat_event``) sends its ``frame`` on, except to the
socket named ``origin`` (the one that asked, which got its own answer).

It lives here, below every app, so that ``chats`` (below ``pipeline``) can use it.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)


def user_socket_group(user_id: int | str) -> str:
    """The channel-layer group all of a user's chat sockets join."""
    return f"user.{user_id}.sockets"


async def auser_sockets_send(
    user_id: int | str, frame: dict[str, Any], *, origin: str | None = None
) -> None:
    """Send ``frame`` (a server frame of docs/protocol.md §4, without ``request_id``) to
    every socket of ``user_id`` except the one whose channel name is ``origin``.

    Raises whatever the channel layer raises (Redis away); without a channel layer it
    does nothing.
    """
    layer = get_channel_layer()
    if layer is None:
        return
    await layer.group_send(
        user_socket_group(user_id), {"type": "chat.event", "frame": frame, "origin": origin}
    )


def user_sockets_send_on_commit(user_id: int | str, frame: dict[str, Any]) -> None:
    """From synchronous code (a REST view, a service): send ``frame`` to every socket of
    ``user_id`` once the current transaction commits (at once outside one).

    A failed send is logged, not raised: the change is made, and a socket that missed it
    catches up at its next ``sync.request``.
    """

    def send() -> None:
        try:
            async_to_sync(auser_sockets_send)(user_id, frame)
        except Exception:
            logger.warning("%s of user %s reached no socket", frame.get("type"), user_id)

    transaction.on_commit(send)
