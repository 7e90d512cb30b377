"""Runs one workbench operation: load it, follow it on the gateway, record it, finish it.

Django-aware glue around ``servers.gateway.begin``: this thread persists each record the
moment it is captured (so a page polling the operation sees progress notifications arrive),
answers the server's own requests — sampling with the server's model profile, elicitation by
asking the user through a ``PendingInput`` row — and turns a user's cancel into a cancel on
the wire.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import jsonschema
from django.conf import settings
from django.db import close_old_connections, connections, transaction
from django.utils import timezone

from conversations.lifecycle import runner_gone
from conversations.loop.wire import WireExchange
from conversations.models import Exchange
from conversations.record.exchanges import exchange_rows, server_records_store
from conversations.redaction import Redactor
from conversations.secret_sources import active_redactor
from servers import gateway
from servers.forms import ELICITATION_FORMATS, schema_errors
from servers.gateway import Outcome, Question
from servers.gateway.config import ConfigError, ServerConfig
from servers.gateway.oauth import OAuthSettings
from servers.grants import (
    browser_redirect,
    grant_get,
    grant_keep,
    grant_settings,
    redactor_guarded,
    run_secrets,
)
from servers.models import McpServer, Operation, PendingInput
from servers.sampling import USER_REJECTED, USER_REJECTED_CODE, review_apply, sampling_answer

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.2
CANCEL_CHECK_SECONDS = 0.5
# How long the server's requests wait for a person (elicitation) before they are cancelled.
ANSWER_WAIT_SECONDS: float = getattr(settings, "WORKBENCH_ANSWER_WAIT_SECONDS", 120.0)
THREADS: int = getattr(settings, "WORKBENCH_THREADS", 8)


def review_seconds() -> float:
    """How long a sampling request waits for its review (``McpServer.sampling_review``) before it
    is refused: ``settings.WORKBENCH_SAMPLING_REVIEW_SECONDS``, by default as long as a question."""
    return float(getattr(settings, "WORKBENCH_SAMPLING_REVIEW_SECONDS", ANSWER_WAIT_SECONDS))


# The longest a subscription stays open (it holds one workbench thread while it waits).
SUBSCRIPTION_SECONDS: float = getattr(settings, "WORKBENCH_SUBSCRIPTION_SECONDS", 1800.0)
# Longer than any operation lasts (a subscription, a person signing in or answering): one still
# "running" after this, whose process the stale check cannot see (another host), is ended.
LONGEST_OPERATION_SECONDS: float = getattr(
    settings, "WORKBENCH_LONGEST_OPERATION_SECONDS", max(2 * 3600.0, 2 * SUBSCRIPTION_SECONDS)
)


# The fields a request's row gains when its answer arrives (or when it is given up on).
ANSWER_FIELDS = ("request_headers", "response_headers", "response_body", "status", "error", "duration_ms")
PENDING = "pending"

# How an operation with nobody to ask (``manage.py server call --elicitation``) answers the
# server's elicitation requests; without one, elicitation is offered only in the workbench.
ELICITATION_PRESETS = ("accept-defaults", "decline", "cancel")


def elicitation_preset_answer(*, preset: str, params: Any) -> tuple[dict[str, Any], str]:
    """The answer ``preset`` gives to an elicitation request, and why it could not accept.

    ``accept-defaults`` accepts with each requested field's ``default`` (fields without one, or
    with a default no elicitation field can hold, are left out), as a person pressing "Send" on
    the untouched form would; a required field with no default, defaults that fail the schema
    (a ``format`` — email, uri, date, date-time — or a numeric bound, checked as the browser
    checks them), a URL-mode request or a schema it cannot read makes it decline instead, and
    the second value says why. ``params`` is the server's untrusted JSON; this never raises.
    """
    if preset != "accept-defaults":
        return {"action": preset}, ""
    request = params if isinstance(params, dict) else {}
    if request.get("mode") == "url":
        return {"action": "decline"}, "a URL-mode request needs a person to visit the URL"
    schema = request.get("requestedSchema")
    properties = schema.get("properties") if isinstance(schema, dict) else None
    required = schema.get("required", []) if isinstance(schema, dict) else None
    if (
        not isinstance(properties, dict)
        or not all(isinstance(field, dict) for field in properties.values())
        or not isinstance(required, list)
    ):
        return {"action": "decline"}, "the requestedSchema is not an object schema it can read"
    content = {
        str(name): field["default"]
        for name, field in properties.items()
        if _is_elicitation_value(field.get("default"))
    }
    for name in required:
        if str(name) not in content:
            return {"action": "decline"}, f"{name} is required and has no usable default"
    # Checked as the browser's form and the workbench's answer view check an answer: the
    # formats (email, uri, date, date-time) and the numeric bounds the server asked for.
    try:
        errors = schema_errors(schema, content, formats=ELICITATION_FORMATS)  # type: ignore[arg-type]
    except Exception as exc:  # noqa: BLE001 — a schema no validator can read is the server's
        errors = [f"the requestedSchema cannot be checked: {type(exc).__name__}"]
    if errors:
        return {"action": "decline"}, "the defaults do not match the requested schema: " + "; ".join(errors)
    return {"action": "accept", "content": content}, ""


def _is_elicitation_value(value: Any) -> bool:
    """A value an elicitation answer may carry: the spec's primitives, or a list of strings."""
    if isinstance(value, list):
        return all(isinstance(item, str) for item in value)
    return isinstance(value, str | int | float | bool)


