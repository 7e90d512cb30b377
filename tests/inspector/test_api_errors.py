"""Every error of the JSON API is JSON naming the field or the reason — a body over the upload
limit, malformed JSON, a wrong method, a path that is no endpoint, a failing view — never one of
Django's HTML pages; the rest of the site keeps its own pages."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from pytest_django.fixtures import Settings

from inspector.evals.models import Suite
from tests.factories import UserFactory
from tests.inspector.api_error_urls import SECRET_DETAIL

pytestmark = pytest.mark.django_db

TEN_MB = "x" * 10_000_000


@pytest.fixture
def alice() -> User:
    user: User = UserFactory(username="alice")
    return user


@pytest.fixture
def alice_client(alice: User) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(alice)
    return client


def _json(response: Any) -> dict[str, Any]:
    assert response["Content-Type"].startswith("application/json"), (
        response.status_code,
        response.content[:200],
    )
    body = json.loads(response.content)
    assert isinstance(body, dict) and isinstance(body.get("detail"), str) and body["detail"], body
    return body


@pytest.mark.parametrize("path", ["/api/evals/suites", "/api/evals/runs", "/api/token"])
def test_a_ten_megabyte_body_to_an_endpoint_that_reads_one_is_a_json_413_naming_the_body(
    alice_client: Client, path: str
) -> None:
    response = alice_client.post(path, json.dumps({"text": TEN_MB}), content_type="application/json")

    assert response.status_code == 413, response.content[:200]
    body = _json(response)
    assert body["field"] == "body" and "DATA_UPLOAD_MAX_MEMORY_SIZE" in body["detail"]
    assert not Suite.objects.exists()


def test_a_ten_megabyte_form_post_is_a_json_413_too(alice_client: Client) -> None:
    response = alice_client.post("/api/evals/suites", {"text": TEN_MB})

    assert response.status_code == 413
    assert _json(response)["field"] == "body"


def test_malformed_json_is_a_json_400_that_says_so(alice_client: Client) -> None:
    response = alice_client.post("/api/evals/suites", '{"text": "name: x', content_type="application/json")

    assert response.status_code == 400
    assert "JSON" in _json(response)["detail"]
    assert not Suite.objects.exists()


def test_a_missing_field_is_a_json_400_naming_it(alice_client: Client) -> None:
    response = alice_client.post("/api/evals/suites", "{}", content_type="application/json")

    assert response.status_code == 400
    assert "text" in json.loads(response.content)


def test_a_wrong_method_is_a_json_405_naming_it(alice_client: Client) -> None:
    response = alice_client.patch("/api/evals/suites", "{}", content_type="application/json")

    assert response.status_code == 405
    assert "PATCH" in _json(response)["detail"]


@pytest.mark.parametrize(
    "path", ["/api/nothing-here", "/api/conversations/not-a-uuid", "/api/evals/runs/1/cancel/extra"]
)
def test_a_path_that_is_no_endpoint_is_a_json_404(alice_client: Client, path: str) -> None:
    response = alice_client.get(path)

    assert response.status_code == 404
    body = _json(response)
    assert body["field"] == "path" and path in body["detail"]


def test_a_path_that_is_no_endpoint_is_a_json_404_for_anyone(settings: Settings) -> None:
    response = Client(raise_request_exception=False).get("/api/nothing-here")

    assert response.status_code == 404
    _json(response)


def test_an_unknown_conversation_is_a_json_404(alice_client: Client) -> None:
    response = alice_client.get("/api/conversations/00000000-0000-4000-8000-000000000000")

    assert response.status_code == 404
    _json(response)


@pytest.mark.parametrize("path", ["/api/broken", "/api/broken-plain"])
def test_a_failing_api_view_is_a_json_500_that_names_no_internals(
    settings: Settings, alice_client: Client, path: str
) -> None:
    settings.DEBUG = False
    settings.ROOT_URLCONF = "tests.inspector.api_error_urls"

    response = alice_client.get(path)

    assert response.status_code == 500
    body = _json(response)
    assert SECRET_DETAIL not in response.content.decode() and "internal error" in body["detail"]


def test_outside_the_api_the_sites_own_pages_answer(settings: Settings, alice_client: Client) -> None:
    settings.DEBUG = False
    settings.ROOT_URLCONF = "tests.inspector.error_urls"

    missing = alice_client.get("/no-such-page/")
    broken = alice_client.get("/broken/")

    assert missing.status_code == 404 and 'id="not-found"' in missing.content.decode()
    assert broken.status_code == 500 and 'id="server-error"' in broken.content.decode()
