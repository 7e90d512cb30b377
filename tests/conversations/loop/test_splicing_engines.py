"""Issue 20 item 1: every template an engine publishes is kept, and each request is rendered with
the one the engine would choose (docs/chat-templates.md §1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx2
import pytest

from conversations.loop.llm import Message, ToolDef
from conversations.loop.providers.base import ModelRequest
from conversations.loop.splicing import (
    choose_template,
    server_template,
    splice,
    templates_from_tokenizer_config,
)
from conversations.models import ModelProfile
from conversations.runner import prompt_renderer
from conversations.services import profile_probe
from conversations.typealias import JSONDict

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "chat_templates"
PLAIN = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
TOOL_USE = "{{ bos_token }}{% for t in tools %}[{{ t.function.name }}]{% endfor %}" + PLAIN[15:]
ASK: list[JSONDict] = [{"role": "user", "content": "Time?"}]
GET_TIME: JSONDict = {
    "type": "function",
    "function": {"name": "get_time", "description": "Now", "parameters": {"type": "object"}},
}
PROPS: JSONDict = {
    "chat_template": PLAIN,
    "chat_template_tool_use": TOOL_USE,
    "bos_token": "<|begin_of_text|>",
    "eos_token": "<|eot_id|>",
}


def fake_server(responses: dict[str, JSONDict]) -> Callable[[str], JSONDict | None]:
    return responses.get


def test_llama_cpp_props_keeps_both_templates_and_its_tokens() -> None:
    found = server_template("http://gpu:8080/v1", "any", fake_server({"http://gpu:8080/props": PROPS}))

    assert found is not None
    assert (found.template, found.named, found.source) == (
        PLAIN,
        {"tool_use": TOOL_USE},
        "llama.cpp /props",
    )
    assert found.special_tokens == {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}


def test_llama_cpp_props_with_only_a_tool_use_template_uses_it_as_the_default() -> None:
    props: JSONDict = {"chat_template": "", "chat_template_tool_use": TOOL_USE}
    found = server_template("http://gpu:8080", "m", fake_server({"http://gpu:8080/props": props}))

    assert found is not None and (found.template, found.named) == (TOOL_USE, {})


def test_llama_cpp_chooses_the_tool_use_template_only_for_requests_with_tools() -> None:
    named = {"tool_use": TOOL_USE}

    with_tools = choose_template(PLAIN, named, "llama.cpp /props", has_tools=True)
    without = choose_template(PLAIN, named, "llama.cpp /props", has_tools=False)

    assert with_tools == (
        TOOL_USE,
        "llama.cpp /props chat_template_tool_use (chosen: the request has tools; llama.cpp uses "
        "it only then)",
    )
    assert without == (
        PLAIN,
        "llama.cpp /props chat_template (chosen: the request has no tools; llama.cpp uses "
        "chat_template_tool_use only with tools)",
    )


def test_a_single_template_keeps_its_source() -> None:
    assert choose_template(PLAIN, {}, "the profile's chat template", has_tools=True) == (
        PLAIN,
        "the profile's chat template",
    )


def test_splice_renders_each_request_with_the_template_the_engine_would_use() -> None:
    tokens = {"bos_token": "<|begin_of_text|>"}
    named = {"tool_use": TOOL_USE}

    native = splice(
        messages=ASK,
        tools=[GET_TIME],
        model="llama-3.1-8b",
        template=PLAIN,
        templates=named,
        template_source="llama.cpp /props",
        special_tokens=tokens,
    )
    paradigm = splice(
        messages=ASK,
        tools=[GET_TIME],
        model="llama-3.1-8b",
        template=PLAIN,
        templates=named,
        template_source="llama.cpp /props",
        special_tokens=tokens,
        prompt_is_ours=True,
    )

    assert (native.text, native.status) == ("<|begin_of_text|>[get_time]<user>Time?", "exact")
    assert native.source.startswith("llama.cpp /props chat_template_tool_use (chosen: the request has tools")
    assert (paradigm.text, paradigm.status) == ("<|begin_of_text|><user>Time?", "exact")
    assert paradigm.source.startswith("llama.cpp /props chat_template (chosen: the request has no tools")


def test_hermes_3_under_a_prompt_paradigm_renders_with_the_plain_template() -> None:
    """The issue's case: Hermes-3's tool_use template fails on tools=None; llama.cpp would not use it."""
    hermes_tool_use = (CORPUS / "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja").read_text()
    plain = (
        "{{ bos_token }}{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )

    spliced = splice(
        messages=ASK,
        tools=[],
        model="hermes-3-llama-3.1-8b",
        template=plain,
        templates={"tool_use": hermes_tool_use},
        template_source="llama.cpp /props",
        special_tokens={"bos_token": "<|begin_of_text|>"},
        prompt_is_ours=True,
    )

    assert spliced.status == "exact"
    assert spliced.text == "<|begin_of_text|><|im_start|>user\nTime?<|im_end|>\n<|im_start|>assistant\n"


def test_named_templates_and_special_tokens_from_a_tokenizer_config() -> None:
    config: JSONDict = {
        "chat_template": [
            {"name": "default", "template": PLAIN},
            {"name": "tool_use", "template": TOOL_USE},
            {"name": "rag", "template": "{{ documents }}"},
        ],
        "bos_token": {"content": "<BOS_TOKEN>", "special": True},
        "eos_token": "<|END_OF_TURN_TOKEN|>",
        "pad_token": None,
        "added_tokens_decoder": {
            "0": {"content": "<PAD>", "special": True},
            "255001": {"content": "<|END_OF_TURN_TOKEN|>", "special": True},
            "7": {"content": "hello", "special": False},
        },
    }

    found = templates_from_tokenizer_config(config)

    assert found is not None
    assert (found.template, found.named, found.source) == (
        PLAIN,
        {"tool_use": TOOL_USE, "rag": "{{ documents }}"},
        "tokenizer_config.json",
    )
    assert found.special_tokens == {"bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>"}
    assert found.added_tokens == ["<PAD>", "<|END_OF_TURN_TOKEN|>"]
    assert choose_template(found.template, found.named, found.source, has_tools=True)[1] == (
        "tokenizer_config.json 'tool_use' template (chosen: the request has tools; transformers uses it then)"
    )
    assert templates_from_tokenizer_config({"chat_template": PLAIN}) is not None
    assert templates_from_tokenizer_config({"model_max_length": 8}) is None


@pytest.mark.django_db
def test_the_probe_keeps_both_llama_cpp_templates_and_each_request_uses_the_right_one() -> None:
    profile = ModelProfile.objects.create(
        name="local", model="llama-3.1-8b", base_url="http://engine:8080/v1"
    )

    def handle(request: httpx2.Request) -> httpx2.Response:
        if (request.method, request.url.path) == ("GET", "/props"):
            return httpx2.Response(200, json=PROPS)
        return httpx2.Response(404, json={"error": "not found"})

    notes = profile_probe(profile=profile, client=httpx2.Client(transport=httpx2.MockTransport(handle)))

    profile.refresh_from_db()
    assert (profile.chat_template, profile.chat_templates) == (PLAIN, {"tool_use": TOOL_USE})
    assert profile.chat_template_source == "llama.cpp /props"
    assert "chat template read from llama.cpp /props (chat_template, chat_template_tool_use)" in notes
    render = prompt_renderer(profile)
    asked = Message(role="user", content="Time?")
    tool = ToolDef(
        server_id=1,
        server_name="demo",
        name="get_time",
        provider_name="get_time",
        description="Now",
        input_schema={"type": "object"},
    )
    with_tools = render(ModelRequest(messages=[asked], tools=[tool]))
    without = render(ModelRequest(messages=[asked], tools=[]))
    assert with_tools.text.startswith("<|begin_of_text|>[get_time]")
    assert "chat_template_tool_use (chosen" in with_tools.source
    assert without.text == "<|begin_of_text|><user>Time?"
    assert "chat_template (chosen: the request has no tools" in without.source