class _Recorder:
    """Writes an operation's exchanges as they arrive, in order, redacted.

    A request is written the moment it is sent, with status ``pending`` — a page following the
    operation shows the ``tools/call`` still waiting and the server's ``elicitation/create``
    waiting for the user — and the same row is completed when its answer arrives.
    """

    def __init__(self, operation: Operation, redact: Redactor, oauth: OAuthSettings | None) -> None:
        self.operation = operation
        self._redact = redact
        self._oauth = oauth
        self.seq = 0
        # Written just before the first ``tools/call`` (a note of what the user chose to send).
        self.before_call: WireExchange | None = None
        # Every record written, by id (the record kept alive, so the id stays its own): its row,
        # and whether that row is still waiting for the answer.
        self._written: dict[int, tuple[WireExchange, int, bool]] = {}

    @property
    def redact(self) -> Redactor:
        """The operation's redactor, with what its grant's flow obtained so far."""
        return redactor_guarded(self._redact, self._oauth)

    def record(self, records: list[WireExchange]) -> None:
        fresh = [record for record in records if not self._seen(record)]
        if not fresh:
            return
        note = self.before_call
        if note is not None and fresh[0].label == "tools/call":
            self.before_call = None
            note.started_at = fresh[0].started_at - timedelta(microseconds=1)
            fresh.insert(0, note)
        rows = exchange_rows(fresh, turn_id=None, step_id=None, redact=self.redact, first_seq=self.seq + 1)
        self.seq += len(rows)
        for record, row in zip(fresh, rows, strict=True):
            row.server_id = self.operation.server_id
            row.server_name = self.operation.server.name
            if not record.status and record.jsonrpc_id and not record.response_body:
                row.status = PENDING
        with transaction.atomic():
            Exchange.objects.bulk_create(rows)
            self.operation.exchanges.add(*rows)
        for record, row in zip(fresh, rows, strict=True):
            self._written[id(record)] = (record, row.pk, row.status == PENDING)

    def note(self, label: str, detail: dict[str, Any]) -> WireExchange:
        """A record of the workbench's own (``direction`` local: never on the wire), for the
        operation and the server's transcript: what the user decided, and why."""
        server = self.operation.server
        return WireExchange(
            channel=Exchange.Channel.MCP,
            label=label[:200],
            started_at=timezone.now(),
            direction=Exchange.Direction.LOCAL,
            request_body=json.dumps(detail, ensure_ascii=False),
            server_id=server.pk,
            server_name=server.name,
        )

    def _seen(self, record: WireExchange) -> bool:
        """True for a record already written; a pending one's row is completed if it is answered."""
        written = self._written.get(id(record))
        if written is None or written[0] is not record:
            return False
        _, pk, pending = written
        if pending and record.status:
            (row,) = exchange_rows([record], turn_id=None, step_id=None, redact=self.redact)
            Exchange.objects.filter(pk=pk).update(**{name: getattr(row, name) for name in ANSWER_FIELDS})
            self._written[id(record)] = (record, pk, False)
        return True


