"""A streamable HTTP session's listening stream comes before its first operation.

After the ``initialize`` handshake the MCP SDK opens the session's listening stream (a GET) in a
task of its own, beside whatever the client sends next. The gateway's first operation waits for
that GET's answer (at most ``pool.LISTEN_SECONDS``), so a server sees the session's requests in
the order the client made them. Without it a busy host could send the first ``tools/call`` before
the GET: the official conformance suite's ``sse-retry`` scenario then took the GET for the
client's reconnection and failed it as 52 ms too early. A server that answers its GET late makes
the order certain here.
"""

from __future__ import annotations

import pytest

from servers import gateway
from servers.gateway import pool
from servers.gateway.config import ServerConfig
from tests.servers.late_answers_server import late_answers

# How long the server holds its answer to the GET: far longer than a client takes to send its
# next request, far shorter than ``LISTEN_SECONDS``.
GET_LATE = 0.3


def _config(url: str) -> ServerConfig:
    return ServerConfig(server_id=9700, name="late-answers", transport="http", url=url, call_timeout=10)


def test_the_first_operation_of_a_session_waits_for_its_listening_streams_answer() -> None:
    with late_answers(get_late=GET_LATE) as server:
        try:
            listing = gateway.list_tools(_config(server.url))
        finally:
            gateway.close_all()

    assert listing.error == "", listing.error
    order = [name for name, _ in server.seen]
    assert order.index("GET answered") < order.index("tools/list"), order


def test_a_listening_stream_that_is_not_answered_holds_the_first_operation_back_only_to_its_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pool, "LISTEN_SECONDS", 0.2)
    with late_answers(get_late=3.0) as server:
        try:
            listing = gateway.list_tools(_config(server.url))
            order = [name for name, _ in server.seen]
        finally:
            gateway.close_all()

    assert listing.error == "", listing.error
    assert "tools/list" in order and "GET answered" not in order, order
