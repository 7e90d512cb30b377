"""Captured records as ``Exchange`` rows: redacted, made storable, cut to size.

``exchange_rows`` makes the rows (the recorder links a turn's into the hash chain and writes them
with its steps); ``server_records_store`` stores at once the messages of a server that belong to
no call (a late reply, a log notification), for the runner's tool host and the workbench.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import cast

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

from conversations.escaping import refused_character, storable_text
from conversations.loop.wire import WireExchange, safe_headers
from conversations.models import FTS_BODY_CHARS, SEARCH_SPAN_MOST, Exchange
from conversations.record.store import Batch, model_row, record_store
from conversations.redaction import Redactor
from conversations.secret_sources import active_redactor
from conversations.strings import changed_span
from conversations.typealias import JSONDict

# A cut made before the recorder saw the text (the MCP capture cuts at the same limit): its marker
# names the true total, which a second cut must keep.
_EARLIER_CUT = re.compile(r"\n… \[cut(?: by the inspector)?: (\d+) characters in all\]\Z")


def storable_body(text: str) -> tuple[str, str | None]:
    """Text fit for every database, and what was escaped to make it so (None: nothing).

    Characters a database refuses (NUL, lone surrogates) make the whole text its JSON string
    literal (``conversations.escaping``); a text past the configured limit is cut, and the cut
    marker names how long it really was, also when it had been cut before.
    """
    total = len(text)
    earlier = _EARLIER_CUT.search(text, max(0, len(text) - 80))
    if earlier is not None:
        total = int(earlier.group(1))
    stored, problem = storable_text(text)
    limit = settings.EXCHANGE_BODY_LIMIT
    if len(stored) <= limit:
        return stored, problem
    if earlier is not None and problem is None:
        stored = stored[: earlier.start()]
    return stored[:limit] + f"\n… [cut by the inspector: {total} characters in all]", problem


def request_search_span(
    previous: str, current: str, *, most: int = SEARCH_SPAN_MOST
) -> tuple[int, int] | None:
    """What full-text search indexes of a model request that follows ``previous`` in its turn,
    as ``(search_start, search_length)``: the part it adds (``strings.changed_span``). None: the
    request is indexed from its start, as a turn's first one is: it shares nothing with
    ``previous``, or its span starts or runs past what the columns hold (``most``, the
    ``SEARCH_SPAN_MOST`` of ``models``; the request itself is stored whole all the same)."""
    start, length = changed_span(previous, current)
    if length == len(current) or start > most or length > most:
        return None
    return start, length


def _storable_line(text: str, limit: int) -> str:
    """A short text (a label, an id) fit for every database and its column."""
    return storable_text(text)[0][:limit]


def _searchable(text: str | None, redact: Redactor) -> str:
    """``WireExchange.search_text`` as stored: redacted whole (a cut could split a secret the
    redactor would then miss), made storable, then cut to what the search index reads; empty
    (the body is searched) when there is none."""
    if not text:
        return ""
    return storable_body(redact.text(text))[0][:FTS_BODY_CHARS]


def _storable_headers(values: dict[str, str], redact: Redactor) -> dict[str, str]:
    """Headers as stored: a new mapping, each value redacted (names kept), each name and value
    storable. The mapping is redacted as one JSON value (screened whole, each value redacted
    only when a screen passes: ``Redactor.json``) and searched for a character no database
    stores in one pass over its names and values joined; only when it holds one is each name
    and value made storable on its own (the same result: ``test_exchange_headers``)."""
    if not values:
        return {}
    redacted = cast("dict[str, str]", redact.json(cast("JSONDict", values)))
    if refused_character("".join([*redacted, *redacted.values()])) is None:
        return dict(redacted)
    return {storable_text(name)[0]: storable_text(value)[0] for name, value in redacted.items()}


def exchange_rows(
    records: Sequence[WireExchange],
    *,
    turn_id: int | None,
    step_id: int | None,
    redact: Redactor,
    first_seq: int = 0,
    conversation_id: int | None = None,
    proxied: bool = False,
) -> list[Exchange]:
    """Unsaved ``Exchange`` rows for captured records, in order, redacted.

    ``conversation_id`` is the turn's conversation (``Exchange.conversation``), when there is a turn.
    ``proxied``: records a recording proxy passed on, which may carry the host's credentials:
    every credential-named header value is masked (``wire.safe_headers``) and the label is
    redacted too.
    """
    if turn_id is not None and conversation_id is None:
        raise ValueError("an exchange of a turn needs the turn's conversation_id")

    rows: list[Exchange] = []
    for offset, record in enumerate(records):
        request_body, request_problem = storable_body(redact.text(record.request_body))
        response_body, response_problem = storable_body(redact.text(record.response_body))
        error, _ = storable_body(redact.text(record.error))
        label = redact.text(record.label) if proxied else record.label
        request_headers = safe_headers(record.request_headers) if proxied else record.request_headers
        response_headers = safe_headers(record.response_headers) if proxied else record.response_headers
        escaped = [
            f"the inspector escaped the {what} body: {problem}"
            for what, problem in (("request", request_problem), ("response", response_problem))
            if problem
        ]
        rows.append(
            model_row(
                Exchange,
                {
                    "turn_id": turn_id,
                    "conversation_id": conversation_id,
                    "step_id": step_id,
                    "server_id": record.server_id,
                    "server_name": _storable_line(record.server_name, 40),
                    "seq": first_seq + offset,
                    "channel": record.channel,
                    "direction": record.direction,
                    "label": _storable_line(label, 200),
                    "jsonrpc_id": _storable_line(record.jsonrpc_id, 64),
                    "request_headers": _storable_headers(request_headers, redact),
                    "request_body": request_body,
                    "response_headers": _storable_headers(response_headers, redact),
                    "response_body": response_body,
                    "response_search": _searchable(record.search_text, redact),
                    "status": _storable_line(record.status, 32),
                    "error": "\n".join([error, *escaped]).strip("\n") if escaped else error,
                    "started_at": record.started_at,
                    "duration_ms": record.duration_ms,
                },
            )
        )
    return rows


def server_records_store(records: Sequence[WireExchange], *, redact: Redactor | None = None) -> None:
    """Messages that belong to a server but to no call (late replies, log notifications)."""
    if records:
        batch = Batch()
        batch.insert(exchange_rows(records, turn_id=None, step_id=None, redact=redact or active_redactor()))
        record_store().write(batch)
        release_connection()


def release_connection(*, always: bool = False) -> None:
    """Hand a pooled connection back between writes: a turn waiting on a model must not hold one.

    ``always`` (the writer, after each write): a connection that is not pooled is closed too if
    the write left it unusable, so the next write opens a fresh one.
    """
    # The thread's connection looked up once (each ``connection.x`` is a thread-local lookup): the
    # loop calls this after every step it hands over, mostly holding no connection at all.
    db = connections[DEFAULT_DB_ALIAS]
    if db.connection is None or db.in_atomic_block:
        return
    if db.settings_dict["OPTIONS"].get("pool"):
        db.close()
    elif always:
        db.close_if_unusable_or_obsolete()
