"""The server of ``bench/turn_overhead.py --trace``: the real application, with wall-clock
timers around the steps of a turn (a bench tool: nothing here runs in production).

``openmates.asgi:application`` unchanged, except that the coroutine functions of
``pipeline.state``, ``chats.cache`` and ``openmates.crypto``, the steps ``pipeline.actions``
and ``pipeline.turn`` take before the model is called, and the model stream itself are
wrapped in timers: each call's wall time (for a generator, the time to its first item)
goes to a per-step list. ``turn.first_delta`` is a socket's ``message.send`` received →
its first ``stream.delta`` handed to Daphne. At exit the process writes
``{step: {"calls", "p50_ms", "max_ms", "total_ms"}}`` as JSON to ``$BENCH_TRACE_FILE``
(also each SQL statement by verb and table, each garbage collection's pause, and the
CPU time the process and its event loop spent from a ``message.send`` to its model call,
``cpu.process_to_model_call`` / ``cpu.loop_to_model_call``); with
one client sending turns one after another, ``total_ms / turns`` is a step's share of a
turn.

With ``$BENCH_PROFILE_FILE`` set the timers are left out and the event-loop thread runs
under ``cProfile`` instead (``bench/turn_overhead.py --profile``): every 2 s, on the event
loop itself (a profiler belongs to the thread that enabled it), the statistics so far are
written there in ``pstats`` format (``python -m pstats FILE``, ``sort tottime``).
"""

from __future__ import annotations

import asyncio
import atexit
import cProfile
import functools
import gc
import inspect
import json
import os
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from types import ModuleType
from typing import Any

from openmates.asgi import application as _application

_times: defaultdict[str, list[float]] = defaultdict(list)
# Each step's (start, end) in seconds after the message.send frame it served arrived, for
# calls between that frame and the turn's first delta (one client at a time: the
# timeline of a follow-up turn).
_spans: defaultdict[str, list[tuple[float, float]]] = defaultdict(list)
_origin: list[float | None] = [None]
# ``(time.process_time(), time.thread_time())`` on the event loop when the message.send
# frame being timed arrived: the CPU the process (every thread) and the loop alone spent
# up to the model call go to ``cpu.process_to_model_call`` / ``cpu.loop_to_model_call``
# (wall time shares the machine with the database, Redis and the bench client; CPU time
# does not).
_cpu_origin: list[tuple[float, float] | None] = [None]


def _note(label: str, started: float) -> None:
    ended = time.perf_counter()
    _times[label].append(ended - started)
    origin = _origin[0]
    if origin is not None and started >= origin:
        _spans[label].append((started - origin, ended - origin))


