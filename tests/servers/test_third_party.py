"""The workbench against MCP servers nobody here wrote, through its services, views and CLI.

``@modelcontextprotocol/server-everything`` and ``server-filesystem`` (npm, installed by
``make tests/mcp_servers/node_modules/.installed``), ``mcp-server-time`` and ``mcp-server-git``
(PyPI), and the bundled demo server served over streamable HTTP. Every tool, resource, template
and prompt server-everything offers is exercised; the model boundary (sampling) is the bundled
demo model, answered in process.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from conversations.models import Exchange
from conversations.services import demo_profile_ensure
from servers import gateway, selectors, services
from servers.models import McpServer, Operation, PendingInput
from tests.support import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
NODE_MODULES = REPO_ROOT / "tests" / "mcp_servers" / "node_modules"
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def node_server(package: str) -> list[str]:
    """The command line of an npm MCP server, from its package.json ``bin``."""
    folder = NODE_MODULES / "@modelcontextprotocol" / package
    manifest = folder / "package.json"
    if not manifest.exists() or shutil.which("node") is None:
        pytest.fail(f"{package} is not installed: run make tests/mcp_servers/node_modules/.installed")
    bin_entry = json.loads(manifest.read_text())["bin"]
    entry = bin_entry if isinstance(bin_entry, str) else next(iter(bin_entry.values()))
    return [str(shutil.which("node")), str(folder / entry)]


def register(name: str, command: list[str], **fields: Any) -> McpServer:
    return services.server_save(
        server=None,
        owner=None,
        # An administrator let everyone start these servers: bob, no staff, drives them in the browser.
        fields={
            "name": name,
            "transport": "stdio",
            "command": command[0],
            "args": command[1:],
            "call_timeout": 30.0,
            "allow_non_staff_spawn": True,
            **fields,
        },
        env={},
        secret_env={},
        headers={},
        secret_headers={},
    )


def wait_for(predicate: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("the condition did not come true in time")
        time.sleep(0.05)


def labels(operation: Operation) -> list[str]:
    return [exchange.label for exchange in selectors.operation_exchanges(operation=operation)]


def exchange(operation: Operation, label: str) -> Exchange:
    return next(e for e in selectors.operation_exchanges(operation=operation) if e.label == label)


def block_types(operation: Operation) -> list[str]:
    return [block["type"] for block in operation.result["content"]]


def finished(operation: Operation) -> Operation:
    wait_for(lambda: Operation.objects.get(pk=operation.pk).is_finished)
    operation.refresh_from_db()
    return operation


@pytest.fixture
def everything(tmp_path: Path) -> McpServer:
    """server-everything with roots, a sampling model and elicitation: every conditional tool shows."""
    return register(
        "everything",
        [*node_server("server-everything"), "stdio"],
        roots=[{"uri": tmp_path.as_uri(), "name": "scratch"}],
        sampling_profile=demo_profile_ensure(),
    )


@pytest.fixture
def threaded(settings: Any) -> None:
    """Operations run in the workbench thread pool, as in production: the test follows them."""
    settings.WORKBENCH_RUNNER = "thread"


def sample_value(prop: dict[str, Any]) -> Any:
    if "enum" in prop:
        return prop["enum"][0]
    return {
        "string": "hello inspector",
        "number": 2,
        "integer": 2,
        "boolean": True,
        "array": [],
        "object": {},
    }[prop.get("type", "string")]


def arguments_from_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Valid arguments: every default, and a sample for each required property without one."""
    required = set(schema.get("required", []))
    return {
        name: prop["default"] if "default" in prop else sample_value(prop)
        for name, prop in schema.get("properties", {}).items()
        if "default" in prop or name in required
    }


# What each non-interactive tool of server-everything is called with beyond its schema's
# defaults (no network: gzip a data: URI), and the content blocks it must answer with.
OVERRIDES: dict[str, dict[str, Any]] = {
    "get-annotated-message": {"includeImage": True},
    "gzip-file-as-resource": {"data": "data:text/plain;base64,aGVsbG8gaW5zcGVjdG9y", "name": "hello.txt.gz"},
    "trigger-long-running-operation": {"duration": 1, "steps": 2},
    "trigger-sampling-request": {"prompt": "name a colour", "maxTokens": 50},
}
EXPECTED_BLOCKS: dict[str, list[str]] = {
    "echo": ["text"],
    "get-annotated-message": ["text", "image"],
    "get-env": ["text"],
    "get-resource-links": ["text", "resource_link", "resource_link", "resource_link"],
    "get-resource-reference": ["text", "resource", "text"],
    "get-structured-content": ["text"],
    "get-sum": ["text"],
    "get-tiny-image": ["text", "image", "text"],
    "gzip-file-as-resource": ["resource_link"],
    "toggle-simulated-logging": ["text"],
    "toggle-subscriber-updates": ["text"],
    "trigger-long-running-operation": ["text"],
    "get-roots-list": ["text"],
    "trigger-sampling-request": ["text"],
    "simulate-research-query": ["text"],
}
# Tools that wait for a person: exercised one by one below.
INTERACTIVE = {"trigger-elicitation-request", "trigger-url-elicitation"}


