"""Issue 20 item 6: the profile admin compiles a chat template (sandboxed) on save and shows the
template's error with its line; it never saves one that does not compile."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from conversations.models import ModelProfile

ADD_URL = "/admin/conversations/modelprofile/add/"


def profile_form(**fields: str) -> dict[str, str]:
    data = {
        "name": "local",
        "provider": "openai_chat",
        "base_url": "",
        "model": "qwen2.5-7b",
        "api_key_env": "",
        "native_tools": "unknown",
        "structured_output": "unknown",
        "parallel_calls": "unknown",
        "chat_template": "",
        "chat_template_source": "",
        "chat_templates": "{}",
        "special_tokens": "{}",
        "tokenizer": "",
        "added_tokens": "[]",
        "template_arguments": "",
        "deadline_seconds": "120",
    }
    data.update(fields)
    return data


@pytest.fixture
def admin_client() -> Client:
    User.objects.create_user("admin", password="pw-admin-1", is_staff=True, is_superuser=True)
    client = Client()
    assert client.login(username="admin", password="pw-admin-1")
    return client


@pytest.mark.django_db
def test_a_template_that_does_not_compile_is_refused_with_its_line(admin_client: Client) -> None:
    broken = "{% for m in messages %}\n{{ m.content }}\n{% if %}\n{% endfor %}"

    response = admin_client.post(ADD_URL, profile_form(chat_template=broken))

    assert response.status_code == 200
    assert not ModelProfile.objects.filter(name="local").exists()
    page = response.content.decode()
    assert "template syntax error at line 3" in page


@pytest.mark.django_db
def test_a_named_template_that_does_not_compile_is_refused(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL,
        profile_form(chat_template="{{ messages }}", chat_templates='{"tool_use": "{{ x | nosuchfilter }}"}'),
    )

    assert response.status_code == 200
    assert not ModelProfile.objects.filter(name="local").exists()
    assert "tool_use: template syntax error at line 1: No filter named" in response.content.decode()


@pytest.mark.django_db
def test_special_tokens_must_be_strings(admin_client: Client) -> None:
    response = admin_client.post(
        ADD_URL, profile_form(chat_template="{{ bos_token }}", special_tokens='{"bos_token": 1}')
    )

    assert response.status_code == 200
    assert "bos_token" in response.content.decode()
    assert not ModelProfile.objects.filter(name="local").exists()


@pytest.mark.django_db
def test_a_good_template_is_saved_and_an_ollama_go_template_is_not_compiled(admin_client: Client) -> None:
    good = admin_client.post(ADD_URL, profile_form(chat_template="{{ bos_token }}{{ messages | length }}"))
    go = admin_client.post(
        ADD_URL,
        profile_form(
            name="ollama",
            chat_template="{{ if .System }}{{ .System }}{{ end }}",
            chat_template_source="Ollama Go template (shown as is; not rendered)",
        ),
    )

    assert good.status_code == 302 and go.status_code == 302
    assert ModelProfile.objects.filter(name__in=["local", "ollama"]).count() == 2


@pytest.mark.django_db
def test_a_pasted_tokenizer_config_gives_its_templates_and_special_tokens(admin_client: Client) -> None:
    config = {
        "chat_template": [
            {"name": "default", "template": "{{ bos_token }}{{ messages | length }}"},
            {"name": "tool_use", "template": "{{ bos_token }}{{ tools | length }}"},
        ],
        "bos_token": {"content": "<|begin_of_text|>", "special": True},
        "eos_token": "<|eot_id|>",
    }

    response = admin_client.post(ADD_URL, profile_form(tokenizer_config=json.dumps(config)))

    assert response.status_code == 302
    profile = ModelProfile.objects.get(name="local")
    assert profile.chat_template == "{{ bos_token }}{{ messages | length }}"
    assert profile.chat_templates == {"tool_use": "{{ bos_token }}{{ tools | length }}"}
    assert profile.special_tokens == {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    assert profile.chat_template_source == "tokenizer_config.json"


@pytest.mark.django_db
def test_a_tokenizer_config_with_a_broken_template_is_refused(admin_client: Client) -> None:
    config = {"chat_template": "{% if %}"}

    response = admin_client.post(ADD_URL, profile_form(tokenizer_config=json.dumps(config)))

    assert response.status_code == 200
    assert "template syntax error at line 1" in response.content.decode()
    assert not ModelProfile.objects.filter(name="local").exists()
