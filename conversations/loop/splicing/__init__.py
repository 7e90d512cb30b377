"""The spliced prompt: the text a model actually reads for one call, and its token counts.

Two halves, joined by :func:`splice`:

* :mod:`conversations.loop.splicing.templates` — the text: a chat template rendered as transformers
  renders it, the generic ChatML rendering (illustrative) for hosted models, the paradigm's own
  messages.
* :mod:`conversations.loop.splicing.engines` — the templates a serving engine (or a tokenizer config)
  publishes, and the one it applies to each request.
* :mod:`conversations.loop.splicing.tokens` — the counts: which tokenizer a model uses, and the
  tokens of the prompt, of each tool definition and of each tool result.

The public names of both are importable from here. Pure Python: no Django, no I/O.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from conversations.loop.splicing.arguments import ARGUMENT_MODE_LABELS, ARGUMENT_MODES, setting_note
from conversations.loop.splicing.engines import (
    LLAMA_CPP_SOURCE,
    TOKENIZER_CONFIG_SOURCE,
    ServerTemplate,
    arguments_mode,
    choose_template,
    probe_request,
    server_template,
    template_from_server,
    templates_from_tokenizer_config,
)
from conversations.loop.splicing.pieces import spliced_pieces
from conversations.loop.splicing.templates import (
    GENERIC_SOURCE,
    GENERIC_TEMPLATE,
    OLLAMA_GO_TEMPLATE_SOURCE,
    PARADIGM_SOURCE,
    GenericRenderer,
    Rendering,
    TemplateError,
    check_template,
    missing_special_tokens,
    parses_arguments,
    render_chat_template,
    result_texts,
    spliced_text,
    tool_texts,
)
from conversations.loop.splicing.tokens import (
    ENCODINGS,
    TokenReport,
    choose_encoding,
    count_tokens,
    encoding_for,
    token_report,
)
from conversations.typealias import JSONDict

__all__ = [
    "ARGUMENT_MODES",
    "ARGUMENT_MODE_LABELS",
    "ENCODINGS",
    "GENERIC_SOURCE",
    "GENERIC_TEMPLATE",
    "GenericRenderer",
    "LLAMA_CPP_SOURCE",
    "OLLAMA_GO_TEMPLATE_SOURCE",
    "PARADIGM_SOURCE",
    "Rendering",
    "ServerTemplate",
    "Spliced",
    "TOKENIZER_CONFIG_SOURCE",
    "TemplateError",
    "TokenReport",
    "arguments_mode",
    "choose_encoding",
    "check_template",
    "choose_template",
    "count_tokens",
    "encoding_for",
    "missing_special_tokens",
    "probe_request",
    "prompt_diff",
    "render_chat_template",
    "server_template",
    "splice",
    "template_from_server",
    "templates_from_tokenizer_config",
]


# Each piece counted by difference costs one more rendering of the prompt; past this many (a
# long turn), each is counted as its own text and the note says so.
MAX_PIECES_BY_DIFFERENCE = 100


@dataclass
class Spliced:
    """The prompt text of one model call, whether it is exact, where it came from, its tokens.

    ``status`` is ``exact``, ``warning``, ``failed``, ``as sent`` or ``illustrative`` (see
    :class:`~conversations.loop.splicing.templates.Rendering`); ``exact`` is true only for ``exact``.
    ``warnings`` says what kept a rendered template from being exact.
    """

    text: str
    exact: bool
    source: str
    tokens: TokenReport
    status: str = "exact"
    warnings: list[str] = field(default_factory=list)


def splice(
    *,
    messages: list[JSONDict],
    tools: list[JSONDict],
    model: str,
    template: str | None = None,
    templates: Mapping[str, str] | None = None,
    template_source: str = "the profile's chat template",
    prompt_is_ours: bool = False,
    special_tokens: Mapping[str, str] | None = None,
    arguments: str | None = None,
    tokenizer: str = "",
    added_tokens: Sequence[str] = (),
    arguments_setting: str = "",
    generic: GenericRenderer | None = None,
) -> Spliced:
    """The spliced prompt of one model call (OpenAI-shaped ``messages`` and ``tools``).

    * ``templates`` are the engine's other named templates (``tool_use``…): the one the engine
      would apply to this request is chosen and named in ``source``
      (:func:`~conversations.loop.splicing.engines.choose_template`).
    * ``template`` given → rendered; ``exact=True``, ``source=template_source``. With
      ``prompt_is_ours`` it is rendered without ``tools`` (the paradigm sends none natively;
      its tool text is already in the messages). A special token the template reads with no
      configured value (:func:`missing_special_tokens`) → rendered, status ``warning``, not exact.
    * ``template`` fails → status ``failed``, never exact: the fallback below is shown and
      ``source`` starts with ``failed:`` and names the template's error.
    * A template whose ``template_source`` says it is a Go template (Ollama) is not Jinja and is
      not rendered; ``source`` says so.
    * No template, ``prompt_is_ours`` → the messages, role-labelled; status ``as sent``,
      ``exact=False`` (the text is what we sent, but the provider's chat template around it is
      not known: not the text the model reads).
    * Otherwise → :data:`GENERIC_TEMPLATE`, ``exact=False``, labelled illustrative.

    ``arguments`` says how the engine hands tool-call arguments to the template (``object``,
    ``string``, ``llama.cpp``: :mod:`conversations.loop.splicing.arguments`); None → from the
    template's source (:func:`~conversations.loop.splicing.engines.arguments_mode`). When the
    rendered text does not hold a call's arguments as the model wrote them, ``source`` says so.
    ``arguments_setting`` is a profile's override of that (one of :data:`ARGUMENT_MODES`; empty:
    none): it wins over ``arguments`` and ``source`` names it.

    ``generic`` renders the prompt when the generic template does: one kept for a turn's calls
    writes once what each call repeats of the one before (see :class:`GenericRenderer`).

    Tokens: see :class:`TokenReport`; the encoding is ``tokenizer`` (a profile setting) when
    given, else chosen from the rendered template's family, its special tokens and ``model``
    (:func:`~conversations.loop.splicing.tokens.choose_encoding`); ``added_tokens`` (a tokenizer
    config's) count as one token each. Tool counts are each definition's JSON as Hermes-style
    templates splice it, keyed by function name.
    """
    if arguments_setting:
        if arguments_setting not in ARGUMENT_MODES:
            modes = ", ".join(ARGUMENT_MODES)
            raise ValueError(f"the arguments setting must be one of {modes}, not {arguments_setting!r}")
        arguments = arguments_setting
    if arguments is None:
        arguments = arguments_mode(template_source)
    template, template_source = choose_template(
        template, templates, template_source, has_tools=bool(tools) and not prompt_is_ours
    )
    rendering = spliced_text(
        messages=messages,
        tools=tools,
        template=template,
        template_source=template_source,
        prompt_is_ours=prompt_is_ours,
        special_tokens=special_tokens,
        arguments=arguments,
        generic=generic,
    )
    go = "go template" in template_source.lower()  # not rendered: no arguments were passed
    if (
        arguments_setting
        and template
        and template.strip()
        and not go
        and rendering.status not in ("illustrative", "as sent")
    ):
        note = setting_note(arguments_setting, parses=parses_arguments(template, arguments_setting))
        rendering.source = f"{rendering.source} — {note}"
    result_pieces, how = result_texts(messages), ""
    pieces = len(tools) + len(result_pieces)
    tool_pieces: dict[str, str] | None = None
    if rendering.render is not None and pieces > MAX_PIECES_BY_DIFFERENCE:
        how = f"{pieces} pieces: each tool and result counted as its own text, not by difference"
    elif rendering.render is not None:
        found_tools, result_pieces = spliced_pieces(rendering.render, rendering.text, messages, tools)
        how = "each tool and result: the text the prompt loses when rendered without it"
        if not prompt_is_ours:
            tool_pieces = found_tools
        else:
            how = "each result: the text the prompt loses when rendered without it; each tool: its JSON"
    if tool_pieces is None:
        tool_pieces = tool_texts(tools)
    report = token_report(
        rendering.text,
        model=model,
        tools=tool_pieces,
        results=result_pieces,
        exact=rendering.exact,
        as_sent=rendering.status == "as sent",
        how=how,
        # The template's family tells the tokenizer only when that template made the text.
        template=template if rendering.status in ("exact", "warning") else None,
        special_tokens=special_tokens,
        tokenizer=tokenizer,
        added_tokens=added_tokens,
    )
    return Spliced(
        rendering.text,
        rendering.exact,
        rendering.source,
        report,
        status=rendering.status,
        warnings=rendering.warnings,
    )


# --- Step-to-step difference ---------------------------------------------------------------------


# The most line pairs the line matcher compares in one diff (its work grows with their product).
MAX_DIFF_PAIRS = 4_000_000


def prompt_diff(previous: str, current: str) -> list[tuple[str, str]]:
    """What changed in the prompt between two steps, line by line: ``(op, text)`` chunks.

    ``op`` is ``"same"``, ``"added"`` or ``"removed"``; neighbouring lines with the same op are
    merged into one chunk and keep their line ends, so the ``same``+``added`` texts joined give
    ``current`` and the ``same``+``removed`` texts joined give ``previous``. A replaced block is
    reported as its removed lines, then its added lines. Lines the two share at the start and
    the end are ``same`` at once; when what lies between is more than ``MAX_DIFF_PAIRS`` line
    pairs to compare, it is reported replaced whole.
    """
    old = previous.splitlines(keepends=True)
    new = current.splitlines(keepends=True)
    chunks: list[tuple[str, str]] = []

    def emit(op: str, lines: list[str]) -> None:
        if not lines:
            return
        text = "".join(lines)
        if chunks and chunks[-1][0] == op:
            chunks[-1] = (op, chunks[-1][1] + text)
        else:
            chunks.append((op, text))

    # The lines both share at the start and at the end are the same without asking the matcher,
    # whose work grows with the product of the lines it compares: a step's prompt is the one
    # before and what the step added, so what is left to match is small.
    shorter = min(len(old), len(new))
    head = 0
    while head < shorter and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < shorter - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    old_middle, new_middle = old[head : len(old) - tail], new[head : len(new) - tail]
    emit("same", old[:head])
    if len(old_middle) * len(new_middle) > MAX_DIFF_PAIRS:
        # Past this the matcher could hold a web process for minutes: the rest is shown as
        # replaced whole (still a diff that rebuilds both prompts).
        emit("removed", old_middle)
        emit("added", new_middle)
    else:
        # autojunk off: prompts repeat lines (blank lines, tags) that must not be treated as noise.
        matcher = difflib.SequenceMatcher(a=old_middle, b=new_middle, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                emit("same", old_middle[i1:i2])
            else:
                emit("removed", old_middle[i1:i2])
                emit("added", new_middle[j1:j2])
    emit("same", old[len(old) - tail :])
    return chunks
