"""What the turn runtime adds between a WebSocket frame and the answer (docs/architecture.md §10).

Starts everything in a temporary directory: embedded PostgreSQL and Redis, a dev
OpenBao, an OpenAI-compatible model server on loopback that answers instantly (its
stream is paced only when the prompt asks for it), a real Daphne serving
``openmates.asgi:application`` and, with the same flags, a second Daphne serving the
bare-Channels floor (``bench/floor_asgi.py``: a minimal consumer answering the same
frames at the same pacing). Real WebSocket clients (``websockets``, with an ``Origin``
header and a session cookie) then drive ``/ws/chat/`` on both. Every figure is taken
beside its reference in the same run; progress goes to stderr. Loopback only, and every
wait is bounded (a turn silent for 60 s counts as failed), so it stops by itself.

Prints:

    follow_up_overhead_p50: … ms         message.send frame out → first stream.delta in
    follow_up_overhead_p99: … ms         (a follow-up in a cached chat; instant model;
                                         sent after the last turn's postprocess.done,
                                         or at its stream.done with --back-to-back)
    litellm_stream_first_token_p50: … ms LiteLLM's acompletion(stream=True) from this
                                         process to the same model with the messages the
                                         turn just sent it, to its first content chunk
                                         (alternating with the turns above)
    pipeline_added_p50: … ms             follow_up_overhead_p50 minus the line above
    relay_tokens_per_s: …                model tokens relayed to one client per second
                                         (one token per SSE event from the model)
    relay_tokens_per_s_8_token_chunks: … the same, 8 tokens per event
    inter_frame_gap_p99_N_streams: … ms  gaps between a client's deltas, N streams at once
                                         (each: --stream-tokens tokens, the model pausing
                                         --stream-gap-ms after each); N in --streams
    inter_frame_gap_p99_N_streams_floor: … ms   the same on the bare-Channels floor
    inter_frame_gap_ratio_N_streams: …x  the two lines above divided
    failed_turns_N_streams: …            turns that got an error frame or ended other than
                                         done (or not at all); then their codes, if any
    first_delta_p50_N_streams: … ms      message.send → first delta in that phase, with the
                                         floor's (how long the burst of starts took)
    server_cpu_ms_per_turn: … ms         CPU (user + system) the server process spent per
    server_cpu_ms_per_turn_floor: … ms   follow-up turn of the first phase; the floor's for
                                         as many of the same turns
    server_cpu_us_per_token: … µs        CPU per relayed token while relaying --tokens one
    server_cpu_us_per_token_floor: … µs  token per model event (the floor: the same count)
    server_cpu_ms_per_turn_N_streams: …  CPU per turn of the N-streams phase (each
                                         --stream-tokens tokens), with the floor's beside it

CPU seconds of the server process (``psutil``'s ``cpu_times``, read before and after a
phase) are what a loaded machine distorts least: wall-clock gaps there include other
jobs' time slices, CPU time only the server's own work.

Usage: ``.venv/bin/python bench/turn_overhead.py [--samples 200] [--tokens 20000]
[--streams 200,500] [--cpu-turns 100] [--back-to-back]`` (``--streams ""`` skips the
concurrent phases)
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
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.instant_model import serve_instant_model

ROOT = Path(__file__).resolve().parent.parent
SETTLE_S = 3.0
# Longest wait for a turn's post-processing to end (the instant model answers at once).
POSTPROCESS_WAIT_S = 10.0
SERVER_APP = "openmates.asgi:application"
# Same Daphne flags, same clients, same frames; no pipeline (bench/floor_asgi.py).
FLOOR_APP = "bench.floor_asgi:application"
TRACE_APP = "bench.trace_asgi:application"
# Follow-up questions, each sent with its sample's number so that no two are the same
# text (a repeated text would find its sentence vectors and language cached, which a
# user's next message never does); "tokens=3" is the instant model's directive.
FOLLOW_UP_QUESTIONS = (
    "And how would that change if the budget were halved?",
    "Could you give me a shorter version of that?",
    "Was bedeutet das für ein kleines Team?",
    "What are the risks of doing it that way?",
    "Et si on commençait plutôt par la deuxième étape ?",
    "Which of those options would you pick, and why?",
)


def follow_up_question(number: int) -> str:
    """The ``number``-th follow-up question of the bench (a text no earlier one had)."""
    return f"{FOLLOW_UP_QUESTIONS[number % len(FOLLOW_UP_QUESTIONS)]} ({number}) tokens=3"


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
            # LiteLLM in this process too: its price map from the package, no download.
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
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
    from instances.models import Instance, InstanceMember
    from instances.services import instance_create, instance_member_set
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
        instance_member_set(instance=instance, user=user, role=InstanceMember.Role.MEMBER)
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


def _start_daphne(port: int, log: Path, app: str) -> subprocess.Popen[bytes]:
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
            app,
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


class TurnFailedError(RuntimeError):
    """A turn of a phase that must succeed ended with an error frame or a bad status."""


@dataclass
class Outcome:
    """One turn as its client saw it: ``first`` s from send to the first delta (NaN
    without one), delta arrival times (``perf_counter`` s), the final status (``done``,
    ``failed``, …, or ``timeout``/``closed`` when no ``stream.done`` came) and the codes
    of the ``error`` frames received meanwhile."""

    first: float
    arrivals: list[float]
    status: str
    errors: list[str] = field(default_factory=list)
    done: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status != "done" or bool(self.errors)


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
        frame = json.loads(await asyncio.wait_for(self.socket.recv(), 120))
        assert frame["type"] == "task.active", frame

    async def turn(self, content: str, *, wait_s: float = 120, settle: bool = False) -> Outcome:
        """Send a message and read frames until ``stream.done`` (or ``wait_s`` of silence);
        with ``settle``, on to the turn's ``postprocess.done`` (``POSTPROCESS_WAIT_S``)."""
        started = time.perf_counter()
        message_id = _uuid7()
        await self.socket.send(
            json.dumps(
                {
                    "type": "message.send",
                    "chat_id": self.chat_id,
                    "message_id": message_id,
                    "content": content,
                }
            )
        )
        arrivals: list[float] = []
        errors: list[str] = []
        status = "timeout"
        done: dict[str, Any] = {}
        task_id = None
        try:
            while True:
                frame = json.loads(await asyncio.wait_for(self.socket.recv(), wait_s))
                kind = frame["type"]
                if kind == "message.accepted" and frame.get("message_id") == message_id:
                    task_id = frame["task_id"]
                elif task_id is not None and frame.get("task_id") not in (None, task_id):
                    _say(f"a frame of another turn: {json.dumps(frame)[:300]}")
                elif kind == "stream.delta":
                    arrivals.append(time.perf_counter())
                elif kind == "error":
                    errors.append(str(frame.get("code")))
                elif kind == "stream.done":
                    status, done = str(frame["status"]), frame
                    break
            if settle and status == "done":
                await self._postprocess_done(task_id)
        except TimeoutError:
            status = "timeout"
        except Exception as exc:  # the socket closed under load: a failed turn as well
            code = getattr(getattr(exc, "rcvd", None), "code", None)
            status = f"closed:{type(exc).__name__}:{code}"
        first = arrivals[0] - started if arrivals else float("nan")
        return Outcome(first, arrivals, status, errors, done)

    async def _postprocess_done(self, task_id: str | None) -> None:
        """Read frames until the ``postprocess.done`` of ``task_id`` (TimeoutError after
        ``POSTPROCESS_WAIT_S``: a turn whose post-processing never ends fails too)."""
        async with asyncio.timeout(POSTPROCESS_WAIT_S):
            while True:
                frame = json.loads(await self.socket.recv())
                if frame["type"] == "postprocess.done" and frame.get("task_id") == task_id:
                    return

    async def turn_ok(self, content: str, *, settle: bool = False) -> Outcome:
        outcome = await self.turn(content, settle=settle)
        if outcome.failed:
            raise TurnFailedError(f"turn ended {outcome.status}, errors {outcome.errors}")
        return outcome


