"""Requests Django refuses before a view runs answer the JSON error contract under /api/.

A body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is 413 ``request_too_large``, a ``Host`` outside
``ALLOWED_HOSTS`` is 400 ``invalid_host`` (both were Django's HTML 400 page); other pages
keep Django's own answers. The limit fits the largest REST body the endpoints accept.

At the ASGI layer (``openmates.body_limit`` in ``openmates.asgi``): a chunked body (no
``Content-Length``) under /api/ is parsed, not taken as empty, and refused at the first chunk
past the limit; a declared ``Content-Length`` past the limit is refused with the body unread.
Refused requests log one WARNING line to ``django.security``, without the traceback.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation, TooManyFieldsSent
from django.db import connections
from django.test import Client, RequestFactory

from accounts.services import api_token_create
from chats import services
from chats.models import Chat
from instances.models import InstanceMember
from openmates.api_errors import bad_request
from openmates.asgi import application
from openmates.body_limit import BodyLimit
from openmates.logging_filters import SecurityWarning
from pipeline.ids import new_id
from tests.chats.rest import client_envelope, signed_in_client

CHAT_KEY = "AWNoYXRrZXkAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=="
# chats.api's _MAX_CIPHERTEXT: standard base64 of at most 135,000 envelope bytes.
MAX_CIPHERTEXT_CHARACTERS = 180_000


def _too_large() -> str:
    return json.dumps({"password": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)})


@pytest.fixture
def chat(keyed_owner: Any, chat_instance: Any) -> Chat:
    InstanceMember.objects.create(instance=chat_instance, user=keyed_owner, role="member")
    return services.chat_create(
        user=keyed_owner, chat_id=new_id(), instance=chat_instance, encrypted_chat_key=CHAT_KEY
    )


def test_a_rest_body_over_the_limit_answers_413_json_and_changes_nothing(owner: Any) -> None:
    client = signed_in_client(owner)
    for method, path in (("POST", "/api/chats/"), ("DELETE", "/api/account/")):
        answer = client.generic(method, path, data=_too_large(), content_type="application/json")
        assert answer.status_code == 413, (method, answer.content[:200])
        assert answer["Content-Type"] == "application/json"
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        assert answer.json() == {
            "code": "request_too_large",
            "message": f"Request bodies are at most {limit} bytes.",
        }
    assert get_user_model().objects.filter(pk=owner.pk).exists()
    assert not Chat.objects.filter(owner=owner).exists()


def test_a_page_body_over_the_limit_keeps_djangos_answer(db: Any) -> None:
    form = "username=demo&password=" + "x" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    answer = Client().post(
        "/accounts/login/", data=form, content_type="application/x-www-form-urlencoded"
    )
    assert answer.status_code == 400
    assert answer["Content-Type"].startswith("text/html")


def test_the_largest_rest_body_fits_the_limit(chat: Chat, keyed_owner: Any) -> None:
    # A chat PATCH may carry five ciphertexts of the maximum size: the biggest REST body.
    body_bytes = MAX_CIPHERTEXT_CHARACTERS // 4 * 3 - 21
    fields = ("title", "summary", "tags", "category", "icon")
    payload = {f"encrypted_{name}": client_envelope(os.urandom(body_bytes)) for name in fields}
    assert {len(value) for value in payload.values()} == {MAX_CIPHERTEXT_CHARACTERS}
    body = json.dumps({"version": chat.version, **payload})
    assert len(body) < settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    answer = signed_in_client(keyed_owner).patch(
        f"/api/chats/{chat.pk}/", data=body, content_type="application/json"
    )
    assert answer.status_code == 200, answer.content[:300]
    chat.refresh_from_db()
    assert chat.encrypted_icon == payload["encrypted_icon"]


def test_a_host_outside_allowed_hosts_answers_json_under_api_and_html_elsewhere(
    db: Any,
) -> None:
    api = Client().get("/api/chats/", HTTP_HOST="evil.example")
    assert api.status_code == 400
    assert api.json() == {
        "code": "invalid_host",
        "message": "The Host header names no host this server serves.",
    }
    page = Client().get("/accounts/login/", HTTP_HOST="evil.example")
    assert page.status_code == 400
    assert page["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(
    ("exception", "code"),
    [(TooManyFieldsSent("1001 fields"), "too_many_fields"), (SuspiciousOperation(), "bad_request")],
)
def test_other_refused_requests_under_api_answer_a_stable_code(
    exception: Exception, code: str
) -> None:
    answer = bad_request(RequestFactory().post("/api/chats/"), exception)
    assert answer.status_code == 400
    assert json.loads(answer.content)["code"] == code


CHUNK = 64 * 1024


class AsgiCall:
    """One HTTP request through an ASGI application: counts what it receives, keeps what it
    sends."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.received = 0  # body bytes handed to the application
        self.body_messages = 0
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        chunk = next(self.chunks, None)
        if chunk is None:
            # The client waits for its answer: Django listens for a disconnect meanwhile
            # and would drop the request on one.
            await asyncio.Event().wait()
            raise AssertionError("unreachable: the wait ends only when cancelled")
        self.received += len(chunk)
        self.body_messages += 1
        return {"type": "http.request", "body": chunk, "more_body": bool(chunk)}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    def json(self) -> Any:
        return json.loads(b"".join(m.get("body", b"") for m in self.sent[1:]))


