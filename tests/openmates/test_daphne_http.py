"""Daphne's HTTP channel as ``openmates.daphne_http`` sets it up: an over-long request line
or header line gets 414 / 431 with the JSON error body, not a silent reset.

Each check runs in a fresh interpreter: loading Daphne's server module installs a Twisted
reactor, which the test process must not get.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from openmates.daphne_http import answer_for_long_line
from openmates.settings import BASE_DIR

SCRIPT = """
import daphne.server  # noqa: F401  (as Daphne's command line has it loaded)
from twisted.internet.testing import StringTransport
from twisted.web import http

from openmates import daphne_http


def answer(data):
    channel = http.HTTPChannel()
    transport = StringTransport()
    channel.makeConnection(transport)
    channel.dataReceived(data)
    return transport.value().split(b"\\r\\n", 1)[0].decode(), transport.disconnecting


long_path = b"GET /" + b"a" * 20000 + b" HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"
long_header = b"GET / HTTP/1.1\\r\\nHost: x\\r\\nX-Big: " + b"b" * 20000 + b"\\r\\n\\r\\n"
print(answer(long_path))
daphne_http.install()
print(answer(long_path))
print(answer(long_header))
print(answer(b"GET / HTTP/1.1\\r\\nHost: x\\r\\n" + b"X-Small: c\\r\\n" * 3))
"""


def test_an_over_long_line_is_answered_before_the_connection_closes() -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    assert done.stdout.strip().splitlines() == [
        "('', True)",  # Twisted's own: dropped without an answer
        "('HTTP/1.1 414 URI Too Long', True)",
        "('HTTP/1.1 431 Request Header Fields Too Large', True)",
        "('', False)",  # a request within the limits waits for the rest of its headers
    ]


def test_the_answer_is_the_json_error_contract() -> None:
    response = answer_for_long_line(b"X-Big: " + b"b" * 100)

    head, body = response.split(b"\r\n\r\n", 1)
    assert head.splitlines()[0] == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert b"Connection: close" in head.splitlines()
    assert f"Content-Length: {len(body)}".encode() in head.splitlines()
    assert json.loads(body) == {
        "code": "headers_too_large",
        "message": "A request header is too long.",
    }
    assert (
        json.loads(answer_for_long_line(b"POST /v1/" + b"x" * 50).split(b"\r\n\r\n")[1])["code"]
        == "uri_too_long"
    )
