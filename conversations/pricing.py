"""What model calls cost: a profile's prices per million tokens (empty by default: this app ships
no price list, since providers change theirs; whoever sets one names its source), and the cost of
a call, a turn or a comparison from the usage its provider reported, and what the tool
definitions alone cost as input (their offline count, :mod:`conversations.counting`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from conversations.loop.providers import USAGE_INPUT_KEYS, USAGE_OUTPUT_KEYS
from conversations.models import AuditEvent, ModelPrice, ModelProfile, Step, Turn
from conversations.record.audit import audit_change
from conversations.typealias import JSONDict, JSONValue

MILLION = Decimal(1_000_000)
# The audit log's action for a profile's prices set.
PRICE_SET_ACTION = AuditEvent.Action.PROFILE_PRICE_SET


@dataclass(frozen=True)
class Cost:
    """A cost in US dollars: of the input tokens, the output tokens, and both."""

    tokens_in: int
    tokens_out: int
    input: Decimal
    output: Decimal

    @property
    def total(self) -> Decimal:
        return self.input + self.output


def profile_price(profile: ModelProfile) -> ModelPrice | None:
    """The profile's prices, or None when none is set (cached on the profile by Django)."""
    try:
        return profile.price
    except ModelPrice.DoesNotExist:
        return None


def _price_snapshot(price: ModelPrice | None) -> JSONDict | None:
    if price is None:
        return None
    return {
        "input_per_million": None if price.input_per_million is None else str(price.input_per_million),
        "output_per_million": None if price.output_per_million is None else str(price.output_per_million),
        "source": price.source,
    }


def profile_price_set(
    *,
    profile: ModelProfile,
    input_per_million: Decimal | None,
    output_per_million: Decimal | None,
    source: str,
    actor: AbstractBaseUser,
    via: str = "web",
) -> ModelPrice:
    """Set (or, with both prices None, clear to unknown) what the profile's model costs, and audit
    it: who, through what, and the prices before and after. Who may is the caller's check (a
    price changes the cost every user's pages show: the Models page lets only staff)."""
    with transaction.atomic():
        before = _price_snapshot(ModelPrice.objects.select_for_update().filter(profile=profile).first())
        price, _ = ModelPrice.objects.update_or_create(
            profile=profile,
            defaults={
                "input_per_million": input_per_million,
                "output_per_million": output_per_million,
                "source": source,
                "updated_by": actor.get_username(),
            },
        )
        audit_change(
            actor=actor,
            action=PRICE_SET_ACTION,
            via=via,
            subject=profile.name,
            detail={"profile_id": profile.pk, "before": before, "after": _price_snapshot(price)},
        )
    return price


def _count(usage: JSONValue, keys: tuple[str, ...]) -> int:
    if not isinstance(usage, dict):
        return 0
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def usage_cost(usages: Iterable[JSONValue], price: ModelPrice | None) -> Cost | None:
    """The cost of the calls whose provider-reported usages are given; None without a full price
    or without any usage."""
    if price is None or price.input_per_million is None or price.output_per_million is None:
        return None
    tokens_in = tokens_out = 0
    counted = False
    for usage in usages:
        if isinstance(usage, dict) and usage:
            counted = True
            tokens_in += _count(usage, USAGE_INPUT_KEYS)
            tokens_out += _count(usage, USAGE_OUTPUT_KEYS)
    if not counted:
        return None
    return Cost(
        tokens_in,
        tokens_out,
        price.input_per_million * tokens_in / MILLION,
        price.output_per_million * tokens_out / MILLION,
    )


def step_cost(step: Step, profile: ModelProfile) -> Cost | None:
    return usage_cost([step.usage], profile_price(profile))


def turn_cost(turn: Turn, profile: ModelProfile) -> Cost | None:
    """The cost of every model call of the turn (one query)."""
    price = profile_price(profile)
    if price is None:
        return None
    usages = Step.objects.filter(turn=turn).exclude(usage={}).values_list("usage", flat=True)
    return usage_cost(list(usages), price)


def _tools_total(tokens: JSONValue) -> int:
    tools = tokens.get("tools") if isinstance(tokens, dict) else None
    if not isinstance(tools, dict):
        return 0
    return sum(value for value in tools.values() if isinstance(value, int) and not isinstance(value, bool))


def tool_definitions_requests(turn: Turn) -> int:
    """How many of the turn's model calls sent tool definitions (the calls
    :func:`tool_definitions_tokens` adds up): its total divided by this is what one request
    carries."""
    counts = Step.objects.filter(turn=turn).exclude(tokens={}).values_list("tokens", flat=True)
    return sum(1 for tokens in counts if _tools_total(tokens))


def tool_definitions_tokens(turn: Turn) -> int:
    """The tokens of the tool definitions the turn's model calls sent (each tool as its paradigm
    writes it into the request, :mod:`conversations.counting`), each call counted: they are sent
    again with every call."""
    counts = Step.objects.filter(turn=turn).exclude(tokens={}).values_list("tokens", flat=True)
    return sum(_tools_total(tokens) for tokens in counts)


def tool_definitions_cost(turn: Turn | None, profile: ModelProfile) -> Decimal | None:
    """What the turn's tool definitions cost as input at the profile's input price; None without
    a price or without counted definitions."""
    if turn is None:
        return None
    return definitions_cost(tool_definitions_tokens(turn), profile)


def definitions_cost(tokens: int, profile: ModelProfile) -> Decimal | None:
    """What ``tokens`` of tool definitions cost as input at the profile's input price (an eval
    cell's, summed over its turns); None without a price or without tokens."""
    price = profile_price(profile)
    if not tokens or price is None or price.input_per_million is None:
        return None
    return price.input_per_million * tokens / MILLION


def comparison_cost(runs: Sequence[tuple[Turn | None, ModelProfile]]) -> Decimal | None:
    """The cost of a comparison: the sum of its runs' turns; None when no run has a cost."""
    costs = [turn_cost(turn, profile) for turn, profile in runs if turn is not None]
    known = [cost.total for cost in costs if cost is not None]
    return sum(known, Decimal(0)) if known else None
