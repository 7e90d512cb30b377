"""P13, the recording proxies' overhead: the product through the proxies ÷ the same traffic direct,
in one run. Its two halves are their own modules: ``bench.p13_proxy_llm`` (``P13.llm``, a 1 MB
streamed model reply; ``P13.streams``, 200 concurrent proxied streams, every exchange stored)
and ``bench.p13_proxy_mcp`` (``P13.mcp``, a 200-call MCP stdio session)."""

from __future__ import annotations

from collections.abc import Callable

from bench import p13_proxy_llm, p13_proxy_mcp
from bench.context import Context
from bench.stats import Result, guarded

ID = "P13"


def run(ctx: Context) -> list[Result]:
    # Each half reports its own results (and each result its own error): one that breaks, even
    # before its first result, does not turn the others into errors.
    try:
        llm = p13_proxy_llm.run(ctx)
    except Exception as exc:  # noqa: BLE001 — the LLM half's own error
        llm = [guarded(id, _raise(exc)) for id in (p13_proxy_llm.ID, p13_proxy_llm.STREAMS_ID)]
    return [*llm, guarded(p13_proxy_mcp.ID, lambda: p13_proxy_mcp.run(ctx)[0])]


def _raise(exc: Exception) -> Callable[[], Result]:
    def again() -> Result:
        raise exc

    return again
