"""The stdio proxy's spool: private files, imported whole once the database is back, and the
database going away mid-session (a private PostgreSQL, stopped and started again) neither stops
the host's traffic nor loses or doubles a record."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from django.db import OperationalError

from conversations.loop.wire import WireExchange
from servers.proxy.spool import Spool
from tests.servers.proxy.private_postgres import private_postgres
from tests.servers.proxy.support import REPO, proxy_command
from tests.support import wait_until


def _record(label: str, body: str = "{}") -> WireExchange:
    return WireExchange(channel="mcp", label=label, started_at=datetime.now(UTC), request_body=body)


def test_a_spool_file_is_private_and_holds_one_json_object_per_record(tmp_path: Path) -> None:
    spool = Spool(tmp_path, "tci_secret-key-value")
    spool.write("s", "time", [_record("ping"), _record("tools/call", "sk-ant-api03-" + "a" * 40)])
    assert stat.S_IMODE(spool.folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(spool.path.stat().st_mode) == 0o600
    assert "tci_secret-key-value" not in spool.path.name
    lines = [json.loads(line) for line in spool.path.read_text().splitlines()]
    assert [line["label"] for line in lines] == ["ping", "tools/call"]
    assert lines[0]["session"] == "s" and lines[0]["server_name"] == "time"


def test_a_failed_import_keeps_the_file_and_a_later_one_imports_each_record_once(tmp_path: Path) -> None:
    spool = Spool(tmp_path, "tci_k")
    spool.write("a", "time", [_record("one")])
    spool.write("b", "time", [_record("two"), _record("three")])
    stored: list[str] = []
    calls = 0

    def flaky(session: str | None, server_name: str, records: Sequence[WireExchange]) -> object:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OperationalError("the database went away")
        stored.extend(record.label for record in records)
        return None

    with pytest.raises(OperationalError):
        spool.import_all(flaky)
    assert stored == ["one"] and spool.pending()
    assert spool.import_all(flaky) == 2
    assert stored == ["one", "two", "three"] and not spool.pending()
    # A later proxy of the same key finds what an earlier one left.
    Spool(tmp_path, "tci_k").write(None, "time", [_record("four")])
    assert Spool(tmp_path, "tci_k").import_all(flaky) == 1 and stored[-1] == "four"


def _run(command: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _message(payload: dict[str, object]) -> bytes:
    return json.dumps(payload).encode() + b"\n"


def _call(number: int) -> bytes:
    params = {"name": "get_current_time", "arguments": {"timezone": "UTC"}}
    return _message({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params})


def _tools_calls(url: str) -> list[str]:
    with psycopg.connect(url) as db:
        rows = db.execute(
            "SELECT jsonrpc_id FROM conversations_exchange WHERE label = 'tools/call'"
        ).fetchall()
    return sorted(str(row[0]) for row in rows)


@pytest.mark.postgres
def test_the_database_going_away_mid_session_breaks_nothing_and_the_spool_is_imported(tmp_path: Path) -> None:
    with private_postgres() as database:
        env = {
            **os.environ,
            "DATABASE_URL": database.url,
            "VAR_DIR": str(tmp_path / "var"),
            "PYTHONPATH": str(REPO),
        }
        env.pop("REDIS_URL", None)
        manage = [sys.executable, str(REPO / "manage.py")]
        _run([*manage, "migrate", "--noinput"], env)
        _run(
            [
                *manage,
                "shell",
                "-c",
                "from django.contrib.auth import get_user_model as m; m().objects.create_user('alice')",
            ],
            env,
        )
        printed = _run([*manage, "proxy", "key", "create", "--user", "alice", "--name", "laptop"], env)
        raw = printed.strip().splitlines()[-1]
        assert raw.startswith("tci_") and " " not in raw

        command = proxy_command(
            raw, "time", sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"
        )
        proxy = subprocess.Popen(
            command, env=env, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proxy.stdin is not None and proxy.stdout is not None and proxy.stderr is not None
        notes = bytearray()
        threading.Thread(target=lambda: notes.extend(proxy.stderr.read()), daemon=True).start()  # type: ignore[union-attr]

        def ask(payload: bytes) -> dict[str, object]:
            proxy.stdin.write(payload)  # type: ignore[union-attr]
            proxy.stdin.flush()  # type: ignore[union-attr]
            answer: dict[str, object] = json.loads(proxy.stdout.readline())  # type: ignore[union-attr]
            return answer

        init = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "host", "version": "1"},
        }
        assert "result" in ask(_message({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}))
        proxy.stdin.write(_message({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        assert "result" in ask(_call(1))
        assert wait_until(lambda: _tools_calls(database.url) == ["1"], 60)

        database.stop()
        for number in (2, 3, 4):
            assert "result" in ask(_call(number))  # the host notices nothing
        spool = tmp_path / "var" / "proxy-spool"
        assert wait_until(lambda: any(spool.glob("*.jsonl")), 60), notes.decode(errors="replace")
        for path in spool.glob("*.jsonl"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            assert raw not in path.read_text()

        database.start()
        assert "result" in ask(_call(5))
        assert wait_until(lambda: _tools_calls(database.url) == ["1", "2", "3", "4", "5"], 120), notes.decode(
            errors="replace"
        )
        assert not any(spool.glob("*.jsonl"))
        proxy.stdin.close()
        assert proxy.wait(timeout=60) == 0
        assert _tools_calls(database.url) == ["1", "2", "3", "4", "5"]  # nothing doubled at exit
        assert b"spooled" in notes and b"back" in notes
