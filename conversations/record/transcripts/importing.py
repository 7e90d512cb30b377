"""Transcripts in: a ``json`` export validated against its schema and rebuilt as a new conversation.

What survives an import and what changes (``ID_KEYS``) is described in
``conversations.record.transcripts.document``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import cast

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from conversations.escaping import refused_character
from conversations.loop.wire import TRANSPORT_NAMES
from conversations.models import Conversation, Exchange, ModelProfile, Step, Turn
from conversations.record.integrity import (
    LEGACY,
    SEAL_RULE_FIELDS,
    conversation_rechain,
    key_id,
    public_key_fingerprint,
)
from conversations.record.transcripts.document import chain_order, transcript_document
from conversations.record.transcripts.fields import (
    FORMAT,
    ID_KEYS,
    READ_VERSIONS,
    ExchangeDoc,
    ProfileDoc,
    TranscriptDoc,
    TurnDoc,
    calls_as_stored,
)
from conversations.record.transcripts.schema import transcript_schema
from conversations.record.verification import (
    IMPORT_SEAL,
    NOT_VERIFIABLE,
    VERIFIED_HERE,
    VERIFIED_LEGACY,
    VERIFIED_SIGNATURE,
    ChainReport,
    conversation_verify,
    import_seal,
    manifest_verify,
)
from conversations.selectors.access import visible_to
from conversations.typealias import JSONDict, JSONValue

IMPORTED_PROFILE_PREFIX = "imported: "


class TranscriptError(ValueError):
    """A transcript that cannot be imported; the message says what is wrong and where."""


# --- import --------------------------------------------------------------------------------------


# The JSON Schema of the transcripts this installation reads (``READ_VERSIONS``), derived from
# the document's types; ``transcript_import`` checks documents against it. A version-1 document
# written before keyed sealing lacks the sealing keys, which the types mark ``NotRequired``.
TRANSCRIPT_SCHEMA: JSONDict = transcript_schema(choices={"transport": list(TRANSPORT_NAMES)})
_VALIDATOR = Draft202012Validator(TRANSCRIPT_SCHEMA)
_MESSAGE_LIMIT = 240


def _where(path: Iterable[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "the document"


def _short(message: str) -> str:
    return message if len(message) <= _MESSAGE_LIMIT else message[: _MESSAGE_LIMIT - 1] + "…"


def _reject_constant(name: str) -> JSONValue:
    raise TranscriptError(f"not valid JSON: {name} is not a JSON number")


def _storable(document: JSONValue) -> None:
    """No character any database refuses, in any string or key (``escaping.refused_character``):
    no NUL, which PostgreSQL cannot store, and no lone surrogate (``"\\ud800"`` in JSON), which
    no database stores and UTF-8 cannot encode.

    This installation's exports never hold either: the recorder stores such text escaped and an
    export writes the escape, so a file that holds one was not written by an export. It is
    refused, not escaped: stored escaped, the import would hold other values than the file.
    Keys are checked before what they hold, so a path named is one a page can show.
    Iterative: recorded JSON may nest as deep as the parser allowed.
    """
    pending: list[tuple[JSONValue, list[str | int]]] = [(document, [])]
    while pending:
        value, path = pending.pop()
        if isinstance(value, str):
            problem = refused_character(value)
            if problem is not None:
                raise TranscriptError(f"{_where(path)}: holds a {problem}, {_UNSTORABLE}")
        elif isinstance(value, list):
            pending.extend((item, [*path, position]) for position, item in enumerate(value))
        elif isinstance(value, dict):
            for key, item in value.items():
                problem = refused_character(key)
                if problem is not None:
                    raise TranscriptError(f"{_where(path)}: a key holds a {problem}, {_UNSTORABLE}")
                pending.append((item, [*path, key]))


_UNSTORABLE = "which no database stores (an export writes it escaped)"


def _parse(data: str | bytes) -> TranscriptDoc:
    """The document, checked against ``TRANSCRIPT_SCHEMA`` and for things a schema cannot say."""
    try:
        value: JSONValue = json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, TranscriptError):
            raise
        raise TranscriptError(f"not valid JSON: {_short(str(exc))}") from exc
    if not isinstance(value, dict):
        raise TranscriptError("not a transcript: the document must be a JSON object")
    if value.get("format") != FORMAT:
        raise TranscriptError(
            f"not a Tool-Call Inspector transcript: format is {_short(repr(value.get('format')))}, "
            f"expected {FORMAT!r} (only `--format json` exports can be imported)"
        )
    if value.get("version") not in READ_VERSIONS or isinstance(value.get("version"), bool):
        raise TranscriptError(
            f"unsupported transcript version {_short(repr(value.get('version')))}: "
            f"this installation reads versions {', '.join(map(str, READ_VERSIONS))}"
        )
    error = best_match(_VALIDATOR.iter_errors(value))
    if error is not None:
        raise TranscriptError(f"{_where(list(error.absolute_path))}: {_short(error.message)}")
    _storable(value)
    document = cast(TranscriptDoc, value)
    _check_structure(document)
    return document


def _when(value: str, where: str) -> datetime:
    """The moment ``value`` names, in UTC; one whose UTC time falls outside the years 1 to 9999
    (``0001-01-01T00:00:00+01:00``) cannot be held by a ``datetime`` and is refused too."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise TranscriptError(f"{where}: {value!r} is not an ISO 8601 date and time") from exc
    if moment.tzinfo is None:
        raise TranscriptError(f"{where}: {value!r} has no time zone")
    try:
        return moment.astimezone(UTC)
    except OverflowError as exc:
        raise TranscriptError(f"{where}: {value!r} is outside the years 1 to 9999 in UTC") from exc


