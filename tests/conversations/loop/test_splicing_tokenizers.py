"""Issue 20 item 5: the tokenizer is chosen from the engine (a profile setting, the template's
family), not from the model's name alone; Llama 3.1+ has its own special tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from conversations.loop.splicing import count_tokens, splice
from conversations.loop.splicing.tokens import choose_encoding
from conversations.typealias import JSONDict

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "chat_templates"
ASK: list[JSONDict] = [{"role": "user", "content": "Time?"}]
GET_TIME: JSONDict = {
    "type": "function",
    "function": {"name": "get_time", "description": "Now", "parameters": {"type": "object"}},
}


def template(name: str) -> str:
    return (CORPUS / f"{name}.jinja").read_text()


@pytest.mark.parametrize("token", ["<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>"])
def test_llama_3_1_special_tokens_are_one_token(token: str) -> None:
    assert count_tokens(token, "llama3.1") == 1
    assert count_tokens(token, "llama3") > 1  # Llama 3.0's vocabulary has no such token
    assert count_tokens(f"a{token}b<|eot_id|>", "llama3.1") == 4


def test_llama_3_1_reserved_tokens_beyond_its_range_are_text() -> None:
    assert count_tokens("<|reserved_special_token_247|>", "llama3.1") == 1
    assert count_tokens("<|reserved_special_token_250|>", "llama3.1") > 1
    assert count_tokens("<|reserved_special_token_250|>", "llama3") == 1


@pytest.mark.parametrize(
    ("name", "encoding"),
    [
        ("meta-llama-Llama-3.1-8B-Instruct", "llama3.1"),
        ("meta-llama-Llama-3.3-70B-Instruct", "llama3.1"),
        ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "llama3.1"),
        ("Qwen-Qwen2.5-7B-Instruct", "qwen3"),
        ("Qwen-Qwen3-0.6B", "qwen3"),
        ("mistralai-Mistral-Nemo-Instruct-2407", None),
        ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", None),
    ],
)
def test_the_template_family_decides_on_a_profile_with_any_name(name: str, encoding: str | None) -> None:
    bos = "<|begin_of_text|>" if "Hermes" in name else None
    chosen, why = choose_encoding(
        "demo-ish", template=template(name), special_tokens={"bos_token": bos} if bos else None
    )
    assert chosen == encoding
    assert why


def test_a_qwen_template_on_a_profile_named_demo_counts_with_qwen() -> None:
    spliced = splice(messages=ASK, tools=[], model="demo", template=template("Qwen-Qwen2.5-7B-Instruct"))

    assert spliced.tokens.encoding == "qwen3"
    assert "the chat template's family" in spliced.tokens.note


def test_a_hermes_3_profile_gets_llama_counts() -> None:
    spliced = splice(
        messages=ASK,
        tools=[GET_TIME],
        model="hermes-3",
        template=template("NousResearch-Hermes-3-Llama-3.1-8B-tool_use"),
        special_tokens={"bos_token": "<|begin_of_text|>"},
    )

    assert spliced.status == "exact"
    assert spliced.tokens.encoding == "llama3.1"
    assert spliced.tokens.prompt == count_tokens(spliced.text, "llama3.1", ["<|begin_of_text|>"])


def test_the_profile_setting_wins_and_none_is_said() -> None:
    assert choose_encoding("gpt-4o", tokenizer="cl100k_base") == (
        "cl100k_base",
        "the profile's tokenizer setting",
    )
    chosen, why = choose_encoding("mistral-nemo", template=template("mistralai-Mistral-Nemo-Instruct-2407"))
    assert chosen is None
    assert "Tekken" in why
    spliced = splice(
        messages=ASK,
        tools=[],
        model="mistral-nemo",
        template=template("mistralai-Mistral-Nemo-Instruct-2407"),
        special_tokens={"bos_token": "<s>", "eos_token": "</s>"},
    )
    assert spliced.tokens.prompt is None and "Tekken" in spliced.tokens.note
