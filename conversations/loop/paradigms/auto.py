"""Auto: the best paradigm the model supports, downgrading when the provider refuses at run time.

The ladder is native → structured → prompt_xml. The start rung comes from the model profile's
capabilities (a capability known to be "no" is skipped). When the provider refuses a rung with
one of the known refusal messages, the refusal is recorded as its own ``fallback`` step, the
capability is reported back (the runner remembers it on the profile, with when and why, so the
next turn starts lower — except on the demo model, whose refusals are scenarios of the question:
conversations/capabilities.py) and the same decision is retried one rung down.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar

from conversations.loop.paradigms.base import Decision, DecisionContext, Paradigm
from conversations.loop.paradigms.native import NativeParadigm
from conversations.loop.paradigms.prompt_xml import PromptXmlParadigm
from conversations.loop.paradigms.structured import StructuredParadigm
from conversations.loop.providers.base import ProviderError

# (rung, the capability it needs, the paradigm)
LADDER: tuple[tuple[str, str | None, type[Paradigm]], ...] = (
    ("native", "native_tools", NativeParadigm),
    ("structured", "structured_output", StructuredParadigm),
    ("prompt_xml", None, PromptXmlParadigm),
)

# Refusal messages that mean "this model/server cannot do that" (docs/wire-formats.md §6, §12), by capability.
REFUSALS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"does not support tools", re.I), "native_tools"),
    (re.compile(r"tool choice requires --enable-auto-tool-choice", re.I), "native_tools"),
    (re.compile(r"(tools|function calling|tool use) (is|are) not supported", re.I), "native_tools"),
    (re.compile(r"does not support (function calling|tool(s| use| calling))", re.I), "native_tools"),
    (re.compile(r"response_format.*(not supported|unsupported|invalid)", re.I), "structured_output"),
    (re.compile(r"json_schema.*(not supported|unsupported)", re.I), "structured_output"),
    (re.compile(r"response_format type is unavailable", re.I), "structured_output"),
    (
        re.compile(r"does not support (structured output|json_schema|response_format)", re.I),
        "structured_output",
    ),
)
_REFUSAL_STATUSES = {400, 404, 422, 501}


def refused_capability(error: ProviderError) -> str | None:
    """The capability a provider error says the model lacks, or None for any other failure."""
    if error.status is not None and error.status not in _REFUSAL_STATUSES:
        return None
    for pattern, capability in REFUSALS:
        if pattern.search(error.message):
            return capability
    return None


def start_rung(capabilities: Mapping[str, str]) -> tuple[int, str]:
    """The first rung whose capability is not known to be missing, and why it was chosen."""
    skipped: list[str] = []
    for index, (key, capability, _) in enumerate(LADDER):
        if capability is None or capabilities.get(capability, "unknown") != "no":
            reason = f"starting with {key}"
            if skipped:
                reason += f" (the profile says the model lacks {', '.join(skipped)})"
            elif capability is not None:
                reason += f" ({capability} is {capabilities.get(capability, 'unknown')} on the profile)"
            return index, reason
        skipped.append(capability)
    return len(LADDER) - 1, "prompt_xml"


class AutoParadigm:
    key: ClassVar[str] = "auto"
    label: ClassVar[str] = "Auto: capability profile + fallback"
    native_tools: ClassVar[bool] = False

    def __init__(self) -> None:
        self._rung: int | None = None

    def decide(self, context: DecisionContext) -> Decision:
        reason = ""
        if self._rung is None:
            self._rung, reason = start_rung(context.capabilities)
        while True:
            key, _, paradigm_class = LADDER[self._rung]
            try:
                decision = paradigm_class().decide(context)
            except ProviderError as exc:
                capability = refused_capability(exc)
                if capability is None or self._rung == len(LADDER) - 1:
                    raise
                lower = LADDER[self._rung + 1][0]
                context.asker.fallback(
                    title=f"fallback: {key} → {lower}",
                    reason=f"the provider refused {key} ({exc.message}); the decision is retried with "
                    f"{lower}, and {capability} is remembered as 'no' on the model profile (not for the demo "
                    "model, which refuses only when the question asks it to)",
                    capability=capability,
                )
                self._rung += 1
                continue
            if reason:
                decision.diagnostics.insert(0, f"auto: {reason}")
            return decision