def _operation_for(
    operation: Operation,
    config: ServerConfig,
    tool: dict[str, Any] | None,
    given: Any = None,
    *,
    stop: threading.Event,
) -> gateway.Operation:
    kind = Operation.Kind
    arguments: Any = (operation.arguments if given is None else given) or {}
    if operation.kind == kind.RESOURCE_SUBSCRIBE:
        return gateway.op_subscribe(operation.target, seconds=subscription_seconds(arguments), stop=stop)
    if operation.kind == kind.TOOLS_CALL:
        # A person may need to answer the server mid-call: the call waits for them too.
        timeout = config.call_timeout + (ANSWER_WAIT_SECONDS if config.elicitation else 0)
        if config.sampling and operation.server.sampling_review:
            timeout += review_seconds()
        execution = (tool or {}).get("execution")
        as_task = isinstance(execution, dict) and execution.get("taskSupport") == "required"
        return gateway.op_call_tool(operation.target, arguments, timeout, as_task=as_task)
    if operation.kind == kind.RESOURCE_READ:
        return gateway.op_read_resource(operation.target)
    if operation.kind == kind.PROMPT_GET:
        return gateway.op_get_prompt(operation.target, {k: str(v) for k, v in arguments.items()})
    if operation.kind == kind.LOG_LEVEL:
        return gateway.op_set_level(operation.target)
    if operation.kind == kind.COMPLETE:
        return gateway.op_complete(arguments["ref"], arguments["argument"], arguments.get("context") or {})
    simple = {
        kind.CONNECT: gateway.op_connect,
        kind.TOOLS_LIST: gateway.op_list_tools,
        kind.RESOURCES_LIST: gateway.op_list_resources,
        kind.TEMPLATES_LIST: gateway.op_list_templates,
        kind.PROMPTS_LIST: gateway.op_list_prompts,
        kind.PING: gateway.op_ping,
    }
    return simple[Operation.Kind(operation.kind)]


def subscription_seconds(arguments: Any) -> float:
    """How long a subscription lasts: its ``seconds`` argument, at most the workbench's limit."""
    asked = arguments.get("seconds") if isinstance(arguments, dict) else None
    if isinstance(asked, int | float) and not isinstance(asked, bool) and asked > 0:
        return float(min(asked, SUBSCRIPTION_SECONDS))
    return SUBSCRIPTION_SECONDS


def output_check(result: Any, tool: dict[str, Any] | None) -> dict[str, Any]:
    """``structuredContent`` against the tool's ``outputSchema``; not checked for isError results."""
    if not isinstance(result, dict):
        return {}
    schema = (tool or {}).get("outputSchema")
    if not isinstance(schema, dict):
        return {"checked": False, "reason": "the tool declares no outputSchema"}
    if result.get("isError"):
        return {"checked": False, "reason": "isError results are not checked against the outputSchema"}
    if "structuredContent" not in result:
        return {
            "checked": True,
            "valid": False,
            "errors": ["the tool declares an outputSchema but sent no structuredContent"],
        }
    try:
        errors = [
            f"{'/'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
            for error in _output_validator(json.dumps(schema, sort_keys=True)).iter_errors(
                result["structuredContent"]
            )
        ]
    except Exception as exc:  # noqa: BLE001 — an unusable schema (unknown type, bad $ref) is the server's bug
        return {
            "checked": False,
            "reason": f"the tool's outputSchema cannot be used for validation: {exc}"[:500],
        }
    return {"checked": True, "valid": not errors, "errors": errors}


