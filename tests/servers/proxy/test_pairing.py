"""Bytes into records: requests paired with responses by id (of its type), a server's own
request paired with the host's answer, notifications and stray lines kept, unanswered requests
closed as such."""

from __future__ import annotations

from servers.proxy.pairing import HOST, SERVER, STDERR, Dropped, Pairer


def _pairer() -> Pairer:
    return Pairer(line_limit=10_000, body_limit=10_000)


def test_requests_pair_with_responses_by_id_keeping_its_type() -> None:
    pairer = _pairer()
    pairer.feed(
        HOST, b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n{"jsonrpc":"2.0","id":"1","method":"ping"}\n'
    )
    pairer.feed(
        SERVER, b'{"jsonrpc":"2.0","id":"1","result":{}}\n{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}\n'
    )
    first, second = pairer.take()
    assert (first.label, first.jsonrpc_id, first.response_body) == (
        "ping",
        "1",
        '{"jsonrpc":"2.0","id":"1","result":{}}',
    )
    assert second.label == "tools/list" and '"tools"' in second.response_body and second.status == "ok"
    assert first.direction == second.direction == "client"


def test_a_servers_own_request_pairs_with_the_hosts_answer() -> None:
    pairer = _pairer()
    pairer.feed(SERVER, b'{"jsonrpc":"2.0","id":0,"method":"sampling/createMessage","params":{}}\n')
    pairer.feed(HOST, b'{"jsonrpc":"2.0","id":0,"error":{"code":-1,"message":"declined"}}\n')
    [record] = pairer.take()
    assert record.label == "sampling/createMessage" and record.direction == "server"
    assert record.status == "error" and record.error == "declined"


def test_notifications_stray_lines_and_stderr_are_kept_and_open_requests_closed() -> None:
    pairer = _pairer()
    pairer.feed(
        HOST,
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n{"jsonrpc":"2.0","id":9,"method":"x"}\n',
    )
    pairer.feed(SERVER, b"Listening on stdio\n\n")
    pairer.feed(STDERR, b"warning: \xff\n")
    pairer.feed(SERVER, b'{"jsonrpc":"2.0","id":42,"result":{}}\n{"half":')
    records = pairer.close()
    assert [record.label for record in records] == [
        "notifications/initialized",
        "stdout (not JSON)",
        "stderr",
        "response to unknown id",
        "stdout (not JSON)",
        "x",
    ]
    assert records[-2].error.startswith("a line cut short") and records[-1].status == "no response"
    assert records[2].response_body.encode("utf-8", "surrogateescape") == b"warning: \xff\n"


def test_a_chunk_not_kept_still_ends_the_lines_it_ended() -> None:
    """A chunk that passed while the recorder was behind is only described, not kept: the lines
    it ended still end there, so the messages after it are read as themselves, not as the tail
    of a line that never ends."""
    pairer = _pairer()
    pairer.feed(HOST, b'{"jsonrpc":"2.0","method":"notifications/')
    # Passed, not kept: the end of that line, two whole lines, and the start of a fourth.
    pairer.lost(HOST, Dropped.of(b'initialized"}\n{"whole":1}\n{"whole":2}\n{"jsonrpc":"2.0",'))
    pairer.feed(HOST, b'"method":"tail"}\n{"jsonrpc":"2.0","method":"notifications/after"}\n')
    records = pairer.close()

    assert [record.label for record in records] == [
        "stdin (not JSON)",
        "stdin (not JSON)",
        "stdin (not JSON)",
        "notifications/after",
    ]
    first, whole, tail, after = records
    assert first.response_body == '{"jsonrpc":"2.0","method":"notifications/'
    assert "13 bytes of it passed while the recorder was behind" in first.error
    assert whole.response_body == ""
    assert "2 lines (23 bytes) passed while the recorder was behind" in whole.error
    assert tail.response_body == '"method":"tail"}'
    assert "17 bytes of it passed while the recorder was behind" in tail.error
    assert after.error == ""


def test_a_chunk_not_kept_without_a_newline_widens_the_lines_gap() -> None:
    pairer = _pairer()
    pairer.feed(SERVER, b'{"a":')
    pairer.lost(SERVER, Dropped.of(b"x" * 50))
    pairer.lost(STDERR, Dropped.of(b"oops\n"))
    pairer.feed(SERVER, b"1}\n")
    stderr, line = sorted(pairer.close(), key=lambda record: record.label)

    assert (line.label, line.response_body) == ("stdout (not JSON)", '{"a":1}')
    assert "50 bytes of it passed while the recorder was behind" in line.error
    assert "5 bytes of stderr passed while the recorder was behind" in stderr.error
