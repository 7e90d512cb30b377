"""Paradigm registry: ways of calling tools by key (the Conversation's ``paradigm`` choices)."""

from conversations.paradigms.base import Decision, Paradigm
from conversations.paradigms.native import NativeParadigm

PARADIGMS: dict[str, type[Paradigm]] = {paradigm.key: paradigm for paradigm in (NativeParadigm,)}

__all__ = ["PARADIGMS", "Decision", "Paradigm"]
