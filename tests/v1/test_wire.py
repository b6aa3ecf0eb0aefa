"""``openai_api.wire.parse_request``: bodies that parse as JSON but cannot be a turn are
400s in OpenAI's error shape, before anything is written."""

from __future__ import annotations

import json
from typing import Any

import pytest

from openai_api.wire import WireError, parse_request
from pipeline.protocol import MAX_CONTENT_BYTES


def _body(content: object) -> bytes:
    return json.dumps(
        {"model": "demo", "messages": [{"role": "user", "content": content}]}
    ).encode()


def test_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(WireError) as caught:
        parse_request(b'{"model": "demo", "messages": [{"role": "user", "content": "\\ud800"}]}')

    assert (caught.value.status, caught.value.code) == (400, "invalid_json")
    assert caught.value.body()["error"]["type"] == "invalid_request_error"


def test_a_surrogate_pair_is_text() -> None:
    request = parse_request(_body("\U0001f984"))

    assert request.messages[0].content == "\U0001f984"


@pytest.mark.parametrize(
    "content",
    ["a" * (MAX_CONTENT_BYTES + 1), [{"type": "text", "text": "ä" * (MAX_CONTENT_BYTES // 2 + 1)}]],
)
def test_a_user_message_over_the_websocket_limit_is_refused(content: object) -> None:
    with pytest.raises(WireError) as caught:
        parse_request(_body(content))

    assert (caught.value.status, caught.value.code) == (400, "string_above_max_length")
    assert caught.value.param == "messages.0.content"


def test_a_user_message_at_the_limit_is_accepted() -> None:
    request = parse_request(_body("a" * MAX_CONTENT_BYTES))

    assert len(request.messages[0].content or "") == MAX_CONTENT_BYTES


def _fields(**fields: object) -> bytes:
    return json.dumps(
        {"model": "demo", "messages": [{"role": "user", "content": "Hi"}], **fields}
    ).encode()


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"temperature": "1"}, "temperature"),
        ({"temperature": True}, "temperature"),
        ({"max_tokens": "5"}, "max_tokens"),
        ({"max_tokens": 5.0}, "max_tokens"),
        ({"max_completion_tokens": "5"}, "max_completion_tokens"),
        ({"stream": "yes"}, "stream"),
        ({"stream": 1}, "stream"),
        ({"stream_options": {"include_usage": "true"}}, "stream_options.include_usage"),
        ({"n": "2"}, "n"),
        ({"n": True}, "n"),
        ({"top_p": "0.5"}, "top_p"),
        ({"presence_penalty": "0"}, "presence_penalty"),
        ({"frequency_penalty": False}, "frequency_penalty"),
        ({"seed": "7"}, "seed"),
        ({"user": 42}, "user"),
    ],
)
def test_a_field_of_the_wrong_json_type_is_refused_not_coerced(
    fields: dict[str, object], param: str
) -> None:
    with pytest.raises(WireError) as caught:
        parse_request(_fields(**fields))

    error = caught.value.body()["error"]
    assert caught.value.status == 400
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "invalid_type",
        param,
    )
    assert error["message"].startswith(f"{param}: ")


def test_numbers_integers_and_booleans_of_the_right_json_type_are_accepted() -> None:
    request = parse_request(
        _fields(
            temperature=1,
            top_p=0.5,
            presence_penalty=-2,
            frequency_penalty=1.5,
            seed=7,
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
            n=1,
        )
    )

    assert request.temperature == 1.0
    assert isinstance(request.temperature, float)
    assert (request.top_p, request.presence_penalty, request.seed) == (0.5, -2.0, 7)
    assert (request.max_tokens, request.stream, request.n) == (5, True, 1)
    assert request.stream_options is not None
    assert request.stream_options.include_usage is True


