"""``datetime_now``: the current date and time in a time zone (IANA names, zoneinfo)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from skills.registry import ToolContext, register_tool

DEFAULT_TIMEZONE = "UTC"


def _offset(moment: datetime) -> str:
    delta = moment.utcoffset()
    minutes = int(delta.total_seconds() // 60) if delta is not None else 0
    sign = "+" if minutes >= 0 else "-"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Return the current time in ``params["timezone"]`` (default UTC)."""
    name = (params.get("timezone") or DEFAULT_TIMEZONE).strip()
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return {"success": False, "error": f"unknown time zone {name!r} (use an IANA name)"}
    moment = datetime.now(UTC).astimezone(zone)
    return {
        "success": True,
        "result": {
            "timezone": name,
            "iso": moment.isoformat(timespec="seconds"),
            "date": moment.date().isoformat(),
            "time": moment.strftime("%H:%M:%S"),
            "weekday": moment.strftime("%A"),
            "utc_offset": _offset(moment),
            "unix": int(moment.timestamp()),
        },
    }


register_tool(
    name="datetime_now",
    description="Get the current date, time and weekday in a time zone.",
    category="time",
    parameters={
        "type": "object",
        "properties": {
            "timezone": {
                "type": ["string", "null"],
                "description": "IANA time zone such as 'Europe/Berlin'; null means UTC.",
            }
        },
        "required": [],
        "additionalProperties": False,
    },
    execute=execute,
)
