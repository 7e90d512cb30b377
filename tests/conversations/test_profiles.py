"""Model profiles: reading the engine's chat template, and what a template changes in a turn."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from django.contrib.auth.models import User

from conversations.models import ModelProfile, Step, Turn
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure, profile_probe
from servers import gateway
from servers.services import demo_server_ensure

TEMPLATE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates" / "qwen_like.jinja"
).read_text()


def _engine(routes: dict[tuple[str, str], object]) -> httpx2.Client:
    def handle(request: httpx2.Request) -> httpx2.Response:
        body = routes.get((request.method, request.url.path))
        if body is None:
            return httpx2.Response(404, json={"error": "not found"})
        return httpx2.Response(200, json=body)

    return httpx2.Client(transport=httpx2.MockTransport(handle))


@pytest.mark.django_db
def test_a_llama_cpp_engine_gives_both_its_templates_and_tokens() -> None:
    profile = ModelProfile.objects.create(name="local", model="qwen2.5", base_url="http://engine:8080/v1")
    client = _engine(
        {
            ("GET", "/props"): {
                "chat_template": "plain",
                "chat_template_tool_use": TEMPLATE,
                "bos_token": "<s>",
            }
        }
    )

    notes = profile_probe(profile=profile, client=client)

    profile.refresh_from_db()
    assert (profile.chat_template, profile.chat_templates) == ("plain", {"tool_use": TEMPLATE})
    assert profile.chat_template_source == "llama.cpp /props"
    assert profile.special_tokens == {"bos_token": "<s>"}
    assert profile.native_tools == "yes"
    assert any("llama.cpp /props" in note for note in notes)


@pytest.mark.django_db
def test_an_ollama_engine_says_whether_the_model_supports_tools() -> None:
    profile = ModelProfile.objects.create(name="ollama", model="gemma", base_url="http://engine:11434/v1")
    client = _engine({("POST", "/api/show"): {"template": "{{ .Prompt }}", "capabilities": ["completion"]}})

    notes = profile_probe(profile=profile, client=client)

    profile.refresh_from_db()
    assert profile.native_tools == "no"
    assert profile.chat_template_source.startswith("Ollama Go template")
    assert "Ollama says the model does not support tools" in notes


@pytest.mark.django_db
def test_a_hosted_api_is_left_alone() -> None:
    profile = ModelProfile.objects.create(name="hosted", model="gpt-4o", base_url="")

    assert profile_probe(profile=profile) == ["no base URL: hosted APIs do not publish their chat template"]


@pytest.fixture
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_close_sessions")
def test_a_pasted_chat_template_makes_the_native_spliced_prompt_exact() -> None:
    alice = User.objects.create_user("alice")
    profile = demo_profile_ensure()
    profile.chat_template = TEMPLATE
    profile.chat_template_source = ""  # pasted by a user
    profile.tokenizer = ""  # automatic
    profile.save()
    _, turn = conversation_start(
        owner=alice,
        model_profile=profile,
        question="What will the weather be like in Beijing tomorrow?",
        servers=[demo_server_ensure()],
        dispatch=False,
    )

    turn_run(turn_id=turn.pk)

    turn.refresh_from_db()
    assert turn.status == Turn.Status.DONE
    first, second = Step.objects.filter(turn=turn, kind__in=["decide", "answer"]).order_by("seq")
    assert first.prompt_exact and first.prompt_source == "the profile's chat template"
    assert "<|im_start|>system" in first.prompt and "get_weather_forecast" in first.prompt
    # Counted in the template's family (Qwen's ChatML), whatever the profile's name (issue 20).
    assert first.tokens["encoding"] == "qwen3" and first.tokens["prompt"] > 0
    assert set(first.tokens["tools"]) == {tool["provider_name"] for tool in turn.tools}
    # The second call carries the tool result the template wraps for the model.
    assert "Beijing" in second.prompt and second.tokens["results"]
    assert json.loads(second.exchanges.get(channel="llm").request_body)["messages"][-1]["role"] == "tool"


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_close_sessions")
def test_without_a_template_the_native_prompt_is_marked_illustrative() -> None:
    alice = User.objects.create_user("alice")
    profile = demo_profile_ensure()
    profile.chat_template = ""  # as a hosted model's profile: no template known
    profile.save()
    _, turn = conversation_start(
        owner=alice,
        model_profile=profile,
        question="What will the weather be like in Beijing tomorrow?",
        servers=[demo_server_ensure()],
        dispatch=False,
    )

    turn_run(turn_id=turn.pk)

    step = Step.objects.filter(turn=turn, kind="decide").first()
    assert step is not None and not step.prompt_exact
    assert "illustrative" in step.prompt_source
