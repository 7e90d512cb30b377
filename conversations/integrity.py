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
the transcript document (``conversations.transcripts.fields``) but ``UNSEALED``. See
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.conf import settings
from django.db import connection, transaction
from django.db.models import QuerySet

from conversations.models import AuditEvent, Conversation, Exchange, Step, Turn
from conversations.record_writer import rows_write
from conversations.summaries import summary_matches, turn_summary
from conversations.transcripts.fields import ID_KEYS, step_doc, turn_doc

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
# 3, over the transcript document's own fields (``sealed_content``). New seals use ``SEAL_RULE``.
SEAL_RULE_FIELDS = 2
SEAL_RULE_DOCUMENT = 3
SEAL_RULE = SEAL_RULE_DOCUMENT
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
    "turn": frozenset({*ID_KEYS["turn"], "steps", "exchanges"}),
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
    return {**sealed_content("step", step_doc(step, [], server=False)), "parent": parent_seq}


# The prefix of each MAC'd text: rule 3's names its rule, so no seal reads under another rule.
_SEAL_TAGS = {SEAL_RULE_FIELDS: ("step\n", "turn\n"), SEAL_RULE_DOCUMENT: ("step/3\n", "turn/3\n")}


@dataclass
class _TurnRecords:
    """A turn's steps (seq order) and its exchanges' (step id, hash) pairs in chain order."""

    steps: list[Step]
    exchanges: Sequence[tuple[int | None, str]]


def _turn_records(turn: Turn) -> _TurnRecords:
    return _TurnRecords(
        list(Step.objects.filter(turn_id=turn.pk).order_by("seq", "id")),
        list(Exchange.objects.filter(turn_id=turn.pk).order_by("seq", "id").values_list("step_id", "hash")),
    )


def _step_digests(key: bytes, identity: str, turn: Turn, records: _TurnRecords, rule: int) -> list[str]:
    seqs = {step.pk: step.seq for step in records.steps}
    by_step: dict[int | None, list[str]] = {}
    for step_id, value in records.exchanges:
        by_step.setdefault(step_id, []).append(value)
    digests = []
    for step in records.steps:
        hashes = by_step.get(step.pk, [])
        content = {
            "conversation": identity,
            "turn": turn.seq,
            "step": _step_content(step, seqs.get(step.parent_id) if step.parent_id else None, rule),
            "exchanges": hashes,
        }
        digests.append(_mac(key, _SEAL_TAGS[rule][0] + _canonical(content)))
    return digests


def _turn_seal(
    key: bytes,
    identity: str,
    turn: Turn,
    records: _TurnRecords,
    step_digests: list[str],
    previous: str,
    rule: int,
) -> str:
    content = {
        "conversation": identity,
        "previous": previous,
        "turn": _turn_content(turn, rule),
        "steps": step_digests,
        "exchanges": [value for step_id, value in records.exchanges if step_id is None],
        "head": records.exchanges[-1][1] if records.exchanges else "",
    }
    return _mac(key, _SEAL_TAGS[rule][1] + _canonical(content))


def _anchor(key: bytes, identity: str, turns: int, head: str) -> str:
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


