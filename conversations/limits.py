"""The limits a turn runs under: its model profile's own, or else the global settings.

Each limit is a setting (``AGENT_MAX_STEPS`` …) and a nullable field of ``ModelProfile`` of the
same name in lower case; an empty field means the setting. The table of what each bounds and
what meeting it records is in docs/turn-lifecycle.md#limits.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from conversations.models import ModelProfile

# (field of ModelProfile, setting, what it bounds): in the order pages show them.
LIMITS = (
    ("max_steps", "AGENT_MAX_STEPS", "decisions per turn"),
    ("max_calls_per_reply", "AGENT_MAX_CALLS_PER_REPLY", "tool calls run per reply"),
    ("max_calls_per_turn", "AGENT_MAX_CALLS_PER_TURN", "tool calls per turn"),
    ("response_body_limit", "RESPONSE_BODY_LIMIT", "bytes of a response body"),
)


@dataclass(frozen=True)
class Limit:
    """One limit as it holds for a profile: its value and whether the profile set it."""

    name: str
    setting: str
    bounds: str
    value: int
    from_profile: bool


@dataclass(frozen=True)
class TurnLimits:
    """The limits of a profile's turns."""

    max_steps: int
    max_calls_per_reply: int
    max_calls_per_turn: int
    response_body_limit: int


def profile_limits(profile: ModelProfile) -> list[Limit]:
    """Every limit for ``profile``'s turns, each the profile's own or the global setting."""
    limits = []
    for name, setting, bounds in LIMITS:
        own = getattr(profile, name)
        value = int(own) if own is not None else int(getattr(settings, setting))
        limits.append(Limit(name, setting, bounds, value, own is not None))
    return limits


def turn_limits(profile: ModelProfile) -> TurnLimits:
    """The limits a turn of ``profile`` runs under."""
    return TurnLimits(**{limit.name: limit.value for limit in profile_limits(profile)})
