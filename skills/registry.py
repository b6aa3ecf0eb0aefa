"""The tool registry: every module in ``skills/tools/`` registers one or more tools.

A tool is a ``ToolSpec``: name, description, category, a JSON-Schema ``parameters``
object (every property described; optional properties nullable, their defaults applied
by ``execute``), the names of the instance secrets it needs, and

    async def execute(params: dict[str, Any], context: ToolContext) -> dict[str, Any]

which never raises and returns ``{"success": True, "result": ...}`` or
``{"success": False, "error": "<message>"}``. ``params`` has already been validated
against ``parameters`` by ``skills.executor.execute_tool`` (optional properties the model
left out arrive as ``None``). ``context`` is a ``ToolContext``:

* ``instance_id`` (int) — the instance whose turn runs the tool;
* ``user_id`` (int | None) — the user (or pseudo-user) the turn answers;
* ``chat_id`` (str | None) — the chat, when there is one;
* ``secrets`` (Mapping[str, str]) — the plaintext values of the tool's
  ``required_secrets`` (exactly those, nothing else).

For pre-processing (docs/architecture.md §6), a tool may bring ``examples`` (a few
requests it answers, in several languages: preselection compares a message with them),
``counter_examples`` (near misses that need no tool although they sound like this one:
"write a function that parses dates" for a clock, "remember when we were kids?" for a
memory; a message closer to them than to the examples gets no tool) and ``triggers``
(regular expressions, matched case-insensitively, that select the tool on their own:
phrasings in many languages that leave no doubt).

``idempotent`` (default True) says whether running the call twice is harmless. The
executor retries a timed-out or raising call once only for idempotent tools; a tool that
writes (saves a memory, sends a message) registers with ``idempotent=False`` so a
timeout — after which the first attempt may still have written — is reported to the model
as an error instead of being run a second time.

The app imports ``skills.tools`` at start-up (``SkillsConfig.ready``): a duplicate tool
name stops the start with ``ToolRegistrationError``, and ``tools_by_module`` lets a test
prove that no module there registered nothing.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

TOOL_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
TOOLS_PACKAGE = "skills.tools"


@dataclass(frozen=True)
class ToolContext:
    """What a tool knows about the turn that runs it (see the module docstring)."""

    instance_id: int
    user_id: int | None = None
    chat_id: str | None = None
    secrets: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __repr__(self) -> str:
        # Secrets never reach a log line through a repr.
        return (
            f"ToolContext(instance_id={self.instance_id!r}, user_id={self.user_id!r}, "
            f"chat_id={self.chat_id!r}, secrets=<{len(self.secrets)} hidden>)"
        )


ToolResult = dict[str, Any]
ToolExecute = Callable[[dict[str, Any], ToolContext], Awaitable[ToolResult]]


@dataclass(frozen=True)
class ToolSpec:
    """One registered tool."""

    name: str
    description: str
    category: str
    parameters: dict[str, Any]
    execute: ToolExecute
    required_secrets: tuple[str, ...] = ()
    module: str = ""
    # False for tools with side effects: never retried (see the module docstring).
    idempotent: bool = True
    # Example requests and trigger patterns for preselection (see the module docstring).
    examples: tuple[str, ...] = ()
    counter_examples: tuple[str, ...] = ()
    triggers: tuple[re.Pattern[str], ...] = ()

    def llm_schema(self) -> dict[str, Any]:
        """The tool in the OpenAI/LiteLLM ``tools`` format."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class ToolRegistrationError(Exception):
    """A tool definition is invalid, or its name is already registered."""


def _is_nullable(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_is_nullable(option) for option in schema.get("anyOf", []))


def _check_described(schema: Mapping[str, Any], where: str) -> None:
    """Every property, at every depth, carries a non-empty description."""
    for prop, sub in schema.get("properties", {}).items():
        path = f"{where}.{prop}"
        if not isinstance(sub, Mapping) or not str(sub.get("description", "")).strip():
            raise ToolRegistrationError(f"{path} has no description")
        _check_described(sub, path)
        items = sub.get("items")
        if isinstance(items, Mapping):
            _check_described(items, f"{path}[]")


def parameters_validate(name: str, parameters: Mapping[str, Any]) -> None:
    """Check a tool's parameter schema against the registry's rules.

    Raises:
        ToolRegistrationError: not a valid JSON Schema object; a property without a
            description; an optional property that is not nullable.
    """
    try:
        Draft202012Validator.check_schema(dict(parameters))
    except SchemaError as exc:
        raise ToolRegistrationError(f"{name}: invalid parameter schema: {exc.message}") from exc
    if parameters.get("type") != "object":
        raise ToolRegistrationError(f"{name}: parameters must be a JSON Schema object")
    _check_described(parameters, name)
    required = set(parameters.get("required", []))
    properties = parameters.get("properties", {})
    unknown = required - set(properties)
    if unknown:
        raise ToolRegistrationError(f"{name}: required names unknown properties {sorted(unknown)}")
    for prop, sub in properties.items():
        if prop not in required and not _is_nullable(sub):
            raise ToolRegistrationError(
                f"{name}.{prop} is optional, so it must be nullable (default applied in execute)"
            )


