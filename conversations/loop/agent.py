"""The agent loop: ask the model, check its calls, run them over MCP, repeat until it answers.

Plain Python: no Django, Celery or Channels. Everything the loop observes goes to a
``Recorder`` as it happens; tools are run by a ``ToolHost``. A failing model, an invalid call or
a broken server never raises out of ``run_agent``: each becomes a recorded step, and the outcome
says how the turn ended.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, Protocol

from jsonschema import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import Draft202012Validator, validator_for

from conversations.loop.llm import Message, ToolCall, ToolChoice, ToolDef, tool_result_text
from conversations.loop.paradigms.base import DecisionContext, Paradigm
from conversations.loop.providers.base import ModelReply, ModelRequest, ProviderError
from conversations.loop.providers.streaming import DeltaCallback
from conversations.loop.splicing import Spliced
from conversations.loop.wire import WireExchange
from conversations.typealias import JSONDict

StepRef = int
# Given a model-call step, where its streamed reply is shown while it arrives (None: nowhere).
PartialSinks = Callable[[StepRef], DeltaCallback | None]


class Recorder(Protocol):
    """Receives the turn as it happens. ``step_open`` persists at once; ``step_save`` and
    ``step_close`` may be held until the next ``step_open`` (the loop opens a step before every
    model or tool call, so nothing is held while the loop waits on the outside world) or until
    the recorder's owner flushes it at the end of the turn.

    Field names are those of the ``Step`` model (``kind``, ``title``, ``prompt``, ``text``,
    ``calls``, ``diagnostics``, ``tool_name``, ``arguments``, ``result``, ``is_error``,
    ``error``, ``server_id``, ``server_name``).
    """

    def step_open(
        self,
        *,
        kind: str,
        title: str,
        parent: StepRef | None = None,
        computed: Callable[[], dict[str, Any]] | None = None,
        **fields: Any,
    ) -> StepRef:
        """Open a step. ``computed`` returns more of its fields; the recorder may call it later,
        off the loop's path (the spliced prompt is recorded, the model never reads it)."""
        ...

    def step_save(self, step: StepRef, *, exchanges: Sequence[WireExchange] = (), **fields: Any) -> None: ...

    def step_close(
        self, step: StepRef, *, status: str, exchanges: Sequence[WireExchange] = (), **fields: Any
    ) -> None: ...


