"""A stdio server's stdout line longer than MCP_STDOUT_LINE_LIMIT is kept up to the limit and
marked, the rest counted: an endless line costs bounded memory and the call's record says so."""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest
from pytest_django.fixtures import Settings

from servers import gateway
from tests.servers.test_exact_capture import broken, strays

LIMIT = 1_000_000
# Growth of the process's peak resident size a call may cause: a few limits' worth, far below
# the hundreds of megabytes the endless line writes before its call times out.
MEMORY_LIMIT = 120_000_000


@pytest.fixture(autouse=True)
def small_lines(settings: Settings) -> Iterator[None]:
    settings.MCP_STDOUT_LINE_LIMIT = LIMIT
    yield
    gateway.close_all()


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def test_a_long_line_is_kept_up_to_the_limit_marked_and_counted_and_the_session_goes_on() -> None:
    config = broken()

    outcome = gateway.call_tool(config, "long_line", {"megabytes": 5})

    assert outcome.error == ""
    cut, end = strays(outcome.records)
    assert len(cut.response_body) == LIMIT and set(cut.response_body) == {"x"}
    assert "a line longer than 1,000,000 bytes (MCP_STDOUT_LINE_LIMIT)" in cut.error
    assert "the line cut at MCP_STDOUT_LINE_LIMIT ended after 5,000,000 bytes" in end.error
    after = gateway.call_tool(config, "echo", {"text": "still here"})
    assert after.error == "" and after.session is not None and not after.session.spawned


def test_an_endless_line_ends_the_call_at_its_timeout_in_bounded_memory_with_the_cut_recorded() -> None:
    before = _peak()

    outcome = gateway.call_tool(broken(call_timeout=3.0), "endless_line", {})

    assert outcome.error != ""
    [cut] = strays(outcome.records)
    assert len(cut.response_body) == LIMIT
    assert "a line longer than 1,000,000 bytes (MCP_STDOUT_LINE_LIMIT)" in cut.error
    assert "the rest is counted and not kept" in cut.error
    assert _peak() - before < MEMORY_LIMIT
