"""``manage.py summarize``: keep, for every ended turn that has none, what the conversation list
shows of it (its tokens and the tools it called: ``conversations.record.summaries``).

A turn is summarized when it ends; turns that ended before this version of the inspector are
not, and the list reads their steps on every page that shows them. Run once after upgrading
(safe while the inspector runs, and to run again).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from conversations.record.summaries import turns_summarize


class Command(BaseCommand):
    help = "Summarize every ended turn that has no summary yet, for the conversation list."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--batch", type=int, default=500, help="turns per transaction (default 500)")

    def handle(self, *args: Any, **options: Any) -> None:
        count = turns_summarize(batch=max(1, options["batch"]))
        self.stdout.write(f"summarized {count} turn(s)")
