"""The proxies' recorder: a host's model calls and MCP traffic, into the key's proxy session.

``record_model_call`` and ``record_mcp`` are what the proxy routes and ``proxy stdio`` call once
a model call or a group of MCP messages has passed (the contract: docs/proxy.md). Each writes
one transaction (``writing.write_steps``): nothing half-way when the database fails — the
``django.db.Error`` reaches the caller, which spools and retries — and the doorbells ring after
the commit. Both are synchronous.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from conversations.loop.wire import WireExchange
from conversations.models import Exchange
from conversations.proxy.model_calls import ReadCall, read_model_call
from conversations.proxy.models import ProxyKey, ProxySession
from conversations.proxy.sessions import session_for, turn_for
from conversations.proxy.splicing import spliced_fields
from conversations.proxy.writing import NewStep, write_steps
from conversations.record.exchanges import release_connection
from conversations.secret_sources import active_redactor
from conversations.typealias import JSONDict

logger = logging.getLogger(__name__)

NOT_SPLICED = (
    "recorded by proxy: no chat template is known for this key, so the request body is what the model got"
)


def _ended(record: WireExchange) -> Any:
    return record.started_at + timedelta(milliseconds=record.duration_ms or 0)


def record_model_call(
    key: ProxyKey,
    *,
    session: str | None,
    fmt: str,
    exchange: WireExchange,
    secrets: tuple[str, ...] = (),
) -> int:
    """Record one model call a host made through the LLM proxy: a model step with its parsed
    calls, text, usage and (when the key's profile has a chat template) its spliced prompt, and
    its exchange; its calls are linked to the ``tools/call``s that ran them. Returns the
    exchange's id.

    Raises:
        django.db.Error: the database could not be written (nothing of the record was).
    """
    try:
        return _model_call(key, session=session, fmt=fmt, exchange=exchange, secrets=secrets)
    finally:
        # Called from the proxies' own threads: a pooled connection goes back between records.
        release_connection()


def _model_call(
    key: ProxyKey, *, session: str | None, fmt: str, exchange: WireExchange, secrets: tuple[str, ...]
) -> int:
    redact = active_redactor(secrets=secrets)
    read, spliced = _read(key, fmt, exchange)
    now = timezone.now()
    fields: dict[str, Any] = {
        "status": "error" if read.error else "ok",
        "text": read.text,
        "calls": read.calls,
        "usage": read.usage,
        "diagnostics": read.diagnostics,
        "error": read.error,
        **spliced,
    }
    names = ", ".join(str(call.get("name")) for call in read.calls)
    title = (
        f"model call failed ({fmt})"
        if read.error
        else (f"calls {names}" if names else f"answers ({read.model or fmt})")
    )
    with transaction.atomic():
        proxy = session_for(key, hint=session, now=now, fmt=fmt)
        turn = turn_for(
            proxy,
            question=redact.text(read.question),
            model=read.model,
            now=now,
            started_at=exchange.started_at,
        )
        if not read.error and not read.calls:
            turn.answer = read.text
        step = NewStep(
            kind="error" if read.error else "decide",
            title=title,
            started_at=exchange.started_at,
            finished_at=_ended(exchange),
            records=[exchange],
            fields=fields,
        )
        written = write_steps(session=proxy, turn=turn, steps=[step], redact=redact)
        _touch(proxy, now)
    return written[0].pk


def _read(key: ProxyKey, fmt: str, exchange: WireExchange) -> tuple[ReadCall, dict[str, Any]]:
    """The call as read (``read_model_call``) and its spliced prompt's fields. Nothing a host or
    an upstream sent may lose the record: should reading it fail all the same, the exchange is
    stored with a step that says so."""
    try:
        read = read_model_call(fmt, exchange)
        return read, spliced_fields(key, fmt, read.request, fallback=NOT_SPLICED)
    except Exception as exc:  # noqa: BLE001 (the raw exchange is stored whatever it holds)
        logger.exception("a proxied model call could not be read (%s); it is stored unread", exchange.label)
        error = f"the call could not be read ({type(exc).__name__}); its exchange is stored as it passed"
        return ReadCall(question="", model="", error=error), {
            "prompt": "",
            "prompt_exact": False,
            "prompt_source": NOT_SPLICED,
        }


def record_mcp(
    key: ProxyKey,
    *,
    session: str | None,
    server_name: str,
    records: Sequence[WireExchange],
    secrets: tuple[str, ...] = (),
) -> list[int]:
    """Record a group of MCP messages a host exchanged with a server through an MCP proxy: each
    ``tools/call`` a tool step (linked to the model call that asked for it), the other messages
    in steps of their own between them. Returns the exchange ids, in the order of ``records``.

    Raises:
        django.db.Error: the database could not be written (nothing of the group was).
    """
    if not records:
        return []
    try:
        return _mcp(key, session=session, server_name=server_name, records=records, secrets=secrets)
    finally:
        release_connection()


def _mcp(
    key: ProxyKey,
    *,
    session: str | None,
    server_name: str,
    records: Sequence[WireExchange],
    secrets: tuple[str, ...],
) -> list[int]:
    redact = active_redactor(secrets=secrets)
    now = timezone.now()
    # ``proxy stdio``'s pairer knows no server: its records are the named one's.
    records = [
        record if record.server_name else replace(record, server_name=server_name) for record in records
    ]
    steps = _mcp_steps(server_name, records)
    with transaction.atomic():
        proxy = session_for(key, hint=session, now=now, fmt="")
        _learn_tools(proxy, server_name, records)
        turn = turn_for(
            proxy, question=None, model="", now=now, started_at=min(r.started_at for r in records)
        )
        written = write_steps(session=proxy, turn=turn, steps=steps, redact=redact)
        _touch(proxy, now)
    return [row.pk for row in written]


def _touch(proxy: ProxySession, now: Any) -> None:
    proxy.last_activity_at = now
    proxy.save(update_fields=["last_activity_at", "turn", "tools"])


def _json(text: str) -> JSONDict:
    try:
        value = json.loads(text) if text else {}
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _is_tool_call(record: WireExchange) -> bool:
    return (
        record.channel == Exchange.Channel.MCP
        and record.label == "tools/call"
        and record.direction == "client"
    )


def _mcp_steps(server_name: str, records: Sequence[WireExchange]) -> list[NewStep]:
    """The steps of a group, in its order: a tool step per ``tools/call``, and one step for each
    run of other messages."""
    steps: list[NewStep] = []
    others: list[WireExchange] = []

    def flush() -> None:
        if others:
            labels = ", ".join(dict.fromkeys(record.label for record in others))
            steps.append(
                NewStep(
                    kind="connect",
                    title=f"{server_name}: {labels}",
                    started_at=others[0].started_at,
                    finished_at=max(_ended(record) for record in others),
                    records=list(others),
                    fields={
                        "status": "ok",
                        "server_name": server_name[:40],
                        "server_id": others[0].server_id,
                    },
                )
            )
            others.clear()

    for record in records:
        if _is_tool_call(record):
            flush()
            steps.append(_tool_step(server_name, record))
        else:
            others.append(record)
    flush()
    return steps


def _tool_step(server_name: str, record: WireExchange) -> NewStep:
    request = _json(record.request_body)
    params = request.get("params")
    params = params if isinstance(params, dict) else {}
    name = str(params.get("name") or "")
    response = _json(record.response_body)
    result = response.get("result")
    error = response.get("error")
    fields: dict[str, Any] = {
        "tool_name": name,
        "arguments": params.get("arguments"),
        "server_name": server_name[:40],
        "server_id": record.server_id,
        "result": result if isinstance(result, dict) else None,
    }
    if isinstance(error, dict):
        fields.update(is_error=True, status="error", error=str(error.get("message") or error), result=error)
    elif not record.response_body:
        fields.update(is_error=True, status="error", error=record.error or "no response was recorded")
    else:
        is_error = isinstance(result, dict) and bool(result.get("isError"))
        fields.update(is_error=is_error, status="error" if is_error else "ok")
    return NewStep(
        kind="tool",
        title=f"{server_name}/{name}",
        started_at=record.started_at,
        finished_at=_ended(record),
        records=[record],
        fields=fields,
    )


def _learn_tools(proxy: ProxySession, server_name: str, records: Sequence[WireExchange]) -> None:
    """Keep the server's tool names as its last ``tools/list`` answered (linking reads them)."""
    for record in records:
        if record.label != "tools/list" or record.direction != "client":
            continue
        result = _json(record.response_body).get("result")
        listed = result.get("tools") if isinstance(result, dict) else None
        if isinstance(listed, list):
            names = [str(tool.get("name")) for tool in listed if isinstance(tool, dict) and tool.get("name")]
            # A paginated list adds to what the earlier pages gave.
            known = proxy.tools.get(server_name, []) if isinstance(proxy.tools, dict) else []
            cursor = _json(record.request_body).get("params")
            start = known if isinstance(cursor, dict) and cursor.get("cursor") else []
            proxy.tools = {**(proxy.tools or {}), server_name: list(dict.fromkeys([*start, *names]))}
