"""``manage.py ask "QUESTION"``: one turn through the same agent loop, printed step by step.

The turn is recorded like any other (it shows up in the web UI under the chosen user) but runs
here, in this process, so the command ends when the turn does. ``--json`` prints the transcript
the API serves.

A turn of any size prints in bounded time and memory, as its page shows it: a reply of many tool
calls prints its first and last few calls (``selectors.CALLS_HEAD``, ``CALLS_TAIL``) and how many
are between; ``--json`` holds a turn's first ``API_STEPS_PAGE`` steps, with ``steps_count`` and
``steps_next`` (the API's path to the rest), as the API's answer does.

``--compare native,prompt_xml,...`` asks the same question once per listed run (``paradigm``, with
``--model``'s profile, or ``model:paradigm``), one after another, as a comparison the web UI shows
side by side, and prints a table of what each run cost and chose.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.management.color import Style
from django.urls import reverse

from conversations.escaping import hidden_marked
from conversations.loop.llm import tool_result_text
from conversations.loop.paradigms import PARADIGMS
from conversations.models import TOOL_CHOICE_MODES, Conversation, Exchange, ModelProfile, Step, Turn
from conversations.presentation import run_summary_json
from conversations.record.transcripts.document import transcript_document
from conversations.record.transcripts.fields import TranscriptDoc
from conversations.runner import turn_run
from conversations.selectors import (
    CALLS_COUNT,
    CALLS_HEAD,
    CALLS_TAIL,
    RunSummary,
    comparison_runs,
    loaded_calls,
    loaded_exchanges,
    profiles_for_form,
    turn_rows,
)
from conversations.services import (
    DEMO_PROFILE_NAME,
    comparison_start,
    conversation_start,
    demo_format_profile_names,
    demo_format_profiles_ensure,
    demo_profile_ensure,
)
from inspector.api import API_STEPS_PAGE
from servers.models import McpServer
from servers.selectors import servers_for_form
from servers.services import DEMO_SERVER_NAME, demo_server_ensure

INDENT = "    "
DEFAULT_PARADIGM = "native"
# The tool-and-arguments cell of the summary table is cut here (the JSON has it whole).
TOOL_CELL_CHARS = 60
ANSWER_LINE_CHARS = 160


class Command(BaseCommand):
    help = "Ask one question through the agent loop and print every step (or the JSON transcript)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("question")
        parser.add_argument("--model", help=f"A model profile's name (default: {DEMO_PROFILE_NAME}).")
        parser.add_argument(
            "--paradigm", choices=sorted(PARADIGMS), help=f"default: {DEFAULT_PARADIGM}; not with --compare"
        )
        parser.add_argument(
            "--compare",
            metavar="RUNS",
            help="Run the question once per comma-separated PARADIGM or MODEL:PARADIGM "
            "(e.g. native,prompt_xml or demo:native,other:native) and print a comparison.",
        )
        parser.add_argument("--tool-choice", default="auto", choices=[key for key, _ in TOOL_CHOICE_MODES])
        parser.add_argument("--tool", default="", help="With --tool-choice named: the tool, as server/tool.")
        parser.add_argument(
            "--server",
            action="append",
            dest="servers",
            metavar="NAME",
            help="An MCP server to offer (repeatable; default: the demo server).",
        )
        parser.add_argument(
            "--user",
            help="The user to ask as, who owns the conversation (default: the first superuser; "
            "a user who is not staff may only start the stdio servers allowed to everyone).",
        )
        parser.add_argument("--json", action="store_true", help="Print the transcript as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        tool_choice: str = options["tool_choice"]
        tool: str = options["tool"]
        if tool_choice == "named" and "/" not in tool:
            raise CommandError("--tool-choice named needs --tool SERVER/TOOL, e.g. --tool demo/calculate")
        if tool and tool_choice != "named":
            raise CommandError("--tool only applies with --tool-choice named")
        if options["compare"] is not None:
            if options["paradigm"]:
                raise CommandError(
                    "--paradigm and --compare exclude each other: list the paradigms in --compare"
                )
            self._compare(options, runs=_compare_runs(options["compare"], model=options["model"]))
            return

        conversation, turn = conversation_start(
            owner=_owner(options["user"]),
            model_profile=_profile(options["model"]),
            question=options["question"],
            servers=_servers(options["servers"]),
            paradigm=options["paradigm"] or DEFAULT_PARADIGM,
            tool_choice=tool_choice,
            tool_choice_name=tool,
            dispatch=False,
        )
        turn_run(turn_id=turn.pk)
        turn.refresh_from_db()

        if options["json"]:
            self.stdout.write(turn_json(conversation=conversation))
        else:
            for line in turn_report(conversation=conversation, turn=turn, style=self.style):
                self.stdout.write(line)
        if turn.status != Turn.Status.DONE:
            raise CommandError(f"the turn {turn.status}: {hidden_marked(turn.error) or 'no answer'}")

    def _compare(self, options: dict[str, Any], *, runs: list[tuple[ModelProfile, str]]) -> None:
        """Start the comparison, run each turn here in turn, then print the table (or the JSON)."""
        comparison, turns = comparison_start(
            owner=_owner(options["user"]),
            question=options["question"],
            runs=runs,
            servers=_servers(options["servers"]),
            tool_choice=options["tool_choice"],
            tool_choice_name=options["tool"],
            dispatch=False,
        )
        for number, ((profile, paradigm), turn) in enumerate(zip(runs, turns, strict=True), start=1):
            if not options["json"]:
                self.stdout.write(f"[{number}/{len(turns)}] {paradigm} on {profile.name} …")
            turn_run(turn_id=turn.pk)
        summaries = comparison_runs(comparison=comparison)

        if options["json"]:
            document = {
                "comparison": str(comparison.public_id),
                "runs": [api_document(conversation=run.conversation) for run in summaries],
                "summary": [run_summary_json(run) for run in summaries],
            }
            self.stdout.write(json.dumps(document, indent=2))
        else:
            self._print_comparison(options["question"], summaries)
            path = reverse("inspector-comparison", kwargs={"public_id": comparison.public_id})
            self.stdout.write(f"Comparison {comparison.public_id}  {path}")
        unfinished = [run for run in summaries if run.status != Turn.Status.DONE]
        if unfinished:
            listed = "; ".join(
                f"{run.profile}:{run.paradigm} {run.status}: {hidden_marked(run.error) or 'no answer'}"
                for run in unfinished
            )
            raise CommandError(f"{len(unfinished)} of {len(summaries)} runs did not finish: {listed}")

    def _print_comparison(self, question: str, runs: list[RunSummary]) -> None:
        self.stdout.write("")
        self.stdout.write(f"Q: {hidden_marked(question)}")
        self.stdout.write("")
        table = [SUMMARY_COLUMNS, *(_summary_row(run) for run in runs)]
        widths = [max(len(row[column]) for row in table) for column in range(len(SUMMARY_COLUMNS))]
        for index, row in enumerate(table):
            self.stdout.write(
                hidden_marked(
                    "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                )
            )
            if index == 0:
                self.stdout.write("  ".join("-" * width for width in widths))
        self.stdout.write("")
        for run in runs:
            answer = " ".join(run.answer.split()) or f"({run.status}: {run.error or 'no answer'})"
            self.stdout.write(
                hidden_marked(f"{run.paradigm} · {run.profile}: {_cut(answer, ANSWER_LINE_CHARS)}")
            )


def api_document(*, conversation: Conversation) -> TranscriptDoc:
    """The transcript the API serves: a turn of more than ``API_STEPS_PAGE`` steps holds its
    first ones, ``steps_count`` and ``steps_next``, the API's path to the next ones."""
    document = transcript_document(conversation=conversation, steps_per_turn=API_STEPS_PAGE)
    for turn in document["turns"]:
        if "steps_count" in turn and turn["steps"]:
            after = turn["steps"][-1]["seq"]
            turn["steps_next"] = reverse("api-turn-steps", args=[turn["id"]]) + f"?after={after}"
    return document


