"""A real tracing backend reads our traces fully: Arize Phoenix, in a virtual environment of its
own (in the user's cache directory, built once per pinned version and kept across checkouts), receives a turn's trace from the exporter and
gives back, through its REST API, the messages of each model call, the tool's arguments and
result, the model, the token counts and the nesting (docs/traces.md §7)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from conversations.models import Conversation, ModelProfile, Step, TraceDelivery, Turn
from conversations.record.transcripts.document import transcript_document
from conversations.record.transcripts.otel import otlp_request, trace_origin
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_format_profiles_ensure, demo_profile_ensure
from servers import gateway
from servers.services import demo_server_ensure
from tests.support import free_port, wait_until

# Pinned: the version docs/traces.md §7 names. A change of pin installs the new one.
PHOENIX_VERSION = "20.26.1"
# Outside the checkout: a clean clone (as CI makes for every run) would build it again, which
# took three minutes of the suite. The version in the name: a change of pin builds beside it.
PHOENIX_VENV = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "tool-call-inspector"
    / f"phoenix-venv-{PHOENIX_VERSION}"
)
PHOENIX_STAMP = PHOENIX_VENV / f".installed-arize-phoenix-{PHOENIX_VERSION}"
INSTALL_SECONDS = 600
START_SECONDS = 120
# The first test's setup may install Phoenix and start it (the suite's timeout covers setup too).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.timeout(INSTALL_SECONDS + START_SECONDS + 180),
]
WEATHER = "What will the weather be like in Beijing tomorrow?"


def phoenix_venv() -> Path:
    """``PHOENIX_VENV`` with the pinned arize-phoenix, built unless its stamp says it is there.

    Phoenix stays out of the project's environment (its dependencies are not the MCP SDK's). A
    lock file keeps two test runs from building it at once; pip's own cache makes a rebuild quick.
    """
    PHOENIX_VENV.parent.mkdir(parents=True, exist_ok=True)
    with (PHOENIX_VENV.parent / "phoenix-venv.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not PHOENIX_STAMP.exists():
            for stale in PHOENIX_VENV.glob(".installed-arize-phoenix-*"):
                stale.unlink()
            if not (PHOENIX_VENV / "bin" / "python").exists():
                subprocess.run([sys.executable, "-m", "venv", str(PHOENIX_VENV)], check=True)
            install = subprocess.run(
                [
                    str(PHOENIX_VENV / "bin" / "python"),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    f"arize-phoenix=={PHOENIX_VERSION}",
                ],
                capture_output=True,
                text=True,
                timeout=INSTALL_SECONDS,
            )
            if install.returncode != 0:
                pytest.fail(f"arize-phoenix=={PHOENIX_VERSION} did not install:\n{install.stderr[-3000:]}")
            PHOENIX_STAMP.write_text(PHOENIX_VERSION + "\n")
    return PHOENIX_VENV


@dataclass
class Phoenix:
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def traces_endpoint(self) -> str:
        return f"{self.url}/v1/traces"

    def spans(self, trace_id: str) -> list[dict[str, Any]]:
        """The spans of one trace in the default project, as Phoenix's REST API gives them."""
        answer = httpx.get(
            f"{self.url}/v1/projects/default/spans",
            params={"trace_id": trace_id, "limit": 1000},
            timeout=10,
        )
        if answer.status_code == 404:  # the project appears with its first span
            return []
        answer.raise_for_status()
        data: list[dict[str, Any]] = answer.json()["data"]
        return data


