"""The demo model in every provider's wire format: requests in, Chat Completions form, and back.

The demo's behaviour lives in one place, :func:`conversations.demo.model.complete`, which reads a
Chat Completions request and writes a ``chat.completion``. A
:class:`~conversations.demo.base.Dialect` converts another format's request into that form
(``to_chat``), and the demo's answer back into the format's reply (``from_chat``), its event
stream (``events``) or its error envelope (``error``). The dialects, by provider key, are
:data:`DIALECTS`; each lives in its own module (``openai_chat``, ``openai_responses``,
``anthropic``, ``gemini``) over :mod:`conversations.demo.base`.

Streams are written whole (the demo has no token-by-token generation), but split the way the
real APIs split them: text in small pieces, and a call's arguments over several chunks
(Anthropic's ``input_json_delta``, Responses' ``function_call_arguments.delta``, Chat's
``tool_calls[index]`` fragments). Gemini sends each ``functionCall`` whole in one chunk, as the
Gemini API does (docs/wire-formats.md §5.1).

Formats whose structured output has no schema name (Anthropic ``output_config``, Gemini
``responseJsonSchema``) are named in those modules: the structured paradigm's union is recognised by its
root ``decision`` property.

Pure Python: no Django, no I/O.
"""

from __future__ import annotations

from conversations.demo.anthropic import ANTHROPIC
from conversations.demo.base import Dialect
from conversations.demo.gemini import GEMINI
from conversations.demo.openai_chat import CHAT
from conversations.demo.openai_responses import RESPONSES

DIALECTS: dict[str, Dialect] = {dialect.key: dialect for dialect in (CHAT, RESPONSES, ANTHROPIC, GEMINI)}
