"""Chat templates: the text a model reads for one call, made from the request's messages and tools.

What "exact" can mean depends on the backend (docs/wire-formats.md §0):

* **Prompt paradigms** write the tool descriptions into the system prompt themselves. With the
  model's template they are rendered like any request (exact); without one, the messages are
  shown role-labelled exactly as they were sent, labelled ``as sent`` (:data:`PARADIGM_SOURCE`):
  the provider applies its own template around them, which is not known, so never ``exact``.
* **Open-weight models** read their Jinja chat template applied to the messages and tools. With
  the model's own template (pasted into the profile, or read from the serving engine by
  :mod:`conversations.loop.splicing.engines`) :func:`render_chat_template` reproduces transformers' rendering
  environment (docs/wire-formats.md §7.1), so the result is the exact prompt.
* **Hosted closed models** never reveal their rendering. We show :data:`GENERIC_TEMPLATE`
  applied to the request, always labelled as illustrative: a generic ChatML rendering in the
  style of the Hermes / Qwen tool templates, written for this project — not any provider's
  real template. A plain-Python rendering of it (the ChatML fast path) gives the same text in a
  fraction of Jinja's time.

:func:`spliced_text` chooses among them; which of an engine's templates is rendered is chosen in
:mod:`conversations.loop.splicing.engines`. The Jinja rendering is :mod:`conversations.loop.splicing.rendering`,
the generic template's plain-Python rendering :mod:`conversations.loop.splicing.generic`. Pure Python:
no Django, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from conversations.loop.splicing.arguments import rewritten_arguments
from conversations.loop.splicing.generic import GenericRenderer
from conversations.loop.splicing.pieces import Render
from conversations.loop.splicing.rendering import (
    GENERIC_TEMPLATE,
    TemplateError,
    check_template,
    missing_special_tokens,
    parses_arguments,
    render_chat_template,
)
from conversations.typealias import JSONDict, JSONValue

__all__ = [
    "GENERIC_SOURCE",
    "GENERIC_TEMPLATE",
    "OLLAMA_GO_TEMPLATE_SOURCE",
    "PARADIGM_SOURCE",
    "GenericRenderer",
    "Rendering",
    "TemplateError",
    "check_template",
    "missing_special_tokens",
    "parses_arguments",
    "render_chat_template",
    "result_texts",
    "spliced_text",
    "tool_texts",
]

GENERIC_SOURCE = "generic ChatML template (illustrative: the provider's own rendering is not observable)"
# The label pages show ("as sent — the provider applies its own template") is this prefix.
PARADIGM_SOURCE = "as sent — the provider applies its own template: the messages as the paradigm wrote them"
OLLAMA_GO_TEMPLATE_SOURCE = "Ollama Go template (shown as is; not rendered)"


def _content_text(content: JSONValue) -> str:
    """A message's content as plain text: strings as is, the text of content parts, else JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces: list[str] = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(str(part["text"]))
        return "".join(pieces)
    return json.dumps(content, ensure_ascii=False)


def _plain_rendering(messages: Sequence[JSONDict]) -> str:
    """Role-labelled text of the messages, for prompt paradigms whose messages are the prompt.

    Calls carried natively (rare in prompt paradigms) are shown as one JSON line each, so
    nothing the request holds is hidden.
    """
    blocks: list[str] = []
    for message in messages:
        role = str(message.get("role", "?"))
        label = role
        if role == "tool" and message.get("tool_call_id"):
            label = f"tool ({message['tool_call_id']})"
        lines = [_content_text(message.get("content"))]
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if isinstance(call, dict):
                    function = call.get("function")
                    lines.append(
                        "tool call: "
                        + json.dumps(function if function is not None else call, ensure_ascii=False)
                    )
        body = "\n".join(line for line in lines if line)
        blocks.append(f"### {label}\n{body}")
    return "\n\n".join(blocks)


def _tool_name(tool: JSONDict) -> str:
    function = tool.get("function")
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        return str(function["name"])
    return str(tool.get("name", "?"))


def tool_texts(tools: Sequence[JSONDict]) -> dict[str, str]:
    """Each tool's definition as the Hermes-style templates splice it (one JSON line), by name."""
    return {_tool_name(tool): json.dumps(tool, ensure_ascii=False) for tool in tools}


def result_texts(messages: Sequence[JSONDict]) -> list[str]:
    """The text of each tool result in ``messages``, in order."""
    return [_content_text(message.get("content")) for message in messages if message.get("role") == "tool"]