def _when_or_none(value: str | None, where: str) -> datetime | None:
    return _when(value, where) if value is not None else None


def _check_structure(document: TranscriptDoc) -> None:
    """Unique seqs and ids, parents within their turn, parseable times."""
    _when(document["conversation"]["created_at"], "conversation.created_at")
    turn_seqs: set[int] = set()
    step_ids: set[int] = set()
    for t, turn in enumerate(document["turns"]):
        where = f"turns[{t}]"
        if turn["seq"] in turn_seqs:
            raise TranscriptError(f"{where}.seq: turn {turn['seq']} appears twice")
        turn_seqs.add(turn["seq"])
        if "steps_count" in turn or "steps_next" in turn:
            # The REST API's page of a long turn, not a whole record: its other steps are missing.
            raise TranscriptError(
                f"{where}: holds {len(turn['steps'])} of its {turn.get('steps_count', '?')} steps (an API "
                "answer in pages): import the conversation's JSON download, which is whole"
            )
        _when(turn["created_at"], f"{where}.created_at")
        _when_or_none(turn["started_at"], f"{where}.started_at")
        _when_or_none(turn["finished_at"], f"{where}.finished_at")
        seqs: set[int] = set()
        ids = {step["id"] for step in turn["steps"]}
        for s, step in enumerate(turn["steps"]):
            here = f"{where}.steps[{s}]"
            if step["seq"] in seqs:
                raise TranscriptError(f"{here}.seq: step {step['seq']} appears twice in turn {turn['seq']}")
            if step["id"] in step_ids:
                raise TranscriptError(f"{here}.id: step id {step['id']} appears twice")
            seqs.add(step["seq"])
            step_ids.add(step["id"])
            if step["parent"] is not None and (step["parent"] not in ids or step["parent"] == step["id"]):
                raise TranscriptError(f"{here}.parent: {step['parent']} is not another step of this turn")
            _when(step["started_at"], f"{here}.started_at")
            _when_or_none(step["finished_at"], f"{here}.finished_at")
        for _, exchange in chain_order(turn):
            _when(exchange["started_at"], f"{where}: exchange {exchange['seq']}.started_at")


