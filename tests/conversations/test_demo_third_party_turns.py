"""Teaching turns of the demo model on servers nobody here wrote, through the real agent loop
(``manage.py ask``): server-filesystem, server-memory, server-everything, server-sequential-thinking,
mcp-server-time, mcp-server-git and a FastMCP-built server. Each call the demo makes is sensible
(the path, the zone, the e-mail address, the date-time the question gives) and valid against the
tool's inputSchema; after an error it repairs the fields the error names instead of repeating
the call."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from jsonschema import Draft202012Validator

from servers import gateway, services
from tests.servers.test_third_party import node_server, register

FASTMCP_SERVER = str(Path(__file__).resolve().parents[1] / "servers" / "fastmcp_server.py")

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def admin() -> Iterator[User]:
    """The superuser ``ask`` runs as; pooled stdio sessions end with the test."""
    yield User.objects.create_user("admin", is_superuser=True, is_staff=True)
    gateway.close_all()


@dataclass(frozen=True)
class ToolStep:
    tool: str
    arguments: dict[str, Any]
    is_error: bool
    error: str
    result: Any


@dataclass(frozen=True)
class Turn:
    status: str
    answer: str
    calls: list[ToolStep]
    schemas: dict[str, dict[str, Any]]

    def valid(self, step: ToolStep) -> list[str]:
        """What the tool's inputSchema (formats checked too) finds wrong with the call."""
        schema = self.schemas[step.tool]
        validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
        return [error.message for error in validator.iter_errors(step.arguments)]


def ask(question: str, server: str) -> Turn:
    out = StringIO()
    call_command("ask", question, "--server", server, "--json", stdout=out)
    [turn] = json.loads(out.getvalue())["turns"]
    schemas = {
        str(tool.get("name")): tool.get("input_schema") or tool.get("inputSchema") or {}
        for tool in turn["tools"]
        if isinstance(tool, dict)
    }
    calls = [
        ToolStep(
            tool=_bare(step["tool_name"]),
            arguments=step["arguments"] if isinstance(step["arguments"], dict) else {},
            is_error=step["is_error"] or step["status"] == "error",
            error=step["error"] or "",
            result=step["result"],
        )
        for step in turn["steps"]
        if step["kind"] == "tool"
    ]
    return Turn(
        turn["status"], turn["answer"], calls, {_bare(name): schema for name, schema in schemas.items()}
    )


def _bare(name: str) -> str:
    return name.rpartition("__")[2] if "__" in name else name


def result_text(step: ToolStep) -> str:
    return json.dumps(step.result, ensure_ascii=False)


# --- server-filesystem ----------------------------------------------------------------------


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("buy milk\ncall Ada\n")
    (tmp_path / "docs").mkdir()
    register("files", [*node_server("server-filesystem"), str(tmp_path)])
    return tmp_path


def test_reading_a_file_sends_its_path_not_the_question(files: Path) -> None:
    path = files / "notes.txt"
    turn = ask(f"Read the file {path}", "files")

    [call] = turn.calls
    assert call.tool.startswith("read_") and not call.is_error
    assert call.arguments.get("path", (call.arguments.get("paths") or [None])[0]) == str(path)
    assert turn.valid(call) == []
    assert "buy milk" in result_text(call) and turn.status == "done"


def test_listing_and_moving_send_the_paths_the_question_names(files: Path) -> None:
    listing = ask(f"List the directory {files / 'docs'}", "files")
    moving = ask(f"Move the file {files / 'notes.txt'} to {files / 'docs' / 'notes.txt'}", "files")

    [listed] = listing.calls
    assert listed.tool.startswith("list_directory") and listed.arguments["path"] == str(files / "docs")
    [moved] = moving.calls
    assert moved.tool == "move_file"
    assert moved.arguments == {
        "source": str(files / "notes.txt"),
        "destination": str(files / "docs" / "notes.txt"),
    }
    assert listing.valid(listed) == [] and moving.valid(moved) == [] and not moved.is_error
    assert (files / "docs" / "notes.txt").exists()


def test_a_missing_path_is_filled_from_the_question_after_the_validation_error(files: Path) -> None:
    path = files / "notes.txt"
    turn = ask(f"Read the file {path} [demo:missing-argument]", "files")

    first, second = turn.calls
    assert first.is_error and "'path' is a required property" in first.error + result_text(first)
    assert second.tool == first.tool and second.arguments == {"path": str(path)} and not second.is_error
    assert turn.valid(second) == []


# --- server-memory --------------------------------------------------------------------------


@pytest.fixture
def memory(tmp_path: Path) -> None:
    command = node_server("server-memory")
    services.server_save(
        server=None,
        owner=None,
        fields={"name": "memory", "transport": "stdio", "command": command[0], "args": command[1:]},
        env={"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")},
        secret_env={},
        headers={},
        secret_headers={},
    )


