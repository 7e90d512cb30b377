"""The bare loop (the benchmarks' floor) in its own process, against the fake model and the
bundled stdio server: one turn at a time (P1) and many at once (P4)."""

from __future__ import annotations

from bench.fake_model import FakeModel
from bench.p1_step_overhead import STEPS, BareLoop


def test_the_bare_loop_runs_many_turns_at_once_on_one_session_while_the_model_thinks() -> None:
    latency, calls, turns = 0.3, 3, 20
    with FakeModel(steps=calls, latency=latency) as model:
        loop = BareLoop(model.base_url)
        try:
            model.stats()
            loop.start(turns)
            reply = loop.finished()
            seen = model.stats()
        finally:
            loop.close()
    assert reply["turns"] == turns
    assert reply["model_calls"] == calls * turns and reply["tool_calls"] == (calls - 1) * turns
    assert seen["requests"] == calls * turns
    # At once: the turns wait on the model together (one at a time, one request would be in flight).
    assert seen["max_in_flight"] > turns // 2
    assert reply["seconds"] >= calls * latency


def test_the_bare_loop_runs_one_turn_of_the_p1_length_and_then_accepts_more_commands() -> None:
    with FakeModel(steps=STEPS, latency=0) as model:
        loop = BareLoop(model.base_url)
        try:
            first, second = loop.turn(), loop.turn()
            loop.start(2)
            reply = loop.finished()
        finally:
            loop.close()
    assert first > 0 and second > 0
    assert reply["model_calls"] == 2 * STEPS and reply["tool_calls"] == 2 * (STEPS - 1)
