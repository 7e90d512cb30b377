"""Answers to the server's own requests (sampling, elicitation) during one operation."""

from __future__ import annotations

from typing import Protocol, cast, runtime_checkable

import mcp.types as types
from mcp import Client


@runtime_checkable
class ClientFeatures(Protocol):
    """Whoever answers a server's ``sampling/createMessage`` and ``elicitation/create``.

    Set on the ``Capture`` of an operation; the session routes the server's requests made while
    the operation runs to it. Both methods run on the gateway loop and must not block it.
    """

    async def sample(
        self, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData: ...

    async def elicit(self, params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData: ...


async def log_level_send(client: Client, level: str) -> types.EmptyResult:
    """``logging/setLevel`` at ``level``, sent as a plain request over the client's session.

    The SDK's ``set_logging_level`` helpers are marked deprecated (the protocol revision of
    2026-07-28 deprecates the logging capability, SEP-2577) and warn on every call, twice for
    the client's. The servers that advertise logging are those of the earlier revisions, which
    define the request, so the gateway sends it itself and the SDK has nothing to warn about.
    """
    params = types.SetLevelRequestParams(level=cast(types.LoggingLevel, level))
    return await client.session.send_request(types.SetLevelRequest(params=params), types.EmptyResult)
