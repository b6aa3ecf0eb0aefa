"""``weather``: current weather from OpenWeatherMap (needs ``OPENWEATHERMAP_API_KEY``)."""

from __future__ import annotations

from typing import Any

import httpx
from django.conf import settings

from skills.registry import ToolContext, register_tool

API_KEY_SECRET = "OPENWEATHERMAP_API_KEY"  # noqa: S105 (a secret's name)
DEFAULT_UNITS = "metric"
TIMEOUT_S = 15.0
_UNIT_LABELS = {"metric": ("°C", "m/s"), "imperial": ("°F", "mph")}


async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Current conditions at ``location``: temperature, feels-like, humidity, wind, sky."""
    location = str(params.get("location") or "").strip()
    if not location:
        return {"success": False, "error": "the location is empty"}
    units = params.get("units") or DEFAULT_UNITS
    query = {"q": location, "units": units, "appid": context.secrets[API_KEY_SECRET]}
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            response = await client.get(
                f"{settings.SKILLS_WEATHER_API_BASE.rstrip('/')}/data/2.5/weather", params=query
            )
        if response.status_code == httpx.codes.NOT_FOUND:
            return {"success": False, "error": f"no weather found for {location!r}"}
        if response.status_code != httpx.codes.OK:
            return {
                "success": False,
                "error": f"weather lookup failed: HTTP {response.status_code}",
            }
        found = response.json()
        main, wind = found["main"], found.get("wind", {})
        sky = found.get("weather") or [{}]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        return {"success": False, "error": f"weather lookup failed: {type(exc).__name__}"}
    temperature_unit, speed_unit = _UNIT_LABELS[units]
    return {
        "success": True,
        "result": {
            "location": str(found.get("name") or location),
            "temperature": main.get("temp"),
            "feels_like": main.get("feels_like"),
            "temperature_unit": temperature_unit,
            "humidity_percent": main.get("humidity"),
            "wind_speed": wind.get("speed"),
            "wind_speed_unit": speed_unit,
            "conditions": str(sky[0].get("description", "")),
        },
    }


register_tool(
    name="weather",
    description="Get the current weather for a city or place.",
    category="weather",
    parameters={
        "type": "object",
        "properties": {
            "location": {
                "type": "string",
                "description": "City or place, optionally with country: 'Paris,FR'.",
            },
            "units": {
                "type": ["string", "null"],
                "enum": ["metric", "imperial", None],
                "description": "'metric' (°C, m/s) or 'imperial' (°F, mph); null means metric.",
            },
        },
        "required": ["location"],
        "additionalProperties": False,
    },
    execute=execute,
    required_secrets=(API_KEY_SECRET,),
)
