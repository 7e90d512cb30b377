"""A Jinja chat template rendered the way transformers' ``apply_chat_template`` renders it
(docs/wire-formats.md §7.1): the sandboxed environment, its globals and filters, the errors a
template can raise, and :data:`GENERIC_TEMPLATE`, the illustrative template for hosted models
(compiled outside the sandbox: it is ours). Which template a call is rendered with is chosen in
:mod:`conversations.loop.splicing.templates`. Pure Python: no Django, no I/O.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
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

from conversations.loop.splicing.arguments import ARGUMENT_MODES, reads_object_arguments, template_messages
from conversations.typealias import JSONDict, JSONValue

# The name jinja gives a template compiled from a string; frames carrying it in a traceback are
# template lines, which is how a runtime error is pinned to a line.
_TEMPLATE_FILENAME = "<template>"

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


def tojson(
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
    env.filters["tojson"] = tojson
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


def prepare_templates(templates: Iterable[str]) -> int:
    """Compile ``templates`` (and the generic one) ahead of a turn, as the warm start of a
    serving process does; returns how many compiled. One that does not compile is left for the
    turn to report."""
    _generic_template()
    compiled = 0
    for template in templates:
        try:
            check_template(template)
            _variables_read(template)
        except TemplateError:
            continue
        compiled += 1
    return compiled


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
    env.filters["tojson"] = tojson
    env.globals.update(_environment().globals)
    return env.from_string(GENERIC_TEMPLATE)


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
    OpenAI-shaped messages) or ``llama.cpp`` (see :mod:`conversations.loop.splicing.arguments`).

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