# --- server-everything: every tool from its form ---------------------------------------------


def test_every_tool_of_server_everything_is_called_from_its_form_and_every_content_type_is_shown(
    client: Client, workbench: None, bob: User, everything: McpServer, tmp_path: Path
) -> None:
    client.force_login(bob)
    client.post(f"/servers/{everything.name}/list/tools")
    listing, reports, _ = selectors.server_tool_reports(server=everything, user=None)
    tools = {tool["name"]: tool for tool in listing.items}
    assert set(tools) == set(EXPECTED_BLOCKS) | INTERACTIVE
    assert all(report.tokens for report in reports)

    pages: dict[str, str] = {}
    for name in EXPECTED_BLOCKS:
        form = client.get(f"/servers/{everything.name}/tools/{name}")
        assert form.status_code == 200 and 'id="input-schema"' in form.content.decode()
        arguments = arguments_from_schema(tools[name]["inputSchema"]) | OVERRIDES.get(name, {})
        response = client.post(
            f"/servers/{everything.name}/tools/{name}", {"arguments": json.dumps(arguments)}
        )
        assert response.status_code == 302, response.content.decode()[:2000]
        pages[name] = client.get(response["Location"]).content.decode()

    calls = {op.target: op for op in Operation.objects.filter(server=everything, kind="tools/call")}
    for name, expected in EXPECTED_BLOCKS.items():
        operation = calls[name]
        assert operation.status == "ok", (name, operation.error)
        assert block_types(operation) == expected, name
        call = exchange(operation, "tools/call")
        assert json.loads(call.request_body)["params"]["name"] == name
        assert json.loads(call.response_body)["id"] == json.loads(call.request_body)["id"]
        if name != "simulate-research-query":  # a task: its result comes with tasks/result
            # The result shown is what the server sent: nothing the SDK only defaulted.
            assert operation.result == json.loads(call.response_body)["result"], name
    assert calls["echo"].result["content"][0]["text"] == "Echo: hello inspector"
    assert calls["get-sum"].result["content"][0]["text"] == "The sum of 2 and 2 is 4."
    assert str(tmp_path.as_uri()) in calls["get-roots-list"].result["content"][0]["text"]

    # Annotations on content blocks, images, links and embedded resources are all drawn.
    annotated = calls["get-annotated-message"].result["content"][0]
    assert annotated["annotations"]["priority"] == 1.0
    assert (
        "priority 1" in pages["get-annotated-message"]
        and "audience: user, assistant" in pages["get-annotated-message"]
    )
    assert pages["get-tiny-image"].count('src="data:image/png;base64,') == 1
    assert (
        "resource link" in pages["get-resource-links"]
        and "demo://resource/dynamic/text/2" in pages["get-resource-links"]
    )
    assert "embedded resource text/plain" in pages["get-resource-reference"]
    assert "Resource 1: This is a plaintext resource" in pages["get-resource-reference"]

    # structuredContent checked against the declared outputSchema.
    structured = calls["get-structured-content"]
    assert structured.output_check == {"checked": True, "valid": True, "errors": []}
    assert set(structured.result["structuredContent"]) == {"temperature", "conditions", "humidity"}
    assert "matches the outputSchema" in pages["get-structured-content"]

    # Progress, logging and the nested sampling call are on the operations that caused them.
    assert labels(calls["trigger-long-running-operation"]).count("notifications/progress") == 2
    assert "notifications/message" in labels(calls["toggle-simulated-logging"])
    sampled = calls["trigger-sampling-request"]
    assert "[demo model]" in sampled.result["content"][0]["text"]
    assert "sampling/createMessage" in labels(sampled)


def test_a_tool_that_requires_a_task_runs_as_one_and_its_result_is_fetched_with_tasks_result(
    client: Client, workbench: None, bob: User, everything: McpServer
) -> None:
    client.force_login(bob)
    client.post(f"/servers/{everything.name}/list/tools")

    response = client.post(
        f"/servers/{everything.name}/tools/simulate-research-query",
        {"arguments": json.dumps({"topic": "python"})},
    )

    operation = Operation.objects.get(kind="tools/call")
    assert operation.status == "ok" and not operation.is_error, (operation.error, operation.result)
    call = exchange(operation, "tools/call")
    assert json.loads(call.request_body)["params"]["task"]["ttl"] > 0
    task = json.loads(call.response_body)["result"]["task"]
    fetched = exchange(operation, "tasks/result")
    assert json.loads(fetched.request_body)["params"]["taskId"] == task["taskId"]
    assert json.loads(fetched.response_body)["result"]["content"] == operation.result["content"]
    text = "\n".join(block["text"] for block in operation.result["content"])
    assert "python" in text.lower()
    assert "tasks/result" in client.get(response["Location"]).content.decode()


