"""Tamper evidence: a keyed chain over everything a conversation's page, API and export show.

Three chain versions, marked on each record (``Exchange.chain_version``) so records made under
an earlier one still verify:

- **Version 1 (legacy, unkeyed).** Each exchange's ``hash`` is SHA-256 over its content and the
  previous exchange's hash. Anyone with database access can recompute it; a conversation that
  only has such records verifies as "legacy".
- **Version 2 (keyed).** Each exchange's ``hash`` is an HMAC-SHA256 (``integrity_key()``) over its
  content and the previous hash, in conversation order (turn, then the exchange's seq).
- **Version 3 (keyed, bodies by their digest; new records).** As version 2, but the content
  holds each body's SHA-256 instead of the body: the MAC's input stays small whatever the body's
  size, and a body is hashed as its bytes rather than first written out as an escaped JSON string
  (a 1 MB streamed reply's 11 MB of raw events, or a long conversation's model requests). Any
  change to a body changes its SHA-256, so it still changes the MAC.

When a turn ends it is *sealed*: every step gets a digest over its shown fields (title, prompt,
text, parsed calls, diagnostics, arguments, result, error, …) and the hashes of its exchanges;
the turn's seal covers the turn's shown fields (question, answer, error, tools, transcript, …),
its steps' digests, its step-less exchanges' hashes, the conversation's id and the previous
turn's seal. The conversation is then *anchored*: it stores the number of sealed turns, the last
seal and a MAC over both, and an ``AuditEvent`` ("sealed") records the same, so deleting a whole
turn or the tail is detected.

Which fields a seal covers is itself a rule, marked on each turn (``Turn.seal_rule``): rule 2,
the field lists below (seals made before rule 3), or rule 3, the turn's and steps' fields in
the transcript document (``conversations.record.transcripts.fields``) but ``UNSEALED``. See
docs/record-integrity.md (Seal rules).

The key is not in the database (``integrity_key``). Verification recomputes everything and
names the first record that no longer matches: its turn, step and exchange.

An HMAC key cannot be given to someone who should only check: they could forge with it. So an
export is also *signed* (Ed25519, a signing key derived from the integrity key): it lists a
plain SHA-256 digest of every record and signs that list with the conversation's id. Anyone with
the file and the exporter's public key can check it (``manifest_verify``), naming the record.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings
from django.db import connection, transaction

from conversations.models import AuditEvent, Conversation, Exchange, Step, Turn
from conversations.record.store import Batch, record_store
from conversations.record.summaries import TurnSummary, summary_extended, turn_summary
from conversations.record.transcripts.fields import ID_KEYS, step_doc, turn_doc

logger = logging.getLogger(__name__)

GENESIS = "0" * 64
# The exchange chain's versions (``Exchange.chain_version``); new records use ``CHAIN_VERSION``.
LEGACY = 1
KEYED = 2
KEYED_BODY_DIGESTS = 3
CHAIN_VERSION = KEYED_BODY_DIGESTS
CHAIN_VERSIONS = frozenset({LEGACY, KEYED, KEYED_BODY_DIGESTS})
# The rules a turn's seal is made under (``Turn.seal_rule``): 2, over the turn and step fields
# listed in ``_turn_content_rule2`` and ``_step_content_rule2`` (seals made before rule 3);
# 3, over the transcript document's own fields (``sealed_content``); 4, as 3 and the server name
# recorded with each step and exchange (``server_name``, which the pages and exports show). New
# seals use ``SEAL_RULE``.
SEAL_RULE_FIELDS = 2
SEAL_RULE_DOCUMENT = 3
SEAL_RULE_SERVERS = 4
SEAL_RULE = SEAL_RULE_SERVERS
# The audit log's action for a sealed turn (its detail anchors the chain's length and head).
SEALED_ACTION = AuditEvent.Action.SEALED


# --- the key -------------------------------------------------------------------------------------


def integrity_key() -> bytes:
    """The HMAC key of the chain: never stored in the database.

    ``settings.INTEGRITY_KEY``: the ``INTEGRITY_KEY`` environment variable, or the file
    ``INTEGRITY_KEY_FILE`` names, else a random key generated on first start in
    ``VAR_DIR/integrity_key`` (atomically, mode 0600; concurrent first starts agree on one key).
    Every web and worker process of an installation must see the same key.

    Not ``SECRET_KEY``: rotating that (after a leak, as one should) would turn every record
    "broken", and it also seals the servers' secrets; this key only ever needs to be kept.

    Raises:
        ValueError: the key is empty.
    """
    value: str = settings.INTEGRITY_KEY
    if not value:
        raise ValueError(
            f"the integrity key is empty (INTEGRITY_KEY, or the file {settings.INTEGRITY_KEY_FILE})"
        )
    return value.encode()


def key_id() -> str:
    """A public name of the key (it reveals nothing about it): tells whether a file was sealed
    with this installation's key."""
    return _mac(integrity_key(), "tool-call-inspector key id")[:16]


