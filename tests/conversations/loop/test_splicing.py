"""The spliced prompt: chat-template rendering, the fallbacks, token counts, server templates, diffs."""

from __future__ import annotations

import copy
import gc
import json
import weakref
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest
import quicktok
from hypothesis import given, settings
from hypothesis import strategies as st

from conversations.loop.splicing import (
    GENERIC_SOURCE,
    GENERIC_TEMPLATE,
    OLLAMA_GO_TEMPLATE_SOURCE,
    PARADIGM_SOURCE,
    TemplateError,
    count_tokens,
    encoding_for,
    generic,
    probe_request,
    prompt_diff,
    render_chat_template,
    rendering,
    server_template,
    splice,
    template_from_server,
    templates,
)
from conversations.loop.splicing.pieces import spliced_pieces
from conversations.typealias import JSONDict
from tests.support import python_calls

QWEN_LIKE = (
    Path(__file__).resolve().parents[2] / "fixtures" / "chat_templates" / "qwen_like.jinja"
).read_text()

GET_TIME: JSONDict = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone.",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
    },
}
ECHO: JSONDict = {
    "type": "function",
    "function": {
        "name": "echo",
        "description": "Répète le texte — « tel quel ».",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    },
}
TOOLS = [GET_TIME, ECHO]


def call(call_id: str, name: str, arguments: str) -> JSONDict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# One tool round: question, a call, its result.
ROUND: list[JSONDict] = [
    {"role": "user", "content": "Time in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [call("c1", "get_time", '{"tz": "Europe/Paris"}')]},
    {"role": "tool", "tool_call_id": "c1", "content": "14:05"},
]


def render(template: str, **kwargs: object) -> str:
    kwargs.setdefault("messages", [{"role": "user", "content": "hi"}])
    return render_chat_template(template, **kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# render_chat_template with a real-world-shaped template
# --------------------------------------------------------------------------------------------


def test_qwen_like_template_renders_tools_calls_and_results_exactly() -> None:
    text = render_chat_template(QWEN_LIKE, messages=ROUND, tools=[GET_TIME])

    tool_line = (
        '{"type": "function", "function": {"name": "get_time", "description": "Current time in a time zone.", '
        '"parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}'
    )
    assert text == (
        "<|im_start|>system\n"
        "You are a helpful assistant.\n"
        "\n"
        "# Tools\n"
        "\n"
        "You can call the functions below to help with the user's request.\n"
        "Function signatures, inside <tools></tools> tags:\n"
        "<tools>\n"
        f"{tool_line}\n"
        "</tools>\n"
        "\n"
        "For each call, reply with a JSON object inside <tool_call></tool_call> tags:\n"
        "<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "Time in Paris?<|im_end|>\n"
        "<|im_start|>assistant\n"
        "<tool_call>\n"
        '{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n"
        "<tool_response>\n"
        "14:05\n"
        "</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen_like_template_groups_consecutive_results_and_keeps_text_turns() -> None:
    messages: list[JSONDict] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Two zones?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                call("a", "get_time", '{"tz": "UTC"}'),
                call("b", "get_time", '{"tz": "Asia/Tokyo"}'),
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "12:00"},
        {"role": "tool", "tool_call_id": "b", "content": "21:00"},
    ]

    text = render_chat_template(QWEN_LIKE, messages=messages, add_generation_prompt=False)

    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>user\nTwo zones?<|im_end|>\n"
        "<|im_start|>assistant\nChecking.\n"
        '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n12:00\n</tool_response>\n"
        "<tool_response>\n21:00\n</tool_response><|im_end|>\n"
    )


def test_history_arguments_reach_the_template_as_dicts_and_bad_json_stays_a_string() -> None:
    messages: list[JSONDict] = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("a", "f", '{"x": [1, 2]}'), call("b", "f", '{"x": 1'), call("c", "f", "[1]")],
        }
    ]
    original = copy.deepcopy(messages)
    template = (
        "{% for c in messages[0].tool_calls %}"
        "{{ c.function.arguments is mapping }} {{ c.function.arguments | tojson }}\n"
        "{% endfor %}"
    )

    text = render_chat_template(template, messages=messages)

    # Parsed as vLLM does: tojson'ed once (no double encoding); text that is not JSON stays the text.
    assert text == 'True {"x": [1, 2]}\nFalse "{\\"x\\": 1"\nFalse [1]\n'
    assert messages == original


