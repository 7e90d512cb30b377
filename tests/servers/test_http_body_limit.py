"""An HTTP MCP server whose response body is endless, huge once decoded (a gzip bomb), or one
endless event of an event stream: the gateway reads at most RESPONSE_BODY_LIMIT bytes of it, the
operation's record says where it was cut and how much had come over the wire, and memory stays
bounded. A real HTTP server on a real socket; the gateway's own client (the MCP SDK's)."""

from __future__ import annotations

import gzip
import resource
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pytest_django.fixtures import Settings

from servers import gateway
from servers.gateway.config import ServerConfig

LIMIT = 1_000_000
# Growth of the process's peak resident size one operation may cause: a few limits' worth, far
# below what the server sends (it writes until the client goes away; the bomb decodes to 200 MB).
MEMORY_LIMIT = 120_000_000
CHUNK = b"x" * 65_536
BOMB = gzip.compress(b"\0" * 200_000_000, compresslevel=9)


class _Hostile(BaseHTTPRequestHandler):
    """Answers every POST as its path says: ``/endless`` a JSON body that never ends, ``/bomb``
    a small gzip body that decodes to 200 MB, ``/event`` an event stream whose first event never
    ends."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 — the base's name
        return

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        if self.path == "/bomb":
            self.send_header("content-type", "application/json")
            self.send_header("content-encoding", "gzip")
            self.send_header("content-length", str(len(BOMB)))
            self.end_headers()
            self._write(BOMB)
            return
        events = self.path == "/event"
        self.send_header("content-type", "text/event-stream" if events else "application/json")
        self.send_header("connection", "close")
        self.end_headers()
        if events:
            self._write(b"event: message\ndata: ")
        while self._write(CHUNK):
            pass

    def do_GET(self) -> None:
        self.send_response(405)
        self.send_header("content-length", "0")
        self.end_headers()

    do_DELETE = do_GET

    def _write(self, data: bytes) -> bool:
        try:
            self.wfile.write(data)
            self.wfile.flush()
        except OSError:  # the client went away: the cut worked
            return False
        return True


@pytest.fixture(scope="module")
def hostile_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def small_bodies(settings: Settings) -> Iterator[None]:
    settings.RESPONSE_BODY_LIMIT = LIMIT
    yield
    gateway.close_all()


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@pytest.mark.parametrize(
    ("path", "cut"),
    [
        ("/endless", "an HTTP response body passed the limit of 1,000,000 bytes (RESPONSE_BODY_LIMIT)"),
        ("/bomb", "an HTTP response body passed the limit of 1,000,000 bytes (RESPONSE_BODY_LIMIT)"),
        (
            "/event",
            "one event of an HTTP event stream passed the limit of 1,000,000 bytes (RESPONSE_BODY_LIMIT)",
        ),
    ],
    ids=["endless", "gzip-bomb", "endless-event"],
)
def test_a_body_past_the_limit_is_cut_and_recorded_in_bounded_memory(
    hostile_url: str, path: str, cut: str
) -> None:
    config = ServerConfig(
        server_id=9600, name="hostile-http", transport="http", url=hostile_url + path, call_timeout=10
    )
    before = _peak()

    listing = gateway.list_tools(config)

    assert listing.error != ""
    records = [*listing.records, *listing.unclaimed]
    [stray] = [record for record in records if record.label == "transport error" and cut in record.error]
    arrived = int(stray.error.rsplit(" bytes", 1)[0].rsplit("; ", 1)[1].split(" ")[0].replace(",", ""))
    if path == "/bomb":
        assert "(gzip-encoded) had arrived over the wire" in stray.error
        assert arrived <= len(BOMB) < LIMIT
    else:
        assert arrived > LIMIT
    assert _peak() - before < MEMORY_LIMIT
