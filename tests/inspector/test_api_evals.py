"""The evals API: store a suite, start a run, follow its progress, read its results; another
user's suites and runs are not found (404), and the routes are in the OpenAPI document."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from pytest_django.fixtures import Settings

from inspector.evals.models import EvalRun, Suite
from inspector.evals.services import suite_save
from servers import gateway
from tests.factories import UserFactory

SMALL = (
    "name: small\nmodels: [demo]\nparadigms: [native, intent]\nservers: [demo]\n"
    "variants:\n  plain: {}\n  terse: {demo/get_weather_forecast: {description: Weather.}}\n"
    "cases:\n  - {question: 'What will the weather be like in Beijing tomorrow?', "
    "expect: [{tool: demo/get_weather_forecast, arguments: {city: Beijing}}]}\n"
)
EXAMPLE = (Path(__file__).parent / "evals" / "example_suite.json").read_text()


@pytest.fixture(autouse=True)
def _embedded(settings: Settings) -> None:
    """The embedded default, also in the Postgres pass (where REDIS_URL would pick Celery)."""
    settings.TURN_RUNNER = "embedded"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.fixture
def alice() -> User:
    user: User = UserFactory(username="alice")
    return user


@pytest.fixture
def bob() -> User:
    user: User = UserFactory(username="bob")
    return user


@pytest.mark.django_db
def test_a_run_of_a_variant_naming_a_tool_the_server_does_not_have_is_refused_naming_the_field(
    alice: User,
) -> None:
    suite = suite_save(
        owner=alice,
        text=SMALL.replace("demo/get_weather_forecast: {description", "demo/get_weather: {description"),
    )

    response = _post(_client(alice), "/api/evals/runs", {"suite": str(suite.public_id)})

    assert response.status_code == 400
    assert response.json()["field"] == "variants.terse.demo/get_weather"
    assert response.json()["detail"].startswith("variants.terse.demo/get_weather: no such tool")
    assert not EvalRun.objects.exists()


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _post(client: Client, url: str, body: dict[str, Any]) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json")


@pytest.mark.django_db(transaction=True)
def test_a_suite_posted_and_run_through_the_api_reports_progress_and_every_cell(
    alice: User, bob: User
) -> None:
    client = _client(alice)

    created = _post(client, "/api/evals/suites", {"text": SMALL})
    assert created.status_code == 201, created.content
    suite = created.json()
    assert suite["name"] == "small" and suite["definition"]["variants"]["terse"]
    started = _post(client, "/api/evals/runs", {"suite": suite["id"], "concurrency": 2})
    assert started.status_code == 202, started.content
    run = started.json()
    assert run["progress"]["total"] == 4

    deadline = time.monotonic() + 60
    while True:
        results = client.get(f"/api/evals/runs/{run['run']}").json()
        if results["status"] not in ("queued", "running") or time.monotonic() > deadline:
            break
        assert results["progress"]["running"] <= 2
        time.sleep(0.1)

    assert results["status"] == "done", results
    assert results["progress"] == {
        "status": "done",
        "total": 4,
        "finished": 4,
        "passed": 2,
        "running": 0,
        "fraction": 1.0,
    }
    cells = {(cell["paradigm"], cell["variant"]): cell for cell in results["cells"]}
    assert cells[("intent", "terse")]["no_call"] == cells[("native", "terse")]["no_call"] == 1
    assert cells[("native", "plain")]["accuracy"] == cells[("intent", "plain")]["accuracy"] == 1.0
    listed = client.get("/api/evals/runs", {"suite": suite["id"]}).json()
    assert [item["run"] for item in listed] == [run["run"]]

    # Bob sees none of it, and can start nothing with it.
    other = _client(bob)
    assert other.get(f"/api/evals/suites/{suite['id']}").status_code == 404
    assert other.get(f"/api/evals/runs/{run['run']}").status_code == 404
    assert other.post(f"/api/evals/runs/{run['run']}/cancel").status_code == 404
    assert _post(other, "/api/evals/runs", {"suite": suite["id"]}).status_code == 404
    assert other.get("/api/evals/suites").json() == []
    assert other.get("/api/evals/runs").json() == []
    assert other.get("/api/evals/runs", {"suite": suite["id"]}).status_code == 404
    results_again = client.get(f"/api/evals/runs/{run['run']}").json()
    assert results_again["cells"] == results["cells"]


@pytest.mark.django_db
def test_a_bad_suite_is_refused_with_the_field_named(alice: User) -> None:
    response = _post(_client(alice), "/api/evals/suites", {"text": EXAMPLE.replace('"Hello there"', "7")})

    assert response.status_code == 400
    assert response.json()["field"] == "cases[2].question"
    assert not Suite.objects.exists()


@pytest.mark.django_db
def test_a_suite_naming_an_unknown_profile_cannot_start_a_run(alice: User) -> None:
    suite = suite_save(owner=alice, text=SMALL.replace("models: [demo]", "models: [demo, nobody]"))

    response = _post(_client(alice), "/api/evals/runs", {"suite": str(suite.public_id)})

    assert response.status_code == 400
    assert response.json()["field"] == "models[1]"
    assert not EvalRun.objects.exists()


@pytest.mark.django_db
def test_a_suite_is_changed_by_put_and_a_name_clash_is_named(alice: User) -> None:
    client = _client(alice)
    first = suite_save(owner=alice, text=SMALL)
    suite_save(owner=alice, text=SMALL.replace("name: small", "name: other"))

    renamed = client.put(
        f"/api/evals/suites/{first.public_id}",
        json.dumps({"text": SMALL.replace("name: small", "name: renamed")}),
        content_type="application/json",
    )
    clash = client.put(
        f"/api/evals/suites/{first.public_id}",
        json.dumps({"text": SMALL.replace("name: small", "name: other")}),
        content_type="application/json",
    )

    assert renamed.status_code == 200 and renamed.json()["name"] == "renamed"
    assert clash.status_code == 400 and clash.json()["field"] == "name"


@pytest.mark.django_db
def test_anonymous_callers_get_401_and_nothing(alice: User) -> None:
    suite = suite_save(owner=alice, text=SMALL)

    assert Client().get("/api/evals/suites").status_code == 401
    assert Client().get(f"/api/evals/suites/{suite.public_id}").status_code == 401
    assert Client().post("/api/evals/runs", {"suite": str(suite.public_id)}).status_code == 401


@pytest.mark.django_db
def test_the_openapi_document_describes_the_eval_routes(alice: User) -> None:
    schema = _client(alice).get("/api/openapi.json").json()

    for path in (
        "/api/evals/suites",
        "/api/evals/suites/{public_id}",
        "/api/evals/runs",
        "/api/evals/runs/{public_id}",
        "/api/evals/runs/{public_id}/cancel",
    ):
        assert path in schema["paths"], path
    cell = schema["components"]["schemas"]["EvalCell"]["properties"]
    assert {"model", "paradigm", "variant", "cases", "passed", "accuracy", "no_call", "conversations"} <= set(
        cell
    )


@pytest.mark.django_db
def test_a_body_over_the_upload_limit_gets_a_json_error_naming_the_limit(alice: User) -> None:
    response = _post(_client(alice), "/api/evals/suites", {"text": "x" * 10_000_000})

    assert response.status_code == 413 and response["Content-Type"].startswith("application/json")
    assert response.json()["field"] == "body"
    assert "DATA_UPLOAD_MAX_MEMORY_SIZE" in response.json()["detail"]
    assert not Suite.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_suite_saved_through_the_api_is_checked_against_the_servers_tools(alice: User) -> None:
    from servers import gateway

    try:
        typo = SMALL.replace(
            "expect: [{tool: demo/get_weather_forecast", "expect: [{tool: demo/get_wether_forecast"
        )
        assert typo != SMALL
        response = _post(_client(alice), "/api/evals/suites", {"text": typo})
        assert response.status_code == 400
        assert response.json()["field"] == "cases[0].expect[0].tool"
        assert "get_weather_forecast" in str(response.json())
        assert not Suite.objects.exists()
    finally:
        gateway.close_all()
