"""The repository's documents hold what the code and the other documents point to: every
``docs/<file>.md §N`` mentioned in the source, the tests or the docs is a numbered heading of that
file, every ``docs/`` file README.md or docs/ARCHITECTURE.md links to exists, every file under
``docs/`` is reachable from the README's docs index, and the decision records keep their form."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# Where mentions are looked for: the project's own code, tests, tools and documents.
SOURCE_DIRS = (
    "conversations",
    "servers",
    "inspector",
    "tests",
    "bench",
    "docs",
    "templates",
    "static",
)
SKIPPED_PARTS = frozenset({"node_modules", "__pycache__", "migrations"})
SUFFIXES = frozenset({".py", ".md", ".html", ".js", ".css", ".txt"})

# ``docs/x.md §3.1`` or, inside docs/, ``[x.md](x.md) §3.1`` — the mention may wrap onto a
# comment's next line (``docs/x.md\n# §3``) and may go on with more sections of the same file
# (``§5.4, §13``, ``§4 and §11``, ``§1–§6``).
_SECTION = r"§\s*(\d+(?:\.\d+)*)"
MENTION = re.compile(
    r"(?:docs/|\]\()([\w.-]+\.md)\)?[ \t]*(?:\n[ \t]*(?:#|//|\*)?[ \t]*)?"
    + _SECTION
    + r"((?:\s*(?:,|and|or|–)\s*§\s*\d+(?:\.\d+)*)*)"
)
MORE = re.compile(_SECTION)
HEADING = re.compile(r"^#{1,6}[ \t]+(\d+(?:\.\d+)*)\.?[ \t]", re.MULTILINE)
# Markdown links and backquoted paths that name a document.
LINK = re.compile(r"\]\(([^)\s#]+\.md)(?:#[^)]*)?\)|`((?:docs/)?[\w./-]+\.md)`")


def mentions(text: str) -> Iterator[tuple[str, str]]:
    """Each (file name, section number) that ``text`` cites as ``docs/<file>.md §N``."""
    for match in MENTION.finditer(text):
        name = match.group(1)
        yield name, match.group(2)
        for more in MORE.finditer(match.group(3)):
            yield name, more.group(1)


def sections(path: Path) -> set[str]:
    """The numbers of a document's numbered headings (``## 3. Title``, ``### 10.7 Title``)."""
    return set(HEADING.findall(path.read_text(encoding="utf-8")))


def missing_sections(text: str, docs: Path) -> list[str]:
    """The mentions in ``text`` that no heading of ``docs/`` answers, as ``file §N``."""
    missing = []
    for name, number in mentions(text):
        path = docs / name
        if not path.is_file() or number not in sections(path):
            missing.append(f"{name} §{number}")
    return missing


def source_files() -> Iterator[Path]:
    for top in SOURCE_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            # This file's own examples cite made-up documents on purpose.
            if path.suffix in SUFFIXES and path.is_file() and not SKIPPED_PARTS & set(path.parts):
                if path != Path(__file__).resolve():
                    yield path
    yield ROOT / "README.md"


def linked_documents(path: Path) -> set[Path]:
    """The ``docs/`` files a document links to or names (relative links resolved from its folder)."""
    found = set()
    for link, quoted in LINK.findall(path.read_text(encoding="utf-8")):
        target = link or quoted
        if target.startswith(("http://", "https://")):
            continue
        resolved = (ROOT / target) if target.startswith("docs/") else (path.parent / target)
        resolved = resolved.resolve()
        if resolved.parent == DOCS:
            found.add(resolved)
    return found


def test_a_mention_is_read_with_its_file_and_every_section_it_lists() -> None:
    text = 'x = 1  # see (docs/wire-formats.md\n# §7.2) and """docs/a.md §5.4, §13 and §2."""'
    text += "\nsee [b.md](b.md) §1–§6 and [c](docs/c.md) §3"
    assert list(mentions(text)) == [
        ("wire-formats.md", "7.2"),
        ("a.md", "5.4"),
        ("a.md", "13"),
        ("a.md", "2"),
        ("b.md", "1"),
        ("b.md", "6"),
        ("c.md", "3"),
    ]


