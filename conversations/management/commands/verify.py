"""``manage.py verify UUID``: is the conversation's record intact?"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.integrity import conversation_verify
from conversations.models import Conversation


class Command(BaseCommand):
    help = "Recompute a conversation's hash chain and report intact or the first broken record."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("conversation", help="the conversation's UUID")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            conversation = Conversation.objects.get(public_id=options["conversation"])
        except (Conversation.DoesNotExist, ValidationError) as exc:
            raise CommandError(f"no conversation {options['conversation']}") from exc
        report = conversation_verify(conversation=conversation)
        if report.intact:
            self.stdout.write(f"intact: {report.checked} exchanges, chain verified")
            return
        raise CommandError(
            f"BROKEN at exchange {report.broken_exchange_id} (record {report.checked} in order): {report.reason}"
        )