def _mac(key: bytes, text: str) -> str:
    # The one-shot form (OpenSSL's HMAC in C): no hmac object built per digest.
    return hmac.digest(key, text.encode(), "sha256").hex()


def _signing_key() -> Ed25519PrivateKey:
    seed = hmac.new(integrity_key(), b"tool-call-inspector ed25519 signing key", hashlib.sha256).digest()
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_key() -> str:
    """This installation's export-signing public key (base64 of the 32 raw bytes): safe to publish."""
    raw = _signing_key().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def public_key_fingerprint(key: str) -> str:
    """A short name of a public key (SHA-256 of its raw bytes, 16 hex digits), to compare by eye."""
    try:
        raw = base64.b64decode(key, validate=True)
    except (binascii.Error, ValueError):
        return "not a key"
    return hashlib.sha256(raw).hexdigest()[:16]


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


# --- what each record's digest covers ------------------------------------------------------------


def _exchange_content(exchange: Exchange, turn_seq: int, *, body_digests: bool = False) -> dict[str, object]:
    """What an exchange's hash covers; with ``body_digests`` (chain version 3) each body as
    ``_body_digest`` of it instead of the body itself."""
    request_body: str = exchange.request_body
    response_body: str = exchange.response_body
    return {
        "turn": turn_seq,
        "seq": exchange.seq,
        "channel": exchange.channel,
        "direction": exchange.direction,
        "label": exchange.label,
        "jsonrpc_id": exchange.jsonrpc_id,
        "request_headers": exchange.request_headers,
        "request_body": _body_digest(request_body) if body_digests else request_body,
        "response_headers": exchange.response_headers,
        "response_body": _body_digest(response_body) if body_digests else response_body,
        "status": exchange.status,
        "error": exchange.error,
        "started_at": exchange.started_at.isoformat(),
        "duration_ms": exchange.duration_ms,
    }


def _body_digest(body: str) -> str:
    """A body as its content in chain version 3: "sha256:" and the SHA-256 of its UTF-8 bytes."""
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def exchange_digest(exchange: Exchange, *, turn_seq: int, previous: str, key: bytes | None = None) -> str:
    """The chain hash of one exchange given the hash before it, under its ``chain_version``.

    Raises:
        ValueError: a version this code does not know (verification reports it before asking).
    """
    version = exchange.chain_version
    if version == KEYED_BODY_DIGESTS:
        canonical = _canonical(_exchange_content(exchange, turn_seq, body_digests=True))
        # Its own label: a version 3 content can never be taken for a version 2 one.
        return _mac(key or integrity_key(), f"exchange/3\n{previous}\n{canonical}")
    canonical = _canonical(_exchange_content(exchange, turn_seq))
    if version == LEGACY:
        return hashlib.sha256(f"{previous}\n{canonical}".encode()).hexdigest()
    if version == KEYED:
        return _mac(key or integrity_key(), f"exchange\n{previous}\n{canonical}")
    raise ValueError(f"unknown chain version {version}")


