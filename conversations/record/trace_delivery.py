"""Sending each turn's trace to an OTLP/HTTP collector when the turn ends (docs/traces.md §5).

Optional: nothing happens unless ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_ENDPOINT``) is set. A turn that ends gets a ``TraceDelivery`` row
(``trace_delivery_queue``), pending; on commit it is handed to a sender — the Celery task
``tasks.deliver_trace`` in the scaled mode, this process's ``trace-delivery`` thread in the
embedded one (``TURN_RUNNER``). Each attempt (``trace_deliver``) posts the turn's trace as
OTLP/protobuf; the row says what happened. While the collector is down (no connection, a
timeout, 429, 5xx) the row stays pending with the time of its next attempt, the wait doubling
up to ``TRACE_DELIVERY_RETRY_MAX_SECONDS``; due rows are swept again (``trace_deliveries_retry``)
by the Celery beat / a worker that starts, or by the thread, so a trace is not lost when the
collector comes back later. A collector that refuses the trace itself (another 4xx) marks it
failed. The headers (``OTEL_EXPORTER_OTLP_HEADERS``, an API key typically) are sent and never
stored, logged or shown: what an attempt met is kept as a status code or an error class,
passed through the redactor with the header values as secrets.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from datetime import datetime, timedelta
from urllib.parse import unquote

import httpx2
from celery import current_app
from django.conf import settings
from django.db import DatabaseError, close_old_connections, transaction
from django.utils import timezone

from conversations import events
from conversations.models import TraceDelivery, Turn
from conversations.record.transcripts.document import transcript_document
from conversations.record.transcripts.otel import otlp_request, trace_origin, trace_span_ids
from conversations.record.transcripts.otel_proto import MEDIA_TYPE, otlp_protobuf
from conversations.secret_sources import active_redactor

logger = logging.getLogger(__name__)

# OTLP/HTTP: these answers mean "try again later" (docs/traces.md §5); any other 4xx is final.
RETRYABLE_STATUSES = frozenset({408, 429, 502, 503, 504})
DELIVER_TASK = "conversations.tasks.deliver_trace"


def trace_delivery_enabled() -> bool:
    return bool(settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)


def otlp_headers() -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_HEADERS`` (``name=value,name=value``, values percent-encoded) as a dict."""
    headers: dict[str, str] = {}
    for item in settings.OTEL_EXPORTER_OTLP_HEADERS.split(","):
        name, sep, value = item.partition("=")
        if sep and name.strip():
            headers[name.strip()] = unquote(value.strip())
    return headers


def turn_trace(turn: Turn) -> bytes:
    """The OTLP/protobuf request holding one turn's trace (the spans of that turn only)."""
    conversation = turn.conversation
    document = transcript_document(conversation=conversation, signed=False)
    return otlp_protobuf(
        otlp_request(
            document, origin=trace_origin(conversation), seq=turn.seq, span_ids=trace_span_ids(conversation)
        )
    )


def trace_delivery_queue(*, turn_id: int) -> None:
    """A turn has ended: its trace is pending, and handed to a sender once this commits."""
    if not trace_delivery_enabled():
        return
    TraceDelivery.objects.get_or_create(turn_id=turn_id)
    transaction.on_commit(lambda: _dispatch(turn_id))


def _dispatch(turn_id: int) -> None:
    if settings.TURN_RUNNER == "celery":
        current_app.send_task(DELIVER_TASK, args=[turn_id])
    else:
        _sender().put(turn_id)


def _backoff(attempts: int) -> timedelta:
    first = settings.TRACE_DELIVERY_RETRY_FIRST_SECONDS
    return timedelta(
        seconds=min(first * 2 ** max(attempts - 1, 0), settings.TRACE_DELIVERY_RETRY_MAX_SECONDS)
    )


def _claim(turn_id: int, now: datetime) -> TraceDelivery | None:
    """The pending, due delivery of the turn, held off from other senders for one attempt."""
    hold = now + timedelta(seconds=settings.OTEL_EXPORTER_OTLP_TIMEOUT_SECONDS * 2 + 5)
    claimed = TraceDelivery.objects.filter(
        turn_id=turn_id, status=TraceDelivery.Status.PENDING, next_attempt_at__lte=now
    ).update(next_attempt_at=hold)
    if not claimed:
        return None
    return TraceDelivery.objects.select_related("turn__conversation").get(turn_id=turn_id)


