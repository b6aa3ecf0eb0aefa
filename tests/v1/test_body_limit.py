"""/v1 bodies are bounded at the ASGI layer (``openmates.body_limit``, docs/api.md §3): a
chunked body is refused at the first chunk past ``DATA_UPLOAD_MAX_MEMORY_SIZE`` and a
declared length past it unread, both with OpenAI's error shape; a malformed
``Content-Length`` is 400 in that shape too."""

from __future__ import annotations

from django.conf import settings

from openmates.asgi import application
from tests.openmates.test_request_limits import CHUNK, AsgiCall, _chunked, _endless, _scope

JSON = (b"content-type", b"application/json")


def _too_large() -> dict[str, object]:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return {
        "error": {
            "message": f"Request bodies are at most {limit} bytes.",
            "type": "invalid_request_error",
            "param": None,
            "code": "request_too_large",
        }
    }


async def test_a_chunked_v1_body_over_the_limit_is_refused_at_the_first_chunk_past_it() -> None:
    call = AsgiCall(_endless())
    headers = [JSON, (b"transfer-encoding", b"chunked"), (b"authorization", b"Bearer omk_x_y")]
    await application(_scope("/v1/chat/completions", headers), call.receive, call.send)
    assert call.status == 413
    assert (b"content-type", b"application/json") in call.sent[0]["headers"]
    assert call.json() == _too_large()
    assert call.received > settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert call.received <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE + CHUNK


async def test_a_declared_v1_length_over_the_limit_is_refused_unread() -> None:
    declared = b"%d" % (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)
    call = AsgiCall(_endless())
    await application(
        _scope("/v1/chat/completions", [JSON, (b"content-length", declared)]),
        call.receive,
        call.send,
    )
    assert (call.status, call.json(), call.body_messages) == (413, _too_large(), 0)


async def test_a_malformed_v1_content_length_is_an_openai_shaped_bad_request() -> None:
    call = AsgiCall(_chunked(b"{}"))
    await application(
        _scope("/v1/chat/completions", [(b"content-length", b"2, 5")]), call.receive, call.send
    )
    assert call.status == 400
    assert call.json()["error"]["code"] == "bad_request"
    assert call.json()["error"]["type"] == "invalid_request_error"
    assert call.body_messages == 0
