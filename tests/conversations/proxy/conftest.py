"""Fixtures the LLM proxy's tests share: the app served on a port of its own, an upstream fake
of every model format served beside it, and alice, whose proxy key the calls use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from tests.conversations.proxy.llm_fakes import FakeUpstream, Served, ServedApp


@pytest.fixture
def app() -> Iterator[str]:
    """The app's own URL, served as ``proxy`` hosts reach it."""
    with ServedApp() as served:
        yield served.url


@pytest.fixture
def upstream(request: pytest.FixtureRequest) -> Iterator[tuple[FakeUpstream, str]]:
    """The upstream fake and its URL. It holds the rest of a stream back until the test releases
    it (``FakeUpstream.release``), or until the test ends; a test marked ``upstream_released``
    (or a module whose ``pytestmark`` holds it) has its calls answered at once."""
    fake = FakeUpstream()
    if request.node.get_closest_marker("upstream_released") is not None:
        fake.release()
    with Served(fake) as served:
        yield fake, served.url
        fake.release()


@pytest.fixture
def alice() -> User:
    return get_user_model().objects.create_user("alice")