def turn_seal(*, turn: Turn, actor_name: str = "system") -> str:
    """Seal an ended turn and anchor its conversation on it; returns the seal.

    Call it when the turn's final fields are saved and every step and exchange of it is
    committed (it reads them back: what is sealed is exactly what is stored). The seal, the
    conversation's anchor and an ``AuditEvent`` ("sealed") are written in one transaction; the
    seal is also logged, which puts the head outside the database too.
    """
    key = integrity_key()
    conversation = turn.conversation
    identity = str(conversation.public_id)
    # Inside the caller's transaction when there is one (``recording.turn_end_save``): no savepoint,
    # a failure here fails the whole end.
    with transaction.atomic(savepoint=False):
        fresh = Turn.objects.select_for_update().get(pk=turn.pk)
        records = _turn_records(fresh)
        digests = _step_digests(key, identity, fresh, records, SEAL_RULE)
        neighbours = _neighbours(fresh)
        seal = _turn_seal(key, identity, fresh, records, digests, neighbours.previous or GENESIS, SEAL_RULE)
        count, head = neighbours.anchored(fresh, seal)
        anchor = _anchor(key, identity, count, head)
        summary = turn_summary(records.steps)
        # The seal, the anchor and the audit event in one write (one statement on PostgreSQL),
        # with what the conversation list shows of the turn (``conversations.summaries``).
        rows_write(
            turn_values={
                fresh.pk: {
                    "seal": seal,
                    "seal_steps": digests,
                    "seal_rule": SEAL_RULE,
                    "usage_total": summary.usage_total,
                    "tools_called": summary.tools_called,
                }
            },
            step_updates={},
            steps=[],
            unsaved_steps=[],
            exchanges=[],
            conversation_values={
                conversation.pk: {"chain_turns": count, "chain_head": head, "chain_anchor": anchor}
            },
            events=[
                AuditEvent(
                    actor_name=actor_name,
                    action=SEALED_ACTION,
                    conversation_public_id=conversation.public_id,
                    detail={"turn": fresh.seq, "seal": seal, "turns": count, "head": head},
                )
            ],
        )
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


def chain_head_query(conversation_id: int) -> QuerySet[Exchange, str]:
    """The hash of the conversation's latest exchange, as a query (at most one value): usable
    as a subquery, so a turn's recorder reads it with its other starting points at once."""
    return (
        Exchange.objects.filter(turn__conversation_id=conversation_id)
        .order_by("-turn__seq", "-seq", "-id")
        .values_list("hash", flat=True)[:1]
    )


# --- signed manifests (exports) -------------------------------------------------------------------

ManifestEntry = list[Any]  # [kind, turn seq, step seq | None, exchange seq | None, sha256]


def _sha(value: object) -> str:
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


def record_manifest(*, conversation: Conversation) -> list[ManifestEntry]:
    """A plain SHA-256 digest of every record the export shows, in conversation order: each
    turn's own fields, then its steps', then its exchanges' (with the step they belong to)."""
    entries: list[ManifestEntry] = []
    steps_by_turn: dict[int, list[Step]] = {}
    for step in Step.objects.filter(turn__conversation=conversation).order_by("seq", "id"):
        steps_by_turn.setdefault(step.turn_id, []).append(step)
    exchanges_by_turn: dict[int, list[Exchange]] = {}
    rows = Exchange.objects.filter(turn__conversation=conversation).order_by("seq", "id")
    for exchange in rows.iterator(chunk_size=500):
        exchanges_by_turn.setdefault(exchange.turn_id or 0, []).append(exchange)
    for turn in conversation.turns.order_by("seq"):
        entries.append(["turn", turn.seq, None, None, _sha(_turn_content(turn, SEAL_RULE))])
        steps = steps_by_turn.get(turn.pk, [])
        seqs = {step.pk: step.seq for step in steps}
        for step in steps:
            parent = seqs.get(step.parent_id) if step.parent_id else None
            entries.append(["step", turn.seq, step.seq, None, _sha(_step_content(step, parent, SEAL_RULE))])
        for exchange in exchanges_by_turn.get(turn.pk, []):
            step_seq = seqs.get(exchange.step_id) if exchange.step_id else None
            entries.append(
                ["exchange", turn.seq, step_seq, exchange.seq, _sha(_exchange_content(exchange, turn.seq))]
            )
    return entries


def _signed_text(identity: str, records: list[ManifestEntry]) -> bytes:
    return (
        "tool-call-inspector manifest\n" + _canonical({"conversation": identity, "records": records})
    ).encode()


def manifest_sign(*, conversation: Conversation) -> dict[str, Any]:
    """The export's signature block: algorithm, public key, the record list and its signature."""
    records = record_manifest(conversation=conversation)
    signature = _signing_key().sign(_signed_text(str(conversation.public_id), records))
    return {
        "algorithm": "ed25519",
        "public_key": public_key(),
        "records": records,
        "signature": base64.b64encode(signature).decode(),
    }