def _imported_profile(profile: ProfileDoc, owner: AbstractBaseUser) -> ModelProfile:
    """The profile an imported conversation hangs off (it is never run again).

    An existing profile of this installation with the same name, provider and model is reused
    (e.g. the demo profile); otherwise the importer's own placeholder ``imported: <name>`` —
    no base URL, no key, ``imported_by`` the importer, so it is offered in no picker — is
    reused or created (numbered when that name is taken by another user's or another model's).
    An import creates nothing anyone else sees.
    """
    same = ModelProfile.objects.filter(
        name=profile["name"], provider=profile["provider"], model=profile["model"], imported_by__isnull=True
    ).first()
    if same is not None:
        return same
    base = f"{IMPORTED_PROFILE_PREFIX}{profile['name']}"
    for number in range(1, 1000):
        name = base[:80] if number == 1 else f"{base[:72]} #{number}"
        existing, created = ModelProfile.objects.get_or_create(
            name=name,
            defaults={
                "provider": profile["provider"],
                "model": profile["model"],
                "is_demo": False,
                "imported_by_id": owner.pk,
            },
        )
        mine = existing.imported_by_id == owner.pk
        if created or (
            mine and (existing.provider, existing.model) == (profile["provider"], profile["model"])
        ):
            return existing
    raise TranscriptError(f"too many imported profiles named {base!r}")


def _exchange_row(doc: ExchangeDoc, *, turn: Turn, step_id: int | None) -> Exchange:
    return Exchange(
        turn=turn,
        conversation_id=turn.conversation_id,
        step_id=step_id,
        server=None,
        server_name=doc["server"] or "",
        seq=doc["seq"],
        channel=doc["channel"],
        direction=doc["direction"],
        label=doc["label"],
        # Null (version 2) and "" (version 1) both say: no id.
        jsonrpc_id=doc["jsonrpc_id"] or "",
        request_headers=doc["request_headers"],
        request_body=doc["request_body"],
        response_headers=doc["response_headers"],
        response_body=doc["response_body"],
        status=doc["status"],
        error=doc["error"],
        started_at=_when(doc["started_at"], "exchange"),
        duration_ms=float(doc["duration_ms"]) if doc["duration_ms"] is not None else None,
        chain_version=doc.get("chain_version", LEGACY),
        prev_hash=doc["prev_hash"],
        hash=doc["hash"],
    )


def _import_turn(conversation: Conversation, doc: TurnDoc) -> None:
    turn = Turn.objects.create(
        conversation=conversation,
        seq=doc["seq"],
        question=doc["question"],
        status=doc["status"],
        answer=doc["answer"],
        error=doc["error"],
        paradigm=doc["paradigm"],
        tool_choice=doc["tool_choice"],
        tool_choice_name=doc["tool_choice_name"],
        model_name=doc["model"],
        tools=doc["tools"],
        transcript=doc["transcript"],
        created_at=_when(doc["created_at"], "turn"),
        started_at=_when_or_none(doc["started_at"], "turn"),
        finished_at=_when_or_none(doc["finished_at"], "turn"),
        seal=doc.get("seal", ""),
        seal_steps=doc.get("seal_steps", []),
        seal_rule=doc.get("seal_rule", SEAL_RULE_FIELDS),
    )
    steps = []
    for step in doc["steps"]:
        started = _when(step["started_at"], "step")
        finished = _when_or_none(step["finished_at"], "step")
        steps.append(
            Step(
                turn=turn,
                seq=step["seq"],
                kind=step["kind"],
                status=step["status"],
                title=step["title"],
                prompt=step["prompt"],
                prompt_exact=step["prompt_exact"],
                prompt_source=step["prompt_source"],
                tokens=step["tokens"],
                usage=step["usage"],
                text=step["text"],
                calls=calls_as_stored(step["calls"]),
                diagnostics=step["diagnostics"],
                server=None,
                server_name=step["server"] or "",
                tool_name=step["tool_name"],
                arguments=step["arguments"],
                result=step["result"],
                is_error=step["is_error"],
                error=step["error"],
                started_at=started,
                finished_at=finished,
                updated_at=finished or started,
            )
        )
    Step.objects.bulk_create(steps)
    new_ids = {step["id"]: row.pk for step, row in zip(doc["steps"], steps, strict=True)}
    children = []
    for step, row in zip(doc["steps"], steps, strict=True):
        if step["parent"] is not None:
            row.parent_id = new_ids[step["parent"]]
            children.append(row)
    if children:
        Step.objects.bulk_update(children, ["parent"])
    # Inserted in chain order, so equal seqs keep their original tie-break (the id).
    by_seq = {step["seq"]: new_ids[step["id"]] for step in doc["steps"]}
    Exchange.objects.bulk_create(
        _exchange_row(exchange, turn=turn, step_id=by_seq[step_seq] if step_seq is not None else None)
        for step_seq, exchange in chain_order(doc)
    )