@functools.lru_cache(maxsize=512)
def _output_validator(schema_text: str) -> jsonschema.protocols.Validator:
    """A validator per distinct outputSchema: making one costs more than a small result's check,
    and a tool is called with the same schema at every step."""
    schema = json.loads(schema_text)
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return validator_class(schema)


class _Follower:
    """Drains a running operation's events and keeps its questions answered."""

    def __init__(
        self,
        operation: Operation,
        running: gateway.Running,
        recorder: _Recorder,
        *,
        timeout: float | None,
        stop: threading.Event | None = None,
        elicitation: str = "",
    ) -> None:
        self.operation = operation
        # An operation that ends itself when asked (a subscription unsubscribes): a cancel sets
        # this instead of abandoning it.
        self.stop = stop
        self.elicitation = elicitation
        self.running = running
        self.recorder = recorder
        self.waiting: dict[int, tuple[PendingInput, Question, float]] = {}
        self.cancelled = False
        self.timed_out = False
        self._next_cancel_check = 0.0
        # The server's time to answer; neither opening the session (the connect timeout bounds
        # that) nor the time a person takes to answer the server counts.
        self.timeout = timeout
        self._deadline: float | None = None
        self._last_tick = time.monotonic()

    def follow(self) -> None:
        while not self.running.done:
            event = self.running.next_event(POLL_SECONDS)
            if isinstance(event, WireExchange):
                self.recorder.record([event])
            elif isinstance(event, Question):
                self._ask(event)
            self._check_answers()
            self._check_cancel()
            self._check_deadline()
        self._expire_all()

    def _check_deadline(self) -> None:
        now = time.monotonic()
        if self._deadline is None and self.timeout is not None and self.running.outcome.session is not None:
            # The gateway sets the session once it is open: the request goes out now.
            self._deadline = now + self.timeout
        if self.waiting and self._deadline is not None:
            self._deadline += now - self._last_tick
        self._last_tick = now
        if self._deadline is None or self.timed_out or self.cancelled or now < self._deadline:
            return
        self.timed_out = True
        self.running.cancel()

    def _ask(self, question: Question) -> None:
        server = self.operation.server
        if question.kind == "sampling":
            profile = server.sampling_profile
            if profile is None:
                question.refuse("this server has no sampling model configured in the workbench")
                return
            if server.sampling_review:
                self._review(question)
                return
            self._sample(question, question.params)
            return
        pending = PendingInput.objects.create(
            operation=self.operation, kind=question.kind, params=self.recorder.redact.json(question.params)
        )
        if self.elicitation:
            preset, _ = elicitation_preset_answer(preset=self.elicitation, params=question.params)
            pending.mark_answered(action=preset["action"], content=preset.get("content"))
            pending.save(update_fields=["status", "answer", "answered_at"])
            question.answer(preset)
            return
        self.waiting[pending.pk] = (pending, question, time.monotonic() + ANSWER_WAIT_SECONDS)

    def _sample(self, question: Question, params: dict[str, Any]) -> None:
        """Answer a sampling request with the server's model profile, recording the model call."""
        profile = self.operation.server.sampling_profile
        if profile is None:
            question.refuse("this server has no sampling model configured in the workbench")
            return
        answer = sampling_answer(profile=profile, params=params)
        if answer.exchange is not None:
            self.recorder.record([answer.exchange])
        self.operation.sampling.append(
            {
                "exchange": self.recorder.seq if answer.exchange is not None else None,
                "parameters": self.recorder.redact.json(answer.parameters),
            }
        )
        Operation.objects.filter(pk=self.operation.pk).update(sampling=self.operation.sampling)
        if answer.result is None:
            question.refuse(answer.error)
        else:
            question.answer(answer.result)

    def _review(self, question: Question) -> None:
        """Hold a sampling request for the user to see, edit, approve or refuse (a
        ``PendingInput`` of kind ``sampling``); with nobody to ask (the CLI) it is refused."""
        pending = PendingInput.objects.create(
            operation=self.operation, kind="sampling", params=self.recorder.redact.json(question.params)
        )
        if self.operation.source != Operation.Source.WEB:
            reason = (
                "the server's sampling requests are reviewed in the workbench, and nobody reviews this one"
            )
            PendingInput.objects.filter(pk=pending.pk).update(
                status=PendingInput.Status.EXPIRED, answer={"reason": reason}, answered_at=timezone.now()
            )
            self._refused(question, reason)
            return
        self.waiting[pending.pk] = (pending, question, time.monotonic() + review_seconds())

    def _reviewed(self, row: PendingInput, question: Question) -> None:
        """Carry out a review's decision: the (edited) request to the model, or the refusal."""
        who = row.answered_by.get_username() if row.answered_by is not None else ""
        when = row.answered_at.isoformat() if row.answered_at is not None else ""
        edits = (row.answer or {}).get("edited") or {}
        if row.status == PendingInput.Status.ACCEPTED:
            label = f"workbench: sampling request approved by {who}" + (" (edited)" if edits else "")
            detail = {"decision": "approved", "by": who, "at": when, "edited": edits}
            self.recorder.record([self.recorder.note(label, detail)])
            self._sample(question, review_apply(question.params, edits))
            return
        self._refused(question, f"refused by {who}", by=who, at=when)

    def _refused(self, question: Question, reason: str, *, by: str = "", at: str = "") -> None:
        """Answer a reviewed sampling request with the specification's "user rejected" error."""
        detail = {"decision": "refused", "reason": reason, "by": by, "at": at or timezone.now().isoformat()}
        self.recorder.record([self.recorder.note(f"workbench: sampling request refused ({reason})", detail)])
        question.refuse(f"{USER_REJECTED}: {reason}", code=USER_REJECTED_CODE)

    def _check_answers(self) -> None:
        if not self.waiting:
            return
        answered = (
            PendingInput.objects.filter(pk__in=list(self.waiting))
            .exclude(status=PendingInput.Status.WAITING)
            .select_related("answered_by")
        )
        for row in answered:
            _, question, _ = self.waiting.pop(row.pk)
            if question.kind == "sampling":
                self._reviewed(row, question)
            else:
                question.answer(row.answer or {"action": row.status})
        now = time.monotonic()
        for pk, (_row, question, deadline) in list(self.waiting.items()):
            if now > deadline:
                del self.waiting[pk]
                expired = PendingInput.objects.filter(pk=pk, status=PendingInput.Status.WAITING).update(
                    status=PendingInput.Status.EXPIRED, answered_at=timezone.now()
                )
                if question.kind != "sampling":
                    question.refuse(f"no answer within {ANSWER_WAIT_SECONDS:.0f} s")
                elif expired:
                    self._refused(question, f"not reviewed within {review_seconds():g} s")
                else:
                    # Answered in the same instant: the answer stands.
                    self.waiting[pk] = (_row, question, deadline)

    def _check_cancel(self) -> None:
        now = time.monotonic()
        if self.cancelled or now < self._next_cancel_check:
            return
        self._next_cancel_check = now + CANCEL_CHECK_SECONDS
        if Operation.objects.filter(pk=self.operation.pk, cancel_requested=True).exists():
            if self.stop is not None:
                self.stop.set()
                return
            self.cancelled = True
            for _, question, _ in self.waiting.values():
                if question.kind == "sampling":
                    question.refuse(f"{USER_REJECTED}: the operation was cancelled", code=USER_REJECTED_CODE)
                else:
                    question.answer({"action": "cancel"})
            self.running.cancel()

    def _expire_all(self) -> None:
        for pk, (_, question, _) in self.waiting.items():
            question.refuse("the operation ended")
            PendingInput.objects.filter(pk=pk, status=PendingInput.Status.WAITING).update(
                status=PendingInput.Status.EXPIRED, answered_at=timezone.now()
            )
        self.waiting.clear()