def _turn_content_rule2(turn: Turn) -> dict[str, object]:
    return {
        "seq": turn.seq,
        "question": turn.question,
        "status": turn.status,
        "answer": turn.answer,
        "error": turn.error,
        "paradigm": turn.paradigm,
        "tool_choice": turn.tool_choice,
        "tool_choice_name": turn.tool_choice_name,
        "model": turn.model_name,
        "tools": turn.tools,
        "transcript": turn.transcript,
        "created_at": _iso(turn.created_at),
        "started_at": _iso(turn.started_at),
        "finished_at": _iso(turn.finished_at),
    }


def _step_content_rule2(step: Step, parent_seq: int | None) -> dict[str, object]:
    return {
        "seq": step.seq,
        "parent": parent_seq,
        "kind": step.kind,
        "status": step.status,
        "title": step.title,
        "prompt": step.prompt,
        "prompt_exact": step.prompt_exact,
        "prompt_source": step.prompt_source,
        "tokens": step.tokens,
        "usage": step.usage,
        "text": step.text,
        "calls": step.calls,
        "diagnostics": step.diagnostics,
        "tool_name": step.tool_name,
        "arguments": step.arguments,
        "result": step.result,
        "is_error": step.is_error,
        "error": step.error,
        "started_at": _iso(step.started_at),
        "finished_at": _iso(step.finished_at),
    }


# What of a turn's or a step's document the seal leaves out: the installation's ids and seals
# (``ID_KEYS``), the records below it (sealed on their own, by digest and hash), and ``server``,
# a link to a live server row whose name may change after the record was made.
UNSEALED: dict[str, frozenset[str]] = {
    # A paged API answer's steps_count and steps_next say where the rest is: not content.
    "turn": frozenset({*ID_KEYS["turn"], "steps", "exchanges", "steps_count", "steps_next"}),
    "step": frozenset({*ID_KEYS["step"], "exchanges", "server"}),
}


def sealed_content(kind: str, document: Mapping[str, object]) -> dict[str, object]:
    """Rule 3: the fields of a turn's or a step's transcript document that its seal covers."""
    return {key: value for key, value in document.items() if key not in UNSEALED[kind]}


def _turn_content(turn: Turn, rule: int) -> dict[str, object]:
    if rule == SEAL_RULE_FIELDS:
        return _turn_content_rule2(turn)
    return sealed_content("turn", turn_doc(turn, [], []))


def _step_content(step: Step, parent_seq: int | None, rule: int) -> dict[str, object]:
    if rule == SEAL_RULE_FIELDS:
        return _step_content_rule2(step, parent_seq)
    content = {**sealed_content("step", step_doc(step, [], server=False)), "parent": parent_seq}
    if rule >= SEAL_RULE_SERVERS:
        content["server"] = step.server_name
    return content


def _exchanges_sealed(exchanges: Sequence[tuple[int | None, str, str]], rule: int) -> list[object]:
    """What a seal holds of some exchanges: each one's hash; from rule 4 with the server name
    recorded with it (the hash does not cover it)."""
    if rule >= SEAL_RULE_SERVERS:
        return [[value, server] for _, value, server in exchanges]
    return [value for _, value, _ in exchanges]


# The prefix of each MAC'd text: rule 3's names its rule, so no seal reads under another rule.
SEAL_TAGS = {
    SEAL_RULE_FIELDS: ("step\n", "turn\n"),
    SEAL_RULE_DOCUMENT: ("step/3\n", "turn/3\n"),
    SEAL_RULE_SERVERS: ("step/4\n", "turn/4\n"),
}


@dataclass
class TurnRecords:
    """A turn's steps (seq order) and its exchanges' (step id, hash, server name) in chain order."""

    steps: list[Step]
    exchanges: Sequence[tuple[int | None, str, str]]