async def _last_messages(api_base: str) -> list[dict[str, Any]]:
    """The messages of the model's last request (the server's latest turn sent them)."""
    import httpx

    async with httpx.AsyncClient() as http:
        body = (await http.get(f"{api_base}/last")).json()
    return list(body["messages"])


async def _litellm_first_token(api_base: str, messages: list[dict[str, Any]]) -> float:
    """Seconds from LiteLLM's ``acompletion(stream=True)`` to its first content chunk."""
    import litellm  # noqa: TID251 (the bench measures LiteLLM itself)

    started = time.perf_counter()
    response = await litellm.acompletion(
        model="openai/instant",
        api_base=api_base,
        api_key="bench",
        messages=messages,
        stream=True,
        num_retries=0,
    )
    first = float("nan")
    async for chunk in response:
        if first != first and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - started
    return first


async def _follow_up_overhead(
    client: Client, samples: int, api_base: str, *, settle: bool
) -> tuple[list[float], list[float]]:
    """Follow-up turns and bare LiteLLM streams, alternating: ``(turn ms, LiteLLM ms)``.
    With ``settle`` each turn's post-processing ends before the next is sent (a user reads
    the answer and its suggested follow-ups first); without, the next turn and the bare
    stream share the machine with the last turn's post-processing."""
    await client.turn_ok("Hello there tokens=3", settle=settle)  # later ones are follow-ups
    latencies, bare = [], []
    for number in range(samples + 10):
        outcome = await client.turn_ok(follow_up_question(number), settle=settle)
        latencies.append(outcome.first * 1000)
        # The same request the turn made (system prompt, the chat's history, question).
        messages = await _last_messages(api_base)
        bare.append(await _litellm_first_token(api_base, messages) * 1000)
    return latencies[10:], bare[10:]


