"""``manage.py traces send [--since DATE] [--conversation ID]``: send the traces of finished turns
that were never queued for the configured OTLP endpoint (recorded before it was configured, or
imported), one attempt each, and say what each met (docs/traces.md §5)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.models import TraceDelivery, Turn
from conversations.record.trace_delivery import trace_deliver, trace_delivery_enabled

FINISHED = (Turn.Status.DONE, Turn.Status.FAILED, Turn.Status.INTERRUPTED, Turn.Status.CANCELLED)


def _since(value: str) -> datetime:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(f"--since {value!r}: give a date or time as YYYY-MM-DD[THH:MM]") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Backfill the configured OTLP endpoint with the traces of turns that were never sent."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        send = sub.add_parser("send", help="send the traces not yet queued (one attempt each)")
        send.add_argument("--since", help="only turns created from this date (YYYY-MM-DD, UTC)")
        send.add_argument("--conversation", help="only this conversation (its public id)")

    def handle(self, *args: Any, **options: Any) -> None:
        if not trace_delivery_enabled():
            raise CommandError("no endpoint is configured: set OTEL_EXPORTER_OTLP_TRACES_ENDPOINT first")
        turns = Turn.objects.filter(status__in=FINISHED, trace_delivery__isnull=True)
        if options["since"]:
            turns = turns.filter(created_at__gte=_since(options["since"]))
        if options["conversation"]:
            try:
                turns = turns.filter(conversation__public_id=options["conversation"])
            except ValidationError as exc:  # not a UUID
                raise CommandError(f"--conversation {options['conversation']!r}: {exc}") from None
        counts = {status: 0 for status in TraceDelivery.Status.values}
        for turn_id in turns.order_by("created_at", "pk").values_list("pk", flat=True):
            TraceDelivery.objects.get_or_create(turn_id=turn_id)
            delivery = trace_deliver(turn_id=turn_id)
            if delivery is None:
                continue
            counts[delivery.status] += 1
            if delivery.last_error:
                self.stdout.write(f"turn {turn_id}: {delivery.status}: {delivery.last_error}")
        self.stdout.write(
            f"{counts['sent']} sent, {counts['pending']} pending (retried by the sender), "
            f"{counts['failed']} refused"
        )
