"""Issue 20, what remained, on the profile: a pasted tokenizer config's added tokens are stored and
reach the counts; a profile's arguments setting reaches the template and the prompt's source line.
Real admin, real DB, the runner's own renderer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from conversations.loop.llm import Message, ToolCall, ToolDef
from conversations.loop.providers.base import ModelRequest
from conversations.loop.splicing import count_tokens
from conversations.models import ModelProfile
from conversations.runner import prompt_renderer
from tests.conversations.loop.test_splicing_admin import ADD_URL, profile_form

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "chat_templates"
HERMES = (CORPUS / "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja").read_text()
ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
# A tokenizer config shaped like a ChatML fine-tune's on Llama 3.1, cut down: tool tags as added tokens.
CONFIG = {
    "chat_template": [{"name": "default", "template": HERMES}, {"name": "tool_use", "template": HERMES}],
    "bos_token": "<|begin_of_text|>",
    "eos_token": "<|im_end|>",
    "added_tokens_decoder": {
        "128000": {"content": "<|begin_of_text|>", "special": True},
        **{str(128002 + n): {"content": token, "special": True} for n, token in enumerate(ADDED)},
        "128040": {"content": "<not special>", "special": False},
    },
}
TOOL = ToolDef(
    server_id=1,
    server_name="demo",
    name="get_time",
    provider_name="get_time",
    description="Now",
    input_schema={"type": "object", "properties": {"tz": {"type": "string"}}},
)


@pytest.fixture
def admin_client() -> Client:
    User.objects.create_user("admin", password="pw-admin-1", is_staff=True, is_superuser=True)
    client = Client()
    assert client.login(username="admin", password="pw-admin-1")
    return client


@pytest.mark.django_db
def test_a_pasted_tokenizer_configs_added_tokens_are_stored_and_counted(admin_client: Client) -> None:
    response = admin_client.post(ADD_URL, profile_form(model="hermes-3", tokenizer_config=json.dumps(CONFIG)))

    assert response.status_code == 302
    profile = ModelProfile.objects.get(name="local")
    assert profile.added_tokens == ["<|begin_of_text|>", *ADDED]
    spliced = prompt_renderer(profile)(
        ModelRequest(messages=[Message(role="user", content="Time?")], tools=[TOOL])
    )
    assert spliced.status == "exact" and "<tool_call>" in spliced.text
    assert spliced.tokens.encoding == "llama3.1"
    singles = ["<|begin_of_text|>", "<|im_end|>", *ADDED]
    assert spliced.tokens.prompt == count_tokens(spliced.text, "llama3.1", singles)
    assert spliced.tokens.prompt < count_tokens(spliced.text, "llama3.1", singles[:2])


@pytest.mark.django_db
def test_added_tokens_must_be_a_list_of_strings(admin_client: Client) -> None:
    response = admin_client.post(ADD_URL, profile_form(added_tokens='{"a": 1}'))

    assert response.status_code == 200
    assert "a JSON list of token texts" in response.content.decode()
    assert not ModelProfile.objects.filter(name="local").exists()


@pytest.mark.django_db
def test_the_arguments_setting_is_saved_and_reaches_the_template(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL,
        profile_form(
            model="hermes-3",
            chat_template=HERMES,
            special_tokens='{"bos_token": "<|begin_of_text|>"}',
            template_arguments="string",
        ),
    )
    assert response.status_code == 302
    profile = ModelProfile.objects.get(name="local")
    assert profile.template_arguments == "string"
    call = Message(
        role="assistant",
        content="",
        tool_calls=[ToolCall("c1", "get_time", '{"tz":"Europe/Paris"}', {"tz": "Europe/Paris"})],
    )
    request = ModelRequest(
        messages=[
            Message(role="user", content="Time?"),
            call,
            Message(role="tool", content="12:00", tool_call_id="c1"),
        ],
        tools=[TOOL],
    )

    as_string = prompt_renderer(profile)(request)
    profile.template_arguments = ""
    automatic = prompt_renderer(profile)(request)

    assert '{"tz":"Europe/Paris"}' in as_string.text
    assert as_string.source.endswith("tool-call arguments: the wire's JSON string (the profile's setting)")
    assert '{"tz": "Europe/Paris"}' in automatic.text
    assert "the profile's setting" not in automatic.source


@pytest.mark.django_db
def test_an_unknown_arguments_setting_is_refused(admin_client: Client) -> None:
    response = admin_client.post(ADD_URL, profile_form(template_arguments="dict"))

    assert response.status_code == 200
    assert not ModelProfile.objects.filter(name="local").exists()


# Each message whole, as the renderer hands it to a template.
EVERYTHING = "{% for message in messages %}{{ message | tojson }}\n{% endfor %}{{ tools | tojson }}"


@pytest.mark.parametrize("template", ["", EVERYTHING], ids=["generic", "template"])
def test_the_runners_renderer_kept_for_a_turn_splices_each_request_as_a_new_one_would(template: str) -> None:
    """One renderer serves a turn's requests and carries what each repeats of the one before:
    a message changed in place afterwards (its text, a call's arguments, what the provider must
    get back) is spliced as it is now, never as it was remembered."""
    profile = ModelProfile(name="hosted", model="gpt-4o", chat_template=template)
    other = ToolDef(**{**TOOL.__dict__, "name": "echo", "provider_name": "echo", "description": "Echo"})
    tools = [TOOL, other]
    call = ToolCall(id="c1", name="get_time", arguments_text='{"tz": "UTC"}')
    asked = Message(
        role="assistant", content=None, tool_calls=[call], echo={"openai_chat": {"reasoning_content": "hm"}}
    )
    history = [Message(role="system", content="Be brief."), Message(role="user", content="Time?"), asked]
    history.append(Message(role="tool", tool_call_id="c1", content="12:00"))
    edits = [
        lambda: None,
        lambda: setattr(history[3], "content", "13:00"),
        lambda: setattr(call, "arguments_text", '{"tz": "CET"}'),
        lambda: asked.echo["openai_chat"].update(reasoning_content="changed"),  # type: ignore[index, union-attr]
        lambda: history.insert(1, Message(role="user", content="Time?")),  # the same text twice
        lambda: history.append(Message(role="assistant", content="It is one.")),
        lambda: tools.pop(0),
    ]
    carried = prompt_renderer(profile)
    for edit in edits:
        edit()
        request = ModelRequest(messages=list(history), tools=list(tools))

        assert carried(request) == prompt_renderer(profile)(request)
