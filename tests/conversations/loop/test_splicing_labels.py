"""Issue 20 item 2: a spliced prompt is never labelled exact unless it is what the engine renders.

Special tokens the template prints must have a configured value; a template that fails is
labelled failed with its error; the sandbox refuses what transformers refuses.
"""

from __future__ import annotations

import pytest

from conversations.loop.splicing import (
    PARADIGM_SOURCE,
    TemplateError,
    missing_special_tokens,
    render_chat_template,
    splice,
)
from conversations.typealias import JSONDict

ASK: list[JSONDict] = [{"role": "user", "content": "Time in Paris?"}]
GET_TIME: JSONDict = {
    "type": "function",
    "function": {"name": "get_time", "description": "Now", "parameters": {"type": "object"}},
}
LLAMA_LIKE = "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
MISTRAL_LIKE = "{{ bos_token }}{% for m in messages %}[INST]{{ m.content }}[/INST]{% endfor %}{{ eos_token }}"


def test_a_special_token_the_template_prints_without_a_value_is_a_warning_not_exact() -> None:
    spliced = splice(messages=ASK, tools=[], model="llama-3.3-70b", template=LLAMA_LIKE)

    assert spliced.text == "<|user|>Time in Paris?"  # rendered as transformers would, bos empty
    assert spliced.exact is False
    assert spliced.status == "warning"
    assert "bos_token" in spliced.source and "not configured" in spliced.source
    assert spliced.warnings == ["the template uses bos_token, which is not configured: rendered empty"]


def test_configured_special_tokens_make_the_rendering_exact() -> None:
    spliced = splice(
        messages=ASK,
        tools=[],
        model="mistral-nemo",
        template=MISTRAL_LIKE,
        special_tokens={"bos_token": "<s>", "eos_token": "</s>"},
    )

    assert spliced.text == "<s>[INST]Time in Paris?[/INST]</s>"
    assert (spliced.exact, spliced.status, spliced.warnings) == (True, "exact", [])


def test_an_explicitly_empty_special_token_is_configured() -> None:
    spliced = splice(messages=ASK, tools=[], model="x", template=LLAMA_LIKE, special_tokens={"bos_token": ""})

    assert (spliced.exact, spliced.status) == (True, "exact")


def test_only_the_tokens_the_template_reads_are_reported_missing() -> None:
    assert missing_special_tokens(MISTRAL_LIKE, {}) == ["bos_token", "eos_token"]
    assert missing_special_tokens(MISTRAL_LIKE, {"eos_token": "</s>"}) == ["bos_token"]
    assert missing_special_tokens("{% set bos_token = 'x' %}{{ bos_token }}", {}) == []
    assert missing_special_tokens("{{ messages[0].content }}", {}) == []


def test_a_failing_template_is_labelled_failed_with_its_error_never_exact() -> None:
    spliced = splice(
        messages=ASK,
        tools=[GET_TIME],
        model="qwen2.5-7b",
        template="{{ raise_exception('Conversation roles must alternate') }}",
    )

    assert (spliced.exact, spliced.status) == (False, "failed")
    assert spliced.source.startswith("failed: the profile's chat template: template raised an exception")
    assert "Conversation roles must alternate" in spliced.source
    assert "shown instead: the generic ChatML template (illustrative)" in spliced.source


def test_a_failing_template_under_a_prompt_paradigm_is_failed_not_exact() -> None:
    hermes_like = "{% for t in tools %}{{ t }}{% endfor %}"  # fails on tools=None, as Hermes-3 tool_use
    spliced = splice(messages=ASK, tools=[], model="hermes-3", template=hermes_like, prompt_is_ours=True)

    assert (spliced.exact, spliced.status) == (False, "failed")
    assert spliced.source.startswith("failed: the profile's chat template: ")
    assert spliced.source.endswith(f"shown instead: {PARADIGM_SOURCE}")


def test_the_paradigm_rendering_without_a_template_is_as_sent_never_exact() -> None:
    """No engine renders the role-labelled messages: they are what was sent, and the provider
    applies its own template around them (issue 48)."""
    spliced = splice(messages=ASK, tools=[], model="gpt-4o", prompt_is_ours=True)

    assert (spliced.exact, spliced.status, spliced.source) == (False, "as sent", PARADIGM_SOURCE)
    assert PARADIGM_SOURCE.startswith("as sent — the provider applies its own template")
    assert "the messages as sent, without the provider's chat markup" in spliced.tokens.note


@pytest.mark.parametrize(
    "template",
    [
        "{% set ns = namespace(_x=1) %}{{ ns._x }}",
        "{% set ns = namespace(a=1) %}{% set ns._b = 2 %}",
        "{% set ns = namespace({'_c': 1}) %}",
    ],
)
def test_underscore_namespace_attributes_are_refused_as_transformers_refuses_them(
    template: str,
) -> None:
    with pytest.raises(TemplateError, match="underscore-prefixed attributes"):
        render_chat_template(template, messages=ASK)


def test_namespace_and_dict_still_work() -> None:
    template = (
        "{% set ns = namespace(n=0, self=1) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "{% endfor %}{{ ns.n }} {{ dict(a=1) | tojson }} {{ dict.fromkeys(['k'], 0) | tojson }}"
    )
    assert render_chat_template(template, messages=ASK) == '1 {"a": 1} {"k": 0}'