def _status(outcome: Outcome) -> str:
    if outcome.cancelled:
        return Operation.Status.CANCELLED
    if outcome.timed_out:
        return Operation.Status.TIMEOUT
    return Operation.Status.ERROR if outcome.error else Operation.Status.OK


def operation_run(
    *,
    operation_id: int,
    tool: dict[str, Any] | None = None,
    arguments: Any = None,
    redirect: Callable[[str], Awaitable[str]] | None = None,
    elicitation: str = "",
) -> Operation:
    """Run a created operation to its end and record everything it caused.

    ``tool`` is the called tool's definition as last listed (for the outputSchema check).
    ``arguments``: what to send, as the user gave them (the row holds them redacted); None: the
    row's. ``elicitation``: one of ``ELICITATION_PRESETS`` to offer elicitation and answer it so
    (an operation nobody follows in the workbench); empty: offered only to the workbench.
    Never raises for a server's failure: the operation ends with status ``error`` and why.
    """
    operation = Operation.objects.select_related("server", "server__sampling_profile").get(pk=operation_id)
    server: McpServer = operation.server
    grant = None if server.spawns_process else grant_get(server=server, user=operation.user)
    if (
        grant is not None
        and redirect is None
        and operation.source == Operation.Source.WEB
        and operation.kind == Operation.Kind.CONNECT
        and getattr(settings, "WORKBENCH_RUNNER", "thread") != "inline"
    ):
        # Connect in the browser: a person may sign in at the authorization server.
        redirect = browser_redirect(grant=grant)
    oauth = grant_settings(grant=grant, redirect=redirect) if grant is not None else None
    try:
        config = server.to_config(
            interactive=operation.source == Operation.Source.WEB or bool(elicitation), oauth=oauth
        )
        # On the user's own pooled session: a server's state (its process's memory) is per user.
        config = replace(config, user_id=operation.user_id)
    except ConfigError as exc:
        return _finish(operation, status=Operation.Status.ERROR, error=str(exc))
    recorder = _Recorder(operation, active_redactor(secrets=run_secrets(server=server, oauth=oauth)), oauth)
    if operation.invalid_arguments:
        recorder.before_call = recorder.note(
            "workbench: arguments sent anyway (they break the tool's inputSchema)",
            {"deliberately_invalid": True, "overridden": operation.invalid_arguments},
        )
    stop = threading.Event()
    running = gateway.begin(
        config,
        _operation_for(operation, config, tool, arguments, stop=stop),
        answer_wait=ANSWER_WAIT_SECONDS + (review_seconds() if server.sampling_review else 0) + 5,
        fresh=operation.kind == Operation.Kind.CONNECT,
    )
    # A subscription's length is its own (it waits for updates, not for an answer).
    subscribing = operation.kind == Operation.Kind.RESOURCE_SUBSCRIBE
    timeout = None if operation.kind == Operation.Kind.CONNECT or subscribing else config.call_timeout
    follower = _Follower(
        operation,
        running,
        recorder,
        timeout=timeout,
        stop=stop if subscribing else None,
        elicitation=elicitation,
    )
    follower.follow()
    outcome = running.wait(timeout=10)
    if grant is not None and oauth is not None:
        grant_keep(grant=grant, oauth=oauth)
    server_records_store(outcome.unclaimed, redact=recorder.redact)
    redact = recorder.redact
    result = redact.json(outcome.value) if outcome.value is not None else None
    session = outcome.session
    status = _status(outcome)
    error = outcome.error
    if follower.cancelled:
        status = Operation.Status.CANCELLED
    elif follower.timed_out:
        status = Operation.Status.TIMEOUT
        error = (
            f"{server.name} did not answer within {config.call_timeout:g} s (the call timeout): "
            "the request was abandoned and the server was sent notifications/cancelled"
        )
    return _finish(
        operation,
        status=status,
        error=redact.text(error),
        result=result,
        is_error=bool(isinstance(result, dict) and result.get("isError")),
        session=redact.json(
            {
                "server_name": session.server_name,
                "server_title": session.server_title,
                "server_version": session.server_version,
                "protocol_version": session.protocol_version,
                "instructions": session.instructions,
                "capabilities": session.capabilities,
                "handshake": session.handshake,
                "generation": session.generation,
                "spawned": session.spawned,
                "respawn_reason": session.respawn_reason,
            }
        )
        if session is not None
        else {},
        output_check=redact.json(output_check(result, tool))
        if operation.kind == Operation.Kind.TOOLS_CALL
        else {},
        # Sent to the server as typed; stored, like everything the operation recorded, redacted.
        arguments=redact.json(operation.arguments),
    )


