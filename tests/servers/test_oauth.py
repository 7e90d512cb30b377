"""OAuth for HTTP servers from the CLI, against a real authorization server and protected MCP
server on localhost (``tests.fixtures.oauth_server``): discovery, registration, PKCE, the
resource parameter, refresh, step-up, client credentials, masking, and each failure said clearly."""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.test import Client

from conversations.models import AuditEvent, Exchange
from servers import gateway, selectors
from servers.grants import grant_configure, grant_ensure
from servers.management.commands.server import Command as ServerCommand
from servers.models import McpServer, OAuthGrant, Operation
from servers.services import operation_start
from servers.vault import unseal
from tests.fixtures.oauth_server import (
    IDP_CLIENT_ID,
    IDP_ID_TOKEN,
    JWT_BEARER,
    PRE_REGISTERED,
    TOKEN_EXCHANGE,
    FakeAuthorization,
    Knobs,
    Served,
)

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def served() -> Iterator[FakeAuthorization]:
    with Served() as fake:
        yield fake


@pytest.fixture
def fake(served: FakeAuthorization, workbench: None) -> Iterator[FakeAuthorization]:
    served.knobs = Knobs()
    served.seen.clear()
    yield served
    gateway.close_all()


def add(fake: FakeAuthorization, name: str = "guarded") -> McpServer:
    call_command("server", "add", name, "--url", fake.mcp_url)
    return McpServer.objects.get(name=name)


def paths(fake: FakeAuthorization) -> list[str]:
    return [entry["path"] for entry in fake.seen]


def everything_recorded() -> str:
    return "\n".join(
        f"{e.label} {e.request_headers} {e.request_body} {e.response_headers} {e.response_body}"
        for e in Exchange.objects.all()
    )


def test_a_server_answering_401_without_a_grant_says_it_needs_authorization_at_once(
    fake: FakeAuthorization,
) -> None:
    add(fake)
    started = time.monotonic()

    with pytest.raises(CommandError, match=r"guarded needs authorization \(HTTP 401.*server auth guarded"):
        call_command("server", "tools", "guarded")

    assert time.monotonic() - started < 10


def test_auth_discovers_through_www_authenticate_registers_and_proves_pkce(
    fake: FakeAuthorization, capsys: pytest.CaptureFixture[str]
) -> None:
    add(fake)
    call_command("server", "auth", "guarded")
    call_command("server", "tools", "guarded")

    assert "authorized guarded" in capsys.readouterr().out
    assert paths(fake)[:5] == [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-authorization-server",
        "/register",
        "/authorize",
        "/token",
    ]
    authorize = fake.seen[3]["query"]
    assert authorize["code_challenge_method"] == "S256"
    assert authorize["resource"] == fake.mcp_url
    assert authorize["scope"] == "read admin"  # scopes_supported of the resource metadata
    # The fake refuses a token request whose verifier or resource does not match: one was issued.
    grant = OAuthGrant.objects.get()
    assert grant.has_token and grant.scope == "read admin"
    operation = Operation.objects.filter(kind="connect").get()
    labels = [e.label for e in selectors.operation_exchanges(operation=operation)]
    assert any(label.startswith("oauth: POST") and label.endswith("/token") for label in labels)


def test_tokens_codes_and_verifiers_are_masked_in_the_record_and_sealed_in_the_database(
    fake: FakeAuthorization,
) -> None:
    add(fake)
    call_command("server", "auth", "guarded")
    call_command("server", "call", "guarded", "whoami")

    issued = list(fake.tokens) + list(fake.refresh_tokens)
    recorded = everything_recorded()
    assert issued and not any(token in recorded for token in issued)
    assert "code_verifier=••••••" in recorded
    grant = OAuthGrant.objects.get()
    assert grant.sealed_tokens.startswith("enc:v1:")
    assert not any(token in grant.sealed_tokens + grant.sealed_client for token in issued)


