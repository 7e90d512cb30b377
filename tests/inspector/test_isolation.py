"""Every URL of the project, walked by a curious second user (bob) against the first user's (alice's)
objects: each answers 404 (403 where only staff, or only someone allowed to start the server's
process, may act), or, for a page about no one's object, shows none of alice's content.

The table ``EXPECTED`` names every pattern the URL resolver knows. A pattern added without an
entry fails ``test_every_url_pattern_is_in_the_table``: decide what bob must get there first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from conversations.models import AuditEvent, Conversation, Exchange, Turn
from conversations.proxy.keys import create_key
from inspector.evals.models import EvalRun, Suite
from inspector.routing import websocket_urlpatterns
from servers.models import McpServer, Operation, PendingInput, SavedCall
from tests.factories import (
    ComparisonFactory,
    ConversationFactory,
    ExchangeFactory,
    McpServerFactory,
    StepFactory,
    TurnFactory,
)

MARK = "ALICE-PRIVATE-7731"
# Bob may not open it: the same answer as for a missing one.
NOT_FOUND = "404"
# Only staff (or, for a stdio server, someone allowed to start its process) may do it.
FORBIDDEN = "403"
# A page about no one's object (a list, a form, bob's own things): it must show none of alice's.
NO_LEAK = "no leak"
# A proxy route: the key in the URL authenticates, not the session; bob's login opens nothing.
KEY_AUTH = "401"
# The admin site: a non-staff user is sent to its login page.
ADMIN = "admin login"
# Public on purpose (signing in, the demo model's wire endpoints): no user's data behind them.
PUBLIC = "public"


@dataclass(frozen=True)
class Expect:
    method: str
    outcome: str
    url: str = ""  # for a regular-expression pattern: a concrete URL to try


EXPECTED: dict[str, Expect] = {
    # conversations
    "inspector-conversations": Expect("GET", NO_LEAK),
    "inspector-conversation-create": Expect("POST", NO_LEAK),
    "inspector-conversation-import": Expect("POST", NO_LEAK),
    "inspector-conversation": Expect("GET", NOT_FOUND),
    "inspector-turn-create": Expect("POST", NOT_FOUND),
    "inspector-conversation-rows": Expect("GET", NOT_FOUND),
    "inspector-conversation-export": Expect("GET", NOT_FOUND),
    "inspector-exchange-body": Expect("GET", NOT_FOUND),
    "inspector-step-prompt": Expect("GET", NOT_FOUND),
    "inspector-step-prompt-diff": Expect("GET", NOT_FOUND),
    "inspector-conversation-chain": Expect("GET", NOT_FOUND),
    "inspector-turns-earlier": Expect("GET", NOT_FOUND),
    "inspector-turn": Expect("GET", NOT_FOUND),
    "inspector-turn-steps": Expect("GET", NOT_FOUND),
    "inspector-turn-replay": Expect("POST", NOT_FOUND),
    "inspector-turn-cancel": Expect("POST", NOT_FOUND),
    "inspector-turn-walk": Expect("GET", NOT_FOUND),
    "inspector-step-app": Expect("POST", NOT_FOUND),
    "inspector-step-calls": Expect("GET", NOT_FOUND),
    # comparisons
    "inspector-comparisons": Expect("GET", NO_LEAK),
    "inspector-comparison-create": Expect("POST", NO_LEAK),
    "inspector-comparison-providers": Expect("POST", NO_LEAK),
    "inspector-comparison": Expect("GET", NOT_FOUND),
    "inspector-comparison-summary": Expect("GET", NOT_FOUND),
    # evals: alice's suites and runs
    "inspector-evals": Expect("GET", NO_LEAK),
    "inspector-eval-suite-create": Expect("POST", NO_LEAK),
    "inspector-eval-suite-upload": Expect("POST", NO_LEAK),
    "inspector-eval-suite": Expect("GET", NOT_FOUND),
    "inspector-eval-suite-update": Expect("POST", NOT_FOUND),
    "inspector-eval-suite-delete": Expect("POST", NOT_FOUND),
    "inspector-eval-run-create": Expect("POST", NOT_FOUND),
    "inspector-eval-run": Expect("GET", NOT_FOUND),
    "inspector-eval-run-progress": Expect("GET", NOT_FOUND),
    "inspector-eval-run-results": Expect("GET", NOT_FOUND),
    "inspector-eval-run-cancel": Expect("POST", NOT_FOUND),
    "inspector-eval-run-compare": Expect("GET", NOT_FOUND),
    # the workbench: what alice did
    "servers-operation": Expect("GET", NOT_FOUND),
    "servers-operation-state": Expect("GET", NOT_FOUND),
    "servers-operation-cancel": Expect("POST", NOT_FOUND),
    "servers-saved-call-create": Expect("POST", NOT_FOUND),
    "servers-question-answer": Expect("POST", NOT_FOUND),
    "servers-saved-call-run": Expect("POST", NOT_FOUND),
    "servers-app-open": Expect("POST", NOT_FOUND),
    "servers-app-view": Expect("GET", NOT_FOUND),
    "servers-app-call": Expect("POST", NOT_FOUND),
    "servers-app-traffic": Expect("POST", NOT_FOUND),
    "servers-saved-call-delete": Expect("POST", NOT_FOUND),
    # the workbench: the shared registry (a stdio server only staff may start)
    "servers-list": Expect("GET", NO_LEAK),
    "servers-create": Expect("POST", FORBIDDEN),
    "servers-config-import": Expect("POST", FORBIDDEN),
    "servers-config-export": Expect("GET", NO_LEAK),
    "servers-detail": Expect("GET", NO_LEAK),
    "servers-edit": Expect("POST", FORBIDDEN),
    "servers-hosts": Expect("GET", NO_LEAK),
    "servers-toggle": Expect("POST", FORBIDDEN),
    "servers-connect": Expect("POST", FORBIDDEN),
    "servers-ping": Expect("POST", FORBIDDEN),
    "servers-refresh": Expect("POST", FORBIDDEN),
    "servers-log-level": Expect("POST", FORBIDDEN),
    "servers-tool": Expect("POST", FORBIDDEN),
    "servers-resource-read": Expect("POST", FORBIDDEN),
    "servers-resource-subscribe": Expect("POST", FORBIDDEN),
    "servers-prompt-get": Expect("POST", FORBIDDEN),
    "servers-complete": Expect("POST", FORBIDDEN),
    "servers-transcript": Expect("GET", NO_LEAK),
    "servers-transcript-export": Expect("GET", NO_LEAK),
    # OAuth: bob's own sign-in (alice's pending one is matched to her session) and his own debugger
    "servers-oauth-callback": Expect("GET", NO_LEAK),
    "servers-oauth": Expect("GET", NO_LEAK),
    # bob's own pre-registered client, on his own grant (for a stdio server: 404)
    "servers-oauth-client": Expect("POST", NO_LEAK),
    # sharing a grant with the team: bob's own grant on that server, never alice's
    "servers-oauth-share": Expect("POST", NO_LEAK),
    # accounts and the API
    "login": Expect("GET", PUBLIC),
    "inspector-favicon": Expect("GET", PUBLIC),
    "logout": Expect("POST", PUBLIC),
    "inspector-token": Expect("GET", NO_LEAK),
    "inspector-token-revoke": Expect("POST", NO_LEAK),
    # proxy keys: bob's own; alice's key answers 404 (its prefix is in ``values``)
    "inspector-proxy-keys": Expect("GET", NO_LEAK),
    "inspector-proxy-key-create": Expect("POST", NO_LEAK),
    "inspector-proxy-key-revoke": Expect("POST", NOT_FOUND),
    "inspector-preferences": Expect("POST", NO_LEAK),
    # the shared model profiles and what was learned about them (no user's data)
    "inspector-profiles": Expect("GET", NO_LEAK),
    "inspector-profile-reset": Expect("POST", NO_LEAK),
    # setting a shared profile's prices changes every user's costs: staff only
    "inspector-profile-price": Expect("POST", NOT_FOUND),
    "api-openapi": Expect("GET", NO_LEAK),
    "api-token": Expect("POST", PUBLIC),
    "api-conversations": Expect("GET", NO_LEAK),
    "api-conversation": Expect("GET", NOT_FOUND),
    "api-turn-cancel": Expect("POST", NOT_FOUND),
    "api-turn-steps": Expect("GET", NOT_FOUND),
    "api-eval-suites": Expect("GET", NO_LEAK),
    "api-eval-suite": Expect("GET", NOT_FOUND),
    "api-eval-runs": Expect("GET", NO_LEAK),
    "api-eval-run": Expect("GET", NOT_FOUND),
    "api-eval-run-cancel": Expect("POST", NOT_FOUND),
    # the demo model: an OpenAI/Anthropic/Gemini-shaped endpoint, no user data behind it
    "demo-model-chat-completions": Expect("POST", PUBLIC),
    "demo-model-responses": Expect("POST", PUBLIC),
    "demo-model-messages": Expect("POST", PUBLIC),
    "demo-model-models": Expect("GET", PUBLIC),
    "demo-model-gemini-generate": Expect("POST", PUBLIC, "/demo-model/v1beta/models/demo:generateContent"),
    "demo-model-gemini-stream": Expect(
        "POST", PUBLIC, "/demo-model/v1beta/models/demo:streamGenerateContent"
    ),
    "demo-model-gemini-generate-v1": Expect("POST", PUBLIC, "/demo-model/v1/models/demo:generateContent"),
    "demo-model-gemini-stream-v1": Expect("POST", PUBLIC, "/demo-model/v1/models/demo:streamGenerateContent"),
    "proxy-openai-chat": Expect("POST", KEY_AUTH),
    "proxy-openai-responses": Expect("POST", KEY_AUTH),
    "proxy-anthropic-messages": Expect("POST", KEY_AUTH),
    "proxy-gemini": Expect(
        "POST", KEY_AUTH, "/proxy/tci_not-alices-key/gemini/v1beta/models/m:generateContent"
    ),
    # the MCP proxies (servers/proxy/)
    "proxy-mcp": Expect("POST", KEY_AUTH, "/proxy/tci_not-alices-key/mcp/demo"),
    "proxy-sse": Expect("GET", KEY_AUTH, "/proxy/tci_not-alices-key/sse/demo"),
    "proxy-sse-messages": Expect("POST", KEY_AUTH, "/proxy/tci_not-alices-key/sse/demo/messages?to=/x"),
}


# The admin site's own sign-in and sign-out pages.
ADMIN_PUBLIC = {"admin:login", "admin:logout"}


@dataclass(frozen=True)
class Route:
    key: str  # the pattern's name, or for an unnamed one its route
    route: str


def _walk(patterns: list[Any], prefix: str = "", namespace: str = "") -> Iterator[Route]:
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = ":".join(part for part in (namespace, pattern.namespace or "") if part)
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern), inner)
        elif isinstance(pattern, URLPattern):
            route = prefix + str(pattern.pattern)
            name = f"{namespace}:{pattern.name}" if namespace and pattern.name else pattern.name
            yield Route(name or route, route)


def routes() -> list[Route]:
    return list(_walk(get_resolver().url_patterns))


def _is_admin(route: Route) -> bool:
    return route.route.startswith("admin/")


@dataclass
class World:
    alice: User
    bob: User
    conversation: Conversation
    turn: Turn
    server: McpServer
    operation: Operation
    question: PendingInput
    saved: SavedCall
    comparison_id: str
    values: dict[str, Any]
    suite_id: str = ""
    run_id: str = ""


@pytest.fixture
def world(db: None, settings: Any) -> World:
    """Alice's conversation, comparison, workbench call with a pending question and saved call, all
    marked; a stdio server only staff may start; bob's own tools/list of it (so his server page
    has something to lint), and a conversation of alice's that puts it beside another server
    whose tool has the same name (the lint finding that used to name alice's conversation)."""
    settings.WORKBENCH_RUNNER = "inline"
    alice = User.objects.create_user("alice", password="pw")
    bob = User.objects.create_user("bob", password="pw")
    server = McpServerFactory(name="files")
    notes = McpServerFactory(name="notes")
    conversation = ConversationFactory(owner=alice, title=f"{MARK} plans", servers=[server, notes])
    turn = TurnFactory(conversation=conversation, question=f"{MARK} question", answer=f"{MARK} answer")
    decide = StepFactory(turn=turn, prompt=f"{MARK} prompt")
    second = StepFactory(turn=turn, prompt=f"{MARK} prompt again")
    exchange = ExchangeFactory(step=second, response_body=f'{{"text": "{MARK}"}}')
    comparison = ComparisonFactory(owner=alice, question=f"{MARK} compare")
    ConversationFactory(owner=alice, comparison=comparison, title=f"{MARK} run")
    operation = Operation.objects.create(
        server=server,
        user=alice,
        kind=Operation.Kind.TOOLS_CALL,
        target="read",
        arguments={"path": MARK},
        status=Operation.Status.RUNNING,
        result={"content": [{"type": "text", "text": MARK}]},
    )
    wire = ExchangeFactory(
        mcp=True, step=None, turn=None, server=server, request_body=f'{{"path": "{MARK}"}}'
    )
    operation.exchanges.add(wire)
    ExchangeFactory(mcp=True, step=None, turn=None, server=server, label="stderr", response_body=MARK)
    question = PendingInput.objects.create(operation=operation, params={"message": f"{MARK} may I?"})
    saved = SavedCall.objects.create(
        server=server, owner=alice, name=f"{MARK} call", tool="read", baseline=operation
    )
    read_tool = [
        {
            "name": "read",
            "description": "Read one file from the workspace.",
            "inputSchema": {"type": "object"},
        }
    ]
    for owner, listed in ((bob, server), (alice, notes)):
        Operation.objects.create(
            server=listed,
            user=owner,
            kind=Operation.Kind.TOOLS_LIST,
            status=Operation.Status.OK,
            result=read_tool,
        )
    proxy_key = create_key(alice, name=f"{MARK} key", openai_upstream="https://alice-private.example/v1")[0]
    values = {
        "prefix": proxy_key.prefix,
        "exchange_id": exchange.pk,
        "step_id": second.pk,
        "turn_id": turn.pk,
        "question_id": question.pk,
        "name": server.name,
        "what": "tools",
        "tool": "read",
        "object_id": conversation.pk,
        "content_type_id": 1,
        "id": 1,
        "app_label": "servers",
        "key": "tci_not-alices-key",
    }
    suite = Suite.objects.create(
        owner=alice,
        name=f"{MARK} suite",
        definition={"name": f"{MARK} suite"},
        source=f'{{"name": "{MARK}"}}',
    )
    run = EvalRun.objects.create(
        suite=suite, owner=alice, definition=suite.definition, status=EvalRun.Status.RUNNING, total=1
    )
    del decide
    return World(
        alice,
        bob,
        conversation,
        turn,
        server,
        operation,
        question,
        saved,
        str(comparison.public_id),
        values,
        str(suite.public_id),
        str(run.public_id),
    )


def _url(route: Route, world: World) -> str:
    expect = EXPECTED.get(route.key)
    if expect is not None and expect.url:
        return expect.url
    if route.route.startswith(("evals/runs/", "api/evals/runs/")):
        public_id = world.run_id
    elif route.route.startswith(("evals/", "api/evals/")):
        public_id = world.suite_id
    elif route.route.startswith("compare/"):
        public_id = world.comparison_id
    elif route.route.startswith("servers/saved/"):
        public_id = str(world.saved.public_id)
    elif route.route.startswith("servers/op/"):
        public_id = str(world.operation.public_id)
    else:
        public_id = str(world.conversation.public_id)
    values = world.values | {"public_id": public_id}
    if route.route.startswith("admin/(?P<url>"):
        return "/admin/servers/anything/"
    filled = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(values[m.group(1)]), route.route)
    return "/" + filled.removeprefix("^").removesuffix("$")


