"""Issue 20, what remained: a ChatML template does not decide the tokenizer by itself (Hermes-3 is
Llama 3.1 underneath); a tokenizer config's added tokens reach the counts; a profile can override
how tool-call arguments reach its template (docs/chat-templates.md §3, §5)."""

from __future__ import annotations

from pathlib import Path

import pytest
import quicktok

from conversations.loop.splicing import count_tokens, encoding_for, splice
from conversations.loop.splicing.tokens import choose_encoding
from conversations.typealias import JSONDict

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "chat_templates"
HERMES = "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"
QWEN = "Qwen-Qwen2.5-7B-Instruct"
ASK: list[JSONDict] = [{"role": "user", "content": "Time in Paris?"}]
GET_TIME: JSONDict = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Now",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
    },
}
AFTER_CALL: list[JSONDict] = [
    *ASK,
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_time", "arguments": '{"tz":"Europe/Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
]


def template(name: str) -> str:
    return (CORPUS / f"{name}.jinja").read_text()


# --- 1. ChatML does not decide the tokenizer by itself ------------------------------------------


@pytest.mark.parametrize("model", ["NousResearch/Hermes-3-Llama-3.1-8B", "hermes-3", "my-llama-3.1-finetune"])
def test_a_hermes_3_profile_without_bos_token_is_counted_as_llama_3_1_by_its_name(model: str) -> None:
    spliced = splice(messages=ASK, tools=[GET_TIME], model=model, template=template(HERMES))

    assert spliced.tokens.encoding == "llama3.1"
    assert "ChatML" in spliced.tokens.note and "model's name" in spliced.tokens.note


def test_the_configured_bos_token_decides_for_chatml() -> None:
    encoding, why = choose_encoding(
        "demo", template=template(HERMES), special_tokens={"bos_token": "<|begin_of_text|>"}
    )

    assert encoding == "llama3.1"
    assert "bos_token" in why and "<|begin_of_text|>" in why


def test_qwen_is_chosen_for_chatml_only_when_nothing_else_says_otherwise() -> None:
    by_name = choose_encoding("Qwen/Qwen2.5-7B-Instruct", template=template(QWEN))
    assumed = choose_encoding("demo", template=template(QWEN))
    mistral = choose_encoding("OpenHermes-2.5-Mistral-7B", template=template(QWEN))

    assert by_name[0] == "qwen3" and "model's name" in by_name[1]
    assert assumed[0] == "qwen3" and "assumed" in assumed[1]
    assert mistral[0] is None and "Mistral" in mistral[1]


def test_a_family_that_names_its_tokenizer_wins_over_the_model_name() -> None:
    assert (
        choose_encoding("qwen2.5-7b", template=template("meta-llama-Llama-3.1-8B-Instruct"))[0] == "llama3.1"
    )
    assert (
        choose_encoding("llama-3.1-8b", template=template("mistralai-Mistral-Nemo-Instruct-2407"))[0] is None
    )


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("llama-3.1-8b-instruct", "llama3.1"),
        ("llama3.2:3b", "llama3.1"),
        ("meta-llama/Llama-3.3-70B-Instruct", "llama3.1"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama3"),
        ("llama3:8b", "llama3"),
        ("NousResearch/Hermes-3-Llama-3.1-8B", "llama3.1"),  # every Hermes 3 is on Llama 3.1/3.2
        ("hermes-3", "llama3.1"),
    ],
)
def test_the_model_name_tells_llama_3_0_from_3_1_and_later_and_hermes_3(model: str, encoding: str) -> None:
    assert encoding_for(model) == encoding


# --- 2. Added tokens from a tokenizer config count as one token each ----------------------------

HERMES_ADDED = [
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<|im_start|>",
    "<|im_end|>",
]


def test_added_tokens_reach_the_counts() -> None:
    common: dict[str, object] = {
        "messages": AFTER_CALL,
        "tools": [GET_TIME],
        "model": "hermes-3",
        "template": template(HERMES),
        "special_tokens": {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"},
    }
    plain = splice(**common)  # type: ignore[arg-type]
    added = splice(added_tokens=HERMES_ADDED, **common)  # type: ignore[arg-type]

    assert added.text == plain.text and "<tool_call>" in added.text
    expected = count_tokens(added.text, "llama3.1", ["<|begin_of_text|>", "<|im_end|>", *HERMES_ADDED])
    assert added.tokens.prompt == expected
    assert plain.tokens.prompt is not None and added.tokens.prompt < plain.tokens.prompt
    assert added.tokens.results[0] < plain.tokens.results[0]  # <tool_response> tags: 1 token each
    assert "6 added tokens" in added.tokens.note


def test_count_tokens_counts_each_added_token_once() -> None:
    assert count_tokens("<tool_call>", "llama3.1") > 1
    assert count_tokens("<tool_call>", "llama3.1", ["<tool_call>"]) == 1
    assert count_tokens("a<tool_call>b</tool_call>", "qwen3", ["<tool_call>", "</tool_call>"]) == 4


# --- 3. The profile may override how arguments reach the template --------------------------------


def test_the_profile_setting_overrides_the_engines_arguments_and_says_so() -> None:
    common: dict[str, object] = {
        "messages": AFTER_CALL,
        "tools": [GET_TIME],
        "model": "hermes-3",
        "template": template(HERMES),
        "special_tokens": {"bos_token": "<|begin_of_text|>"},
    }
    default = splice(**common)  # type: ignore[arg-type]
    as_string = splice(arguments_setting="string", **common)  # type: ignore[arg-type]
    by_probe = splice(arguments_setting="llama.cpp", **common)  # type: ignore[arg-type]

    assert '{"tz": "Europe/Paris"}' in default.text  # vLLM's default: parsed, then tojson
    assert "the profile's setting" not in default.source
    assert '{"tz":"Europe/Paris"}' in as_string.text
    assert as_string.source.endswith("tool-call arguments: the wire's JSON string (the profile's setting)")
    assert by_probe.text == default.text  # Hermes-3 reads arguments as an object: llama.cpp parses
    assert "as llama.cpp's probe decides: an object (the profile's setting)" in by_probe.source


def test_an_unknown_arguments_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="arguments"):
        splice(messages=ASK, tools=[], model="x", template=template(QWEN), arguments_setting="dict")


# --- 4. Llama 3.1's special tokens (docs/chat-templates.md §5) ------------------------------------


@pytest.mark.parametrize(
    ("reserved", "token_id", "renamed"),
    [
        ("<|reserved_special_token_2|>", 128004, "<|finetune_right_pad_id|>"),
        ("<|reserved_special_token_4|>", 128008, "<|eom_id|>"),
        ("<|reserved_special_token_5|>", 128010, "<|python_tag|>"),
    ],
)
def test_the_tokens_3_1_renamed_are_3_0s_reserved_ones_at_the_same_ids(
    reserved: str, token_id: int, renamed: str
) -> None:
    """The ids of llama.cpp's Llama 3 vocabulary and of Meta's reference tokenizer (§5's sources):
    the base encoding holds 3.0's reserved token at the id 3.1 gives the renamed one."""
    llama3 = quicktok.get_encoding("llama3")

    assert llama3.encode_with_special(reserved) == [token_id]
    assert llama3.encode_with_special("<|begin_of_text|>") == [128000]
    assert llama3.encode_with_special("<|reserved_special_token_250|>") == [128255]
    assert count_tokens(renamed, "llama3.1") == 1
    assert count_tokens(reserved, "llama3.1") == 1  # 3.1 keeps the name, at another id
