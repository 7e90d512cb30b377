"""Compare's charts: tokens, latency and cost per run side by side, as SVG drawn by the server.
Real runs: the demo model in-process, the demo MCP server over stdio."""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from conversations.pricing import profile_price_set
from conversations.runner import turn_run
from conversations.selectors import comparison_runs
from conversations.services import comparison_start, demo_profile_ensure
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = "What will the weather be like in Beijing tomorrow?"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def test_each_measure_is_a_chart_with_a_bar_per_run_scaled_to_its_value() -> None:
    alice = UserFactory(username="alice")
    profile = demo_profile_ensure()
    profile_price_set(
        profile=profile,
        input_per_million=Decimal(3),
        output_per_million=Decimal(15),
        source="a test",
        actor=alice,
    )
    comparison, turns = comparison_start(
        owner=alice,
        question=WEATHER,
        runs=[(profile, "native"), (profile, "structured"), (profile, "prompt_xml")],
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    for turn in turns:
        turn_run(turn_id=turn.pk)
    client = Client()
    client.force_login(alice)

    page = client.get(reverse("inspector-comparison", args=[comparison.public_id])).content.decode()
    summary = client.get(
        reverse("inspector-comparison-summary", args=[comparison.public_id])
    ).content.decode()

    runs = comparison_runs(comparison=comparison)
    for text in (page, summary):
        figures = dict(
            re.findall(r'<figure class="compare-chart" data-measure="(\w+)">(.*?)</figure>', text, re.S)
        )
        assert set(figures) == {"tokens_in", "tokens_out", "prompt_tokens", "llm_ms", "wall_ms", "cost"}
        for measure in ("prompt_tokens", "tokens_in", "cost"):
            widths = [
                float(w) for w in re.findall(r'<rect x="300" y="\d+" width="([\d.]+)"', figures[measure])
            ]
            assert len(widths) == len(runs), measure
            assert max(widths) == pytest.approx(550, abs=0.1), measure
        prompt = [run.prompt_tokens for run in runs]
        assert all(p is not None for p in prompt)
        widths = [float(w) for w in re.findall(r'width="([\d.]+)"', figures["prompt_tokens"])]
        top = max(p for p in prompt if p is not None)
        for count, width in zip(prompt, widths, strict=True):
            assert count is not None
            assert width == pytest.approx(max(count * 550 / top, 2), abs=0.1)
        assert f"{top:,}" in figures["prompt_tokens"]