async def _relay(client: Client, tokens: int, per_chunk: int = 1) -> float:
    outcome = await client.turn_ok(f"Write a lot tokens={tokens} per_chunk={per_chunk}")
    relayed = outcome.done["usage"]["completion_tokens"]
    if relayed != tokens:
        _say(f"the model sent {relayed} tokens of {tokens} ({outcome.done.get('finish_reason')})")
    return tokens / max(outcome.arrivals[-1] - outcome.arrivals[0], 1e-9)


async def _streams_phase(
    port: int, users: list[tuple[str, str]], streams: int, args: argparse.Namespace
) -> list[Outcome]:
    """``streams`` sockets each run one paced turn at once; every outcome, failed or not."""
    clients = [Client(port, *users[n]) for n in range(streams)]
    opened: list[Client] = []
    failed_opens = 0
    for batch in range(0, streams, 50):
        results = await asyncio.gather(
            *(c.open() for c in clients[batch : batch + 50]), return_exceptions=True
        )
        for client, result in zip(clients[batch : batch + 50], results, strict=True):
            if isinstance(result, BaseException):
                failed_opens += 1
            else:
                opened.append(client)
    prompt = f"Stream slowly tokens={args.stream_tokens} gap_ms={args.stream_gap_ms}"
    # Each turn's own silence limit bounds the phase: it cannot hang.
    outcomes = list(await asyncio.gather(*(c.turn(prompt, wait_s=60) for c in opened)))
    outcomes += [Outcome(float("nan"), [], "connect_failed")] * failed_opens
    await asyncio.gather(*(c.socket.close() for c in opened), return_exceptions=True)
    return outcomes


def _gaps_ms(outcomes: list[Outcome]) -> list[float]:
    gaps: list[float] = []
    for outcome in outcomes:
        gaps += [(b - a) * 1000 for a, b in itertools.pairwise(outcome.arrivals)]
    return gaps or [float("nan")]


