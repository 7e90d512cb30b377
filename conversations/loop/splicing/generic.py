"""The generic ChatML template (:data:`~conversations.loop.splicing.rendering.GENERIC_TEMPLATE`)
rendered in plain Python: the same text as Jinja's rendering, in a fraction of its time (a
step's prompt is rendered again at every step, and once more for each tool and result left out:
``pieces.spliced_pieces``). :class:`GenericRenderer` keeps what it wrote for a turn's prompts.
Pure Python: no Django, no I/O.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from conversations.loop.splicing.arguments import template_messages
from conversations.loop.splicing.pieces import removed_inside, removed_span
from conversations.loop.splicing.rendering import GENERIC_TEMPLATE, render_chat_template, tojson
from conversations.typealias import JSONDict, JSONValue

_GENERIC_TOOLS_HEAD = (
    "# Tools\n\nYou may call one or more of the functions below to help with the user's request.\n"
    "Their signatures are listed inside <tools></tools>, one JSON object per line:\n<tools>\n"
)
_GENERIC_TOOLS_TAIL = (
    "</tools>\n\nTo call a function, answer with a JSON object holding its name and arguments inside\n"
    "<tool_call></tool_call> tags, one block per call:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <arguments-as-a-JSON-object>}\n</tool_call>'
)


class _NotPlain(Exception):
    """A value the plain rendering of the generic template leaves to Jinja."""


def _generic_text(content: JSONValue) -> str:
    """The template's ``text`` macro, for the content shapes messages have."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, dict):
        return tojson(content)
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, str):
                pieces.append(part)
            elif isinstance(part, dict):
                text = part.get("text", "")
                if not isinstance(text, str):
                    raise _NotPlain
                pieces.append(text)
            else:
                raise _NotPlain
        return "".join(pieces)
    raise _NotPlain


def _generic_call(call: JSONValue) -> str:
    if not isinstance(call, dict):
        raise _NotPlain
    function = call["function"] if "function" in call else call
    if (
        not isinstance(function, dict)
        or not isinstance(function.get("name"), str)
        or "arguments" not in function
    ):
        raise _NotPlain
    arguments = function["arguments"]
    text = arguments if isinstance(arguments, str) else tojson(arguments)
    return f'<tool_call>\n{{"name": {tojson(function["name"])}, "arguments": {text}}}\n</tool_call>'


def _generic_assistant(message: JSONDict) -> str:
    """One assistant message as :data:`GENERIC_TEMPLATE` writes it, its calls' arguments parsed
    first (``template_messages``) as the template is given them.

    Raises:
        _NotPlain: a shape the template's edge cases decide.
    """
    [prepared] = template_messages([message], parse=True)
    content = prepared.get("content")
    parts = [_generic_text(content)] if content else []
    calls = prepared.get("tool_calls") or []
    if not isinstance(calls, list):
        raise _NotPlain
    parts.extend(_generic_call(call) for call in calls)
    return "<|im_start|>assistant\n" + "\n".join(parts) + "<|im_end|>\n"


def _generic_rendering(
    messages: Sequence[JSONDict],
    tools: Sequence[JSONDict],
    tool_json: Callable[[JSONDict], str] = tojson,
    assistant: Callable[[JSONDict], str] = _generic_assistant,
) -> str | None:
    """:data:`GENERIC_TEMPLATE` rendered in plain Python (with a generation prompt): the same
    text, in a fraction of Jinja's time (a step's prompt is rendered again at every step). None
    for a message of a shape the template's edge cases decide (a test holds the two equal).
    ``tool_json`` writes a tool definition's JSON and ``assistant`` an assistant message
    (:class:`GenericRenderer` remembers both)."""
    blocks = _generic_blocks(
        messages, tools, tool_json, functools.partial(_generic_block, assistant=assistant)
    )
    return None if blocks is None else "".join(blocks)