def _file_verdict(conversation: Conversation, document: TranscriptDoc) -> JSONDict:
    """Check the file's own chain, as the file states it, on the rows just made from it.

    A signed file (``integrity.signature``) is checked against its signature first: any record
    changed since it was signed is refused, naming it. A file sealed with this installation's key
    (its ``integrity.key_id`` is ours) is also verified record by record, anchors included. A
    signed file of another installation is accepted as signed by the key it names (its
    fingerprint is shown, for the reader to compare with the exporter's).
    A file of records made before keyed sealing has only the unkeyed chain, which is checked
    (it shows the file is consistent; anyone can recompute it). A file that names another key
    cannot be checked here: it is imported, and says so.

    Raises:
        TranscriptError: the file's chain does not verify.
    """
    block = document["conversation"]
    exchanges = [exchange for turn in document["turns"] for _, exchange in chain_order(turn)]
    keyed = any(turn.get("seal") for turn in document["turns"]) or any(
        exchange.get("chain_version", LEGACY) != LEGACY for exchange in exchanges
    )
    integrity = block.get("integrity")
    claimed = integrity["key_id"] if integrity else ""
    signed = integrity.get("signature") if integrity else None
    ours = keyed and claimed == key_id()
    if not ours and keyed and not signed:
        return {
            "status": NOT_VERIFIABLE,
            "key_id": claimed,
            "detail": "sealed with another installation's key"
            + (f" (key id {claimed})" if claimed else " (no key id)")
            + " and not signed: it verifies internally only",
        }
    report = ChainReport(True, 0)
    if ours or not keyed:
        anchor = (integrity["turns"], integrity["head"], integrity["anchor"]) if keyed and integrity else None
        report = conversation_verify(conversation=conversation, identity=block["id"], anchor=anchor)
        if not report.intact:
            raise TranscriptError(
                f"the hash chain does not verify at {report.where}: {report.reason}. "
                "The transcript was changed after it was exported; it is not imported."
            )
    if signed:
        signature = manifest_verify(conversation=conversation, identity=block["id"], signed=signed)
        if not signature.intact:
            raise TranscriptError(
                f"the signature does not verify at {signature.where}: {signature.reason}. "
                "The transcript was changed after it was exported; it is not imported."
            )
        if not ours:
            signer = public_key_fingerprint(str(signed.get("public_key")))
            return {
                "status": VERIFIED_SIGNATURE,
                "key_id": claimed,
                "signer": signer,
                "detail": f"signed by the key with fingerprint {signer}, not this installation's: every record "
                "is as the holder of that key exported it (compare the fingerprint with the one the "
                "exporter's `manage.py verify --public-key` prints)",
            }
    if keyed:
        return {
            "status": VERIFIED_HERE,
            "key_id": claimed,
            "detail": f"verified with this installation's key: all {report.checked} exchanges and "
            f"{report.sealed_turns} sealed turns are as they were exported",
        }
    return {
        "status": VERIFIED_LEGACY,
        "key_id": "",
        "detail": f"its unkeyed hash chain over {report.checked} exchanges is consistent (made before "
        "keyed sealing: anyone can recompute such a chain, so it does not prove where the file came from)",
    }


# How many differences from a local conversation a refusal names.
_DIFFERENCES_NAMED = 8


