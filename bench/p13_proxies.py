"""P13, the recording proxies' overhead: the product through the proxies ÷ the same traffic direct,
in one run. Its two halves are their own modules: ``bench.p13_proxy_llm`` (``P13.llm``, a 1 MB
streamed model reply; ``P13.streams``, 200 concurrent proxied streams, every exchange stored)
and ``bench.p13_proxy_mcp`` (``P13.mcp``, a 200-call MCP stdio session)."""

from __future__ import annotations

from bench import p13_proxy_llm, p13_proxy_mcp
from bench.context import Context
from bench.stats import Result

ID = "P13"


def run(ctx: Context) -> list[Result]:
    return [*p13_proxy_llm.run(ctx), *p13_proxy_mcp.run(ctx)]