def _generic_blocks(
    messages: Sequence[JSONDict],
    tools: Sequence[JSONDict],
    tool_json: Callable[[JSONDict], str],
    block: Callable[[Sequence[JSONDict], int], str],
) -> list[str] | None:
    """:func:`_generic_rendering`'s text in blocks: the system block (empty without one), one
    block per message (empty for a leading system message, which the system block holds), the
    generation prompt. A message's block depends on the message and its neighbours' roles alone
    (:func:`_generic_block`; ``block(messages, index)`` writes it)."""
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        return None
    try:
        return [
            _generic_system(messages, tools, tool_json),
            *(block(messages, index) for index in range(len(messages))),
            "<|im_start|>assistant\n",
        ]
    except _NotPlain:
        return None


def _generic_system(
    messages: Sequence[JSONDict], tools: Sequence[JSONDict], tool_json: Callable[[JSONDict], str]
) -> str:
    system: list[str] = []
    if messages and messages[0]["role"] == "system":
        system.append(_generic_text(messages[0].get("content")))
    if tools:
        listed = "".join(tool_json(tool) + "\n" for tool in tools)
        system.append((_GENERIC_TOOLS_HEAD + listed + _GENERIC_TOOLS_TAIL).strip())
    return "<|im_start|>system\n" + "\n\n".join(system) + "<|im_end|>\n" if system else ""


def _generic_block(messages: Sequence[JSONDict], index: int, assistant: Callable[[JSONDict], str]) -> str:
    """The text of ``messages[index]``: consecutive tool results share one user turn, so a
    result's block opens it after a message of another role and closes it before one."""
    message = messages[index]
    role = message["role"]
    if role == "tool":
        opens = index == 0 or messages[index - 1]["role"] != "tool"
        closes = index == len(messages) - 1 or messages[index + 1]["role"] != "tool"
        return (
            ("<|im_start|>user\n" if opens else "")
            + f"<tool_response>\n{_generic_text(message.get('content'))}\n</tool_response>"
            + ("<|im_end|>\n" if closes else "\n")
        )
    if role == "assistant":
        return assistant(message)
    if index == 0 and role == "system":
        return ""
    return f"<|im_start|>{role}\n{_generic_text(message.get('content'))}<|im_end|>\n"


def _remembered(
    known: dict[int, tuple[JSONDict, str]], value: JSONDict, write: Callable[[JSONDict], str]
) -> str:
    """``write(value)``, from ``known`` when this very object was written before."""
    seen = known.get(id(value))
    if seen is not None and seen[0] is value:
        return seen[1]
    text = write(value)
    known[id(value)] = (value, text)
    return text


def _generic(messages: list[JSONDict], tools: list[JSONDict]) -> str:
    """:data:`GENERIC_TEMPLATE` applied, by its plain-Python rendering when it decides the shapes."""
    return GenericRenderer()(messages, tools)