def test_well_known_fallback_and_openid_discovery_when_the_challenge_names_no_metadata(
    fake: FakeAuthorization,
) -> None:
    fake.knobs = Knobs(www_authenticate=False, oidc=True)
    add(fake)
    call_command("server", "auth", "guarded")

    assert "/.well-known/oauth-protected-resource/mcp" in paths(fake)
    assert "/.well-known/openid-configuration" in paths(fake)
    assert OAuthGrant.objects.get().has_token


def test_a_pre_registered_client_skips_registration(fake: FakeAuthorization) -> None:
    fake.knobs = Knobs(dcr=False)
    add(fake)
    call_command(
        "server", "auth", "guarded", "--client-id", PRE_REGISTERED[0], "--client-secret", PRE_REGISTERED[1]
    )

    assert "/register" not in paths(fake)
    token = next(entry for entry in fake.seen if entry["path"] == "/token")
    assert token["form"]["grant_type"] == "authorization_code"
    assert PRE_REGISTERED[1] not in everything_recorded()
    assert PRE_REGISTERED[1] not in OAuthGrant.objects.get().sealed_secrets


def test_a_client_id_metadata_document_is_used_as_the_client_id_when_the_server_supports_it(
    fake: FakeAuthorization,
) -> None:
    fake.knobs = Knobs(cimd=True)
    add(fake)
    document = "https://client.example.test/oauth/client.json"
    call_command("server", "auth", "guarded", "--client-metadata-url", document)

    assert "/register" not in paths(fake)
    authorize = next(entry for entry in fake.seen if entry["path"] == "/authorize")
    assert authorize["query"]["client_id"] == document


def test_an_expired_token_is_refreshed_before_the_next_call(fake: FakeAuthorization) -> None:
    fake.knobs = Knobs(token_lifetime=1)
    add(fake)
    call_command("server", "auth", "guarded")
    first = OAuthGrant.objects.get().sealed_tokens
    time.sleep(1.5)  # the token's lifetime: nothing to poll for
    fake.seen.clear()

    call_command("server", "call", "guarded", "whoami")

    assert [entry["form"].get("grant_type") for entry in fake.seen if entry["path"] == "/token"] == [
        "refresh_token"
    ]
    assert OAuthGrant.objects.get().sealed_tokens != first