def _finish(operation: Operation, **fields: Any) -> Operation:
    for name, value in fields.items():
        setattr(operation, name, value)
    operation.finished_at = timezone.now()
    operation.save()
    return operation


# --- where operations run -------------------------------------------------------------------

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _run_in_thread(operation_id: int, tool: dict[str, Any] | None, arguments: Any = None) -> None:
    close_old_connections()
    try:
        operation_run(operation_id=operation_id, tool=tool, arguments=arguments)
    except Exception as exc:  # the thread's boundary: the operation must still end
        logger.exception("workbench operation %s crashed", operation_id)
        Operation.objects.filter(pk=operation_id, status=Operation.Status.RUNNING).update(
            status=Operation.Status.ERROR,
            error=f"internal error: {type(exc).__name__}: {exc}",
            finished_at=timezone.now(),
        )
    finally:
        # An idle pool thread must not keep a database connection open (nor a test database).
        connections.close_all()


def operation_dispatch(
    *, operation_id: int, tool: dict[str, Any] | None = None, arguments: Any = None
) -> None:
    """Run the operation in this process's workbench thread pool once the transaction commits.

    With ``settings.WORKBENCH_RUNNER = "inline"`` it runs at once, in this thread (tests).
    """
    if getattr(settings, "WORKBENCH_RUNNER", "thread") == "inline":
        operation_run(operation_id=operation_id, tool=tool, arguments=arguments)
        return
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="workbench")
    executor = _executor
    transaction.on_commit(lambda: executor.submit(_run_in_thread, operation_id, tool, arguments))


