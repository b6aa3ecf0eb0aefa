"""House rules that a reader would otherwise check by eye (CONTRIBUTING.md, the style guide).

- No function or method of the project is longer than 60 lines, counted from its ``def``
  line to its last line (docstring, comments and blank lines included, decorators not).
  Every Python file counts, ``bench/`` and ``manage.py`` too, except migrations (generated)
  and ``tests/``; environments and data directories are not the project's.
- Every test function checks something: it holds an ``assert``, a ``pytest.raises``,
  ``pytest.warns`` or ``pytest.fail``, Playwright's ``expect(...)``, or a call of a helper
  whose name starts with ``assert``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
MAX_FUNCTION_LINES = 60
# Not checked for length: generated code, the tests, environments, data, caches, builds.
SKIPPED_DIRS = frozenset(
    {"migrations", "tests", "var", "node_modules", "__pycache__", "build", "vendor"}
)
CHECKING_CALLS = frozenset({"raises", "warns", "fail", "expect"})

Function = ast.FunctionDef | ast.AsyncFunctionDef


def python_files(root: Path) -> Iterator[Path]:
    """The ``.py`` files under ``root``, outside :data:`SKIPPED_DIRS` and hidden directories
    (``.venv``, ``.git``, tool caches) and outside ``*.egg-info``; sorted, depth first."""
    for entry in sorted(root.iterdir()):
        if entry.is_dir():
            name = entry.name
            if name in SKIPPED_DIRS or name.startswith(".") or name.endswith(".egg-info"):
                continue
            yield from python_files(entry)
        elif entry.suffix == ".py":
            yield entry


def _functions(tree: ast.AST) -> Iterator[Function]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _length(function: Function) -> int:
    return (function.end_lineno or function.lineno) - function.lineno + 1


def long_functions(source: str, label: str, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``"<label>:<line> <name> (<lines>)"`` for each function in ``source`` longer than
    ``limit`` lines, nested functions and methods included, in source order.

    Raises:
        SyntaxError: ``source`` is not valid Python.
    """
    found = [f for f in _functions(ast.parse(source)) if _length(f) > limit]
    found.sort(key=lambda f: f.lineno)
    return [f"{label}:{f.lineno} {f.name} ({_length(f)})" for f in found]


def _call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _checks_something(test: Function) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            name = _call_name(node)
            if name in CHECKING_CALLS or name.lstrip("_").startswith("assert"):
                return True
    return False


def unchecked_tests(source: str, label: str) -> list[str]:
    """``"<label>:<line> <name>"`` for each ``test*`` function in ``source`` that checks
    nothing (see the module docstring), in source order.

    Raises:
        SyntaxError: ``source`` is not valid Python.
    """
    tests = [f for f in _functions(ast.parse(source)) if f.name.startswith("test")]
    tests.sort(key=lambda f: f.lineno)
    return [f"{label}:{f.lineno} {f.name}" for f in tests if not _checks_something(f)]


def _label(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_no_function_is_longer_than_60_lines() -> None:
    offenders = [
        offender
        for path in python_files(ROOT)
        for offender in long_functions(path.read_text(encoding="utf-8"), _label(path))
    ]
    assert offenders == [], "functions over 60 lines:\n" + "\n".join(offenders)


def test_every_test_function_checks_something() -> None:
    offenders = [
        offender
        for path in sorted(TESTS.rglob("test_*.py"))
        for offender in unchecked_tests(path.read_text(encoding="utf-8"), _label(path))
    ]
    assert offenders == [], "test functions that check nothing:\n" + "\n".join(offenders)


def test_the_length_check_covers_the_apps_and_bench_but_not_tests_or_migrations() -> None:
    checked = {_label(path) for path in python_files(ROOT)}
    assert {"manage.py", "openmates/vault.py", "bench/cache.py", "pipeline/turn.py"} <= checked
    assert not [p for p in checked if p.startswith(("tests/", ".venv/", "var/"))]
    assert not [p for p in checked if "/migrations/" in p]


def _function_lines(name: str, lines: int, indent: str = "") -> list[str]:
    """A function of exactly ``lines`` lines (its ``def`` line included)."""
    return [f"{indent}def {name}() -> None:", *[f"{indent}    x = {i}" for i in range(lines - 1)]]


def test_functions_over_60_lines_are_reported_with_their_place_and_length() -> None:
    source = "\n".join(
        [
            *_function_lines("fits", 60),  # lines 1-60
            "class Steps:",  # 61
            *_function_lines("method", 61, "    "),  # 62-122
            "async def outer() -> None:",  # 123
            *_function_lines("inner", 62, "    "),  # 124-185
        ]
    )
    assert long_functions(source, "app/steps.py") == [
        "app/steps.py:62 method (61)",
        "app/steps.py:123 outer (63)",
        "app/steps.py:124 inner (62)",
    ]


def test_a_test_without_a_check_is_reported() -> None:
    source = """
import pytest

def test_asserts(): assert 1 + 1 == 2
def test_raises():
    with pytest.raises(ValueError):
        int("x")
def test_helper(): _assert_answered(3)
def test_playwright(page): expect(page.locator("h1")).to_have_text("Chats")
def test_silent():
    int("1")
async def test_silent_async(client):
    await client.get("/")
def helper_without_assert(): pass
"""
    assert unchecked_tests(source, "tests/test_x.py") == [
        "tests/test_x.py:10 test_silent",
        "tests/test_x.py:12 test_silent_async",
    ]
