"""Answers to the server's own requests (sampling, elicitation) during one operation."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import mcp.types as types


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
