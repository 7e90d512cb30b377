"""A turn's limits: its model profile's own where set, else the global settings; the Models page
shows each and where it comes from."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse
from pytest_django.fixtures import Settings

from conversations.limits import profile_limits, turn_limits
from conversations.models import ModelProfile

pytestmark = pytest.mark.django_db


def _profile(**limits: int) -> ModelProfile:
    return ModelProfile.objects.create(name="limited", provider="openai", model="m", **limits)


def test_a_profile_without_limits_of_its_own_runs_under_the_settings(settings: Settings) -> None:
    settings.AGENT_MAX_STEPS, settings.AGENT_MAX_CALLS_PER_REPLY = 5, 7
    settings.AGENT_MAX_CALLS_PER_TURN, settings.RESPONSE_BODY_LIMIT = 9, 123_456

    limits = turn_limits(_profile())

    assert (limits.max_steps, limits.max_calls_per_reply, limits.max_calls_per_turn) == (5, 7, 9)
    assert limits.response_body_limit == 123_456
    assert not any(limit.from_profile for limit in profile_limits(ModelProfile.objects.get(name="limited")))


def test_a_profiles_own_limits_replace_the_settings_one_by_one(settings: Settings) -> None:
    settings.AGENT_MAX_CALLS_PER_TURN = 9
    profile = _profile(max_calls_per_reply=2, response_body_limit=50_000)

    limits = turn_limits(profile)

    assert (limits.max_calls_per_reply, limits.response_body_limit) == (2, 50_000)
    assert limits.max_calls_per_turn == 9
    sources = {limit.name: limit.from_profile for limit in profile_limits(profile)}
    assert sources == {
        "max_steps": False,
        "max_calls_per_reply": True,
        "max_calls_per_turn": False,
        "response_body_limit": True,
    }


def test_the_models_page_shows_each_profiles_limits_and_where_they_come_from(
    client: Client, settings: Settings
) -> None:
    settings.AGENT_MAX_CALLS_PER_TURN = 64
    profile = _profile(max_calls_per_reply=3)
    client.force_login(User.objects.create_user("alice"))

    html = client.get(reverse("inspector-profiles")).content.decode()

    row = html[html.index(f'id="limits-{profile.pk}"') :]
    row = row[: row.index("</tr>")]
    assert "tool calls run per reply <strong>3</strong> <small>(this profile)</small>" in row
    assert "tool calls per turn <strong>64</strong> <small>(global AGENT_MAX_CALLS_PER_TURN)</small>" in row


def test_a_profiles_limits_below_one_are_refused() -> None:
    profile = ModelProfile(name="zero", provider="openai", model="m", max_calls_per_reply=0)

    with pytest.raises(ValidationError, match="max_calls_per_reply"):
        profile.full_clean()
