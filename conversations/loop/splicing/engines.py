"""The templates a serving engine publishes, and the one it applies to each request.

An engine may hold several chat templates: llama.cpp publishes ``chat_template`` and, when the
model has one, ``chat_template_tool_use`` on ``GET /props``; a Hugging Face tokenizer config may
name several (``default``, ``tool_use``, ``rag``…). All are kept (:class:`ServerTemplate`), and
:func:`choose_template` picks per request as the engine does (docs/chat-templates.md §1): the
``tool_use`` template only when the request has tools, else the default one.

Pure Python: no Django, no I/O (probing takes an injected ``get_json``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from conversations.loop.splicing.templates import OLLAMA_GO_TEMPLATE_SOURCE
from conversations.typealias import JSONDict, JSONValue

__all__ = [
    "LLAMA_CPP_SOURCE",
    "TOKENIZER_CONFIG_SOURCE",
    "ServerTemplate",
    "arguments_mode",
    "choose_template",
    "probe_request",
    "server_template",
    "template_from_server",
    "templates_from_tokenizer_config",
]

LLAMA_CPP_SOURCE = "llama.cpp /props"
TOKENIZER_CONFIG_SOURCE = "tokenizer_config.json"
TOOL_USE = "tool_use"
# What llama.cpp's /props calls each template (docs/chat-templates.md §1).
_LLAMA_CPP_KEYS = {"default": "chat_template", TOOL_USE: "chat_template_tool_use"}
# The special-token variables a tokenizer config may define, as transformers passes them.
_SPECIAL_TOKEN_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "pad_token",
    "sep_token",
    "cls_token",
    "mask_token",
)


@dataclass
class ServerTemplate:
    """The templates an engine (or a tokenizer config) publishes, with the special tokens it reported.

    ``template`` is the default one; ``named`` the others by name (``tool_use``…);
    ``added_tokens`` the special tokens of a tokenizer config's vocabulary, when known.
    """

    template: str
    source: str
    special_tokens: dict[str, str] = field(default_factory=dict)
    named: dict[str, str] = field(default_factory=dict)
    added_tokens: list[str] = field(default_factory=list)


def choose_template(
    default: str | None, named: Mapping[str, str] | None, source: str, *, has_tools: bool
) -> tuple[str | None, str]:
    """The template the engine applies to a request, and a label saying which one and why.

    llama.cpp uses ``chat_template_tool_use`` only when the request carries tools, else
    ``chat_template``; transformers' ``apply_chat_template`` picks a tokenizer's ``tool_use``
    template when tools are passed, else ``default`` (docs/chat-templates.md §1). With no
    ``tool_use`` template the default one is used and ``source`` is the label (for llama.cpp,
    followed by the key it was read from).
    """
    tool_use = (named or {}).get(TOOL_USE)
    llama = source == LLAMA_CPP_SOURCE
    if not tool_use or not tool_use.strip():
        return default, f"{source} {_LLAMA_CPP_KEYS['default']}" if llama else source
    if has_tools or not default:
        name = f"{source} {_LLAMA_CPP_KEYS[TOOL_USE]}" if llama else f"{source} {TOOL_USE!r} template"
        why = "the request has tools" if has_tools else "there is no default template"
        engine = "llama.cpp uses it only then" if llama else "transformers uses it then"
        return tool_use, f"{name} (chosen: {why}; {engine})"
    name = f"{source} {_LLAMA_CPP_KEYS['default']}" if llama else f"{source} 'default' template"
    engine = (
        f"llama.cpp uses {_LLAMA_CPP_KEYS[TOOL_USE]} only with tools"
        if llama
        else f"transformers uses {TOOL_USE!r} only with tools"
    )
    return default, f"{name} (chosen: the request has no tools; {engine})"


def arguments_mode(source: str) -> str:
    """How the engine a template came from hands tool-call arguments to it (docs/chat-templates.md
    §3): ``llama.cpp`` for a template read from llama.cpp, else ``object`` — vLLM, SGLang and
    the other engines serving an OpenAI-compatible API over transformers' templates parse them."""
    return "llama.cpp" if source.startswith(LLAMA_CPP_SOURCE) else "object"


def _server_root(base_url: str) -> str:
    """``http://h:8080/v1`` → ``http://h:8080``; Ollama's ``…/api`` likewise (the probes live at the root)."""
    root = base_url.strip().rstrip("/")
    for suffix in ("/v1", "/api"):
        if root.endswith(suffix):
            return root[: -len(suffix)]
    return root