def _scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
    }


def _chunked(*parts: bytes) -> Iterator[bytes]:
    """``parts`` as chunked body messages, ended by an empty last one (more_body False)."""
    yield from parts
    yield b""


def _endless() -> Iterator[bytes]:
    """A client that would send 40 MiB in 64 KiB chunks."""
    for _ in range(40 * 1024 * 1024 // CHUNK):
        yield b"x" * CHUNK
    yield b""


@pytest.mark.django_db(transaction=True)
async def test_a_chunked_malformed_json_body_under_api_is_a_parse_error(owner: Any) -> None:
    _, raw = await sync_to_async(api_token_create)(user=owner, name="cli")
    headers = [
        (b"authorization", f"Bearer {raw}".encode()),
        (b"content-type", b"application/json"),
        (b"transfer-encoding", b"chunked"),
    ]
    call = AsgiCall(_chunked(b"{b", b"ad"))
    await application(_scope("/api/chats/", headers), call.receive, call.send)
    assert call.status == 400
    assert call.json()["code"] == "parse_error"
    assert not await sync_to_async(Chat.objects.filter(owner=owner).exists)()
    # Hand asgiref's sync thread's connection back before the test database is dropped.
    await sync_to_async(connections.close_all)()


async def test_a_chunked_body_over_the_limit_is_refused_at_the_first_chunk_past_it() -> None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    headers = [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")]
    call = AsgiCall(_endless())
    await application(_scope("/api/chats/", headers), call.receive, call.send)
    assert call.status == 413
    assert (b"content-type", b"application/json") in call.sent[0]["headers"]
    assert call.json() == {
        "code": "request_too_large",
        "message": f"Request bodies are at most {limit} bytes.",
    }
    assert limit < call.received <= limit + CHUNK


async def test_a_declared_length_over_the_limit_is_refused_without_reading_the_body() -> None:
    declared = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % declared)]
    call = AsgiCall(_endless())
    await application(_scope("/api/account/", headers), call.receive, call.send)
    assert call.status == 413
    assert call.json()["code"] == "request_too_large"
    assert call.body_messages == 0


async def test_a_malformed_content_length_under_api_is_a_bad_request() -> None:
    call = AsgiCall(_chunked(b"{}"))
    await application(
        _scope("/api/chats/", [(b"content-length", b"2, 5")]), call.receive, call.send
    )
    assert (call.status, call.json()["code"], call.body_messages) == (400, "bad_request", 0)


async def test_paths_outside_api_reach_the_application_unchanged() -> None:
    seen: list[tuple[Any, Any]] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        seen.append((scope, receive))

    call = AsgiCall(_endless())
    scope = _scope("/accounts/login/", [(b"transfer-encoding", b"chunked")])
    await BodyLimit(inner)(scope, call.receive, call.send)
    assert seen == [(scope, call.receive)]
    assert call.body_messages == 0


class _Collect(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__()
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def security_log() -> Iterator[tuple[list[logging.LogRecord], io.StringIO]]:
    """What reaches django.security's handlers: the records (after the configured handler's
    filter ran) and the text its console handler writes."""
    logger = logging.getLogger("django.security")
    configured = [
        h
        for h in logger.handlers
        if isinstance(h, logging.StreamHandler)
        and any(isinstance(f, SecurityWarning) for f in h.filters)
    ]
    assert len(configured) == 1
    text = io.StringIO()
    previous = configured[0].setStream(text)
    records: list[logging.LogRecord] = []
    capture = _Collect(records)
    logger.addHandler(capture)
    try:
        yield records, text
    finally:
        logger.removeHandler(capture)
        if previous is not None:
            configured[0].setStream(previous)


def _one_warning_line(
    log: tuple[list[logging.LogRecord], io.StringIO], logger_name: str
) -> logging.LogRecord:
    records, text = log
    assert [(r.name, r.levelno, r.levelname) for r in records] == [
        (logger_name, logging.WARNING, "WARNING")
    ]
    assert records[0].exc_info is None
    assert records[0].exc_text is None
    lines = text.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert f" WARNING {logger_name}: " in lines[0]
    return records[0]


def test_an_oversized_body_logs_one_warning_line_without_traceback(
    owner: Any, security_log: tuple[list[logging.LogRecord], io.StringIO]
) -> None:
    answer = signed_in_client(owner).post(
        "/api/chats/", data=_too_large(), content_type="application/json"
    )
    assert answer.status_code == 413
    record = _one_warning_line(security_log, "django.security.RequestDataTooBig")
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in record.getMessage()


def test_a_bad_host_logs_one_warning_line_without_traceback(
    db: Any, security_log: tuple[list[logging.LogRecord], io.StringIO]
) -> None:
    assert Client().get("/api/chats/", HTTP_HOST="evil.example").status_code == 400
    record = _one_warning_line(security_log, "django.security.DisallowedHost")
    assert "evil.example" in record.getMessage()