def _turn_records(turn: Turn) -> TurnRecords:
    return TurnRecords(
        list(Step.objects.filter(turn_id=turn.pk).order_by("seq", "id")),
        list(
            Exchange.objects.filter(turn_id=turn.pk)
            .order_by("seq", "id")
            .values_list("step_id", "hash", "server_name")
        ),
    )


def step_digests(
    key: bytes,
    identity: str,
    turn: Turn,
    records: TurnRecords,
    rule: int,
    parents: Mapping[int, int] | None = None,
) -> list[str]:
    """The digest of each of ``records.steps``; ``parents``: the seq of each step of the turn a
    step names as its parent (default: those among ``records.steps``)."""
    seqs = {step.pk: step.seq for step in records.steps} if parents is None else parents
    by_step: dict[int | None, list[tuple[int | None, str, str]]] = {}
    for exchange in records.exchanges:
        by_step.setdefault(exchange[0], []).append(exchange)
    digests = []
    for step in records.steps:
        hashes = _exchanges_sealed(by_step.get(step.pk, []), rule)
        content = {
            "conversation": identity,
            "turn": turn.seq,
            "step": _step_content(step, seqs.get(step.parent_id) if step.parent_id else None, rule),
            "exchanges": hashes,
        }
        digests.append(_mac(key, SEAL_TAGS[rule][0] + _canonical(content)))
    return digests


def turn_seal_mac(
    key: bytes,
    identity: str,
    turn: Turn,
    records: TurnRecords,
    digests: list[str],
    previous: str,
    rule: int,
) -> str:
    stepless = [row for row in records.exchanges if row[0] is None]
    head = records.exchanges[-1][1] if records.exchanges else ""
    return _seal_mac(key, identity, turn, digests, _Rest(stepless, head), previous, rule)


@dataclass(frozen=True)
class _Rest:
    """What a turn's seal holds of its exchanges beside its steps' digests: the step-less ones'
    (step id, hash, server name) and the hash of its last one ("" when none)."""

    stepless: Sequence[tuple[int | None, str, str]]
    head: str


def _seal_mac(
    key: bytes, identity: str, turn: Turn, digests: list[str], rest: _Rest, previous: str, rule: int
) -> str:
    return _mac(key, _seal_text(identity, turn, digests, rest, previous, rule))


def _seal_text(identity: str, turn: Turn, digests: list[str], rest: _Rest, previous: str, rule: int) -> str:
    """What a turn's seal is the MAC of."""
    content = {
        "conversation": identity,
        "previous": previous,
        "turn": _turn_content(turn, rule),
        "steps": digests,
        "exchanges": _exchanges_sealed(rest.stepless, rule),
        "head": rest.head,
    }
    return SEAL_TAGS[rule][1] + _canonical(content)


# A number PostgreSQL's ``jsonb`` gives back otherwise than Python wrote it: a float written with
# a positive exponent (1e+16 and up; it comes back an integer) or a negative zero (it comes back
# 0.0). Found as text, it may be in a string too: then the turn is read back all the same.
_NOT_RETURNED_AS_WRITTEN = re.compile(r"[0-9][eE]\+|-0\.0(?![0-9])")


def _as_stored(text: str) -> bool:
    """Whether a seal's text, made from a turn's fields as they were written, is also what they
    are once read back: every value but a JSON one comes back as written (texts, integers,
    datetimes to the microsecond, in UTC); a JSON one does but for the numbers above."""
    return _NOT_RETURNED_AS_WRITTEN.search(text) is None


def anchor_mac(key: bytes, identity: str, turns: int, head: str) -> str:
    return _mac(key, "anchor\n" + _canonical({"conversation": identity, "turns": turns, "head": head}))


