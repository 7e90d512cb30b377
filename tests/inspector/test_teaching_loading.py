"""Teaching notes as data: every note of the shipped files loads as written, a malformed file is
refused with an error naming the file and the entry, and the choosing code holds no note."""

from __future__ import annotations

import ast
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from inspector import teaching
from inspector.teaching.loading import FORMATS, NOTES_DIR, NotesError, notes, notes_load

TEACHING_DIR = NOTES_DIR.parent


def _raw(name: str) -> dict[str, object]:
    data = yaml.safe_load((NOTES_DIR / f"{name}.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_every_note_of_the_shipped_files_loads_with_its_text_and_link() -> None:
    links = _raw("links")
    loaded = notes_load()
    count = 0
    for fmt in FORMATS:
        for name, entry in _raw(fmt)["notes"].items():  # type: ignore[attr-defined]
            note = loaded.fields[fmt][name]
            assert note.text == entry["text"]
            assert note.spec == (links[entry["spec"]] if "spec" in entry else "")
            count += 1
    shared = _raw("model_apis")["notes"]
    assert isinstance(shared, dict)
    count += len(shared)
    assert count > 300


def test_a_format_inherits_the_shared_notes_and_its_own_win() -> None:
    fields = notes().fields
    assert fields["anthropic"]["model"].text == fields["gemini"]["model"].text
    assert fields["anthropic"]["index"].text.startswith("Which content block")
    assert fields["openai_chat"]["index"].text.startswith("The position of this item")
    assert "model" not in fields["oauth"]


def test_the_notes_are_read_once_per_process() -> None:
    assert notes() is notes()
    assert teaching.LAYERS is notes().layers


def _copy(tmp_path: Path) -> Path:
    directory = tmp_path / "notes"
    shutil.copytree(NOTES_DIR, directory)
    return directory


def _replace(directory: Path, name: str, old: str, new: str) -> None:
    path = directory / name
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _unknown_key(d: Path) -> None:
    _replace(d, "mcp.yaml", "    spec: jsonrpc\n", "    spec: jsonrpc\n    tip: One more.\n")


def _missing_text(d: Path) -> None:
    _replace(
        d,
        "oauth.yaml",
        "    text: 'The authorization server''s identifier: its metadata must name itself.'\n",
        "",
    )


def _empty_text(d: Path) -> None:
    _replace(d, "gemini.yaml", "text: The arguments the model chose, as a JSON object.", "text: ' '")


def _unknown_layer(d: Path) -> None:
    (d / "bedrock.yaml").write_text("notes:\n  modelId:\n    text: Which model.\n", encoding="utf-8")


def _unknown_link(d: Path) -> None:
    _replace(d, "anthropic.yaml", "spec: anthropic_tools", "spec: anthropic_tool")


def _twice(d: Path) -> None:
    _replace(d, "openai_chat.yaml", "notes:\n", "notes:\n  choices:\n    text: Once.\n")


def _missing_file(d: Path) -> None:
    (d / "openai_responses.yaml").unlink()


def _missing_row(d: Path) -> None:
    _replace(d, "rows.yaml", "  rpc_result:", "  rpc_results:")


def _unknown_placeholder(d: Path) -> None:
    _replace(d, "rows.yaml", "sends {label} to {server} (Server)", "sends {method} to {server} (Server)")


def _not_yaml(d: Path) -> None:
    _replace(d, "model_apis.yaml", "notes:\n", "notes: [\n")


def _unknown_inherits(d: Path) -> None:
    _replace(d, "gemini.yaml", "inherits: model_apis", "inherits: model_api")


@pytest.mark.parametrize(
    ("spoil", "file", "entry", "problem"),
    [
        (_unknown_key, "mcp.yaml", "jsonrpc", "unknown key 'tip'"),
        (_missing_text, "oauth.yaml", "issuer", "missing text"),
        (_empty_text, "gemini.yaml", "args", "missing text"),
        (_unknown_layer, "bedrock.yaml", "", "unknown layer"),
        (_unknown_link, "anthropic.yaml", "tools", "unknown spec link 'anthropic_tool'"),
        (_twice, "openai_chat.yaml", "", "'choices' is given twice"),
        (_missing_file, "openai_responses.yaml", "", "the file is missing"),
        (_missing_row, "rows.yaml", "layers.rpc_result", "missing"),
        (_unknown_placeholder, "rows.yaml", "exchanges.to_server", "unknown placeholder {method}"),
        (_not_yaml, "model_apis.yaml", "", "not valid YAML"),
        (_unknown_inherits, "gemini.yaml", "inherits", "unknown shared file 'model_api'"),
    ],
)
def test_a_malformed_notes_file_is_refused_naming_the_file_and_the_entry(
    tmp_path: Path, spoil: Callable[[Path], None], file: str, entry: str, problem: str
) -> None:
    directory = _copy(tmp_path)
    notes_load(directory)  # the copy is sound before it is spoiled
    spoil(directory)
    with pytest.raises(NotesError) as raised:
        notes_load(directory)
    error = raised.value
    assert (error.file, error.entry) == (file, entry)
    assert problem in error.problem
    assert file in str(error) and entry in str(error)


def _prose(path: Path) -> list[str]:
    """String literals of five words or more outside docstrings: what a note would look like."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and len(node.value.split()) >= 5
    ]


def test_no_note_is_kept_in_code() -> None:
    choosing = [path for path in TEACHING_DIR.glob("*.py") if path.name != "loading.py"]
    assert {path.name for path in choosing} >= {"__init__.py", "fields.py", "roles.py", "members.py"}
    found = {path.name: _prose(path) for path in choosing}
    assert found == {path.name: [] for path in choosing}