# --- Choosing the rendering ----------------------------------------------------------------------


# Sources are stored in a short column and read in a header line; a long jinja message is cut.
_MAX_PROBLEM_CHARS = 180


def _shorten(text: str) -> str:
    return text if len(text) <= _MAX_PROBLEM_CHARS else text[: _MAX_PROBLEM_CHARS - 1] + "…"


def _is_go_template(source: str) -> bool:
    return "go template" in source.lower()


@dataclass
class Rendering:
    """The text of one call's prompt and what may be claimed about it.

    ``status`` is ``"exact"`` (the engine renders exactly this), ``"warning"`` (the template
    rendered, but something it reads was not configured: see ``warnings``), ``"failed"`` (the
    template failed; ``text`` is a stand-in the source names), ``"as sent"`` (no template, a
    prompt paradigm: the messages as sent, without the provider's markup) or ``"illustrative"``
    (no template: the generic rendering). ``exact`` is true only for ``"exact"``.
    """

    text: str
    status: str
    source: str
    warnings: list[str] = field(default_factory=list)
    # Renders other messages and tools the same way (None: the paradigm's messages, which have
    # no native tools): how the text of each spliced piece is found (pieces.spliced_pieces).
    render: Render | None = field(default=None, repr=False, compare=False)

    @property
    def exact(self) -> bool:
        return self.status == "exact"


def spliced_text(
    *,
    messages: list[JSONDict],
    tools: list[JSONDict],
    template: str | None,
    template_source: str,
    prompt_is_ours: bool,
    special_tokens: Mapping[str, str] | None,
    arguments: str = "object",
    generic: GenericRenderer | None = None,
) -> Rendering:
    """The prompt of one call, by the rules of :func:`conversations.loop.splicing.splice`; ``generic``
    renders it when the generic template does (a new one when None)."""
    problem: str | None = None
    if template is not None and template.strip() and _is_go_template(template_source):
        problem = "the server's template is an Ollama Go template (not rendered)"
        template = None
    if template is not None and template.strip():
        try:
            text = render_chat_template(
                template,
                messages=messages,
                tools=None if prompt_is_ours else tools,
                special_tokens=special_tokens,
                arguments=arguments,
            )
        except TemplateError as exc:
            problem = f"failed: {template_source}: {_shorten(str(exc))}"
        else:
            rewritten = rewritten_arguments(messages, text)
            if rewritten:
                calls = "1 call differs" if rewritten == 1 else f"{rewritten} calls differ"
                template_source += (
                    f" — the template re-serialises tool-call arguments: {calls} from the model's own text"
                )
            chosen = template

            def again(other: list[JSONDict], other_tools: list[JSONDict]) -> str:
                return render_chat_template(
                    chosen,
                    messages=other,
                    tools=None if prompt_is_ours else other_tools,
                    special_tokens=special_tokens,
                    arguments=arguments,
                )

            missing = missing_special_tokens(template, special_tokens)
            if not missing:
                return Rendering(text, "exact", template_source, render=again)
            warnings = [
                f"the template uses {name}, which is not configured: rendered empty" for name in missing
            ]
            names = ", ".join(missing)
            source = f"{template_source} — warning: {names} not configured, rendered empty (not exact)"
            return Rendering(text, "warning", source, warnings, render=again)

    failed = problem is not None and problem.startswith("failed: ")
    if prompt_is_ours:
        # The messages exactly as sent, but not the text the model reads: the provider wraps them
        # in a chat template we do not have (or could not render).
        if problem is None:
            return Rendering(_plain_rendering(messages), "as sent", PARADIGM_SOURCE)
        source = (
            f"{problem} — shown instead: {PARADIGM_SOURCE}" if failed else f"{PARADIGM_SOURCE} — {problem}"
        )
        return Rendering(_plain_rendering(messages), "failed" if failed else "as sent", source)

    # The generic template is ours and tested; a failure here is a bug and should surface.
    generic = generic if generic is not None else GenericRenderer()
    text = generic(messages, tools)
    if problem is None:
        return Rendering(text, "illustrative", GENERIC_SOURCE, render=generic)
    if failed:
        source = f"{problem} — shown instead: the generic ChatML template (illustrative)"
        return Rendering(text, "failed", source, render=generic)
    source = f"generic ChatML template (illustrative) — {problem}"
    return Rendering(text, "illustrative", source, render=generic)