def test_add_generation_prompt_is_passed_through() -> None:
    with_prompt = render_chat_template(QWEN_LIKE, messages=[{"role": "user", "content": "hi"}])
    without = render_chat_template(
        QWEN_LIKE, messages=[{"role": "user", "content": "hi"}], add_generation_prompt=False
    )

    assert with_prompt == without + "<|im_start|>assistant\n"
    assert without.endswith("hi<|im_end|>\n")


def test_variables_special_tokens_extra_and_tools_none() -> None:
    template = "[{{ bos_token }}|{{ eos_token }}|{{ pad_token }}] {{ tools is none }} {{ enable_thinking }} {{ date_string }}"

    assert render(template) == "[||] True  "
    assert render(template, tools=[]) == "[||] True  "
    assert (
        render(
            template,
            tools=[GET_TIME],
            special_tokens={"bos_token": "<s>", "eos_token": "</s>"},
            extra={"enable_thinking": False, "date_string": "26 Jul 2024"},
        )
        == "[<s>|</s>|] False False 26 Jul 2024"
    )


def test_extra_may_not_replace_the_messages() -> None:
    with pytest.raises(ValueError, match="messages"):
        render("x", extra={"messages": []})


def test_generation_tag_and_loop_controls() -> None:
    template = (
        "{% for m in messages %}{% if m.role == 'user' %}{% continue %}{% endif %}"
        "{% generation %}[{{ m.content }}]{% endgeneration %}{% if loop.index > 2 %}{% break %}{% endif %}"
        "{% endfor %}"
    )
    messages: list[JSONDict] = [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a1"},
        {"role": "assistant", "content": "a2"},
        {"role": "assistant", "content": "a3"},
    ]

    assert render_chat_template(template, messages=messages) == "[a1][a2]"


def test_tojson_is_plain_json_dumps_with_its_options() -> None:
    value = {"b": "<tag> & 'q'", "a": "é中"}

    assert render("{{ v | tojson }}", extra={"v": value}) == '{"b": "<tag> & \'q\'", "a": "é中"}'
    assert render("{{ v | tojson(indent=2, sort_keys=True) }}", extra={"v": value}) == json.dumps(
        value, ensure_ascii=False, indent=2, sort_keys=True
    )
    assert (
        render("{{ v | tojson(separators=(',', ':')) }}", extra={"v": value})
        == '{"b":"<tag> & \'q\'","a":"é中"}'
    )
    assert render("{{ v | tojson(ensure_ascii=True) }}", extra={"v": "é"}) == '"\\u00e9"'


def test_strftime_now() -> None:
    before = datetime.now().strftime("%d %b %Y")
    text = render("Today Date: {{ strftime_now('%d %b %Y') }}")
    after = datetime.now().strftime("%d %b %Y")

    assert text in {f"Today Date: {before}", f"Today Date: {after}"}


# --------------------------------------------------------------------------------------------
# Template errors and the sandbox
# --------------------------------------------------------------------------------------------


def test_raise_exception_becomes_template_error_with_its_message_and_line() -> None:
    template = "line one\n{% if messages | length > 1 %}\n{{ raise_exception('Only one message is supported!') }}\n{% endif %}"

    assert render(template) == "line one\n"
    with pytest.raises(TemplateError) as caught:
        render(template, messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])

    assert caught.value.reason == "Only one message is supported!"
    assert caught.value.lineno == 3
    assert str(caught.value) == "template raised an exception at line 3: Only one message is supported!"


def test_syntax_error_names_the_line() -> None:
    with pytest.raises(TemplateError) as caught:
        render("ok\n{% for m in messages %}\n{{ m.content | }}\n{% endfor %}")

    assert caught.value.kind == "syntax error"
    assert caught.value.lineno == 3
    assert str(caught.value).startswith("template syntax error at line 3: ")


def test_unclosed_block_is_a_syntax_error() -> None:
    with pytest.raises(TemplateError, match="endfor"):
        render("ok\n{% for m in messages %}\n{{ m.content }}\n")


def test_unknown_filter_is_a_template_error() -> None:
    with pytest.raises(TemplateError, match="No filter named 'shout'"):
        render("{{ 'x' | shout }}")


def test_using_an_undefined_value_is_a_template_error_printing_one_is_not() -> None:
    # transformers keeps jinja's default Undefined: printing a missing variable gives "".
    assert render("[{{ not_passed }}]") == "[]"

    with pytest.raises(TemplateError) as caught:
        render("first\n{{ not_passed.attribute }}")

    assert caught.value.kind == "undefined value"
    assert caught.value.lineno == 2
    assert "'not_passed' is undefined" in str(caught.value)


