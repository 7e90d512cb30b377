"""Checking the record: ``conversation_verify`` recomputes a conversation's chain, seals and
anchors under the rules ``conversations.record.integrity`` writes them by, and names the first record that
no longer matches; ``manifest_verify`` checks an export's signature block against the rows an
import made from it. See docs/record-integrity.md.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from conversations.models import AuditEvent, Conversation, Exchange, Step, Turn
from conversations.record.integrity import (
    CHAIN_VERSIONS,
    GENESIS,
    LEGACY,
    SEAL_RULE_DOCUMENT,
    SEAL_TAGS,
    SEALED_ACTION,
    TurnRecords,
    anchor_mac,
    exchange_digest,
    integrity_key,
    record_manifest,
    signed_text,
    step_digests,
    turn_seal_mac,
)
from conversations.record.summaries import summary_matches
from conversations.record.transcripts.fields import profile_doc


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
            base64.b64decode(str(signed.get("signature")), validate=True), signed_text(identity, records)
        )
    except (InvalidSignature, ValueError, binascii.Error):
        return ChainReport(False, 0, reason="its signature does not match the records it lists")
    rule = signed.get("rule", SEAL_RULE_DOCUMENT)
    if not isinstance(rule, int) or isinstance(rule, bool) or rule not in SEAL_TAGS:
        return ChainReport(False, 0, reason=f"its signature block claims an unknown seal rule {rule!r}")
    actual = record_manifest(conversation=conversation, rule=rule)
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

    ``resealed_by``: see ``import_resealer``. ``legacy``: every record (at least one) is under the unkeyed rule (made before keyed sealing), which anyone
    with database access can recompute. A broken report names the first record that no longer
    matches: its turn (seq and id), step (seq and id) and exchange (seq and id), as far as known.
    """

    intact: bool
    checked: int
    broken_exchange_id: int | None = None
    reason: str = ""
    legacy: bool = False
    sealed_turns: int = 0
    # Who re-sealed an import whose file did not verify with this installation's key
    # (``import_resealer``): intact then means "unchanged since that import", nothing more.
    resealed_by: str = ""
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
            _check_import_claims(conversation, key)
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
    # Legacy means records exist and all are under the unkeyed rule: a conversation with none
    # yet (a new one) is under the keyed rule like every record it will get.
    legacy = state.checked > 0 and not state.keyed_seen and state.sealed == 0
    resealed_by = import_resealer(conversation) if identity is None else ""
    return ChainReport(True, state.checked, legacy=legacy, sealed_turns=state.sealed, resealed_by=resealed_by)


# What ``imported_meta["verification"]["status"]`` says about an imported file's own chain
# (``conversations.record.transcripts.importing``): only the first proves the file is this
# installation's record as it was exported.
VERIFIED_HERE = "this-installation"
VERIFIED_LEGACY = "legacy-unkeyed"
NOT_VERIFIABLE = "other-installation"
VERIFIED_SIGNATURE = "signed-elsewhere"


def import_resealer(conversation: Conversation) -> str:
    """Who imported ``conversation`` from a file that did not verify with this installation's
    key ("" for a conversation recorded here, or imported from a file that did). Its records
    verify under the seal the import made, which proves only that nothing changed since the
    import, not that the file was ever this installation's record. An import whose claims carry
    no seal (``IMPORT_SEAL``: made before they were sealed) is never taken as verified: what
    its verdict says could have been written since."""
    meta = conversation.imported_meta
    if not isinstance(meta, dict):
        return ""
    verdict = meta.get("verification")
    if isinstance(verdict, dict) and verdict.get("status") == VERIFIED_HERE and meta.get(IMPORT_SEAL):
        return ""
    return str(meta.get("imported_by") or "an unknown user")


# The key of ``imported_meta`` that holds the seal of an import's claims (``import_seal``).
IMPORT_SEAL = "seal"


def import_claims(conversation: Conversation) -> dict[str, object]:
    """What the pages and the exports show of an imported conversation outside its turns: every
    claim the import kept (``imported_meta``: the file's owner, title, model profile, servers,
    paradigm, tool choice and creation time, the original id, who imported it and when, and what
    checking the file found) and the conversation row's own fields made from them (its title,
    owner, model profile, paradigm and tool choice)."""
    meta = conversation.imported_meta if isinstance(conversation.imported_meta, dict) else {}
    return {
        "meta": {key: value for key, value in meta.items() if key != IMPORT_SEAL},
        "row": {
            "title": conversation.title,
            "owner": conversation.owner.get_username(),
            "model_profile": profile_doc(conversation.model_profile),
            "paradigm": conversation.paradigm,
            "tool_choice": conversation.tool_choice,
            "tool_choice_name": conversation.tool_choice_name,
        },
    }


def import_seal(conversation: Conversation, key: bytes | None = None) -> str:
    """The keyed MAC of ``import_claims`` under the conversation's identity: stored in
    ``imported_meta[IMPORT_SEAL]`` by the import, checked by ``conversation_verify``."""
    claims = json.dumps(
        import_claims(conversation), sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )
    text = f"tool-call-inspector import claims 1\n{conversation.public_id}\n{claims}"
    return hmac.digest(key or integrity_key(), text.encode(), "sha256").hex()


def _check_import_claims(conversation: Conversation, key: bytes) -> None:
    meta = conversation.imported_meta
    if not isinstance(meta, dict) or not meta.get(IMPORT_SEAL):
        return  # not an import, or one made before claims were sealed (``import_resealer``)
    if not hmac.compare_digest(str(meta[IMPORT_SEAL]), import_seal(conversation, key)):
        raise _Broken(
            "the import's own fields (the owner, title, model profile, servers or tool choice it "
            "shows, who imported it, or what checking its file found) do not match their seal"
        )


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
        if rule not in SEAL_TAGS:
            raise _Broken(f"it claims an unknown seal rule {rule}", **where)
        records = TurnRecords(
            sorted(steps.values(), key=lambda step: (step.seq, step.pk)),
            [(row.step_id, row.hash, row.server_name) for row in rows],
        )
        digests = step_digests(self.key, self.identity, turn, records, rule)
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
        expected = turn_seal_mac(self.key, self.identity, turn, records, digests, self.previous_seal, rule)
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
        if not hmac.compare_digest(mac, anchor_mac(self.key, self.identity, anchored, head)):
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