def test_null_is_each_optional_fields_default() -> None:
    request = parse_request(
        _fields(stream=None, temperature=None, max_tokens=None, n=None, stream_options=None)
    )

    assert (request.stream, request.temperature, request.max_tokens) == (None, None, None)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"temperature": 2.5}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
    ],
)
def test_a_value_out_of_range_is_refused_as_an_invalid_value(
    fields: dict[str, object], param: str
) -> None:
    with pytest.raises(WireError) as caught:
        parse_request(_fields(**fields))

    assert (caught.value.status, caught.value.code, caught.value.param) == (
        400,
        "invalid_value",
        param,
    )


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"model": "demo"}, "missing_required_parameter", "messages"),
        ({"model": "demo", "messages": []}, "invalid_value", "messages"),
        (
            {"model": "demo", "messages": [{"role": "wizard", "content": "hi"}]},
            "invalid_value",
            "messages.0.role",
        ),
        (
            {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "stream": "yes"},
            "invalid_type",
            "stream",
        ),
        ({"model": 5, "messages": [{"role": "user", "content": "hi"}]}, "invalid_type", "model"),
    ],
)
def test_every_refused_body_names_a_stable_code(
    body: dict[str, object], code: str, param: str | None
) -> None:
    with pytest.raises(WireError) as caught:
        parse_request(json.dumps(body).encode())

    assert (caught.value.status, caught.value.code) == (400, code)
    if param is not None:
        assert caught.value.param == param


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "demo", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"model": "demo", "messages": ' + b"[" * 40 + b"]" * 40 + b"}",
        b'{"model": "demo", "temperature": NaN, "messages": [{"role": "user", "content": "x"}]}',
        b'{"model": "demo", "top_p": -Infinity, "messages": [{"role": "user", "content": "x"}]}',
        b'{"model": "demo", "temperature": 1e999, "messages": [{"role": "user", "content": "x"}]}',
        b'{"model": "demo", "top_p": -1E400, "messages": [{"role": "user", "content": ""}]}',
    ],
    ids=[
        "nested-past-the-recursion-limit",
        "nested-past-the-depth-limit",
        "nan",
        "infinity",
        "overflowing-to-infinity",
        "overflowing-to-minus-infinity",
    ],
)
def test_what_is_not_json_or_nests_too_deep_is_invalid_json(body: bytes) -> None:
    with pytest.raises(WireError) as caught:
        parse_request(body)

    assert (caught.value.status, caught.value.code) == (400, "invalid_json")
    assert caught.value.body()["error"]["type"] == "invalid_request_error"


@pytest.mark.django_db
def test_an_unknown_v1_path_is_an_openai_shaped_404(client: Any) -> None:
    for path in ("/v1/embeddings", "/v1/chat/completions/extra", "/v1/"):
        response = client.post(path, data="{}", content_type="application/json")

        assert response.status_code == 404
        assert response["Content-Type"].startswith("application/json")
        assert response.json()["error"]["code"] == "unknown_url"


def test_a_number_too_large_for_a_double_is_named() -> None:
    with pytest.raises(WireError) as caught:
        parse_request(b'{"model": "demo", "temperature": 1e999, "messages": []}')

    assert caught.value.message == (
        "The body holds the number 1e999, too large for a double: JSON numbers must be finite."
    )


@pytest.mark.parametrize(
    ("part", "code", "message"),
    [
        ({"type": "text"}, "missing_required_parameter", "a text part needs its 'text' field."),
        ({"type": "text", "text": 5}, "invalid_type", "must be a string."),
    ],
)
def test_a_text_part_without_a_string_text_says_so(
    part: dict[str, Any], code: str, message: str
) -> None:
    from openai_api.wire import message_content, part_text

    for read in (message_content, part_text):
        with pytest.raises(WireError) as caught:
            read([{"type": "text", "text": "hi"}, part], where="messages.0.content")

        assert (caught.value.status, caught.value.code) == (400, code)
        assert caught.value.param == "messages.0.content.1.text"
        assert message in caught.value.message
        assert "Unsupported" not in caught.value.message
