"""The provider contract: one module per wire format, one class each, registered in PROVIDERS."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from conversations.loop.llm import Message, ToolCall, ToolChoice, ToolDef
from conversations.loop.providers.excerpts import WireExcerpts
from conversations.loop.providers.streaming import DeltaCallback
from conversations.loop.wire import WireExchange
from conversations.typealias import JSONDict


@dataclass(frozen=True)
class Endpoint:
    """Where and how to reach a model. ``api_key`` is resolved at run time and never stored.

    ``timeout`` bounds each phase of a call (connecting, each read); ``deadline`` bounds the
    whole call, however its answer trickles in: past it the call is cut, what arrived is kept.
    """

    model: str
    base_url: str
    api_key: str
    timeout: float = 120.0
    deadline: float = 120.0
    in_process: bool = False
    # Use the provider's streaming mode; the raw event stream is what gets recorded.
    stream: bool = False
    # The most bytes of a response body that are read, after any content-encoding is undone
    # (a small gzip body may expand a thousandfold): past it the call fails, what arrived kept.
    body_limit: int = 32_000_000


@dataclass
class ModelRequest:
    """What a paradigm asks of the model, provider-neutral.

    ``tools`` are sent as native tool definitions (empty for prompt paradigms, which put them in
    the messages instead); ``response_format`` is the structured-output schema, if any.
    ``tool_texts`` is, for a paradigm that writes its tools into the messages, the text it wrote
    for each tool, by the name the tool is offered under: what the prompt would lose without that
    tool, counted as the tool's definition (docs/teaching.md §6). It is not sent.
    """

    messages: list[Message]
    tools: list[ToolDef] = field(default_factory=list)
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    parallel_tool_calls: bool | None = None
    response_format: JSONDict | None = None
    tool_texts: dict[str, str] = field(default_factory=dict)
    # Generation options (an MCP server's sampling request sets them; a turn leaves them unset):
    # each provider sends those its request can carry (docs/mcp-client.md §5).
    max_tokens: int | None = None
    temperature: float | None = None
    stop: list[str] = field(default_factory=list)


@dataclass
class ModelReply:
    """The model's answer as parsed from the wire, with the raw exchange it came in."""

    text: str | None
    tool_calls: list[ToolCall]
    finish_reason: str
    exchange: WireExchange
    usage: JSONDict = field(default_factory=dict)
    refusal: str | None = None
    # Provider data the next request must send back unchanged (``Message.echo``), if any.
    echo: JSONDict | None = None
    # What was escaped in the parsed reply to make it storable and sendable (the raw exchange
    # keeps the original): one line each, for the step's diagnostics.
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Whichever provider parsed it: a streamed reply is searched by what it assembled to.
        if self.exchange.search_text is None and is_event_stream(self.exchange):
            self.exchange.search_text = self.assembled_text()

    def assembled_text(self) -> str:
        """The reply's words as one text: its text, its refusal, and each call's name and
        arguments (one per line)."""
        parts = [self.text or "", self.refusal or ""]
        parts.extend(f"{call.name} {call.arguments_text}" for call in self.tool_calls)
        return "\n".join(part for part in parts if part)


def is_event_stream(exchange: WireExchange) -> bool:
    """Whether the response came as a ``text/event-stream`` (recorded header names are lower case)."""
    media_type = exchange.response_headers.get("content-type", "").split(";", 1)[0]
    return media_type.strip().lower() == "text/event-stream"


class ProviderError(Exception):
    """The model endpoint failed: an HTTP error status, a timeout, a connection failure.

    ``exchange`` holds what went over the wire (when anything did), so it is recorded too.
    """

    def __init__(
        self, message: str, *, exchange: WireExchange | None = None, status: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.exchange = exchange
        self.status = status


class Provider(Protocol):
    """Turns a ``ModelRequest`` into one HTTP call in the provider's wire format.

    ``complete`` captures the exact request and response bodies at the HTTP client (never an
    API key or Authorization header) and returns them in ``ModelReply.exchange``. When the
    endpoint streams, ``on_delta`` (if given) is called from the calling thread with each new
    ``PartialReply`` as the events arrive; it is never called for a reply sent whole.

    The class also carries the format's facts that the record's readers need (the lookups over
    all providers are in :mod:`conversations.loop.providers`): ``otel_name``, the
    ``gen_ai.provider.name`` of the OpenTelemetry GenAI conventions; ``usage_input_key`` and
    ``usage_output_key``, the keys of the reply's usage object that count input and output
    tokens; and ``excerpts(request, response)``, which finds the first tool call and its result
    in recorded bodies of this format (``response`` is None for a streamed reply), or None; and
    ``recorded_reply(body, exchange, stream=...)``, the reply a recorded response body holds (what
    the recording proxy reads a host's model calls with).

    Raises (from ``complete``):
        ProviderError: the endpoint answered with an error or could not be reached.
    """

    key: ClassVar[str]
    label: ClassVar[str]
    # The base URL when a profile leaves it empty, and the in-process demo model's for this format.
    default_base_url: ClassVar[str]
    demo_base_url: ClassVar[str]
    otel_name: ClassVar[str]
    usage_input_key: ClassVar[str]
    usage_output_key: ClassVar[str]

    @staticmethod
    def excerpts(request: JSONDict, response: JSONDict | None) -> WireExcerpts | None: ...

    @staticmethod
    def recorded_reply(body: str, exchange: WireExchange, *, stream: bool) -> ModelReply: ...

    def __init__(self, endpoint: Endpoint) -> None: ...

    def complete(self, request: ModelRequest, *, on_delta: DeltaCallback | None = None) -> ModelReply: ...