def test_insufficient_scope_steps_up_inside_the_call(
    fake: FakeAuthorization, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.knobs = Knobs(challenge_scope="read")
    add(fake)
    call_command("server", "auth", "guarded")
    assert OAuthGrant.objects.get().scope == "read"
    fake.seen.clear()

    call_command("server", "call", "guarded", "admin")

    assert "admin: " in capsys.readouterr().out
    authorize = next(entry for entry in fake.seen if entry["path"] == "/authorize")
    assert set(authorize["query"]["scope"].split()) == {"read", "admin"}
    assert set(OAuthGrant.objects.get().scope.split()) == {"read", "admin"}


def test_client_credentials_with_a_secret(fake: FakeAuthorization) -> None:
    add(fake)
    call_command(
        "server", "auth", "guarded", "--grant", "client_credentials",
        "--client-id", PRE_REGISTERED[0], "--client-secret", PRE_REGISTERED[1],
    )  # fmt: skip

    token = next(entry for entry in fake.seen if entry["path"] == "/token")
    assert token["form"]["grant_type"] == "client_credentials"
    assert "/authorize" not in paths(fake)


def test_client_credentials_with_a_private_key_jwt(fake: FakeAuthorization, tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fake.knobs = Knobs(
        public_key_pem=key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    (tmp_path / "key.pem").write_bytes(pem)
    add(fake)
    call_command(
        "server", "auth", "guarded", "--grant", "client_credentials", "--client-id", "jwt-client",
        "--private-key-file", str(tmp_path / "key.pem"), "--signing-alg", "ES256",
    )  # fmt: skip
    call_command("server", "call", "guarded", "whoami")

    token = next(entry for entry in fake.seen if entry["path"] == "/token")
    assert token["form"]["client_assertion_type"].endswith("jwt-bearer")
    assert token["form"]["client_assertion"] not in everything_recorded()


def test_an_authorization_server_that_needs_a_person_prints_the_url_and_fails_clearly_without_a_terminal(
    fake: FakeAuthorization, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.knobs = Knobs(auto_approve=False)
    add(fake)
    with pytest.raises(CommandError, match="authorization of guarded failed: .*open the URL"):
        call_command("server", "auth", "guarded")

    assert f"{fake.base}/authorize?" in capsys.readouterr().out
    assert not OAuthGrant.objects.get().has_token


def test_a_token_endpoint_refusal_is_named(fake: FakeAuthorization) -> None:
    fake.knobs = Knobs(dcr=False)
    add(fake)
    with pytest.raises(CommandError, match="the token request failed: .*invalid_client"):
        call_command(
            "server", "auth", "guarded", "--client-id", "stranger", "--client-secret", "wrong-secret"
        )


def test_client_credentials_with_issuer_sends_the_secret_only_to_that_authorization_server(
    fake: FakeAuthorization,
) -> None:
    add(fake)
    with warnings.catch_warnings():
        # The MCP SDK deprecates leaving the issuer out; with it given, nothing is deprecated.
        warnings.simplefilter("error")
        call_command(
            "server", "auth", "guarded", "--grant", "client_credentials", "--issuer", fake.base,
            "--client-id", PRE_REGISTERED[0], "--client-secret", PRE_REGISTERED[1],
        )  # fmt: skip
        call_command("server", "call", "guarded", "whoami")

    assert OAuthGrant.objects.get().settings["issuer"] == fake.base
    assert paths(fake).count("/token") == 1


def test_client_credentials_never_send_the_secret_to_an_authorization_server_other_than_issuer(
    fake: FakeAuthorization,
) -> None:
    add(fake)
    with pytest.raises(
        CommandError,
        match=r"the authorization flow failed: .*issuer mismatch: .* != https://as\.example\.com",
    ):
        call_command(
            "server", "auth", "guarded", "--grant", "client_credentials", "--issuer", "https://as.example.com",
            "--client-id", PRE_REGISTERED[0], "--client-secret", PRE_REGISTERED[1],
        )  # fmt: skip

    assert "/token" not in paths(fake)


def test_client_credentials_without_issuer_says_who_decides_where_the_secret_goes(
    fake: FakeAuthorization, capsys: pytest.CaptureFixture[str]
) -> None:
    add(fake)
    call_command(
        "server", "auth", "guarded", "--grant", "client_credentials",
        "--client-id", PRE_REGISTERED[0], "--client-secret", PRE_REGISTERED[1],
    )  # fmt: skip

    out = capsys.readouterr().out
    assert "no --issuer" in out and "protected resource metadata" in out


def test_the_issuer_flag_is_documented_for_client_credentials_too(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        ServerCommand().run_from_argv(["manage.py", "server", "auth", "--help"])

    usage = " ".join(capsys.readouterr().out.split())
    issuer_help = usage.split("--issuer ISSUER ", 1)[1].split(" --", 1)[0]
    assert "client credentials" in issuer_help and "cross-app" in issuer_help


def test_cross_app_access_exchanges_the_id_token_for_an_id_jag_then_for_an_access_token(
    fake: FakeAuthorization,
) -> None:
    add(fake)
    call_command(
        "server", "auth", "guarded", "--client-id", PRE_REGISTERED[0], "--client-secret", PRE_REGISTERED[1],
        "--idp-client-id", IDP_CLIENT_ID, "--idp-id-token", IDP_ID_TOKEN, "--idp-issuer", f"{fake.base}/idp",
        "--idp-token-endpoint", f"{fake.base}/idp/token",
    )  # fmt: skip
    call_command("server", "call", "guarded", "whoami")

    exchange = next(entry for entry in fake.seen if entry["path"] == "/idp/token")
    assert exchange["form"]["grant_type"] == TOKEN_EXCHANGE
    assert exchange["form"]["subject_token"] == IDP_ID_TOKEN
    assert exchange["form"]["audience"] == fake.base  # the MCP authorization server, from its metadata
    assert exchange["form"]["resource"] == fake.mcp_url
    token = next(entry for entry in fake.seen if entry["path"] == "/token")
    assert token["form"]["grant_type"] == JWT_BEARER
    assert token["form"]["assertion"].startswith("id-jag-")
    assert paths(fake).index("/idp/token") < paths(fake).index("/token")
    grant = OAuthGrant.objects.get()
    assert grant.grant == "cross_app" and grant.has_token
    call = Operation.objects.filter(kind=Operation.Kind.TOOLS_CALL).get()
    assert "whoami: pre-client" in str(call.result)
    recorded = everything_recorded()
    assert IDP_ID_TOKEN not in recorded and token["form"]["assertion"] not in recorded
    assert PRE_REGISTERED[1] not in recorded
    assert any(
        e.label == f"oauth: POST {fake.base}/idp/token" and "subject_token=••••••" in e.request_body
        for e in Exchange.objects.all()
    )


def test_cross_app_access_names_the_identity_providers_refusal(fake: FakeAuthorization) -> None:
    add(fake)
    with pytest.raises(
        CommandError,
        match=r"the identity provider refused the token exchange \(HTTP 400\): .*unknown ID token",
    ):
        call_command(
            "server", "auth", "guarded", "--client-id", PRE_REGISTERED[0], "--client-secret", PRE_REGISTERED[1],
            "--idp-client-id", IDP_CLIENT_ID, "--idp-id-token", "someone-elses-id-token",
            "--idp-issuer", f"{fake.base}/idp", "--idp-token-endpoint", f"{fake.base}/idp/token",
        )  # fmt: skip

    assert "/token" not in paths(fake)
    assert not OAuthGrant.objects.get().has_token


def test_a_refused_dynamic_registration_names_the_step_and_the_servers_error(fake: FakeAuthorization) -> None:
    fake.knobs = Knobs(registration_error="invalid_redirect_uri")
    add(fake)
    started = time.monotonic()

    with pytest.raises(
        CommandError,
        match=r"authorization of guarded failed: guarded: client registration failed: .*400.*invalid_redirect_uri",
    ):
        call_command("server", "auth", "guarded")

    assert time.monotonic() - started < 10
    assert paths(fake)[-1] == "/register" and "/authorize" not in paths(fake)
    assert not OAuthGrant.objects.get().has_token
    operation = Operation.objects.filter(kind="connect").get()
    labels = [e.label for e in selectors.operation_exchanges(operation=operation)]
    assert f"oauth: POST {fake.base}/register" in labels


def test_client_credentials_needs_a_secret_or_a_key(fake: FakeAuthorization) -> None:
    add(fake)
    with pytest.raises(CommandError, match="needs --client-secret or --private-key-file"):
        call_command("server", "auth", "guarded", "--grant", "client_credentials", "--client-id", "x")


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"\xff\xfe\x00garbage",
        b"[" * 5000 + b"]" * 5000,
        b'{"resource": 1}',
        b"{" + b" " * 2_000_000 + b"}",
    ],
    ids=["malformed", "not-utf8", "deeply-nested", "wrong-types", "huge"],
)
def test_hostile_resource_metadata_ends_in_a_clear_failure_not_a_hang(
    fake: FakeAuthorization, body: bytes
) -> None:
    fake.knobs = Knobs(broken_prm=body)
    add(fake)
    started = time.monotonic()

    with pytest.raises(CommandError, match="authorization of guarded failed: guarded: "):
        call_command("server", "auth", "guarded")

    assert time.monotonic() - started < 25
    assert not OAuthGrant.objects.get().has_token


def test_the_callback_and_the_debugger_belong_to_their_owner(
    fake: FakeAuthorization, alice: User, bob: User, client: Client
) -> None:
    server = add(fake)
    grant = grant_configure(server=server, user=alice, grant="authorization_code", values={})
    grant.settings = {"pending_url": f"{fake.base}/authorize?state=s1", "pending_state": "s1"}
    grant.save()

    client.force_login(bob)
    assert client.get("/servers/oauth/callback/?code=c&state=s1").status_code == 404
    assert client.get("/servers/guarded/oauth").status_code == 404
    assert OAuthGrant.objects.get(pk=grant.pk).sealed_callback == ""

    client.force_login(alice)
    page = client.get("/servers/guarded/oauth")
    assert page.status_code == 200 and b"not authorized yet" in page.content


def test_a_2025_03_26_server_whose_metadata_names_another_issuer_is_accepted_with_a_warning(
    fake: FakeAuthorization,
) -> None:
    # No protected resource metadata: the client looks at the MCP server's origin, which
    # publishes an issuer with a path (the 2025-03-26 era locates the server by origin).
    fake.knobs = Knobs(www_authenticate=False, prm=False, issuer=f"{fake.base}/oauth")
    add(fake)
    call_command("server", "auth", "guarded")
    call_command("server", "call", "guarded", "whoami")

    assert "/.well-known/oauth-protected-resource/mcp" in paths(fake)
    assert "/token" in paths(fake)
    assert OAuthGrant.objects.get().has_token
    operation = Operation.objects.filter(kind="connect").get()
    warnings = [
        e for e in selectors.operation_exchanges(operation=operation) if e.label.startswith("oauth: warning")
    ]
    assert len(warnings) == 1
    assert warnings[0].response_body.startswith(f"issuer {fake.base}/oauth differs from")
    assert "accepted under the 2025-03-26 rules" in warnings[0].response_body


def test_with_protected_resource_metadata_a_differing_issuer_is_still_refused(
    fake: FakeAuthorization,
) -> None:
    fake.knobs = Knobs(issuer=f"{fake.base}/oauth")
    add(fake)

    with pytest.raises(CommandError, match=r"issuer mismatch"):
        call_command("server", "auth", "guarded")

    assert "/token" not in paths(fake) and "/register" not in paths(fake)
    assert not Exchange.objects.filter(label__startswith="oauth: warning").exists()


def test_a_legacy_server_naming_a_foreign_issuer_is_warned_about_never_silently_trusted(
    fake: FakeAuthorization,
) -> None:
    fake.knobs = Knobs(www_authenticate=False, prm=False, issuer="https://elsewhere.example/")
    add(fake)
    call_command("server", "auth", "guarded")

    warning = Exchange.objects.get(label__startswith="oauth: warning")
    assert "issuer https://elsewhere.example/ differs" in warning.response_body


def test_the_oauth_debugger_shows_the_legacy_issuer_warning(
    fake: FakeAuthorization, alice: User, client: Client
) -> None:
    fake.knobs = Knobs(www_authenticate=False, prm=False, issuer=f"{fake.base}/oauth")
    server = add(fake)
    grant_ensure(server=server, user=alice)
    operation = operation_start(server=server, user=alice, kind=Operation.Kind.CONNECT)
    assert operation.status == Operation.Status.OK, operation.error

    client.force_login(alice)
    page = client.get("/servers/guarded/oauth").content.decode()
    assert "oauth: warning: issuer differs from the metadata URL" in page
    assert f"issuer {fake.base}/oauth differs from where the metadata was fetched" in page
    assert "accepted under the 2025-03-26 rules" in page


# --- a pre-registered client, from the browser -------------------------------------------------

SECRET_FREE_TABLES = (Exchange, AuditEvent, Operation)


def everything_stored_in_plain() -> str:
    """Every row of the tables that hold records, audit entries and operations, as text."""
    rows = [
        json.dumps(list(model.objects.values()), default=str, ensure_ascii=False)
        for model in SECRET_FREE_TABLES
    ]
    rows.append(json.dumps(list(OAuthGrant.objects.values("settings", "scope")), ensure_ascii=False))
    return "\n".join(rows)


def test_connect_with_a_pre_registered_client_from_the_browser_seals_its_secret_and_never_shows_it(
    fake: FakeAuthorization, alice: User, client: Client
) -> None:
    fake.knobs = Knobs(dcr=False)
    add(fake)
    client.force_login(alice)
    form = client.get("/servers/guarded/").content.decode()
    assert 'action="/servers/guarded/oauth/client"' in form

    answer = client.post(
        "/servers/guarded/oauth/client",
        {"client_id": PRE_REGISTERED[0], "client_secret": PRE_REGISTERED[1]},
    )

    assert answer.status_code == 302
    assert "/register" not in paths(fake)
    token = next(entry for entry in fake.seen if entry["path"] == "/token")
    assert token["form"]["grant_type"] == "authorization_code"
    grant = OAuthGrant.objects.get(user=alice)
    assert grant.has_token and grant.settings["client_id"] == PRE_REGISTERED[0]
    assert grant.sealed_secrets.startswith("enc:v1:") and PRE_REGISTERED[1] not in grant.sealed_secrets
    assert PRE_REGISTERED[1] in unseal(grant.sealed_secrets)
    pages = "".join(
        client.get(url).content.decode()
        for url in (
            "/servers/guarded/",
            "/servers/guarded/oauth",
            answer["Location"],
            "/servers/guarded/transcript",
        )
    )
    assert f"pre-registered client <code>{PRE_REGISTERED[0]}</code>" in pages
    assert PRE_REGISTERED[1] not in pages
    assert PRE_REGISTERED[1] not in everything_stored_in_plain()
    assert not any(token in everything_stored_in_plain() for token in fake.tokens)


def test_a_pre_registered_client_belongs_to_the_user_who_gave_it(
    fake: FakeAuthorization, alice: User, bob: User, client: Client
) -> None:
    add(fake)
    client.force_login(alice)
    client.post(
        "/servers/guarded/oauth/client", {"client_id": PRE_REGISTERED[0], "client_secret": PRE_REGISTERED[1]}
    )

    client.force_login(bob)
    assert client.get("/servers/guarded/oauth").status_code == 404
    assert PRE_REGISTERED[1] not in client.get("/servers/guarded/").content.decode()
    fake.seen.clear()
    client.post("/servers/guarded/connect")

    # Bob's connect registers a client of its own: alice's is not his to use.
    assert "/register" in paths(fake)
    bobs = OAuthGrant.objects.get(user=bob)
    assert bobs.has_token and "client_id" not in bobs.settings and bobs.sealed_secrets == ""
    assert OAuthGrant.objects.get(user=alice).settings["client_id"] == PRE_REGISTERED[0]


def test_a_pre_registered_client_for_a_server_the_user_cannot_see_is_a_404(
    fake: FakeAuthorization, bob: User, client: Client
) -> None:
    server = add(fake)
    server.enabled = False
    server.save()
    client.force_login(bob)

    answer = client.post(
        "/servers/guarded/oauth/client", {"client_id": PRE_REGISTERED[0], "client_secret": PRE_REGISTERED[1]}
    )

    assert answer.status_code == 404
    assert not OAuthGrant.objects.exists() and fake.seen == []


def test_a_pre_registered_client_needs_an_id_and_says_so(
    fake: FakeAuthorization, alice: User, client: Client
) -> None:
    add(fake)
    client.force_login(alice)

    answer = client.post(
        "/servers/guarded/oauth/client", {"client_id": " ", "client_secret": "s3cret-value"}, follow=True
    )

    assert "client id: This field is required." in answer.content.decode()
    assert "s3cret-value" not in answer.content.decode()
    assert not OAuthGrant.objects.exists() and fake.seen == []


def test_a_newer_connect_ends_the_sign_in_still_waiting_and_only_its_own_callback_completes(
    fake: FakeAuthorization, alice: User
) -> None:
    # Two Connects on one grant: the first waits at the consent page, abandoned. The second
    # (grant_ensure clears the pending flow) ends the first at once, so it holds neither the
    # server's session lock nor the callback; a callback with the old state finds no sign-in.
    import asyncio

    from servers.gateway.oauth import AuthorizationRequired
    from servers.grants import browser_redirect, grant_callback_store

    server = add(fake)
    grant = grant_ensure(server=server, user=alice)
    first_url = f"{fake.base}/authorize?client_id=c&state=first-state"

    async def abandoned() -> str:
        return await browser_redirect(grant=grant)(first_url)

    def next_connect() -> None:
        # In a thread of its own, which hands its pooled connection back when done: a thread
        # that ends holding one keeps it until the collector happens to free it.
        try:
            grant_ensure(server=server, user=alice)
        finally:
            connections.close_all()

    async def scenario() -> tuple[float, BaseException | None]:
        task = asyncio.ensure_future(abandoned())
        await asyncio.sleep(1.0)  # the first flow is pending now
        await asyncio.to_thread(next_connect)  # the next Connect
        started = time.monotonic()
        try:
            await asyncio.wait_for(task, 10)
        except BaseException as exc:  # noqa: BLE001 — the outcome is what is asserted
            return time.monotonic() - started, exc
        return time.monotonic() - started, None

    took, outcome = asyncio.run(scenario())
    assert isinstance(outcome, AuthorizationRequired) and "newer sign-in" in str(outcome)
    assert took < 5
    assert grant_callback_store(user=alice, state="first-state", url="http://x/cb?state=first-state") is None


def test_a_step_up_the_server_still_refuses_says_so_on_the_command_line(
    fake: FakeAuthorization, capsys: pytest.CaptureFixture[str]
) -> None:
    # The authorization server grants only "read": the step-up to "read admin" cannot succeed.
    fake.knobs = Knobs(challenge_scope="read", granted_scopes=("read",))
    add(fake)
    call_command("server", "auth", "guarded")
    fake.seen.clear()

    with pytest.raises(CommandError, match="admin ended with status error"):
        call_command("server", "call", "guarded", "admin")

    said = capsys.readouterr().err
    assert "refused again with 403 insufficient_scope after the client re-authorized" in said, said
    assert "with the scopes it asked for (read admin)" in said
    assert "the authorization server granted only: read." in said
    assert "stopped after 1 authorization attempt rather than loop" in said
    assert [entry["path"] for entry in fake.seen].count("/authorize") == 1
    operation = Operation.objects.filter(kind=Operation.Kind.TOOLS_CALL).get()
    assert "refused again with 403 insufficient_scope" in operation.error


def test_a_step_up_the_server_still_refuses_says_so_on_the_operations_page(
    fake: FakeAuthorization, alice: User, client: Client
) -> None:
    fake.knobs = Knobs(challenge_scope="read", granted_scopes=("read",))
    server = add(fake)
    grant_ensure(server=server, user=alice)
    assert operation_start(server=server, user=alice, kind=Operation.Kind.CONNECT).status == "ok"

    operation = operation_start(
        server=server, user=alice, kind=Operation.Kind.TOOLS_CALL, target="admin", arguments={}
    )

    assert operation.status == Operation.Status.ERROR
    client.force_login(alice)
    page = client.get(f"/servers/op/{operation.public_id}/").content.decode()
    assert "refused again with 403 insufficient_scope after the client re-authorized" in page
    assert "(read admin)" in page
