"""What the CLI prints of a run's results (``selectors.run_results``): a text table, a progress
line, and JUnit XML for CI systems (one ``testsuite`` per cell, one ``testcase`` per case run,
the failure class as the failure's ``type`` and the conversation's uuid in ``system-out``)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from conversations.typealias import JSONDict, JSONValue
from inspector.evals.selectors import FAILURE_CLASSES, Progress

# Characters XML 1.0 cannot hold at all (model output may carry them): replaced, so the file parses.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
TABLE_COLUMNS = (
    "model",
    "paradigm",
    "variant",
    "passed",
    "accuracy",
    "failures",
    "tokens",
    "cost",
    "latency",
)


def _text(value: object) -> str:
    return _NOT_XML.sub("\ufffd", str(value))


def _cells(results: JSONDict) -> list[JSONDict]:
    cells = results.get("cells")
    return [cell for cell in cells if isinstance(cell, dict)] if isinstance(cells, list) else []


def _int(value: JSONValue) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def cell_name(cell: JSONDict) -> str:
    return f"{cell.get('model')} · {cell.get('paradigm')} · {cell.get('variant')}"


def progress_line(progress: Progress) -> str:
    """``[12/30] 40% · 10 passed · 4 running`` (the status when it is not running)."""
    total = progress["total"]
    line = (
        f"[{progress['finished']}/{total}] {round(progress['fraction'] * 100)}% · {progress['passed']} passed"
        f" · {progress['running']} running"
    )
    return line if progress["status"] in ("queued", "running") else f"{line} · {progress['status']}"


def results_table(results: JSONDict) -> list[str]:
    """The run's cells as aligned text lines, with a heading and a line per regression."""
    rows = [TABLE_COLUMNS]
    for cell in _cells(results):
        accuracy = cell.get("accuracy")
        failures = ", ".join(
            f"{name} {_int(cell.get(name))}" for name in FAILURE_CLASSES if _int(cell.get(name))
        )
        tokens = _int(cell.get("input_tokens")) + _int(cell.get("output_tokens"))
        latency = cell.get("latency_ms")
        rows.append(
            (
                str(cell.get("model")),
                str(cell.get("paradigm")),
                str(cell.get("variant")),
                f"{_int(cell.get('passed'))}/{_int(cell.get('cases'))}",
                f"{accuracy * 100:.0f}%" if isinstance(accuracy, (int, float)) else "-",
                failures or "-",
                str(tokens),
                f"${cell['cost']}" if cell.get("cost") else "-",
                f"{latency} ms" if latency is not None else "-",
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(TABLE_COLUMNS))]
    lines = [
        f"suite {results.get('suite')} · run {results.get('run')} · {results.get('status')}",
        "",
    ]
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    regressions = [cell for cell in _cells(results) if cell.get("regression")]
    for cell in regressions:
        lines.append(
            f"regression: {cell_name(cell)} fell from {cell.get('previous_accuracy')} to "
            f"{cell.get('accuracy')}, below the previous run's 95% interval"
        )
    if results.get("error"):
        lines.append(f"error: {results.get('error')}")
    return lines


QUESTION_CHARS = 80


def testcase_name(cell: JSONDict, item: JSONDict) -> str:
    """``native/demo/terse: What will the weather…`` (``#2`` for a repeat): a CI report's row
    says which cell and which question, not only a case number."""
    question = " ".join(str(item.get("question") or f"case {_int(item.get('case'))}").split())
    if len(question) > QUESTION_CHARS:
        question = question[: QUESTION_CHARS - 1] + "…"
    repeat = _int(item.get("repeat"))
    return f"{cell.get('paradigm')}/{cell.get('model')}/{cell.get('variant')}: {question}" + (
        f" #{repeat + 1}" if repeat else ""
    )


def junit_xml(results: JSONDict) -> str:
    """The run as a JUnit XML document (UTF-8 text with its declaration)."""
    root = ET.Element("testsuites", name=_text(results.get("suite", "")))
    all_tests = all_failures = 0
    for cell in _cells(results):
        name = cell_name(cell)
        failing = {
            (_int(item.get("case")), _int(item.get("repeat"))): item
            for item in (cell.get("failures") or [])  # type: ignore[union-attr]
            if isinstance(item, dict)
        }
        suite = ET.SubElement(root, "testsuite", name=_text(name))
        runs = cell.get("results")
        tests = 0
        for item in runs if isinstance(runs, list) else []:
            if not isinstance(item, dict):
                continue
            case, repeat = _int(item.get("case")), _int(item.get("repeat"))
            testcase = ET.SubElement(
                suite,
                "testcase",
                name=_text(testcase_name(cell, item)),
                classname=_text(f"{results.get('suite')}.{name}"),
            )
            latency = item.get("latency_ms")
            if isinstance(latency, int):
                testcase.set("time", f"{latency / 1000:.3f}")
            tests += 1
            failure = failing.get((case, repeat))
            if failure is not None:
                element = ET.SubElement(
                    testcase,
                    "failure",
                    type=_text(failure.get("failure", "")),
                    message=_text(failure.get("reason", "")),
                )
                element.text = _text(f"{failure.get('question', '')}\n{failure.get('reason', '')}")
            elif item.get("status") not in ("passed", "failed"):
                ET.SubElement(testcase, "skipped", message=_text(f"not run: {item.get('status')}"))
            if item.get("conversation"):
                ET.SubElement(testcase, "system-out").text = _text(f"conversation {item.get('conversation')}")
        suite.set("tests", str(tests))
        suite.set("failures", str(len(failing)))
        suite.set("errors", "0")
        all_tests += tests
        all_failures += len(failing)
    root.set("tests", str(all_tests))
    root.set("failures", str(all_failures))
    root.set("errors", "0")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