def test_a_task_that_needs_input_asks_through_the_browser_while_tasks_result_waits(
    client: Client, workbench: None, threaded: None, bob: User, everything: McpServer
) -> None:
    client.force_login(bob)
    client.post(f"/servers/{everything.name}/list/tools")

    client.post(
        f"/servers/{everything.name}/tools/simulate-research-query",
        {"arguments": json.dumps({"topic": "python", "ambiguous": True})},
    )
    operation = Operation.objects.get(kind="tools/call")
    question = question_of(operation)
    interpretation = question.params["requestedSchema"]["properties"]["interpretation"]
    assert [option["title"] for option in interpretation["oneOf"]][0] == "Python programming language"
    answer = {"interpretation": "programming"}
    client.post(
        f"/servers/op/{operation.public_id}/questions/{question.pk}",
        {"action": "accept", "content": json.dumps(answer)},
    )
    operation = finished(operation)

    assert operation.status == "ok", operation.error
    assert json.loads(exchange(operation, "elicitation/create").response_body)["result"]["action"] == "accept"
    # Each message is on the wire from the moment it is sent: the question came while tasks/result waited.
    assert labels(operation).index("tasks/result") < labels(operation).index("elicitation/create")
    assert exchange(operation, "tasks/result").status == "ok"
    report = operation.result["content"][0]["text"]
    assert "# Research Report: python (programming)" in report and "`working` → `input_required`" in report


def test_cancelling_a_task_run_call_cancels_the_task_on_the_server(
    client: Client, workbench: None, threaded: None, bob: User, everything: McpServer
) -> None:
    client.force_login(bob)
    client.post(f"/servers/{everything.name}/list/tools")

    client.post(
        f"/servers/{everything.name}/tools/simulate-research-query",
        {"arguments": json.dumps({"topic": "python", "ambiguous": True})},
    )
    operation = Operation.objects.get(kind="tools/call")
    question_of(operation)
    client.post(f"/servers/op/{operation.public_id}/cancel")
    operation = finished(operation)

    assert operation.status == "cancelled"
    task_id = json.loads(exchange(operation, "tools/call").response_body)["result"]["task"]["taskId"]
    cancel = exchange(operation, "tasks/cancel")
    assert json.loads(cancel.request_body)["params"]["taskId"] == task_id
    assert cancel.status == "ok" and json.loads(cancel.response_body)["result"]["status"] == "cancelled"
    assert exchange(operation, "tasks/result").status == "no response"
    assert "notifications/cancelled" in labels(operation)


# --- server-everything: resources, templates, prompts, completion ------------------------------


def test_every_resource_and_template_is_read_and_every_prompt_is_got_from_the_server_page(
    client: Client, workbench: None, bob: User, everything: McpServer
) -> None:
    client.force_login(bob)
    for what in ("resources", "templates", "prompts"):
        client.post(f"/servers/{everything.name}/list/{what}")
    page = client.get(f"/servers/{everything.name}/").content.decode()
    resources = selectors.server_listing(
        server=everything, kind=Operation.Kind.RESOURCES_LIST, user=None
    ).items
    templates = selectors.server_listing(
        server=everything, kind=Operation.Kind.TEMPLATES_LIST, user=None
    ).items
    prompts = selectors.server_listing(server=everything, kind=Operation.Kind.PROMPTS_LIST, user=None).items
    assert len(resources) == 7 and len(templates) == 2 and len(prompts) == 4
    assert 'name="var_resourceId"' in page and 'name="arg_department"' in page

    for resource in resources:
        client.post(f"/servers/{everything.name}/read", {"uri": resource["uri"]})
    template_pages = {}
    for template in templates:
        response = client.post(
            f"/servers/{everything.name}/read", {"template": template["uriTemplate"], "var_resourceId": "7"}
        )
        template_pages[template["uriTemplate"]] = client.get(response["Location"]).content.decode()
    arguments = {
        "simple-prompt": {},
        "args-prompt": {"arg_city": "Lyon", "arg_state": ""},
        "completable-prompt": {"arg_department": "Engineering", "arg_name": "Bob"},
        "resource-prompt": {"arg_resourceType": "Text", "arg_resourceId": "3"},
    }
    prompt_pages = {}
    for prompt in prompts:
        response = client.post(
            f"/servers/{everything.name}/prompt", {"prompt": prompt["name"], **arguments[prompt["name"]]}
        )
        prompt_pages[prompt["name"]] = client.get(response["Location"]).content.decode()

    reads = Operation.objects.filter(server=everything, kind="resources/read")
    assert reads.count() == 9 and all(read.status == "ok" for read in reads)
    for read in reads.filter(arguments__isnull=True):
        [content] = read.result["contents"]
        assert content["uri"] == read.target and content["mimeType"] == "text/markdown" and content["text"]
    text_read = reads.get(target="demo://resource/dynamic/text/7")
    blob_read = reads.get(target="demo://resource/dynamic/blob/7")
    assert text_read.result["contents"][0]["text"].startswith("Resource 7:")
    assert "blob" in blob_read.result["contents"][0]
    assert "Resource 7: This is a base64 blob" in template_pages["demo://resource/dynamic/blob/{resourceId}"]
    assert json.loads(exchange(text_read, "resources/read").request_body)["params"]["uri"] == text_read.target

    gets = {op.target: op for op in Operation.objects.filter(server=everything, kind="prompts/get")}
    assert all(op.status == "ok" for op in gets.values())
    assert gets["args-prompt"].arguments == {"city": "Lyon"}
    assert "What's weather in Lyon?" in prompt_pages["args-prompt"]
    assert "Please promote Bob to the head of the Engineering team." in prompt_pages["completable-prompt"]
    embedded = gets["resource-prompt"].result["messages"][1]["content"]
    assert embedded["type"] == "resource" and embedded["resource"]["uri"] == "demo://resource/dynamic/text/3"
    assert "demo://resource/dynamic/text/3" in prompt_pages["resource-prompt"]