def turn_json(*, conversation: Conversation) -> str:
    """What ``--json`` prints for one turn's conversation: the API's document, every character
    past ASCII escaped (the same JSON value; a bidi override a model wrote cannot reorder the
    terminal's line, and control characters are escaped by JSON itself)."""
    return (
        json.dumps(api_document(conversation=conversation), indent=2, ensure_ascii=True, sort_keys=True)
        + "\n"
    )


def turn_report(*, conversation: Conversation, turn: Turn, style: Style) -> Iterator[str]:
    """The lines the command prints for ``turn``: each row and its tool calls with their
    details and exchanges (of a row of many calls, the first and last few and a count of the
    others), the answer or the error, and where the conversation is in the browser."""
    profile = conversation.model_profile
    servers = ", ".join(s.name for s in conversation.servers.order_by("name")) or "none"
    choice = turn.tool_choice + (f" {turn.tool_choice_name}" if turn.tool_choice_name else "")
    yield f"Q: {hidden_marked(turn.question)}"
    yield f"model {profile}  ·  paradigm {turn.paradigm}  ·  tool choice {choice}  ·  servers {servers}"
    yield ""
    for step in turn_rows(turn=turn):
        yield from _step_lines(step, depth=0, style=style)
        children = loaded_calls(step)
        total = max(getattr(step, CALLS_COUNT, 0), len(children))
        for index, child in enumerate(children):
            if total > len(children) and index == CALLS_HEAD:
                yield f"{INDENT}… {_more(total - len(children), total, 'tool calls')}: {_steps_path(turn)}"
            yield from _step_lines(child, depth=1, style=style)
    yield ""
    if turn.status == Turn.Status.DONE:
        yield style.SUCCESS(f"Answer: {hidden_marked(turn.answer)}")
    else:
        yield style.ERROR(f"Turn {turn.status}: {hidden_marked(turn.error)}")
    path = reverse("inspector-conversation", kwargs={"public_id": conversation.public_id})
    yield f"Conversation {conversation.public_id}  {path}"


