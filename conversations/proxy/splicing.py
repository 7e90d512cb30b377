"""The spliced prompt of a host's model call, made as the loop makes its own (``runner.
prompt_renderer``: ``splicing.splice`` and the same counts).

A Chat Completions request already holds the messages and tools in the shape splicing reads, so
it is spliced as sent: with the key's profile's chat template when it has one (the exact text
the open-weight model reads), else through the generic template, labelled illustrative, as the
loop shows a hosted model's. Requests of the other formats are not rendered: no prompt is
claimed, and the step shows the request body.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any

from conversations.counting import definitions_counted, with_response_format
from conversations.loop.splicing import splice
from conversations.proxy.models import ProxyKey
from conversations.typealias import JSONDict

logger = logging.getLogger(__name__)

NOT_CHAT = (
    "recorded by proxy: only Chat Completions requests are spliced; the request body is what the model got"
)


def _dicts(value: object) -> list[JSONDict] | None:
    if not isinstance(value, list):
        return None
    return [item for item in value if isinstance(item, dict)]


def spliced_fields(key: ProxyKey, fmt: str, request: JSONDict, *, fallback: str) -> dict[str, Any]:
    """The step's ``prompt``, ``prompt_exact``, ``prompt_source`` and ``tokens``."""
    none: dict[str, Any] = {"prompt": "", "prompt_exact": False, "prompt_source": fallback[:300]}
    messages = _dicts(request.get("messages"))
    if fmt != "openai_chat":
        return {**none, "prompt_source": NOT_CHAT}
    if messages is None:
        return none
    tools = _dicts(request.get("tools")) or []
    profile = key.profile
    model = request.get("model")
    try:
        spliced = splice(
            messages=messages,
            tools=tools,
            model=model if isinstance(model, str) else (profile.model if profile else ""),
            template=(profile.chat_template or None) if profile else None,
            templates=(profile.chat_templates or None) if profile else None,
            template_source=(profile.chat_template_source if profile else "")
            or "the key's profile's chat template",
            special_tokens=(profile.special_tokens or None) if profile else None,
            tokenizer=profile.tokenizer if profile else "",
            added_tokens=(profile.added_tokens or ()) if profile else (),
            arguments_setting=profile.template_arguments if profile else "",
        )
        spliced = definitions_counted(spliced, tools)
        response_format = request.get("response_format")
        spliced = with_response_format(
            spliced, response_format if isinstance(response_format, dict) else None
        )
    except Exception as exc:  # what a host sent must not stop its record: the step says why
        logger.exception("could not splice a proxied request")
        return {
            **none,
            "prompt_source": f"the inspector could not splice this request: {type(exc).__name__}"[:300],
        }
    return {
        "prompt": spliced.text,
        "prompt_exact": spliced.exact,
        "prompt_source": spliced.source[:300],
        "tokens": asdict(spliced.tokens),
    }
