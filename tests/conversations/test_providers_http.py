"""The shared HTTP seam: reading recorded event streams, error messages, synthesized ids."""

from __future__ import annotations

from conversations.providers.http import SseEvent, error_detail, parse_sse, synthesized_call_id


def test_events_are_split_on_blank_lines_with_their_names() -> None:
    text = 'event: message_start\ndata: {"a":1}\n\nevent: ping\ndata: {}\n\ndata: [DONE]\n\n'

    assert parse_sse(text) == [
        SseEvent("message_start", '{"a":1}'),
        SseEvent("ping", "{}"),
        SseEvent("message", "[DONE]"),
    ]


def test_crlf_comments_multi_line_data_and_a_missing_final_blank_line_are_read() -> None:
    text = ': keep-alive\r\ndata: {"a":\r\ndata: 1}\r\n\r\ndata:no-space'

    assert parse_sse(text) == [SseEvent("message", '{"a":\n1}'), SseEvent("message", "no-space")]


def test_unicode_line_separators_inside_json_do_not_split_an_event() -> None:
    text = 'data: {"text":"one\u2028two\u0085three"}\n\n'

    assert parse_sse(text) == [SseEvent("message", '{"text":"one\u2028two\u0085three"}')]


def test_every_providers_error_envelope_gives_its_message() -> None:
    assert error_detail('{"error":{"message":"bad tool","type":"invalid_request_error"}}', "-") == "bad tool"
    assert (
        error_detail('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', "-")
        == "Overloaded"
    )
    assert error_detail(
        '{"error":{"code":400,"message":"API key not valid.","status":"INVALID_ARGUMENT"}}', "-"
    ) == ("API key not valid.")
    assert error_detail('{"error":"model not found"}', "-") == "model not found"
    assert error_detail("Bad Gateway", "HTTP 502") == "HTTP 502"


def test_synthesized_ids_are_stable_per_seed_and_position() -> None:
    assert synthesized_call_id("body", 0) == synthesized_call_id("body", 0)
    assert synthesized_call_id("body", 0) != synthesized_call_id("body", 1)
    assert synthesized_call_id("body", 0) != synthesized_call_id("other", 0)
    assert synthesized_call_id("body", 0).startswith("synth_")
