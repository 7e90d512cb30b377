"""A hostile model endpoint that stays within the wire format but not within reason: a reply of
10,000 tool calls, a gzip and a deflate bomb, an answer of 200 MB, a body in an encoding the
client never offered (brotli), a call of an MCP tool that writes one endless stdout line. Every
case, in every wire format, streamed and not, ends in bounded memory with the limit it met
recorded and shown.

Every case meets every paradigm, streamed and not (the calls written as the paradigm reads them:
``hostile_model.in_paradigm``), and every wire format streamed and not (``cells``).

The turn runs here, in the test's process, as ``manage.py ask`` and the in-process runner run
one; its memory is that process's peak resident size over the turn: the kernel's high-water
mark (``VmHWM``), reset to the current size just before the turn (``/proc/self/clear_refs``),
so a peak an earlier test reached hides nothing. The bounds are generous; without the limits
these cases take gigabytes (a bomb) or thousands of MCP calls (the calls).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from html import unescape
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings

from conversations.loop.paradigms import PARADIGMS
from conversations.loop.providers import PROVIDERS
from conversations.models import Exchange, ModelProfile, Step, Turn
from conversations.runner import turn_run
from conversations.services import conversation_start
from servers import gateway
from servers.models import McpServer
from servers.services import demo_server_ensure
from tests.conftest import REPO_ROOT
from tests.conversations.hostile_model import (
    BOMBS,
    BROTLI,
    ENDLESS_LINE,
    HUGE,
    MANY,
    HostileModel,
    paradigm_model,
)

pytestmark = pytest.mark.django_db(transaction=True)

WIRES = list(PROVIDERS)
PARADIGM_KEYS = list(PARADIGMS)
BODY_LIMIT = 4_000_000
# A few megabytes of HTML at most, whatever the turn held.
PAGE_LIMIT = 3_000_000
# Growth of the peak resident size one turn may cause: a few copies of the body limit, far
# below the 200 MB answer (decoded whole, it alone would pass this).
MEMORY_LIMIT = 150_000_000


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileModel]:
    model = HostileModel()
    yield model
    model.close()


@pytest.fixture(scope="module", autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.fixture
def alice(django_user_model: type[User]) -> User:
    return django_user_model.objects.create_user("alice")


def _status(field: str) -> int:
    """A size the kernel reports for this process in ``/proc/self/status``, in bytes."""
    match = re.search(rf"^{field}:\s+(\d+) kB$", Path("/proc/self/status").read_text(), re.MULTILINE)
    assert match is not None, f"no {field} in /proc/self/status"
    return int(match.group(1)) * 1024


def _peak_reset() -> int:
    """Set this process's peak resident size to its current size (Linux, ``clear_refs`` 5) and
    return that size."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status("VmHWM")


def _run(
    hostile: HostileModel,
    alice: User,
    case: str,
    wire: str,
    stream: bool,
    paradigm: str,
    servers: list,  # type: ignore[type-arg]
    **limits: int,
) -> tuple[Turn, int]:
    """Run one turn of ``case`` here; the turn, and how far above its start this process's
    resident size rose while it ran."""
    profile = ModelProfile.objects.create(
        name=f"abuse {case} {wire} {stream} {paradigm}",
        provider=wire,
        model=paradigm_model(case, paradigm),
        base_url=hostile.base_url(wire),
        stream=stream,
        deadline_seconds=600,
        **limits,
    )
    _, turn = conversation_start(
        owner=alice,
        model_profile=profile,
        question="What will the weather be like in Paris tomorrow?",
        servers=servers,
        paradigm=paradigm,
        dispatch=False,
    )
    before = _peak_reset()
    turn_run(turn_id=turn.pk)
    grown = _status("VmHWM") - before
    turn.refresh_from_db()
    return turn, grown


def _page(client: Client, alice: User, turn: Turn) -> str:
    client.force_login(alice)
    response = client.get(reverse("inspector-conversation", args=[turn.conversation.public_id]))
    assert response.status_code == 200
    html = response.content.decode()
    assert len(html) < PAGE_LIMIT, len(html)
    return html


def cells(cases: list[str], paradigms: list[str] = PARADIGM_KEYS) -> list[object]:
    """Each case through each paradigm, streamed and not; the wire formats take turns so that
    each case also meets each format streamed and each format not (5 or more paradigms)."""
    return [
        pytest.param(
            case,
            WIRES[(c + p + s) % len(WIRES)],
            bool(s),
            paradigm,
            id=f"{case}-{paradigm}-{WIRES[(c + p + s) % len(WIRES)]}-{'stream' if s else 'whole'}",
        )
        for c, case in enumerate(cases)
        for p, paradigm in enumerate(paradigms)
        for s in (0, 1)
    ]


