"""Paradigm registry: ways of calling tools by key (the Conversation's ``paradigm`` choices)."""

from conversations.loop.paradigms.auto import AutoParadigm
from conversations.loop.paradigms.base import Decision, Paradigm
from conversations.loop.paradigms.intent import IntentParadigm
from conversations.loop.paradigms.native import NativeParadigm
from conversations.loop.paradigms.prompt_json import PromptJsonParadigm
from conversations.loop.paradigms.prompt_xml import PromptXmlParadigm
from conversations.loop.paradigms.structured import StructuredParadigm

PARADIGMS: dict[str, type[Paradigm]] = {
    paradigm.key: paradigm
    for paradigm in (
        NativeParadigm,
        PromptXmlParadigm,
        PromptJsonParadigm,
        StructuredParadigm,
        IntentParadigm,
        AutoParadigm,
    )
}

__all__ = ["PARADIGMS", "Decision", "Paradigm"]
