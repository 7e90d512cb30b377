"""A hostile model endpoint, end to end: every misbehaviour, in every wire format, streamed and
not, through every paradigm, ends the turn done or failed — never running — with the raw
response stored, a diagnosis on a step, and the conversation's page, API and export answering.

The endpoint is ``hostile_model.HostileModel`` (stdlib HTTP on 127.0.0.1). The matrix offers no
tools (a refused call is recorded all the same); the cases whose calls must reach a real tool use
the bundled demo MCP server over stdio.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import DataError, connection, transaction
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings

from conversations import selectors
from conversations.loop.llm import Message
from conversations.loop.paradigms import PARADIGMS
from conversations.loop.providers import PROVIDERS, Endpoint, ModelRequest, ProviderError
from conversations.models import Exchange, ModelProfile, Step, Turn
from conversations.record.transcripts.export import BINARY_FORMATS, EXPORT_FORMATS
from conversations.runner import turn_run
from conversations.services import conversation_start
from inspector import walkthrough
from inspector.preferences import preference_set
from servers import gateway
from servers.services import demo_server_ensure
from tests.conversations.hostile_model import CASES, NOT_UTF8, HostileModel, answer

pytestmark = pytest.mark.django_db(transaction=True)

WIRES = list(PROVIDERS)
PARADIGM_KEYS = list(PARADIGMS)
# Every case in every wire format, streamed and not; the paradigms take turns, so each case
# meets every paradigm and each paradigm every format.
MATRIX = [
    pytest.param(
        case,
        wire,
        stream,
        PARADIGM_KEYS[index % len(PARADIGM_KEYS)],
        id=f"{case}-{wire}-{'stream' if stream else 'whole'}",
    )
    for index, (case, wire, stream) in enumerate(itertools.product(CASES, WIRES, (False, True)))
]
# Replies that are odd but may be a fine final answer (e.g. text under native calling).
PLAIN_ANSWERS = {"ok", "deep-text", "nan-json-text", "huge-text"}
# How long a hostile call may take in these tests (the endless stream is cut at it).
DEADLINE = 0.5


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileModel]:
    model = HostileModel()
    yield model
    model.close()


@pytest.fixture(scope="module", autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.fixture(autouse=True)
def _small_bodies(settings: Settings) -> None:
    # The huge reply passes the limit, so its cut marker is exercised too.
    settings.EXCHANGE_BODY_LIMIT = 100_000


@pytest.fixture
def alice(django_user_model: type[User]) -> User:
    return django_user_model.objects.create_user("alice")


def _profile(hostile: HostileModel, case: str, wire: str, stream: bool) -> ModelProfile:
    return ModelProfile.objects.create(
        name=f"hostile {case} {wire} {stream}",
        provider=wire,
        model=case,
        base_url=hostile.base_url(wire),
        stream=stream,
        deadline_seconds=DEADLINE,
    )


@pytest.mark.parametrize(("case", "wire", "stream", "paradigm"), MATRIX)
def test_a_hostile_reply_ends_the_turn_with_the_raw_response_and_a_diagnosis_and_every_view_answers(
    hostile: HostileModel, alice: User, client: Client, case: str, wire: str, stream: bool, paradigm: str
) -> None:
    conversation, turn = conversation_start(
        owner=alice,
        model_profile=_profile(hostile, case, wire, stream),
        question="What will the weather be like in Paris tomorrow?",
        # No MCP server: every call names a tool not offered, and the model is told so (a
        # server's spawn per test would cost most of the matrix's time; the cases that reach
        # a real tool are below).
        servers=[],
        paradigm=paradigm,
        dispatch=False,
    )

    turn_run(turn_id=turn.pk)

    turn.refresh_from_db()
    assert turn.status in {Turn.Status.DONE, Turn.Status.FAILED}, turn.error
    steps = list(Step.objects.filter(turn=turn))
    assert [s.title for s in steps if s.status == Step.Status.RUNNING] == []
    assert "internal error" not in turn.error and "database failed" not in turn.error
    answers = Exchange.objects.filter(turn=turn, channel=Exchange.Channel.LLM).exclude(status="")
    assert answers.exists(), "no model response was stored"
    if case not in PLAIN_ANSWERS:
        assert any(s.error or s.diagnostics for s in steps), [(s.kind, s.title, s.text[:80]) for s in steps]
    if case == "endless-stream":
        cut = answers.get(status="timeout")
        assert f"deadline of {DEADLINE:g} s" in cut.error and cut.response_body
    client.force_login(alice)
    # With teaching mode on, every field of every body is read for its note; the step-through
    # shows each body on a slide of its own.
    preference_set(user=alice, teaching=True)
    slides = len(walkthrough.turn_slides(selectors.turn_rows(turn=turn)))
    walk = reverse("inspector-turn-walk", args=[conversation.public_id, turn.pk])
    pages = [
        reverse("inspector-conversation", args=[conversation.public_id]),
        reverse("api-conversation", args=[conversation.public_id]),
        reverse("inspector-conversation-export", args=[conversation.public_id])
        + f"?format={EXPORT_FORMATS[CASES.index(case) % len(EXPORT_FORMATS)]}",
        *(f"{walk}?at={at}" for at in range(1, slides + 1)),
    ]
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, page
        b"".join(response.streaming_content) if response.streaming else response.content  # type: ignore[attr-defined]
    out = StringIO()
    call_command("export", str(conversation.public_id), "--format", "jsonl", stdout=out)
    assert out.getvalue()


@pytest.mark.parametrize(
    "case", ["surrogate-text", "nan-usage", "deep-args", "surrogate-name", "surrogate-args", "nul-args"]
)
def test_what_the_database_refuses_is_stored_escaped_and_said_beside_it(
    hostile: HostileModel, alice: User, case: str
) -> None:
    _, turn = conversation_start(
        owner=alice,
        model_profile=_profile(hostile, case, "openai_chat", False),
        question="What will the weather be like in Paris tomorrow?",
        servers=[demo_server_ensure()],
        dispatch=False,
    )

    turn_run(turn_id=turn.pk)

    decide = Step.objects.filter(turn=turn, kind__in=["answer", "decide"]).order_by("seq").first()
    assert decide is not None
    notes = " ".join(str(d) for d in decide.diagnostics)
    raw = Exchange.objects.filter(turn=turn, channel=Exchange.Channel.LLM).order_by("seq").first()
    assert raw is not None
    if case == "surrogate-text":
        # The step shows the escaped text and says so; the raw body holds the escape as sent.
        assert "\\ud800" in decide.text and "lone surrogate U+D800" in notes
        assert "\\ud800" in raw.response_body
    elif case == "nan-usage":
        assert decide.usage == {
            "prompt_tokens": "NaN",
            "completion_tokens": "Infinity",
            "total_tokens": "-Infinity",
        }
        assert "NaN" in notes
    elif case == "deep-args":
        assert "not valid JSON" in notes and "nests too deeply" in notes
    elif case == "surrogate-name":
        call = decide.calls[0]
        assert call["name"] == '"demo__get_\\ud800weather"' and call["valid"] is False
    else:
        # What the database refuses in the arguments is stored escaped.
        tool = Step.objects.get(turn=turn, kind="tool")
        assert tool.arguments["city"] in ('"\\udfff Paris"', '"Pa\\u0000ris"')
        assert "stored as a JSON string literal" in " ".join(str(d) for d in tool.diagnostics)
        if case == "surrogate-args":
            # No transport can carry it: refused before sending, saying where it is.
            assert tool.error == (
                "not sent: the arguments hold text no JSON encoder can send "
                "(lone surrogate at city, character 0: U+DFFF)"
            )
            assert not tool.exchanges.exists()
    turn.refresh_from_db()
    assert turn.status in {Turn.Status.DONE, Turn.Status.FAILED}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(
    ("case", "wire"),
    [
        ("non-utf8", "openai_chat"),
        ("html-500", "anthropic"),
        ("non-utf8-text", "openai_chat"),
        ("non-utf8-text", "gemini"),
    ],
)
def test_bytes_that_are_not_utf8_are_stored_escaped_and_the_response_sent_is_recoverable(
    hostile: HostileModel, alice: User, client: Client, case: str, wire: str, stream: bool
) -> None:
    conversation, turn = conversation_start(
        owner=alice,
        model_profile=_profile(hostile, case, wire, stream),
        question="What will the weather be like in Paris tomorrow?",
        servers=[],
        dispatch=False,
    )
    sent = b"".join(answer(wire, case, stream, continued=False).chunks)
    assert NOT_UTF8 in sent or b"\xff" in sent

    turn_run(turn_id=turn.pk)

    raw = Exchange.objects.filter(turn=turn, channel=Exchange.Channel.LLM).order_by("seq").first()
    assert raw is not None
    # Stored as the JSON string literal of the text decoded with surrogateescape: every byte
    # that is not UTF-8 is written \udcXX, and the bytes sent come back exactly.
    assert raw.response_body.startswith('"') and "\\udcff" in raw.response_body
    assert json.loads(raw.response_body).encode("utf-8", errors="surrogateescape") == sent
    assert "\ufffd" not in raw.response_body
    assert "not UTF-8" in raw.error
    steps = list(Step.objects.filter(turn=turn))
    notes = " ".join([*(s.error for s in steps), *(str(d) for s in steps for d in s.diagnostics)])
    assert "not UTF-8" in notes or "lone surrogate U+DCFF" in notes, notes
    if case == "non-utf8-text":
        answer_step = Step.objects.filter(turn=turn, kind__in=["answer", "decide"]).order_by("seq").first()
        assert answer_step is not None and "\\udcff\\udcfe\\udc80" in answer_step.text
        assert "not UTF-8" in " ".join(str(d) for d in answer_step.diagnostics)
    client.force_login(alice)
    page = client.get(reverse("inspector-conversation", args=[conversation.public_id]))
    assert page.status_code == 200
    verify = StringIO()
    call_command("verify", str(conversation.public_id), stdout=verify)


def test_a_text_cut_twice_names_its_true_length(settings: Settings) -> None:
    settings.EXCHANGE_BODY_LIMIT = 1000
    from conversations.record.exchanges import storable_body

    earlier = "x" * 1000 + "\n… [cut: 10600000 characters in all]"

    stored, problem = storable_body(earlier)

    assert stored == "x" * 1000 + "\n… [cut by the inspector: 10600000 characters in all]"
    assert problem is None


def test_fifty_parallel_calls_each_get_their_own_answer(hostile: HostileModel) -> None:
    def ask(index: int) -> str:
        wire = WIRES[index % len(WIRES)]
        case = ("ok", "malformed", "surrogate-text")[index % 3]
        endpoint = Endpoint(
            model=case, base_url=hostile.base_url(wire), api_key="", deadline=5.0, stream=index % 2 == 0
        )
        try:
            reply = PROVIDERS[wire](endpoint).complete(
                ModelRequest(messages=[Message(role="user", content="hi")])
            )
        except ProviderError as exc:
            assert exc.exchange is not None and exc.exchange.response_body
            return "unreadable"
        return reply.text or ""

    with ThreadPoolExecutor(max_workers=50) as pool:
        answers = list(pool.map(ask, range(50)))

    for index, text in enumerate(answers):
        if index % 3 == 0:
            assert text == "All good."
        elif index % 3 == 1:
            assert text == "unreadable"
        else:  # escaped, losslessly: the JSON string literal of what was sent
            assert json.loads(text) == "bad \ud800 text \udfff end"


def test_a_lone_surrogate_stored_before_the_escaping_is_shown_escaped_by_every_view(
    hostile: HostileModel, alice: User, client: Client, tmp_path: Path
) -> None:
    conversation, turn = conversation_start(
        owner=alice,
        model_profile=_profile(hostile, "ok", "openai_chat", False),
        question="What will the weather be like in Paris tomorrow?",
        servers=[],
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    bad = "left \ud800 right"
    if connection.vendor == "postgresql":
        # PostgreSQL refuses it outright, so no record there can hold one.
        with pytest.raises(DataError), transaction.atomic():
            Step.objects.filter(turn=turn).update(calls=[{"name": bad}])
        return
    # As an older version stored it (SQLite keeps JSON text, "\ud800" escapes and all).
    Step.objects.filter(turn=turn).update(
        calls=[{"name": bad, "arguments": {bad: bad}}],
        diagnostics=[bad],
        result={"content": [{"type": "text", "text": bad}]},
    )
    Turn.objects.filter(pk=turn.pk).update(
        transcript=[{"role": "assistant", "content": bad}], tools=[{"name": bad}]
    )
    client.force_login(alice)

    pages = [
        reverse("inspector-conversation", args=[conversation.public_id]),
        reverse("api-conversation", args=[conversation.public_id]),
        *(
            reverse("inspector-conversation-export", args=[conversation.public_id]) + f"?format={fmt}"
            for fmt in EXPORT_FORMATS
        ),
    ]
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, page
        body = b"".join(response.streaming_content) if response.streaming else response.content  # type: ignore[attr-defined]
        if "export" not in page or page.endswith("=json"):  # JSONL and OTLP carry other parts
            assert b"\\ud800" in body, page
    for fmt in EXPORT_FORMATS:
        if fmt in BINARY_FORMATS:  # written to a file only
            path = tmp_path / f"export.{fmt}"
            call_command("export", str(conversation.public_id), "--format", fmt, "--output", str(path))
            assert path.read_bytes()
            continue
        out = StringIO()
        call_command("export", str(conversation.public_id), "--format", fmt, stdout=out)
        assert out.getvalue()