def test_completion_suggests_prompt_arguments_and_template_variables(
    client: Client, workbench: None, alice: User, everything: McpServer
) -> None:
    client.force_login(alice)
    client.post(f"/servers/{everything.name}/connect")

    department = client.post(
        f"/servers/{everything.name}/complete",
        {"ref_type": "ref/prompt", "ref": "completable-prompt", "argument": "department", "value": "Eng"},
    ).json()
    people = client.post(
        f"/servers/{everything.name}/complete",
        {
            "ref_type": "ref/prompt",
            "ref": "completable-prompt",
            "argument": "name",
            "value": "",
            "context": json.dumps({"department": "Sales"}),
        },
    ).json()
    resource_id = client.post(
        f"/servers/{everything.name}/complete",
        {
            "ref_type": "ref/resource",
            "ref": "demo://resource/dynamic/text/{resourceId}",
            "argument": "resourceId",
            "value": "1",
        },
    ).json()

    assert department == {"values": ["Engineering"], "error": "", "operation": department["operation"]}
    assert people["values"] == ["David", "Eve", "Frank"]
    assert resource_id["values"] == ["1"]
    completions = Operation.objects.filter(server=everything, kind="completion/complete").order_by(
        "started_at"
    )
    request = json.loads(exchange(completions[1], "completion/complete").request_body)
    assert request["params"]["context"] == {"arguments": {"department": "Sales"}}
    assert client.get(department["operation"]).status_code == 200
    assert 'data-completions="1"' in client.get(f"/servers/{everything.name}/").content.decode()


# --- server-everything: the server's own requests, progress and logging ----------------------


def question_of(operation: Operation) -> PendingInput:
    wait_for(lambda: operation.questions.filter(status="waiting").exists())
    return operation.questions.get(status="waiting")


def test_an_elicitation_is_answered_in_the_browser_and_its_round_trip_recorded(
    client: Client, workbench: None, threaded: None, bob: User, everything: McpServer
) -> None:
    client.force_login(bob)
    client.post(f"/servers/{everything.name}/list/tools")

    response = client.post(
        f"/servers/{everything.name}/tools/trigger-elicitation-request", {"arguments": "{}"}
    )
    operation = Operation.objects.get(kind="tools/call")
    question = question_of(operation)
    asking = client.get(response["Location"]).content.decode()
    refused = client.post(
        f"/servers/op/{operation.public_id}/questions/{question.pk}",
        {
            "action": "accept",
            "content": json.dumps({"name": "Bob", "integer": 500, "untitledMultipleSelectEnum": "Piano"}),
        },
    )
    answer = {"name": "Bob Builder", "check": True, "integer": 7, "untitledMultipleSelectEnum": ["Piano"]}
    client.post(
        f"/servers/op/{operation.public_id}/questions/{question.pk}",
        {"action": "accept", "content": json.dumps(answer)},
    )
    operation = finished(operation)

    # An answer that breaks the requested schema is refused here and the question stays open.
    assert refused.status_code == 400
    refusal = refused.content.decode()
    assert "Not sent" in refusal and "integer: 500 is greater than the maximum of 100" in refusal
    assert "untitledMultipleSelectEnum: 'Piano' is not of type 'array'" in refusal
    assert "Please provide inputs for the following fields" in asking and "elicit-fields" in asking
    assert "Your full, legal name" in asking  # the requested schema travels to the page's form
    assert operation.status == "ok", operation.error
    text = "\n".join(block["text"] for block in operation.result["content"])
    assert "User provided the requested information" in text and "- Name: Bob Builder" in text
    asked = exchange(operation, "elicitation/create")
    assert asked.direction == "server"
    assert json.loads(asked.request_body)["params"]["requestedSchema"]["required"] == ["name"]
    assert json.loads(asked.response_body)["result"] == {"action": "accept", "content": answer}
    question.refresh_from_db()
    assert question.status == "accept" and question.answer == {"action": "accept", "content": answer}
    assert "your answer" in client.get(response["Location"]).content.decode()


