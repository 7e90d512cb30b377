"""Each turn's trace sent to an OTLP/HTTP collector when the turn ends — a real HTTP receiver
that parses the protobuf body with the official definitions; by this process's thread in the
embedded mode and by a real Celery worker in the scaled one; retried while the collector is down;
its headers never stored or shown."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client, override_settings
from django.urls import reverse
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from conversations.execution import embedded_resume
from conversations.models import TraceDelivery, Turn
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure
from servers import gateway
from servers.services import demo_server_ensure
from tests.conftest import running_celery_worker, worker_log_path
from tests.support import free_port, wait_until

WEATHER = "What will the weather be like in Beijing tomorrow?"
SECRET = "s3cret-collector-key"


@dataclass
class Collector:
    """A tiny OTLP/HTTP receiver: answers each POST with the next of ``statuses`` (then 200)."""

    port: int
    statuses: list[int] = field(default_factory=list)
    received: list[tuple[dict[str, str], ExportTraceServiceRequest]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def spans(self, index: int = -1) -> list[dict[str, Any]]:
        _, request = self.received[index]
        return [
            MessageToDict(span) for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans
        ]


@contextmanager
def collector(port: int | None = None, statuses: list[int] | None = None) -> Iterator[Collector]:
    state = Collector(port=port or free_port(), statuses=list(statuses or []))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            status = state.statuses.pop(0) if state.statuses else 200
            if status == 200:
                assert self.path == "/v1/traces"
                assert self.headers["Content-Type"] == "application/x-protobuf"
                request = ExportTraceServiceRequest.FromString(body)
                state.received.append(({k.lower(): v for k, v in self.headers.items()}, request))
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", state.port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _delivery(turn: Turn) -> TraceDelivery | None:
    return TraceDelivery.objects.filter(turn=turn).first()


def _sent(turn: Turn) -> bool:
    delivery = _delivery(turn)
    return delivery is not None and delivery.status == TraceDelivery.Status.SENT


def _attrs(span: dict[str, Any]) -> dict[str, Any]:
    return {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}


def _run_turn(alice: User) -> Turn:
    _, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    return turn


def _embedded(url: str) -> Any:
    return override_settings(
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=url,
        OTEL_EXPORTER_OTLP_HEADERS=f"x-api-key={SECRET}",
        TURN_RUNNER="embedded",
        TRACE_DELIVERY_RETRY_FIRST_SECONDS=0.2,
        TRACE_DELIVERY_RETRY_MAX_SECONDS=0.5,
    )


def _nowhere_has_the_secret(turn: Turn) -> None:
    delivery = TraceDelivery.objects.filter(turn=turn).values().get()
    assert SECRET not in repr(delivery)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_embedded_thread_sends_a_finished_turn_and_retries_while_the_collector_is_unavailable() -> None:
    alice = User.objects.create_user("alice")
    with collector(statuses=[503]) as sink, _embedded(sink.url):
        turn = _run_turn(alice)

        assert wait_until(lambda: _sent(turn), 30), _delivery(turn)

        delivery = _delivery(turn)
        assert delivery is not None and delivery.attempts == 2 and delivery.last_error == ""
        (received,) = sink.received
        assert received[0]["x-api-key"] == SECRET
        spans = sink.spans()
        assert len({s["traceId"] for s in spans}) == 1 and len(spans) > 5
        (tool,) = [s for s in spans if s["name"] == "execute_tool get_weather_forecast"]
        assert "Beijing" in _attrs(tool)["gen_ai.tool.call.arguments"]
        _nowhere_has_the_secret(turn)
        client = Client()
        client.force_login(alice)
        url = reverse("inspector-conversation", args=[turn.conversation.public_id])
        page = client.get(url).content.decode()
        assert f'id="trace-delivery-{turn.pk}" data-status="sent"' in page and SECRET not in page


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_nothing_is_lost_while_the_collector_is_down_it_is_sent_when_it_comes_back() -> None:
    alice = User.objects.create_user("alice")
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/traces"
    with _embedded(url):
        turn = _run_turn(alice)
        assert wait_until(lambda: (d := _delivery(turn)) is not None and d.attempts >= 2, 30)
        delivery = _delivery(turn)
        assert delivery is not None and delivery.status == TraceDelivery.Status.PENDING
        assert delivery.last_error.startswith("the collector could not be reached")

        with collector(port=port) as sink:
            assert wait_until(lambda: _sent(turn), 30)

        assert len(sink.received) == 1
        _nowhere_has_the_secret(turn)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_collector_that_refuses_the_trace_marks_it_failed_and_says_why() -> None:
    alice = User.objects.create_user("alice")
    with collector(statuses=[400]) as sink, _embedded(sink.url):
        turn = _run_turn(alice)

        assert wait_until(
            lambda: (d := _delivery(turn)) is not None and d.status == TraceDelivery.Status.FAILED, 30
        )

        delivery = _delivery(turn)
        assert delivery is not None
        assert (delivery.attempts, delivery.last_error) == (1, "the collector refused the trace: HTTP 400")
        assert sink.received == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_new_embedded_process_sends_the_traces_an_earlier_one_left_pending() -> None:
    turn = _run_turn(User.objects.create_user("alice"))
    # What a process that died leaves: a pending delivery nobody in this process has queued.
    TraceDelivery.objects.create(turn=turn, attempts=1, last_error="the collector could not be reached")
    with collector() as sink, _embedded(sink.url):
        embedded_resume()

        assert wait_until(lambda: _sent(turn), 30)
    assert len(sink.received) == 1
    _nowhere_has_the_secret(turn)


@pytest.mark.django_db(transaction=True)
def test_without_an_endpoint_nothing_is_queued() -> None:
    turn = _run_turn(User.objects.create_user("alice"))

    assert not TraceDelivery.objects.filter(turn=turn).exists()


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_sends_the_trace_of_the_turn_it_ran_retrying_while_unavailable(
    redis_url: str,
) -> None:
    alice = User.objects.create_user("alice")
    with collector(statuses=[503, 502]) as sink:
        worker_env = {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink.url,
            "OTEL_EXPORTER_OTLP_HEADERS": f"x-api-key={SECRET}",
            "TRACE_DELIVERY_RETRY_FIRST_SECONDS": "0.2",
        }
        with running_celery_worker(redis_url, **worker_env), override_settings(TURN_RUNNER="celery"):
            _, turn = conversation_start(
                owner=alice,
                model_profile=demo_profile_ensure(),
                question=WEATHER,
                servers=[demo_server_ensure()],
            )

            assert wait_until(lambda: _sent(turn), 60), _delivery(turn)

        delivery = _delivery(turn)
        assert delivery is not None and delivery.attempts == 3
        assert sink.received[0][0]["x-api-key"] == SECRET
        assert {_attrs(s).get("gen_ai.operation.name") for s in sink.spans()} >= {"chat", "execute_tool"}
        _nowhere_has_the_secret(turn)
        assert SECRET not in worker_log_path().read_text()


@pytest.mark.django_db(transaction=True)
def test_traces_send_backfills_the_turns_recorded_before_an_endpoint_was_configured() -> None:
    alice = User.objects.create_user("alice")
    before, other = _run_turn(alice), _run_turn(alice)  # no endpoint: nothing queued
    assert not TraceDelivery.objects.exists()

    with collector() as received, _embedded(received.url):
        out = StringIO()
        call_command("traces", "send", "--conversation", str(before.conversation.public_id), stdout=out)

        assert _sent(before) and _delivery(other) is None
        assert "1 sent" in out.getvalue()
        assert {_attrs(s).get("gen_ai.conversation.id") for s in received.spans()} == {
            str(before.conversation.public_id)
        }
        call_command("traces", "send", "--since", "2000-01-01", stdout=StringIO())
        assert _sent(other) and len(received.received) == 2


@pytest.mark.django_db
def test_traces_send_without_an_endpoint_says_what_to_configure() -> None:
    with (
        override_settings(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=""),
        pytest.raises(CommandError, match="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    ):
        call_command("traces", "send")