def manifest_verify(*, conversation: Conversation, identity: str, signed: dict[str, Any]) -> ChainReport:
    """Check an imported file's signature block against the rows made from it.

    The signature must be by ``signed["public_key"]`` over ``identity`` and the listed records,
    and every row must match its listed digest; the first one that does not is named. Whether
    the public key is the exporter's is for the reader to compare (``public_key_fingerprint``).
    """
    records = signed.get("records")
    try:
        if signed.get("algorithm") != "ed25519" or not isinstance(records, list):
            raise ValueError("not an ed25519 signature block")
        key = Ed25519PublicKey.from_public_bytes(
            base64.b64decode(str(signed.get("public_key")), validate=True)
        )
        key.verify(
            base64.b64decode(str(signed.get("signature")), validate=True), _signed_text(identity, records)
        )
    except (InvalidSignature, ValueError, binascii.Error):
        return ChainReport(False, 0, reason="its signature does not match the records it lists")
    actual = record_manifest(conversation=conversation)
    for position, entry in enumerate(actual):
        listed = records[position] if position < len(records) else None
        if listed != entry:
            kind, turn_seq, step_seq, exchange_seq, _ = entry
            return ChainReport(
                False,
                position,
                reason=f"the {kind} does not match what was signed",
                turn_seq=turn_seq,
                step_seq=step_seq,
                exchange_seq=exchange_seq,
            )
    if len(records) > len(actual):
        return ChainReport(
            False, len(actual), reason=f"{len(records) - len(actual)} signed record(s) are missing"
        )
    return ChainReport(True, len(actual))


# --- verifying -----------------------------------------------------------------------------------


@dataclass
class ChainReport:
    """The outcome of ``conversation_verify``.

    ``legacy``: every record is under the unkeyed rule (made before keyed sealing), which anyone
    with database access can recompute. A broken report names the first record that no longer
    matches: its turn (seq and id), step (seq and id) and exchange (seq and id), as far as known.
    """

    intact: bool
    checked: int
    broken_exchange_id: int | None = None
    reason: str = ""
    legacy: bool = False
    sealed_turns: int = 0
    turn_seq: int | None = None
    turn_id: int | None = None
    step_seq: int | None = None
    step_id: int | None = None
    exchange_seq: int | None = None
    exchange_label: str = ""
    # The step's row on the page (a tool call's row is its parent's: ``tool-step-<id>`` inside it).
    step_anchor: str = ""

    @property
    def where(self) -> str:
        """The broken record in words: "turn 2, step 3, exchange 7 (tools/call)"."""
        parts = []
        if self.turn_seq is not None:
            parts.append(f"turn {self.turn_seq}")
        if self.step_seq is not None:
            parts.append(f"step {self.step_seq}")
        if self.exchange_seq is not None:
            label = f" ({self.exchange_label})" if self.exchange_label else ""
            parts.append(f"exchange {self.exchange_seq}{label}")
        return ", ".join(parts) or "the conversation's anchor"

    @property
    def anchor(self) -> str:
        """The page anchor of the broken record (its row, else its turn)."""
        if self.broken_exchange_id is not None:
            return f"exchange-{self.broken_exchange_id}"
        if self.step_anchor:
            return self.step_anchor
        if self.turn_id is not None:
            return f"turn-{self.turn_id}"
        return "turns"