def test_other_runtime_failures_are_template_errors() -> None:
    with pytest.raises(TemplateError, match="ZeroDivisionError"):
        render("{{ 1 / 0 }}")
    with pytest.raises(TemplateError, match="MAX_RANGE"):
        render("{% for i in range(10 ** 7) %}{% endfor %}")


@pytest.mark.parametrize(
    "attack",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__.os }}",
        "{{ raise_exception.__globals__['os'].system('true') }}",
        "{{ strftime_now.__globals__.__builtins__ }}",
        "{{ messages.__class__.__base__.__subclasses__() }}",
        "{{ messages.append({'role': 'user'}) }}",
        "{{ messages[0].update({'role': 'x'}) }}",
        "{% set x = messages.pop() %}",
    ],
)
def test_sandbox_refuses_escapes_and_mutation(attack: str) -> None:
    with pytest.raises(TemplateError) as caught:
        render(attack)

    assert caught.value.kind in {"sandbox violation", "undefined value"}
    assert "unsafe" in str(caught.value)


@pytest.mark.parametrize(
    "probe",
    [
        "{{ ''.__class__ }}",
        "{{ '{0.__class__}'.format('a') }}",
        "{{ raise_exception.__code__ }}",
        "{{ messages.__class__ }}",
    ],
)
def test_unsafe_attributes_never_leak_python_internals(probe: str) -> None:
    # Reading an unsafe attribute yields an undefined value (as in transformers); nothing leaks.
    assert render(probe) == ""


# --------------------------------------------------------------------------------------------
# splice
# --------------------------------------------------------------------------------------------


def test_splice_with_a_template_is_exact() -> None:
    spliced = splice(messages=ROUND, tools=[GET_TIME], model="Qwen/Qwen2.5-7B-Instruct", template=QWEN_LIKE)

    assert spliced.exact is True
    assert spliced.source == "the profile's chat template"
    assert spliced.text == render_chat_template(QWEN_LIKE, messages=ROUND, tools=[GET_TIME])
    assert spliced.tokens.encoding == "qwen3"


def test_splice_keeps_a_custom_template_source_and_special_tokens() -> None:
    spliced = splice(
        messages=ROUND,
        tools=[],
        model="llama-3.1-8b",
        template="{{ bos_token }}{{ messages | length }}",
        template_source="llama.cpp /props chat_template",
        special_tokens={"bos_token": "<|begin_of_text|>"},
    )

    assert (spliced.text, spliced.exact, spliced.source) == (
        "<|begin_of_text|>3",
        True,
        "llama.cpp /props chat_template",
    )
    assert spliced.tokens.prompt == 2  # <|begin_of_text|> is one special token, "3" another


@pytest.mark.parametrize(
    ("template", "error"),
    [
        ("{% if %}", "template syntax error at line 1"),
        ("{{ raise_exception('Conversation roles must alternate') }}", "Conversation roles must alternate"),
    ],
)
def test_splice_with_a_broken_template_is_failed_over_the_illustrative_rendering(
    template: str, error: str
) -> None:
    spliced = splice(messages=ROUND, tools=TOOLS, model="gpt-4o", template=template)

    assert (spliced.exact, spliced.status) == (False, "failed")
    assert spliced.source.startswith("failed: the profile's chat template: ")
    assert spliced.source.endswith("shown instead: the generic ChatML template (illustrative)")
    assert error in spliced.source
    assert spliced.text == render_chat_template(GENERIC_TEMPLATE, messages=ROUND, tools=TOOLS)


def test_splice_prompt_paradigm_shows_the_messages_role_labelled() -> None:
    messages: list[JSONDict] = [
        {"role": "system", "content": "Tools:\n- get_time(tz)\nAnswer with JSON."},
        {"role": "user", "content": "Time in Paris?"},
        {"role": "assistant", "content": '{"tool": "get_time", "arguments": {"tz": "Europe/Paris"}}'},
        {"role": "user", "content": [{"type": "text", "text": "Result of get_time: 14:05"}]},
    ]

    spliced = splice(messages=messages, tools=[GET_TIME], model="gpt-4o-mini", prompt_is_ours=True)

    assert (spliced.exact, spliced.status) == (False, "as sent")
    assert spliced.source == PARADIGM_SOURCE
    assert spliced.text == (
        "### system\nTools:\n- get_time(tz)\nAnswer with JSON.\n\n"
        "### user\nTime in Paris?\n\n"
        '### assistant\n{"tool": "get_time", "arguments": {"tz": "Europe/Paris"}}\n\n'
        "### user\nResult of get_time: 14:05"
    )