BOMB_MATRIX = cells(list(BOMBS))


@pytest.mark.parametrize(("case", "wire", "stream", "paradigm"), BOMB_MATRIX)
def test_a_body_that_decodes_past_the_limit_fails_the_turn_with_the_cut_recorded_and_shown(
    hostile: HostileModel,
    alice: User,
    client: Client,
    settings: Settings,
    case: str,
    wire: str,
    stream: bool,
    paradigm: str,
) -> None:
    settings.RESPONSE_BODY_LIMIT = BODY_LIMIT
    turn, grown = _run(hostile, alice, case, wire, stream, paradigm, [])

    assert turn.status == Turn.Status.FAILED
    assert "RESPONSE_BODY_LIMIT" in turn.error and f"{BODY_LIMIT:,} bytes" in turn.error
    assert len(turn.answer) < BODY_LIMIT
    cut = Exchange.objects.get(turn=turn, channel=Exchange.Channel.LLM)
    assert cut.status == "error" and "RESPONSE_BODY_LIMIT" in cut.error
    arrived = re.search(r"([\d,]+) bytes(?: \(\w+-encoded\))? had arrived over the wire", cut.error)
    assert arrived is not None, cut.error
    wire_bytes = int(arrived.group(1).replace(",", ""))
    if BOMBS[case]:
        # A bomb: what came over the wire is a small part of what it decoded to.
        assert f"({BOMBS[case]}-encoded)" in cut.error
        assert wire_bytes < BODY_LIMIT // 10
    else:
        assert BODY_LIMIT <= wire_bytes < HUGE
    error = Step.objects.get(turn=turn, kind="error")
    assert "RESPONSE_BODY_LIMIT" in error.error
    assert grown < MEMORY_LIMIT, grown
    assert "RESPONSE_BODY_LIMIT" in _page(client, alice, turn)


# The paradigms that read several calls from one reply: native calling, XML (an <invoke> each),
# JSON (an array), and auto (native first). Natively streamed (native, auto), 10,000 calls are
# 20,000 to 40,000 events: a minute or more on a busy machine (slow); a prompt paradigm's reply
# is one text.
MANY_AT_ONCE = ["native", "prompt_xml", "prompt_json", "auto"]
_NATIVE_STREAM = (pytest.mark.slow, pytest.mark.timeout(600))
MANY_CELLS = [
    *(
        pytest.param(
            "many-calls", wire, stream, paradigm, id=f"many-calls-{paradigm}-{wire}-{name}", marks=marks
        )
        for paradigm in ("native", "auto")
        for wire in (WIRES if paradigm == "native" else WIRES[:1])
        for stream, name, marks in ((False, "whole", ()), (True, "stream", _NATIVE_STREAM))
    ),
    *cells(["many-calls"], ["prompt_xml", "prompt_json"]),
]
# The paradigms of one call per decision (its schema has one tool slot; intent fills one tool):
# the reply of 10,000 calls is a JSON array of 10,000 decisions, or 10,000 labels.
ONE_AT_A_TIME = [key for key in PARADIGM_KEYS if key not in MANY_AT_ONCE]


@pytest.mark.parametrize(("case", "wire", "stream", "paradigm"), MANY_CELLS)
def test_a_reply_of_ten_thousand_calls_runs_sixteen_over_mcp_and_the_page_says_so(
    hostile: HostileModel, alice: User, client: Client, case: str, wire: str, stream: bool, paradigm: str
) -> None:
    turn, grown = _run(hostile, alice, case, wire, stream, paradigm, [demo_server_ensure()])

    assert turn.status == Turn.Status.DONE, turn.error
    tools = Step.objects.filter(turn=turn, kind="tool")
    assert tools.count() == 16
    assert Exchange.objects.filter(turn=turn, channel=Exchange.Channel.MCP, label="tools/call").count() == 16
    decide = Step.objects.filter(turn=turn, kind="decide").order_by("seq").first()
    assert decide is not None and len(decide.calls) == 16
    note = (
        f"the reply held {MANY} tool calls and at most 16 of one reply are run "
        "(the profile max_calls_per_reply, or AGENT_MAX_CALLS_PER_REPLY)"
    )
    assert any(note in str(d) for d in decide.diagnostics), decide.diagnostics
    assert grown < MEMORY_LIMIT, grown
    assert note in _page(client, alice, turn)


