# ruff: noqa: RUF001, E501 (patterns in many scripts: their look-alike letters are meant; long alternations)
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


# Preselection (docs/architecture.md §6): requests in several languages, and phrasings
# that need this tool: an operator between numbers, a percentage of a number, a power or
# root, a verb of calculating next to a number.
EXAMPLES = (
    "What is 48 divided by 6?",
    "Add up 120, 75 and 310",
    "How much is 7% of 900?",
    "Was ist 3 hoch 4?",
    "Berechne 45 mal 19",
    "Combien font 13 plus 29 ?",
    "¿Cuánto es 90 dividido entre 3?",
    "Quanto fa 8 per 125?",
    "Сколько будет 14 плюс 38?",
    "45かける12は？",
    "计算一下 88 加 12",
    "Oblicz 12 razy 12",
)
_OPERATOR_WORDS = (
    r"times|multiplied by|divided by|plus|minus|over|mal|geteilt durch|durch|fois|divisé par"
    r"|multiplié par|moins|por|dividido (?:entre|por)|entre|más|menos|per|diviso|più|meno"
    r"|vezes|mais|keer|gedeeld door|razy|podzielone przez|przez|умножить на|разделить на|hoch"
    r"|to the power of|puissance|elevado a|elevato a|в степени"
    r"|плюс|минус|乘以|乘|除以|加上|加|减去|减|足す|引く|掛ける|かける|割る|곱하기|나누기|더하기"
)
_PERCENT = (
    r"%|percent|per cent|prozent|pour ?cent|por ?ciento|per ?cento|por ?cento|procent\w*"
    r"|процент\w*|パーセント|퍼센트"
)
TRIGGERS = (
    r"\d\s*(?:[+*×÷^]|\*\*)\s*\(?\s*-?\d",
    r"\d\s+[-/x]\s+\(?\d",
    rf"\d[\d.,]*\s*(?:{_OPERATOR_WORDS})\s*\(?\s*-?\d",
    rf"\d[\d.,]*\s*(?:{_PERCENT})\s*(?:of|von|de|des|du|di|del|dos|da|z|от|из|の)\s*\d",
    r"百分之\s*\d|\d+\s*的\s*\d+\s*%",
    r"(?:square root|cube root|squared|cubed|to the power|raised to|hoch \d|wurzel|au carré"
    r"|racine|al cuadrado|raíz|al quadrato|radice|ao quadrado|raiz|kwadrat|pierwiastek"
    r"|в квадрате|корень|в степени|乗|平方根|平方|次方|제곱)[\s\S]*\d"
    r"|\d[\s\S]*(?:squared|cubed|au carré|al cuadrado|al quadrato|ao quadrado|в квадрате"
    r"|の\d+乗|乗|次方|平方)",
    r"\b(?:calculate|compute|evaluate|work out|ausrechnen|rechne(?![^.?!]*\bum\b)|berechne|calcule\w*|calcula"
    r"|calcola|calcoli|bereken|oblicz|policz|посчитай|вычисли|подсчитай|hesapla|multiply"
    r"|divide|subtract|add up|multipliziere|dividiere|multiplie|divise|multiplica|moltiplica"
    r"|dividi|умножь|раздели|сложи)\b[^.?!]*\d",
    r"(?:計算|算一下|计算|帮我算|계산)[\s\S]*\d|\d[\s\S]*(?:計算して|を計算|算一下|계산해)",
)


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
    examples=EXAMPLES,
    triggers=TRIGGERS,
)
