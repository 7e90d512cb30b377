"""The web process's access log, written through logging and so through the one redactor.

Daphne's own access log writes each request's path straight to stdout, past every logging
filter, and a recording proxy's path holds its key (``/proxy/<key>/...``). So the app is served
with daphne's log off (``daphne -v 0``: the Makefile, the image, compose and the docs) and writes
its own here: one line per HTTP request once its answer has ended, at INFO on the logger
``inspector.access``, in the form daphne's took: client, method and path (never the query
string, where a Gemini host may put its key), status, bytes of body and milliseconds. Every
line passes ``LOGGING``'s ``redact`` filter (``conversations.redaction.LogRedactionFilter``),
which knows a proxy key's shape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

logger = logging.getLogger("inspector.access")

Scope = dict[str, Any]
Message = Mapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def with_access_log(app: App) -> App:
    """``app`` (an ASGI HTTP application) with a line in the access log for each request."""

    async def logged(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or not logger.isEnabledFor(logging.INFO):
            await app(scope, receive, send)
            return
        started = time.monotonic()
        answer = {"status": 0, "size": 0}

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = int(message.get("status", 0))
            elif message["type"] == "http.response.body":
                answer["size"] += len(message.get("body", b""))
            await send(message)

        try:
            await app(scope, receive, counted)
        finally:
            client = scope.get("client") or ("-", 0)
            logger.info(
                '%s:%s "%s %s" %s %s %.0fms',
                client[0],
                client[1],
                scope.get("method", "-"),
                # Escaped as a Python literal: a line break, a terminal escape or a bidi control
                # in a (percent-decoded) path cannot forge or disguise a line.
                repr(str(scope.get("path", "")))[1:-1],
                answer["status"] or "-",
                answer["size"],
                (time.monotonic() - started) * 1000,
            )

    return logged
