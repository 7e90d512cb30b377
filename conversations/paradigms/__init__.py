"""Paradigm registry: ways of calling tools by key (the Conversation's ``paradigm`` choices)."""

from conversations.paradigms.auto import AutoParadigm
from conversations.paradigms.base import Decision, Paradigm
from conversations.paradigms.intent import IntentParadigm
from conversations.paradigms.native import NativeParadigm
from conversations.paradigms.prompt_json import PromptJsonParadigm
from conversations.paradigms.prompt_xml import PromptXmlParadigm
from conversations.paradigms.structured import StructuredParadigm

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
