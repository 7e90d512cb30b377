"""The transports the gateway opens are the ones the shared vocabulary names."""

from __future__ import annotations

from conversations.loop.wire import TRANSPORT_NAMES
from servers.gateway.transports import TRANSPORTS


def test_the_gateway_opens_exactly_the_transports_a_transcript_may_name_in_their_order() -> None:
    # A transcript's import accepts the names of ``TRANSPORT_NAMES``; forms offer ``TRANSPORTS``.
    assert tuple(TRANSPORTS) == TRANSPORT_NAMES
