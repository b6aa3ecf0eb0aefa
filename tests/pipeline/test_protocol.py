"""Validation of every client frame of docs/protocol.md §3 (pipeline/protocol.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis

from openmates.vault import VaultError
from pipeline import protocol
from pipeline.ids import new_id
from pipeline.protocol import ErrorCode, FrameError, parse_frame

ENVELOPE = base64.b64encode(b"\x01" + b"k" * 8 + b"i" * 12 + b"ciphertext-and-tag-16b").decode()


def _frame(**fields: Any) -> str:
    return json.dumps(fields, ensure_ascii=False)


def _valid_frames() -> dict[str, dict[str, Any]]:
    chat, message, task = new_id(), new_id(), new_id()
    return {
        "chat.create": {
            "request_id": "r1",
            "chat_id": chat,
            "instance": "demo",
            "encrypted_chat_key": ENVELOPE,
            "encrypted_title": ENVELOPE,
        },
        "chat.update": {"chat_id": chat, "version": 3, "pinned": True},
        "chat.delete": {"chat_id": chat},
        "message.send": {
            "chat_id": chat,
            "message_id": message,
            "content": "What is 2+2?",
            "history": [{"message_id": new_id(), "role": "user", "content": "hi"}],
            "overrides": {"tier": "heavy", "tools": ["calculator"], "mate": "coder"},
        },
        "message.retry": {"chat_id": chat, "message_id": message},
        "message.regenerate": {
            "chat_id": chat,
            "message_id": message,
            "content": "Again",
            "overrides": {"tier": "fast"},
        },
        "message.store": {
            "chat_id": chat,
            "message_id": message,
            "encrypted_content": ENVELOPE,
            "version": 1,
        },
        "chat.history": {
            "chat_id": chat,
            "request_id": "h-1",
            "messages": [{"message_id": message, "role": "assistant", "content": "4"}],
            "summary": "Arithmetic.",
        },
        "memory.consent": {"chat_id": chat, "request_id": "m1", "allowed": ["fact"]},
        "task.cancel": {"task_id": task},
        "skill.cancel": {"embed_id": new_id()},
        "stream.resume": {"chat_id": chat, "task_id": task, "last_sequence": 0},
        "sync.request": {"known": {chat: 2}},
        "ping": {"ts": 17},
    }


@pytest.mark.parametrize("frame_type", sorted(protocol.FRAME_TYPES))
def test_every_client_frame_type_validates_into_its_model(frame_type: str) -> None:
    fields = _valid_frames()[frame_type]
    parsed = parse_frame(_frame(type=frame_type, **fields))
    assert type(parsed) is protocol.FRAME_TYPES[frame_type]
    assert parsed.type == frame_type
    for name, value in fields.items():
        if isinstance(value, str | int):
            assert getattr(parsed, name) == value


def test_valid_frames_cover_every_client_type_of_the_protocol() -> None:
    assert set(_valid_frames()) == set(protocol.FRAME_TYPES)
    assert len(protocol.FRAME_TYPES) == 14


def _error(text: str | None, bytes_data: bytes | None = None) -> FrameError:
    with pytest.raises(FrameError) as caught:
        parse_frame(text, bytes_data)
    return caught.value


@pytest.mark.parametrize(
    "text",
    ["not json", "[1, 2]", '"ping"', "{}", '{"type": 5}', "{'type': 'ping'}", ""],
)
def test_malformed_frames_are_invalid_frame(text: str) -> None:
    assert _error(text).code is ErrorCode.INVALID_FRAME


def test_binary_frame_is_invalid_frame() -> None:
    assert _error(None, b'{"type": "ping"}').code is ErrorCode.INVALID_FRAME


def test_unknown_type_is_reported_with_its_name() -> None:
    error = _error(_frame(type="chat.explode", chat_id=new_id()))
    assert error.code is ErrorCode.UNKNOWN_TYPE
    assert "chat.explode" in error.message


def test_an_error_names_the_field_not_the_validators_tag() -> None:
    error = _error(_frame(type="ping", ts="x" * 100))
    assert error.message == "ts: String should have at most 64 characters"


def test_missing_field_names_the_field_and_echoes_ids() -> None:
    chat = new_id()
    error = _error(_frame(type="message.send", chat_id=chat, content="hi"))
    assert error.code is ErrorCode.INVALID_FRAME
    assert error.message.startswith("message_id:")
    assert error.ids == {"chat_id": chat}


@pytest.mark.parametrize(
    ("frame_type", "field", "value"),
    [
        ("chat.update", "version", "3"),  # strict: no coercion of strings
        ("chat.update", "version", -1),
        ("chat.update", "version", True),
        ("chat.update", "pinned", "yes"),
        ("message.send", "chat_id", "not-a-uuid"),
        ("message.send", "chat_id", "0b4f8c2e-6f3a-4d1b-9c2e-5a6b7c8d9e0f"),  # UUIDv4
        ("message.send", "content", "   "),
        ("message.send", "content", "\u200b\u2060\ufeff"),  # shows nothing
        ("message.send", "content", "\u202e\u2066 \u2069"),
        ("message.send", "content", "hi \x00 there"),
        ("message.send", "content", 42),
        ("message.send", "history", [{"message_id": "x", "role": "user", "content": "a"}]),
        ("message.send", "history", [{"message_id": None, "role": "robot", "content": "a"}]),
        ("message.send", "overrides", {"tier": "ultra"}),
        ("message.send", "overrides", {"tools": ["bad name!"]}),
        ("message.store", "encrypted_content", "not base64!!"),
        ("message.store", "encrypted_content", base64.b64encode(b"\x02" + b"x" * 40).decode()),
        ("message.store", "encrypted_content", base64.b64encode(b"\x01short").decode()),
        ("chat.create", "instance", "no spaces allowed"),
        ("chat.create", "request_id", ""),
        ("memory.consent", "allowed", ["secrets"]),
        ("stream.resume", "last_sequence", 1.5),
        ("sync.request", "known", {"abc": 1}),
        ("ping", "ts", {"nested": True}),
    ],
)
def test_mistyped_fields_are_invalid_frame(frame_type: str, field: str, value: Any) -> None:
    fields = _valid_frames()[frame_type] | {field: value}
    error = _error(_frame(type=frame_type, **fields))
    assert error.code is ErrorCode.INVALID_FRAME, error.message
    assert field in error.message


def test_extra_fields_are_ignored() -> None:
    parsed = parse_frame(_frame(type="ping", ts="a", client="web 1.2"))
    assert parsed == protocol.Ping(type="ping", ts="a")


def test_content_of_exactly_64_kib_is_accepted_and_one_byte_more_is_too_large() -> None:
    fields = _valid_frames()["message.send"]
    fields.pop("history")
    ok = parse_frame(_frame(type="message.send", **fields | {"content": "é" * 32768}))
    assert isinstance(ok, protocol.MessageSend)
    assert len(ok.content.encode()) == 65536
    error = _error(_frame(type="message.send", **fields | {"content": "é" * 32768 + "x"}))
    assert error.code is ErrorCode.FRAME_TOO_LARGE
    assert error.message.startswith("content:")


def test_history_message_content_over_64_kib_is_too_large() -> None:
    fields = _valid_frames()["chat.history"]
    big = [{"message_id": new_id(), "role": "user", "content": "a" * 70_000}]
    error = _error(_frame(type="chat.history", **fields | {"messages": big}))
    assert error.code is ErrorCode.FRAME_TOO_LARGE


def test_assistant_history_messages_may_be_as_long_as_the_longest_reply() -> None:
    fields = _valid_frames()["chat.history"]
    reply = "é" * (protocol.MAX_REPLY_BYTES // 2)
    messages = [{"message_id": new_id(), "role": "assistant", "content": reply}]
    parsed = parse_frame(_frame(type="chat.history", **fields | {"messages": messages}))
    assert isinstance(parsed, protocol.ChatHistory)
    assert parsed.messages[0].content == reply
    messages[0]["content"] = reply + "x"
    error = _error(_frame(type="chat.history", **fields | {"messages": messages}))
    assert error.code is ErrorCode.FRAME_TOO_LARGE
    assert error.message.startswith("messages.0.content:")


def _envelope_chars(chars: int) -> str:
    """A valid envelope of exactly ``chars`` base64 characters (a multiple of 4)."""
    return base64.b64encode(b"\x01" + b"k" * 8 + b"i" * 12 + b"c" * (chars // 4 * 3 - 21)).decode()


def test_message_store_takes_the_envelope_of_the_longest_reply_in_a_bulk_frame() -> None:
    fields = _valid_frames()["message.store"]
    longest = _envelope_chars(protocol.MAX_MESSAGE_CIPHERTEXT_CHARS)
    assert len(longest) == protocol.ciphertext_chars(protocol.MAX_REPLY_BYTES)
    text = _frame(type="message.store", **fields | {"encrypted_content": longest})
    assert len(text) > protocol.MAX_FRAME_BYTES
    parsed = parse_frame(text)
    assert isinstance(parsed, protocol.MessageStore)
    assert parsed.encrypted_content == longest
    longer = _envelope_chars(protocol.MAX_MESSAGE_CIPHERTEXT_CHARS + 4)
    error = _error(_frame(type="message.store", **fields | {"encrypted_content": longer}))
    assert error.code is ErrorCode.FRAME_TOO_LARGE
    assert error.message.startswith("encrypted_content:")


def test_ordinary_frame_over_256_kib_is_too_large() -> None:
    chat = new_id()
    text = _frame(type="chat.update", chat_id=chat, version=1, padding="x" * (256 * 1024))
    error = _error(text)
    assert error.code is ErrorCode.FRAME_TOO_LARGE
    assert error.ids == {"chat_id": chat}


def test_a_2_mb_message_send_is_too_large() -> None:
    fields = _valid_frames()["message.send"]
    error = _error(_frame(type="message.send", **fields | {"content": "a" * 2_000_000}))
    assert error.code is ErrorCode.FRAME_TOO_LARGE


def test_chat_history_and_sync_frames_may_reach_4_mib() -> None:
    fields = _valid_frames()["chat.history"]
    messages = [
        {"message_id": new_id(), "role": "user", "content": "a" * 60_000} for _ in range(50)
    ]
    parsed = parse_frame(_frame(type="chat.history", **fields | {"messages": messages}))
    assert isinstance(parsed, protocol.ChatHistory)
    assert len(parsed.messages) == 50
    known = {new_id(): 1 for _ in range(8000)}
    sync = parse_frame(_frame(type="sync.request", known=known))
    assert isinstance(sync, protocol.SyncRequest)
    assert len(sync.known) == 8000


def test_any_frame_over_4_mib_is_too_large_before_parsing() -> None:
    text = '{"type": "chat.history", "pad": "' + "x" * (4 * 1024 * 1024) + '"}'
    assert _error(text).code is ErrorCode.FRAME_TOO_LARGE


def test_multibyte_text_is_measured_in_utf8_bytes() -> None:
    # 70,000 characters of 4 bytes each: under 256 Ki characters, over 256 KiB of UTF-8.
    text = _frame(type="ping", ts="1", pad="😀" * 70_000)
    assert len(text) < 256 * 1024
    assert _error(text).code is ErrorCode.FRAME_TOO_LARGE


def test_frames_are_frozen() -> None:
    parsed = parse_frame(_frame(type="task.cancel", task_id=new_id()))
    assert isinstance(parsed, protocol.TaskCancel)
    with pytest.raises(ValueError, match="frozen"):
        parsed.task_id = new_id()


def _refusal(text: str) -> FrameError:
    with pytest.raises(FrameError) as caught:
        parse_frame(text)
    return caught.value


@pytest.mark.parametrize(
    "text",
    [
        '{"type":"message.send","content":"\\ud800 hello"}',
        '{"type":"ping","ts":"\\udfff"}',
        '{"type":"ping","x":{"\\ud83d":1}}',
        json.dumps({"type": "ping", "ts": "raw \udc80"}, ensure_ascii=False),
        '{"type":"ping","x":[[{"y":"a\\udc00b"}]]}',
    ],
)
def test_a_lone_surrogate_in_any_string_is_an_invalid_frame(text: str) -> None:
    error = _refusal(text)
    assert error.code == ErrorCode.INVALID_FRAME
    assert error.message == (
        "frame contains a lone surrogate escape (\\ud800-\\udfff without its pair),"
        " which is no Unicode text"
    )


def test_an_escaped_surrogate_pair_is_a_valid_character() -> None:
    frame = parse_frame('{"type":"ping","ts":"\\ud83d\\ude00"}')
    assert frame.ts == "\U0001f600"  # type: ignore[union-attr]


def test_a_frame_nested_100000_levels_deep_is_an_invalid_frame() -> None:
    error = _refusal('{"type":"ping","x":' + "[" * 100_000 + "]" * 100_000 + "}")
    assert (error.code, error.message) == (ErrorCode.INVALID_FRAME, "frame is nested too deeply")


@pytest.mark.parametrize(
    ("number", "message"),
    [
        ("NaN", "frame has an invalid number: NaN is not a JSON number"),
        ("Infinity", "frame has an invalid number: Infinity is not a JSON number"),
        ("-Infinity", "frame has an invalid number: -Infinity is not a JSON number"),
        ("1e999", "frame has an invalid number: number 1e999 is out of range"),
        ("1" * 5000, "frame has an invalid number: an integer has too many digits"),
    ],
)
def test_numbers_that_json_cannot_carry_are_invalid_frames(number: str, message: str) -> None:
    error = _refusal('{"type":"ping","ts":' + number + "}")
    assert (error.code, error.message) == (ErrorCode.INVALID_FRAME, message)


def test_a_large_finite_number_is_still_accepted() -> None:
    assert parse_frame('{"type":"ping","ts":1.5e300}').ts == 1.5e300  # type: ignore[union-attr]


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(60)
async def test_over_a_socket_malformed_frames_get_invalid_frame_and_the_socket_stays(
    ws_client: Any, owner: Any
) -> None:
    client = await ws_client(owner)
    chat_id, message_id = new_id(), new_id()
    frames = [
        json.dumps(
            {
                "type": "message.send",
                "chat_id": chat_id,
                "message_id": message_id,
                "content": "\ud800",
            }
        ),
        '{"type":"ping","x":' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"type":"ping","ts":NaN}',
        '{"type":"ping","ts":1e999}',
    ]
    for text in frames:
        await client.send_text(text)
        error = await client.recv()
        assert (error["type"], error["code"]) == ("error", "invalid_frame"), error

    await client.send_text('{"type":"ping","ts":5}')
    assert await client.recv() == {"type": "pong", "ts": 5}


@pytest.mark.parametrize(
    ("failure", "code", "message"),
    [
        (VaultError("sealed", "Vault is sealed"), "vault_unavailable", "try again shortly"),
        (VaultError("not_found", "no key user-7"), "internal", "ask the administrator"),
        (redis.ConnectionError("refused"), "cache_unavailable", "try again shortly"),
        (RuntimeError("a bug"), "internal", "Something went wrong"),
    ],
)
def test_an_unexpected_failure_maps_to_one_error_code(
    failure: Exception, code: str, message: str
) -> None:
    mapped, text = protocol.error_for_exception(failure, doing="frame")
    assert (mapped, type(mapped)) == (code, protocol.ErrorCode)
    assert message in text
    assert str(failure) not in text  # nothing of the failure's own text reaches the user


def test_the_error_codes_are_exactly_those_docs_protocol_md_section_8_lists() -> None:
    # A code sent but not documented (forbidden, read_only were) is no contract at all.
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text()
    section = text.split("## §8 Errors", 1)[1].split("\n## ", 1)[0]
    table = section.split("| code | sent for |", 1)[1].split("\n\n", 1)[0]
    documented = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}

    assert documented == {code.value for code in ErrorCode}
