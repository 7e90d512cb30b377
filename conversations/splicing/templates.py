"""Chat templates: the text a model reads for one call, made from the request's messages and tools.

What "exact" can mean depends on the backend (docs/wire-formats.md §0):

* **Prompt paradigms** write the tool descriptions into the system prompt themselves, so the
  messages *are* the prompt (the provider only adds its own chat markup around them):
  :data:`PARADIGM_SOURCE`, rendered role-labelled.
* **Open-weight models** read their Jinja chat template applied to the messages and tools. With
  the model's own template (pasted into the profile, or read from the serving engine by
  :mod:`conversations.splicing.engines`) :func:`render_chat_template` reproduces transformers' rendering
  environment (docs/wire-formats.md §7.1), so the result is the exact prompt.
* **Hosted closed models** never reveal their rendering. We show :data:`GENERIC_TEMPLATE`
  applied to the request, always labelled as illustrative: a generic ChatML rendering in the
  style of the Hermes / Qwen tool templates, written for this project — not any provider's
  real template. A plain-Python rendering of it (the ChatML fast path) gives the same text in a
  fraction of Jinja's time.

:func:`spliced_text` chooses among them; which of an engine's templates is rendered is chosen in
:mod:`conversations.splicing.engines`. Pure Python: no Django, no I/O.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any

import jinja2
import jinja2.exceptions
import jinja2.ext
import jinja2.meta
import jinja2.nodes
import jinja2.parser
import jinja2.sandbox
import jinja2.utils

from conversations.splicing.arguments import (
    ARGUMENT_MODES,
    reads_object_arguments,
    rewritten_arguments,
    template_messages,
)
from conversations.splicing.pieces import Render, removed_inside, removed_span
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

# The name jinja gives a template compiled from a string; frames carrying it in a traceback are
# template lines, which is how a runtime error is pinned to a line.
_TEMPLATE_FILENAME = "<template>"

GENERIC_SOURCE = "generic ChatML template (illustrative: the provider's own rendering is not observable)"
PARADIGM_SOURCE = "the messages as the paradigm wrote them (the provider adds its own chat markup)"
OLLAMA_GO_TEMPLATE_SOURCE = "Ollama Go template (shown as is; not rendered)"

# Special-token variables transformers passes when the tokenizer defines them. Defaulting them
# to "" lets templates that print ``{{ bos_token }}`` render when we don't know the tokens.
_SPECIAL_TOKEN_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "pad_token",
    "sep_token",
    "cls_token",
    "mask_token",
)
# Variables the renderer owns; ``extra`` may not replace them (it would silently change what
# "the messages" are).
_RESERVED_VARIABLES = frozenset({"messages", "tools", "add_generation_prompt"})


class TemplateError(Exception):
    """A chat template failed to render. ``str(err)`` says why, with the line when known.

    ``reason`` is the bare cause (the jinja message, or the text the template passed to
    ``raise_exception``); ``lineno`` is the template line, or None when jinja did not say.
    """

    def __init__(self, reason: str, *, lineno: int | None = None, kind: str = "error") -> None:
        self.reason = reason
        self.lineno = lineno
        self.kind = kind
        where = f" at line {lineno}" if lineno is not None else ""
        super().__init__(f"template {kind}{where}: {reason}")


class _TemplateRaised(Exception):
    """What ``raise_exception`` throws inside jinja; turned into :class:`TemplateError` with a line."""


# --- Rendering (transformers' environment, docs/wire-formats.md §7.1) ---------------------------


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}…{% endgeneration %}``: transformers uses it to mark the assistant's tokens
    for training masks. It changes nothing in the rendered text, so its body is emitted as is."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node | list[jinja2.nodes.Node]:
        next(parser.stream)  # the `generation` name itself
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _tojson(
    value: object,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson``: plain ``json.dumps``. Jinja's own filter HTML-escapes ``<>&'``,
    which would change the prompt (``"a<b"`` would become ``"a\\u003cb"``)."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: str) -> None:
    """The ``raise_exception(msg)`` global templates call to refuse a conversation."""
    raise _TemplateRaised(str(message))


class _TemplateDict:
    """The ``dict`` global as transformers gives it: ``dict(...)`` and ``dict.fromkeys(...)``
    only, so a template cannot reach the ``dict`` type itself."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """The ``namespace`` global as transformers gives it: underscore-prefixed attributes are
    refused, whether passed at creation or set later (they are the way to Python internals)."""

    def __init__(*args: object, **kwargs: object) -> None:
        # Same signature trick as jinja's Namespace, so that ``namespace(self=...)`` still works.
        self, rest = args[0], args[1:]
        attrs: dict[Any, Any] = dict(*rest, **kwargs)
        for name in attrs:
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: object) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}"
            )


def _strftime_now(fmt: str) -> str:
    """The ``strftime_now(fmt)`` global (Llama templates print today's date with it). Local time,
    as in transformers."""
    return datetime.now().strftime(fmt)


@functools.cache
def _environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    """One shared environment. Built once: it is immutable after setup and safe to share.

    Undefined stays jinja's default (printing a missing variable gives ""), as in transformers;
    real templates rely on it, e.g. ``{% if tools %}`` on a variable that was never passed.
    """
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationTag, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env


@functools.lru_cache(maxsize=64)
def _compile(template: str) -> jinja2.Template:
    """Compiled templates, cached: the same template is rendered at every step of a turn."""
    return _environment().from_string(template)


def check_template(template: str) -> None:
    """Compile ``template`` in the sandboxed environment it is rendered in; raises
    :class:`TemplateError` (with the line) when it does not compile. Nothing is rendered."""
    try:
        _compile(template)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(exc.message or str(exc), lineno=exc.lineno, kind="syntax error") from exc
    except jinja2.TemplateError as exc:  # e.g. an unknown filter or test, found at compile time
        raise TemplateError(str(exc), lineno=getattr(exc, "lineno", None)) from exc


@functools.lru_cache(maxsize=64)
def _variables_read(template: str) -> frozenset[str]:
    """The variables ``template`` reads from its context (cached: asked at every step)."""
    try:
        parsed = _environment().parse(template)
    except jinja2.TemplateError:
        return frozenset()
    return frozenset(jinja2.meta.find_undeclared_variables(parsed))


def missing_special_tokens(template: str, special_tokens: Mapping[str, str] | None) -> list[str]:
    """The special-token variables ``template`` reads that have no configured value, in order.

    transformers passes only the tokens the tokenizer defines; one the template reads but nobody
    configured prints as "" — a prompt missing its ``<|begin_of_text|>`` or ``</s>``, which must
    not be called exact (docs/chat-templates.md §2). A token set to "" on purpose counts as
    configured. A template that does not compile reads nothing (its rendering fails anyway).
    """
    read = _variables_read(template)
    configured = set(special_tokens or {})
    return [name for name in _SPECIAL_TOKEN_NAMES if name in read and name not in configured]


@functools.cache
def _generic_template() -> jinja2.Template:
    """:data:`GENERIC_TEMPLATE`, compiled outside the sandbox: it is ours and tested, and the
    sandbox's check of every attribute it reads doubled the cost of a step's rendering. Same
    options, filters and globals, so it renders the same text (a test holds them equal)."""
    env = jinja2.Environment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationTag, jinja2.ext.loopcontrols],
        autoescape=False,
    )
    env.filters["tojson"] = _tojson
    env.globals.update(_environment().globals)
    return env.from_string(GENERIC_TEMPLATE)


_GENERIC_TOOLS_HEAD = (
    "# Tools\n\nYou may call one or more of the functions below to help with the user's request.\n"
    "Their signatures are listed inside <tools></tools>, one JSON object per line:\n<tools>\n"
)
_GENERIC_TOOLS_TAIL = (
    "</tools>\n\nTo call a function, answer with a JSON object holding its name and arguments inside\n"
    "<tool_call></tool_call> tags, one block per call:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <arguments-as-a-JSON-object>}\n</tool_call>'
)


class _NotPlain(Exception):
    """A value the plain rendering of the generic template leaves to Jinja."""


def _generic_text(content: JSONValue) -> str:
    """The template's ``text`` macro, for the content shapes messages have."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, dict):
        return _tojson(content)
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict):
                text = part.get("text", "")
                if not isinstance(text, str):
                    raise _NotPlain
                pieces.append(text)
            else:
                raise _NotPlain
        return "".join(pieces)
    raise _NotPlain