def probe_request(url: str) -> tuple[str, str, JSONDict | None]:
    """How the caller's ``get_json`` must fetch a probe URL: ``(method, url, json_body)``.

    The probes are plain GETs except Ollama's ``/api/show``, which only answers POST with
    ``{"model": name}``. :func:`server_template` encodes that as ``…/api/show?model=name`` so
    ``get_json`` can stay a one-argument callable; this function decodes it. A typical caller::

        def get_json(url):
            method, target, body = probe_request(url)
            response = client.request(method, target, json=body, timeout=5)
            return response.json() if response.is_success else None
    """
    parts = urlsplit(url)
    if parts.path.rstrip("/").endswith("/api/show") and parts.query:
        body: JSONDict = {key: value for key, value in parse_qsl(parts.query)}
        return "POST", urlunsplit(parts._replace(query="")), body
    return "GET", url, None


def _text(value: JSONValue) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def server_template(
    base_url: str, model: str, get_json: Callable[[str], JSONDict | None]
) -> ServerTemplate | None:
    """The chat templates the engine at ``base_url`` applies to ``model``, or None.

    Tries llama.cpp ``GET {root}/props`` (``chat_template`` is the default; a non-empty
    ``chat_template_tool_use`` is kept as ``named["tool_use"]``, or is the default when it is
    the only one, as llama.cpp does; ``bos_token``/``eos_token`` are kept for rendering), then
    Ollama ``{root}/api/show`` (a Go template, returned as is and labelled
    :data:`OLLAMA_GO_TEMPLATE_SOURCE`). ``get_json(url)`` does the HTTP (see
    :func:`probe_request`) and returns the decoded object, or None when the endpoint is missing
    or answers with something else; exceptions it raises propagate.
    """
    root = _server_root(base_url)
    props = get_json(f"{root}/props")
    if isinstance(props, dict):
        tokens = {
            name: value for name in ("bos_token", "eos_token") if isinstance(value := props.get(name), str)
        }
        default = _text(props.get("chat_template"))
        tool_use = _text(props.get("chat_template_tool_use"))
        if default is not None:
            named = {TOOL_USE: tool_use} if tool_use is not None else {}
            return ServerTemplate(default, LLAMA_CPP_SOURCE, tokens, named)
        if tool_use is not None:
            return ServerTemplate(tool_use, LLAMA_CPP_SOURCE, tokens)
    shown = get_json(f"{root}/api/show?{urlencode({'model': model})}")
    if isinstance(shown, dict):
        value = _text(shown.get("template"))
        if value is not None:
            return ServerTemplate(value, OLLAMA_GO_TEMPLATE_SOURCE)
    return None


def template_from_server(
    base_url: str, model: str, get_json: Callable[[str], JSONDict | None]
) -> tuple[str, str] | None:
    """``(default template, source label)`` from :func:`server_template`, or None when none was found."""
    found = server_template(base_url, model, get_json)
    return None if found is None else (found.template, found.source)


def _token_text(value: JSONValue) -> str | None:
    """A tokenizer config's token: a string, or an ``AddedToken`` object ``{"content": …}``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def templates_from_tokenizer_config(config: JSONDict) -> ServerTemplate | None:
    """The templates and special tokens of a Hugging Face ``tokenizer_config.json``, or None.

    ``chat_template`` is a string (the default) or a list of ``{"name", "template"}`` (the one
    named ``default`` is the default, the others are ``named``). The special-token variables
    (``bos_token``…) come from their keys (a string or an ``AddedToken`` object); the
    vocabulary's special tokens from ``added_tokens_decoder`` (those marked ``special``).
    """
    raw = config.get("chat_template")
    default: str | None = None
    named: dict[str, str] = {}
    if isinstance(raw, str):
        default = _text(raw)
    elif isinstance(raw, list):
        for entry in raw:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                text = _text(entry.get("template"))
                if text is not None:
                    named[str(entry["name"])] = text
        default = named.pop("default", None)
    if default is None and not named:
        return None
    if default is None:
        default = named.pop(TOOL_USE, None) or named.pop(next(iter(named)))
    tokens = {
        name: text for name in _SPECIAL_TOKEN_KEYS if (text := _token_text(config.get(name))) is not None
    }
    added: list[str] = []
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        for entry in decoder.values():
            if isinstance(entry, dict) and entry.get("special") and isinstance(entry.get("content"), str):
                added.append(str(entry["content"]))
    return ServerTemplate(default, TOKENIZER_CONFIG_SOURCE, tokens, named, added)
