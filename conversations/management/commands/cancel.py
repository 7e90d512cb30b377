"""``manage.py cancel TURN_ID``: stop a queued or running turn, wherever it runs.

The request goes through the database, so it reaches the web process or the Celery worker
running the turn; the command then waits (``--wait`` seconds) for the turn to end and says how
it ended. Exit status: 0 once the turn is cancelled (or, with ``--wait 0``, once asked), 1 if it
had already finished or did not end in time.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.management.commands.export import command_user
from conversations.models import Turn
from conversations.services import TurnNotCancellable, turn_cancel

POLL_SECONDS = 0.2


class Command(BaseCommand):
    help = "Stop a queued or running turn: it ends cancelled, keeping everything recorded so far."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "turn_id", type=int, help="the turn's id (as in the page's and the API's turn ids)"
        )
        parser.add_argument("--user", help="who cancels, for the record (default: the command line)")
        parser.add_argument(
            "--wait", type=float, default=15.0, help="seconds to wait for the turn to end (0: do not wait)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        turn = Turn.objects.select_related("conversation").filter(pk=options["turn_id"]).first()
        if turn is None:
            raise CommandError(f"there is no turn {options['turn_id']}")
        try:
            turn = turn_cancel(turn=turn, actor=command_user(options["user"]))
        except TurnNotCancellable as exc:
            raise CommandError(str(exc)) from None
        deadline = time.monotonic() + max(options["wait"], 0.0)
        while turn.status == Turn.Status.RUNNING and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
            turn.refresh_from_db(fields=["status", "error"])
        if turn.status == Turn.Status.RUNNING:
            if options["wait"] > 0:
                raise CommandError(
                    f"turn {turn.pk}: cancel requested, but it was still running after {options['wait']:g} s"
                )
            self.stdout.write(f"turn {turn.pk}: cancel requested; it ends within seconds")
            return
        self.stdout.write(f"turn {turn.pk}: {turn.status}" + (f" ({turn.error})" if turn.error else ""))