def _generic_call(call: JSONValue) -> str:
    if not isinstance(call, dict):
        raise _NotPlain
    function = call["function"] if "function" in call else call
    if (
        not isinstance(function, dict)
        or not isinstance(function.get("name"), str)
        or "arguments" not in function
    ):
        raise _NotPlain
    arguments = function["arguments"]
    text = arguments if isinstance(arguments, str) else _tojson(arguments)
    return f'<tool_call>\n{{"name": {_tojson(function["name"])}, "arguments": {text}}}\n</tool_call>'


def _generic_assistant(message: JSONDict) -> str:
    """One assistant message as :data:`GENERIC_TEMPLATE` writes it, its calls' arguments parsed
    first (``template_messages``) as the template is given them.

    Raises:
        _NotPlain: a shape the template's edge cases decide.
    """
    [prepared] = template_messages([message], parse=True)
    content = prepared.get("content")
    parts = [_generic_text(content)] if content else []
    calls = prepared.get("tool_calls") or []
    if not isinstance(calls, list):
        raise _NotPlain
    parts.extend(_generic_call(call) for call in calls)
    return "<|im_start|>assistant\n" + "\n".join(parts) + "<|im_end|>\n"


def _generic_rendering(
    messages: Sequence[JSONDict],
    tools: Sequence[JSONDict],
    tool_json: Callable[[JSONDict], str] = _tojson,
    assistant: Callable[[JSONDict], str] = _generic_assistant,
) -> str | None:
    """:data:`GENERIC_TEMPLATE` rendered in plain Python (with a generation prompt): the same
    text, in a fraction of Jinja's time (a step's prompt is rendered again at every step). None
    for a message of a shape the template's edge cases decide (a test holds the two equal).
    ``tool_json`` writes a tool definition's JSON and ``assistant`` an assistant message
    (:class:`GenericRenderer` remembers both)."""
    blocks = _generic_blocks(
        messages, tools, tool_json, functools.partial(_generic_block, assistant=assistant)
    )
    return None if blocks is None else "".join(blocks)