def _timed_async(label: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await function(*args, **kwargs)
        finally:
            _note(label, started)

    return timed


def _timed_sync(label: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _note(label, started)

    return timed


def _timed_first_item(label: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        first = True
        async for item in function(*args, **kwargs):
            if first:
                _note(label, started)
                first = False
            yield item

    return timed


def _wrap(module: ModuleType, name: str, label: str | None = None) -> None:
    function = getattr(module, name)
    label = label or f"{module.__name__.rsplit('.', 1)[-1]}.{name}"
    if inspect.isasyncgenfunction(function):
        setattr(module, name, _timed_first_item(label, function))
    elif inspect.iscoroutinefunction(function):
        setattr(module, name, _timed_async(label, function))
    else:
        setattr(module, name, _timed_sync(label, function))


def _wrap_coroutines(module: ModuleType) -> None:
    for name, value in list(vars(module).items()):
        if inspect.iscoroutinefunction(value) and value.__module__ == module.__name__:
            _wrap(module, name)


def _install() -> None:
    from chats import cache
    from openmates import crypto, llm
    from pipeline import actions, consumers, preprocess, prompts, runtime, state, tool_match, turn

    for module in (state, cache, crypto):
        _wrap_coroutines(module)
    for name in (
        "dispatch",
        "rate_check",
        "_chat_or_not_found",
        "user_key_ensure",
        "_accept",
        "_accepted_launch",
    ):
        _wrap(actions, name)
    _wrap(actions, "run_turn", "turn.run_turn(first event)")
    _wrap(actions, "db_call", "actions.db_call")
    for name in (
        "db_call",
        "instance_context_get",
        "_memory_consent",
        "_finalize",
        "_branch",
        "_plan",
        "_prompt_build",
        "_safety_check",
        "_model_tools",
    ):
        _wrap(turn, name)
    _wrap(preprocess, "tool_vectors_prefetch")
    _wrap(turn, "_load_history", "turn._load_history(first event)")
    _wrap(turn, "respond", "turn.respond(first event)")
    _wrap(preprocess, "preprocess")
    for name in ("detect_language", "tool_choices", "heuristic_safety", "memory_categories"):
        _wrap(preprocess, name)
    _wrap(tool_match, "local_embed", "tool_match.local_embed")
    for name in ("memories_retrieve", "system_prompt_build", "history_messages"):
        _wrap(prompts, name)
    _wrap(llm, "stream", "llm.stream(first event)")
    _time_cpu_to_model(llm)
    registry = runtime.TurnRegistry
    for name in ("start", "_announce", "ensure_started"):
        setattr(registry, name, _timed_async(f"runtime.{name}", getattr(registry, name)))
    _time_first_delta(consumers.ChatConsumer)
    _time_queries()
    _time_collections()


def _time_cpu_to_model(llm: Any) -> None:
    """The CPU time from a timed message.send to its model call (see ``_cpu_origin``)."""
    stream = llm.stream

    @functools.wraps(stream)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        origin, _cpu_origin[0] = _cpu_origin[0], None
        if origin is not None:
            _times["cpu.process_to_model_call"].append(time.process_time() - origin[0])
            _times["cpu.loop_to_model_call"].append(time.thread_time() - origin[1])
        async for item in stream(*args, **kwargs):
            yield item

    llm.stream = timed


def _time_collections() -> None:
    """Each garbage collection's pause, by generation (``gc.gen0`` … ``gc.gen2``)."""
    started: list[float] = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            _times[f"gc.gen{info['generation']}"].append(time.perf_counter() - started[0])

    gc.callbacks.append(callback)


def _time_queries() -> None:
    from django.db.backends.signals import connection_created

    def timed(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            words = sql.split()
            table = next((w for w in words if w.startswith('"') and w != '"id"'), "")
            _note(f"sql {words[0]} {table.split('.')[0]}", started)

    def wrap(sender: Any, connection: Any, **kwargs: Any) -> None:
        if timed not in connection.execute_wrappers:
            connection.execute_wrappers.append(timed)

    connection_created.connect(wrap, weak=False)


def _time_first_delta(consumer: Any) -> None:
    receive, deliver = consumer.receive, consumer.deliver

    async def timed_receive(self: Any, text_data: Any = None, bytes_data: Any = None) -> None:
        if text_data and '"message.send"' in text_data:
            self.trace_started = _origin[0] = time.perf_counter()
            _cpu_origin[0] = (time.process_time(), time.thread_time())
        await receive(self, text_data, bytes_data)

    async def timed_deliver(self: Any, frame: dict[str, Any]) -> None:
        started = getattr(self, "trace_started", None)
        if frame["type"] == "stream.delta" and started is not None:
            _note("turn.first_delta", started)
            self.trace_started = _origin[0] = None
        await deliver(self, frame)

    consumer.receive, consumer.deliver = timed_receive, timed_deliver


def _dump() -> None:
    path = os.environ.get("BENCH_TRACE_FILE")
    if not path:
        return
    # A snapshot of the lists: the event loop appends to them meanwhile.
    times = {label: list(values) for label, values in list(_times.items())}
    spans = {label: list(values) for label, values in list(_spans.items())}
    summary: dict[str, dict[str, Any]] = {
        label: {
            "calls": len(values),
            "p50_ms": round(statistics.median(values) * 1000, 3),
            "max_ms": round(max(values) * 1000, 3),
            "total_ms": round(sum(values) * 1000, 1),
        }
        for label, values in times.items()
        if values
    }
    for label, pairs in spans.items():
        if pairs and label in summary:
            summary[label]["from_ms"] = round(statistics.median(p[0] for p in pairs) * 1000, 3)
            summary[label]["to_ms"] = round(statistics.median(p[1] for p in pairs) * 1000, 3)
            summary[label]["spans"] = len(pairs)
    with open(f"{path}.part", "w") as out:
        json.dump(summary, out, indent=1, sort_keys=True)
    os.replace(f"{path}.part", path)


def _dump_every(period_s: float) -> None:
    # Daphne may be killed before its atexit hooks run: the file is rewritten meanwhile.
    while True:
        time.sleep(period_s)
        _dump()


_profiler = cProfile.Profile()
_profile_dumps: list[asyncio.TimerHandle] = []


def _profile_dump(path: str) -> None:
    # On the event loop, between two callbacks: the profiler is paused only to write.
    _profiler.disable()
    try:
        _profiler.dump_stats(f"{path}.part")
        os.replace(f"{path}.part", path)
    finally:
        _profiler.enable()
    _profile_dumps[:] = [asyncio.get_running_loop().call_later(2.0, _profile_dump, path)]


async def _profiled(scope: Any, receive: Any, send: Any) -> None:
    if not _profile_dumps:
        path = os.environ["BENCH_PROFILE_FILE"]
        _profile_dumps.append(asyncio.get_running_loop().call_later(2.0, _profile_dump, path))
    await _application(scope, receive, send)


if os.environ.get("BENCH_PROFILE_FILE"):
    # Daphne imports the application in the thread that then runs its event loop.
    _profiler.enable()
    application: Any = _profiled
else:
    application = _application
    _install()
    atexit.register(_dump)
    threading.Thread(target=_dump_every, args=(2.0,), daemon=True, name="trace-dump").start()

__all__ = ["application"]