def _more(left: int, total: int, what: str) -> str:
    return f"{left:,} more {what} of this reply (of {total:,})"


def _steps_path(turn: Turn) -> str:
    """Where every step of ``turn`` is, for a reader who wants the calls a row leaves out."""
    return f"every one on the conversation page, or {reverse('api-turn-steps', args=[turn.pk])}?after=0"


def _step_lines(step: Step, *, depth: int, style: Style) -> Iterator[str]:
    pad = INDENT * depth
    status = style.ERROR(step.status) if step.status == Step.Status.ERROR else step.status
    yield f"{pad}[{step.seq}] {step.kind} · {status} · {hidden_marked(step.title)}"
    for detail in _step_details(step):
        # Marked before it is split: a line or paragraph separator is shown, not obeyed.
        for line in hidden_marked(detail).split("\n") or [""]:
            yield f"{pad}{INDENT}{line}"
    for exchange in loaded_exchanges(step):
        yield f"{pad}{INDENT}⇄ {hidden_marked(_exchange_line(exchange))}"


def _step_details(step: Step) -> list[str]:
    """What a reader needs to follow the step: calls and their verdicts, tool input and output."""
    lines: list[str] = []
    if step.kind == Step.Kind.DECIDE:
        calls = (
            [call for call in step.calls if isinstance(call, dict)] if isinstance(step.calls, list) else []
        )
        if len(calls) > CALLS_HEAD + CALLS_TAIL:
            left = len(calls) - CALLS_HEAD - CALLS_TAIL
            lines.extend(_call_line(call) for call in calls[:CALLS_HEAD])
            lines.append(f"… {_more(left, len(calls), 'calls')}")
            lines.extend(_call_line(call) for call in calls[-CALLS_TAIL:])
        else:
            lines.extend(_call_line(call) for call in calls)
        if step.text:
            lines.append(f"text: {step.text}")
    elif step.kind == Step.Kind.TOOL:
        # The title already names server/tool.
        lines.append(f"arguments {_compact(step.arguments)}")
        if step.result is not None:
            lines.append(f"result: {tool_result_text(step.result)}")
    elif step.text:
        lines.append(step.text)
    lines.extend(f"! {note}" for note in step.diagnostics)
    if step.error:
        lines.append(f"error: {step.error}")
    return lines


def _call_line(call: dict[str, Any]) -> str:
    verdict = "valid" if call.get("valid") else f"invalid: {call.get('error')}"
    arguments = call.get("arguments")
    shown = _compact(arguments) if arguments is not None else repr(call.get("arguments_text", ""))
    return f"call {call.get('name')} {shown} — {verdict}"


SUMMARY_COLUMNS = (
    "paradigm",
    "model",
    "status",
    "steps",
    "model calls",
    "tokens in/out",
    "prompt tokens",
    "model ms",
    "wall ms",
    "tool + arguments",
    "answered",
)