def test_splice_prompt_paradigm_with_a_template_renders_it_without_native_tools() -> None:
    messages: list[JSONDict] = [
        {"role": "system", "content": "Tools: get_time"},
        {"role": "user", "content": "hi"},
    ]

    spliced = splice(
        messages=messages, tools=[GET_TIME], model="qwen3-8b", template=QWEN_LIKE, prompt_is_ours=True
    )

    assert spliced.exact is True
    assert (
        spliced.text
        == "<|im_start|>system\nTools: get_time<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_splice_without_a_template_uses_the_generic_illustrative_template() -> None:
    spliced = splice(messages=ROUND, tools=TOOLS, model="gpt-4.1")

    assert spliced.exact is False
    assert spliced.source == GENERIC_SOURCE
    for tool in TOOLS:
        assert "\n" + json.dumps(tool, ensure_ascii=False) + "\n" in spliced.text
    assert (
        '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}\n</tool_call>' in spliced.text
    )
    assert "<|im_start|>user\n<tool_response>\n14:05\n</tool_response><|im_end|>\n" in spliced.text
    assert spliced.text.endswith("<|im_start|>assistant\n")
    assert "illustrative rendering" in spliced.tokens.note


def test_generic_template_full_small_case() -> None:
    messages: list[JSONDict] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "On it.", "tool_calls": [call("a", "echo", '{"text": "x"}')]},
        {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "x"}]},
    ]

    text = render_chat_template(
        GENERIC_TEMPLATE, messages=messages, tools=[ECHO], add_generation_prompt=False
    )

    assert text == (
        "<|im_start|>system\n"
        "Be brief.\n"
        "\n"
        "# Tools\n"
        "\n"
        "You may call one or more of the functions below to help with the user's request.\n"
        "Their signatures are listed inside <tools></tools>, one JSON object per line:\n"
        "<tools>\n"
        f"{json.dumps(ECHO, ensure_ascii=False)}\n"
        "</tools>\n"
        "\n"
        "To call a function, answer with a JSON object holding its name and arguments inside\n"
        "<tool_call></tool_call> tags, one block per call:\n"
        "<tool_call>\n"
        '{"name": <function-name>, "arguments": <arguments-as-a-JSON-object>}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n"
        '<|im_start|>assistant\nOn it.\n<tool_call>\n{"name": "echo", "arguments": {"text": "x"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\nx\n</tool_response><|im_end|>\n"
    )


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "hi"}],
        [
            {"role": "system", "content": [{"type": "text", "text": "Be brief."}, "and kind"]},
            {"role": "user", "content": {"items": 1, "keys": "values"}},
            {"role": "assistant", "content": None, "tool_calls": [call("a", "echo", '{"text": "<b>&x"}')]},
            {"role": "tool", "tool_call_id": "a", "content": "x'<>&\"y"},
            {"role": "assistant", "content": "done", "tool_calls": [call("b", "echo", "not json")]},
        ],
    ],
)
@pytest.mark.parametrize("tools", [[], [ECHO]])
def test_the_generic_template_renders_outside_the_sandbox_exactly_as_inside(
    messages: list[JSONDict], tools: list[JSONDict]
) -> None:
    sandboxed = rendering._compile(GENERIC_TEMPLATE).render(
        messages=rendering.template_messages(messages, parse=True),
        tools=tools or None,
        add_generation_prompt=True,
        documents=None,
        **dict.fromkeys(rendering._SPECIAL_TOKEN_NAMES, ""),
    )

    assert render_chat_template(GENERIC_TEMPLATE, messages=messages, tools=tools) == sandboxed


def _sandboxed_generic(messages: list[JSONDict], tools: list[JSONDict]) -> str:
    return rendering._compile(GENERIC_TEMPLATE).render(
        messages=rendering.template_messages(messages, parse=True),
        tools=tools or None,
        add_generation_prompt=True,
        documents=None,
        **dict.fromkeys(rendering._SPECIAL_TOKEN_NAMES, ""),
    )


@pytest.mark.parametrize(
    "messages",
    [
        ROUND,
        [{"role": "user", "content": "hi"}],
        [
            {
                "role": "system",
                "content": [{"type": "text", "text": "Be brief."}, "and kind", {"type": "image"}],
            },
            {"role": "user", "content": {"items": 1, "keys": "values"}},
            {"role": "assistant", "content": None, "tool_calls": [call("a", "echo", '{"text": "<b>&x"}')]},
            {"role": "tool", "tool_call_id": "a", "content": "x'<>&\"y"},
            {"role": "tool", "tool_call_id": "b", "content": None},
            {"role": "assistant", "content": "done", "tool_calls": [call("b", "echo", "not json")]},
            {"role": "developer"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"name": "echo", "arguments": {"n": [1, 2]}}],
            },
            {"role": "tool", "tool_call_id": "c", "content": "last"},
        ],
        [{"role": "system", "content": None}, {"role": "tool", "content": "first"}],
    ],
)
@pytest.mark.parametrize("tools", [[], [ECHO], TOOLS])
def test_the_generic_template_in_plain_python_renders_exactly_what_jinja_renders(
    messages: list[JSONDict], tools: list[JSONDict]
) -> None:
    plain = generic._generic_rendering(messages, tools)

    assert plain is not None
    assert plain == _sandboxed_generic(messages, tools)


