"""What the turn runtime adds between a WebSocket frame and the answer (DESIGN.md §10).

Starts everything in a temporary directory: embedded PostgreSQL and Redis, a dev
OpenBao, an OpenAI-compatible model server on loopback that answers instantly (its
stream is paced only when the prompt asks for it), and a real Daphne serving
``openmates.asgi:application``. Real WebSocket clients (``websockets``, with an ``Origin``
header and a session cookie) then drive ``/ws/chat/``.

Prints:

    follow_up_overhead_p50: … ms         message.send frame out → first stream.delta in
    follow_up_overhead_p99: … ms         (a follow-up in a cached chat; instant model)
    relay_tokens_per_s: …                model tokens relayed to one client per second
                                         (one token per SSE event from the model)
    relay_tokens_per_s_8_token_chunks: … the same, 8 tokens per event
    inter_frame_gap_p99_200_streams: … ms  gaps between a client's frames, 200 at once
    inter_frame_gap_p99_500_streams: … ms  the same with 500 concurrent streams
                                         (each stream: --stream-tokens tokens, the model
                                         pausing --stream-gap-ms after each)

Usage: ``.venv/bin/python bench/turn_overhead.py [--samples 200] [--tokens 20000]
[--streams 200,500]``
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.instant_model import serve_instant_model

ROOT = Path(__file__).resolve().parent.parent
SETTLE_S = 3.0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _uuid7() -> str:
    from pipeline.ids import new_id

    return new_id()


# --- the instant model ------------------------------------------------------------------


# --- services, data, server -----------------------------------------------------------------


def _start_services(root: Path, model_port: int) -> list[Any]:
    from openmates.runlocal.openbao import EmbeddedOpenBao
    from openmates.runlocal.postgres import EmbeddedPostgres
    from openmates.runlocal.redis import EmbeddedRedis

    postgres = EmbeddedPostgres(root / "postgres")
    os.environ["DATABASE_URL"] = postgres.start()
    redis_server = EmbeddedRedis(root / "redis", persistent=False)
    os.environ["REDIS_URL"] = redis_server.start()
    bao = EmbeddedOpenBao(root / "openbao", mode="dev")
    bao.start()
    os.environ.update(bao.configure())
    base = f"http://127.0.0.1:{model_port}/v1"
    os.environ.update(
        {
            "OPENMATES_DATA_DIR": str(root / "var"),
            # Production mode, as runlocal runs Daphne (DEBUG wraps every SQL query in a
            # recording cursor); the bench's sessions need the server's SECRET_KEY.
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "SESSION_COOKIE_SECURE": "false",
            "CSRF_COOKIE_SECURE": "false",
            "DJANGO_SETTINGS_MODULE": "openmates.settings",
            "LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
            "PIPELINE_FRAMES_PER_10S": "1000000",
            "PIPELINE_TURNS_PER_MINUTE": "1000000",
            **{f"LLM_{tier}_MODEL": "openai/instant" for tier in ("FAST", "STANDARD", "HEAVY")},
            **{f"LLM_{tier}_API_BASE": base for tier in ("FAST", "STANDARD", "HEAVY")},
        }
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return [bao, redis_server, postgres]


def _create_users(count: int) -> list[tuple[str, str]]:
    """``count`` users, each with a chat of the bench instance: ``[(cookie, chat_id)]``."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.cached_db import SessionStore

    from chats.services import chat_create
    from instances.models import Instance
    from instances.services import instance_create
    from openmates import vault

    owner = User.objects.create_user("bench-owner")
    instance = instance_create(slug="bench", name="Bench", owner=owner)
    Instance.objects.filter(pk=instance.pk).update(
        model_preprocessing_enabled=False, follow_ups_enabled=False, memory_enabled=False
    )
    instance.refresh_from_db()
    users = []
    for n in range(count):
        user = User.objects.create_user(f"bench{n}")
        vault.ensure_key(vault.user_key_name(user.pk))
        session = SessionStore()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session.create()
        envelope = "AQ" + "A" * 70
        chat = chat_create(
            user=user, chat_id=_uuid7(), instance=instance, encrypted_chat_key=envelope
        )
        users.append((f"{settings.SESSION_COOKIE_NAME}={session.session_key}", chat.pk))
    return users


def _start_daphne(port: int, log: Path) -> subprocess.Popen[bytes]:
    # The server's log goes to a file: an unread pipe fills up and freezes the server.
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "openmates.asgi:application",
        ],
        cwd=ROOT,
        env=dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("daphne did not start")


# --- clients ------------------------------------------------------------------------------