def test_a_mention_of_a_missing_section_or_document_is_reported(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\n## 1. One\n\n### 1.2 Sub\n\n## 2 Two\n", encoding="utf-8")
    text = "docs/a.md §1, §1.2 and §2; docs/a.md §3; docs/a.md §1.3; docs/b.md §1"
    assert missing_sections(text, tmp_path) == ["a.md §3", "a.md §1.3", "b.md §1"]


def test_every_section_the_code_and_the_docs_cite_is_a_heading_of_the_cited_document() -> None:
    missing = {
        f"{path.relative_to(ROOT)}: {entry}"
        for path in source_files()
        for entry in missing_sections(path.read_text(encoding="utf-8", errors="replace"), DOCS)
    }
    assert not missing, sorted(missing)


def test_the_wire_formats_document_is_cited_and_answers_every_citation() -> None:
    cited = {
        number
        for path in source_files()
        for name, number in mentions(path.read_text(encoding="utf-8", errors="replace"))
        if name == "wire-formats.md"
    }
    # The code relies on these facts (about fifty mentions); they must not silently disappear.
    assert {"1.3", "2", "3", "4.4", "5.1", "10.7", "11", "13"} <= cited
    assert cited <= sections(DOCS / "wire-formats.md")


def test_every_document_linked_from_the_readme_and_the_architecture_exists() -> None:
    for index in (ROOT / "README.md", DOCS / "ARCHITECTURE.md"):
        assert index.is_file(), index
        for target in linked_documents(index):
            assert target.is_file(), (
                f"{index.relative_to(ROOT)} links to {target.relative_to(ROOT)}, which does not exist"
            )


def test_the_architecture_links_every_other_document() -> None:
    linked = linked_documents(DOCS / "ARCHITECTURE.md")
    others = {path.resolve() for path in DOCS.glob("*.md") if path.name != "ARCHITECTURE.md"}
    assert others <= linked, sorted(p.name for p in others - linked)


# A section of a document (a kebab-case name: ``wire-formats §3``, ``mcp-protocol.md §2``) cited
# without its ``docs/`` path names a document the reader cannot find in the repository. A
# standard's section (``RFC 6570 §2``) is not a document name.
BARE_MENTION = re.compile(
    r"(?<![\w/.-])([A-Za-z]+(?:-[A-Za-z]+)+)(?:\.md)?[ \t]*(?:\n[ \t]*#?[ \t]*)?§[ \t]*\d"
)


def test_a_section_cited_without_its_docs_path_is_reported() -> None:
    found = [
        m.group(1)
        for m in BARE_MENTION.finditer(
            "see wire-formats §3, docs/wire-formats.md §3, RFC 6570 §2 and (mcp-protocol.md §2)"
        )
    ]
    assert found == ["wire-formats", "mcp-protocol"]


def test_every_section_citation_names_its_document_by_its_path_in_docs() -> None:
    bare = {
        f"{path.relative_to(ROOT)}: {match.group(0).strip()}"
        for path in source_files()
        if path.suffix != ".md"
        for match in BARE_MENTION.finditer(path.read_text(encoding="utf-8", errors="replace"))
    }
    assert not bare, sorted(bare)


def test_the_architecture_names_every_module() -> None:
    """A newcomer finds every layer from the folder tree and docs/ARCHITECTURE.md alone: each
    module of the apps is named there, by its file name or, in backquotes, by its name."""
    architecture = (DOCS / "ARCHITECTURE.md").read_text(encoding="utf-8")
    unnamed = [
        str(path.relative_to(ROOT))
        for top in ("conversations", "servers", "inspector")
        for path in sorted((ROOT / top).rglob("*.py"))
        if path.name != "__init__.py" and not SKIPPED_PARTS & set(path.parts)
        if not re.search(rf"(?<![\w.]){re.escape(path.name)}(?!\w)", architecture)
        and f"`{path.stem}`" not in architecture
    ]
    assert unnamed == []


# Any relative link of a markdown document: ``[text](path)``, ``![alt](path)``, a fragment cut.
ANY_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
INDEX_HEADING = "## Where to go next"


def link_targets(path: Path, text: str | None = None) -> set[Path]:
    """The files a markdown document links to by a relative link, resolved from its folder."""
    text = path.read_text(encoding="utf-8") if text is None else text
    return {
        (path.parent / target).resolve()
        for target in ANY_LINK.findall(text)
        if not target.startswith(("http://", "https://", "mailto:"))
    }


def readme_index(readme: Path) -> str:
    """The README's docs index: its "Where to go next" section."""
    text = readme.read_text(encoding="utf-8")
    start = text.find(INDEX_HEADING)
    assert start >= 0, f"the README has no {INDEX_HEADING!r} section"
    end = text.find("\n## ", start + len(INDEX_HEADING))
    return text[start : end if end >= 0 else len(text)]


def reachable_from_index(readme: Path, docs: Path) -> set[Path]:
    """Every file under ``docs`` reached from the README's index, following the links of each
    document under ``docs`` it reaches (and of the README itself for files that are not
    documents, such as its screenshot)."""
    seen: set[Path] = set()
    queue = sorted(link_targets(readme, readme_index(readme)))
    while queue:
        target = queue.pop()
        if target in seen or not target.is_file():
            continue
        seen.add(target)
        if target.suffix == ".md" and docs.resolve() in target.parents:
            queue.extend(sorted(link_targets(target) - seen))
    assets = {t for t in link_targets(readme) if t.suffix != ".md"}
    return {path for path in seen | assets if docs.resolve() in path.parents}


def test_a_document_reached_only_outside_the_index_or_not_at_all_is_not_reachable(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "decisions").mkdir(parents=True)
    (docs / "a.md").write_text("see [the decisions](decisions/README.md)\n", encoding="utf-8")
    (docs / "decisions" / "README.md").write_text("| [0001](0001-x.md) |\n", encoding="utf-8")
    (docs / "decisions" / "0001-x.md").write_text("# 0001\n", encoding="utf-8")
    (docs / "b.md").write_text("# linked above the index only\n", encoding="utf-8")
    (docs / "c.md").write_text("# linked nowhere\n", encoding="utf-8")
    (docs / "shot.png").write_bytes(b"png")
    readme = tmp_path / "README.md"
    readme.write_text(
        "# X\n\n![shot](docs/shot.png) and [b](docs/b.md)\n\n## Where to go next\n\n- [a](docs/a.md)\n"
        "\n## After\n\n[c](docs/c.md)\n",
        encoding="utf-8",
    )

    reached = {path.relative_to(docs.resolve()).as_posix() for path in reachable_from_index(readme, docs)}

    assert reached == {"a.md", "decisions/README.md", "decisions/0001-x.md", "shot.png"}


def test_every_file_under_docs_is_reachable_from_the_readme_index() -> None:
    every = {
        path.resolve()
        for path in DOCS.rglob("*")
        if path.is_file() and not SKIPPED_PARTS & set(path.parts) and not path.name.startswith(".")
    }
    unreached = every - reachable_from_index(ROOT / "README.md", DOCS)
    assert not unreached, sorted(str(path.relative_to(ROOT)) for path in unreached)


def test_every_relative_link_of_the_front_documents_resolves() -> None:
    for front in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "docs/decisions/README.md"):
        path = ROOT / front
        missing = [str(t) for t in link_targets(path) if not t.exists()]
        assert not missing, f"{front} links to {missing}"


IMAGE_MAX_BYTES = 300_000
DECISION_NAME = re.compile(r"^\d{4}-[a-z0-9-]+\.md$")


def test_the_images_under_docs_stay_small() -> None:
    large = [
        f"{path.relative_to(ROOT)}: {path.stat().st_size} bytes"
        for path in (DOCS / "images").rglob("*")
        if path.is_file() and path.stat().st_size > IMAGE_MAX_BYTES
    ]
    assert not large


def test_every_decision_record_is_named_dated_and_has_its_three_parts() -> None:
    records = sorted(p for p in (DOCS / "decisions").glob("*.md") if p.name != "README.md")
    assert records
    for path in records:
        text = path.read_text(encoding="utf-8")
        assert DECISION_NAME.match(path.name), path.name
        assert text.startswith(f"# {path.name[:4]}. "), path.name
        assert re.search(r"^Date: \d{4}-\d{2}-\d{2}$", text, re.MULTILINE), path.name
        headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
        assert headings == ["Context", "Decision", "Consequences"], (path.name, headings)