def operations_end_stale(*, now: datetime | None = None) -> list[int]:
    """End every operation still marked running that nothing runs any more; return their ids.

    Nothing runs it when its process (``Operation.runner``) was one of this host's and is gone, or
    when it has run longer than ``LONGEST_OPERATION_SECONDS`` (its process is elsewhere, or the
    row predates the runner). It ends ``error`` with why, keeping what it recorded; its requests
    still waiting for an answer are marked ``no response``. Registered with the stale check every
    serving process runs (``conversations.lifecycle.stale_check_register``, in ``apps.py``).
    """
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=LONGEST_OPERATION_SECONDS)
    running = Operation.objects.filter(status=Operation.Status.RUNNING)
    ended: list[int] = []
    for operation_id, runner, started_at in running.values_list("pk", "runner", "started_at"):
        if runner and runner_gone(runner):
            reason = f"interrupted: the process running it ({runner}) ended before it finished"
        elif started_at < cutoff:
            reason = (
                f"interrupted: running longer than any operation may ({LONGEST_OPERATION_SECONDS:.0f} s); "
                "the process running it is not on this host or has stopped answering"
            )
        else:
            continue
        with transaction.atomic():
            marked = Operation.objects.filter(pk=operation_id, status=Operation.Status.RUNNING).update(
                status=Operation.Status.ERROR, error=reason, finished_at=now
            )
            if marked:
                its = Operation.exchanges.through.objects.filter(operation_id=operation_id)
                Exchange.objects.filter(pk__in=its.values("exchange_id"), status=PENDING).update(
                    status="no response"
                )
                ended.append(operation_id)
    if ended:
        logger.warning("ended %d workbench operation(s) nothing was running: %s", len(ended), ended)
    return ended
