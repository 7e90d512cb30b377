"""A newcomer can read any product module in one sitting: none is over 800 lines (migrations,
which Django writes, excepted). A module that grows past it is split by seam."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT_PACKAGES = ("inspector", "conversations", "servers")
MAX_LINES = 800


def _product_modules() -> list[Path]:
    return [
        path
        for package in PRODUCT_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.relative_to(ROOT).parts
    ]


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_product_module_is_over_800_lines() -> None:
    over = {
        path.relative_to(ROOT).as_posix(): _lines(path)
        for path in _product_modules()
        if _lines(path) > MAX_LINES
    }
    assert over == {}, "split by seam: " + ", ".join(
        f"{name} ({lines} lines)" for name, lines in over.items()
    )


def test_the_size_rule_sees_the_product_modules_and_not_the_migrations() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in _product_modules()}
    assert {"inspector/settings.py", "conversations/models.py", "servers/models.py"} <= names
    assert not any("/migrations/" in name for name in names)
    assert any((ROOT / package / "migrations").is_dir() for package in PRODUCT_PACKAGES)
