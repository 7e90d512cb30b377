"""The spliced prompt of a host's model call, when the key's profile knows the model's chat
template (as the loop's native calls get theirs); otherwise none is claimed."""

from __future__ import annotations

from typing import Any

from conversations.proxy.models import ProxyKey
from conversations.typealias import JSONDict


def spliced_fields(key: ProxyKey, fmt: str, request: JSONDict, *, fallback: str) -> dict[str, Any]:
    """The step's ``prompt``, ``prompt_exact``, ``prompt_source`` and ``tokens``."""
    return {"prompt": "", "prompt_exact": False, "prompt_source": fallback[:300]}