@dataclass
class ToolRun:
    """What running one tool produced: the MCP result, or why there is none."""

    result: JSONDict | None
    error: str = ""
    exchanges: list[WireExchange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class ToolHost(Protocol):
    """Runs a tool on its MCP server. Never raises: failures come back in ``ToolRun.error``.
    ``call_id``: the id of the model's call it runs, sent in the request's ``_meta``
    (``wire.CALL_ID_META_KEY``)."""

    def call(self, tool: ToolDef, arguments: JSONDict, *, call_id: str | None = None) -> ToolRun: ...


class TurnCancelled(Exception):
    """The turn was told to stop while the loop waited on the outside world (a cancel).

    ``partial`` is the model's reply as far as it had streamed in when its call was abandoned,
    and ``exchange`` the abandoned call's record (what was sent, and what had arrived), if any.
    """

    def __init__(self, reason: str, *, partial: str = "", exchange: WireExchange | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.partial = partial
        self.exchange = exchange


class Completer(Protocol):
    """What the loop needs of a model: ``providers.base.Provider.complete`` (same contract), so
    a wrapper (one that can abandon a call) serves as well as a provider."""

    def complete(self, request: ModelRequest, *, on_delta: DeltaCallback | None = None) -> ModelReply: ...


# What reading untrusted model output can raise besides a ``ProviderError``: a parser's miss.
_UNREADABLE = (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, UnicodeError)

# Asked between steps: why the turn must stop now ("" to go on).
StopCheck = Callable[[], str]


@dataclass
class AgentTurn:
    question: str
    tools: list[ToolDef]
    history: list[Message] = field(default_factory=list)
    choice: ToolChoice = field(default_factory=ToolChoice)
    max_steps: int = 8
    capabilities: dict[str, str] = field(default_factory=dict)
    # At most this many calls of one reply are taken; the rest go back to the model as errors.
    max_calls_per_reply: int = 16
    # At most this many calls are sent to tool hosts in the whole turn.
    max_calls_per_turn: int = 64


@dataclass
class AgentOutcome:
    """How the turn ended; ``downgrades`` lists (capability, reason) the model turned out to lack."""

    status: Literal["done", "failed", "cancelled"]
    answer: str
    error: str
    messages: list[Message]
    downgrades: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class CheckedCall:
    """A call and the verdict on it: the tool it resolves to, or why it cannot be sent."""

    call: ToolCall
    tool: ToolDef | None
    error: str = ""

    def as_json(self) -> JSONDict:
        data = self.call.as_json()
        data["valid"] = not self.error
        data["error"] = self.error
        data["server"] = self.tool.server_name if self.tool else None
        data["tool"] = self.tool.name if self.tool else None
        return data


@functools.lru_cache(maxsize=512)
def _validator(schema_text: str) -> Validator:
    """A checked validator per distinct schema (checking a schema costs far more than using it).

    Raises:
        SchemaError: the schema is not valid JSON Schema (not cached: asked again next time).
    """
    schema = json.loads(schema_text)
    validator_class = validator_for(schema, default=Draft202012Validator)
    validator_class.check_schema(schema)
    return validator_class(schema)


def check_call(call: ToolCall, tools: dict[str, ToolDef]) -> CheckedCall:
    """Resolve a call to an offered tool and validate its arguments against the inputSchema."""
    tool = tools.get(call.name)
    if tool is None:
        offered = ", ".join(sorted(tools)) or "none"
        return CheckedCall(call, None, f"unknown tool '{call.name}'; the tools offered are: {offered}")
    if call.arguments is None:
        return CheckedCall(
            call, tool, f"the arguments for {call.name} are not a JSON object: {call.arguments_text[:300]!r}"
        )
    try:
        validator = _validator(json.dumps(tool.input_schema, sort_keys=True))
        problems = sorted(validator.iter_errors(call.arguments), key=lambda e: list(e.path))
    except SchemaError as exc:
        return CheckedCall(call, tool, f"the tool's inputSchema is not valid JSON Schema: {exc.message}")
    except Exception as exc:  # noqa: BLE001 — an unusable schema (unknown type, bad $ref) is the server's bug
        return CheckedCall(call, tool, f"the tool's inputSchema cannot be used for validation: {exc}")
    surrogate = _lone_surrogate(call.arguments)
    if surrogate is not None:
        return CheckedCall(
            call,
            tool,
            f"the arguments hold text no JSON encoder can send (lone surrogate at {surrogate})",
        )
    if problems:
        described = "; ".join(
            (f"at '{'.'.join(str(p) for p in problem.path)}': " if problem.path else "") + problem.message
            for problem in problems
        )
        return CheckedCall(call, tool, f"invalid arguments for {call.name}: {described}")
    return CheckedCall(call, tool)


def _lone_surrogate(value: Any) -> str | None:
    """Where ``value`` holds a lone surrogate (``city, character 3: U+DFFF``), which UTF-8, and
    so no MCP transport, can carry (a model may write one as a ``\\udfff`` escape); None if
    nowhere. Walked with a stack, not recursion: arguments may nest deep."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            for index, char in enumerate(item):
                if "\ud800" <= char <= "\udfff":
                    return f"{path or 'the arguments'}, character {index}: U+{ord(char):04X}"
        elif isinstance(item, dict):
            for key, inner in reversed(list(item.items())):
                shown = str(key).encode("utf-8", "backslashreplace").decode()
                where = f"{path}.{shown}" if path else shown
                stack.append((where, inner))
                stack.append((f"the name of {where}", key))
        elif isinstance(item, list):
            stack.extend((f"{path}[{index}]", inner) for index, inner in reversed(list(enumerate(item))))
    return None


class PromptRenderer(Protocol):
    """Renders the text the model reads for a request (the spliced prompt), with token counts."""

    def __call__(self, request: ModelRequest) -> Spliced: ...


class _Asker:
    """The loop's ``Asker``: each model call becomes a ``decide`` step, persisted before the call."""

    def __init__(
        self, provider: Completer, recorder: Recorder, render: PromptRenderer, partials: PartialSinks | None
    ) -> None:
        self.provider = provider
        self.recorder = recorder
        self.render = render
        self.partials = partials
        self.steps: list[StepRef] = []
        self.downgrades: list[tuple[str, str]] = []
        # What the providers escaped in this decision's replies (``ModelReply.notes``): kept at
        # the head of the step's diagnostics whatever the paradigm adds.
        self.notes: list[str] = []

    @property
    def last_step(self) -> StepRef | None:
        return self.steps[-1] if self.steps else None

    def ask(self, request: ModelRequest, *, title: str) -> ModelReply:
        if self.steps:
            # An earlier call of the same decision (intent's classify, a re-ask) is complete.
            self.recorder.step_close(self.steps[-1], status="ok")
        step = self.recorder.step_open(kind="decide", title=title, computed=self._prompt(request))
        try:
            reply = self.provider.complete(
                request, on_delta=self.partials(step) if self.partials is not None else None
            )
        except TurnCancelled as exc:
            self.recorder.step_close(
                step,
                status="error",
                title=f"{title}: abandoned",
                text=exc.partial,
                error=f"the model call was abandoned: {exc.reason}",
                exchanges=[exc.exchange] if exc.exchange else [],
            )
            raise
        except ProviderError as exc:
            self.recorder.step_close(
                step,
                status="error",
                kind="error",
                title=f"{title} failed",
                error=exc.message,
                exchanges=[exc.exchange] if exc.exchange else [],
            )
            raise
        self.steps.append(step)
        self.notes.extend(reply.notes)
        noted: dict[str, Any] = {"diagnostics": list(self.notes)} if reply.notes else {}
        self.recorder.step_save(
            step, text=reply.text or "", usage=reply.usage, exchanges=[reply.exchange], **noted
        )
        return reply

    def _prompt(self, request: ModelRequest) -> Callable[[], dict[str, Any]]:
        """The step's spliced prompt and token counts, for the recorder to work out when it likes:
        from a copy of the request, which the paradigm may go on to change."""
        frozen = replace(
            request,
            messages=list(request.messages),
            tools=list(request.tools),
            tool_texts=dict(request.tool_texts),
        )
        render = self.render

        def fields() -> dict[str, Any]:
            spliced = render(frozen)
            return {
                "prompt": spliced.text,
                "prompt_exact": spliced.exact,
                "prompt_source": spliced.source[:300],
                "tokens": asdict(spliced.tokens),
            }

        return fields

    def note(self, *, text: str | None = None, diagnostics: Sequence[str] = ()) -> None:
        if self.last_step is None:
            return
        fields: dict[str, Any] = {"diagnostics": [*self.notes, *diagnostics]}
        if text is not None:
            fields["text"] = text
        self.recorder.step_save(self.last_step, **fields)

    def fallback(self, *, title: str, reason: str, capability: str | None = None) -> None:
        step = self.recorder.step_open(kind="fallback", title=title)
        self.recorder.step_close(step, status="ok", text=reason)
        if capability is not None:
            self.downgrades.append((capability, reason))


def run_agent(
    turn: AgentTurn,
    *,
    paradigm: Paradigm,
    provider: Completer,
    host: ToolHost,
    recorder: Recorder,
    render: PromptRenderer,
    partials: PartialSinks | None = None,
    stopped: StopCheck | None = None,
) -> AgentOutcome:
    """Run one turn to a final answer, a failure, the step limit, or a stop.

    ``partials`` gives each model call's step a place to show its reply while it streams in.
    ``stopped`` is asked before each decision and after each tool call; a reason ends the turn
    ``cancelled`` there. A provider or tool host that abandons a call in flight for the same
    reason raises ``TurnCancelled`` (the provider) or returns the abandoned call's record (the
    host); either way what was recorded so far stays.
    """
    messages = [*turn.history, Message(role="user", content=turn.question)]
    offered = {tool.provider_name: tool for tool in turn.tools}
    choice = turn.choice
    downgrades: list[tuple[str, str]] = []
    budget = _CallBudget(per_reply=turn.max_calls_per_reply, per_turn=turn.max_calls_per_turn)
    for _ in range(turn.max_steps):
        reason = stopped() if stopped is not None else ""
        if reason:
            return AgentOutcome("cancelled", "", reason, messages, downgrades)
        asker = _Asker(provider, recorder, render, partials)
        context = DecisionContext(
            messages=list(messages),
            tools=list(turn.tools),
            choice=choice,
            asker=asker,
            capabilities=turn.capabilities,
        )
        try:
            decision = paradigm.decide(context)
        except TurnCancelled as exc:
            downgrades.extend(asker.downgrades)
            return AgentOutcome("cancelled", "", exc.reason, messages, downgrades)
        except ProviderError as exc:
            downgrades.extend(asker.downgrades)
            return AgentOutcome("failed", "", exc.message, messages, downgrades)
        except _UNREADABLE as exc:
            # A reply no parser foresaw: the raw response is recorded already (``ask``); the
            # step says what broke, and the turn fails instead of stopping half-recorded.
            downgrades.extend(asker.downgrades)
            problem = f"the {paradigm.key} paradigm could not read the reply: {type(exc).__name__}: {exc}"[
                :2000
            ]
            if asker.last_step is not None:
                recorder.step_close(
                    asker.last_step, status="error", error=problem, diagnostics=[*asker.notes, problem]
                )
            return AgentOutcome("failed", "", problem, messages, downgrades)
        downgrades.extend(asker.downgrades)
        decision.diagnostics[:0] = asker.notes
        step = asker.last_step
        if step is None:
            raise RuntimeError(f"the {paradigm.key} paradigm decided without asking the model")
        messages.append(decision.assistant)
        if not decision.calls:
            answer = decision.text or ""
            if not answer.strip():
                decision.diagnostics.append("the model returned neither text nor a tool call")
            recorder.step_close(
                step,
                status="ok",
                kind="answer",
                title="final answer",
                text=answer,
                diagnostics=decision.diagnostics,
            )
            return AgentOutcome("done", answer, "", messages, downgrades)
        checked, left, note = budget.take(decision.calls, offered)
        refusal = f"Error: not run: at most {budget.per_reply} tool calls of one reply are run"

        if note:
            decision.diagnostics.append(note)
        names = ", ".join(c.tool.name if c.tool else c.call.name for c in checked)
        recorder.step_save(
            step,
            title=f"calls {names}",
            calls=[c.as_json() for c in checked],
            diagnostics=decision.diagnostics,
        )
        for item in checked:
            text, is_error = _run_call(item, step, host, recorder)
            messages.append(
                Message(
                    role="tool",
                    content=text,
                    tool_call_id=item.call.id,
                    name=item.call.name,
                    is_error=is_error,
                )
            )
            reason = stopped() if stopped is not None else ""
            if reason:
                # The calls after this one are not sent; the decision ends here.
                recorder.step_close(step, status="error")
                return AgentOutcome("cancelled", "", reason, messages, downgrades)
        # Every call the reply held gets its result (providers refuse a call id left unanswered);
        # those past the per-reply limit have no step of their own: the decision's note says so.
        messages.extend(
            Message(role="tool", content=refusal, tool_call_id=c.id, name=c.name, is_error=True) for c in left
        )
        refused = bool(left) or any(c.error for c in checked)
        recorder.step_close(step, status="error" if refused else "ok")
        choice = choice.after_call()
    limit = f"stopped after {turn.max_steps} decisions without a final answer"
    error_step = recorder.step_open(kind="error", title="step limit reached")
    recorder.step_close(error_step, status="error", error=limit)
    return AgentOutcome("failed", "", limit, messages, downgrades)


class _CallBudget:
    """The turn's tool-call limits: how many calls of one reply are taken, and how many calls
    the whole turn may send (docs/turn-lifecycle.md, "Limits")."""

    def __init__(self, *, per_reply: int, per_turn: int) -> None:
        self.per_reply = max(per_reply, 0)
        self.per_turn = max(per_turn, 0)
        self.sent = 0

    def take(
        self, calls: Sequence[ToolCall], offered: dict[str, ToolDef]
    ) -> tuple[list[CheckedCall], list[ToolCall], str]:
        """The calls of one reply that are taken (checked; a valid one past the turn's limit
        refused), the calls left past the per-reply limit, and the note that says why."""
        taken = [check_call(call, offered) for call in calls[: self.per_reply]]
        for item in taken:
            if item.error:
                continue
            if self.sent >= self.per_turn:
                item.error = (
                    f"this turn has sent its {self.per_turn} tool calls, the most one turn may send "
                    "(AGENT_MAX_CALLS_PER_TURN)"
                )
            else:
                self.sent += 1
        left = list(calls[self.per_reply :])
        if not left:
            return taken, left, ""
        note = (
            f"not run: the reply held {len(calls)} tool calls and at most {self.per_reply} of one reply "
            f"are run (AGENT_MAX_CALLS_PER_REPLY); the other {len(left)} went back to the model as "
            "error results (the raw response holds them all)"
        )
        return taken, left, note


def _run_call(item: CheckedCall, parent: StepRef, host: ToolHost, recorder: Recorder) -> tuple[str, bool]:
    """Run (or refuse) one checked call; returns the text the model gets back and the error flag."""
    tool = item.tool
    step = recorder.step_open(
        kind="tool",
        parent=parent,
        title=f"{tool.server_name}/{tool.name}" if tool else item.call.name,
        tool_name=tool.name if tool else item.call.name,
        arguments=item.call.arguments if item.call.arguments is not None else item.call.arguments_text,
        server_id=tool.server_id if tool else None,
        server_name=tool.server_name if tool else "",
    )
    if item.error or tool is None:
        recorder.step_close(step, status="error", is_error=True, error=f"not sent: {item.error}")
        return f"Error: {item.error}", True
    run = host.call(tool, item.call.arguments or {}, call_id=item.call.id or None)
    if run.error:
        recorder.step_close(
            step,
            status="error",
            is_error=True,
            error=run.error,
            result=run.result,
            diagnostics=run.notes,
            exchanges=run.exchanges,
        )
        return f"Error: {run.error}", True
    is_error = bool(run.result and run.result.get("isError"))
    recorder.step_close(
        step,
        status="error" if is_error else "ok",
        is_error=is_error,
        result=run.result,
        diagnostics=run.notes,
        exchanges=run.exchanges,
    )
    return tool_result_text(run.result), is_error
