"""The executor validates, time-boxes and retries tool calls, and never raises."""

from __future__ import annotations

import asyncio

import pytest

from skills import executor
from skills.executor import execute_tool
from skills.registry import ToolContext, ToolRegistry

CONTEXT = ToolContext(instance_id=1)
SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "description": "A number."},
        "label": {"type": ["string", "null"], "description": "Optional label; null = 'x'."},
    },
    "required": ["n"],
    "additionalProperties": False,
}


@pytest.fixture
def local_registry():
    """A registry of the test's own tools, seen by the executor for this test only."""
    registry = ToolRegistry()
    original = executor.get_tool
    executor.get_tool = registry.get
    try:
        yield registry
    finally:
        executor.get_tool = original


async def test_unknown_tool_is_an_error_result():
    assert await execute_tool("no_such_tool", {}, CONTEXT) == {
        "success": False,
        "error": "unknown tool: no_such_tool",
    }


async def test_optional_parameters_arrive_as_none(local_registry):
    seen = []

    async def run(params, context):
        seen.append(params)
        return {"success": True, "result": params["label"] or "x"}

    local_registry.register(name="t", description="d", category="c", parameters=SCHEMA, execute=run)

    result = await execute_tool("t", {"n": 3}, CONTEXT)

    assert result == {"success": True, "result": "x"}
    assert seen == [{"n": 3, "label": None}]


async def test_invalid_and_unknown_parameters_are_refused_before_running(local_registry):
    calls = []

    async def run(params, context):
        calls.append(params)
        return {"success": True, "result": 1}

    local_registry.register(name="t", description="d", category="c", parameters=SCHEMA, execute=run)

    wrong_type = await execute_tool("t", {"n": "three"}, CONTEXT)
    missing = await execute_tool("t", {}, CONTEXT)
    unknown = await execute_tool("t", {"n": 1, "extra": True}, CONTEXT)
    not_object = await execute_tool("t", ["n"], CONTEXT)

    assert wrong_type["success"] is False
    assert "invalid n" in wrong_type["error"]
    assert missing["success"] is False
    assert unknown == {"success": False, "error": "unknown parameters: extra"}
    assert not_object == {"success": False, "error": "parameters must be a JSON object"}
    assert calls == []


async def test_a_missing_secret_stops_the_call(local_registry):
    async def run(params, context):
        return {"success": True, "result": context.secrets["KEY"]}

    local_registry.register(
        name="t",
        description="d",
        category="c",
        parameters=SCHEMA,
        execute=run,
        required_secrets=("KEY",),
    )

    without = await execute_tool("t", {"n": 1}, CONTEXT)
    with_key = await execute_tool("t", {"n": 1}, ToolContext(instance_id=1, secrets={"KEY": "v"}))

    assert without == {"success": False, "error": "tool t is not configured (missing secret: KEY)"}
    assert with_key == {"success": True, "result": "v"}


async def test_an_exception_is_retried_once_then_reported(local_registry):
    attempts = []

    async def run(params, context):
        attempts.append(1)
        raise RuntimeError("boom sk-secret")

    local_registry.register(name="t", description="d", category="c", parameters=SCHEMA, execute=run)

    result = await execute_tool("t", {"n": 1}, CONTEXT)

    assert result == {"success": False, "error": "tool t failed: RuntimeError"}
    assert len(attempts) == 2


async def test_a_flaky_tool_succeeds_on_the_retry(local_registry):
    attempts = []

    async def run(params, context):
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("first call fails")
        return {"success": True, "result": "second"}

    local_registry.register(name="t", description="d", category="c", parameters=SCHEMA, execute=run)

    assert await execute_tool("t", {"n": 1}, CONTEXT) == {"success": True, "result": "second"}


async def test_a_slow_tool_times_out_on_each_attempt(local_registry):
    attempts = []

    async def run(params, context):
        attempts.append(1)
        await asyncio.sleep(5)
        return {"success": True, "result": "late"}

    local_registry.register(name="t", description="d", category="c", parameters=SCHEMA, execute=run)

    result = await execute_tool("t", {"n": 1}, CONTEXT, timeout_s=0.05)

    assert result == {"success": False, "error": "tool t timed out after 0.05 s"}
    assert len(attempts) == 2


async def test_a_tool_failure_is_not_retried(local_registry):
    attempts = []

    async def run(params, context):
        attempts.append(1)
        return {"success": False, "error": "bad input"}

    local_registry.register(name="t", description="d", category="c", parameters=SCHEMA, execute=run)

    assert await execute_tool("t", {"n": 1}, CONTEXT) == {"success": False, "error": "bad input"}
    assert len(attempts) == 1


async def test_a_malformed_result_becomes_an_error(local_registry):
    async def run(params, context):
        return "just a string"

    local_registry.register(name="t", description="d", category="c", parameters=SCHEMA, execute=run)

    assert await execute_tool("t", {"n": 1}, CONTEXT) == {
        "success": False,
        "error": "tool t returned a malformed result",
    }


async def test_cancellation_propagates(local_registry):
    started = asyncio.Event()

    async def run(params, context):
        started.set()
        await asyncio.sleep(5)
        return {"success": True, "result": None}

    local_registry.register(name="t", description="d", category="c", parameters=SCHEMA, execute=run)
    task = asyncio.create_task(execute_tool("t", {"n": 1}, CONTEXT))
    await started.wait()
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task


def _times_out_once(attempts: list[int]):
    """An ``execute`` whose first call never finishes and whose later calls answer."""

    async def run(params, context):
        attempts.append(1)
        if len(attempts) == 1:
            await asyncio.Event().wait()  # never set: only the executor's timeout ends it
        return {"success": True, "result": len(attempts)}

    return run


async def test_an_idempotent_tool_that_times_out_once_is_retried(local_registry):
    attempts: list[int] = []
    local_registry.register(
        name="t",
        description="d",
        category="c",
        parameters=SCHEMA,
        execute=_times_out_once(attempts),
    )

    result = await execute_tool("t", {"n": 1}, CONTEXT, timeout_s=0.05)

    assert local_registry.get("t").idempotent is True
    assert result == {"success": True, "result": 2}
    assert len(attempts) == 2


async def test_a_non_idempotent_tool_that_times_out_is_not_retried(local_registry):
    attempts: list[int] = []
    local_registry.register(
        name="t",
        description="d",
        category="c",
        parameters=SCHEMA,
        execute=_times_out_once(attempts),
        idempotent=False,
    )

    result = await execute_tool("t", {"n": 1}, CONTEXT, timeout_s=0.05)

    assert result == {"success": False, "error": "tool t timed out after 0.05 s"}
    assert len(attempts) == 1


async def test_a_non_idempotent_tool_that_raises_is_not_retried(local_registry):
    attempts: list[int] = []

    async def run(params, context):
        attempts.append(1)
        raise ConnectionError("the write may have happened")

    local_registry.register(
        name="t", description="d", category="c", parameters=SCHEMA, execute=run, idempotent=False
    )

    result = await execute_tool("t", {"n": 1}, CONTEXT)

    assert result == {"success": False, "error": "tool t failed: ConnectionError"}
    assert len(attempts) == 1
