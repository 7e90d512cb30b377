"""A web process (daphne) outlives a PostgreSQL restart: its 404 page and the LLM proxy's calls work
again at once, and a burst of error pages does not keep the pool's connections lent.

Both are served partly on threads of an executor no request ends on (Django's async handler
renders error pages with ``sync_to_async(..., thread_sensitive=False)``; the proxy looks its key
up the same way): a connection such a thread kept was never handed back, and after a restart
it answered every later use of that thread with ``the connection is closed``. The database here
is a private one (``private_postgres``), restarted mid-test: the shared one is never touched."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import psycopg
import pytest

from tests.servers.proxy.private_postgres import PrivatePostgres, private_postgres
from tests.support import free_port, wait_until
from tests.test_deployment import SECURITY_SETTINGS

REPO_ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "restart-test-password"
DEMO_KEY = "demo-key-for-the-restart-test"
NOT_FOUND = "/no-such-page/"

# A private PostgreSQL's initdb and migrate, once for the module, take most of the time.
pytestmark = [pytest.mark.postgres, pytest.mark.timeout(600)]


@dataclass
class Web:
    base: str
    database: PrivatePostgres
    env: dict[str, str]

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO_ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return done.stdout

    def proxy_key(self) -> str:
        """A new proxy key of alice's whose OpenAI upstream is this server's demo model."""
        printed = self.manage(
            "proxy", "key", "create", "--user", "alice", "--openai-upstream", f"{self.base}/demo-model/v1"
        )
        return printed.strip().splitlines()[-1]

    def signed_in(self) -> httpx2.Client:
        client = httpx2.Client(base_url=self.base, timeout=60)
        form = client.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        assert token is not None, form.text[:500]
        done = client.post(
            "/accounts/login/",
            data={"username": "alice", "password": PASSWORD, "csrfmiddlewaretoken": token.group(1)},
        )
        assert done.status_code == 302, done.text[:500]
        return client

    def recorded_calls(self) -> int:
        with psycopg.connect(self.database.url) as db:
            row = db.execute("SELECT count(*) FROM conversations_exchange WHERE channel = 'llm'").fetchone()
        return int(row[0]) if row else 0


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    """daphne on a private PostgreSQL (a pool of three connections, 5 s to wait for one), with
    alice signed up; no Redis (turns in process). One for the module: the tests leave it serving."""
    tmp_path = tmp_path_factory.mktemp("restart")
    with private_postgres() as database:
        port = free_port()
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in SECURITY_SETTINGS and key not in {"DATABASE_URL", "REDIS_URL"}
        }
        env.update(
            DATABASE_URL=database.url,
            VAR_DIR=str(tmp_path),
            DEMO_MODEL_API_KEY=DEMO_KEY,
            DATABASE_POOL_MIN_SIZE="1",
            DATABASE_POOL_MAX_SIZE="3",
            DATABASE_POOL_TIMEOUT_SECONDS="5",
            WARM_START="0",
        )
        served = Web(base=f"http://127.0.0.1:{port}", database=database, env=env)
        served.manage("migrate", "--noinput")
        served.manage(
            "shell",
            "-c",
            f"from django.contrib.auth import get_user_model as m; m().objects.create_user('alice', password={PASSWORD!r})",
        )
        log = (tmp_path / "daphne.log").open("w")
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-v",
                "0",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "inspector.asgi:application",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:

            def listening() -> bool:
                assert server.poll() is None, (tmp_path / "daphne.log").read_text()[-3000:]
                with contextlib.suppress(httpx2.HTTPError):
                    return httpx2.get(f"{served.base}/healthz", timeout=2).status_code == 200
                return False

            assert wait_until(listening, 60), "daphne did not start"
            yield served
        finally:
            server.terminate()
            server.wait(timeout=30)
            log.close()


def _proxied_call(web: Web, raw_key: str) -> httpx2.Response:
    return httpx2.post(
        f"{web.base}/proxy/{raw_key}/openai/v1/chat/completions",
        json={"model": "demo", "messages": [{"role": "user", "content": "What is 2+2?"}]},
        headers={"Authorization": f"Bearer {DEMO_KEY}"},
        timeout=60,
    )


def _not_found(client: httpx2.Client) -> httpx2.Response:
    return client.get(NOT_FOUND)


def test_after_a_database_restart_the_404_page_and_a_proxied_model_call_work_at_once(web: Web) -> None:
    before_key, after_key = web.proxy_key(), web.proxy_key()
    client = web.signed_in()
    recorded = web.recorded_calls()
    for _ in range(3):
        page = _not_found(client)
        assert page.status_code == 404 and 'id="not-found"' in page.text
    answered = _proxied_call(web, before_key)
    assert answered.status_code == 200, answered.text[:500]
    assert wait_until(lambda: web.recorded_calls() == recorded + 1, 30)

    web.database.stop()
    web.database.start()

    pages = [_not_found(client) for _ in range(5)]
    # A key not looked up before: the proxy asks the database for it.
    after = _proxied_call(web, after_key)

    assert [page.status_code for page in pages] == [404] * 5, pages[0].text[:500]
    assert all('id="not-found"' in page.text for page in pages)
    assert after.status_code == 200, after.text[:500]
    assert after.json()["choices"][0]["message"]["content"]
    assert wait_until(lambda: web.recorded_calls() == recorded + 2, 30)
    assert client.get("/").status_code == 200


def test_a_burst_of_404_pages_hands_every_connection_back_to_the_pool(web: Web) -> None:
    """Each of Django's executor threads that rendered a 404 kept a pooled connection lent: with a
    pool of three, a burst of concurrent 404s left none for the pages after it."""
    clients = [web.signed_in() for _ in range(8)]
    statuses: list[int] = []
    start = threading.Barrier(len(clients))

    def burst(client: httpx2.Client) -> None:
        start.wait(timeout=30)
        statuses.extend(_not_found(client).status_code for _ in range(3))

    threads = [threading.Thread(target=burst, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert statuses == [404] * 24
    # Three pages at once, each needing a connection of its own: none waits out the pool's timeout.
    after: list[int] = []
    pages = [threading.Thread(target=lambda c=c: after.append(c.get("/").status_code)) for c in clients[:3]]
    for thread in pages:
        thread.start()
    for thread in pages:
        thread.join(timeout=60)
    assert after == [200] * 3
