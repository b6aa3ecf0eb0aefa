"""web_search and weather against a loopback stand-in for their HTTP APIs."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from skills.executor import execute_tool
from skills.registry import ToolContext

REQUESTS: list[dict[str, Any]] = []


class _Api(BaseHTTPRequestHandler):
    def _reply(self, code: int, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length))
        REQUESTS.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
        if self.headers.get("Authorization") != "Bearer tvly-good":
            self._reply(401, {"detail": "bad key"})
            return
        results = [
            {"title": f"Result {i}", "url": f"https://example.test/{i}", "content": "text"}
            for i in range(body["max_results"])
        ]
        self._reply(200, {"results": results})

    def do_GET(self) -> None:
        query = parse_qs(urlsplit(self.path).query)
        REQUESTS.append({"path": urlsplit(self.path).path, **query})
        if query["q"] == ["Nowhere"]:
            self._reply(404, {"message": "city not found"})
            return
        self._reply(
            200,
            {
                "name": "Berlin",
                "main": {"temp": 21.5, "feels_like": 20.9, "humidity": 40},
                "wind": {"speed": 3.2},
                "weather": [{"description": "clear sky"}],
            },
        )

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def api_base(settings) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    settings.SKILLS_WEB_SEARCH_API_BASE = base
    settings.SKILLS_WEATHER_API_BASE = base
    REQUESTS.clear()
    yield base
    server.shutdown()
    server.server_close()


async def test_web_search_sends_the_key_and_returns_results(api_base):
    context = ToolContext(instance_id=1, secrets={"TAVILY_API_KEY": "tvly-good"})

    result = await execute_tool("web_search", {"query": "openmates", "max_results": 2}, context)

    assert result["success"] is True
    assert [r["url"] for r in result["result"]["results"]] == [
        "https://example.test/0",
        "https://example.test/1",
    ]
    assert REQUESTS[0]["path"] == "/search"
    assert REQUESTS[0]["query"] == "openmates"


async def test_web_search_reports_a_rejected_key(api_base):
    context = ToolContext(instance_id=1, secrets={"TAVILY_API_KEY": "tvly-bad"})

    result = await execute_tool("web_search", {"query": "x"}, context)

    assert result == {"success": False, "error": "search failed: HTTP 401"}
    assert REQUESTS[0]["max_results"] == 5


async def test_web_search_without_its_secret_does_not_call_out(api_base):
    result = await execute_tool("web_search", {"query": "x"}, ToolContext(instance_id=1))

    assert result["success"] is False
    assert "TAVILY_API_KEY" in result["error"]
    assert REQUESTS == []


async def test_weather_returns_current_conditions(api_base):
    context = ToolContext(instance_id=1, secrets={"OPENWEATHERMAP_API_KEY": "owm"})

    result = await execute_tool("weather", {"location": "Berlin,DE"}, context)

    assert result == {
        "success": True,
        "result": {
            "location": "Berlin",
            "temperature": 21.5,
            "feels_like": 20.9,
            "temperature_unit": "°C",
            "humidity_percent": 40,
            "wind_speed": 3.2,
            "wind_speed_unit": "m/s",
            "conditions": "clear sky",
        },
    }
    assert REQUESTS[0]["appid"] == ["owm"]
    assert REQUESTS[0]["units"] == ["metric"]


async def test_weather_for_an_unknown_place(api_base):
    context = ToolContext(instance_id=1, secrets={"OPENWEATHERMAP_API_KEY": "owm"})

    result = await execute_tool("weather", {"location": "Nowhere", "units": "imperial"}, context)

    assert result == {"success": False, "error": "no weather found for 'Nowhere'"}