def test_a_declined_elicitation_reaches_the_server_as_a_decline(
    client: Client, workbench: None, threaded: None, bob: User, everything: McpServer
) -> None:
    client.force_login(bob)
    client.post(f"/servers/{everything.name}/list/tools")

    client.post(f"/servers/{everything.name}/tools/trigger-elicitation-request", {"arguments": "{}"})
    operation = Operation.objects.get(kind="tools/call")
    question = question_of(operation)
    client.post(f"/servers/op/{operation.public_id}/questions/{question.pk}", {"action": "decline"})
    operation = finished(operation)

    assert operation.status == "ok"
    assert "User declined to provide the requested information" in operation.result["content"][0]["text"]
    assert json.loads(exchange(operation, "elicitation/create").response_body)["result"] == {
        "action": "decline"
    }


def test_a_url_elicitation_shows_the_link_and_done_reports_completion(
    client: Client, workbench: None, threaded: None, bob: User, everything: McpServer
) -> None:
    client.force_login(bob)
    client.post(f"/servers/{everything.name}/list/tools")

    response = client.post(
        f"/servers/{everything.name}/tools/trigger-url-elicitation",
        {"arguments": json.dumps({"url": "https://example.com/consent?step=1"})},
    )
    operation = Operation.objects.get(kind="tools/call")
    question = question_of(operation)
    page = client.get(response["Location"]).content.decode()
    client.post(f"/servers/op/{operation.public_id}/questions/{question.pk}", {"action": "accept"})
    operation = finished(operation)

    assert question.params["mode"] == "url"
    assert 'href="https://example.com/consent?step=1"' in page and 'rel="noopener noreferrer"' in page
    assert operation.status == "ok"
    assert "User completed the URL elicitation flow" in operation.result["content"][0]["text"]
    assert json.loads(exchange(operation, "elicitation/create").response_body)["result"] == {
        "action": "accept"
    }


def test_progress_notifications_are_recorded_while_the_call_runs_and_the_call_can_be_cancelled(
    client: Client, workbench: None, threaded: None, bob: User, everything: McpServer
) -> None:
    client.force_login(bob)
    client.post(f"/servers/{everything.name}/list/tools")

    response = client.post(
        f"/servers/{everything.name}/tools/trigger-long-running-operation",
        {"arguments": json.dumps({"duration": 60, "steps": 60})},
    )
    operation = Operation.objects.get(kind="tools/call")
    wait_for(lambda: operation.exchanges.filter(label="notifications/progress").count() >= 2)
    state = client.get(f"/servers/op/{operation.public_id}/state").json()
    client.post(f"/servers/op/{operation.public_id}/cancel")
    operation = finished(operation)

    assert state["finished"] is False and state["status"] == "running"
    assert "notifications/progress" in state["html"] and "more as they arrive" in state["html"]
    progress = [
        json.loads(e.response_body)["params"]
        for e in selectors.operation_exchanges(operation=operation)
        if e.label == "notifications/progress"
    ]
    token = json.loads(exchange(operation, "tools/call").request_body)["params"]["_meta"]["progressToken"]
    assert all(p["progressToken"] == token and p["total"] == 60 for p in progress)
    assert [p["progress"] for p in progress] == sorted(p["progress"] for p in progress)
    assert operation.status == "cancelled"
    assert "notifications/cancelled" in labels(operation)
    assert exchange(operation, "tools/call").status == "no response"
    assert "cancelled" in client.get(response["Location"]).content.decode()


def test_log_notifications_are_recorded_with_the_operation_and_in_the_transcript(
    client: Client, workbench: None, bob: User, everything: McpServer
) -> None:
    client.force_login(bob)
    client.post(f"/servers/{everything.name}/list/tools")

    client.post(f"/servers/{everything.name}/tools/toggle-simulated-logging", {"arguments": "{}"})
    operation = Operation.objects.get(kind="tools/call")
    transcript = client.get(f"/servers/{everything.name}/transcript?method=notifications/message")

    log = json.loads(exchange(operation, "notifications/message").response_body)
    assert log["params"]["level"] in {
        "debug",
        "info",
        "notice",
        "warning",
        "error",
        "critical",
        "alert",
        "emergency",
    }
    assert log["params"]["data"].lower().startswith(log["params"]["level"])
    assert transcript.context["page"].paginator.count >= 1
    assert "notifications/message" in transcript.content.decode()


def test_sampling_is_answered_by_the_servers_model_profile_with_the_model_call_recorded(
    client: Client, workbench: None, bob: User, everything: McpServer
) -> None:
    client.force_login(bob)
    client.post(f"/servers/{everything.name}/list/tools")

    response = client.post(
        f"/servers/{everything.name}/tools/trigger-sampling-request",
        {"arguments": json.dumps({"prompt": "name a colour", "maxTokens": 50})},
    )
    page = client.get(response["Location"]).content.decode()

    operation = Operation.objects.get(kind="tools/call")
    assert operation.status == "ok", operation.error
    asked = exchange(operation, "sampling/createMessage")
    model_call = next(e for e in selectors.operation_exchanges(operation=operation) if e.channel == "llm")
    sent_to_model = json.loads(model_call.request_body)
    assert sent_to_model["model"] == "demo"
    assert sent_to_model["messages"][0] == {"role": "system", "content": "You are a helpful test server."}
    assert "name a colour" in sent_to_model["messages"][1]["content"]
    model_text = json.loads(model_call.response_body)["choices"][0]["message"]["content"]
    answered = json.loads(asked.response_body)["result"]
    assert answered["content"] == {"type": "text", "text": model_text} and answered["model"] == "demo"
    assert json.loads(asked.request_body)["params"]["maxTokens"] == 50
    # In the order they were sent: the server asked while the call was open.
    assert seqs_in_order(operation, ["tools/call", "sampling/createMessage"])
    assert "model call" in page and model_text.split('"')[0] in operation.result["content"][0]["text"]