def _comparable(record: object, level: str) -> object:
    """A record of a transcript document without this installation's own keys (``ID_KEYS``) and
    without its nested records (compared on their own)."""
    if not isinstance(record, dict):
        return record
    nested = {"conversation": (), "turn": ("steps", "exchanges"), "step": ("exchanges",), "exchange": ()}[
        level
    ]
    kept = {key: value for key, value in record.items() if key not in ID_KEYS[level] and key not in nested}
    if level == "step" and "calls" in kept:
        # What the document adds to each call names this installation's exchange ids.
        kept["calls"] = calls_as_stored(kept["calls"])
    return kept


def _value_differences(ours: object, theirs: object, where: str, found: list[str]) -> None:
    """Append the paths where two JSON values differ (the first few; an explicit stack)."""
    stack: list[tuple[object, object, str]] = [(ours, theirs, where)]
    while stack and len(found) < _DIFFERENCES_NAMED:
        here, there, path = stack.pop()
        if isinstance(here, dict) and isinstance(there, dict):
            for key in sorted(set(here) | set(there), reverse=True):
                stack.append((here.get(key, _ABSENT), there.get(key, _ABSENT), f"{path}.{key}"))
        elif isinstance(here, list) and isinstance(there, list) and len(here) == len(there):
            stack.extend(
                (a, b, f"{path}[{i}]")
                for i, (a, b) in reversed(list(enumerate(zip(here, there, strict=True))))
            )
        elif here != there or type(here) is not type(there):
            found.append(path)


_ABSENT = object()


def _records_of(turn: object) -> list[tuple[str, str, object]]:
    """A turn document's records in document order: (path, level, record)."""
    if not isinstance(turn, dict):
        return []
    records: list[tuple[str, str, object]] = [("", "turn", turn)]
    for index, step in enumerate(turn.get("steps") or []):
        records.append((f".steps[{index}]", "step", step))
        for position, exchange in enumerate(step.get("exchanges") or [] if isinstance(step, dict) else []):
            records.append((f".steps[{index}].exchanges[{position}]", "exchange", exchange))
    for position, exchange in enumerate(turn.get("exchanges") or []):
        records.append((f".exchanges[{position}]", "exchange", exchange))
    return records


def local_differences(
    imported: Conversation, claimed_id: str, *, importer: AbstractBaseUser
) -> list[str] | None:
    """How the records of ``imported`` (the rows just made from a file) differ from those of the
    conversation recorded here under the id the file claims, among those ``importer`` may see
    (``visible_to``): None when there is none, else the paths of the first few differing fields
    (``[]``: a faithful copy of it, or of its first turns).

    A conversation the importer may not see is never compared: the fields named, or a file
    matching or not, would tell them what it holds. Its id reads as one recorded nowhere here, so
    the file is imported as a new conversation like any other (every import gets a fresh id;
    ``imported_meta`` keeps the one it claims, as a claim) and the answer is the same whether or
    not the id exists.

    The records are compared as the transcript document shows them, both read back from rows (so
    a file's older format reads as ours does); ids and the keyed chain are each installation's
    own (``ID_KEYS``). The conversation's own block is not compared: an import keeps it as what
    the file claims (``imported_meta``), shown as such. An id that is no UUID names no
    conversation here."""
    try:
        public_id = uuid.UUID(claimed_id)
    except ValueError:
        return None
    claimed = Conversation.objects.filter(public_id=public_id).exclude(pk=imported.pk)
    local = visible_to(claimed, user=importer, owner="owner").first()
    if local is None:
        return None
    here = transcript_document(conversation=local, signed=False)["turns"]
    there = transcript_document(conversation=imported, signed=False)["turns"]
    found: list[str] = []
    if len(there) > len(here):
        found.append(f"turns (the file has {len(there)}, this installation {len(here)})")
    for index, (ours, theirs) in enumerate(zip(here, there, strict=False)):
        mine, its = _records_of(ours), _records_of(theirs)
        if len(mine) != len(its):
            found.append(f"turns[{index}] (a record was added or removed)")
            continue
        for (path, level, record), (_, _, other) in zip(mine, its, strict=True):
            _value_differences(
                _comparable(record, level), _comparable(other, level), f"turns[{index}]{path}", found
            )
    return found[:_DIFFERENCES_NAMED]


