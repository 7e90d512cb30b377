"""``manage.py prune --older-than DAYS [--dry-run]``: the retention run, by hand."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.management.commands.export import command_user
from conversations.record.retention import conversations_prune


class Command(BaseCommand):
    help = (
        "Delete conversations created more than DAYS days ago and not used since (turns, steps, "
        "exchanges), and server-only records as old; recorded in the audit log."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", type=int, required=True, metavar="DAYS", dest="days")
        parser.add_argument("--dry-run", action="store_true", help="count only; delete and record nothing")
        parser.add_argument("--user", help="who prunes, for the audit log (default: system)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["days"] < 1:
            raise CommandError("--older-than must be at least 1 day")
        actor = command_user(options["user"])
        report = conversations_prune(older_than_days=options["days"], actor=actor, dry_run=options["dry_run"])
        verb = "would delete" if report.dry_run else "deleted"
        self.stdout.write(
            f"{verb} {report.conversations} conversation(s) ({report.turns} turn(s), {report.steps} step(s), "
            f"{report.exchanges} exchange(s)), {report.server_exchanges} server-only exchange(s) and "
            f"{report.comparisons} empty comparison(s) older than {report.older_than_days} day(s) "
            f"(before {report.cutoff:%Y-%m-%d %H:%M} UTC)"
        )