class _Broken(Exception):
    def __init__(self, reason: str, **where: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.where = where


def _step_anchor(step: Step) -> str:
    return f"tool-step-{step.pk}" if step.parent_id else f"step-{step.pk}"


def _exchange_where(exchange: Exchange, turn: Turn, steps: dict[int, Step]) -> dict[str, Any]:
    step = steps.get(exchange.step_id) if exchange.step_id is not None else None
    return {
        "turn_seq": turn.seq,
        "turn_id": turn.pk,
        "step_seq": step.seq if step is not None else None,
        "step_id": step.pk if step is not None else None,
        "step_anchor": _step_anchor(step) if step is not None else "",
        "exchange_seq": exchange.seq,
        "exchange_label": exchange.label,
        "broken_exchange_id": exchange.pk,
    }


def conversation_verify(
    *, conversation: Conversation, identity: str | None = None, anchor: tuple[int, str, str] | None = None
) -> ChainReport:
    """Recompute the chain, the seals and the anchors; report the first record that no longer
    matches. Reads every exchange once (in chunks) and each turn's steps.

    ``identity`` and ``anchor`` (sealed turns, head, anchor MAC) replace the conversation's own
    public id and anchor fields: an import checks the rows it made against what the file says
    (the audit log is then not consulted).
    """
    try:
        key = integrity_key()
    except (OSError, ValueError) as exc:
        return ChainReport(False, 0, reason=f"the integrity key cannot be read: {exc}")
    state = _Walk(key=key, identity=identity or str(conversation.public_id))
    try:
        state.walk(conversation)
        if identity is None:
            # As stored now: a turn sealed since ``conversation`` was read moved the anchor.
            stored = Conversation.objects.values_list("chain_turns", "chain_head", "chain_anchor").get(
                pk=conversation.pk
            )
            state.check_anchor(*stored)
            state.check_audit(conversation)
        else:
            state.check_anchor(*(anchor or (0, "", "")))
    except _Broken as broken:
        return ChainReport(
            False, state.checked, reason=broken.reason, sealed_turns=state.sealed, **broken.where
        )
    legacy = state.keyed_seen is False and state.sealed == 0
    return ChainReport(True, state.checked, legacy=legacy, sealed_turns=state.sealed)


@dataclass
class _Walk:
    key: bytes
    identity: str
    checked: int = 0
    sealed: int = 0
    keyed_seen: bool = False
    previous: str = GENESIS
    previous_seal: str = GENESIS
    last_turn: Turn | None = None

    def walk(self, conversation: Conversation) -> None:
        turns = list(conversation.turns.order_by("seq"))
        exchanges = Exchange.objects.filter(turn__conversation=conversation).order_by(
            "turn__seq", "seq", "id"
        )
        by_turn: dict[int, list[Exchange]] = {}
        steps_by_turn: dict[int, dict[int, Step]] = {}
        for step in Step.objects.filter(turn__conversation=conversation).order_by("seq", "id"):
            steps_by_turn.setdefault(step.turn_id, {})[step.pk] = step
        for exchange in exchanges.iterator(chunk_size=500):
            by_turn.setdefault(exchange.turn_id or 0, []).append(exchange)
        for turn in turns:
            steps = steps_by_turn.get(turn.pk, {})
            rows = by_turn.get(turn.pk, [])
            for exchange in rows:
                self._exchange(exchange, turn, steps)
            self._turn(turn, steps, rows)
            self.last_turn = turn

    def _exchange(self, exchange: Exchange, turn: Turn, steps: dict[int, Step]) -> None:
        self.checked += 1
        where = _exchange_where(exchange, turn, steps)
        if exchange.chain_version == LEGACY and self.keyed_seen:
            raise _Broken("it claims the unkeyed legacy rule after keyed records", **where)
        if exchange.chain_version not in CHAIN_VERSIONS:
            raise _Broken(f"it claims an unknown chain version {exchange.chain_version}", **where)
        if exchange.prev_hash != self.previous:
            raise _Broken(
                "its link to the previous record does not match (a record before it was removed or changed)",
                **where,
            )
        if not hmac.compare_digest(
            exchange.hash, exchange_digest(exchange, turn_seq=turn.seq, previous=self.previous, key=self.key)
        ):
            raise _Broken("its content does not match its hash", **where)
        self.keyed_seen = self.keyed_seen or exchange.chain_version != LEGACY
        self.previous = exchange.hash

    def _turn(self, turn: Turn, steps: dict[int, Step], rows: list[Exchange]) -> None:
        where: dict[str, Any] = {"turn_seq": turn.seq, "turn_id": turn.pk}
        if not turn.seal:
            if turn.is_finished and (self.keyed_seen or self.sealed):
                raise _Broken("the turn has ended but carries no seal (it was removed)", **where)
            return
        self.keyed_seen = True
        rule = turn.seal_rule
        if rule not in _SEAL_TAGS:
            raise _Broken(f"it claims an unknown seal rule {rule}", **where)
        records = _TurnRecords(
            sorted(steps.values(), key=lambda step: (step.seq, step.pk)),
            [(row.step_id, row.hash) for row in rows],
        )
        digests = _step_digests(self.key, self.identity, turn, records, rule)
        sealed = turn.seal_steps if isinstance(turn.seal_steps, list) else []
        for position, step in enumerate(records.steps):
            if position >= len(sealed) or not hmac.compare_digest(str(sealed[position]), digests[position]):
                raise _Broken(
                    "the step does not match its seal (its title, texts, parsed calls, diagnostics, "
                    "arguments, result or exchanges changed, or a step was added)",
                    step_seq=step.seq,
                    step_id=step.pk,
                    step_anchor=_step_anchor(step),
                    **where,
                )
        if len(sealed) > len(digests):
            raise _Broken(f"{len(sealed) - len(digests)} sealed step(s) of this turn are missing", **where)
        expected = _turn_seal(self.key, self.identity, turn, records, digests, self.previous_seal, rule)
        if not hmac.compare_digest(turn.seal, expected):
            raise _Broken(
                "the turn does not match its seal (its question, answer, error, tools or transcript "
                "changed, its exchanges changed, or a turn before it was removed)",
                **where,
            )
        # What the conversation list shows of the turn is not sealed itself: it is made from the
        # sealed steps, so it must be what they give (``summaries``; a turn without one is read
        # from its steps).
        if turn.tools_called is not None and not summary_matches(
            turn.usage_total, turn.tools_called, records.steps
        ):
            raise _Broken(
                "the turn's summary in the conversation list (its tokens or the tools it called) "
                "does not match its sealed steps",
                **where,
            )
        self.sealed += 1
        self.previous_seal = turn.seal

    def _last(self) -> dict[str, Any]:
        if self.last_turn is None:
            return {}
        return {"turn_seq": self.last_turn.seq, "turn_id": self.last_turn.pk}

    def check_anchor(self, anchored: int, head: str, mac: str) -> None:
        where = self._last()
        found = self.previous_seal if self.sealed else GENESIS
        if anchored == 0 and not mac:
            if self.sealed:
                raise _Broken("the conversation's anchor is missing although its turns are sealed", **where)
            return
        if not hmac.compare_digest(mac, _anchor(self.key, self.identity, anchored, head)):
            raise _Broken("the conversation's anchor does not match its key", **where)
        if anchored != self.sealed or head != found:
            raise _Broken(
                f"the conversation's anchor says {anchored} sealed turn(s); {self.sealed} are left "
                "(turns after the last one shown, or their records, were removed)",
                **where,
            )

    def check_audit(self, conversation: Conversation) -> None:
        where = self._last()
        head = self.previous_seal if self.sealed else GENESIS
        latest = _latest_sealed_event(conversation)
        if latest is not None:
            turns, logged = latest
            if turns != self.sealed or logged != head:
                raise _Broken(
                    f"the audit log's last seal says {turns} sealed turn(s) ending in {logged[:12]}…; the "
                    f"record has {self.sealed} (a sealed turn was removed)",
                    **where,
                )


def _latest_sealed_event(conversation: Conversation) -> tuple[int, str] | None:
    event = (
        AuditEvent.objects.filter(conversation_public_id=conversation.public_id, action=SEALED_ACTION)
        .order_by("-id")
        .values_list("detail", flat=True)
        .first()
    )
    if not isinstance(event, dict):
        return None
    turns, head = event.get("turns"), event.get("head")
    return (turns, head) if isinstance(turns, int) and isinstance(head, str) else None