def _number(value: float | int | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _summary_row(run: RunSummary) -> tuple[str, ...]:
    """One line of the comparison table; the same measurements the compare page shows."""
    tool = f"{run.tool} {_compact(run.arguments)}" if run.tool else "-"
    return (
        run.paradigm,
        run.profile,
        run.status,
        str(run.steps),
        str(run.model_calls),
        f"{_number(run.tokens_in)}/{_number(run.tokens_out)}",
        _number(run.prompt_tokens),
        _number(run.llm_ms),
        _number(run.wall_ms),
        _cut(tool, TOOL_CELL_CHARS),
        "yes" if run.answered else "no",
    )


def _compare_runs(spec: str, *, model: str | None) -> list[tuple[ModelProfile, str]]:
    """The runs ``--compare`` lists, checked before anything is created.

    Raises:
        CommandError: fewer than two runs, an unknown paradigm or model, or a run listed twice.
    """
    entries = [entry.strip() for entry in spec.split(",") if entry.strip()]
    if len(entries) < 2:
        raise CommandError("--compare needs at least two runs, e.g. --compare native,prompt_xml")
    runs: list[tuple[ModelProfile, str]] = []
    for entry in entries:
        # Profile names may hold a colon (llama3:8b); paradigm keys never do.
        name, colon, paradigm = entry.rpartition(":")
        if colon and not name:
            raise CommandError(f"--compare entry {entry!r}: write PARADIGM or MODEL:PARADIGM")
        if paradigm not in PARADIGMS:
            raise CommandError(
                f"--compare entry {entry!r}: no paradigm {paradigm!r}; choose from: {_names(PARADIGMS)}"
            )
        profile = _profile(name if colon else model)
        if any(profile.pk == seen.pk and paradigm == key for seen, key in runs):
            raise CommandError(
                f"--compare lists the run {profile.name}:{paradigm} twice; "
                "each run must differ in model or paradigm"
            )
        runs.append((profile, paradigm))
    return runs


def _exchange_line(exchange: Exchange) -> str:
    duration = f"{exchange.duration_ms:.0f} ms" if exchange.duration_ms is not None else "-"
    return f"{exchange.channel} {exchange.label} · {exchange.status or '-'} · {duration}"


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _owner(username: str | None) -> AbstractBaseUser:
    """The user the command runs as: the one named, else the first superuser.

    Whoever runs ``manage.py`` already runs code as the app, so the command may act as a
    superuser (and start any stdio server, as staff may); it never makes up a user of its own,
    which could not start a registered stdio server and would own conversations nobody can sign
    in to see.

    Raises:
        CommandError: no user has that name, or (without ``--user``) there is no superuser.
    """
    users = get_user_model().objects
    if username:
        user = users.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        return user
    superuser = users.filter(is_superuser=True).order_by("pk").first()
    if superuser is None:
        raise CommandError(
            "no superuser to run as: create one (`make run` creates 'admin'; or `manage.py createsuperuser`) "
            "or name the user the conversation belongs to with --user NAME"
        )
    return superuser


def _profile(name: str | None) -> ModelProfile:
    if not name or name == DEMO_PROFILE_NAME:
        return demo_profile_ensure()
    profile = profiles_for_form().filter(name=name).first()
    if profile is None and name in demo_format_profile_names():
        # "demo anthropic streamed" and the like: the demo model in a provider's wire format,
        # created on first use here as `make run` creates them.
        demo_format_profiles_ensure(stream=name.endswith(" streamed"))
        profile = profiles_for_form().filter(name=name).first()
    if profile is None:
        valid = _names(
            [
                DEMO_PROFILE_NAME,
                *profiles_for_form().values_list("name", flat=True),
                *sorted(demo_format_profile_names()),
            ]
        )
        raise CommandError(f"no model profile named {name!r}; choose one of: {valid}")
    return profile


def _servers(names: list[str] | None) -> list[McpServer]:
    if not names:
        return [demo_server_ensure()]
    if DEMO_SERVER_NAME in names:
        demo_server_ensure()
    available = {server.name: server for server in servers_for_form()}
    unknown = [name for name in names if name not in available]
    if unknown:
        valid = _names([DEMO_SERVER_NAME, *available])
        raise CommandError(f"no enabled MCP server named {_names(unknown)}; choose from: {valid}")
    return [available[name] for name in dict.fromkeys(names)]


def _names(names: Iterable[str]) -> str:
    """The names, each once, in order."""
    return ", ".join(dict.fromkeys(names))