def test_every_url_pattern_is_in_the_table() -> None:
    missing = [route.key for route in routes() if not _is_admin(route) and route.key not in EXPECTED]

    assert missing == [], (
        f"decide what a second user gets at these new URLs and add them to EXPECTED: {missing}"
    )


def _request(client: Client, method: str, url: str) -> Any:
    if method == "GET":
        return client.get(url)
    return client.post(
        url, {"action": "accept", "content": "{}", "arguments": "{}", "uri": "file:///x", "prompt": "p"}
    )


def test_bob_gets_nothing_of_alices_at_any_url(world: World) -> None:
    problems: list[str] = []
    for route in routes():
        if _is_admin(route):
            continue
        client = Client()  # a fresh session each time: one of the routes signs out
        client.force_login(world.bob)
        expect = EXPECTED[route.key]
        url = _url(route, world)
        response = _request(client, expect.method, url)
        body = response.content.decode(errors="replace") if not getattr(response, "streaming", False) else ""
        if MARK in body:
            problems.append(f"{route.key} {url}: shows alice's content")
        if expect.outcome == NOT_FOUND and response.status_code != 404:
            problems.append(f"{route.key} {url}: {response.status_code}, not 404")
        elif expect.outcome == KEY_AUTH and response.status_code != 401:
            problems.append(f"{route.key} {url}: {response.status_code}, not 401")
        elif expect.outcome == FORBIDDEN and response.status_code != 403:
            problems.append(f"{route.key} {url}: {response.status_code}, not 403")
        elif expect.outcome in {NO_LEAK, PUBLIC} and response.status_code >= 500:
            problems.append(f"{route.key} {url}: {response.status_code}")

    assert problems == []
    # Nothing of alice's was changed or run on her behalf, and bob read nothing of hers.
    world.question.refresh_from_db()
    world.operation.refresh_from_db()
    assert world.question.status == PendingInput.Status.WAITING
    assert not world.operation.cancel_requested
    assert SavedCall.objects.filter(pk=world.saved.pk).exists()
    assert not Operation.objects.filter(user=world.bob).exclude(kind=Operation.Kind.TOOLS_LIST).exists()
    assert world.conversation.turns.count() == 1
    assert not AuditEvent.objects.filter(
        actor=world.bob, conversation_public_id=world.conversation.public_id
    ).exists()
    assert not Exchange.objects.filter(turn__conversation__owner=world.bob).exists()
    assert Suite.objects.filter(public_id=world.suite_id).exists()
    assert EvalRun.objects.get(public_id=world.run_id).status == EvalRun.Status.RUNNING
    assert not EvalRun.objects.filter(owner=world.bob).exists()


