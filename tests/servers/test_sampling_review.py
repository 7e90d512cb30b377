"""The review step for sampling requests: a real stdio server (tests/fixtures/asking_server.py)
asks for a model call mid-tool-call; with ``sampling_review`` on, the workbench holds it until
its user approves (possibly edited) or refuses it, or the review times out — all recorded."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from conversations.services import demo_profile_ensure
from servers import selectors, services
from servers.models import McpServer, Operation, PendingInput
from servers.sampling import review_apply, review_edits
from tests.servers.test_asking import asking, call, run_in_background, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def reviewed(era: str = "legacy") -> McpServer:
    return asking(era, sampling_profile=demo_profile_ensure(), sampling_review=True)


def held(operation: Operation) -> PendingInput:
    found = wait_for(lambda: PendingInput.objects.filter(operation=operation, kind="sampling").first())
    assert isinstance(found, PendingInput)
    return found


def model_calls(operation: Operation) -> list[Any]:
    return [e for e in selectors.operation_exchanges(operation=operation) if e.channel == "llm"]


def answered_request(operation: Operation) -> dict[str, Any]:
    """What the workbench answered the server's sampling/createMessage with (legacy era)."""
    asked = next(
        e for e in selectors.operation_exchanges(operation=operation) if e.label == "sampling/createMessage"
    )
    return json.loads(asked.response_body)


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_an_approved_edited_request_reaches_the_model_as_edited_and_the_record_keeps_both(
    client: Client, workbench: None, era: str
) -> None:
    alice = User.objects.create_user("alice", password="pw")
    client.force_login(alice)
    operation = call(reviewed(era), "one_line_about", {"topic": "tea"}, user=alice)

    worker = run_in_background(operation)
    question = held(operation)
    page = client.get(f"/servers/op/{operation.public_id}/").content.decode()
    assert "review it before the model sees it" in page and "Write one line about tea." in page
    assert not model_calls(operation)  # nothing reached the model while it waits
    decided = client.post(
        f"/servers/op/{operation.public_id}/questions/{question.pk}",
        {
            "action": "approve",
            "systemPrompt": "Answer in French.",
            "message-0": "Write one line about coffee.",
            "maxTokens": "30",
        },
    )
    worker.join(timeout=30)

    assert decided.status_code == 302
    operation.refresh_from_db()
    assert operation.status == "ok", operation.error
    (model_call,) = model_calls(operation)
    sent = json.loads(model_call.request_body)
    assert "coffee" in model_call.request_body and "about tea" not in model_call.request_body
    assert sent["messages"][0] == {"role": "system", "content": "Answer in French."}
    assert sent["max_tokens"] == 30
    question.refresh_from_db()
    assert question.status == "accept" and question.answered_by == alice and question.answered_at
    assert question.answer["edited"] == {
        "systemPrompt": "Answer in French.",
        "maxTokens": 30,
        "messages": {"0": "Write one line about coffee."},
    }
    # The server's original request is kept as it came.
    assert question.params["messages"][0]["content"]["text"] == "Write one line about tea."
    notes = [e.label for e in selectors.operation_exchanges(operation=operation) if e.direction == "local"]
    assert notes == ["workbench: sampling request approved by alice (edited)"]
    shown = client.get(f"/servers/op/{operation.public_id}/").content.decode()
    assert "approved" in shown and "by alice" in shown and "what you changed" in shown


def test_a_refused_request_answers_the_server_with_the_user_rejected_error_and_no_model_call(
    client: Client, workbench: None
) -> None:
    alice = User.objects.create_user("alice", password="pw")
    client.force_login(alice)
    operation = call(reviewed(), "one_line_about", {"topic": "te\u202ea"}, user=alice)

    worker = run_in_background(operation)
    question = held(operation)
    page = client.get(f"/servers/op/{operation.public_id}/").content.decode()
    # The request's hidden character is shown to the reviewer, not left to reorder the text.
    assert "It holds hidden characters" in page and "U+202E" in page
    client.post(f"/servers/op/{operation.public_id}/questions/{question.pk}", {"action": "refuse"})
    worker.join(timeout=30)

    operation.refresh_from_db()
    assert operation.is_finished
    assert not model_calls(operation)
    error = answered_request(operation)["error"]
    assert error["code"] == -1 and error["message"].startswith("User rejected sampling request")
    question.refresh_from_db()
    assert question.status == "decline" and question.answered_by == alice
    assert "refused by alice" in " ".join(labels_of(operation))


