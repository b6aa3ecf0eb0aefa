"""API tokens on /ws/chat/ through the project's ASGI application (Origin check first, then
token or session), with real PostgreSQL and Redis."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import channel_layers
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from accounts.models import ApiToken
from accounts.services import api_token_create, api_token_revoke, user_sockets_close
from accounts.ws_auth import SCOPE_TOKEN_EXPIRES_AT, SCOPE_TOKEN_ID, token_seconds_left
from chats.models import Chat
from openmates.asgi import application
from pipeline import runtime, state
from pipeline.ids import new_id
from tests.pipeline.conftest import envelope, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

ORIGIN = (b"origin", b"http://testserver")
TIMEOUT_S = 5.0
UNKNOWN = "om_0123456789ab_" + "a" * 43


@pytest.fixture
async def open_socket() -> AsyncIterator[Callable[..., Any]]:
    """``await open_socket(headers, subprotocols)`` → ``(communicator, connected, detail)``.

    ``detail`` is the accepted subprotocol when connected, else the close code.
    """
    channel_layers.backends.clear()
    opened: list[WebsocketCommunicator] = []

    async def connect(
        headers: list[tuple[bytes, bytes]], subprotocols: list[str] | None = None
    ) -> tuple[WebsocketCommunicator, bool, Any]:
        communicator = WebsocketCommunicator(
            application, "/ws/chat/", headers=headers, subprotocols=subprotocols
        )
        opened.append(communicator)
        connected, detail = await communicator.connect(timeout=TIMEOUT_S)
        return communicator, connected, detail

    yield connect
    for communicator in opened:
        await asyncio.wait_for(communicator.disconnect(), 20)
    await asyncio.wait_for(runtime.registry("default").stop(), 20)
    layer = channel_layers.backends.pop("default", None)
    if layer is not None:
        await layer.close_pools()


async def _first_frame(communicator: WebsocketCommunicator) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(await communicator.receive_from(timeout=TIMEOUT_S))
    return frame


async def _token(user: Any, name: str = "bot") -> tuple[ApiToken, str]:
    return await sync_to_async(api_token_create)(user=user, name=name)


def _bearer(raw: str) -> tuple[bytes, bytes]:
    return (b"authorization", f"Bearer {raw}".encode())


async def test_a_bearer_token_opens_the_chat_socket(open_socket: Any, owner: Any) -> None:
    token, raw = await _token(owner)

    communicator, connected, subprotocol = await open_socket([ORIGIN, _bearer(raw)])

    assert (connected, subprotocol) == (True, None)
    assert await _first_frame(communicator) == {"type": "task.active", "tasks": []}
    stored = await ApiToken.objects.aget(pk=token.pk)
    assert stored.last_used_at is not None


async def test_a_token_subprotocol_is_accepted_as_openmates_v1(
    open_socket: Any, owner: Any
) -> None:
    _, raw = await _token(owner)

    communicator, connected, subprotocol = await open_socket(
        [ORIGIN], ["openmates.v1", f"openmates.token.{raw}"]
    )

    assert (connected, subprotocol) == (True, "openmates.v1")
    assert (await _first_frame(communicator))["type"] == "task.active"


async def test_the_token_subprotocol_is_never_echoed(open_socket: Any, owner: Any) -> None:
    # Without "openmates.v1" on offer the server selects nothing rather than the secret.
    _, raw = await _token(owner)
    _, connected, subprotocol = await open_socket([ORIGIN], [f"openmates.token.{raw}"])
    assert (connected, subprotocol) == (True, None)


@pytest.mark.parametrize(
    ("headers", "subprotocols"),
    [
        ([ORIGIN, _bearer(UNKNOWN)], None),
        ([ORIGIN, _bearer("not-a-token")], None),
        ([ORIGIN, (b"authorization", b"Bearer")], None),
        ([ORIGIN], ["openmates.v1", f"openmates.token.{UNKNOWN}"]),
    ],
)
async def test_a_bad_token_is_refused_before_accept(
    open_socket: Any, owner: Any, headers: Any, subprotocols: Any
) -> None:
    await _token(owner)
    _, connected, code = await open_socket(headers, subprotocols)
    assert (connected, code) == (False, 4401)


async def test_a_bad_token_is_refused_even_with_a_valid_session(
    open_socket: Any, owner: Any
) -> None:
    cookie = await sync_to_async(session_cookie)(owner)
    _, connected, code = await open_socket([ORIGIN, (b"cookie", cookie), _bearer(UNKNOWN)])
    assert (connected, code) == (False, 4401)


async def test_two_different_tokens_are_refused(open_socket: Any, owner: Any) -> None:
    _, first = await _token(owner, "one")
    _, second = await _token(owner, "two")
    _, connected, code = await open_socket(
        [ORIGIN, _bearer(first)], ["openmates.v1", f"openmates.token.{second}"]
    )
    assert (connected, code) == (False, 4401)


async def test_revoked_and_expired_tokens_are_refused(open_socket: Any, owner: Any) -> None:
    revoked, raw_revoked = await _token(owner, "old")
    expired, raw_expired = await _token(owner, "ci")
    await sync_to_async(api_token_revoke)(token=revoked)
    await ApiToken.objects.filter(pk=expired.pk).aupdate(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    for raw in (raw_revoked, raw_expired):
        _, connected, code = await open_socket([ORIGIN, _bearer(raw)])
        assert (connected, code) == (False, 4401)


@pytest.mark.parametrize(
    "origin", [None, (b"origin", b"http://evil.example"), (b"origin", b"null")]
)
async def test_a_valid_token_without_an_allowed_origin_is_refused(
    open_socket: Any, owner: Any, origin: Any
) -> None:
    token, raw = await _token(owner)
    headers = [_bearer(raw)] if origin is None else [origin, _bearer(raw)]

    _, connected, _ = await open_socket(headers)

    assert connected is False
    # Refused before authentication: the token was not even looked at.
    assert (await ApiToken.objects.aget(pk=token.pk)).last_used_at is None


async def test_revoking_a_token_closes_its_sockets_only(open_socket: Any, owner: Any) -> None:
    revoked, raw_revoked = await _token(owner, "revoked")
    _, raw_kept = await _token(owner, "kept")
    cookie = await sync_to_async(session_cookie)(owner)
    doomed, _, _ = await open_socket([ORIGIN, _bearer(raw_revoked)])
    kept, _, _ = await open_socket([ORIGIN, _bearer(raw_kept)])
    browser, _, _ = await open_socket([ORIGIN, (b"cookie", cookie)])
    for communicator in (doomed, kept, browser):
        assert (await _first_frame(communicator))["type"] == "task.active"

    await sync_to_async(api_token_revoke)(token=revoked)

    closed = await doomed.receive_output(timeout=TIMEOUT_S)
    assert closed == {"type": "websocket.close", "code": 4401}
    for communicator in (kept, browser):
        await communicator.send_to(text_data=json.dumps({"type": "ping", "ts": 7}))
        assert await _first_frame(communicator) == {"type": "pong", "ts": 7}


async def test_ending_the_users_sessions_closes_token_sockets_too(
    open_socket: Any, owner: Any
) -> None:
    # Sign-out closes every socket of the user; a token client reconnects with its (still
    # valid) token. A password change revokes the token too (below).
    _, raw = await _token(owner)
    communicator, _, _ = await open_socket([ORIGIN, _bearer(raw)])
    assert (await _first_frame(communicator))["type"] == "task.active"

    await sync_to_async(user_sockets_close)(user_id=owner.pk)

    closed = await communicator.receive_output(timeout=TIMEOUT_S)
    assert closed == {"type": "websocket.close", "code": 4401}
    again, connected, _ = await open_socket([ORIGIN, _bearer(raw)])
    assert connected is True
    assert (await _first_frame(again))["type"] == "task.active"


async def test_the_session_still_opens_the_socket_without_a_token(
    open_socket: Any, owner: Any
) -> None:
    cookie = await sync_to_async(session_cookie)(owner)
    communicator, connected, subprotocol = await open_socket(
        [ORIGIN, (b"cookie", cookie)], ["openmates.v1"]
    )
    assert (connected, subprotocol) == (True, "openmates.v1")
    assert (await _first_frame(communicator))["type"] == "task.active"


async def test_a_token_socket_closes_with_4401_when_the_token_expires(
    open_socket: Any, owner: Any
) -> None:
    # REST refuses the token (401) from its expiry on; its open socket must end then too.
    _, raw = await sync_to_async(api_token_create)(
        user=owner, name="short", expires_at=timezone.now() + timedelta(seconds=2)
    )
    communicator, connected, _ = await open_socket([ORIGIN, _bearer(raw)])
    assert connected is True
    assert (await _first_frame(communicator))["type"] == "task.active"

    closed = await communicator.receive_output(timeout=TIMEOUT_S)

    assert closed == {"type": "websocket.close", "code": 4401}


def test_seconds_left_names_the_token_expiry_only() -> None:
    now = timezone.now()
    assert token_seconds_left({}) is None
    assert token_seconds_left({SCOPE_TOKEN_ID: 1, SCOPE_TOKEN_EXPIRES_AT: None}) is None
    past = {SCOPE_TOKEN_ID: 1, SCOPE_TOKEN_EXPIRES_AT: now - timedelta(seconds=5)}
    assert token_seconds_left(past) == 0.0
    left = token_seconds_left({SCOPE_TOKEN_ID: 1, SCOPE_TOKEN_EXPIRES_AT: now + timedelta(hours=1)})
    assert left is not None
    assert 3590 < left <= 3600


@pytest.mark.parametrize("change", ["deactivate", "new_password", "delete"])
async def test_changes_made_outside_the_account_pages_close_the_users_sockets(
    open_socket: Any, django_user_model: Any, change: str
) -> None:
    # The admin's password reset or deactivation, changepassword, a shell: no account
    # page runs, yet the user's sign-in is no longer valid.
    user = await sync_to_async(django_user_model.objects.create_user)("mallory", password="x")
    _, raw = await _token(user)
    cookie = await sync_to_async(session_cookie)(user)
    token_socket, _, _ = await open_socket([ORIGIN, _bearer(raw)])
    browser, _, _ = await open_socket([ORIGIN, (b"cookie", cookie)])
    for communicator in (token_socket, browser):
        assert (await _first_frame(communicator))["type"] == "task.active"

    def apply() -> None:
        if change == "delete":
            user.delete()
            return
        if change == "deactivate":
            user.is_active = False
        else:
            user.set_password("a new one")
        user.save()

    await sync_to_async(apply)()

    for communicator in (token_socket, browser):
        closed = await communicator.receive_output(timeout=TIMEOUT_S)
        assert closed == {"type": "websocket.close", "code": 4401}


async def test_an_ordinary_save_of_the_user_leaves_the_sockets_open(
    open_socket: Any, owner: Any
) -> None:
    _, raw = await _token(owner)
    communicator, _, _ = await open_socket([ORIGIN, _bearer(raw)])
    assert (await _first_frame(communicator))["type"] == "task.active"
    owner.first_name = "Olive"
    await sync_to_async(owner.save)()
    await communicator.send_to(text_data=json.dumps({"type": "ping", "ts": 3}))
    assert await _first_frame(communicator) == {"type": "pong", "ts": 3}


async def test_a_password_change_closes_token_sockets_for_good(
    open_socket: Any, owner: Any
) -> None:
    # The token is revoked with the old password: reconnecting with it is refused.
    _, raw = await _token(owner)
    communicator, _, _ = await open_socket([ORIGIN, _bearer(raw)])
    assert (await _first_frame(communicator))["type"] == "task.active"

    def change() -> None:
        owner.set_password("a new long secret 42")
        owner.save()

    await sync_to_async(change)()

    closed = await communicator.receive_output(timeout=TIMEOUT_S)
    assert closed == {"type": "websocket.close", "code": 4401}
    _, connected, code = await open_socket([ORIGIN, _bearer(raw)])
    assert (connected, code) == (False, 4401)


async def test_a_token_revoked_while_its_group_was_lost_cannot_start_anything(
    open_socket: Any, owner: Any, instance: Any, settings: Any
) -> None:
    # Redis lost the socket's groups (a flush), so the revocation's close event reaches
    # no one; the socket's own re-check must refuse the next frame, as REST answers 401.
    settings.WS_SIGN_IN_RECHECK_S = 0
    token, raw = await _token(owner)
    communicator, _, _ = await open_socket([ORIGIN, _bearer(raw)])
    assert (await _first_frame(communicator))["type"] == "task.active"
    await state.redis_client().flushdb()
    await sync_to_async(api_token_revoke)(token=token)

    chat_id = new_id()
    await communicator.send_to(
        text_data=json.dumps(
            {
                "type": "chat.create",
                "request_id": "c-1",
                "chat_id": chat_id,
                "instance": instance.slug,
                "encrypted_chat_key": envelope(),
            }
        )
    )

    closed = await communicator.receive_output(timeout=TIMEOUT_S)
    assert closed == {"type": "websocket.close", "code": 4401}
    assert not await Chat.objects.filter(pk=chat_id).aexists()


async def test_a_token_revoked_by_a_queryset_update_closes_its_idle_socket(
    open_socket: Any, owner: Any, settings: Any
) -> None:
    # No service ran, so no close event was sent: the periodic re-check closes it.
    settings.WS_SIGN_IN_RECHECK_S = 0
    settings.PIPELINE_GROUP_REJOIN_S = 0.2
    token, raw = await _token(owner)
    communicator, _, _ = await open_socket([ORIGIN, _bearer(raw)])
    assert (await _first_frame(communicator))["type"] == "task.active"

    await ApiToken.objects.filter(pk=token.pk).aupdate(revoked_at=timezone.now())

    closed = await communicator.receive_output(timeout=TIMEOUT_S)
    assert closed == {"type": "websocket.close", "code": 4401}


async def test_a_valid_token_socket_keeps_working_past_its_checks(
    open_socket: Any, owner: Any, settings: Any
) -> None:
    settings.WS_SIGN_IN_RECHECK_S = 0
    settings.PIPELINE_GROUP_REJOIN_S = 0.2
    _, raw = await _token(owner)
    communicator, _, _ = await open_socket([ORIGIN, _bearer(raw)])
    assert (await _first_frame(communicator))["type"] == "task.active"
    await asyncio.sleep(0.6)  # a few periodic checks

    await communicator.send_to(text_data=json.dumps({"type": "sync.request", "known": {}}))

    assert (await _first_frame(communicator))["type"] == "sync.phase"