def seqs_in_order(operation: Operation, expected: list[str]) -> bool:
    found = [label for label in labels(operation) if label in expected]
    return found == expected


# --- server-filesystem: roots from the registry ------------------------------------------------


def test_the_filesystem_server_works_inside_the_configured_roots_and_refuses_a_path_outside(
    client: Client, workbench: None, alice: User, tmp_path: Path
) -> None:
    inside = tmp_path / "workspace"
    inside.mkdir()
    (inside / "notes.txt").write_text("inside the root\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside the root\n")
    command = node_server("server-filesystem")
    client.force_login(alice)
    created = client.post(
        "/servers/new",
        {
            "name": "files",
            "transport": "stdio",
            "command": command[0],
            "args": "\n".join(command[1:]),
            "era": "legacy",
            "call_timeout": "30",
            "roots": f"{inside.as_uri()} workspace",
            "elicitation": "on",
            "enabled": "on",
        },
    )
    assert created.status_code == 302, created.content.decode()[:3000]
    server = McpServer.objects.get(name="files")

    client.post(f"/servers/{server.name}/connect")
    client.post(f"/servers/{server.name}/list/tools")
    results = {}
    for tool, arguments in (
        ("list_allowed_directories", {}),
        ("list_directory", {"path": str(inside)}),
        ("read_text_file", {"path": str(inside / "notes.txt")}),
        ("read_text_file", {"path": str(outside / "secret.txt")}),
    ):
        response = client.post(f"/servers/{server.name}/tools/{tool}", {"arguments": json.dumps(arguments)})
        results[(tool, arguments.get("path"))] = (
            Operation.objects.get(public_id=response["Location"].split("/")[-2]),
            client.get(response["Location"]).content.decode(),
        )

    assert server.roots == [{"uri": inside.as_uri(), "name": "workspace"}]
    asked = Exchange.objects.get(server=server, label="roots/list")
    assert asked.direction == "server"
    assert json.loads(asked.response_body)["result"]["roots"] == [
        {"uri": inside.as_uri(), "name": "workspace"}
    ]
    allowed, _ = results[("list_allowed_directories", None)]
    assert str(inside) in allowed.result["content"][0]["text"]
    listed, _ = results[("list_directory", str(inside))]
    assert listed.result["content"][0]["text"] == "[FILE] notes.txt"
    read, _ = results[("read_text_file", str(inside / "notes.txt"))]
    assert (
        read.status == "ok" and not read.is_error and read.result["content"][0]["text"] == "inside the root\n"
    )
    refused, refused_page = results[("read_text_file", str(outside / "secret.txt"))]
    assert refused.status == "ok" and refused.is_error
    assert "Access denied - path outside allowed directories" in refused.result["content"][0]["text"]
    assert "isError: true" in refused_page and "outside the root" not in refused_page
    transcript = client.get(f"/servers/{server.name}/transcript.json").json()["messages"]
    assert "roots/list" in [message["label"] for message in transcript]


# --- mcp-server-time and mcp-server-git ---------------------------------------------------------