def _generic_blocks(
    messages: Sequence[JSONDict],
    tools: Sequence[JSONDict],
    tool_json: Callable[[JSONDict], str],
    block: Callable[[Sequence[JSONDict], int], str],
) -> list[str] | None:
    """:func:`_generic_rendering`'s text in blocks: the system block (empty without one), one
    block per message (empty for a leading system message, which the system block holds), the
    generation prompt. A message's block depends on the message and its neighbours' roles alone
    (:func:`_generic_block`; ``block(messages, index)`` writes it)."""
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        return None
    try:
        return [
            _generic_system(messages, tools, tool_json),
            *(block(messages, index) for index in range(len(messages))),
            "<|im_start|>assistant\n",
        ]
    except _NotPlain:
        return None


def _generic_system(
    messages: Sequence[JSONDict], tools: Sequence[JSONDict], tool_json: Callable[[JSONDict], str]
) -> str:
    system: list[str] = []
    if messages and messages[0]["role"] == "system":
        system.append(_generic_text(messages[0].get("content")))
    if tools:
        listed = "".join(tool_json(tool) + "\n" for tool in tools)
        system.append((_GENERIC_TOOLS_HEAD + listed + _GENERIC_TOOLS_TAIL).strip())
    return "<|im_start|>system\n" + "\n\n".join(system) + "<|im_end|>\n" if system else ""


def _generic_block(messages: Sequence[JSONDict], index: int, assistant: Callable[[JSONDict], str]) -> str:
    """The text of ``messages[index]``: consecutive tool results share one user turn, so a
    result's block opens it after a message of another role and closes it before one."""
    message = messages[index]
    role = message["role"]
    if role == "tool":
        opens = index == 0 or messages[index - 1]["role"] != "tool"
        closes = index == len(messages) - 1 or messages[index + 1]["role"] != "tool"
        return (
            ("<|im_start|>user\n" if opens else "")
            + f"<tool_response>\n{_generic_text(message.get('content'))}\n</tool_response>"
            + ("<|im_end|>\n" if closes else "\n")
        )
    if role == "assistant":
        return assistant(message)
    if index == 0 and role == "system":
        return ""
    return f"<|im_start|>{role}\n{_generic_text(message.get('content'))}<|im_end|>\n"


