"""``manage.py cancel TURN_ID``: stops a turn wherever it runs and says how it ended."""

from __future__ import annotations

import threading
import time
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from pytest_django.fixtures import Settings

from conversations.models import Step, Turn
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure
from servers import gateway
from servers.services import demo_server_ensure

WEATHER = "What will the weather be like in Beijing tomorrow?"


def _turn(*, status: str = Turn.Status.QUEUED, question: str = WEATHER) -> Turn:
    owner = User.objects.get_or_create(username="alice")[0]
    _, turn = conversation_start(
        owner=owner,
        model_profile=demo_profile_ensure(),
        question=question,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    Turn.objects.filter(pk=turn.pk).update(status=status)
    return turn


def _cancel(*args: str) -> str:
    out = StringIO()
    call_command("cancel", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_a_queued_turn_is_cancelled_and_the_step_names_the_command_line() -> None:
    turn = _turn()

    assert (
        _cancel(str(turn.pk))
        == f"turn {turn.pk}: cancelled (cancelled by the command line before it started)\n"
    )

    assert Step.objects.get(turn=turn).title == "cancelled by the command line"


@pytest.mark.django_db
def test_the_user_cancelling_can_be_named() -> None:
    User.objects.create_user("carol")
    turn = _turn(status=Turn.Status.RUNNING)

    assert _cancel(str(turn.pk), "--user", "carol", "--wait", "0") == (
        f"turn {turn.pk}: cancel requested; it ends within seconds\n"
    )

    assert Turn.objects.get(pk=turn.pk).cancel_requested_by == "carol"


@pytest.mark.django_db
def test_a_running_turn_that_does_not_end_in_time_is_reported() -> None:
    turn = _turn(status=Turn.Status.RUNNING)  # nobody runs it: nobody will stop it

    with pytest.raises(CommandError, match="still running after 0.3 s"):
        _cancel(str(turn.pk), "--wait", "0.3")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("turn_id", "problem"), [("finished", "already finished \\(done\\)"), ("missing", "there is no turn")]
)
def test_a_finished_or_missing_turn_is_an_error(turn_id: str, problem: str) -> None:
    turn = _turn(status=Turn.Status.DONE)

    with pytest.raises(CommandError, match=problem):
        _cancel(str(turn.pk if turn_id == "finished" else turn.pk + 1000))

    assert Turn.objects.get(pk=turn.pk).status == Turn.Status.DONE


@pytest.mark.django_db(transaction=True)
def test_a_turn_stuck_in_a_model_call_is_stopped_from_the_command_line(settings: Settings) -> None:
    settings.TURN_CANCEL_POLL_SECONDS = 0.05
    turn = _turn(question=f"{WEATHER} [demo:slow=15]")

    def run() -> None:
        try:
            turn_run(turn_id=turn.pk)
        finally:
            connection.close()

    runner = threading.Thread(target=run)
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while not Step.objects.filter(turn=turn, kind="decide").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        output = _cancel(str(turn.pk), "--wait", "10")
        runner.join(10)
    finally:
        gateway.close_all()

    assert output.startswith(f"turn {turn.pk}: cancelled (cancelled by the command line")
    assert not runner.is_alive()
    assert Step.objects.filter(turn=turn).order_by("-seq").first().title == "cancelled by the command line"  # type: ignore[union-attr]