_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
_CONTENT = st.one_of(
    st.none(),
    _TEXT,
    st.dictionaries(_TEXT, _TEXT, max_size=2),
    st.lists(st.one_of(_TEXT, st.fixed_dictionaries({"type": st.just("text"), "text": _TEXT})), max_size=3),
)
_CALL = st.fixed_dictionaries(
    {
        "id": _TEXT,
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {"name": _TEXT, "arguments": st.one_of(_TEXT, st.dictionaries(_TEXT, st.integers(), max_size=2))}
        ),
    }
)
_MESSAGE = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "tool", "developer"]), "content": _CONTENT}
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": _CONTENT, "tool_calls": st.lists(_CALL, max_size=2)}
    ),
)


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(_MESSAGE, max_size=6), with_tools=st.booleans())
def test_the_plain_rendering_matches_jinja_on_any_well_formed_history(
    messages: list[JSONDict], with_tools: bool
) -> None:
    tools = TOOLS if with_tools else []
    plain = generic._generic_rendering(messages, tools)

    assert plain is not None
    assert plain == _sandboxed_generic(messages, tools)


@settings(max_examples=150, deadline=None)
@given(messages=st.lists(_MESSAGE, max_size=8), with_tools=st.booleans())
def test_the_remembering_renderer_splices_each_piece_as_jinja_does(
    messages: list[JSONDict], with_tools: bool
) -> None:
    # One renderer serves a prompt's every rendering (without each tool, without each result),
    # remembering the text of each definition and assistant message it has written.
    tools = TOOLS if with_tools else []
    renderer = templates.GenericRenderer()
    full = renderer(messages, tools)

    remembered = spliced_pieces(renderer, full, messages, tools)

    assert full == _sandboxed_generic(messages, tools)
    assert remembered == spliced_pieces(_sandboxed_generic, full, messages, tools)


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(_MESSAGE, min_size=1, max_size=8), with_tools=st.booleans(), data=st.data())
def test_each_variant_of_a_prompt_is_the_rendering_of_the_changed_lists(
    messages: list[JSONDict], with_tools: bool, data: st.DataObject
) -> None:
    """A step's variants (one tool left out; one message left out or emptied) are made from the
    prompt's blocks: each must be the text of rendering the changed lists whole."""
    tools = TOOLS if with_tools else []
    renderer = templates.GenericRenderer()
    variants = renderer.variants(messages, tools)
    index = data.draw(st.integers(0, len(messages) - 1))
    replacement = data.draw(st.one_of(st.none(), st.just({**messages[index], "content": ""}), _MESSAGE))

    assert variants is not None
    kept = [replacement] if replacement is not None else []
    changed = messages[:index] + kept + messages[index + 1 :]
    assert variants.with_message(index, replacement) == _sandboxed_generic(changed, tools)
    for at in range(len(tools)):
        assert variants.without_tool(at) == _sandboxed_generic(messages, tools[:at] + tools[at + 1 :])


@settings(max_examples=150, deadline=None)
@given(pool=st.lists(_MESSAGE, min_size=1, max_size=6), data=st.data())
def test_a_renderer_kept_across_a_turns_prompts_splices_each_as_a_new_one_would(
    pool: list[JSONDict], data: st.DataObject
) -> None:
    """A turn's renderer is kept from one model call to the next (``splice(generic=…)``): what
    it remembers of the prompts before (blocks, definitions, pieces, by the very objects) must
    never show in a later prompt that holds other objects, or the same ones elsewhere — each
    prompt and each of its pieces as Jinja makes them."""
    renderer = templates.GenericRenderer()
    tools_pool = [*TOOLS, copy.deepcopy(ECHO)]  # the same definition as another object too
    for _ in range(data.draw(st.integers(1, 4))):
        messages = [pool[at] for at in data.draw(st.lists(st.integers(0, len(pool) - 1), max_size=7))]
        tools = [tools_pool[at] for at in data.draw(st.lists(st.integers(0, 2), max_size=3, unique=True))]

        full = renderer(messages, tools)

        assert full == _sandboxed_generic(messages, tools)
        assert spliced_pieces(renderer, full, messages, tools) == spliced_pieces(
            _sandboxed_generic, full, messages, tools
        )