@pytest.mark.parametrize(("case", "wire", "stream", "paradigm"), cells(["many-calls"], ONE_AT_A_TIME))
def test_a_reply_of_ten_thousand_calls_to_a_paradigm_of_one_call_runs_one_at_most(
    hostile: HostileModel, alice: User, client: Client, case: str, wire: str, stream: bool, paradigm: str
) -> None:
    turn, grown = _run(hostile, alice, case, wire, stream, paradigm, [demo_server_ensure()])

    assert turn.status in (Turn.Status.DONE, Turn.Status.FAILED), turn.status
    decisions = Step.objects.filter(turn=turn, kind="decide").count()
    sent = Exchange.objects.filter(turn=turn, channel=Exchange.Channel.MCP, label="tools/call").count()
    assert sent <= max(decisions, 1), (sent, decisions)
    assert grown < MEMORY_LIMIT, grown
    page = unescape(_page(client, alice, turn))
    diagnostics = [str(d) for step in Step.objects.filter(turn=turn) for d in step.diagnostics]
    assert diagnostics and all(d[:80] in page for d in diagnostics), diagnostics


@pytest.mark.parametrize(("case", "wire", "stream", "paradigm"), cells([BROTLI]))
def test_a_body_in_an_encoding_never_offered_is_kept_as_it_came_and_not_decoded(
    hostile: HostileModel, alice: User, client: Client, case: str, wire: str, stream: bool, paradigm: str
) -> None:
    turn, grown = _run(hostile, alice, case, wire, stream, paradigm, [])

    # The client offers what it can decode, and brotli is not installed: never "br".
    assert hostile.accepted and "br" not in hostile.accepted[-1].replace(" ", "").split(",")
    assert turn.status == Turn.Status.FAILED
    exchange = Exchange.objects.get(turn=turn, channel=Exchange.Channel.LLM)
    headers = {str(name).lower(): value for name, value in exchange.response_headers.items()}
    assert headers.get("content-encoding") == "br", headers
    # What arrived is what was sent (the bytes kept, escaped where they are not text), not a decoding.
    assert len(exchange.response_body) >= 256 * 64
    assert grown < MEMORY_LIMIT, grown
    assert turn.error and turn.error[:40] in _page(client, alice, turn)


def _broken_server() -> McpServer:
    return McpServer.objects.create(
        name="broken",
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.fixtures.broken_server"],
        cwd=str(REPO_ROOT),
        call_timeout=2,
        allow_non_staff_spawn=True,
    )


# Each case waits out the call's timeout (2 s).
@pytest.mark.parametrize(("case", "wire", "stream", "paradigm"), cells([ENDLESS_LINE]))
def test_a_tool_writing_one_endless_line_ends_the_turn_in_bounded_memory_with_the_cut_shown(
    hostile: HostileModel,
    alice: User,
    client: Client,
    settings: Settings,
    case: str,
    wire: str,
    stream: bool,
    paradigm: str,
) -> None:
    settings.MCP_STDOUT_LINE_LIMIT = 1_000_000
    server = _broken_server()
    try:
        turn, grown = _run(hostile, alice, case, wire, stream, paradigm, [server])
    finally:
        # The server writes on after the call: its session is closed now, not read on meanwhile.
        gateway.close_server(server.pk)

    # The call ends at its timeout; the model is told and answers: the turn ends.
    assert turn.status == Turn.Status.DONE, turn.error
    tool = Step.objects.get(turn=turn, kind="tool")
    assert tool.tool_name == "endless_line" and tool.error
    cut = Exchange.objects.filter(
        turn=turn, channel=Exchange.Channel.MCP, error__contains="MCP_STDOUT_LINE_LIMIT"
    )
    assert cut.exists()
    # What arrived is kept up to the limit, marked; the rest of the line is counted, not held.
    assert max(len(e.response_body) for e in cut) <= 1_000_000
    assert any(
        "a line longer than 1,000,000 bytes (MCP_STDOUT_LINE_LIMIT)" in e.error
        and "the rest is counted and not kept" in e.error
        for e in cut
    )
    assert grown < MEMORY_LIMIT, grown
    assert "MCP_STDOUT_LINE_LIMIT" in _page(client, alice, turn)