def transcript_import(
    *, data: str | bytes, owner: AbstractBaseUser, compare_local: bool = True
) -> Conversation:
    """Bring an exported ``json`` transcript back as a read-only conversation owned by ``owner``.

    Evidence, not authority: the conversation belongs to the importer, whatever the file says
    its owner was; ``imported_meta`` keeps what the file *claims* (original id, owner, model
    profile, servers, title, paradigm, tool choice, creation time), who imported it and when,
    and what checking the file's own chain found (``_file_verdict``). No object anyone else
    sees is created (``_imported_profile``). Everything is created in one transaction with new
    ids and every recorded value as it was (not redacted again), then re-chained and re-sealed
    under this installation's key: from then on a change is detected like on any record. A
    re-export is byte-identical apart from ``ID_KEYS``. ``Conversation.created_at`` is the
    import time: retention counts from when this installation received the record. Server
    names go to ``server_name``; no local server row is linked.

    A transcript whose chain does not verify is refused: it was changed after export. So is one
    that claims the id of a conversation recorded here that ``owner`` may see and differs from it
    (``local_differences``): the local record is the evidence, whatever the file's own chain says;
    a conversation ``owner`` may not see is neither compared nor revealed. ``compare_local``
    False skips that comparison (an OTLP trace rebuilds only part of a record: it never matches).

    Raises:
        TranscriptError: not JSON, not a transcript of a version read here, a missing or mistyped key, an
            inconsistent structure, or a broken hash chain — nothing is stored then.
    """
    document = _parse(data)
    block = document["conversation"]
    meta = cast(JSONDict, {key: value for key, value in block.items() if key != "id"})
    meta.pop("integrity", None)
    meta.update(
        original_id=block["id"],
        imported_at=timezone.now().isoformat(),
        imported_by=owner.get_username(),
        format_version=document["version"],
    )
    with transaction.atomic():
        conversation = Conversation.objects.create(
            owner_id=owner.pk,
            title=block["title"] or "untitled",
            model_profile=_imported_profile(block["model_profile"], owner),
            paradigm=block["paradigm"],
            tool_choice=block["tool_choice"],
            tool_choice_name=block["tool_choice_name"],
            imported_meta=meta,
        )
        for turn in document["turns"]:
            _import_turn(conversation, turn)
        meta["verification"] = _file_verdict(conversation, document)
        differences = local_differences(conversation, block["id"], importer=owner) if compare_local else None
        if differences:
            raise TranscriptError(
                f"a conversation with the id {block['id']} is recorded here and the file differs from it at "
                + ", ".join(differences)
                + ". The transcript was changed after it was exported; it is not imported."
            )
        imported_meta_store(conversation=conversation, meta=meta)
        conversation_rechain(conversation=conversation, actor_name=owner.get_username())
    return conversation


def imported_meta_store(*, conversation: Conversation, meta: JSONDict) -> None:
    """Store an import's claims (``imported_meta``) with their seal
    (``verification.import_seal``): from then on a change to any of them, or to the row's fields
    made from them, breaks the record like a change to a turn."""
    claims = {key: value for key, value in meta.items() if key != IMPORT_SEAL}
    Conversation.objects.filter(pk=conversation.pk).update(imported_meta=claims)
    # Sealed as read back (a stored value may read back escaped: ``conversations.escaping``), so
    # that verifying reads exactly what was sealed.
    conversation.refresh_from_db(
        fields=["imported_meta", "title", "paradigm", "tool_choice", "tool_choice_name"]
    )
    stored = cast(JSONDict, conversation.imported_meta)
    stored[IMPORT_SEAL] = import_seal(conversation)
    Conversation.objects.filter(pk=conversation.pk).update(imported_meta=stored)