@dataclass(frozen=True)
class _Neighbours:
    """What a turn's seal and its conversation's anchor need of the conversation's other turns."""

    # The seal of the turn before it ("" if that one is not sealed; None if there is none).
    previous: str | None
    # Its other sealed turns: how many, and the newest one's seq and seal.
    sealed: int
    newest_seq: int | None
    newest_seal: str | None

    def anchored(self, turn: Turn, seal: str) -> tuple[int, str]:
        """The anchor's count and head once ``turn`` carries ``seal``: every sealed turn, and
        the newest one's seal (a seal is never empty, so this turn counts)."""
        if self.newest_seq is None or turn.seq > self.newest_seq:
            return self.sealed + 1, seal
        return self.sealed + 1, str(self.newest_seal)


def _neighbours(turn: Turn) -> _Neighbours:
    """One read of the conversation's other turns, made after the turn's row is locked, not with
    it: a read that waits for a lock sees the locked row as it is now, but anything else it reads
    as it was when the read began."""
    table = connection.ops.quote_name(Turn._meta.db_table)
    others = f"FROM {table} WHERE conversation_id = %s AND seal <> '' AND id <> %s"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT seal FROM {table} WHERE conversation_id = %s AND seq < %s ORDER BY seq DESC LIMIT 1),"
            f" count(*), max(seq), (SELECT seal {others} ORDER BY seq DESC LIMIT 1) {others}",
            [turn.conversation_id, turn.seq, turn.conversation_id, turn.pk, turn.conversation_id, turn.pk],
        )
        row = cursor.fetchone()
    previous, sealed, newest_seq, newest_seal = row
    return _Neighbours(previous, int(sealed), newest_seq, newest_seal)


# --- sealing -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grown:
    """What one write added to a turn that grows by writes, each sealed (a proxy session's turn):
    the turn's seal covered its steps 1 to ``sealed``, and ``changed`` are the ids of the steps
    written since (new ones, seq ``sealed`` + 1 on, and earlier ones given new links: a changed
    earlier step keeps the kind, usage, server and tool its summary counted)."""

    sealed: int
    changed: Sequence[int]


@dataclass(frozen=True)
class _Parts:
    """What a seal is made of besides the turn's own row: its steps' digests, its exchanges'
    ``_Rest`` and what the conversation list shows of it."""

    digests: list[str]
    rest: _Rest
    summary: TurnSummary


def _whole_parts(key: bytes, identity: str, turn: Turn) -> _Parts:
    """The turn's every step and exchange read back."""
    records = _turn_records(turn)
    digests = step_digests(key, identity, turn, records, SEAL_RULE)
    stepless = [row for row in records.exchanges if row[0] is None]
    head = records.exchanges[-1][1] if records.exchanges else ""
    return _Parts(digests, _Rest(stepless, head), turn_summary(records.steps))


def _grown_parts(key: bytes, identity: str, turn: Turn, grown: Grown) -> _Parts | None:
    """The seal's parts from the turn's previous seal and the steps ``grown`` names, read back
    with their exchanges (a bounded read, whatever the turn's size); None when the previous seal
    is not one this can extend (another rule, or not over steps 1 to ``grown.sealed``): then
    the whole turn is read back. A step changed behind the writes' back keeps the digest its
    seal gave it, so verification still finds it: a write never seals over it."""
    before = turn.seal_steps
    if not isinstance(before, list) or len(before) != grown.sealed:
        return None
    tools = turn.tools_called
    if grown.sealed and (not turn.seal or turn.seal_rule != SEAL_RULE or not isinstance(tools, list)):
        return None
    steps = list(Step.objects.filter(turn_id=turn.pk, pk__in=grown.changed).order_by("seq", "id"))
    added = [step for step in steps if step.seq > grown.sealed]
    if [step.seq for step in added] != list(range(grown.sealed + 1, grown.sealed + len(added) + 1)):
        return None
    if any(step.seq < 1 for step in steps):
        return None
    previous = TurnSummary(turn.usage_total, tools) if grown.sealed and isinstance(tools, list) else None
    summary = summary_extended(previous, added)
    if summary is None:
        return None
    ids = [step.pk for step in steps]
    parents = {step.parent_id for step in steps if step.parent_id} - set(ids)
    seqs = {step.pk: step.seq for step in steps}
    seqs.update(Step.objects.filter(turn_id=turn.pk, pk__in=parents).values_list("pk", "seq"))
    rows = Exchange.objects.filter(turn_id=turn.pk).order_by("seq", "id")
    records = TurnRecords(
        steps, list(rows.filter(step_id__in=ids).values_list("step_id", "hash", "server_name"))
    )
    digests = list(before)
    for step, digest in zip(steps, step_digests(key, identity, turn, records, SEAL_RULE, seqs), strict=True):
        if step.seq <= grown.sealed:
            digests[step.seq - 1] = digest
        else:
            digests.append(digest)
    stepless = list(rows.filter(step__isnull=True).values_list("step_id", "hash", "server_name"))
    head = rows.reverse().values_list("hash", flat=True).first() or ""
    return _Parts(digests, _Rest(stepless, head), summary)


