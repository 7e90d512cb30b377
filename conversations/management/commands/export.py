"""``manage.py export UUID --format json|jsonl|otel|otlp [--output FILE]``: a conversation as a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.models import AuditEvent, Conversation
from conversations.record.audit import audit_record
from conversations.record.transcripts.export import BINARY_FORMATS, EXPORT_FORMATS, transcript_export_bytes


def command_user(username: str | None) -> AbstractBaseUser | None:
    """The user a command acts as (``--user``), or None: the audit log then says "system".

    Raises:
        CommandError: there is no user of that name.
    """
    if not username:
        return None
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"no user named {username!r}")
    return user


class Command(BaseCommand):
    help = (
        "Export a conversation: json (the full transcript with every raw body; importable), "
        "jsonl (one exchange a line) otel (OTLP/JSON spans, OpenTelemetry GenAI conventions) or otlp (the same as OTLP/protobuf)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("conversation", help="the conversation's UUID")
        parser.add_argument("--format", choices=EXPORT_FORMATS, default="json", dest="fmt")
        parser.add_argument("--output", "-o", help="write to this file (default: standard output)")
        parser.add_argument("--user", help="who exports, for the audit log (default: system)")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = command_user(options["user"])
        try:
            conversation = Conversation.objects.get(public_id=options["conversation"])
        except (Conversation.DoesNotExist, ValidationError) as exc:
            raise CommandError(f"no conversation {options['conversation']}") from exc
        output: str | None = options["output"]
        if options["fmt"] in BINARY_FORMATS and not output:
            raise CommandError(f"{options['fmt']} is binary: write it to a file with --output FILE")
        data = transcript_export_bytes(conversation=conversation, fmt=options["fmt"])
        if output:
            try:
                Path(output).write_bytes(data)
            except OSError as exc:
                raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from exc
        else:
            self.stdout.write(data.decode(), ending="")
        audit_record(
            actor=actor,
            action=AuditEvent.Action.EXPORTED,
            conversation=conversation,
            detail={"format": options["fmt"], "to": output or "stdout", "bytes": len(data)},
        )
        if output:
            self.stderr.write(f"exported {conversation.public_id} as {options['fmt']} to {output}")