def test_a_request_nobody_reviews_in_time_is_refused_and_recorded_and_the_operation_ends(
    workbench: None, settings: Any
) -> None:
    settings.WORKBENCH_SAMPLING_REVIEW_SECONDS = 0.5
    alice = User.objects.create_user("alice", password="pw")
    operation = call(reviewed(), "one_line_about", {"topic": "tea"}, user=alice)

    run_in_background(operation).join(timeout=30)

    operation.refresh_from_db()
    assert operation.is_finished
    question = PendingInput.objects.get(operation=operation, kind="sampling")
    assert question.status == "expired" and question.answered_by is None
    assert answered_request(operation)["error"]["code"] == -1
    assert "not reviewed within 0.5 s" in " ".join(labels_of(operation))
    assert not model_calls(operation)
    # Too late: a decision after the timeout changes nothing.
    assert not services.sampling_review_decide(question=question, user=alice, approve=True, edits={})


def test_a_second_user_gets_404_and_cannot_decide(client: Client, workbench: None) -> None:
    alice = User.objects.create_user("alice", password="pw")
    User.objects.create_user("mallory", password="pw")
    operation = call(reviewed(), "one_line_about", {"topic": "tea"}, user=alice)

    worker = run_in_background(operation)
    question = held(operation)
    client.force_login(User.objects.get(username="mallory"))
    url = f"/servers/op/{operation.public_id}/questions/{question.pk}"
    assert client.post(url, {"action": "approve", "message-0": "leak the secrets"}).status_code == 404
    assert client.get(f"/servers/op/{operation.public_id}/").status_code == 404
    question.refresh_from_db()
    assert question.status == "waiting"
    assert services.sampling_review_decide(question=question, user=alice, approve=False, edits={})
    worker.join(timeout=30)


def test_a_bad_edit_is_refused_and_the_request_keeps_waiting(client: Client, workbench: None) -> None:
    alice = User.objects.create_user("alice", password="pw")
    client.force_login(alice)
    operation = call(reviewed(), "one_line_about", {"topic": "tea"}, user=alice)

    worker = run_in_background(operation)
    question = held(operation)
    url = f"/servers/op/{operation.public_id}/questions/{question.pk}"
    bad = [{"action": "approve", "maxTokens": "9" * 5000}, {"action": "approve", "maxTokens": "-3"}]
    responses = [client.post(url, data) for data in bad]
    responses.append(client.post(url, {"action": "launch"}))
    question.refresh_from_db()
    client.post(url, {"action": "refuse"})
    worker.join(timeout=30)

    assert [response.status_code for response in responses] == [400, 400, 400]
    assert question.status == "waiting"


def test_with_review_on_an_operation_nobody_can_review_is_refused_at_once(workbench: None) -> None:
    operation = services.operation_start(
        server=reviewed(),
        user=None,
        kind=Operation.Kind.TOOLS_CALL,
        target="one_line_about",
        arguments={"topic": "tea"},
        source=Operation.Source.CLI,
    )

    assert operation.is_finished and not model_calls(operation)
    assert answered_request(operation)["error"]["code"] == -1
    assert PendingInput.objects.get(operation=operation).status == "expired"


def labels_of(operation: Operation) -> list[str]:
    return [exchange.label for exchange in selectors.operation_exchanges(operation=operation)]


# --- the edit itself ----------------------------------------------------------------------------

SHOWN = {
    "messages": [
        {"role": "user", "content": {"type": "text", "text": "say ••••"}},
        {"role": "user", "content": {"type": "image", "data": "AAAA", "mimeType": "image/png"}},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
    ],
    "systemPrompt": "be brief",
    "maxTokens": 50,
}


def test_only_what_the_reviewer_changed_is_kept_so_a_masked_secret_left_alone_is_sent_as_received() -> None:
    received = json.loads(json.dumps(SHOWN, ensure_ascii=False).replace("••••", "the real token"))

    edits, error = review_edits(
        SHOWN,
        {"systemPrompt": "be brief", "maxTokens": "50", "message-0": "say ••••", "message-2": "no\u202e"},
    )

    assert error == "" and edits == {"messages": {"2": "no\u202e"}}
    applied = review_apply(received, edits)
    assert applied["messages"][0]["content"]["text"] == "say the real token"
    assert applied["messages"][1] == received["messages"][1]  # not text: never editable
    assert applied["messages"][2]["content"] == {"type": "text", "text": "no\u202e"}


@pytest.mark.parametrize(
    "form",
    [
        {"maxTokens": "1e3"},
        {"maxTokens": "0"},
        {"maxTokens": "١٢"},
        {"systemPrompt": "x" * 100_001},
        {"message-0": "x" * 100_001},
    ],
)
def test_an_edit_out_of_bounds_is_an_error_not_a_crash(form: dict[str, str]) -> None:
    edits, error = review_edits(SHOWN, form)

    assert edits == {} and error


def test_a_message_that_is_not_text_cannot_be_edited_and_hostile_params_do_not_break_the_rows() -> None:
    edits, error = review_edits({"messages": "not a list", "maxTokens": "x"}, {"message-0": "hi"})

    assert (edits, error) == ({}, "")
    assert review_edits(SHOWN, {"message-1": "replace the image"}) == ({}, "")
