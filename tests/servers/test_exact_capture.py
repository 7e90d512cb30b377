"""Exact capture from a real stdio server: every byte it writes outside JSON-RPC is kept, with
the operation it interrupted, and its stderr is kept whole, redacted, in a private file."""

from __future__ import annotations

import itertools
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from conversations.loop.wire import WireExchange
from servers import gateway
from servers.gateway import CallOutcome, ServerConfig
from tests.fixtures import broken_server

REPO_ROOT = Path(__file__).resolve().parents[2]
_server_ids = itertools.count(9500)
SECRET = "s3cret-value-for-stderr"


@pytest.fixture(autouse=True)
def close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def broken(**overrides: Any) -> ServerConfig:
    overrides.setdefault("call_timeout", 15.0)
    return ServerConfig(
        server_id=next(_server_ids),
        name=f"broken-{next(_server_ids)}",
        transport="stdio",
        command=sys.executable,
        args=("-m", "tests.fixtures.broken_server"),
        cwd=str(REPO_ROOT),
        **overrides,
    )


def strays(records: list[WireExchange]) -> list[WireExchange]:
    return [record for record in records if record.label == "transport error"]


def stderr_of(outcome: CallOutcome) -> str:
    return "".join(record.response_body for record in outcome.records if record.label == "stderr")


def test_a_line_of_invalid_utf8_is_kept_byte_for_byte_with_the_call_it_interrupted() -> None:
    config = broken()

    outcome = gateway.call_tool(config, "invalid_utf8", {})
    after = gateway.call_tool(config, "echo", {"text": "still here"})

    assert outcome.error == ""
    [stray] = strays(outcome.records)
    assert stray.response_body.encode("utf-8", errors="surrogateescape") == broken_server.INVALID_UTF8_LINE
    assert "not UTF-8 (first at byte 11)" in stray.error
    assert stray.status == "error"
    assert after.error == "" and after.session is not None and not after.session.spawned
    assert strays([*after.records, *after.unclaimed]) == []


def test_a_line_that_is_not_json_rpc_is_linked_to_the_call_that_was_running() -> None:
    outcome = gateway.call_tool(broken(), "noisy", {})

    [stray] = strays(outcome.records)
    assert stray.response_body == broken_server.NOISE_LINE
    assert "not a JSON-RPC message" in stray.error
    assert strays(outcome.unclaimed) == []


def test_a_half_written_line_of_a_server_that_crashed_is_kept_with_the_call() -> None:
    outcome = gateway.call_tool(broken(), "crash_mid_line", {})

    assert outcome.error != ""
    [stray] = strays(outcome.records)
    assert stray.response_body.encode("utf-8", errors="surrogateescape") == broken_server.HALF_LINE
    assert "cut short" in stray.error


def test_stderr_larger_than_two_megabytes_is_kept_whole_with_the_call() -> None:
    outcome = gateway.call_tool(broken(), "shout", {"megabytes": 3})

    assert outcome.error == ""
    text = stderr_of(outcome)
    lines = [line for line in text.splitlines() if line.startswith("stderr line ")]
    assert len(lines) == 150_000
    assert lines[0] == "stderr line 0000000" and lines[-1] == "stderr line 0149999"


def test_stderr_is_redacted_in_the_record_and_in_its_private_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TCI_TEST_STDERR_SECRET", SECRET)
    config = broken(env=(("FIXTURE_SECRET", "${TCI_TEST_STDERR_SECRET}"),), secrets=(SECRET,))

    outcome = gateway.call_tool(config, "shout", {"megabytes": 0, "secret_env": "FIXTURE_SECRET"})

    assert outcome.error == ""
    text = stderr_of(outcome)
    assert "the secret is " in text and SECRET not in text
    files = sorted(Path(settings.MCP_STDERR_DIR).glob(f"{config.name}-*.log"))
    assert files, "the server's stderr file is missing"
    content = files[-1].read_bytes()
    assert b"the secret is " in content and SECRET.encode() not in content
    assert stat.S_IMODE(files[-1].stat().st_mode) == 0o600


def test_a_response_to_an_id_never_sent_is_linked_to_the_call_that_was_in_flight() -> None:
    config = broken()

    outcome = gateway.call_tool(config, "decoy", {})

    assert outcome.error == ""
    [decoy] = [record for record in outcome.records if record.label == "response to unknown id"]
    assert decoy.jsonrpc_id == broken_server.DECOY_ID
    assert decoy.error == "the id matches no request in flight (it came while this operation was in flight)"
    # As the server wrote it (the record keeps a stdio line's bytes, not the parsed message).
    assert decoy.response_body == broken_server.DECOY_LINE.decode()
    assert not [record for record in outcome.unclaimed if record.label == "response to unknown id"]
    # The call's own answer is still its answer.
    call = next(record for record in outcome.records if record.label == "tools/call")
    assert call.status == "ok" and "sent a decoy" in call.response_body
