"""The bench's report rewrites the latest table in docs/performance.md between its two markers,
and leaves the rest of the document as it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import report
from bench.environment import Services
from bench.stats import Result

DOC = f"""# Performance

Prose before.

{report.TABLE_BEGIN}
| measure | old |
|---|---|
| P1 step overhead | stale |
{report.TABLE_END}

Prose after.
"""


def _result(value: float) -> Result:
    return Result(
        id="P1",
        name="step overhead",
        unit="×",
        target="≤ 1.10×",
        status="pass",
        value=value,
        samples=[value],
        spread={"min": value, "q1": value, "q3": value, "max": value, "n": 1},
    )


def test_the_table_between_the_markers_is_replaced_and_the_prose_kept(tmp_path: Path) -> None:
    doc = tmp_path / "performance.md"
    doc.write_text(DOC, encoding="utf-8")

    report.performance_table_write(doc, "| measure | new |\n|---|---|\n| P1 step overhead | fresh |")
    report.performance_table_write(doc, "| measure | new |\n|---|---|\n| P1 step overhead | fresher |")

    text = doc.read_text(encoding="utf-8")
    assert "stale" not in text and "| P1 step overhead | fresh |" not in text
    assert text.count("| P1 step overhead | fresher |") == 1
    assert text.startswith("# Performance\n\nProse before.\n\n" + report.TABLE_BEGIN + "\n| measure | new |")
    assert text.endswith("| fresher |\n" + report.TABLE_END + "\n\nProse after.\n")


def test_a_document_without_its_markers_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    doc = tmp_path / "performance.md"
    doc.write_text(f"# Performance\n\n{report.TABLE_END}\n{report.TABLE_BEGIN}\n", encoding="utf-8")
    before = doc.read_text(encoding="utf-8")

    with pytest.raises(ValueError, match="no"):
        report.performance_table_write(doc, "| measure |")

    assert doc.read_text(encoding="utf-8") == before


@pytest.mark.parametrize("quick", [False, True])
def test_a_bench_run_writes_its_table_into_the_performance_document_unless_quick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quick: bool
) -> None:
    monkeypatch.setattr(report, "RESULTS_DIR", tmp_path)
    doc = tmp_path / "performance.md"
    doc.write_text(DOC, encoding="utf-8")

    written = report.write(
        [_result(1.07)], services=Services(), quick=quick, elapsed=1.0, argv=[], performance_doc=doc
    )

    text = doc.read_text(encoding="utf-8")
    if quick:
        assert text == DOC
        assert doc not in written
    else:
        assert "| P1 step overhead | ≤ 1.10× | median 1.07× |" in text
        assert "stale" not in text
        assert "Prose before." in text and "Prose after." in text
        assert doc in written
