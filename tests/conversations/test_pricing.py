"""Prices per model profile and the cost of calls and turns: empty by default, so no cost; set,
the cost of each call from the usage its provider reported. Real runs: the demo model in-process,
the demo MCP server over stdio."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.urls import reverse

from conversations.models import AuditEvent, ModelPrice, Step
from conversations.pricing import PRICE_SET_ACTION, profile_price_set, turn_cost, usage_cost
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = "What will the weather be like in Beijing tomorrow?"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def test_a_call_costs_its_tokens_at_the_profiles_prices_in_every_usage_format() -> None:
    price = ModelPrice(input_per_million=Decimal("2.5"), output_per_million=Decimal("10"))

    openai = usage_cost([{"prompt_tokens": 1000, "completion_tokens": 100}], price)
    anthropic = usage_cost([{"input_tokens": 1000, "output_tokens": 100}], price)
    gemini = usage_cost([{"promptTokenCount": 1000, "candidatesTokenCount": 100}], price)

    assert openai == anthropic == gemini
    assert openai is not None
    assert openai.input == Decimal("0.0025")
    assert openai.output == Decimal("0.001")
    assert openai.total == Decimal("0.0035")


def test_without_a_price_or_a_usage_there_is_no_cost() -> None:
    assert usage_cost([{"prompt_tokens": 10, "completion_tokens": 1}], None) is None
    assert usage_cost([{"prompt_tokens": 10}], ModelPrice(input_per_million=Decimal(1))) is None
    assert usage_cost([{}], ModelPrice(input_per_million=Decimal(1), output_per_million=Decimal(1))) is None


def test_a_turn_costs_the_sum_of_its_model_calls_and_the_page_shows_it(client: object) -> None:
    alice = UserFactory(username="alice")
    profile = demo_profile_ensure()
    _, turn = conversation_start(
        owner=alice, model_profile=profile, question=WEATHER, servers=[demo_server_ensure()], dispatch=False
    )
    turn_run(turn_id=turn.pk)
    page_url = reverse("inspector-conversation", args=[turn.conversation.public_id])
    client.force_login(alice)  # type: ignore[attr-defined]
    assert turn_cost(turn, profile) is None
    unpriced = client.get(page_url).content.decode()  # type: ignore[attr-defined]
    assert "turn-cost" not in unpriced
    # No price, no cost: the turn says where prices are set.
    assert 'class="cost-hint">cost: <a href="/profiles/">set prices in Models</a>' in unpriced

    profile_price_set(
        profile=profile,
        input_per_million=Decimal("1"),
        output_per_million=Decimal("4"),
        source="a made-up price for a test",
        actor=alice,
    )
    profile.refresh_from_db()

    cost = turn_cost(turn, profile)
    usages = list(Step.objects.filter(turn=turn).exclude(usage={}).values_list("usage", flat=True))
    assert len(usages) == 2
    assert cost is not None
    assert cost.tokens_in == sum(u["prompt_tokens"] for u in usages)
    assert cost.total == (Decimal(cost.tokens_in) + 4 * Decimal(cost.tokens_out)) / 1_000_000
    text = client.get(page_url).content.decode()  # type: ignore[attr-defined]
    assert f"cost <strong>${cost.total:.6f}</strong>" in text
    assert text.count('class="cost"') == 2
    assert "cost-hint" not in text


def test_prices_are_set_on_the_models_page_with_their_source(client: object) -> None:
    alice = UserFactory(username="alice", is_staff=True)
    profile = demo_profile_ensure()
    client.force_login(alice)  # type: ignore[attr-defined]
    url = reverse("inspector-profile-price")

    half = client.post(url, {"profile": profile.pk, "input_per_million": "1"})  # type: ignore[attr-defined]
    assert half.status_code == 302
    assert not ModelPrice.objects.exists()
    done = client.post(  # type: ignore[attr-defined]
        url,
        {
            "profile": profile.pk,
            "input_per_million": "1.5",
            "output_per_million": "6",
            "source": "price page",
        },
    )

    assert done.status_code == 302
    price = ModelPrice.objects.get(profile=profile)
    assert (price.input_per_million, price.output_per_million) == (Decimal("1.5"), Decimal("6"))
    assert price.updated_by == "alice"
    page = client.get(reverse("inspector-profiles")).content.decode()  # type: ignore[attr-defined]
    assert 'value="1.5000"' in page and "set by alice" in page


def test_only_staff_set_prices_another_user_gets_404_and_reads_them_with_who_set_them(client: object) -> None:
    alice = UserFactory(username="alice", is_staff=True)
    bob = UserFactory(username="bob")
    profile = demo_profile_ensure()
    url = reverse("inspector-profile-price")
    fields = {
        "profile": profile.pk,
        "input_per_million": "1.5",
        "output_per_million": "6",
        "source": "price page",
    }
    client.force_login(alice)  # type: ignore[attr-defined]
    assert client.post(url, fields).status_code == 302  # type: ignore[attr-defined]

    client.force_login(bob)  # type: ignore[attr-defined]
    refused = client.post(url, {**fields, "input_per_million": "0", "output_per_million": "0"})  # type: ignore[attr-defined]
    page = client.get(reverse("inspector-profiles")).content.decode()  # type: ignore[attr-defined]

    assert refused.status_code == 404
    price = ModelPrice.objects.get(profile=profile)
    assert (price.input_per_million, price.output_per_million, price.updated_by) == (
        Decimal("1.5"),
        Decimal("6"),
        "alice",
    )
    row = page.split(f'id="price-{profile.pk}"', 1)[1].split("</tr>", 1)[0]
    assert 'name="input_per_million"' not in row and "Save prices" not in row
    assert "$1.5000" in row and "$6.0000" in row and "price page" in row and "set by alice" in row


def test_setting_a_price_is_audited_with_what_it_was_before(client: object) -> None:
    alice = UserFactory(username="alice", is_staff=True)
    profile = demo_profile_ensure()
    client.force_login(alice)  # type: ignore[attr-defined]
    url = reverse("inspector-profile-price")
    for given in ("1", "2"):
        client.post(  # type: ignore[attr-defined]
            url, {"profile": profile.pk, "input_per_million": given, "output_per_million": "4", "source": "s"}
        )

    entries = list(AuditEvent.objects.filter(action=PRICE_SET_ACTION).order_by("pk"))
    assert [(e.actor_name, e.subject, e.via) for e in entries] == [("alice", profile.name, "web")] * 2
    assert entries[0].detail["before"] is None
    before, after = entries[1].detail["before"], entries[1].detail["after"]
    assert (Decimal(before["input_per_million"]), Decimal(after["input_per_million"])) == (1, 2)
    assert Decimal(after["output_per_million"]) == 4 and after["source"] == "s"