class Client:
    def __init__(self, port: int, cookie: str, chat_id: str) -> None:
        self.url = f"ws://127.0.0.1:{port}/ws/chat/"
        self.headers = {"Origin": f"http://127.0.0.1:{port}", "Cookie": cookie}
        self.chat_id = chat_id
        self.socket: Any = None

    async def open(self) -> None:
        import websockets

        self.socket = await websockets.connect(
            self.url,
            additional_headers=self.headers,
            max_size=None,
            open_timeout=120,
            ping_interval=None,
        )
        frame = json.loads(await self.socket.recv())
        assert frame["type"] == "task.active", frame

    async def turn(self, content: str) -> tuple[float, list[float], dict[str, Any]]:
        """Send a message; return (first-delta latency s, delta arrival times, stream.done)."""
        started = time.perf_counter()
        await self.socket.send(
            json.dumps(
                {
                    "type": "message.send",
                    "chat_id": self.chat_id,
                    "message_id": _uuid7(),
                    "content": content,
                }
            )
        )
        arrivals: list[float] = []
        while True:
            frame = json.loads(await asyncio.wait_for(self.socket.recv(), 120))
            if frame["type"] == "stream.delta":
                arrivals.append(time.perf_counter())
            elif frame["type"] == "stream.done":
                if frame["status"] != "done":
                    raise RuntimeError(f"turn ended {frame['status']}")
                return (arrivals[0] - started if arrivals else float("nan")), arrivals, frame
            elif frame["type"] == "error":
                raise RuntimeError(f"error frame: {frame}")


async def _follow_up_overhead(client: Client, samples: int) -> list[float]:
    await client.turn("Hello there tokens=3")  # makes every later message a follow-up
    latencies = []
    for _ in range(samples + 10):
        first, _, _ = await client.turn("And a follow-up question tokens=3")
        latencies.append(first * 1000)
    return latencies[10:]


async def _relay(client: Client, tokens: int, per_chunk: int = 1) -> float:
    _, arrivals, done = await client.turn(f"Write a lot tokens={tokens} per_chunk={per_chunk}")
    assert done["usage"]["completion_tokens"] == tokens
    return tokens / max(arrivals[-1] - arrivals[0], 1e-9)


async def _inter_frame_gaps(clients: list[Client], tokens: int, gap_ms: int) -> list[float]:
    prompt = f"Stream slowly tokens={tokens} gap_ms={gap_ms}"
    results = await asyncio.gather(*(c.turn(prompt) for c in clients))
    gaps: list[float] = []
    for _, arrivals, _ in results:
        gaps += [(b - a) * 1000 for a, b in itertools.pairwise(arrivals)]
    return gaps


async def _drive(port: int, users: list[tuple[str, str]], args: argparse.Namespace) -> None:
    first = Client(port, *users[0])
    await first.open()
    latencies = await _follow_up_overhead(first, args.samples)
    print(f"follow_up_overhead_p50: {_percentile(latencies, 0.5):.1f} ms", flush=True)
    print(f"follow_up_overhead_p99: {_percentile(latencies, 0.99):.1f} ms", flush=True)
    rate = await _relay(first, args.tokens)
    print(f"relay_tokens_per_s: {rate:,.0f}", flush=True)
    # The same with the model sending 8 tokens per SSE event: LiteLLM's per-event cost
    # bounds the line above; this one shows what the relay carries when it does not.
    rate = await _relay(first, args.tokens * 4, per_chunk=8)
    print(f"relay_tokens_per_s_8_token_chunks: {rate:,.0f}", flush=True)
    for streams in args.streams:
        # Each figure on its own: let the previous phase's after-work (post-processing,
        # LiteLLM's end-of-stream rebuild of a 10,000-chunk answer) finish first.
        await asyncio.sleep(SETTLE_S)
        clients = [Client(port, *users[n]) for n in range(streams)]
        for batch in range(0, streams, 50):
            await asyncio.gather(*(c.open() for c in clients[batch : batch + 50]))
        gaps = await _inter_frame_gaps(clients, args.stream_tokens, args.stream_gap_ms)
        print(
            f"inter_frame_gap_p99_{streams}_streams: {_percentile(gaps, 0.99):.1f} ms", flush=True
        )
        await asyncio.gather(*(c.socket.close() for c in clients))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--stream-tokens", type=int, default=40, help="tokens per stream")
    parser.add_argument("--stream-gap-ms", type=int, default=100, help="model pause per token")
    parser.add_argument(
        "--streams", type=lambda s: [int(x) for x in s.split(",")], default=[200, 500]
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="openmates-bench-turn-"))
    model_port, server_port = _free_port(), _free_port()
    model = multiprocessing.Process(target=serve_instant_model, args=(model_port,), daemon=True)
    model.start()
    services: list[Any] = []
    daphne = None
    try:
        services = _start_services(root, model_port)
        users = _create_users(max([1, *args.streams]))
        daphne = _start_daphne(server_port, root / "daphne.log")
        asyncio.run(_drive(server_port, users, args))
    except BaseException:
        log = root / "daphne.log"
        if log.exists():
            sys.stderr.write(log.read_text(errors="replace")[-4000:])
        raise
    finally:
        if daphne is not None:
            daphne.terminate()
            try:
                daphne.wait(timeout=10)
            except subprocess.TimeoutExpired:
                daphne.kill()
        model.terminate()
        for service in services:
            service.destroy()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
