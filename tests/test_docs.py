"""The project's contracts live in ``docs/`` and the code cites them by section.

Code, templates and the top-level documents must not cite the original blueprint files
(they are not in the repository), and every ``docs/<file>.md §N`` they cite must name a
file of ``docs/`` and a section heading ``## §N`` in it. Inside ``docs/`` the same holds
for citations of sibling files (``protocol.md §3``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
DOCS = ROOT / "docs"
SOURCE_SUFFIXES = frozenset({".py", ".js", ".html"})
# Configuration and scripts that may carry comments too.
CONFIG_FILES = ("pyproject.toml", ".pre-commit-config.yaml", ".gitignore", ".ci/run")
SCRIPT_DIRS = ("scripts",)
# Not the project's files: environments, data, build output, vendored libraries.
SKIPPED_DIRS = frozenset(
    {".venv", "var", ".git", "node_modules", "__pycache__", "build", "vendor", ".mypy_cache"}
)
TOP_LEVEL_DOCUMENTS = ("README.md", "CONTRIBUTING.md")

# The blueprint's file names, spelt so that this file does not cite them itself.
_BLUEPRINTS = "|".join(("DESIGN", "PROTOCOL", "CRYPTO"))
BLUEPRINT_RE = re.compile(rf"\b(?:{_BLUEPRINTS})(?:\.md\b|\s*§)")
HEADING_RE = re.compile(r"^#{1,6}\s+§(\d+)\b", re.MULTILINE)
# A document name, then any number of "§N" joined by spaces, commas, "and", "/" or a
# hyphen or an en dash (U+2013).
_SECTIONS = r"((?:\s*(?:,|and|-|\u2013|/)?\s*§\s*\d+)*)"
DOCS_CITATION_RE = re.compile(r"\bdocs/([\w.-]+?\.md)\b" + _SECTIONS)
SIBLING_CITATION_RE = re.compile(r"(?<![\w/.-])([\w-]+\.md)\b" + _SECTIONS)


def project_files(suffixes: frozenset[str]) -> Iterator[Path]:
    """The repository's files with one of ``suffixes``, outside :data:`SKIPPED_DIRS`.

    This file is left out: its own examples cite what must not be cited.
    """
    stack = [ROOT]
    while stack:
        directory = stack.pop()
        for entry in sorted(directory.iterdir()):
            if entry.is_dir():
                if entry.name not in SKIPPED_DIRS and not entry.name.endswith(".egg-info"):
                    stack.append(entry)
            elif entry.suffix in suffixes and entry != HERE:
                yield entry


def section_numbers(document: Path) -> list[int]:
    """The ``§N`` numbers of ``document``'s headings, in order."""
    return [int(n) for n in HEADING_RE.findall(document.read_text(encoding="utf-8"))]


def citations(text: str, pattern: re.Pattern[str] = DOCS_CITATION_RE) -> list[tuple[str, int]]:
    """``(file name, section)`` for every section cited in ``text``; section 0: the file only.

    ``"docs/protocol.md §3 and §5"`` gives ``[("protocol.md", 3), ("protocol.md", 5)]``.
    """
    found: list[tuple[str, int]] = []
    for match in pattern.finditer(text):
        numbers = [int(n) for n in re.findall(r"§\s*(\d+)", match.group(2))]
        found += [(match.group(1), n) for n in numbers] or [(match.group(1), 0)]
    return found


def broken_citations(text: str, pattern: re.Pattern[str] = DOCS_CITATION_RE) -> list[str]:
    """The citations in ``text`` whose file is not in ``docs/`` or lacks the section."""
    broken = []
    for name, number in citations(text, pattern):
        document = DOCS / name
        if not document.is_file():
            broken.append(f"docs/{name} (no such file)")
        elif number and number not in section_numbers(document):
            broken.append(f"docs/{name} §{number} (no such section)")
    return broken


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_no_file_cites_the_blueprint_outside_the_repository() -> None:
    files = [*project_files(SOURCE_SUFFIXES), *(ROOT / name for name in TOP_LEVEL_DOCUMENTS)]
    files += sorted(DOCS.glob("*.md"))
    files += [ROOT / name for name in CONFIG_FILES]
    files += [path for folder in SCRIPT_DIRS for path in sorted((ROOT / folder).iterdir())]
    offenders = [
        f"{_relative(path)}:{number}: {line.strip()}"
        for path in files
        if path.is_file()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if BLUEPRINT_RE.search(line)
    ]
    assert offenders == []


def test_every_cited_docs_section_exists() -> None:
    files = [*project_files(SOURCE_SUFFIXES), *(ROOT / name for name in TOP_LEVEL_DOCUMENTS)]
    broken = [
        f"{_relative(path)}: {problem}"
        for path in files
        if path.is_file()
        for problem in broken_citations(path.read_text(encoding="utf-8"))
    ]
    assert broken == []


def self_references(text: str) -> list[int]:
    """Section numbers ``text`` cites without a file name (its own sections)."""
    for pattern in (DOCS_CITATION_RE, SIBLING_CITATION_RE):
        text = pattern.sub(" ", text)
    return [int(n) for n in re.findall(r"§\s*(\d+)", text)]


@pytest.mark.parametrize("document", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_a_document_cites_existing_sections(document: Path) -> None:
    text = HEADING_RE.sub(" ", document.read_text(encoding="utf-8"))
    names = {p.name for p in DOCS.glob("*.md")}
    own = section_numbers(document)
    broken = [
        f"{name} §{number}"
        for name, number in citations(text, SIBLING_CITATION_RE)
        if name in names and number and number not in section_numbers(DOCS / name)
    ]
    broken += [f"{document.name} §{n}" for n in self_references(text) if n not in own]
    assert broken == []
    assert broken_citations(text) == []


@pytest.mark.parametrize("document", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_sections_are_numbered_from_one_without_gaps(document: Path) -> None:
    numbers = section_numbers(document)
    assert numbers == list(range(1, len(numbers) + 1))
    assert len(numbers) >= 5


def test_the_readme_lists_every_document() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert {p.name for p in DOCS.glob("*.md")} <= {name for name, _ in citations(readme)}


def test_citations_are_read_with_every_section_they_name() -> None:
    text = "see docs/protocol.md §3 and §5, docs/crypto.md §4\u2013§5; docs/deployment.md only"
    assert citations(text) == [
        ("protocol.md", 3),
        ("protocol.md", 5),
        ("crypto.md", 4),
        ("crypto.md", 5),
        ("deployment.md", 0),
    ]


def test_a_missing_file_or_section_is_reported() -> None:
    text = "docs/protocol.md §99, docs/nowhere.md §1, docs/architecture.md §5"
    assert broken_citations(text) == [
        "docs/protocol.md §99 (no such section)",
        "docs/nowhere.md (no such file)",
    ]


def test_the_blueprint_pattern_finds_both_spellings() -> None:
    design, crypto = "DESIGN", "CRYPTO"
    assert BLUEPRINT_RE.search(f"see {design}.md §2")
    assert BLUEPRINT_RE.search(f"bodies ({design} §11)")
    assert BLUEPRINT_RE.search(f"({crypto}.md)")
    assert not BLUEPRINT_RE.search("PROTOCOL_SUBPROTOCOL = 'openmates.v1'")
    assert not BLUEPRINT_RE.search("ALLOW_UNKNOWN_PROTOCOLS")
