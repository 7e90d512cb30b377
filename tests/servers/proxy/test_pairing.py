"""Bytes into records: requests paired with responses by id (of its type), a server's own
request paired with the host's answer, notifications and stray lines kept, unanswered requests
closed as such."""

from __future__ import annotations

from servers.proxy.pairing import HOST, SERVER, STDERR, Pairer


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