class GenericRenderer:
    """:func:`_generic` for the renderings of one prompt: the prompt, then the prompt without
    each of its tools and results (``pieces.spliced_pieces``), which all list the same tool
    definitions and assistant messages. Each definition's JSON and each message's block is
    written once, not once per rendering: with a dozen tools, or twenty calls in a turn, that
    was most of a model call's splicing (each call's arguments parsed and written again for
    each of the step's twenty-odd renderings).

    Kept for a turn's model calls (``splice(generic=…)``), it writes once per turn what each
    call's prompt repeats of the one before: the tools and the history, given again as the very
    same objects. So nothing it is given may be changed in place afterwards (a changed message
    must be a new object). What a prompt no longer holds is forgotten when the next prompt
    comes, so it holds one prompt's objects at most."""

    def __init__(self) -> None:
        # By the object's id, with the object itself: an id is only reused once its object is gone.
        self._lines: dict[int, tuple[JSONDict, str]] = {}
        self._assistants: dict[int, tuple[JSONDict, str]] = {}
        # A message's block, with its neighbours' roles (which the block depends on too).
        self._texts: dict[int, tuple[JSONDict, tuple[object, object], str]] = {}
        self._last: tuple[object, object, list[str] | None] | None = None
        # What a change removes (``_GenericVariants``), this prompt's and the one before's.
        self._pieces: dict[tuple[object, ...], tuple[tuple[object, ...], str]] = {}
        self._pieces_before: dict[tuple[object, ...], tuple[tuple[object, ...], str]] = {}

    def tool_json(self, tool: JSONDict) -> str:
        return _remembered(self._lines, tool, tojson)

    def assistant(self, message: JSONDict) -> str:
        return _remembered(self._assistants, message, _generic_assistant)

    def block(self, messages: Sequence[JSONDict], index: int) -> str:
        """:func:`_generic_block`, from what was written before for this very message with the
        same neighbours' roles."""
        message = messages[index]
        if message["role"] == "assistant":
            return self.assistant(message)
        around = (
            messages[index - 1]["role"] if index else None,
            messages[index + 1]["role"] if index + 1 < len(messages) else None,
        )
        seen = self._texts.get(id(message))
        if seen is not None and seen[0] is message and seen[1] == around:
            return seen[2]
        text = _generic_block(messages, index, self.assistant)
        self._texts[id(message)] = (message, around, text)
        return text

    def piece(
        self, change: tuple[object, ...], held: tuple[object, ...], find: Callable[[], tuple[str, bool]]
    ) -> str:
        """What ``change`` removes from the prompt: as found for the prompt before when the objects
        the touched blocks are written from (``held``) are the very same, else by ``find`` (the
        text, and whether it was found from those blocks alone: only then is it kept)."""
        key = (*change, *map(id, held))
        for pieces in (self._pieces, self._pieces_before):
            seen = pieces.get(key)
            if seen is not None and all(kept is given for kept, given in zip(seen[0], held, strict=True)):
                self._pieces[key] = seen
                return seen[1]
        piece, alone = find()
        if alone:
            self._pieces[key] = (held, piece)
        return piece

    def __call__(self, messages: list[JSONDict], tools: list[JSONDict]) -> str:
        blocks = self._blocks(messages, tools)
        if blocks is not None:
            return "".join(blocks)
        return render_chat_template(GENERIC_TEMPLATE, messages=messages, tools=tools)

    def variants(self, messages: list[JSONDict], tools: list[JSONDict]) -> _GenericVariants | None:
        """This prompt's renderings with one change each (``pieces.Variants``), made from its
        blocks; None for a prompt the plain rendering does not decide."""
        blocks = self._blocks(messages, tools)
        return None if blocks is None else _GenericVariants(self, list(messages), list(tools), blocks)

    def _blocks(self, messages: list[JSONDict], tools: list[JSONDict]) -> list[str] | None:
        """:func:`_generic_blocks`, kept for the last lists of these very objects (the prompt is
        rendered, then its variants made from the same messages)."""
        key = (tuple(map(id, messages)), tuple(map(id, tools)))
        if self._last is not None:
            if self._last[0] == key:
                return self._last[2]
            self._forget_all_but(messages, tools)
            self._pieces_before, self._pieces = self._pieces, {}
        blocks = _generic_blocks(messages, tools, self.tool_json, self.block)
        # The objects are held with their ids, so no id in the key is reused while it is kept.
        self._last = (key, (list(messages), list(tools)), blocks)
        return blocks

    def _forget_all_but(self, messages: list[JSONDict], tools: list[JSONDict]) -> None:
        held = set(map(id, messages))
        self._assistants = {at: seen for at, seen in self._assistants.items() if at in held}
        self._texts = {at: seen for at, seen in self._texts.items() if at in held}
        listed = set(map(id, tools))
        self._lines = {at: seen for at, seen in self._lines.items() if at in listed}