def _template_line(tb: TracebackType | None) -> int | None:
    """The template line of the innermost template frame in ``tb`` (jinja rewrites tracebacks so
    template code appears with its own file name and line numbers)."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _TEMPLATE_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


@functools.lru_cache(maxsize=64)
def _llama_cpp_parses_arguments(template: str) -> bool:
    """Whether llama.cpp hands this template parsed arguments (see :func:`reads_object_arguments`)."""

    def render(messages: list[JSONDict], tools: list[JSONDict]) -> str:
        return render_chat_template(template, messages=messages, tools=tools, arguments="string")

    return reads_object_arguments(render)


def parses_arguments(template: str, arguments: str) -> bool:
    """Whether the template gets parsed tool-call arguments in mode ``arguments`` (``object``,
    ``string``, ``llama.cpp``: its probe decides); raises ValueError for another mode."""
    if arguments not in ARGUMENT_MODES:
        raise ValueError(f"arguments must be one of {', '.join(ARGUMENT_MODES)}, not {arguments!r}")
    if arguments == "llama.cpp":
        return _llama_cpp_parses_arguments(template)
    return arguments == "object"


def render_chat_template(
    template: str,
    *,
    messages: list[JSONDict],
    tools: list[JSONDict] | None = None,
    add_generation_prompt: bool = True,
    special_tokens: Mapping[str, str] | None = None,
    extra: Mapping[str, JSONValue] | None = None,
    arguments: str = "object",
) -> str:
    """Render a Jinja chat template the way transformers' ``apply_chat_template`` does.

    Same environment (immutable sandbox, ``trim_blocks``, ``lstrip_blocks``, ``loopcontrols``, a
    no-op ``generation`` tag), same globals (``raise_exception``, ``strftime_now``), same
    ``tojson`` (no HTML escaping), same variables: ``messages``, ``tools`` (None when there are
    none), ``documents`` (None), ``add_generation_prompt``, the special tokens (``bos_token``,
    ``eos_token``, … default ""), then ``extra`` (e.g. ``enable_thinking``, ``date_string``).
    Tool-call ``arguments`` in history are passed as the engine passes them: ``arguments`` is
    ``object`` (parsed, as vLLM does), ``string`` (the wire's string, as transformers given
    OpenAI-shaped messages) or ``llama.cpp`` (see :mod:`conversations.splicing.arguments`).

    Raises :class:`TemplateError` for anything that stops the rendering: syntax errors, use of
    undefined values, sandbox violations (a template cannot reach Python internals: reading an
    unsafe attribute gives an undefined value and any use of it fails), ``raise_exception``.
    Raises ``ValueError`` if ``extra`` tries to replace ``messages``, ``tools`` or
    ``add_generation_prompt``.
    """
    clash = _RESERVED_VARIABLES & set(extra or {})
    if clash:
        raise ValueError(f"extra may not set {', '.join(sorted(clash))}")
    context: dict[str, object] = dict.fromkeys(_SPECIAL_TOKEN_NAMES, "")
    context.update(special_tokens or {})
    context["documents"] = None
    context.update(extra or {})
    parse = template == GENERIC_TEMPLATE or parses_arguments(template, arguments)
    context["messages"] = template_messages(messages, parse=parse)
    context["tools"] = tools or None  # shared, like the messages: the sandbox cannot change them
    context["add_generation_prompt"] = add_generation_prompt

    try:
        compiled = _generic_template() if template == GENERIC_TEMPLATE else _compile(template)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(exc.message or str(exc), lineno=exc.lineno, kind="syntax error") from exc
    except jinja2.TemplateError as exc:  # e.g. an unknown filter or test, found at compile time
        raise TemplateError(str(exc), lineno=getattr(exc, "lineno", None)) from exc
    try:
        return compiled.render(context)
    except _TemplateRaised as exc:
        raise TemplateError(
            str(exc), lineno=_template_line(exc.__traceback__), kind="raised an exception"
        ) from exc
    except jinja2.exceptions.SecurityError as exc:
        raise TemplateError(
            str(exc), lineno=_template_line(exc.__traceback__), kind="sandbox violation"
        ) from exc
    except jinja2.UndefinedError as exc:
        raise TemplateError(
            str(exc), lineno=_template_line(exc.__traceback__), kind="undefined value"
        ) from exc
    except Exception as exc:  # any failure inside a user-supplied template is its error
        raise TemplateError(f"{type(exc).__name__}: {exc}", lineno=_template_line(exc.__traceback__)) from exc


# A generic ChatML tool template in the style of the Hermes / Qwen2.5 templates (docs/wire-formats.md
# §7.2), written for this project. It is NOT any provider's real template: it only shows, by
# analogy, how tool definitions, calls and results typically become prompt text.
GENERIC_TEMPLATE = """\
{#- Tool-Call Inspector: generic ChatML tool template (illustrative; not any provider's own). -#}
{% macro text(content) %}
{%- if content is string -%}
{{ content }}
{%- elif content is mapping -%}
{{ content | tojson }}
{%- elif content is iterable -%}
{%- for part in content -%}
{%- if part is string %}{{ part }}{% elif part.text is defined %}{{ part.text }}{% endif -%}
{%- endfor -%}
{%- elif content is not none -%}
{{ content }}
{%- endif -%}
{% endmacro %}
{% set system = namespace(parts=[]) %}
{% if messages and messages[0].role == 'system' %}
{% set system.parts = [text(messages[0].content)] %}
{% endif %}
{% if tools %}
{% set tools_section %}
# Tools

You may call one or more of the functions below to help with the user's request.
Their signatures are listed inside <tools></tools>, one JSON object per line:
<tools>
{% for tool in tools %}
{{ tool | tojson }}
{% endfor %}
</tools>

To call a function, answer with a JSON object holding its name and arguments inside
<tool_call></tool_call> tags, one block per call:
<tool_call>
{"name": <function-name>, "arguments": <arguments-as-a-JSON-object>}
</tool_call>
{% endset %}
{% set system.parts = system.parts + [tools_section | trim] %}
{% endif %}
{% if system.parts %}
<|im_start|>system
{{ system.parts | join('\\n\\n') }}<|im_end|>
{% endif %}
{% for message in messages %}
{% if loop.first and message.role == 'system' %}
{# already part of the system turn above #}
{% elif message.role == 'tool' %}
{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}
<|im_start|>user
{% endif %}
<tool_response>
{{ text(message.content) }}
</tool_response>{{ '<|im_end|>' if loop.last or messages[loop.index0 + 1].role != 'tool' }}
{% elif message.role == 'assistant' %}
{% set turn = namespace(parts=[]) %}
{% if message.content %}
{% set turn.parts = [text(message.content)] %}
{% endif %}
{% for call in message.tool_calls or [] %}
{% set fn = call.function if call.function is defined else call %}
{% set args = fn.arguments if fn.arguments is string else fn.arguments | tojson %}
{% set turn.parts = turn.parts + ['<tool_call>\\n{"name": ' + fn.name | tojson + ', "arguments": ' + args + '}\\n</tool_call>'] %}
{% endfor %}
<|im_start|>assistant
{{ turn.parts | join('\\n') }}<|im_end|>
{% else %}
<|im_start|>{{ message.role }}
{{ text(message.content) }}<|im_end|>
{% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}
"""


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
    template failed; ``text`` is a stand-in the source names) or ``"illustrative"`` (no template:
    the generic rendering). ``exact`` is true only for ``"exact"``.
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
    """The prompt of one call, by the rules of :func:`conversations.splicing.splice`; ``generic``
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
        if problem is None:
            return Rendering(_plain_rendering(messages), "exact", PARADIGM_SOURCE)
        source = (
            f"{problem} — shown instead: {PARADIGM_SOURCE}" if failed else f"{PARADIGM_SOURCE} — {problem}"
        )
        # Failed: the messages are exact, but not what the template would have made of them. An
        # unrenderable Go template leaves the messages what they were: the text we sent.
        return Rendering(_plain_rendering(messages), "failed" if failed else "exact", source)

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


def _remembered(
    known: dict[int, tuple[JSONDict, str]], value: JSONDict, write: Callable[[JSONDict], str]
) -> str:
    """``write(value)``, from ``known`` when this very object was written before."""
    seen = known.get(id(value))
    if seen is not None and seen[0] is value:
        return seen[1]
    text = write(value)
    known[id(value)] = (value, text)
    return text


def _generic(messages: list[JSONDict], tools: list[JSONDict]) -> str:
    """:data:`GENERIC_TEMPLATE` applied, by its plain-Python rendering when it decides the shapes."""
    return GenericRenderer()(messages, tools)


class GenericRenderer:
    """:func:`_generic` for the renderings of one prompt: the prompt, then the prompt without
    each of its tools and results (``pieces.spliced_pieces``), which all list the same tool
    definitions and assistant messages. Each definition's JSON and each message's block is
    written once, not once per rendering: with a dozen tools, or twenty calls in a turn, that
    was most of a model call's splicing (each call's arguments parsed and written again for
    each of the step's twenty-odd renderings).

    Kept for a turn's model calls (``splice(generic=…)``), it writes once per turn what each
    call's prompt repeats of the one before: the tools and the history, given again as the very
    same objects. So nothing it is given may be changed in place afterwards (a changed message
    must be a new object). What a prompt no longer holds is forgotten when the next prompt
    comes, so it holds one prompt's objects at most."""

    def __init__(self) -> None:
        # By the object's id, with the object itself: an id is only reused once its object is gone.
        self._lines: dict[int, tuple[JSONDict, str]] = {}
        self._assistants: dict[int, tuple[JSONDict, str]] = {}
        # A message's block, with its neighbours' roles (which the block depends on too).
        self._texts: dict[int, tuple[JSONDict, tuple[object, object], str]] = {}
        self._last: tuple[object, object, list[str] | None] | None = None
        # What a change removes (``_GenericVariants``), this prompt's and the one before's.
        self._pieces: dict[tuple[object, ...], tuple[tuple[object, ...], str]] = {}
        self._pieces_before: dict[tuple[object, ...], tuple[tuple[object, ...], str]] = {}

    def tool_json(self, tool: JSONDict) -> str:
        return _remembered(self._lines, tool, _tojson)

    def assistant(self, message: JSONDict) -> str:
        return _remembered(self._assistants, message, _generic_assistant)

    def block(self, messages: Sequence[JSONDict], index: int) -> str:
        """:func:`_generic_block`, from what was written before for this very message with the
        same neighbours' roles."""
        message = messages[index]
        if message["role"] == "assistant":
            return self.assistant(message)
        around = (
            messages[index - 1]["role"] if index else None,
            messages[index + 1]["role"] if index + 1 < len(messages) else None,
        )
        seen = self._texts.get(id(message))
        if seen is not None and seen[0] is message and seen[1] == around:
            return seen[2]
        text = _generic_block(messages, index, self.assistant)
        self._texts[id(message)] = (message, around, text)
        return text

    def piece(
        self, change: tuple[object, ...], held: tuple[object, ...], find: Callable[[], tuple[str, bool]]
    ) -> str:
        """What ``change`` removes from the prompt: as found for the prompt before when the objects
        the touched blocks are written from (``held``) are the very same, else by ``find`` (the
        text, and whether it was found from those blocks alone: only then is it kept)."""
        key = (*change, *map(id, held))
        for pieces in (self._pieces, self._pieces_before):
            seen = pieces.get(key)
            if seen is not None and all(kept is given for kept, given in zip(seen[0], held, strict=True)):
                self._pieces[key] = seen
                return seen[1]
        piece, alone = find()
        if alone:
            self._pieces[key] = (held, piece)
        return piece

    def __call__(self, messages: list[JSONDict], tools: list[JSONDict]) -> str:
        blocks = self._blocks(messages, tools)
        if blocks is not None:
            return "".join(blocks)
        return render_chat_template(GENERIC_TEMPLATE, messages=messages, tools=tools)

    def variants(self, messages: list[JSONDict], tools: list[JSONDict]) -> _GenericVariants | None:
        """This prompt's renderings with one change each (``pieces.Variants``), made from its
        blocks; None for a prompt the plain rendering does not decide."""
        blocks = self._blocks(messages, tools)
        return None if blocks is None else _GenericVariants(self, list(messages), list(tools), blocks)

    def _blocks(self, messages: list[JSONDict], tools: list[JSONDict]) -> list[str] | None:
        """:func:`_generic_blocks`, kept for the last lists of these very objects (the prompt is
        rendered, then its variants made from the same messages)."""
        key = (tuple(map(id, messages)), tuple(map(id, tools)))
        if self._last is not None:
            if self._last[0] == key:
                return self._last[2]
            self._forget_all_but(messages, tools)
            self._pieces_before, self._pieces = self._pieces, {}
        blocks = _generic_blocks(messages, tools, self.tool_json, self.block)
        # The objects are held with their ids, so no id in the key is reused while it is kept.
        self._last = (key, (list(messages), list(tools)), blocks)
        return blocks

    def _forget_all_but(self, messages: list[JSONDict], tools: list[JSONDict]) -> None:
        held = set(map(id, messages))
        self._assistants = {at: seen for at, seen in self._assistants.items() if at in held}
        self._texts = {at: seen for at, seen in self._texts.items() if at in held}
        listed = set(map(id, tools))
        self._lines = {at: seen for at, seen in self._lines.items() if at in listed}


class _GenericVariants:
    """The renderings of one prompt with one tool left out, or one message left out or replaced,
    each the same text as rendering the changed lists: the unchanged blocks are joined again and
    only the blocks the change touches (the system block for a tool; the message and its two
    neighbours for a message) are written. Rendering the whole prompt for each of a step's tools
    and results made a turn's splicing grow with the cube of its length.

    What each change removes (``pieces.Variants``) is found from the touched blocks alone,
    before and after the change (``pieces.removed_inside``), unless their difference reaches
    their edge; only then are the whole texts joined and compared."""

    def __init__(
        self, renderer: GenericRenderer, messages: list[JSONDict], tools: list[JSONDict], blocks: list[str]
    ) -> None:
        self._renderer, self._messages, self._tools, self._blocks = renderer, messages, tools, blocks
        self._full: str | None = None

    @property
    def full(self) -> str:
        if self._full is None:
            self._full = "".join(self._blocks)
        return self._full

    def without_tool(self, index: int) -> str:
        return "".join([self._system_without(index), *self._blocks[1:]])

    def tool_piece(self, index: int) -> str:
        # The system block is written from the tools and a leading system message.
        messages = self._messages
        held = (messages[0] if messages and messages[0]["role"] == "system" else None, *self._tools)
        return self._renderer.piece(("tool", index), held, lambda: self._tool_piece(index))

    def _tool_piece(self, index: int) -> tuple[str, bool]:
        system = self._system_without(index)
        piece = removed_inside(self._blocks[0], system)
        if piece is not None:
            return piece, True
        return removed_span(self.full, "".join([system, *self._blocks[1:]])), False

    def _system_without(self, index: int) -> str:
        tools = self._tools[:index] + self._tools[index + 1 :]
        return _generic_system(self._messages, tools, self._renderer.tool_json)

    def with_message(self, index: int, replacement: JSONDict | None) -> str:
        """The prompt with ``messages[index]`` left out (``replacement`` None) or replaced."""
        changed = self._touched(index, replacement)
        if isinstance(changed, str):
            return changed
        blocks, (start, end) = self._blocks, changed[1]
        return "".join([*blocks[:start], *changed[0], *blocks[end:]])

    def message_piece(self, index: int, replacement: JSONDict | None) -> str:
        if replacement is None and index > 0:
            # The touched blocks (the message's and its neighbours') are written from the
            # messages two places around it, and their roles.
            messages = self._messages
            held = tuple(
                messages[at] if 0 <= at < len(messages) else None for at in range(index - 2, index + 3)
            )
            return self._renderer.piece(("message",), held, lambda: self._message_piece(index, None))
        return self._message_piece(index, replacement)[0]

    def _message_piece(self, index: int, replacement: JSONDict | None) -> tuple[str, bool]:
        changed = self._touched(index, replacement)
        if isinstance(changed, str):
            return removed_span(self.full, changed), False
        blocks, (start, end) = self._blocks, changed[1]
        piece = removed_inside("".join(blocks[start:end]), "".join(changed[0]))
        if piece is not None:
            return piece, True
        return removed_span(self.full, "".join([*blocks[:start], *changed[0], *blocks[end:]])), False

    def _touched(self, index: int, replacement: JSONDict | None) -> str | tuple[list[str], tuple[int, int]]:
        """The changed prompt's blocks in place of ``blocks[start:end]``, with ``(start, end)``; or
        the whole changed prompt, when its system block may change or a block is left to Jinja."""
        messages = self._messages
        changed = (
            messages[:index] + ([replacement] if replacement is not None else []) + messages[index + 1 :]
        )
        # The whole prompt, by a renderer of its own (the turn's keeps to the turn's prompts).
        if index == 0:  # the system block may change
            return _generic(changed, self._tools)
        # Changed messages' blocks (new indices): from the one before ``index`` to the one that
        # was after it (or to the replacement, when ``index`` was the last).
        last_old = min(index + 1, len(messages) - 1)
        last_new = last_old if replacement is not None else last_old - 1
        try:
            middle = [self._renderer.block(changed, at) for at in range(index - 1, last_new + 1)]
        except _NotPlain:
            return _generic(changed, self._tools)
        return middle, (index, last_old + 2)