def _server_errors(log: Path, lines: int = 60) -> None:
    """The server log's warnings and errors so far (why turns failed), on stderr."""
    text = log.read_text(errors="replace").splitlines() if log.exists() else []
    kept = [line for line in text if " WARNING " in line or " ERROR " in line]
    counts = Counter(line.split(" ", 2)[-1][:160] for line in kept)
    _say(f"server log: {len(kept)} warnings and errors, most frequent first:")
    for line, count in counts.most_common(lines // 4):
        print(f"#   {count:5d} x {line}", file=sys.stderr)
    start = next((n for n, line in enumerate(text) if line.startswith("Traceback")), None)
    if start is not None:
        _say("the first traceback:")
        for line in text[start : start + lines]:
            print(f"#   {line[:300]}", file=sys.stderr)


def _cpu_s(pid: int) -> float:
    """User plus system CPU seconds the process ``pid`` has used so far."""
    import psutil

    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


class CpuMeter:
    """CPU seconds a server process spends between :meth:`start` and :meth:`stop`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._started = 0.0

    def start(self) -> None:
        self._started = _cpu_s(self.pid)

    def stop(self) -> float:
        return _cpu_s(self.pid) - self._started


def _say(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


async def _cpu_per_turn(client: Client, turns: int, meter: CpuMeter) -> float:
    """CPU ms the server spends per follow-up turn, ``turns`` of them one after another."""
    meter.start()
    for number in range(turns):
        await client.turn_ok(follow_up_question(100_000 + number))
    return meter.stop() * 1000 / turns


async def _cpu_per_token(client: Client, tokens: int, meter: CpuMeter) -> tuple[float, float]:
    """``(tokens per s, CPU µs per token)`` of one relay of ``tokens`` single tokens."""
    meter.start()
    rate = await _relay(client, tokens)
    return rate, meter.stop() * 1e6 / tokens


async def _first_phase(
    port: int, floor_port: int, users: list[tuple[str, str]], args: argparse.Namespace
) -> Client:
    first = Client(port, *users[0])
    await first.open()
    floor = Client(floor_port, *users[0])
    await floor.open()
    _say(f"follow-up turns and bare LiteLLM streams, alternating, {args.samples} each")
    latencies, bare = await _follow_up_overhead(
        first, args.samples, args.api_base, settle=not args.back_to_back
    )
    turn_p50, bare_p50 = _percentile(latencies, 0.5), _percentile(bare, 0.5)
    print(f"follow_up_overhead_p50: {turn_p50:.1f} ms", flush=True)
    print(f"follow_up_overhead_p99: {_percentile(latencies, 0.99):.1f} ms", flush=True)
    print(f"litellm_stream_first_token_p50: {bare_p50:.1f} ms", flush=True)
    print(f"pipeline_added_p50: {turn_p50 - bare_p50:.1f} ms", flush=True)
    _say(f"CPU per turn: {args.cpu_turns} follow-up turns on the server and on the floor")
    turn_ms = await _cpu_per_turn(first, args.cpu_turns, args.server_cpu)
    floor_ms = await _cpu_per_turn(floor, args.cpu_turns, args.floor_cpu)
    print(f"server_cpu_ms_per_turn: {turn_ms:.2f} ms", flush=True)
    print(f"server_cpu_ms_per_turn_floor: {floor_ms:.2f} ms", flush=True)
    _say(f"relaying {args.tokens} tokens")
    rate, token_us = await _cpu_per_token(first, args.tokens, args.server_cpu)
    _, floor_us = await _cpu_per_token(floor, args.tokens, args.floor_cpu)
    await floor.socket.close()
    print(f"relay_tokens_per_s: {rate:,.0f}", flush=True)
    print(f"server_cpu_us_per_token: {token_us:.1f} µs", flush=True)
    print(f"server_cpu_us_per_token_floor: {floor_us:.1f} µs", flush=True)
    return first


async def _drive(
    port: int, floor_port: int, users: list[tuple[str, str]], args: argparse.Namespace
) -> None:
    first = await _first_phase(port, floor_port, users, args)
    # The same with the model sending 8 tokens per SSE event: LiteLLM's per-event cost
    # bounds the line above; this one shows what the relay carries when it does not.
    # Twice the tokens: the reply stays within PIPELINE_MAX_REPLY_BYTES (512 KiB).
    rate = await _relay(first, args.tokens * 2, per_chunk=8)
    print(f"relay_tokens_per_s_8_token_chunks: {rate:,.0f}", flush=True)
    await first.socket.close()
    for streams in args.streams:
        # Each figure on its own: let the previous phase's after-work (post-processing,
        # LiteLLM's end-of-stream rebuild of a 10,000-chunk answer) finish first.
        await asyncio.sleep(SETTLE_S)
        _say(f"{streams} concurrent streams on the server")
        args.server_cpu.start()
        outcomes = await _streams_phase(port, users, streams, args)
        server_cpu_ms = args.server_cpu.stop() * 1000
        await asyncio.sleep(SETTLE_S)
        _say(f"{streams} concurrent streams on the bare Channels floor")
        args.floor_cpu.start()
        floor = await _streams_phase(floor_port, users, streams, args)
        floor_cpu_ms = args.floor_cpu.stop() * 1000
        print(
            f"server_cpu_ms_per_turn_{streams}_streams: {server_cpu_ms / streams:.2f} ms"
            f" (floor {floor_cpu_ms / streams:.2f} ms)",
            flush=True,
        )
        gap, floor_gap = _percentile(_gaps_ms(outcomes), 0.99), _percentile(_gaps_ms(floor), 0.99)
        failed = [o for o in outcomes if o.failed]
        codes = Counter(code for o in failed for code in o.errors or [o.status])
        print(f"inter_frame_gap_p99_{streams}_streams: {gap:.1f} ms", flush=True)
        print(f"inter_frame_gap_p99_{streams}_streams_floor: {floor_gap:.1f} ms", flush=True)
        print(f"inter_frame_gap_ratio_{streams}_streams: {gap / floor_gap:.1f}x", flush=True)
        print(f"failed_turns_{streams}_streams: {len(failed)}", flush=True)
        # How long the burst of turn starts took (each user's first turn on this server:
        # its keys are cold): the early streams' gaps include the later ones' starts.
        firsts = [o.first * 1000 for o in outcomes if o.arrivals]
        floor_firsts = [o.first * 1000 for o in floor if o.arrivals]
        if firsts and floor_firsts:
            print(
                f"first_delta_p50_{streams}_streams: {_percentile(firsts, 0.5):.0f} ms"
                f" (floor {_percentile(floor_firsts, 0.5):.0f} ms)",
                flush=True,
            )
        if codes:
            print(f"failed_turn_codes_{streams}_streams: {dict(codes)}", flush=True)
            _server_errors(args.server_log)
        if any(o.failed for o in floor):
            print(f"failed_floor_turns_{streams}_streams: {sum(o.failed for o in floor)}")


def _print_trace(path: Path, turns: int) -> None:
    """The server's per-step timers (bench/trace_asgi.py), largest share of a turn first."""
    if not path.exists():
        _say("the traced server wrote no timings")
        return
    steps = json.loads(path.read_text())
    print(f"# per follow-up turn ({turns} turns): step, calls/turn, p50 ms, max ms, ms/turn")
    for label, step in sorted(steps.items(), key=lambda item: -item[1]["total_ms"]):
        calls, share = step["calls"] / turns, step["total_ms"] / turns
        p50, top = step["p50_ms"], step["max_ms"]
        print(f"#   {label:45} {calls:5.1f} {p50:8.3f} {top:8.1f} {share:8.3f}")
    timeline = [(label, step) for label, step in steps.items() if "from_ms" in step]
    print("# before the first delta: step, median start and end ms after message.send, calls")
    for label, step in sorted(timeline, key=lambda item: item[1]["from_ms"]):
        print(f"#   {label:45} {step['from_ms']:8.3f} {step['to_ms']:8.3f} {step['spans']:6d}")


def _streams_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--stream-tokens", type=int, default=40, help="tokens per stream")
    parser.add_argument("--stream-gap-ms", type=int, default=100, help="model pause per token")
    parser.add_argument("--streams", type=_streams_list, default=[200, 500])
    parser.add_argument("--cpu-turns", type=int, default=100, help="turns of the CPU figure")
    parser.add_argument(
        "--back-to-back",
        action="store_true",
        help="send each follow-up at the last one's stream.done, not its postprocess.done",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="serve bench/trace_asgi.py (timers around a turn's steps) and print its table",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="serve bench/trace_asgi.py under cProfile, writing pstats to this file",
    )
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    root = Path(tempfile.mkdtemp(prefix="openmates-bench-turn-"))
    model_port, server_port, floor_port = _free_port(), _free_port(), _free_port()
    args.api_base = f"http://127.0.0.1:{model_port}/v1"
    args.server_log = root / "daphne.log"
    model = multiprocessing.Process(target=serve_instant_model, args=(model_port,), daemon=True)
    model.start()
    services: list[Any] = []
    servers: list[subprocess.Popen[bytes]] = []
    try:
        _say(f"starting PostgreSQL, Redis, OpenBao in {root}")
        services = _start_services(root, model_port)
        _say(f"creating {max([1, *args.streams])} users with a chat each")
        users = _create_users(max([1, *args.streams]))
        _say("starting Daphne: the server and the bare Channels floor")
        if args.trace:
            os.environ["BENCH_TRACE_FILE"] = str(root / "trace.json")
        if args.profile:
            os.environ["BENCH_PROFILE_FILE"] = str(args.profile.resolve())
        app = TRACE_APP if args.trace or args.profile else SERVER_APP
        servers.append(_start_daphne(server_port, root / "daphne.log", app))
        servers.append(_start_daphne(floor_port, root / "floor.log", FLOOR_APP))
        args.server_cpu, args.floor_cpu = CpuMeter(servers[0].pid), CpuMeter(servers[1].pid)
        asyncio.run(_drive(server_port, floor_port, users, args))
    except BaseException:
        log = root / "daphne.log"
        if log.exists():
            sys.stderr.write(log.read_text(errors="replace")[-4000:])
        raise
    finally:
        for server in servers:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
        model.terminate()
        if args.trace:
            _print_trace(root / "trace.json", turns=args.samples + 11)
        for service in services:
            service.destroy()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
