"""The app layering of docs/architecture.md §2 is enforced: ``lint-imports`` (run by
scripts/check) passes on the tree and fails on a copy of it with one forbidden import added."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "openmates",
    "instances",
    "accounts",
    "memories",
    "chats",
    "skills",
    "pipeline",
    "openai_api",
    "messaging",
)
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache"],
        cwd=tree,
        # The tree's own packages first (the project's editable install comes later).
        env={"PATH": str(LINT_IMPORTS.parent), "PYTHONPATH": str(tree), "LANG": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _only_python(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "__pycache__" or ("." in n and not n.endswith(".py"))}


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's packages and pyproject.toml, copied (Python files only)."""
    tree = tmp_path_factory.mktemp("layering")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tree / package, ignore=_only_python)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_the_tree_keeps_its_layers() -> None:
    result = _lint_imports(ROOT)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 3 kept, 0 broken." in result.stdout


def test_the_copy_keeps_its_layers_before_anything_is_added(tree_copy: Path) -> None:
    result = _lint_imports(tree_copy)

    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "line", "forbidden"),
    [
        # The LLM gateway looking up instance secrets itself.
        ("openmates/llm.py", "from instances import services", "instances"),
        # Any openmates module other than the URL/ASGI wiring naming an app.
        ("openmates/health.py", "import pipeline.turn", "pipeline"),
        # The accounts <-> chats cycle: account deletion calling chats directly.
        ("accounts/services.py", "from chats import services", "chats"),
        ("instances/services.py", "import accounts.models", "accounts"),
        # memories/apps.py registers with accounts.deletion (the one allowed import).
        ("memories/services.py", "import accounts.deletion", "accounts"),
        ("chats/services.py", "import skills.registry", "skills"),
        # chats may use accounts' auth classes, not its services.
        ("chats/services.py", "from accounts import services", "accounts"),
        ("chats/cache.py", "import memories.apps", "memories"),
        ("skills/services.py", "import accounts.services", "accounts"),
    ],
)
def test_a_forbidden_import_fails_the_check(
    tree_copy: Path, module: str, line: str, forbidden: str
) -> None:
    path = tree_copy / module
    original = path.read_text(encoding="utf-8")
    path.write_text(f"{original}\n{line}  # noqa\n", encoding="utf-8")
    try:
        result = _lint_imports(tree_copy)
    finally:
        path.write_text(original, encoding="utf-8")

    importer = module.split("/", 1)[0]
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{importer} is not allowed to import {forbidden}" in result.stdout
    assert f"{module.removesuffix('.py').replace('/', '.')} -> {forbidden}" in result.stdout
