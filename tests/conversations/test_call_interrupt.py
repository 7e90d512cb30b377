"""A blocking model call interrupted from another thread (``providers.http.interruptible_call``):
the connection it waits on is shut down, over plain HTTP and over TLS, before any byte of the
answer came."""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from conversations.loop.providers.base import Endpoint
from conversations.loop.providers.http import interruptible_call, new_http_client

# Long enough that only an interrupt can end the wait within the test's bound.
TIMEOUT_SECONDS = 60.0


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


class _Silent:
    """Accepts connections (TLS when given a context), reads the request, never answers."""

    def __init__(self, context: ssl.SSLContext | None) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.context = context
        self.received = threading.Event()
        self.closing = threading.Event()
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.closing.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.context is not None:
                try:
                    conn = self.context.wrap_socket(conn, server_side=True)
                except (OSError, ssl.SSLError):
                    continue
            self.connections.append(conn)
            conn.recv(65536)
            self.received.set()

    def close(self) -> None:
        self.closing.set()
        self.listener.close()
        for conn in self.connections:
            conn.close()


@pytest.fixture(params=["http", "https"])
def silent(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, _Silent, Path | None]]:
    if request.param == "http":
        server = _Silent(None)
        yield f"http://127.0.0.1:{server.port}", server, None
    else:
        cert, key = _self_signed(tmp_path)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        server = _Silent(context)
        yield f"https://localhost:{server.port}", server, cert
    server.close()


def test_a_call_waiting_for_its_answer_fails_at_once_when_interrupted(
    silent: tuple[str, _Silent, Path | None], monkeypatch: pytest.MonkeyPatch
) -> None:
    base_url, server, cert = silent
    if cert is not None:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    endpoint = Endpoint(model="m", base_url=base_url, api_key="", timeout=TIMEOUT_SECONDS)
    client = new_http_client(endpoint)
    outcome: list[BaseException | None] = []
    interrupters: list[object] = []

    def call() -> None:
        with interruptible_call() as interrupt:
            interrupters.append(interrupt)
            try:
                client.post(f"{base_url}/v1/chat/completions", content=b"{}")
            except httpx2.HTTPError as exc:
                outcome.append(exc)
            else:
                outcome.append(None)

    caller = threading.Thread(target=call)
    caller.start()
    assert server.received.wait(10), "the request never reached the server"
    started = time.monotonic()
    interrupters[0]()  # type: ignore[operator]
    caller.join(10)

    assert not caller.is_alive(), "the call was not interrupted"
    assert time.monotonic() - started < 5
    assert outcome and isinstance(outcome[0], httpx2.HTTPError)
    client.close()
