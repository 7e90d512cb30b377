"""``manage.py import FILE [--user USERNAME]``: an exported ``json`` transcript, back as a
read-only conversation (``-`` reads standard input)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import reverse

from conversations.management.commands.export import command_user
from conversations.models import AuditEvent, Conversation, Exchange
from conversations.record.audit import audit_record
from conversations.record.transcripts.importing import TranscriptError
from conversations.record.transcripts.otel_import import conversation_files_import


def _owner(actor: AbstractBaseUser | None) -> AbstractBaseUser:
    """``--user``, else the first superuser: someone must own the conversation to see it."""
    if actor is not None:
        return actor
    superuser = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
    if superuser is None:
        raise CommandError("there is no superuser to own the imported conversation: pass --user")
    return superuser


class Command(BaseCommand):
    help = (
        "Import a transcript exported with `export --format json`, or OpenTelemetry traces (OTLP/JSON or "
        "OTLP/protobuf), as a read-only conversation."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the json transcript or OTLP file ('-' for standard input)")
        parser.add_argument("--user", help="who imports and owns it (default: the first superuser)")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = command_user(options["user"])
        owner = _owner(actor)
        name: str = options["file"]
        try:
            data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {name}: {exc.strerror or exc}") from exc
        try:
            conversations = conversation_files_import(data=data, owner=owner)  # OTLP may hold several
        except TranscriptError as exc:
            raise CommandError(f"cannot import {name}: {exc}") from exc
        for conversation in conversations:
            self._report(conversation, actor=actor, owner=owner, name=name)

    def _report(
        self,
        conversation: Conversation,
        *,
        actor: AbstractBaseUser | None,
        owner: AbstractBaseUser,
        name: str,
    ) -> None:
        meta = conversation.imported_meta or {}
        exchanges = Exchange.objects.filter(turn__conversation=conversation).count()
        audit_record(
            actor=actor,
            action=AuditEvent.Action.IMPORTED,
            conversation=conversation,
            detail={
                "original_id": meta.get("original_id"),
                "from": name,
                "owner": owner.get_username(),
                "claimed_owner": meta.get("owner"),
                "verification": meta.get("verification"),
                "turns": conversation.turns.count(),
                "exchanges": exchanges,
            },
        )
        path = reverse("inspector-conversation", kwargs={"public_id": conversation.public_id})
        self.stdout.write(f"imported {conversation.public_id} {path}")
        verification = meta.get("verification")
        verdict = verification.get("detail") if isinstance(verification, dict) else None
        self.stdout.write(
            f"from {meta.get('original_id')} (a file claiming to be recorded by {meta.get('owner')}): "
            f"{conversation.turns.count()} turn(s), {exchanges} exchange(s); the file's chain: {verdict}; "
            f"imported by {owner.get_username()}, read-only"
        )