def test_the_knowledge_graph_gets_entities_and_queries_shaped_as_its_schema_says(memory: None) -> None:
    created = ask("Create an entity named Ada Lovelace in the knowledge graph", "memory")
    searched = ask("Search the knowledge graph nodes for Ada Lovelace", "memory")

    [create] = created.calls
    assert create.tool == "create_entities" and not create.is_error and created.valid(create) == []
    [entity] = create.arguments["entities"]
    assert entity["name"] == "Ada Lovelace" and entity["observations"]
    [search] = searched.calls
    assert search.tool == "search_nodes" and search.arguments == {"query": "Ada Lovelace"}
    assert "Ada Lovelace" in result_text(search)


# --- server-everything and sequential thinking ----------------------------------------------


def test_server_everything_gets_its_numbers_its_message_and_an_option_of_its_enum() -> None:
    register("everything", [*node_server("server-everything"), "stdio"])

    summed = ask("What is the sum of 2 and 3?", "everything")
    echoed = ask('Echo "hello inspector"', "everything")
    weather = ask("Get the structured weather content for Chicago", "everything")

    assert [(c.tool, c.arguments) for c in summed.calls] == [("get-sum", {"a": 2, "b": 3})]
    assert [(c.tool, c.arguments) for c in echoed.calls] == [("echo", {"message": "hello inspector"})]
    assert [(c.tool, c.arguments) for c in weather.calls] == [
        ("get-structured-content", {"location": "Chicago"})
    ]
    for turn in (summed, echoed, weather):
        assert all(turn.valid(call) == [] and not call.is_error for call in turn.calls)


def test_a_sequential_thinking_call_counts_from_one_to_a_total_no_smaller() -> None:
    register("thinking", node_server("server-sequential-thinking"))

    turn = ask("Think step by step in 3 thoughts: why is the sky blue?", "thinking")

    [call] = turn.calls
    assert call.tool == "sequentialthinking" and not call.is_error and turn.valid(call) == []
    assert (call.arguments["thoughtNumber"], call.arguments["totalThoughts"]) == (1, 3)
    assert call.arguments["nextThoughtNeeded"] is True


# --- mcp-server-time and mcp-server-git ------------------------------------------------------


def test_mcp_server_time_gets_iana_zones_and_a_rejected_zone_is_repaired_not_repeated() -> None:
    register("time", [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"])

    tokyo = ask("What time is it in Tokyo?", "time")
    lost = ask("What time is it in Atlantis/Lost_City?", "time")

    assert [(c.tool, c.arguments, c.is_error) for c in tokyo.calls] == [
        ("get_current_time", {"timezone": "Asia/Tokyo"}, False)
    ]
    first, second = lost.calls
    assert first.arguments == {"timezone": "Atlantis/Lost_City"} and first.is_error
    assert second.arguments == {"timezone": "UTC"} and not second.is_error
    assert lost.status == "done"


def test_mcp_server_git_gets_the_repository_path(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    register("git", [sys.executable, "-m", "mcp_server_git", "--repository", str(repo)])

    turn = ask(f"Show the git status of the repository {repo}", "git")

    [call] = turn.calls
    assert call.tool == "git_status" and call.arguments == {"repo_path": str(repo)}
    assert not call.is_error and turn.valid(call) == []


# --- a FastMCP-built server -------------------------------------------------------------------


@pytest.fixture
def bookings() -> None:
    register("bookings", [sys.executable, FASTMCP_SERVER])


def test_formats_from_a_fastmcp_schema_get_real_values_and_a_refused_room_is_changed(bookings: None) -> None:
    turn = ask("Schedule a meeting with ada@example.com on 2026-03-14 at 15:30 for 45 minutes", "bookings")

    first, second = turn.calls
    assert first.tool == "schedule_meeting"
    # The record masks e-mail addresses; the server accepting the call is what shows it was one.
    assert first.arguments == {
        "attendee": "[REDACTED:email]",
        "start": "2026-03-14T15:30:00Z",
        "duration_minutes": 45,
    }
    datetime.fromisoformat(first.arguments["start"])
    assert turn.valid(first) == ["'[REDACTED:email]' is not a 'email'"]
    # The server refused its default room, naming the field: the room is changed, nothing else.
    assert first.is_error and "Invalid value for room: 'Blue' is fully booked" in result_text(first)
    assert second.arguments == {**first.arguments, "room": "Green"} and not second.is_error
    assert "Meeting with [REDACTED:email] at 2026-03-14T15:30:00" in result_text(second)
    assert turn.status == "done"


def test_a_date_a_uri_and_the_schemas_examples_fill_a_visit(bookings: None) -> None:
    turn = ask("Plan a visit of https://example.org/museum on 2026-05-01", "bookings")

    [call] = turn.calls
    assert call.tool == "plan_visit" and not call.is_error and turn.valid(call) == []
    assert call.arguments == {
        "day": "2026-05-01",
        "website": "https://example.org/museum",
        "guests": 2,
        "language": "en",
    }