def turn_seal(
    *, turn: Turn, actor_name: str = "system", grown: Grown | None = None, written: bool = False
) -> str:
    """Seal an ended turn and anchor its conversation on it; returns the seal.

    Call it when the turn's final fields are saved and every step and exchange of it is
    committed (it reads them back: what is sealed is exactly what is stored). The seal, the
    conversation's anchor and an ``AuditEvent`` ("sealed") are written in one transaction; the
    seal is also logged, which puts the head outside the database too.

    ``grown``: the turn was sealed before this write and grew by it (``Grown``): only what the
    write added is read back, the rest of the seal is the previous seal's. The seal is the same
    as from the whole turn read back (verification reads it all).

    ``written`` (without ``grown``): the caller has just written every field of the turn the
    seal covers from ``turn`` itself, in its transaction (which holds the row's lock since):
    its row is not read back, unless a JSON value of it may come back otherwise than written
    (``_as_stored``). The seal is the same as from the row read back.
    """
    key = integrity_key()
    conversation = turn.conversation
    identity = str(conversation.public_id)
    # Inside the caller's transaction when there is one (``recording.turn_end_save``): no savepoint,
    # a failure here fails the whole end.
    with transaction.atomic(savepoint=False):
        as_written = written and grown is None
        fresh = turn if as_written else Turn.objects.select_for_update().get(pk=turn.pk)
        parts = _grown_parts(key, identity, fresh, grown) if grown is not None else None
        parts = parts or _whole_parts(key, identity, fresh)
        digests, summary = parts.digests, parts.summary
        neighbours = _neighbours(fresh)
        previous = neighbours.previous or GENESIS
        text = _seal_text(identity, fresh, digests, parts.rest, previous, SEAL_RULE)
        if as_written and not _as_stored(text):
            fresh = Turn.objects.select_for_update().get(pk=turn.pk)
            text = _seal_text(identity, fresh, digests, parts.rest, previous, SEAL_RULE)
        seal = _mac(key, text)
        count, head = neighbours.anchored(fresh, seal)
        anchor = anchor_mac(key, identity, count, head)
        # The seal, the anchor and the audit event in one write (one transaction: the record store),
        # with what the conversation list shows of the turn (``conversations.record.summaries``).
        seal_write = Batch()
        seal_write.update(
            Turn,
            fresh.pk,
            {
                "seal": seal,
                "seal_steps": digests,
                "seal_rule": SEAL_RULE,
                "usage_total": summary.usage_total,
                "tools_called": summary.tools_called,
            },
        )
        seal_write.update(
            Conversation, conversation.pk, {"chain_turns": count, "chain_head": head, "chain_anchor": anchor}
        )
        seal_write.insert(
            [
                AuditEvent(
                    actor_name=actor_name,
                    action=SEALED_ACTION,
                    conversation_public_id=conversation.public_id,
                    detail={"turn": fresh.seq, "seal": seal, "turns": count, "head": head},
                )
            ]
        )
        record_store().write(seal_write)
        turn.seal, turn.seal_steps, turn.seal_rule = seal, digests, SEAL_RULE
        turn.usage_total, turn.tools_called = summary
        conversation.chain_turns, conversation.chain_head, conversation.chain_anchor = count, head, anchor
    logger.info("sealed turn %s of conversation %s: %s turns, head %s", fresh.seq, identity, count, head)
    return seal


