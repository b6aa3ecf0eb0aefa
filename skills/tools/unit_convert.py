"""``unit_convert``: converts a quantity between units with the Pint units library."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import pint

from skills.registry import ToolContext, register_tool

DEFAULT_SIGNIFICANT_DIGITS = 6
MAX_UNIT_CHARS = 64


@lru_cache(maxsize=1)
def _units() -> pint.UnitRegistry:
    # Building the registry parses Pint's definitions file (~0.1 s): once per process.
    return pint.UnitRegistry(autoconvert_offset_to_baseunit=True)


def _rounded(value: float, digits: int) -> float:
    return float(f"{value:.{digits}g}")


async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Convert ``value`` from ``from_unit`` to ``to_unit``; rounds to significant digits."""
    value = params.get("value")
    source, target = str(params.get("from_unit") or ""), str(params.get("to_unit") or "")
    digits = params.get("significant_digits") or DEFAULT_SIGNIFICANT_DIGITS
    if not isinstance(value, int | float) or not math.isfinite(value):
        return {"success": False, "error": "value must be a finite number"}
    if not source or not target or max(len(source), len(target)) > MAX_UNIT_CHARS:
        return {"success": False, "error": "both units are required (at most 64 characters)"}
    units = _units()
    try:
        converted = units.Quantity(value, source).to(target)
    except pint.DimensionalityError:
        return {"success": False, "error": f"cannot convert {source} to {target}"}
    except Exception as exc:
        return {"success": False, "error": f"unknown unit: {exc}"}
    exact = float(converted.magnitude)
    return {
        "success": True,
        "result": {
            "value": _rounded(exact, int(digits)),
            "exact": exact,
            "unit": f"{converted.units:~P}" or str(converted.units),
            "from": f"{value} {source}",
        },
    }


register_tool(
    name="unit_convert",
    description=(
        "Convert a quantity from one unit to another (length, mass, volume, temperature, "
        "speed, energy, pressure, data size, …)."
    ),
    category="units",
    parameters={
        "type": "object",
        "properties": {
            "value": {"type": "number", "description": "The amount to convert, e.g. 5."},
            "from_unit": {
                "type": "string",
                "description": "The unit of the value, e.g. 'km', 'degF', 'lb', 'mph'.",
            },
            "to_unit": {
                "type": "string",
                "description": "The unit to convert to, e.g. 'mi', 'degC', 'kg', 'km/h'.",
            },
            "significant_digits": {
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": 15,
                "description": "Significant digits of the rounded value; null means 6.",
            },
        },
        "required": ["value", "from_unit", "to_unit"],
        "additionalProperties": False,
    },
    execute=execute,
)