def triggers_compile(
    name: str, triggers: tuple[str, ...] | list[str]
) -> tuple[re.Pattern[str], ...]:
    """``triggers`` compiled case-insensitively.

    Raises:
        ToolRegistrationError: a pattern is not a valid regular expression, or matches
            the empty string (it would select the tool for every message).
    """
    compiled = []
    for pattern in triggers:
        try:
            regex = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise ToolRegistrationError(f"{name}: bad trigger {pattern!r}: {exc}") from exc
        if regex.search(""):
            raise ToolRegistrationError(f"{name}: trigger {pattern!r} matches every message")
        compiled.append(regex)
    return tuple(compiled)


class ToolRegistry:
    """Tools by name, plus which module registered which (for the empty-module check)."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolSpec] = {}
        self._by_module: dict[str, list[str]] = {}
        # The module ``load_package`` is importing: registrations are filed under it even
        # when ``execute`` is defined elsewhere.
        self._importing: str | None = None

    def register(
        self,
        *,
        name: str,
        description: str,
        category: str,
        parameters: dict[str, Any],
        execute: ToolExecute,
        required_secrets: tuple[str, ...] | list[str] = (),
        idempotent: bool = True,
        examples: tuple[str, ...] | list[str] = (),
        counter_examples: tuple[str, ...] | list[str] = (),
        triggers: tuple[str, ...] | list[str] = (),
    ) -> ToolSpec:
        """Add a tool; returns its spec.

        ``idempotent=False`` marks a tool with side effects, which the executor never
        retries. ``examples``, ``counter_examples`` and ``triggers`` serve preselection
        (module docstring).

        Raises:
            ToolRegistrationError: bad name, empty description, a sync ``execute``, invalid
                schema, a blank example, a bad trigger pattern, or a name that is already
                registered.
        """
        if not TOOL_NAME_RE.match(name):
            raise ToolRegistrationError(f"bad tool name {name!r} (lowercase, digits, '_')")
        if name in self._tools:
            other = self._tools[name].module
            raise ToolRegistrationError(f"tool {name!r} is registered twice ({other})")
        if not description.strip():
            raise ToolRegistrationError(f"{name}: a description is required")
        if not inspect.iscoroutinefunction(execute):
            raise ToolRegistrationError(f"{name}: execute must be an async function")
        parameters_validate(name, parameters)
        if any(not example.strip() for example in (*examples, *counter_examples)):
            raise ToolRegistrationError(f"{name}: an example request is blank")
        compiled = triggers_compile(name, triggers)
        module = self._importing or getattr(execute, "__module__", "") or ""
        spec = ToolSpec(
            name=name,
            description=description.strip(),
            category=category,
            parameters=parameters,
            execute=execute,
            required_secrets=tuple(required_secrets),
            module=module,
            idempotent=idempotent,
            examples=tuple(example.strip() for example in examples),
            counter_examples=tuple(example.strip() for example in counter_examples),
            triggers=compiled,
        )
        self._tools[name] = spec
        self._by_module.setdefault(module, []).append(name)
        return spec

    def load_package(self, package: str) -> dict[str, list[str]]:
        """Import every module of ``package``; returns ``{module: [tool names]}`` for each.

        Modules that registered nothing appear with an empty list.

        Raises:
            ToolRegistrationError: from a module's registrations (duplicates …).
            ImportError: a module fails to import.
        """
        root = importlib.import_module(package)
        loaded: dict[str, list[str]] = {}
        for info in pkgutil.iter_modules(root.__path__, prefix=f"{package}."):
            self._importing = info.name
            try:
                importlib.import_module(info.name)
            finally:
                self._importing = None
            loaded[info.name] = list(self._by_module.get(info.name, []))
        return loaded

    def get(self, name: str) -> ToolSpec | None:
        """The tool called ``name``, or ``None``."""
        return self._tools.get(name)

    def all(self) -> list[ToolSpec]:
        """Every registered tool, by name."""
        return [self._tools[name] for name in sorted(self._tools)]


registry = ToolRegistry()
register_tool = registry.register
get_tool = registry.get
all_tools = registry.all


def load_tools() -> dict[str, list[str]]:
    """Import every module in ``skills/tools/``; returns ``{module: [tool names]}``."""
    return registry.load_package(TOOLS_PACKAGE)


def tools_by_module() -> dict[str, list[str]]:
    """``{module: [tool names]}`` for every module in ``skills/tools/`` (loading them)."""
    return load_tools()
