"""``manage.py verify UUID``: is the conversation's record intact?"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.models import Conversation
from conversations.record.integrity import key_id, public_key, public_key_fingerprint
from conversations.record.verification import conversation_verify


class Command(BaseCommand):
    help = (
        "Recompute a conversation's keyed chain, its turns' seals and its anchors; exit non-zero "
        "naming the first record (turn, step, exchange) that no longer matches."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("conversation", nargs="?", help="the conversation's UUID")
        parser.add_argument(
            "--public-key",
            action="store_true",
            help="print this installation's export-signing public key and its fingerprint instead "
            "(publish it: whoever imports your exports compares the fingerprint)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["public_key"]:
            key = public_key()
            self.stdout.write(
                f"public key {key}\nfingerprint {public_key_fingerprint(key)}\nkey id {key_id()}"
            )
            return
        if not options["conversation"]:
            raise CommandError("name a conversation (its UUID), or pass --public-key")
        try:
            conversation = Conversation.objects.get(public_id=options["conversation"])
        except (Conversation.DoesNotExist, ValidationError) as exc:
            raise CommandError(f"no conversation {options['conversation']}") from exc
        report = conversation_verify(conversation=conversation)
        if report.intact:
            rule = (
                "unkeyed legacy chain (made before keyed sealing; anyone with database access can recompute it)"
                if report.legacy
                else f"keyed chain and {report.sealed_turns} sealed turn(s) verified"
            )
            if report.resealed_by:
                rule += (
                    f"; unverified import — re-sealed on import by {report.resealed_by} (the file did "
                    "not verify with this installation's key: intact only since the import)"
                )
            self.stdout.write(f"intact: {report.checked} exchanges, {rule}")
            return
        ids = []
        if report.turn_id is not None:
            ids.append(f"turn id {report.turn_id}")
        if report.step_id is not None:
            ids.append(f"step id {report.step_id}")
        if report.broken_exchange_id is not None:
            ids.append(f"exchange id {report.broken_exchange_id}")
        exchange = f"exchange {report.broken_exchange_id}, " if report.broken_exchange_id is not None else ""
        raise CommandError(
            f"BROKEN at {exchange}{report.where} [{'; '.join(ids) or 'no single record'}]: {report.reason}"
        )
