"""Runs one tool call: validate, time-box, retry once (idempotent tools only), never raise.

``execute_tool(name, params, context)`` is the pipeline's only way to run a tool. It
returns the tool's own ``{"success": True, "result": ...}`` / ``{"success": False,
"error": ...}`` dict, or such an error dict built here for an unknown tool, invalid
parameters, a missing secret, a timeout, an exception or a malformed result.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from jsonschema import Draft202012Validator

from skills.registry import ToolContext, ToolSpec, get_tool

logger = logging.getLogger(__name__)

TOOL_TIMEOUT_S = 20.0
TOOL_RETRIES = 1


def _error(message: str) -> dict[str, Any]:
    return {"success": False, "error": message}


def params_prepare(spec: ToolSpec, params: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Fill optional properties the model left out with ``None`` and validate.

    Returns ``(params, None)`` when valid, else ``(None, "<why>")``.
    """
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return None, "parameters must be a JSON object"
    properties = spec.parameters.get("properties", {})
    prepared = {name: params.get(name) for name in properties}
    unknown = sorted(set(params) - set(properties))
    if unknown and spec.parameters.get("additionalProperties") is False:
        return None, f"unknown parameters: {', '.join(unknown)}"
    errors = sorted(
        Draft202012Validator(spec.parameters).iter_errors(prepared), key=lambda e: list(e.path)
    )
    if errors:
        first = errors[0]
        where = ".".join(str(p) for p in first.path) or "parameters"
        return None, f"invalid {where}: {first.message}"
    return prepared, None


def _result_checked(name: str, result: Any) -> dict[str, Any]:
    if not isinstance(result, dict) or not isinstance(result.get("success"), bool):
        return _error(f"tool {name} returned a malformed result")
    if result["success"] and "result" not in result:
        return _error(f"tool {name} returned success without a result")
    if not result["success"] and "error" not in result:
        return _error(f"tool {name} failed without saying why")
    return result


async def execute_tool(
    name: str,
    params: Any,
    context: ToolContext,
    *,
    timeout_s: float = TOOL_TIMEOUT_S,
    retries: int = TOOL_RETRIES,
) -> dict[str, Any]:
    """Run tool ``name`` with ``params`` and return its result dict; never raises.

    Each attempt is limited to ``timeout_s`` seconds; a timeout or an exception from the
    tool is retried ``retries`` times (a ``success: False`` answer is not: the tool
    decided). Tools registered with ``idempotent=False`` run once: after a timeout the
    first attempt may already have written, so a second run could write twice.
    Cancellation of the calling task is the one exception that propagates.
    """
    spec = get_tool(name)
    if spec is None:
        return _error(f"unknown tool: {name}")
    prepared, problem = params_prepare(spec, params)
    if prepared is None:
        return _error(problem or "invalid parameters")
    missing = [s for s in spec.required_secrets if not context.secrets.get(s)]
    if missing:
        return _error(f"tool {name} is not configured (missing secret: {', '.join(missing)})")
    last_error = ""
    attempts = retries + 1 if spec.idempotent else 1
    for attempt in range(attempts):
        try:
            result = await asyncio.wait_for(spec.execute(dict(prepared), context), timeout_s)
        except TimeoutError:
            last_error = f"tool {name} timed out after {timeout_s:g} s"
        except Exception as exc:
            logger.warning("tool %s raised %s (attempt %d)", name, type(exc).__name__, attempt + 1)
            last_error = f"tool {name} failed: {type(exc).__name__}"
        else:
            return _result_checked(name, result)
    return _error(last_error)