def conversation_rechain(*, conversation: Conversation, actor_name: str) -> None:
    """Re-chain and re-seal every record of ``conversation`` under this installation's key
    (an import: what the file held becomes this installation's evidence from now on)."""
    key = integrity_key()
    previous = GENESIS
    for turn in conversation.turns.order_by("seq"):
        rows = list(Exchange.objects.filter(turn=turn).order_by("seq", "id"))
        for row in rows:
            row.chain_version = CHAIN_VERSION
            row.prev_hash = previous
            row.hash = previous = exchange_digest(row, turn_seq=turn.seq, previous=previous, key=key)
        Exchange.objects.bulk_update(rows, ["chain_version", "prev_hash", "hash"], batch_size=500)
        turn.conversation = conversation
        if turn.is_finished:
            turn_seal(turn=turn, actor_name=actor_name)


# --- signed manifests (exports) -------------------------------------------------------------------

ManifestEntry = list[Any]  # [kind, turn seq, step seq | None, exchange seq | None, sha256]


def _sha(value: object) -> str:
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


def record_manifest(*, conversation: Conversation, rule: int) -> list[ManifestEntry]:
    """A plain SHA-256 digest of every record the export shows, in conversation order: each
    turn's own fields, then its steps', then its exchanges' (with the step they belong to), the
    fields as seal ``rule`` covers them (from rule 4 an exchange's with its server name)."""
    entries: list[ManifestEntry] = []
    steps_by_turn: dict[int, list[Step]] = {}
    for step in Step.objects.filter(turn__conversation=conversation).order_by("seq", "id"):
        steps_by_turn.setdefault(step.turn_id, []).append(step)
    exchanges_by_turn: dict[int, list[Exchange]] = {}
    rows = Exchange.objects.filter(turn__conversation=conversation).order_by("seq", "id")
    for exchange in rows.iterator(chunk_size=500):
        exchanges_by_turn.setdefault(exchange.turn_id or 0, []).append(exchange)
    for turn in conversation.turns.order_by("seq"):
        entries.append(["turn", turn.seq, None, None, _sha(_turn_content(turn, rule))])
        steps = steps_by_turn.get(turn.pk, [])
        seqs = {step.pk: step.seq for step in steps}
        for step in steps:
            parent = seqs.get(step.parent_id) if step.parent_id else None
            entries.append(["step", turn.seq, step.seq, None, _sha(_step_content(step, parent, rule))])
        for exchange in exchanges_by_turn.get(turn.pk, []):
            step_seq = seqs.get(exchange.step_id) if exchange.step_id else None
            content = _exchange_content(exchange, turn.seq)
            if rule >= SEAL_RULE_SERVERS:
                content["server"] = exchange.server_name
            entries.append(["exchange", turn.seq, step_seq, exchange.seq, _sha(content)])
    return entries


def signed_text(identity: str, records: list[ManifestEntry]) -> bytes:
    return (
        "tool-call-inspector manifest\n" + _canonical({"conversation": identity, "records": records})
    ).encode()


def manifest_sign(*, conversation: Conversation) -> dict[str, Any]:
    """The export's signature block: algorithm, public key, the record list and its signature."""
    rule = SEAL_RULE
    records = record_manifest(conversation=conversation, rule=rule)
    signature = _signing_key().sign(signed_text(str(conversation.public_id), records))
    return {
        "algorithm": "ed25519",
        # The seal rule the records' digests follow (a block without it: rule 3).
        "rule": rule,
        "public_key": public_key(),
        "records": records,
        "signature": base64.b64encode(signature).decode(),
    }