def test_a_piece_found_from_the_whole_prompt_is_not_reused_for_another_prompt() -> None:
    """Empty results in a row: what leaving one out removes cannot be told from its neighbours
    alone (the text after them decides it), so it is found from the whole prompt and is not
    kept for the next prompt, whose last result differs though the neighbours are the same."""
    renderer = templates.GenericRenderer()
    shared = [
        {"role": "assistant", "content": "x<|im_end|>\n", "tool_calls": []},
        {"role": "tool", "content": "<tool_response>"},
        *({"role": "tool", "content": ""} for _ in range(3)),
    ]
    for last in ("a", ""):
        messages = [*shared, {"role": "tool", "content": last}]
        full = renderer(messages, [])

        assert spliced_pieces(renderer, full, messages, []) == spliced_pieces(
            _sandboxed_generic, full, messages, []
        )


class _Held(dict):  # type: ignore[type-arg]
    """A message that can be watched for being let go (a plain dict cannot)."""


def test_a_kept_renderer_forgets_what_the_prompts_no_longer_hold() -> None:
    """Kept for a whole turn, the renderer holds the objects of the latest prompts only: the
    history a turn no longer sends (a new conversation's, a long turn's steps) is let go."""
    renderer = templates.GenericRenderer()
    old = [
        _Held(role="user", content="first"),
        _Held(role="tool", content="7"),
        _Held(role="user", content="q"),
    ]
    gone = [weakref.ref(message) for message in old]
    for messages in (old, [_Held(role="user", content="second"), _Held(role="tool", content="8")]):
        spliced_pieces(renderer, renderer(messages, TOOLS), messages, TOOLS)
    for messages in ([_Held(role="user", content="third"), _Held(role="tool", content="9")],) * 2:
        spliced_pieces(renderer, renderer(messages, TOOLS), messages, TOOLS)
    del old, messages
    gc.collect()

    assert [ref() for ref in gone] == [None, None, None]


def test_a_prompt_with_a_shape_left_to_jinja_offers_no_variants() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "user", "content": 42}]

    assert templates.GenericRenderer().variants(messages, [ECHO]) is None


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": 42},
        {"role": "user", "content": [{"type": "text", "text": None}]},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "echo"}}]},
        {"role": "assistant", "content": None, "tool_calls": {"not": "a list"}},
        {"content": "no role"},
    ],
)
def test_shapes_the_plain_rendering_does_not_decide_are_rendered_by_jinja(message: JSONDict) -> None:
    messages = [{"role": "user", "content": "hi"}, message]

    assert generic._generic_rendering(messages, [ECHO]) is None
    try:
        expected = _sandboxed_generic(messages, [ECHO])
    except Exception:  # noqa: BLE001 — where the template fails, splicing must fail too
        with pytest.raises(TemplateError):
            splice(messages=messages, tools=[ECHO], model="gpt-4.1")
    else:
        assert splice(messages=messages, tools=[ECHO], model="gpt-4.1").text == expected


def test_generic_template_without_tools_or_system_is_plain_chatml() -> None:
    text = render_chat_template(GENERIC_TEMPLATE, messages=[{"role": "user", "content": "hi"}])

    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_splice_does_not_render_an_ollama_go_template() -> None:
    go = "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>{{ end }}"

    spliced = splice(
        messages=ROUND,
        tools=TOOLS,
        model="qwen2.5:7b",
        template=go,
        template_source=OLLAMA_GO_TEMPLATE_SOURCE,
    )

    assert spliced.exact is False
    assert "Ollama Go template" in spliced.source
    assert spliced.source.startswith("generic ChatML template (illustrative)")
    assert spliced.text == render_chat_template(GENERIC_TEMPLATE, messages=ROUND, tools=TOOLS)


# --------------------------------------------------------------------------------------------
# Tokens
# --------------------------------------------------------------------------------------------


def test_token_counts_are_the_tokenizers_own() -> None:
    spliced = splice(messages=ROUND, tools=TOOLS, model="gpt-4o")
    encoding = quicktok.get_encoding("o200k_base")

    assert spliced.tokens.encoding == "o200k_base"
    assert spliced.tokens.prompt == len(encoding.encode_with_special(spliced.text))
    # Each piece as the generic template splices it: a definition's line, a result's whole turn.
    assert spliced.tokens.tools == {
        "get_time": len(encoding.encode(json.dumps(GET_TIME, ensure_ascii=False) + "\n")),
        "echo": len(encoding.encode(json.dumps(ECHO, ensure_ascii=False) + "\n")),
    }
    result = "<|im_start|>user\n<tool_response>\n14:05\n</tool_response><|im_end|>\n"
    assert result in spliced.text
    assert spliced.tokens.results == [len(encoding.encode_with_special(result))]
    assert spliced.tokens.note.startswith("counted with o200k_base (quicktok)")