def git_repository(folder: Path) -> Path:
    folder.mkdir()
    git = ["git", "-C", str(folder), "-c", "user.name=Alice", "-c", "user.email=alice@example.com"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(folder)], check=True)
    (folder / "README.md").write_text("hello\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "First commit"], check=True)
    (folder / "README.md").write_text("hello again\n")
    return folder


@pytest.mark.parametrize("package", ["time", "git"])
def test_python_servers_list_their_tools_with_a_lint_report_and_answer_calls(
    client: Client, workbench: None, alice: User, tmp_path: Path, package: str
) -> None:
    if package == "time":
        command = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
        calls: list[tuple[str, dict[str, Any], str]] = [
            ("get_current_time", {"timezone": "Europe/Paris"}, '"timezone": "Europe/Paris"'),
            (
                "convert_time",
                {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
                "+9.0h",
            ),
        ]
    else:
        repo = git_repository(tmp_path / "repo")
        command = [sys.executable, "-m", "mcp_server_git", "--repository", str(repo)]
        calls = [
            ("git_status", {"repo_path": str(repo)}, "modified:   README.md"),
            ("git_log", {"repo_path": str(repo), "max_count": 3}, "First commit"),
            ("git_diff_unstaged", {"repo_path": str(repo)}, "+hello again"),
        ]
    server = register(package, command)
    client.force_login(alice)

    client.post(f"/servers/{server.name}/list/tools")
    page = client.get(f"/servers/{server.name}/").content.decode()
    for tool, arguments, expected in calls:
        client.post(f"/servers/{server.name}/tools/{tool}", {"arguments": json.dumps(arguments)})
        operation = Operation.objects.filter(server=server, target=tool).latest("started_at")
        assert operation.status == "ok" and not operation.is_error, (tool, operation.error, operation.result)
        assert expected in operation.result["content"][0]["text"]
        if package == "time":
            assert operation.output_check == {"checked": True, "valid": True, "errors": []}

    listing, reports, _ = selectors.server_tool_reports(server=server, user=None)
    names = {report.name for report in reports}
    assert names >= {tool for tool, _, _ in calls}
    assert all(report.tokens for report in reports)
    assert "tokens in all" in page and 'class="wb-table tools-table"' in page
    if package == "git":
        # The git server leaves its parameters undescribed: the lint says so, tool by tool.
        status = next(report for report in reports if report.name == "git_status")
        assert [f.message for f in status.findings] == ["parameters without a description: repo_path"]
        assert "parameters without a description: repo_path" in page
    else:
        assert '<span class="badge tone-ok">ok</span>' in page


# --- the demo server over streamable HTTP, in each era -------------------------------------------


@pytest.fixture
def demo_http_url() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "servers.demo_server", "--http", "--port", str(port)],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        if process.poll() is not None:
            pytest.fail("the demo server exited instead of serving HTTP")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except OSError:
            return False
        return True

    wait_for(listening, seconds=20)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        gateway.close_all()
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.parametrize(
    ("era", "handshake", "protocol"),
    [
        ("legacy", ["initialize", "notifications/initialized"], "2025-11-25"),
        ("auto", ["server/discover"], "2026-07-28"),
        ("modern", ["server/discover"], "2026-07-28"),
    ],
)
def test_connecting_over_http_shows_the_handshake_with_its_http_status_and_headers(
    client: Client,
    workbench: None,
    bob: User,
    demo_http_url: str,
    era: str,
    handshake: list[str],
    protocol: str,
) -> None:
    server = services.server_save(
        server=None,
        owner=None,
        fields={
            "name": f"demo-http-{era}",
            "transport": "http",
            "url": demo_http_url,
            "era": era,
            "call_timeout": 15.0,
        },
        env={},
        secret_env={},
        headers={"X-Team": "inspector"},
        secret_headers={},
    )
    client.force_login(bob)  # an HTTP server spawns nothing: anyone may reconnect it

    client.post(f"/servers/{server.name}/connect")
    page = client.get(f"/servers/{server.name}/").content.decode()
    client.post(f"/servers/{server.name}/list/tools")
    client.post(f"/servers/{server.name}/tools/calculate", {"arguments": json.dumps({"expression": "6*7"})})

    connect = Operation.objects.get(server=server, kind="connect")
    assert connect.status == "ok", connect.error
    assert connect.session["protocol_version"] == protocol
    assert [label for label in labels(connect) if not label.startswith(("GET ", "stderr"))] == handshake
    first = exchange(connect, handshake[0])
    assert first.request_headers[":method"] == "POST" and first.request_headers["x-team"] == "inspector"
    assert first.response_headers[":status"] == "200"
    if era == "legacy":
        assert "mcp-session-id" in first.response_headers
        assert exchange(connect, "notifications/initialized").response_headers[":status"] == "202"
    else:
        assert first.request_headers["mcp-protocol-version"] == "2026-07-28"
        assert "mcp-session-id" not in first.response_headers
    assert f"The handshake as it happened ({len(labels_shown(connect))} messages)" in page
    assert "HTTP 200" in page and "HTTP request headers" in page and protocol in page
    call = Operation.objects.get(server=server, kind="tools/call")
    assert call.status == "ok" and "42" in json.dumps(call.result)
    assert exchange(call, "tools/call").response_headers[":status"] == "200"


def labels_shown(operation: Operation) -> list[str]:
    return [
        label
        for label in labels(operation)
        if label in selectors.HANDSHAKE_LABELS or label.startswith(("GET ", "stderr"))
    ]


# --- the command line ---------------------------------------------------------------------------


def test_the_command_line_registers_lists_and_calls_server_everything_with_json_output(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command(
        "server", "add", "everything-cli", "--timeout", "20", "--", *node_server("server-everything"), "stdio"
    )
    call_command("server", "list")
    registered = capsys.readouterr().out
    call_command("server", "tools", "everything-cli", "--json")
    listed = json.loads(capsys.readouterr().out)
    call_command("server", "call", "everything-cli", "get-sum", "--args", '{"a": 19, "b": 23}', "--json")
    summed = json.loads(capsys.readouterr().out)
    call_command(
        "server",
        "call",
        "everything-cli",
        "get-structured-content",
        "--args",
        '{"location": "Chicago"}',
        "--json",
    )
    structured = json.loads(capsys.readouterr().out)
    call_command("server", "call", "everything-cli", "get-tiny-image")
    plain = capsys.readouterr().out

    assert "everything-cli" in registered and "stdio" in registered
    names = {tool["name"] for tool in listed["tools"]}
    # No roots, no sampling model, and a terminal cannot answer elicitation: those tools are not offered.
    assert names == set(EXPECTED_BLOCKS) - {"trigger-sampling-request", "get-roots-list"}
    assert (
        summed["status"] == "ok" and summed["result"]["content"][0]["text"] == "The sum of 19 and 23 is 42."
    )
    call = next(m for m in summed["exchanges"] if m["label"] == "tools/call")
    assert call["request"]["params"]["arguments"] == {"a": 19, "b": 23}
    assert call["response"]["result"]["content"] == summed["result"]["content"]
    assert structured["result"]["structuredContent"]["conditions"]
    assert "[image image/png]" in plain
    server = McpServer.objects.get(name="everything-cli")
    assert Operation.objects.filter(server=server, source="cli").count() == 4
    with pytest.raises(Exception, match="not sent"):
        call_command("server", "call", "everything-cli", "get-sum", "--args", '{"a": "one"}')


def test_the_command_line_reads_every_resource_and_gets_every_prompt_of_server_everything(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("server", "add", "everything-cli", "--", *node_server("server-everything"), "stdio")
    assert capsys.readouterr().out.startswith("added everything-cli")
    call_command("server", "resources", "everything-cli", "--json")
    catalogue = json.loads(capsys.readouterr().out)
    call_command("server", "prompts", "everything-cli")
    prompt_lines = capsys.readouterr().out

    uris = [resource["uri"] for resource in catalogue["resources"]]
    uris += [template["uriTemplate"].replace("{resourceId}", "5") for template in catalogue["templates"]]
    reads = {}
    for uri in uris:
        call_command("server", "read", "everything-cli", uri, "--json")
        reads[uri] = json.loads(capsys.readouterr().out)
    call_command("server", "read", "everything-cli", "demo://resource/dynamic/blob/5")
    blob_line = capsys.readouterr().out
    prompts = {
        "simple-prompt": {},
        "args-prompt": {"city": "Lyon"},
        "completable-prompt": {"department": "Marketing", "name": "Grace"},
        "resource-prompt": {"resourceType": "Blob", "resourceId": "2"},
    }
    got = {}
    for name, arguments in prompts.items():
        call_command("server", "prompt", "everything-cli", name, "--args", json.dumps(arguments), "--json")
        got[name] = json.loads(capsys.readouterr().out)
    call_command("server", "prompt", "everything-cli", "args-prompt", "--args", '{"city": "Oslo"}')
    plain_prompt = capsys.readouterr().out

    assert len(uris) == 9
    assert "completable-prompt(department*, name*)" in prompt_lines
    for uri, document in reads.items():
        assert document["status"] == "ok" and document["result"]["contents"][0]["uri"] == uri
        sent = next(m for m in document["exchanges"] if m["label"] == "resources/read")
        assert sent["request"]["params"]["uri"] == uri and sent["response"]["result"] == document["result"]
    assert blob_line.startswith("[blob text/plain ")
    assert all(document["status"] == "ok" for document in got.values())
    assert got["completable-prompt"]["result"]["messages"][0]["content"]["text"] == (
        "Please promote Grace to the head of the Marketing team."
    )
    assert (
        got["resource-prompt"]["result"]["messages"][1]["content"]["resource"]["uri"]
        == "demo://resource/dynamic/blob/2"
    )
    assert plain_prompt.strip() == "user: What's weather in Oslo?"
    with pytest.raises(Exception, match="ended with status error"):
        call_command("server", "read", "everything-cli", "demo://resource/nowhere")
    with pytest.raises(Exception, match="ended with status error"):
        call_command("server", "prompt", "everything-cli", "args-prompt", "--args", "{}")


# --- a restart ---------------------------------------------------------------------------------


def test_the_raw_json_rpc_of_a_call_survives_closing_the_gateway_and_a_new_browser_session(
    client: Client, workbench: None, bob: User, everything: McpServer
) -> None:
    client.force_login(bob)
    client.post(f"/servers/{everything.name}/list/tools")
    response = client.post(
        f"/servers/{everything.name}/tools/echo", {"arguments": json.dumps({"message": "remember me"})}
    )
    operation_url = response["Location"]

    gateway.close_all()
    fresh = Client()
    fresh.force_login(bob)
    page = fresh.get(operation_url).content.decode()
    transcript = fresh.get(f"/servers/{everything.name}/transcript.json").json()["messages"]
    again = fresh.post(
        f"/servers/{everything.name}/tools/echo", {"arguments": json.dumps({"message": "again"})}
    )

    call = next(m for m in transcript if m["label"] == "tools/call")
    assert call["request"]["params"] == {
        "name": "echo",
        "arguments": {"message": "remember me"},
        "_meta": call["request"]["params"]["_meta"],
    }
    assert call["response"]["result"]["content"] == [{"type": "text", "text": "Echo: remember me"}]
    assert "Echo: remember me" in page and "progressToken" in page and "On the wire" in page
    assert [m["label"] for m in transcript][:2] == ["initialize", "notifications/initialized"]
    rerun = Operation.objects.get(public_id=again["Location"].split("/")[-2])
    assert rerun.status == "ok" and rerun.session["spawned"] is True
