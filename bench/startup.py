"""Start-up time of the embedded default (docs/architecture.md §10: ``server_ready_s`` ≤ 10 s).

Starts ``manage.py runlocal`` as a subprocess on a *warm* data directory (one that a
previous start initialised; the first run of this script makes one and does not count)
and measures, from the moment the command is launched:

* ``server_ready_s`` — until HTTP (``/health``), a WebSocket handshake on ``/ws/chat/``,
  PostgreSQL, Redis and Vault all answer at the same time;
* ``llm_ready_s`` — until the local model answers a one-token completion;
* ``idle_rss_mb`` — the resident memory of the web server (Daphne) process, idle, 3 s
  after both are ready (docs/architecture.md §10: ≤ 300).

Then it stops runlocal with SIGINT (``stop_s``). With ``--runs N`` it prints medians.

    .venv/bin/python bench/startup.py [--runs 3] [--data-dir bench/out/startup-var]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import psycopg
import redis

BASE_DIR = Path(__file__).resolve().parent.parent
SERVICE_VARIABLES = (
    "DATABASE_URL",
    "REDIS_URL",
    "VAULT_ADDR",
    "VAULT_TOKEN",
    "VAULT_ADMIN_TOKEN",
    "VAULT_ROLE_ID",
    "VAULT_SECRET_ID",
    "LLM_LOCAL_API_BASE",
    "SECRET_KEY",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARIABLES}
    env["OPENMATES_DATA_DIR"] = str(data_dir)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as output:
        return subprocess.Popen(
            [sys.executable, "manage.py", "runlocal", "--port", str(port)],
            cwd=BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def recorded(data_dir: Path, since: float) -> dict[str, str]:
    """services.json once this start has rewritten it (else empty)."""
    path = data_dir / "services.json"
    try:
        if path.stat().st_mtime < since:
            return {}
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def http_answers(port: int) -> bool:
    return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200


def websocket_answers(port: int) -> bool:
    """The WebSocket stack answered the handshake (101, or a refusal from the app)."""
    with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
        sock.sendall(
            (
                "GET /ws/chat/ HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{port}\r\n"
                f"Origin: http://127.0.0.1:{port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        status = sock.recv(64).split(b"\r\n", 1)[0]
    return status.startswith(b"HTTP/1.1 101") or status.startswith(b"HTTP/1.1 403")


def database_answers(services: dict[str, str]) -> bool:
    with psycopg.connect(services["DATABASE_URL"], connect_timeout=1) as conn:
        return conn.execute("SELECT 1").fetchone() == (1,)


def redis_answers(services: dict[str, str]) -> bool:
    return bool(redis.Redis.from_url(services["REDIS_URL"], socket_timeout=1).ping())


def vault_answers(services: dict[str, str]) -> bool:
    # 200 = initialised, unsealed and active.
    return httpx.get(f"{services['VAULT_ADDR']}/v1/sys/health", timeout=1).status_code == 200


def llm_answers(services: dict[str, str]) -> bool:
    try:
        response = httpx.post(
            f"{services['LLM_LOCAL_API_BASE']}/completions",
            json={"model": "gemma-3-270m", "prompt": "Hello", "max_tokens": 1},
            timeout=30,
        )
    except httpx.HTTPError:
        return False
    return response.status_code == 200 and bool(response.json().get("choices"))


def server_answers(port: int, services: dict[str, str]) -> bool:
    """HTTP, WebSocket, PostgreSQL, Redis and Vault all answer now."""
    probes: list[Callable[[], bool]] = [
        lambda: http_answers(port),
        lambda: websocket_answers(port),
        lambda: database_answers(services),
        lambda: redis_answers(services),
        lambda: vault_answers(services),
    ]
    for probe in probes:
        try:
            if not probe():
                return False
        except Exception:
            return False
    return True


def web_server_rss_mb(runner: int) -> float:
    """Resident memory (MiB) of the Daphne process among ``runner``'s descendants."""
    for child in psutil.Process(runner).children(recursive=True):
        if "daphne" in " ".join(child.cmdline()):
            return float(child.memory_info().rss) / 2**20
    raise SystemExit("no Daphne process found under runlocal")


def measure(data_dir: Path, timeout_s: float) -> tuple[float, float, float, float]:
    """One start: (server_ready_s, llm_ready_s, stop_s, idle_rss_mb)."""
    port = free_port()
    since = time.time() - 1
    started = time.monotonic()
    log = data_dir.parent / "startup.log"
    process = start(data_dir, port, log)
    server_ready = llm_ready = None
    try:
        while time.monotonic() - started < timeout_s:
            if process.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                raise SystemExit(f"runlocal exited with code {process.returncode}:\n{tail}")
            services = recorded(data_dir, since)
            if services and server_ready is None and server_answers(port, services):
                server_ready = time.monotonic() - started
            if llm_ready is None and services.get("LLM_LOCAL_API_BASE") and llm_answers(services):
                llm_ready = time.monotonic() - started
            if server_ready is not None and llm_ready is not None:
                break
            time.sleep(0.02)
        else:
            raise SystemExit(f"not ready within {timeout_s:.0f} s")
        time.sleep(3)
        idle_rss_mb = web_server_rss_mb(process.pid)
    finally:
        stopping = time.monotonic()
        process.send_signal(signal.SIGINT)
        process.wait(60)
        stop_s = time.monotonic() - stopping
    assert server_ready is not None
    assert llm_ready is not None
    return server_ready, llm_ready, stop_s, idle_rss_mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=BASE_DIR / "bench/out/startup-var")
    parser.add_argument("--timeout", type=float, default=300)
    options = parser.parse_args()
    data_dir = options.data_dir.resolve()
    if not (data_dir / "openbao" / "tokens.json").exists():
        server, llm, _, _ = measure(data_dir, options.timeout)
        print(f"(warm-up: first start in {data_dir}: server {server:.1f} s, LLM {llm:.1f} s)")
    results = [measure(data_dir, options.timeout) for _ in range(options.runs)]
    for index, name in enumerate(("server_ready_s", "llm_ready_s", "stop_s")):
        print(f"{name}: {statistics.median(result[index] for result in results):.2f} s")
    print(f"idle_rss_mb: {statistics.median(result[3] for result in results):.0f} MiB")


if __name__ == "__main__":
    main()