def trace_deliver(*, turn_id: int) -> TraceDelivery | None:
    """One attempt to send a turn's trace; the delivery as it stands after it.

    None when there is nothing to do now (no pending delivery, not due yet, or another sender
    holds it). Never raises for the collector's sake: what it met is on the row.
    """
    now = timezone.now()
    delivery = _claim(turn_id, now)
    if delivery is None:
        return None
    headers = otlp_headers()
    error = ""
    retry = False
    try:
        response = httpx2.post(
            settings.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
            content=turn_trace(delivery.turn),
            headers={**headers, "Content-Type": MEDIA_TYPE},
            timeout=settings.OTEL_EXPORTER_OTLP_TIMEOUT_SECONDS,
        )
    except httpx2.HTTPError as exc:
        error, retry = f"the collector could not be reached: {type(exc).__name__}", True
    else:
        if not 200 <= response.status_code < 300:
            retry = response.status_code in RETRYABLE_STATUSES or response.status_code >= 500
            verdict = "is unavailable" if retry else "refused the trace"
            error = f"the collector {verdict}: HTTP {response.status_code}"
    delivery.attempts += 1
    delivery.last_error = active_redactor(secrets=list(headers.values())).text(error)[:500]
    if not error:
        delivery.status, delivery.sent_at = TraceDelivery.Status.SENT, timezone.now()
    elif retry:
        delivery.next_attempt_at = timezone.now() + _backoff(delivery.attempts)
    else:
        delivery.status = TraceDelivery.Status.FAILED
    delivery.save(update_fields=["status", "attempts", "last_error", "next_attempt_at", "sent_at"])
    # The turn's row shows the delivery: its page re-renders it.
    Turn.objects.filter(pk=turn_id).update(updated_at=timezone.now())
    events.emit(events.TurnChanged(conversation_id=delivery.turn.conversation.public_id, turn_id=turn_id))
    return delivery


def trace_deliveries_due(*, now: datetime | None = None) -> list[int]:
    """The turns whose pending trace is due for an attempt, oldest first."""
    return list(
        TraceDelivery.objects.filter(
            status=TraceDelivery.Status.PENDING, next_attempt_at__lte=now or timezone.now()
        )
        .order_by("next_attempt_at", "pk")
        .values_list("turn_id", flat=True)
    )


def trace_deliveries_retry() -> list[int]:
    """Hand every due pending trace to a sender again; returns their turn ids."""
    if not trace_delivery_enabled():
        return []
    due = trace_deliveries_due()
    for turn_id in due:
        _dispatch(turn_id)
    return due


# --- the embedded mode's sender ---------------------------------------------------------------


class _Sender:
    """A daemon thread that sends the traces queued in this process and, every
    ``TRACE_DELIVERY_RETRY_FIRST_SECONDS``, the due pending ones (the collector came back)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.queue: queue.Queue[int] = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name="trace-delivery", daemon=True)
        self.thread.start()

    def put(self, turn_id: int) -> None:
        self.queue.put(turn_id)

    def _loop(self) -> None:
        while True:
            try:
                turn_ids = [self.queue.get(timeout=settings.TRACE_DELIVERY_RETRY_FIRST_SECONDS)]
            except queue.Empty:
                turn_ids = []
            if not trace_delivery_enabled():
                continue
            try:
                close_old_connections()
                for turn_id in turn_ids or trace_deliveries_due():
                    trace_deliver(turn_id=turn_id)
            except DatabaseError:
                logger.exception("trace delivery: the database failed; pending traces are tried again")
            finally:
                close_old_connections()


_sender_lock = threading.Lock()
_sender_instance: _Sender | None = None


def _sender() -> _Sender:
    """This process's sender, started on first use (again after a fork: threads do not survive one)."""
    global _sender_instance
    with _sender_lock:
        if _sender_instance is None or _sender_instance.pid != os.getpid():
            _sender_instance = _Sender()
        return _sender_instance
