"""An exchange's headers as stored: each value redacted (names kept), each name and value in a
form every database stores.

``exchange_rows`` redacts a header mapping as one JSON value and looks for characters no database
stores in one pass over it; these tests hold it to the plain rule, each header on its own, over
names and values that hold secrets, near-misses, quotes, backslashes, NUL and lone surrogates."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from conversations.escaping import storable_text
from conversations.loop.wire import WireExchange
from conversations.record.exchanges import exchange_rows
from conversations.redaction import Redactor, redactor

_SECRET = "a-run-secret-value"
_PIECES = [
    "Bearer abc.def-ghi_jkl", "sk-proj-Abcdefghijklmnopqrstuvwxyz0123", "AKIAABCDEFGHIJKLMNOP",
    "ada@example.com", _SECRET, 'quote"d', "back\\slash", "sk", "Bear", "@", "\x00", "\ud800", "\udc80",
    "ü", "😀", "\n", " ", "application/json", "••••••", "content-type",
]  # fmt: skip
_texts = st.lists(st.sampled_from(_PIECES), max_size=4).map("".join)
_headers = st.dictionaries(_texts, _texts, max_size=6)
_REDACTORS = {
    "built-in and a run secret": redactor(secrets=[_SECRET]),
    # A staff rule has no screen: every value is redacted on its own.
    "with a staff rule": redactor(rules=[("ticket", r"^TICKET-\d+$")], secrets=[_SECRET]),
}


def _one_by_one(values: dict[str, str], redact: Redactor) -> dict[str, str]:
    """The rule: each name made storable, each value redacted and then made storable."""
    return {storable_text(name)[0]: storable_text(redact.text(value))[0] for name, value in values.items()}


def _stored(request: dict[str, str], response: dict[str, str], redact: Redactor) -> tuple[dict, dict]:
    record = WireExchange(
        channel="llm",
        label="POST /v1/chat/completions",
        started_at=datetime.now(UTC),
        request_headers=request,
        response_headers=response,
    )
    (row,) = exchange_rows([record], turn_id=None, step_id=None, redact=redact)
    return row.request_headers, row.response_headers


@hypothesis_settings(max_examples=300, deadline=None)
@given(request=_headers, response=_headers, which=st.sampled_from(sorted(_REDACTORS)))
def test_headers_are_stored_as_each_header_redacted_and_made_storable_on_its_own(
    request: dict[str, str], response: dict[str, str], which: str
) -> None:
    redact = _REDACTORS[which]

    assert _stored(request, response, redact) == (_one_by_one(request, redact), _one_by_one(response, redact))


def test_a_header_mapping_is_stored_as_a_new_mapping_also_when_nothing_in_it_changes() -> None:
    plain = {"content-type": "application/json", "authorization": "••••••"}
    request, response = _stored(plain, {}, redactor())

    assert request == plain and request is not plain
    assert response == {}


def test_secrets_and_characters_no_database_stores_are_handled_in_the_same_mapping() -> None:
    request, _ = _stored(
        {"authorization": "Bearer abc.def-ghi_jkl", "x-trace\x00": "ok", "x-key": f"k={_SECRET}\ud800"},
        {},
        redactor(secrets=[_SECRET]),
    )

    assert request == {
        "authorization": "[REDACTED:bearer_token]",
        storable_text("x-trace\x00")[0]: "ok",
        "x-key": storable_text("k=[REDACTED:secret]\ud800")[0],
    }
    assert '"x-trace\\u0000"' in request