def test_counts_are_not_a_character_estimate() -> None:
    chinese = "工具调用检查器显示模型真正读到的提示词，以及每个工具定义占用多少词元。"

    for name in ("cl100k_base", "o200k_base", "qwen3", "llama3"):
        assert count_tokens(chinese, name) == len(quicktok.get_encoding(name).encode(chinese))
        assert count_tokens(chinese, name) != len(chinese) // 4
    assert count_tokens(chinese, "cl100k_base") != count_tokens(chinese, "o200k_base")


def test_special_token_strings_count_as_one_token() -> None:
    assert count_tokens("<|im_start|>", "qwen3") == 1
    assert count_tokens("<|im_start|>", "o200k_base") > 1  # not special in OpenAI's encoding


def test_exact_template_counts_use_the_models_encoding() -> None:
    spliced = splice(messages=ROUND, tools=[GET_TIME], model="qwen2.5-7b-instruct", template=QWEN_LIKE)

    assert spliced.tokens.prompt == len(quicktok.get_encoding("qwen3").encode_with_special(spliced.text))
    assert spliced.tokens.note == (
        "counted with qwen3 (quicktok), chosen from the chat template's family (ChatML, which many "
        "model families use) and the model's name (Qwen); "
        "each tool and result: the text the prompt loses when "
        "rendered without it"
    )


def test_unknown_model_gets_no_counts_and_says_so() -> None:
    spliced = splice(messages=ROUND, tools=TOOLS, model="mistral-large-latest")

    assert spliced.tokens.encoding is None
    assert spliced.tokens.prompt is None
    assert spliced.tokens.tools == {}
    assert spliced.tokens.results == []
    assert spliced.tokens.note == "no tokenizer is known for model 'mistral-large-latest'; counts not shown"


def test_demo_model_counts_say_the_encoding_is_a_stand_in() -> None:
    spliced = splice(messages=ROUND, tools=TOOLS, model="demo")

    assert spliced.tokens.encoding == "o200k_base"
    assert "stand-in" in spliced.tokens.note


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("demo", "o200k_base"),
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("o1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("ft:gpt-4o-mini:acme::abc123", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("gpt-oss-20b", "o200k_harmony"),
        ("openai/gpt-oss-120b", "o200k_harmony"),
        ("llama-3.1-8b-instruct", "llama3.1"),
        ("llama3.2:3b", "llama3.1"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama3.1"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen3"),
        ("qwen3:8b", "qwen3"),
        ("qwen2-72b", "qwen3"),
        ("qwen-max", "qwen3"),
        ("claude-sonnet-4-5", None),
        ("gemini-2.5-flash", None),
        ("mistral-small", None),
        ("o1x", None),
        ("", None),
    ],
)
def test_encoding_for(model: str, encoding: str | None) -> None:
    assert encoding_for(model) == encoding


# --------------------------------------------------------------------------------------------
# Templates from the serving engine
# --------------------------------------------------------------------------------------------


def fake_server(responses: dict[str, JSONDict]) -> tuple[Callable[[str], JSONDict | None], list[str]]:
    asked: list[str] = []

    def get_json(url: str) -> JSONDict | None:
        asked.append(url)
        return responses.get(url)

    return get_json, asked


def test_llama_cpp_props_keeps_the_tool_use_template_beside_the_default() -> None:
    get_json, asked = fake_server(
        {
            "http://gpu:8080/props": {
                "chat_template": "{{ plain }}",
                "chat_template_tool_use": "{{ with_tools }}",
                "bos_token": "<s>",
                "eos_token": "</s>",
            }
        }
    )

    assert template_from_server("http://gpu:8080/v1", "any", get_json) == ("{{ plain }}", "llama.cpp /props")
    found = server_template("http://gpu:8080/v1/", "any", get_json)
    assert found is not None and found.named == {"tool_use": "{{ with_tools }}"}
    assert found.special_tokens == {"bos_token": "<s>", "eos_token": "</s>"}
    assert asked == ["http://gpu:8080/props", "http://gpu:8080/props"]