# 10,000 tool steps through the real recorder: about two minutes on PostgreSQL under load, more
# on SQLite's single writer.
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_reply_of_ten_thousand_calls_with_the_limits_raised_makes_a_page_of_its_ends(
    hostile: HostileModel, alice: User, client: Client, settings: Settings
) -> None:
    # Every call of the reply is taken (each a tool step); the first 200 are sent over MCP, the
    # rest refused as past the turn's limit: a turn of 10,000 tool steps, as an old record or a
    # raised limit leaves one, with the real recorder.
    settings.AGENT_MAX_CALLS_PER_REPLY = MANY
    settings.AGENT_MAX_CALLS_PER_TURN = 200
    turn, _ = _run(hostile, alice, "many-calls", "openai_chat", False, "native", [demo_server_ensure()])

    decide = Step.objects.filter(turn=turn, kind="decide").order_by("seq").first()
    assert decide is not None and len(decide.calls) == MANY
    tools = list(decide.children.order_by("seq").values_list("pk", flat=True))
    assert len(tools) == MANY
    html = _page(client, alice, turn)
    assert len(html) < 500_000, len(html)
    assert [pk for pk in tools if f'id="tool-step-{pk}"' in html] == tools[:5] + tools[-5:]
    assert f'<span class="calls-left">{MANY - 10}</span> more tool calls of this reply (of {MANY})' in html


def test_a_profiles_own_call_limits_replace_the_global_settings(
    hostile: HostileModel, alice: User, client: Client
) -> None:
    turn, _ = _run(
        hostile, alice, "many-calls", WIRES[0], False, "native", [demo_server_ensure()], max_calls_per_reply=3
    )

    assert turn.status == Turn.Status.DONE, turn.error
    assert Step.objects.filter(turn=turn, kind="tool").count() == 3
    assert Exchange.objects.filter(turn=turn, channel=Exchange.Channel.MCP, label="tools/call").count() == 3
    note = f"the reply held {MANY} tool calls and at most 3 of one reply are run"
    decide = Step.objects.filter(turn=turn, kind="decide").order_by("seq").first()
    assert decide is not None and any(note in str(d) for d in decide.diagnostics), decide.diagnostics


def test_a_profiles_own_turn_call_limit_replaces_the_global_setting(
    hostile: HostileModel, alice: User
) -> None:
    turn, _ = _run(
        hostile, alice, "many-calls", WIRES[0], False, "native", [demo_server_ensure()], max_calls_per_turn=2
    )

    assert Exchange.objects.filter(turn=turn, channel=Exchange.Channel.MCP, label="tools/call").count() == 2
    refused = Step.objects.filter(
        turn=turn, kind="tool", error__contains="this turn has sent its 2 tool calls"
    )
    assert refused.count() == 14


def test_a_profiles_own_body_limit_replaces_the_global_setting(
    hostile: HostileModel, alice: User, settings: Settings
) -> None:
    assert settings.RESPONSE_BODY_LIMIT > BODY_LIMIT
    case = next(iter(BOMBS))
    turn, _ = _run(
        hostile, alice, case, WIRES[0], False, PARADIGM_KEYS[0], [], response_body_limit=BODY_LIMIT
    )

    assert turn.status == Turn.Status.FAILED
    assert f"{BODY_LIMIT:,} bytes" in turn.error


def test_ask_prints_a_turn_of_many_calls_by_its_first_and_last_and_a_count(
    hostile: HostileModel, django_user_model: type[User]
) -> None:
    django_user_model.objects.create_superuser("admin")
    profile = ModelProfile.objects.create(
        name="abuse many calls for ask",
        provider=WIRES[0],
        model=paradigm_model("many-calls", "native"),
        base_url=hostile.base_url(WIRES[0]),
        max_calls_per_reply=40,
    )
    out = StringIO()

    call_command(
        "ask", "What will the weather be like in Paris tomorrow?", "--model", profile.name, stdout=out
    )

    text = out.getvalue()
    turn = Turn.objects.get(conversation__model_profile=profile)
    assert Step.objects.filter(turn=turn, kind="tool").count() == 40
    assert len(re.findall(r"^    \[\d+\] tool ", text, re.MULTILINE)) == 10
    assert "… 30 more tool calls of this reply (of 40): " in text
    assert "… 30 more calls of this reply (of 40)" in text
    assert f"the reply held {MANY:,} tool calls" in text or f"the reply held {MANY} tool calls" in text
