"""factory-boy factories for the whole suite: users, profiles, servers, and a turn's record.

Defaults build a small, valid, finished picture (a done turn, an ok step, an LLM exchange);
override fields to draw anything else. ``seq`` numbers follow on from what is already in the
database, so several turns or steps can be made without thinking about the unique constraints.
"""

from __future__ import annotations

from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.db.models import Max
from django.utils import timezone
from factory.django import DjangoModelFactory

from conversations.models import Comparison, Conversation, Exchange, ModelProfile, Step, Turn
from servers.models import McpServer

PASSWORD = "correct horse battery staple"


def _next_seq(queryset: Any) -> int:
    return int(queryset.aggregate(m=Max("seq"))["m"] or 0) + 1


class UserFactory(DjangoModelFactory[Any]):
    """A user whose password is ``PASSWORD``."""

    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda user: f"{user.username}@example.com")
    password = factory.django.Password(PASSWORD)


class ModelProfileFactory(DjangoModelFactory[ModelProfile]):
    """A real-model profile (OpenAI Chat wire format); see ``DemoModelProfileFactory``."""

    class Meta:
        model = ModelProfile
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"model-{n}")
    provider = "openai_chat"
    base_url = "https://models.example.com/v1"
    model = "gpt-example"
    api_key_env = "EXAMPLE_API_KEY"
    native_tools = "yes"


class DemoModelProfileFactory(ModelProfileFactory):
    """The demo model's profile (one per database, like ``services.demo_profile_ensure``, but
    without the demo's chat template: a profile whose prompts are as sent or illustrative)."""

    name = "demo"
    base_url = ""
    model = "demo"
    api_key_env = "DEMO_MODEL_API_KEY"
    is_demo = True
    structured_output = "yes"
    parallel_calls = "yes"


class McpServerFactory(DjangoModelFactory[McpServer]):
    """A stdio server running the bundled demo server module, not marked as the demo."""

    class Meta:
        model = McpServer
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"server{n}")
    description = "A test server."
    transport = "stdio"
    command = "python"
    args = factory.LazyFunction(lambda: ["-m", "servers.demo_server"])
    era = "legacy"

    class Params:
        demo = factory.Trait(
            name="demo", description="Bundled teaching server.", is_demo=True, allow_non_staff_spawn=True
        )


class ComparisonFactory(DjangoModelFactory[Comparison]):
    """A comparison with no runs yet: add ``ConversationFactory(comparison=..., owner=...)`` runs."""

    class Meta:
        model = Comparison

    owner = factory.SubFactory(UserFactory)
    question = "What will the weather be like in Beijing tomorrow?"


class ConversationFactory(DjangoModelFactory[Conversation]):
    class Meta:
        model = Conversation
        skip_postgeneration_save = True

    owner = factory.SubFactory(UserFactory)
    title = factory.Sequence(lambda n: f"Conversation {n}")
    model_profile = factory.SubFactory(DemoModelProfileFactory)
    paradigm = "native"
    tool_choice = "auto"

    @factory.post_generation
    def servers(self, create: bool, extracted: list[McpServer] | None, **kwargs: Any) -> None:
        """``servers=[...]`` sets the M2M (none by default)."""
        if create and extracted:
            self.servers.set(extracted)


class TurnFactory(DjangoModelFactory[Turn]):
    """A finished turn with an answer; pass ``status=...`` for any other state."""

    class Meta:
        model = Turn

    conversation = factory.SubFactory(ConversationFactory)
    seq = factory.LazyAttribute(lambda turn: _next_seq(Turn.objects.filter(conversation=turn.conversation)))
    question = "What is the weather in Paris tomorrow?"
    status = Turn.Status.DONE
    answer = "Sunny, 21 °C."
    paradigm = factory.LazyAttribute(lambda turn: turn.conversation.paradigm)
    tool_choice = factory.LazyAttribute(lambda turn: turn.conversation.tool_choice)
    model_name = factory.LazyAttribute(lambda turn: turn.conversation.model_profile.model)
    started_at = factory.LazyFunction(timezone.now)
    finished_at = factory.LazyAttribute(
        lambda turn: timezone.now() if turn.status in {"done", "failed", "interrupted"} else None
    )


class StepFactory(DjangoModelFactory[Step]):
    """A finished ``decide`` step; pass ``parent=`` for a tool step under it."""

    class Meta:
        model = Step

    turn = factory.LazyAttribute(lambda step: step.parent.turn if step.parent else TurnFactory())
    parent = None
    seq = factory.LazyAttribute(lambda step: _next_seq(Step.objects.filter(turn=step.turn)))
    kind = Step.Kind.DECIDE
    status = Step.Status.OK
    title = factory.LazyAttribute(lambda step: f"{step.kind} step")
    finished_at = factory.LazyAttribute(lambda step: None if step.status == "running" else timezone.now())


class ExchangeFactory(DjangoModelFactory[Exchange]):
    """An LLM exchange by default; use ``mcp=True`` for a JSON-RPC ``tools/call`` pair."""

    class Meta:
        model = Exchange

    step = factory.SubFactory(StepFactory)
    turn = factory.LazyAttribute(lambda exchange: exchange.step.turn if exchange.step else None)
    seq = factory.Sequence(lambda n: n + 1)
    channel = Exchange.Channel.LLM
    label = "POST /chat/completions"
    request_headers = factory.LazyFunction(lambda: {"content-type": "application/json"})
    request_body = '{"model": "demo", "messages": [{"role": "user", "content": "hi"}]}'
    response_headers = factory.LazyFunction(lambda: {"content-type": "application/json"})
    response_body = '{"choices": [{"message": {"role": "assistant", "content": "hello"}}]}'
    status = "200"
    duration_ms = 12.5

    class Params:
        mcp = factory.Trait(
            channel=Exchange.Channel.MCP,
            label="tools/call",
            jsonrpc_id="1",
            request_headers=factory.LazyFunction(dict),
            request_body='{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo"}}',
            response_headers=factory.LazyFunction(dict),
            response_body='{"jsonrpc": "2.0", "id": 1, "result": {"content": []}}',
            status="ok",
        )