def test_llama_cpp_props_without_tool_use_template() -> None:
    get_json, _ = fake_server(
        {"http://gpu:8080/props": {"chat_template": "{{ plain }}", "chat_template_tool_use": ""}}
    )

    found = server_template("http://gpu:8080", "any", get_json)
    assert found is not None and (found.template, found.named) == ("{{ plain }}", {})
    assert splice(
        messages=ROUND, tools=TOOLS, model="m", template="x", template_source=found.source
    ).source == ("llama.cpp /props chat_template")


def test_ollama_show_template_is_returned_as_a_go_template() -> None:
    go = "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>{{ end }}"
    get_json, asked = fake_server(
        {"http://box:11434/api/show?model=qwen2.5%3A7b": {"template": go, "details": {}}}
    )

    assert template_from_server("http://box:11434/v1", "qwen2.5:7b", get_json) == (
        go,
        OLLAMA_GO_TEMPLATE_SOURCE,
    )
    assert template_from_server("http://box:11434/api", "qwen2.5:7b", get_json) == (
        go,
        OLLAMA_GO_TEMPLATE_SOURCE,
    )
    assert asked[:2] == ["http://box:11434/props", "http://box:11434/api/show?model=qwen2.5%3A7b"]


def test_probe_request_tells_the_caller_how_to_fetch() -> None:
    assert probe_request("http://box:11434/api/show?model=qwen2.5%3A7b") == (
        "POST",
        "http://box:11434/api/show",
        {"model": "qwen2.5:7b"},
    )
    assert probe_request("http://gpu:8080/props") == ("GET", "http://gpu:8080/props", None)


def test_no_template_found() -> None:
    get_json, asked = fake_server({"http://api.example/props": {"error": "not found"}})

    assert template_from_server("http://api.example/v1", "gpt-4o", get_json) is None
    assert len(asked) == 2


# --------------------------------------------------------------------------------------------
# prompt_diff
# --------------------------------------------------------------------------------------------


def test_prompt_diff_between_two_steps() -> None:
    step1 = splice(messages=ROUND[:1], tools=[GET_TIME], model="gpt-4o").text
    step2 = splice(messages=ROUND, tools=[GET_TIME], model="gpt-4o").text

    diff = prompt_diff(step1, step2)

    assert [op for op, _ in diff] == ["same", "added"]
    assert diff[0][1] == step1
    assert diff[1][1].startswith('<tool_call>\n{"name": "get_time"')
    assert diff[1][1].endswith("<|im_start|>assistant\n")


def test_prompt_diff_replacement_and_reconstruction() -> None:
    previous = "a\nb\nc\nd\n"
    current = "a\nB\nc\nd\ne\n"

    diff = prompt_diff(previous, current)

    assert diff == [
        ("same", "a\n"),
        ("removed", "b\n"),
        ("added", "B\n"),
        ("same", "c\nd\n"),
        ("added", "e\n"),
    ]
    assert "".join(text for op, text in diff if op != "removed") == current
    assert "".join(text for op, text in diff if op != "added") == previous


def test_prompt_diff_edge_cases() -> None:
    assert prompt_diff("same\n", "same\n") == [("same", "same\n")]
    assert prompt_diff("", "new\n") == [("added", "new\n")]
    assert prompt_diff("old", "") == [("removed", "old")]
    assert prompt_diff("", "") == []


def test_a_long_template_error_is_shortened_in_the_source() -> None:
    spliced = splice(
        messages=ROUND, tools=[], model="gpt-4o", template="{{ raise_exception('" + "x" * 500 + "') }}"
    )

    assert len(spliced.source) < 300
    assert "x… — shown instead" in spliced.source


def test_prompt_diff_of_a_long_prompt_that_grew_costs_what_changed() -> None:
    """A step's prompt is the one before and what the step added: the lines both share at the
    start and end are not handed to the line matcher, whose work grows with the product of the
    lines it compares (a long prompt of repeated lines, blank ones or ``},``, took minutes)."""
    previous = "<|im_start|>user\n" + "},\n\n" * 20_000
    current = previous + "<|im_start|>assistant\nok\n"

    diff, calls = python_calls(lambda: prompt_diff(previous, current))

    assert diff == [("same", previous), ("added", "<|im_start|>assistant\nok\n")]
    assert calls < 1_000


def test_prompt_diff_of_two_long_unrelated_prompts_is_bounded_and_still_rebuilds_both() -> None:
    previous = "a\n\n" * 3_000
    current = "b\n\n" * 3_000

    diff, calls = python_calls(lambda: prompt_diff(previous, current))

    assert calls < 100_000
    assert "".join(text for op, text in diff if op != "removed") == current
    assert "".join(text for op, text in diff if op != "added") == previous
