"""The demo model reports the usage a serving engine reports: its prompt's tokens counted by the
tokenizer of its own chat template's family on the text it read (the template's rendering), so
a demo conversation's "tokens in as reported" equals the exact spliced prompt's count in every
paradigm, and a paradigm comparison's tokens and costs are not skewed by a stand-in count."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from conversations.chat_templates import DEMO_TOKENIZER
from conversations.models import Exchange, Step
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.mark.parametrize("paradigm", ["native", "prompt_xml", "prompt_json", "intent"])
def test_the_reported_prompt_tokens_are_the_exact_prompts_count(paradigm: str) -> None:
    alice = UserFactory(username="alice")
    _, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question="What will the weather be like in Beijing tomorrow?",
        servers=[demo_server_ensure()],
        paradigm=paradigm,
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    assert turn.status == "done", turn.error

    steps = [s for s in Step.objects.filter(turn=turn).order_by("seq") if s.prompt_exact]
    assert len(steps) >= 2
    for step in steps:
        assert step.tokens["encoding"] == DEMO_TOKENIZER
        call = Exchange.objects.get(step=step, channel=Exchange.Channel.LLM)
        usage = json.loads(call.response_body)["usage"]
        assert usage["prompt_tokens"] == step.tokens["prompt"], (step.seq, usage, step.tokens["prompt"])
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
