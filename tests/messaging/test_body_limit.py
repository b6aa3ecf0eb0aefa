"""Webhook bodies under /channels/ are bounded at the ASGI layer (``openmates.body_limit``,
docs/channels.md §3): a chunked body is refused at the first chunk past
``DATA_UPLOAD_MAX_MEMORY_SIZE``, a declared length past it unread, with the
``{"code", "message"}`` body."""

from __future__ import annotations

from django.conf import settings

from openmates.asgi import application
from tests.openmates.test_request_limits import CHUNK, AsgiCall, _endless, _scope

JSON = (b"content-type", b"application/json")


async def test_a_chunked_webhook_body_over_the_limit_is_refused_at_the_first_chunk_past_it() -> (
    None
):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    for path in ("/channels/telegram/1/", "/channels/slack/1/"):
        call = AsgiCall(_endless())
        headers = [JSON, (b"transfer-encoding", b"chunked")]
        await application(_scope(path, headers), call.receive, call.send)
        assert call.status == 413, path
        assert call.json() == {
            "code": "request_too_large",
            "message": f"Request bodies are at most {limit} bytes.",
        }
        assert limit < call.received <= limit + CHUNK


async def test_a_declared_webhook_length_over_the_limit_is_refused_unread() -> None:
    declared = b"%d" % (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)
    call = AsgiCall(_endless())
    await application(
        _scope("/channels/slack/1/", [JSON, (b"content-length", declared)]),
        call.receive,
        call.send,
    )
    assert (call.status, call.json()["code"], call.body_messages) == (413, "request_too_large", 0)
