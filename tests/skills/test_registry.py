"""The tool registry: every tools module registers something, names are unique, schemas strict."""

from __future__ import annotations

import sys
import textwrap

import pytest

from skills.registry import (
    ToolContext,
    ToolRegistrationError,
    ToolRegistry,
    all_tools,
    tools_by_module,
)

DESCRIBED = {
    "type": "object",
    "properties": {"x": {"type": "string", "description": "An x."}},
    "required": ["x"],
}


async def _noop(params, context):
    return {"success": True, "result": None}


def test_every_module_in_skills_tools_registers_a_tool():
    loaded = tools_by_module()

    assert loaded, "skills/tools/ has no modules"
    empty = [module for module, names in loaded.items() if not names]
    assert empty == []


def test_builtin_tools_are_registered_with_their_secrets():
    specs = {spec.name: spec for spec in all_tools()}

    assert {"calculator", "datetime_now", "unit_convert", "web_search", "weather"} <= set(specs)
    assert specs["calculator"].required_secrets == ()
    assert specs["web_search"].required_secrets == ("TAVILY_API_KEY",)
    assert specs["weather"].required_secrets == ("OPENWEATHERMAP_API_KEY",)


def test_every_parameter_of_every_tool_is_described():
    for spec in all_tools():
        for name, prop in spec.parameters.get("properties", {}).items():
            assert prop.get("description"), f"{spec.name}.{name}"


def test_llm_schema_has_the_function_shape():
    spec = next(s for s in all_tools() if s.name == "calculator")

    schema = spec.llm_schema()

    assert schema["type"] == "function"
    assert schema["function"]["name"] == "calculator"
    assert schema["function"]["parameters"]["required"] == ["expression"]


def test_a_duplicate_name_is_refused():
    registry = ToolRegistry()
    registry.register(name="t", description="d", category="c", parameters=DESCRIBED, execute=_noop)

    with pytest.raises(ToolRegistrationError, match="registered twice"):
        registry.register(
            name="t", description="d", category="c", parameters=DESCRIBED, execute=_noop
        )


def test_a_parameter_without_description_is_refused():
    schema = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}

    with pytest.raises(ToolRegistrationError, match=r"t\.x has no description"):
        ToolRegistry().register(
            name="t", description="d", category="c", parameters=schema, execute=_noop
        )


def test_a_nested_parameter_without_description_is_refused():
    schema = {
        "type": "object",
        "properties": {
            "p": {
                "type": "object",
                "description": "A p.",
                "properties": {"q": {"type": "integer"}},
            }
        },
        "required": ["p"],
    }

    with pytest.raises(ToolRegistrationError, match=r"t\.p\.q has no description"):
        ToolRegistry().register(
            name="t", description="d", category="c", parameters=schema, execute=_noop
        )


def test_an_optional_parameter_must_be_nullable():
    schema = {
        "type": "object",
        "properties": {"x": {"type": "string", "description": "An optional x."}},
        "required": [],
    }

    with pytest.raises(ToolRegistrationError, match="must be nullable"):
        ToolRegistry().register(
            name="t", description="d", category="c", parameters=schema, execute=_noop
        )


def test_a_sync_execute_is_refused():
    def blocking(params, context):
        return {"success": True, "result": None}

    with pytest.raises(ToolRegistrationError, match="execute must be an async function"):
        ToolRegistry().register(
            name="t", description="d", category="c", parameters=DESCRIBED, execute=blocking
        )


def test_an_invalid_schema_and_a_bad_name_are_refused():
    with pytest.raises(ToolRegistrationError, match="invalid parameter schema"):
        ToolRegistry().register(
            name="t",
            description="d",
            category="c",
            parameters={"type": "object", "properties": 3},
            execute=_noop,
        )
    with pytest.raises(ToolRegistrationError, match="bad tool name"):
        ToolRegistry().register(
            name="Bad-Name", description="d", category="c", parameters=DESCRIBED, execute=_noop
        )


def test_loading_a_package_reports_a_module_that_registers_nothing(tmp_path, monkeypatch):
    package = tmp_path / "faketools"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "silent.py").write_text("VALUE = 1\n")
    (package / "loud.py").write_text(
        textwrap.dedent(
            """
            from tests.skills.test_registry import DESCRIBED, _noop, LOCAL

            LOCAL.register(
                name="loud", description="d", category="c", parameters=DESCRIBED, execute=_noop
            )
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        loaded = LOCAL.load_package("faketools")
    finally:
        for name in [m for m in sys.modules if m.startswith("faketools")]:
            del sys.modules[name]

    assert loaded == {"faketools.loud": ["loud"], "faketools.silent": []}


LOCAL = ToolRegistry()


def test_tool_context_repr_hides_secrets():
    context = ToolContext(instance_id=1, secrets={"K": "sk-very-secret"})

    assert "sk-very-secret" not in repr(context)
    assert "1 hidden" in repr(context)
