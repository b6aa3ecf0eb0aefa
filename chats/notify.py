"""The frames a change made outside a socket sends to all of the owner's sockets.

A change over REST (``chats.api``) or a chat the server creates for itself (a ``/v1`` or
channel conversation, ``pipeline.server_turn``) reaches every socket of the user as the
same frame a socket's own ``chat.create`` / ``chat.update`` / ``chat.delete`` /
``message.store`` sends them (docs/protocol.md §4, §5), without ``request_id``, once the
change commits (``openmates.sockets``).
"""

from __future__ import annotations

from typing import Literal

from openmates.sockets import user_sockets_send_on_commit

ChatFrame = Literal["chat.created", "chat.updated", "chat.deleted"]


def chat_changed(*, user_id: int | str, kind: ChatFrame, chat_id: str, version: int) -> None:
    """Send ``{"type": kind, "chat_id", "version"}`` to the user's sockets on commit
    (``version``: the chat's new version; for a deletion its last one plus 1)."""
    user_sockets_send_on_commit(user_id, {"type": kind, "chat_id": chat_id, "version": version})


def message_stored(*, user_id: int | str, chat_id: str, message_id: str, version: int) -> None:
    """Send ``message.stored`` (the message's new ``version``) to the user's sockets on
    commit."""
    user_sockets_send_on_commit(
        user_id,
        {
            "type": "message.stored",
            "chat_id": chat_id,
            "message_id": message_id,
            "version": version,
        },
    )
