"""Runs one queued turn: load it, connect its servers, hand it to the agent loop, finish it.

Django-aware glue around ``conversations.loop.agent`` (which is not): it builds the provider and
the paradigm from the database, gets the servers' tools and the tool host from the MCP side
(``conversations.loop.toolhost``), and records through ``TurnRecorder``.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

import httpx2
from django.conf import settings
from django.db import DatabaseError, connection

from conversations import events
from conversations.capabilities import CAPABILITY_FIELDS, capability_downgrades_remember
from conversations.counting import definitions_counted, prompt_tools_counted, with_response_format
from conversations.demo import urls as demo_urls
from conversations.lifecycle import CANCEL, TurnSignal, turn_claim, turn_unwatch, turn_watch, turns_reap_stale
from conversations.limits import turn_limits
from conversations.loop.agent import AgentTurn, PromptRenderer, TurnCancelled, run_agent
from conversations.loop.hosts import HOSTS, HostPreset, tools_as_host
from conversations.loop.llm import Message, ToolChoice, ToolDef
from conversations.loop.paradigms import PARADIGMS
from conversations.loop.providers import (
    PROVIDERS,
    Endpoint,
    ModelReply,
    ModelRequest,
    Provider,
    ProviderError,
)
from conversations.loop.providers.http import call_abandoned, interruptible_call
from conversations.loop.providers.openai_chat import endpoint_transport, wire_message, wire_tool
from conversations.loop.providers.streaming import DeltaCallback, PartialReply
from conversations.loop.splicing import GenericRenderer, Spliced, splice
from conversations.loop.tool_overrides import Overrides, tool_overrides_for, tools_overridden
from conversations.loop.toolhost import Connected, TurnServers, turn_servers
from conversations.models import ModelProfile, Turn
from conversations.record.connections import discard_connection
from conversations.record.recording import TurnRecorder, turn_end_save
from conversations.record.store import FenceRefused
from conversations.record.trace_delivery import trace_delivery_queue
from conversations.secret_sources import active_redactor
from conversations.typealias import JSONDict

logger = logging.getLogger(__name__)


class TurnSetupError(Exception):
    """The turn cannot start as configured; the message says why, for the user."""


def api_key_for(profile: ModelProfile) -> str:
    """The key from the worker's environment (or one this app provides); never stored.

    Raises:
        TurnSetupError: the profile names a variable that is not set.
    """
    if not profile.api_key_env:
        return ""
    key = os.environ.get(profile.api_key_env) or settings.BUILTIN_API_KEYS.get(profile.api_key_env, "")
    if not key:
        raise TurnSetupError(
            f"the API key variable {profile.api_key_env} is not set in this worker's environment"
        )
    return key


def endpoint_for(profile: ModelProfile) -> Endpoint:
    """Where the profile's model is reached; the demo model, in process, at its provider's base URL."""
    in_process = profile.is_demo and not profile.base_url
    provider = PROVIDERS[profile.provider]
    endpoint = Endpoint(
        model=profile.model,
        base_url=provider.demo_base_url if in_process else (profile.base_url or provider.default_base_url),
        api_key=api_key_for(profile),
        timeout=settings.MODEL_TIMEOUT_SECONDS,
        deadline=profile.deadline_seconds,
        in_process=in_process,
        stream=profile.stream,
        body_limit=turn_limits(profile).response_body_limit,
    )
    if in_process:
        endpoint_transport.set(endpoint, _in_process_transport())
    return endpoint


@functools.cache
def _in_process_transport() -> httpx2.WSGITransport:
    """The demo model's routes as an HTTP transport, built once per process: their own WSGI
    application (``conversations.demo.urls.application``), not the site's handler, whose
    middleware is for requests from the network (under the production settings its host check
    and HTTPS redirect refused the app's own call)."""
    return httpx2.WSGITransport(app=demo_urls.application)


def _on_own_thread(call: Callable[[], ModelReply], *, name: str) -> Future[ModelReply]:
    """Run ``call`` on a daemon thread of its own: an abandoned call never holds up the process's
    exit (a pool's threads are joined at exit: a web server would wait out the model)."""
    future: Future[ModelReply] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(call())
        except BaseException as exc:  # noqa: BLE001 — handed to the waiting thread as it is
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


@dataclass
class AbandonableProvider:
    """A provider whose call a stopped turn need not wait for.

    A call to a model over the network runs on the turn's own thread. When the turn's signal
    fires meanwhile, the call is abandoned at once: the connection it waits on is shut down
    (``interruptible_call``) and a reply still streaming in is not read further; the provider's
    error, with whatever had arrived, becomes ``TurnCancelled``, which keeps that exchange for
    the record. A reply that was complete before the stop is returned: the loop stops at its
    next check.

    A call to the app's own demo model (``in_process``) has no connection to shut down and ends
    its request as Django does (``request_finished``), whose cleanup must not touch the turn's
    database connection: it runs on a thread of its own, which the turn stops waiting for on a
    stop (the demo model, seeing ``call_abandoned``, stops "thinking" too); its reply is dropped.
    """

    inner: Provider
    signal: TurnSignal
    in_process: bool = False

    def complete(self, request: ModelRequest, *, on_delta: DeltaCallback | None = None) -> ModelReply:
        if self.signal.stopped:
            raise TurnCancelled(self.signal.stopped)
        abandoned = threading.Event()
        last: list[PartialReply] = []

        def relay(partial: PartialReply) -> None:
            if not abandoned.is_set() and on_delta is not None:
                last[:] = [partial]
                on_delta(partial)

        if on_delta is not None:
            # Names the callback it relays, so a throttle behind it still spares the stream
            # the snapshots it would drop (``PartialEmitter``).
            functools.update_wrapper(relay, on_delta, assigned=(), updated=())
        call = functools.partial(
            self.inner.complete, request, on_delta=relay if on_delta is not None else None
        )
        if self.in_process:
            return self._on_own_thread(call, abandoned, last)
        token = call_abandoned.set(abandoned)
        try:
            with interruptible_call() as interrupt:

                def abandon() -> None:
                    abandoned.set()
                    interrupt()

                forget = self.signal.on_stop(abandon)
                try:
                    return call()
                except Exception as exc:
                    if not abandoned.is_set():
                        raise
                    exchange = exc.exchange if isinstance(exc, ProviderError) else None
                    raise TurnCancelled(
                        self.signal.stopped, partial=last[0].text if last else "", exchange=exchange
                    ) from exc
                finally:
                    forget()
        finally:
            call_abandoned.reset(token)

    def _on_own_thread(
        self, call: Callable[[], ModelReply], abandoned: threading.Event, last: list[PartialReply]
    ) -> ModelReply:
        context = contextvars.copy_context()
        # A reply still streaming in when the call is abandoned is not read further.
        context.run(call_abandoned.set, abandoned)
        future = _on_own_thread(
            functools.partial(context.run, call), name=f"model-call-turn-{self.signal.turn_id}"
        )
        wake = threading.Event()
        future.add_done_callback(lambda _: wake.set())
        forget = self.signal.on_stop(wake.set)
        try:
            wake.wait()
        finally:
            forget()
        if future.done():
            return future.result()
        abandoned.set()
        future.add_done_callback(_abandoned_call_ended)
        raise TurnCancelled(self.signal.stopped, partial=last[0].text if last else "")


def _abandoned_call_ended(future: Future[ModelReply]) -> None:
    error = future.exception()
    logger.debug("an abandoned model call ended%s", f": {error}" if error else " with a reply (dropped)")


def prompt_renderer(profile: ModelProfile) -> PromptRenderer:
    """Splices each request the way the profile's model reads it (its chat template, if known).

    One renderer serves one turn's requests, in order: what a request repeats of the one before
    (the tools, the history) is made into its wire shape once (:class:`_Wired`) and written once
    by the generic rendering (``splicing.GenericRenderer``), not again at every step."""
    wired = _Wired()
    generic = GenericRenderer()
    # The recorder works the prompts out one batch at a time, but on either of its threads.
    lock = threading.Lock()

    def render(request: ModelRequest) -> Spliced:
        with lock:
            tools = wired.tools(request.tools)
            spliced = splice(
                messages=wired.messages(request.messages),
                tools=tools,
                model=profile.model,
                template=profile.chat_template or None,
                templates=profile.chat_templates or None,
                template_source=profile.chat_template_source or "the profile's chat template",
                special_tokens=profile.special_tokens or None,
                tokenizer=profile.tokenizer,
                added_tokens=profile.added_tokens or (),
                arguments_setting=profile.template_arguments,
                prompt_is_ours=not request.tools,
                generic=generic,
            )
        # The schema a structured request sends is read by the model too (docs/teaching.md §6).
        spliced = definitions_counted(spliced, tools)
        spliced = prompt_tools_counted(spliced, request.tool_texts)
        return with_response_format(spliced, request.response_format)

    return render


class _Wired:
    """A turn's messages and tools in the shape splicing reads (the Chat Completions one), each
    made once and given again as the same object while it is unchanged.

    A message is known by its content (``Message`` is mutable: a message changed in place is
    made anew), a tool by the object itself (``ToolDef`` is frozen). Only what the latest
    request holds is kept."""

    def __init__(self) -> None:
        self._messages: dict[tuple[object, ...], JSONDict] = {}
        self._tools: dict[int, tuple[ToolDef, JSONDict]] = {}

    def messages(self, messages: list[Message]) -> list[JSONDict]:
        made: dict[tuple[object, ...], JSONDict] = {}
        wire = []
        for message in messages:
            key = _message_key(message)
            if key in made:  # the same content twice: each its own object
                wire.append(wire_message(message))
                continue
            made[key] = self._messages.get(key) or wire_message(message)
            wire.append(made[key])
        self._messages = made
        return wire

    def tools(self, tools: list[ToolDef]) -> list[JSONDict]:
        made = {}
        for tool in tools:
            seen = self._tools.get(id(tool))
            made[id(tool)] = seen if seen is not None and seen[0] is tool else (tool, wire_tool(tool))
        self._tools = made
        return [made[id(tool)][1] for tool in tools]


def _message_key(message: Message) -> tuple[object, ...]:
    """What ``wire_message`` reads of a message (and its other fields): equal keys, equal wire."""
    calls = tuple((call.id, call.name, call.arguments_text) for call in message.tool_calls)
    echo = None if message.echo is None else json.dumps(message.echo, sort_keys=True, default=str)
    return (
        message.role,
        message.content,
        message.tool_call_id,
        message.name,
        message.is_error,
        message.format,
        calls,
        echo,
    )


def connect_servers(
    servers: TurnServers,
    recorder: TurnRecorder,
    signal: TurnSignal | None = None,
    overrides: Callable[[], Overrides | None] | None = None,
    host: HostPreset | None = None,
    provider: str = "",
) -> Connected:
    """Connect the turn's servers (``toolhost.TurnServers.connect``) as its ``connect`` step; the
    conversation's tool-definition overrides (``conversations.loop.tool_overrides``), read by
    ``overrides`` once the step is open (its row is written meanwhile: it is the first a
    watching page shows), are spliced into the tools offered, and the step's notes name each
    tool changed. With a ``host`` preset (the profile's ``host_preset``), the tools are then
    offered as that host would offer them to a ``provider`` model (``tools_as_host``): renamed
    and rewritten, each marked, and the ones the host refuses withheld (a problem of the step)."""
    count = servers.enabled
    step = recorder.step_open(kind="connect", title=f"connect {count} MCP server(s)")
    connected = servers.connect(redact=recorder.redact, signal=signal)
    changes = overrides() if overrides is not None else None
    if changes:
        connected.tools, notes = tools_overridden(connected.tools, changes)
        connected.notes.extend(notes)
    if host is not None:
        connected.tools, notes, problems = tools_as_host(host, connected.tools, provider=provider)
        connected.notes.extend(notes)
        connected.problems.extend(problems)
    recorder.step_close(
        step,
        status="error" if connected.problems else "ok",
        title=f"{len(connected.tools)} tools from {count} server(s)" if count else "no MCP servers selected",
        text="\n".join(connected.notes),
        diagnostics=connected.problems,
        result=connected.sessions,
        exchanges=connected.records,
    )
    return connected


def _choice(turn: Turn, tools: list[ToolDef]) -> ToolChoice:
    if turn.tool_choice != "named":
        return ToolChoice(turn.tool_choice)  # type: ignore[arg-type]
    server_name, _, tool_name = turn.tool_choice_name.partition("/")
    for tool in tools:
        if tool.server_name == server_name and tool.name == tool_name:
            return ToolChoice("named", tool.provider_name)
    raise TurnSetupError(f"the named tool {turn.tool_choice_name!r} is not offered by this turn's servers")


def _run_secrets(turn: Turn, servers: TurnServers) -> list[str]:
    """The secret values this turn will use: never to be written anywhere, even if echoed back."""
    secrets: list[str] = []
    try:
        secrets.append(api_key_for(turn.conversation.model_profile))
    except TurnSetupError:
        pass
    secrets.extend(servers.secrets())
    return secrets


def _history(turn: Turn) -> list[Message]:
    return _history_before(turn.conversation_id, turn.seq)


def _history_before(conversation_id: int, seq: int) -> list[Message]:
    """What the model is told of the turns before the one numbered ``seq``: the transcript of the
    latest one that has one, then the question and answer of each turn after it (turns that
    never finished), in order. Only the columns it uses are read (the turn's row holds its
    tools, the request history and more: building and converting that read cost more than the
    rest), in three queries at most however many turns never finished (and one more for each
    imported turn whose empty transcript is not ``[]``)."""
    if seq <= 1:
        # A conversation's turns are numbered from 1 (asked, replayed or imported alike): the
        # first has none before it, and a new conversation's first turn reads nothing here.
        return []
    earlier = Turn.objects.filter(conversation_id=conversation_id)
    previous = (
        earlier.filter(seq__lt=seq)
        .order_by("-seq")
        .values_list("seq", "transcript", "question", "answer")
        .first()
    )
    if previous is None:
        return []
    upto, transcript, question, answer = previous
    # A turn that never finished has no transcript (``[]``, the field's default; an import may
    # bring another empty value): keep at least its question and answer, after what the turns
    # before it give. Those are read at once: the latest turn before it with a transcript, then
    # the question and answer of every turn between the two.
    unfinished: list[tuple[str, str]] = []
    while not transcript:
        unfinished.append((question, answer))
        if upto <= 1:  # the first turn: none before it
            break
        latest = (
            earlier.filter(seq__lt=upto)
            .exclude(transcript=[])
            .order_by("-seq")
            .values_list("seq", "transcript", "question", "answer")
            .first()
        )
        since = latest[0] if latest is not None else 0
        if since < upto - 1:
            between = earlier.filter(seq__gt=since, seq__lt=upto).order_by("-seq")
            unfinished.extend(between.values_list("question", "answer"))
        if latest is None:
            break
        upto, transcript, question, answer = latest
    history = [Message.from_json(m) for m in transcript] if transcript else []
    for question, answer in reversed(unfinished):
        history.append(Message(role="user", content=question))
        if answer:
            history.append(Message(role="assistant", content=answer))
    return history


def turn_run(*, turn_id: int) -> str:
    """Run a queued turn to its end. Safe to call twice, at once or later: the turn is claimed
    by one atomic conditional UPDATE (``lifecycle.turn_claim``), so only one call runs it.
    Returns how this call left the turn: its status once run, or ``not claimed``.

    A call that finds the turn already running (a task redelivered after its worker died) leaves
    a live turn alone; a stale one is marked interrupted, as any process's periodic check would.

    Raises:
        django.db.DatabaseError: the database could not be reached before the turn started (it
            is still queued then, and may be run again).
    """
    claim = turn_claim(turn_id=turn_id)
    if claim is None:
        if Turn.objects.filter(pk=turn_id, status=Turn.Status.RUNNING).exists():
            turns_reap_stale()
        return "not claimed"
    signal = turn_watch(turn_id=turn_id)
    try:
        status = _run_claimed(turn_id, signal, claim)
    finally:
        turn_unwatch(turn_id=turn_id)
    trace_delivery_queue(turn_id=turn_id)
    return status


def _run_claimed(turn_id: int, signal: TurnSignal, claim: int) -> str:
    # The claimed turn with its conversation, profile and owner: ``get``, not ``first``, whose
    # ordering by id Django would build for this one-row read too (a fifth of its CPU).
    try:
        turn = Turn.objects.select_related("conversation__model_profile", "conversation__owner").get(
            pk=turn_id
        )
    except Turn.DoesNotExist:  # deleted, with its conversation, since it was claimed
        raise Turn.DoesNotExist(f"turn {turn_id} no longer exists") from None
    # Browsers render the running turn while it connects.
    events.emit(events.TurnChanged(conversation_id=turn.conversation.public_id, turn_id=turn.pk))
    # The conversation's servers, read once (by name: the order their tools are offered in).
    servers = turn_servers(turn.conversation, asked_by_id=turn.asked_by_id)
    recorder = TurnRecorder(turn, redact=active_redactor(secrets=_run_secrets(turn, servers)), claim=claim)
    try:
        return _run_recorded(turn, signal, servers, recorder)
    except FenceRefused:
        # Another process ended the turn while this runner was away (stopped, cut off): its
        # ending and seal stand, and nothing of what this runner did since is recorded.
        status = Turn.objects.filter(pk=turn_id).values_list("status", flat=True).first() or "missing"
        logger.warning(
            "turn %s: the database refused this runner's write: the turn is %s (ended by another "
            "process while this one was not heard from); nothing more of it is recorded here",
            turn_id,
            status,
        )
        return str(status)


def _run_recorded(turn: Turn, signal: TurnSignal, servers: TurnServers, recorder: TurnRecorder) -> str:
    """Run the claimed turn to its end through ``recorder``.

    Raises:
        FenceRefused: the database refused a write: the turn no longer runs under this claim.
    """
    turn_id = turn.pk
    try:
        profile = turn.conversation.model_profile
        connected = connect_servers(
            servers,
            recorder,
            signal,
            lambda: tool_overrides_for(turn.conversation),
            host=HOSTS.get(profile.host_preset),
            provider=profile.provider,
        )
        tools = connected.tools
        turn.tools = [tool.as_json() for tool in tools]
        recorder.turn_save("tools")
        endpoint = endpoint_for(profile)
        provider = PROVIDERS[profile.provider](endpoint)
        limits = turn_limits(profile)
        outcome = run_agent(
            AgentTurn(
                question=turn.question,
                tools=tools,
                history=_history(turn),
                choice=_choice(turn, tools),
                max_steps=limits.max_steps,
                max_calls_per_reply=limits.max_calls_per_reply,
                max_calls_per_turn=limits.max_calls_per_turn,
                capabilities={name: getattr(profile, name) for name in CAPABILITY_FIELDS},
            ),
            paradigm=PARADIGMS[turn.paradigm](),
            provider=AbandonableProvider(provider, signal, in_process=endpoint.in_process),
            host=connected.host,
            recorder=recorder,
            render=prompt_renderer(profile),
            partials=recorder.partial_sink,
            stopped=lambda: signal.stopped,
        )
        capability_downgrades_remember(
            profile=profile, downgrades=outcome.downgrades, turn=turn, redact=recorder.redact
        )
        # A step the database refused while the loop went on fails the turn, like one refused
        # before the loop's eyes: steps are missing, and the record says why.
        recorder.drain()
    except FenceRefused:
        raise
    except TurnSetupError as exc:
        step = recorder.step_open(kind="error", title="the turn could not start")
        recorder.step_close(step, status="error", error=str(exc))
        turn.mark_failed(str(exc))
    except DatabaseError as exc:
        logger.exception("turn %s: a database write or read failed", turn_id)
        step = recorder.step_open(kind="error", title="the database failed")
        recorder.step_close(step, status="error", error=f"{type(exc).__name__}: {exc}")
        turn.mark_failed(f"the database failed, so the record of this turn is incomplete: {exc}")
    except Exception as exc:  # a bug must still end the turn visibly
        logger.exception("turn %s failed", turn_id)
        step = recorder.step_open(kind="error", title="internal error")
        recorder.step_close(step, status="error", error=f"{type(exc).__name__}: {exc}")
        turn.mark_failed(f"internal error: {type(exc).__name__}: {exc}")
    else:
        turn.transcript = [m.as_json() for m in outcome.messages]
        if outcome.status == "done":
            turn.mark_done(outcome.answer)
        elif outcome.status == "cancelled":
            _end_cancelled(turn, recorder, signal)
        else:
            turn.mark_failed(outcome.error)
    # Every step is committed before the turn's end is written (a write that failed raises here).
    recorder.drain()
    # An ordinary (synchronous) commit: it makes the turn and every step before it durable.
    ended = recorder.turn_end()
    if ended is not None:
        # Another process has marked it finished meanwhile (its heartbeat was lost): that ending
        # and its seal stand. Every write since was refused (fencing), so there is nothing of
        # this runner's to seal again.
        logger.warning(
            "turn %s: its end was not written: the turn is %s (ended by another process)", turn_id, ended
        )
    if recorder.carried_big:
        # The end wrote the turn's history and the seal read its steps back: this connection's
        # buffers are as big as the biggest of them (``conversations.record.connections``).
        discard_connection(connection)
    recorder.turn_changed()
    return ended if ended is not None else str(turn.status)


def _end_cancelled(turn: Turn, recorder: TurnRecorder, signal: TurnSignal) -> None:
    """The turn stopped on its signal: cancelled, with a step saying by whom."""
    if signal.kind != CANCEL:
        return
    who = signal.by or "a user"
    text = f"cancelled by {who}; everything recorded before the cancel is kept"
    step = recorder.step_open(kind="error", title=f"cancelled by {who}")
    recorder.step_close(step, status="error", error=text)
    turn.mark_cancelled(text)


def turn_abandon(*, turn_id: int, reason: str) -> bool:
    """Mark a turn that could not be run failed, with the reason, if it has not finished.

    Returns whether the turn was changed (a turn that finished meanwhile is left alone).
    """
    turn = Turn.objects.select_related("conversation").get(pk=turn_id)
    if turn.is_finished:
        return False
    turn.mark_failed(reason)
    turn_end_save(turn=turn, update_fields=["status", "error", "finished_at", "updated_at"])
    events.emit(events.TurnChanged(conversation_id=turn.conversation.public_id, turn_id=turn.pk))
    return True