@pytest.fixture(scope="module")
def phoenix() -> Iterator[Phoenix]:
    """One Phoenix server for the module: free ports, a temporary working dir, stopped at the end."""
    venv = phoenix_venv()
    workdir = Path(tempfile.mkdtemp(prefix="phoenix-"))
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PHOENIX_", "OTEL_", "DJANGO_")) and key not in {"DATABASE_URL", "REDIS_URL"}
    }
    env.update(
        PHOENIX_HOST="127.0.0.1",
        PHOENIX_PORT=str(port),
        PHOENIX_GRPC_PORT=str(free_port()),
        PHOENIX_WORKING_DIR=str(workdir),
        PHOENIX_TELEMETRY_ENABLED="false",
        PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
    )
    log = workdir / "phoenix.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(venv / "bin" / "phoenix"), "serve"],
            env=env,
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Phoenix(port=port, process=process, log=log)
    try:
        if not wait_until(lambda: _answers(server), START_SECONDS, step=0.5):
            pytest.fail(f"Phoenix did not start:\n{log.read_text()[-3000:]}")
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _answers(server: Phoenix) -> bool:
    if server.process.poll() is not None:
        return False
    try:
        return httpx.get(f"{server.url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _delivered(turn: Turn) -> bool:
    return TraceDelivery.objects.filter(turn=turn, status=TraceDelivery.Status.SENT).exists()


def _messages(attributes: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """OpenInference's numbered ``{prefix}.{i}.message.…`` attributes as a list of dicts."""
    messages: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if key.startswith(f"{prefix}."):
            index, _, rest = key[len(prefix) + 1 :].partition(".message.")
            messages.setdefault(int(index), {})[rest] = value
    return [messages[i] for i in sorted(messages)]


def _sent_spans(conversation: Conversation, turn: Turn) -> list[dict[str, Any]]:
    """The spans of the turn's trace as the exporter builds them (OTLP/JSON)."""
    document = transcript_document(conversation=conversation, signed=False)
    request: Any = otlp_request(document, origin=trace_origin(conversation), seq=turn.seq)
    return [span for rs in request["resourceSpans"] for ss in rs["scopeSpans"] for span in ss["spans"]]


def _value(value: dict[str, Any]) -> Any:
    if "arrayValue" in value:
        return [_value(item) for item in value["arrayValue"].get("values", [])]
    if "intValue" in value:
        return int(value["intValue"])
    return next(iter(value.values()))


def _sent_attrs(span: dict[str, Any]) -> dict[str, Any]:
    return {item["key"]: _value(item["value"]) for item in span["attributes"]}


def _expected_kind(attributes: dict[str, Any]) -> str:
    """The OpenInference kind Phoenix should give a span we sent (docs/traces.md §1, §7)."""
    operations = {"invoke_agent": "AGENT", "chat": "LLM", "execute_tool": "TOOL"}
    if operation := attributes.get("gen_ai.operation.name"):
        return operations[operation]
    return "CHAIN" if "mcp.method.name" in attributes else "UNKNOWN"


def _profile(provider: str) -> ModelProfile:
    """The demo model: the plain demo profile for OpenAI Chat, the streamed one of each other format."""
    if provider == "openai_chat":
        return demo_profile_ensure()
    return next(p for p in demo_format_profiles_ensure(stream=True) if p.provider == provider)


def _one(items: list[dict[str, Any]]) -> dict[str, Any]:
    (item,) = items
    return item


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("provider", ["openai_chat", "openai_responses", "anthropic", "gemini"])
def test_phoenix_reads_the_messages_the_tool_call_the_model_and_the_usage_of_a_turn(
    phoenix: Phoenix, provider: str
) -> None:
    alice = User.objects.create_user("alice")
    with override_settings(
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=phoenix.traces_endpoint, TURN_RUNNER="embedded"
    ):
        conversation, turn = conversation_start(
            owner=alice,
            model_profile=_profile(provider),
            question=WEATHER,
            servers=[demo_server_ensure()],
            dispatch=False,
        )
        turn_run(turn_id=turn.pk)
        assert wait_until(lambda: _delivered(turn), 30, step=0.1), (
            TraceDelivery.objects.filter(turn=turn).values().first()
        )

    sent = _sent_spans(conversation, turn)
    exported = {span["spanId"]: _sent_attrs(span) for span in sent}
    (trace_id,) = {span["traceId"] for span in sent}
    # Phoenix inserts what it receives in batches: wait until the whole trace is readable.
    assert wait_until(lambda: len(phoenix.spans(trace_id)) == len(sent), 30, step=0.25), phoenix.spans(
        trace_id
    )
    spans = {span["context"]["span_id"]: span for span in phoenix.spans(trace_id)}

    # Every span arrived under its parent and of its kind: one agent, two model calls, one tool;
    # the MCP spans (tools/call among them) are no second tool.
    assert {s["spanId"]: s.get("parentSpanId") for s in sent} == {i: s["parent_id"] for i, s in spans.items()}
    assert {i: s["span_kind"] for i, s in spans.items()} == {
        i: _expected_kind(a) for i, a in exported.items()
    }
    assert sorted(s["span_kind"] for s in spans.values() if s["span_kind"] in {"AGENT", "LLM", "TOOL"}) == [
        "AGENT",
        "LLM",
        "LLM",
        "TOOL",
    ]
    root = _one([s for s in spans.values() if s["parent_id"] is None])
    assert (root["name"], root["span_kind"]) == ("invoke_agent", "AGENT")
    decide, answer = sorted(
        (s for s in spans.values() if s["span_kind"] == "LLM"), key=lambda s: s["start_time"]
    )
    tool = _one([s for s in spans.values() if s["span_kind"] == "TOOL"])
    rpc = _one([s for s in spans.values() if s["name"] == "tools/call get_weather_forecast"])
    assert tool["name"] == "execute_tool get_weather_forecast"
    assert decide["parent_id"] == answer["parent_id"] == tool["parent_id"] == root["context"]["span_id"]
    assert (rpc["parent_id"], rpc["span_kind"]) == (tool["context"]["span_id"], "CHAIN")

    # The model calls: the model, the token counts and finish reason as exported, the tools offered.
    for call in (decide, answer):
        attributes, sent_attributes = call["attributes"], exported[call["context"]["span_id"]]
        assert attributes["llm.model_name"] == "demo"
        assert attributes["llm.token_count.prompt"] == sent_attributes["gen_ai.usage.input_tokens"] > 0
        assert attributes["llm.token_count.completion"] == sent_attributes["gen_ai.usage.output_tokens"] > 0
        assert attributes["session.id"] == str(conversation.public_id)
        offered = [
            json.loads(v)["function"]["name"] for k, v in attributes.items() if k.startswith("llm.tools.")
        ]
        assert "demo__get_weather_forecast" in offered
        if instructions := sent_attributes.get("gen_ai.system_instructions"):
            system = _messages(attributes, "llm.input_messages")[0]
            assert system == {
                "role": "system",
                "content": "".join(p["content"] for p in json.loads(instructions)),
            }

    # The messages: the question, the model's tool call, the result it was sent, its answer.
    call_id = exported[tool["context"]["span_id"]].get("gen_ai.tool.call.id")  # Gemini sends none
    question = _one(
        [m for m in _messages(decide["attributes"], "llm.input_messages") if m["role"] != "system"]
    )
    assert question == {"role": "user", "content": WEATHER}
    call_message = _one(_messages(decide["attributes"], "llm.output_messages"))
    assert call_message["role"] == "assistant"
    reasons = exported[decide["context"]["span_id"]]["gen_ai.response.finish_reasons"]
    assert [call_message["finish_reason"]] == reasons and reasons[0] in {"tool_calls", "tool_use", "STOP"}
    assert call_message.get("tool_calls.0.tool_call.id") == call_id
    assert call_message["tool_calls.0.tool_call.function.name"] == "demo__get_weather_forecast"
    arguments = json.loads(call_message["tool_calls.0.tool_call.function.arguments"])
    assert arguments == {"city": "Beijing", "day": "tomorrow"}

    result: Any = Step.objects.get(turn=turn, kind=Step.Kind.TOOL).result
    asked, called, answered = [
        m for m in _messages(answer["attributes"], "llm.input_messages") if m["role"] != "system"
    ]
    assert (
        asked == question and called["tool_calls.0.tool_call.function.name"] == "demo__get_weather_forecast"
    )
    assert answered["role"] == "tool" and answered.get("tool_call_id") == call_id
    sent_back = answered["content"]  # the result as the model was sent it
    if provider == "gemini":  # a function's result goes to Gemini as an object
        sent_back = json.loads(sent_back)["output"]
    assert result["content"][0]["text"] in sent_back
    final = _one(_messages(answer["attributes"], "llm.output_messages"))
    assert final["role"] == "assistant" and "Beijing tomorrow:" in final["content"]

    # The tool call: its name, id, arguments and the MCP result as received.
    attributes = tool["attributes"]
    assert attributes["tool.name"] == "get_weather_forecast" and attributes.get("tool.id") == call_id
    assert attributes["tool.description"].startswith("Get a weather forecast")
    assert (attributes["tool.parameters.city"], attributes["tool.parameters.day"]) == ("Beijing", "tomorrow")
    assert json.loads(attributes["output.value"]) == result