class _GenericVariants:
    """The renderings of one prompt with one tool left out, or one message left out or replaced,
    each the same text as rendering the changed lists: the unchanged blocks are joined again and
    only the blocks the change touches (the system block for a tool; the message and its two
    neighbours for a message) are written. Rendering the whole prompt for each of a step's tools
    and results made a turn's splicing grow with the cube of its length.

    What each change removes (``pieces.Variants``) is found from the touched blocks alone,
    before and after the change (``pieces.removed_inside``), unless their difference reaches
    their edge; only then are the whole texts joined and compared."""

    def __init__(
        self, renderer: GenericRenderer, messages: list[JSONDict], tools: list[JSONDict], blocks: list[str]
    ) -> None:
        self._renderer, self._messages, self._tools, self._blocks = renderer, messages, tools, blocks
        self._full: str | None = None

    @property
    def full(self) -> str:
        if self._full is None:
            self._full = "".join(self._blocks)
        return self._full

    def without_tool(self, index: int) -> str:
        return "".join([self._system_without(index), *self._blocks[1:]])

    def tool_piece(self, index: int) -> str:
        # The system block is written from the tools and a leading system message.
        messages = self._messages
        held = (messages[0] if messages and messages[0]["role"] == "system" else None, *self._tools)
        return self._renderer.piece(("tool", index), held, lambda: self._tool_piece(index))

    def _tool_piece(self, index: int) -> tuple[str, bool]:
        system = self._system_without(index)
        piece = removed_inside(self._blocks[0], system)
        if piece is not None:
            return piece, True
        return removed_span(self.full, "".join([system, *self._blocks[1:]])), False

    def _system_without(self, index: int) -> str:
        tools = self._tools[:index] + self._tools[index + 1 :]
        return _generic_system(self._messages, tools, self._renderer.tool_json)

    def with_message(self, index: int, replacement: JSONDict | None) -> str:
        """The prompt with ``messages[index]`` left out (``replacement`` None) or replaced."""
        changed = self._touched(index, replacement)
        if isinstance(changed, str):
            return changed
        blocks, (start, end) = self._blocks, changed[1]
        return "".join([*blocks[:start], *changed[0], *blocks[end:]])

    def message_piece(self, index: int, replacement: JSONDict | None) -> str:
        if replacement is None and index > 0:
            # The touched blocks (the message's and its neighbours') are written from the
            # messages two places around it, and their roles.
            messages = self._messages
            held = tuple(
                messages[at] if 0 <= at < len(messages) else None for at in range(index - 2, index + 3)
            )
            return self._renderer.piece(("message",), held, lambda: self._message_piece(index, None))
        return self._message_piece(index, replacement)[0]

    def _message_piece(self, index: int, replacement: JSONDict | None) -> tuple[str, bool]:
        changed = self._touched(index, replacement)
        if isinstance(changed, str):
            return removed_span(self.full, changed), False
        blocks, (start, end) = self._blocks, changed[1]
        piece = removed_inside("".join(blocks[start:end]), "".join(changed[0]))
        if piece is not None:
            return piece, True
        return removed_span(self.full, "".join([*blocks[:start], *changed[0], *blocks[end:]])), False

    def _touched(self, index: int, replacement: JSONDict | None) -> str | tuple[list[str], tuple[int, int]]:
        """The changed prompt's blocks in place of ``blocks[start:end]``, with ``(start, end)``; or
        the whole changed prompt, when its system block may change or a block is left to Jinja."""
        messages = self._messages
        changed = (
            messages[:index] + ([replacement] if replacement is not None else []) + messages[index + 1 :]
        )
        # The whole prompt, by a renderer of its own (the turn's keeps to the turn's prompts).
        if index == 0:  # the system block may change
            return _generic(changed, self._tools)
        # Changed messages' blocks (new indices): from the one before ``index`` to the one that
        # was after it (or to the replacement, when ``index`` was the last).
        last_old = min(index + 1, len(messages) - 1)
        last_new = last_old if replacement is not None else last_old - 1
        try:
            middle = [self._renderer.block(changed, at) for at in range(index - 1, last_new + 1)]
        except _NotPlain:
            return _generic(changed, self._tools)
        return middle, (index, last_old + 2)