def test_every_admin_url_sends_bob_to_the_admin_login(world: World) -> None:
    client = Client()
    client.force_login(world.bob)
    admin_routes = [route for route in routes() if _is_admin(route)]

    answers = {route.key: client.get(_url(route, world)) for route in admin_routes}

    assert len(admin_routes) > 20
    assert MARK not in "".join(response.content.decode() for response in answers.values())
    assert {
        key: (response.status_code, response.get("Location", "").split("?")[0])
        for key, response in answers.items()
        if key not in ADMIN_PUBLIC
        and (response.status_code != 302 or not response["Location"].startswith("/admin/login/"))
    } == {}


def test_the_staff_only_answers_say_why(world: World) -> None:
    client = Client()
    client.force_login(world.bob)

    refused = client.post(f"/servers/{world.server.name}/connect")

    assert refused.status_code == 403
    assert "only staff may start it" in refused.content.decode()


def test_the_one_websocket_route_is_the_one_walked_below() -> None:
    assert [str(pattern.pattern) for pattern in websocket_urlpatterns] == [
        "ws/conversations/<uuid:public_id>/"
    ]


@pytest.mark.django_db(transaction=True)
async def test_bobs_websocket_to_alices_conversation_is_closed_as_not_found(
    async_db_connections: None,
) -> None:
    alice = await User.objects.acreate(username="alice")
    bob = await User.objects.acreate(username="bob")
    conversation = await sync_to_async(ConversationFactory)(owner=alice)
    communicator = WebsocketCommunicator(
        URLRouter(websocket_urlpatterns), f"/ws/conversations/{conversation.public_id}/"
    )
    communicator.scope["user"] = bob

    connected, code = await communicator.connect()

    assert not connected and code == 4404
    assert not await AuditEvent.objects.filter(actor=bob).aexists()
