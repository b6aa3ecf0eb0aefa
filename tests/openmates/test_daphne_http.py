"""Daphne's HTTP side as ``openmates.daphne_http`` sets it up: an over-long request line or
header line gets 414 / 431, a malformed request 400 ``bad_request``, and a body over
``DATA_UPLOAD_MAX_MEMORY_SIZE`` 413 before it is read, each with the JSON error body and
the connection closed, where Twisted dropped the connection, answered without a body, or
read the whole body first.

Each check runs in a fresh interpreter: loading Daphne's server module installs a Twisted
reactor, which the test process must not get.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from django.conf import settings

from openmates.daphne_http import answer_for_long_line, too_large_answer
from openmates.settings import BASE_DIR

SCRIPT = """
import json
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openmates.settings")
import django

django.setup()
import daphne.server  # noqa: F401  (as Daphne's command line has it loaded)
from daphne import http_protocol
from twisted.internet.testing import StringTransport
from twisted.web import http

from openmates import daphne_http


class Server:
    def protocol_connected(self, protocol):
        pass

    def protocol_disconnected(self, protocol):
        pass


def answer(*pieces):
    protocol = http_protocol.HTTPFactory(Server()).buildProtocol(("127.0.0.1", 1))
    transport = StringTransport()
    protocol.makeConnection(transport)
    for piece in pieces:
        protocol.dataReceived(piece)
    head, _, body = transport.value().partition(b"\\r\\n\\r\\n")
    status = head.split(b"\\r\\n", 1)[0].decode()
    return status, body.decode(), transport.disconnecting


long_path = b"GET /" + b"a" * 20000 + b" HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n"
long_header = b"GET / HTTP/1.1\\r\\nHost: x\\r\\nX-Big: " + b"b" * 20000 + b"\\r\\n\\r\\n"
headers = b"".join(b"X-%d: y\\r\\n" % n for n in range(600))
many_headers = b"GET / HTTP/1.1\\r\\n" + headers + b"\\r\\n"
v1 = b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\n"
declared = v1 + b"Content-Length: 99999999\\r\\n\\r\\n{}"
small = b"POST /api/chats/ HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 1000\\r\\n\\r\\n{}"
chunk = b"%x\\r\\n" % (1 << 20) + b"z" * (1 << 20) + b"\\r\\n"
chunked = b"POST /api/chats/ HTTP/1.1\\r\\nHost: x\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n"
cases = {
    "long_path_before": answer(long_path),
    "many_headers_before": answer(many_headers),
}
daphne_http.install()
cases.update(
    long_path=answer(long_path),
    long_header=answer(long_header),
    many_headers=answer(many_headers),
    declared=answer(declared),
    small=answer(small),
    chunked_within=answer(chunked, chunk, chunk),
    chunked_past=answer(chunked, *[chunk] * 5),
)
print(json.dumps(cases))
"""


def _cases() -> dict[str, list[object]]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_refusals_are_answered_with_the_json_contract_and_close_the_connection() -> None:
    cases = _cases()

    # Twisted's own: a dropped connection, a 400 without a body.
    assert cases["long_path_before"] == ["", "", True]
    assert cases["many_headers_before"] == ["HTTP/1.1 400 Bad Request", "", True]
    assert cases["long_path"][0] == "HTTP/1.1 414 URI Too Long"
    assert cases["long_header"][0] == "HTTP/1.1 431 Request Header Fields Too Large"
    status, body, closed = cases["many_headers"]
    assert (status, json.loads(str(body))["code"], closed) == (
        "HTTP/1.1 400 Bad Request",
        "bad_request",
        True,
    )
    status, body, closed = cases["declared"]
    assert status == "HTTP/1.1 413 Content Too Large"
    assert json.loads(str(body))["error"]["code"] == "request_too_large"  # /v1/: OpenAI's shape
    assert closed is True
    # Within the limit nothing is answered yet: the rest of the body is awaited.
    assert cases["small"] == ["", "", False]
    assert cases["chunked_within"] == ["", "", False]
    status, body, closed = cases["chunked_past"]
    assert (status, json.loads(str(body))["code"], closed) == (
        "HTTP/1.1 413 Content Too Large",
        "request_too_large",
        True,
    )


def test_the_answers_name_their_code_and_length() -> None:
    response = answer_for_long_line(b"X-Big: " + b"b" * 100)

    head, body = response.split(b"\r\n\r\n", 1)
    lines = head.splitlines()
    assert lines[0] == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert b"Connection: close" in lines
    assert f"Content-Length: {len(body)}".encode() in lines
    assert json.loads(body) == {
        "code": "headers_too_large",
        "message": "A request header is too long.",
    }
    line = answer_for_long_line(b"POST /v1/" + b"x" * 50)
    assert json.loads(line.split(b"\r\n\r\n")[1])["code"] == "uri_too_long"
    too_large = json.loads(too_large_answer(b"/api/chats/").split(b"\r\n\r\n")[1])
    assert too_large["code"] == "request_too_large"
    assert str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE) in too_large["message"]
