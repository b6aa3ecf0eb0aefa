"""``calculator``: evaluates an arithmetic expression with simpleeval (never ``eval``).

Names, functions and operators are a fixed allow-list; attribute access, calls to
anything else, huge powers and long strings are refused by simpleeval itself.
"""

from __future__ import annotations

import math
from typing import Any

from simpleeval import SimpleEval

from skills.registry import ToolContext, register_tool

MAX_EXPRESSION_CHARS = 500

_FUNCTIONS: dict[str, Any] = {
    "sqrt": math.sqrt,
    "cbrt": lambda x: math.copysign(abs(x) ** (1 / 3), x),
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
    "exp": math.exp,
    "ln": math.log,
    "log": math.log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "degrees": math.degrees,
    "radians": math.radians,
    "factorial": math.factorial,
    "hypot": math.hypot,
}
_NAMES: dict[str, Any] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def _number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("the expression did not produce a number")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("the result is not a finite number")
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
    return value


async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Evaluate ``params["expression"]``; ``^`` is read as a power, like ``**``."""
    expression = str(params.get("expression") or "").strip()
    if not expression:
        return {"success": False, "error": "the expression is empty"}
    if len(expression) > MAX_EXPRESSION_CHARS:
        return {"success": False, "error": f"the expression is longer than {MAX_EXPRESSION_CHARS}"}
    evaluator = SimpleEval(functions=_FUNCTIONS, names=_NAMES)
    try:
        value = _number(evaluator.eval(expression.replace("^", "**")))
    except Exception as exc:
        return {"success": False, "error": f"cannot evaluate {expression!r}: {exc}"}
    return {"success": True, "result": {"expression": expression, "value": value}}


register_tool(
    name="calculator",
    description=(
        "Evaluate an arithmetic expression exactly. Supports + - * / // % ** (or ^), "
        "parentheses, pi, e and the functions sqrt, cbrt, abs, round, min, max, floor, ceil, "
        "exp, ln, log, log10, log2, sin, cos, tan, asin, acos, atan, degrees, radians, "
        "factorial, hypot (angles in radians)."
    ),
    category="math",
    parameters={
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "description": "The expression to evaluate, e.g. '2**10 + sqrt(16)'.",
            }
        },
        "required": ["expression"],
        "additionalProperties": False,
    },
    execute=execute,
)
