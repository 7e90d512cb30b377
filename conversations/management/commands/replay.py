"""``manage.py replay TURN_ID``: ask a recorded turn's question again, here and now, and print
what differs — the tools offered, each call's tool, arguments and result, the outcome.

The replay is recorded like any other conversation (the web UI shows it with the same
differences); it runs in this process, so the command ends when the replay does.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.urls import reverse

from conversations.management.commands.export import command_user
from conversations.models import Turn
from conversations.presentation import Compared, ReplayDiff, replay_diff
from conversations.runner import turn_run
from conversations.services import ReplayError, turn_replay


def _actor(username: str | None) -> AbstractBaseUser:
    """``--user``, else the first superuser: someone must own the replay to see it."""
    actor = command_user(username)
    if actor is not None:
        return actor
    superuser = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
    if superuser is None:
        raise CommandError("there is no superuser to own the replay: pass --user")
    return superuser


def _verdict(compared: Compared) -> str:
    return "equal" if compared.same else "DIFFERENT"


def _short(value: object) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value


def diff_lines(diff: ReplayDiff) -> list[str]:
    """The differences as text, one fact a line."""
    tools = diff.tools
    lines = [f"tools offered: {'the same' if tools.same else 'DIFFERENT'} ({tools.unchanged} unchanged)"]
    lines += [f"  + added   {name}" for name in tools.added]
    lines += [f"  - removed {name}" for name in tools.removed]
    for change in tools.changed:
        what = [
            part
            for part, changed in (("inputSchema", change.schema), ("description", change.description))
            if changed
        ]
        lines.append(f"  ~ changed {change.tool}: {', '.join(what)}")
    for call in diff.calls:
        tool = (
            _short(call.tool.original)
            if call.tool.same
            else f"{_short(call.tool.original)} → {_short(call.tool.replay)}"
        )
        lines.append(
            f"call {call.index}: {tool} · arguments {_verdict(call.arguments)} · result {_verdict(call.result)}"
        )
        if not call.arguments.same:
            lines += [
                f"    arguments was {_short(call.arguments.original)}",
                f"    arguments now {_short(call.arguments.replay)}",
            ]
    if not diff.calls:
        lines.append("no tool calls on either side")
    lines.append(f"status: {diff.status.original} → {diff.status.replay} · answer {_verdict(diff.answer)}")
    lines.append("identical" if diff.same else "differs")
    return lines


class Command(BaseCommand):
    help = "Replay a recorded turn against today's servers and model profile, and print what differs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("turn", type=int, help="the turn's id (the number in #turn-ID on its page)")
        parser.add_argument("--user", help="who replays and owns the replay (default: the first superuser)")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = _actor(options["user"])
        original = Turn.objects.select_related("conversation").filter(pk=options["turn"]).first()
        if original is None:
            raise CommandError(f"no turn {options['turn']}")
        try:
            conversation, replay = turn_replay(turn=original, actor=actor, dispatch=False)
        except ReplayError as exc:
            raise CommandError(f"cannot replay turn {original.pk}: {exc}") from exc
        turn_run(turn_id=replay.pk)
        replay.refresh_from_db()
        path = reverse("inspector-conversation", kwargs={"public_id": conversation.public_id})
        self.stdout.write(
            f"replayed turn {original.seq} of “{original.conversation.title}” as {conversation.public_id} {path}"
        )
        for line in diff_lines(replay_diff(original=original, replay=replay)):
            self.stdout.write(line)
