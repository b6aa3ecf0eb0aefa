"""The built-in tools, run through the executor with real values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from skills.executor import execute_tool
from skills.registry import ToolContext

CONTEXT = ToolContext(instance_id=1, user_id=1, chat_id=None)


async def test_calculator_evaluates_powers_and_functions():
    result = await execute_tool("calculator", {"expression": "2**10+sqrt(16)"}, CONTEXT)

    assert result == {"success": True, "result": {"expression": "2**10+sqrt(16)", "value": 1028}}


async def test_calculator_reads_caret_as_power_and_keeps_fractions():
    power = await execute_tool("calculator", {"expression": "3^4"}, CONTEXT)
    division = await execute_tool("calculator", {"expression": "(1 + 2) / 8"}, CONTEXT)

    assert power["result"]["value"] == 81
    assert division["result"]["value"] == 0.375


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os')",
        "__import__('os').system('true')",
        "().__class__.__bases__",
        "open('/etc/passwd')",
        "9**9**9",
        "1/0",
        "'a' * 10**9",
    ],
)
async def test_calculator_refuses_what_is_not_arithmetic(expression):
    result = await execute_tool("calculator", {"expression": expression}, CONTEXT)

    assert result["success"] is False
    assert result["error"]


async def test_unit_convert_kilometres_to_miles():
    result = await execute_tool(
        "unit_convert", {"value": 5, "from_unit": "km", "to_unit": "mi"}, CONTEXT
    )

    assert result["success"] is True
    assert result["result"]["value"] == 3.10686
    assert result["result"]["exact"] == pytest.approx(3.1068559611866697)


async def test_unit_convert_fahrenheit_to_celsius():
    result = await execute_tool(
        "unit_convert", {"value": 100, "from_unit": "°F", "to_unit": "°C"}, CONTEXT
    )
    spelled = await execute_tool(
        "unit_convert", {"value": 100, "from_unit": "degF", "to_unit": "degC"}, CONTEXT
    )

    assert result["result"]["value"] == 37.7778
    assert spelled["result"]["value"] == 37.7778


async def test_unit_convert_honours_significant_digits():
    result = await execute_tool(
        "unit_convert",
        {"value": 1, "from_unit": "mile", "to_unit": "m", "significant_digits": 3},
        CONTEXT,
    )

    assert result["result"]["value"] == 1610.0


async def test_unit_convert_refuses_incompatible_and_unknown_units():
    incompatible = await execute_tool(
        "unit_convert", {"value": 1, "from_unit": "kg", "to_unit": "s"}, CONTEXT
    )
    unknown = await execute_tool(
        "unit_convert", {"value": 1, "from_unit": "florbs", "to_unit": "m"}, CONTEXT
    )

    assert incompatible == {"success": False, "error": "cannot convert kg to s"}
    assert unknown["success"] is False
    assert "florbs" in unknown["error"]


async def test_datetime_now_defaults_to_utc():
    result = await execute_tool("datetime_now", {}, CONTEXT)

    assert result["success"] is True
    moment = datetime.fromisoformat(result["result"]["iso"])
    assert result["result"]["timezone"] == "UTC"
    assert result["result"]["utc_offset"] == "+00:00"
    assert abs(moment - datetime.now(UTC)) < timedelta(seconds=5)


async def test_datetime_now_in_a_named_time_zone():
    result = await execute_tool("datetime_now", {"timezone": "Asia/Kolkata"}, CONTEXT)

    moment = datetime.fromisoformat(result["result"]["iso"])
    assert result["result"]["utc_offset"] == "+05:30"
    assert moment.utcoffset() == timedelta(hours=5, minutes=30)
    assert abs(moment - datetime.now(UTC)) < timedelta(seconds=5)
    assert result["result"]["weekday"] == moment.strftime("%A")


async def test_datetime_now_refuses_an_unknown_zone():
    result = await execute_tool("datetime_now", {"timezone": "Mars/Olympus_Mons"}, CONTEXT)

    assert result["success"] is False
    assert "Mars/Olympus_Mons" in result["error"]
