"""OAuth 2.1 for HTTP MCP servers: the SDK's OAuth client, wrapped so every step is recorded.

The MCP authorization spec's flow (protected resource metadata from ``WWW-Authenticate`` or the
well-known paths, authorization server metadata by RFC 8414 or OpenID discovery, client ID
metadata documents, dynamic registration or a pre-registered client, PKCE S256, the
``resource`` parameter, scope selection and step-up on ``insufficient_scope``, refresh) is the
SDK's ``OAuthClientProvider`` and its client-credentials and identity-assertion extensions.
This module picks the provider for a grant, feeds it what was stored, and drives it through
``RecordingAuth``: each HTTP request the flow makes and the response it got become one record in
the operation's transcript, with every token, secret, code, verifier and assertion masked.

Django-free, like the rest of the gateway: what the flow obtains is kept in a ``GrantStore`` that
the caller reads back after the operation (and seals before storing it).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import parse_qs, parse_qsl, quote, urlencode, urlsplit, urlunsplit

import httpx2
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.auth.exceptions import OAuthFlowError
from mcp.client.auth.extensions.client_credentials import (
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider
from mcp.client.auth.utils import (
    build_protected_resource_metadata_discovery_urls,
    create_oauth_metadata_request,
    extract_field_from_www_auth,
    extract_resource_metadata_from_www_auth,
    handle_protected_resource_response,
)
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
)
from pydantic import ValidationError

from conversations.loop.wire import MASK, WireExchange, decode_body, safe_headers

GRANTS = {
    "authorization_code": "authorization code (browser redirect, PKCE S256)",
    "client_credentials": "client credentials (client secret or private-key JWT)",
    "cross_app": "cross-app access (ID-JAG from an identity provider)",
}
Grant = Literal["authorization_code", "client_credentials", "cross_app"]

# Form and JSON fields whose values are credentials: masked in every recorded body and URL.
SECRET_FIELDS = frozenset(
    {
        "access_token",
        "refresh_token",
        "id_token",
        "client_secret",
        "code",
        "code_verifier",
        "client_assertion",
        "assertion",
        "subject_token",
        "actor_token",
        "password",
        "registration_access_token",
    }
)
# How many HTTP redirects the non-interactive authorization step follows before giving up.
AUTHORIZE_HOPS = 5
RECORD_LABEL_PREFIX = "oauth"
# Marks a request the flow made (not the MCP request it authenticates) for the tap to pass over.
FLOW_STEP = "mcp_oauth_flow_step"


class AuthorizationRequired(Exception):
    """The server needs authorization that cannot be completed without a person.

    ``url`` is the authorization URL to open (empty when there is none yet: no grant stored).
    """

    def __init__(self, message: str, url: str = "") -> None:
        super().__init__(message)
        self.url = url


@dataclass
class GrantStore(TokenStorage):
    """The tokens and client registration of one grant, as the SDK's ``TokenStorage``.

    Loaded from the sealed row before an operation; ``changed`` tells the caller to store them
    again afterwards. ``expires_at`` (epoch seconds) lets a stored token be refreshed on time.
    """

    tokens: OAuthToken | None = None
    client_info: OAuthClientInformationFull | None = None
    expires_at: float | None = None
    changed: bool = False

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens
        self.expires_at = time.time() + tokens.expires_in if tokens.expires_in else None
        self.changed = True

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info
        self.changed = True

    def take_from(self, other: GrantStore) -> None:
        """What ``other`` obtained since it was last read (a pooled session's own store serving an
        operation that brought a store of its own), moved into this one."""
        if other is self or not other.changed:
            return
        self.tokens, self.client_info, self.expires_at = other.tokens, other.client_info, other.expires_at
        self.changed, other.changed = True, False

    def secrets(self) -> tuple[str, ...]:
        """Every credential this store holds (to mask wherever it appears)."""
        values = []
        if self.tokens is not None:
            values += [self.tokens.access_token, self.tokens.refresh_token or ""]
        if self.client_info is not None:
            values.append(self.client_info.client_secret or "")
        return tuple(value for value in values if value)


@dataclass(frozen=True)
class OAuthSettings:
    """How to authorize against one server, for one user (``owner``).

    Equal settings share a pooled session: the store (what was obtained) and the callbacks do not
    take part in the comparison. ``redirect`` receives the authorization URL when the
    authorization server does not send the code straight back; it returns the URL the browser
    was redirected to (the callback with ``code`` and ``state``) or raises
    ``AuthorizationRequired``.
    """

    owner: str
    grant: str = "authorization_code"
    redirect_uri: str = ""
    client_id: str = ""
    client_secret: str = field(default="", repr=False)
    client_metadata_url: str = ""
    private_key: str = field(default="", repr=False)
    signing_alg: str = "RS256"
    idp_client_id: str = ""
    idp_id_token: str = field(default="", repr=False)
    idp_issuer: str = ""
    idp_token_endpoint: str = ""
    scope: str = ""
    # The MCP server's authorization server (cross-app access names it; others discover it).
    issuer: str = ""
    client_name: str = "Tool-Call Inspector"
    store: GrantStore = field(default_factory=GrantStore, compare=False, hash=False, repr=False)
    redirect: Callable[[str], Awaitable[str]] | None = field(default=None, compare=False, hash=False)
    # A person may be waiting on the authorization step: the connect timeout does not apply.
    interactive: bool = field(default=False, compare=False, hash=False)

    def secrets(self) -> tuple[str, ...]:
        values = (self.client_secret, self.private_key, self.idp_id_token, *self.store.secrets())
        return tuple(value for value in values if value)


Recorder = Callable[[WireExchange], None]


def mask_text(text: str, content_type: str = "") -> str:
    """A form or JSON body with every credential field's value replaced by the mask."""
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        try:
            value = json.loads(stripped)
        except ValueError:
            return text
        return json.dumps(_mask_json(value), ensure_ascii=False)
    if "=" in text and "form" in content_type:
        pairs = parse_qsl(text, keep_blank_values=True)
        if pairs:
            masked = urlencode([(key, MASK if key in SECRET_FIELDS else value) for key, value in pairs])
            return masked.replace(quote(MASK), MASK)
    return text


def _mask_json(value: Any, depth: int = 0) -> Any:
    if depth > 50:
        return MASK
    if isinstance(value, dict):
        return {
            key: (MASK if key in SECRET_FIELDS and value[key] else _mask_json(item, depth + 1))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_mask_json(item, depth + 1) for item in value]
    return value


def mask_url(url: str) -> str:
    """A URL with its credential query parameters masked (``code`` on a callback)."""
    parts = urlsplit(url)
    if not parts.query:
        return url
    query = urlencode(
        [(key, MASK if key in SECRET_FIELDS else value) for key, value in parse_qsl(parts.query, True)]
    )
    query = query.replace(quote(MASK), MASK)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


class RecordingAuth(httpx2.Auth):
    """Drives an SDK OAuth provider and records every request its flow makes.

    The request being authenticated (an MCP POST or GET) is recorded by the session's tap as
    any other; every other request (metadata discovery, registration, token, refresh) becomes a
    record here. A 401 or 403 on the MCP request is remembered as ``challenge`` so a failure
    can say "this server needs authorization" rather than "an error response".
    """

    requires_response_body = False

    def __init__(
        self,
        inner: httpx2.Auth,
        settings: OAuthSettings,
        record: Recorder,
        body_limit: int,
        on_failure: Callable[[str], None] | None = None,
        learn: Callable[[tuple[str, ...]], None] | None = None,
    ) -> None:
        self.inner = inner
        self.settings = settings
        self.record = record
        self.body_limit = body_limit
        self.on_failure = on_failure
        # Told the grant's credentials after each step, once the SDK has stored what it obtained
        # (a step's own record is made before that: a refreshed token must be masked after it).
        self.learn = learn
        self.challenge = ""
        # Authorizations started after a refusal of the MCP request, over this auth's life.
        self.attempts = 0

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = self.inner.async_auth_flow(request)
        # The MCP request's last answer, and how many times this flow authorized again after one.
        answer: httpx2.Response | None = None
        reauthorized = 0
        try:
            outgoing = await flow.__anext__()
            while True:
                started = time.monotonic()
                wall = datetime.now(UTC)
                response = yield outgoing
                if outgoing is request:
                    answer = response
                    if response.status_code in (401, 403):
                        self.challenge = response.headers.get("www-authenticate", "") or str(
                            response.status_code
                        )
                else:
                    await response.aread()
                    self.record(self.exchange(outgoing, response, wall, time.monotonic() - started))
                    if self._accept_legacy_issuer(outgoing, response, wall):
                        # The SDK has already fixed the issuer it expects for this pass: start the
                        # flow again, now expecting the accepted one (the retry is recorded too).
                        await flow.aclose()
                        flow = self.inner.async_auth_flow(request)
                        outgoing = await flow.__anext__()
                        continue
                outgoing = await flow.asend(response)
                if self.learn is not None:
                    self.learn(self.settings.secrets())
                if outgoing is not request:
                    if response is answer:
                        # Refused, the provider starts authorizing again.
                        reauthorized += 1
                        self.attempts += 1
                    outgoing.extensions = {**outgoing.extensions, FLOW_STEP: True}
        except StopAsyncIteration:
            if self.learn is not None:
                self.learn(self.settings.secrets())
            if reauthorized and answer is not None and _insufficient_scope(answer):
                self._scope_refused_again(answer)
            return
        except Exception as exc:
            if self.on_failure is not None:
                self.on_failure(self.mask(describe_failure(exc) or f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            await flow.aclose()

    def _scope_refused_again(self, answer: httpx2.Response) -> None:
        """Say, in the user's words, that a step-up did not satisfy the server.

        The SDK re-authorizes once per request on ``403 insufficient_scope`` (with the scopes
        the challenge names) and retries; when the retry is refused the same way it hands the
        403 on, which the session reports only as "Server returned an error response".
        """
        if self.on_failure is None:
            return
        asked = extract_field_from_www_auth(answer, "scope") or ""
        tokens = self.settings.store.tokens
        granted = (tokens.scope if tokens is not None else None) or ""
        if asked and set(asked.split()) <= set(granted.split()):
            token = "the new token carries them, yet the server refuses it"
        else:
            token = f"the authorization server granted only: {granted[:300] or 'no scope named'}"
        said = extract_field_from_www_auth(answer, "error_description")
        attempts = f"{self.attempts} authorization attempt{'s' if self.attempts != 1 else ''}"
        self.on_failure(
            self.mask(
                "the server refused again with 403 insufficient_scope after the client re-authorized "
                f"with the scopes it asked for ({asked[:300] or 'none named'}); {token}. The client "
                f"stopped after {attempts} rather than loop"
                + (f". The server said: {said[:300]}" if said else "")
            )
        )

    def _accept_legacy_issuer(
        self, request: httpx2.Request, response: httpx2.Response, wall: datetime
    ) -> bool:
        """Accept, once and with a recorded warning, a legacy server's differing ``issuer``.

        Only on the 2025-03-26 path: no protected resource metadata was found, so the client
        fetched ``/.well-known/oauth-authorization-server`` at the MCP server's own origin. That
        revision locates the authorization server by the MCP server's origin, not by an issuer
        identifier, so the RFC 8414 §3.3 issuer comparison has nothing to protect there (see
        docs/oauth.md). Everywhere else the SDK's strict check stands.
        """
        provider = self.inner
        if not isinstance(provider, LegacyIssuerProvider) or provider.accepted_issuer:
            return False
        context = provider.context
        if context.auth_server_url is not None or context.protected_resource_metadata is not None:
            return False
        origin = _origin(context.server_url)
        if str(request.url) != f"{origin}/.well-known/oauth-authorization-server":
            return False
        if response.status_code != 200:
            return False
        try:
            metadata = OAuthMetadata.model_validate_json(response.content)
        except ValidationError:
            return False  # the SDK reports malformed metadata itself
        issuer = str(metadata.issuer)
        if issuer.rstrip("/") == origin:
            return False
        provider.accepted_issuer = issuer
        sentence = (
            f"issuer {issuer} differs from where the metadata was fetched ({origin}); "
            "accepted under the 2025-03-26 rules (no protected resource metadata: the "
            "authorization server is the MCP server's origin)"
        )
        self.record(
            WireExchange(
                channel="mcp",
                label=f"{RECORD_LABEL_PREFIX}: warning: issuer differs from the metadata URL"[:200],
                started_at=wall,
                direction="client",
                response_body=self.mask(sentence),
                status="warning",
            )
        )
        return True

    def mask(self, text: str, content_type: str = "") -> str:
        text = mask_text(text, content_type)
        for secret in sorted(self.settings.secrets(), key=len, reverse=True):
            if len(secret) >= 6:
                text = text.replace(secret, MASK)
        return text

    def _cut(self, text: str) -> str:
        if len(text) > self.body_limit:
            return text[: self.body_limit] + f"\n… [cut: {len(text)} characters in all]"
        return text

    def exchange(
        self, request: httpx2.Request, response: httpx2.Response | None, wall: datetime, seconds: float
    ) -> WireExchange:
        """One flow step as a record, credentials masked."""
        url = self.mask(mask_url(str(request.url)))
        body = decode_body(request.content) if request.content else ""
        record = WireExchange(
            channel="mcp",
            label=f"{RECORD_LABEL_PREFIX}: {request.method} {url}"[:200],
            started_at=wall,
            direction="client",
            request_headers={
                ":method": request.method,
                ":path": url,
                **{k: self.mask(v) for k, v in safe_headers(request.headers.multi_items()).items()},
            },
            request_body=self._cut(self.mask(body, request.headers.get("content-type", ""))),
            duration_ms=seconds * 1000,
        )
        if response is not None:
            record.response_headers = {
                ":status": str(response.status_code),
                **{k: self.mask(v) for k, v in safe_headers(response.headers.multi_items()).items()},
            }
            record.response_body = self._cut(
                self.mask(decode_body(response.content), response.headers.get("content-type", ""))
            )
            record.status = str(response.status_code)
            if response.status_code >= 400:
                record.error = f"HTTP {response.status_code}"
        return record


def _client_metadata(settings: OAuthSettings, grant_types: list[str]) -> OAuthClientMetadata:
    return OAuthClientMetadata(
        redirect_uris=[settings.redirect_uri] if settings.redirect_uri else None,  # type: ignore[list-item]
        client_name=settings.client_name,
        grant_types=grant_types,
        response_types=["code"],
        token_endpoint_auth_method="client_secret_basic" if settings.client_secret else "none",
        scope=settings.scope or None,
    )


def provider_for(
    server_url: str, settings: OAuthSettings, http: Callable[[], httpx2.AsyncClient], record: Recorder
) -> httpx2.Auth:
    """The SDK provider for ``settings.grant``, loaded with what the store holds.

    ``http`` makes the client the authorization step uses to follow the authorization URL (its
    requests are recorded as well).
    """
    store = settings.store
    provider: httpx2.Auth
    if settings.grant == "client_credentials" and settings.private_key:
        jwt = SignedJWTParameters(
            issuer=settings.client_id,
            subject=settings.client_id,
            signing_key=settings.private_key,
            signing_algorithm=settings.signing_alg,
        )
        provider = PrivateKeyJWTOAuthProvider(
            server_url=server_url,
            storage=store,
            client_id=settings.client_id,
            assertion_provider=jwt.create_assertion_provider(),
            scope=settings.scope or None,
            issuer=settings.issuer or None,
        )
    elif settings.grant == "client_credentials":
        provider = ClientCredentialsOAuthProvider(
            server_url=server_url,
            storage=store,
            client_id=settings.client_id,
            client_secret=settings.client_secret,
            scope=settings.scope or None,
            issuer=settings.issuer or None,
        )
    elif settings.grant == "cross_app":
        provider = _CrossAppAuth(server_url, settings, _id_jag_fetcher(settings, http, record))
    else:
        if settings.client_id and store.client_info is None:
            store.client_info = OAuthClientInformationFull(
                client_id=settings.client_id,
                client_secret=settings.client_secret or None,
                redirect_uris=[settings.redirect_uri] if settings.redirect_uri else None,  # type: ignore[list-item]
                token_endpoint_auth_method="client_secret_basic" if settings.client_secret else "none",
            )
        provider = LegacyIssuerProvider(
            server_url=server_url,
            client_metadata=_client_metadata(settings, ["authorization_code", "refresh_token"]),
            storage=store,
            redirect_handler=None,
            callback_handler=None,
            client_metadata_url=settings.client_metadata_url or None,
        )
        step = _AuthorizationStep(settings, http, record)
        provider.context.redirect_handler = step.redirect
        provider.context.callback_handler = step.callback
    if isinstance(provider, OAuthClientProvider) and store.tokens is not None:
        # The SDK learns a token's expiry only when it receives it; a stored one is refreshed on
        # time only if it is told.
        provider.context.token_expiry_time = store.expires_at
    return provider


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class LegacyIssuerProvider(OAuthClientProvider):
    """The SDK's authorization-code provider, told which issuer ``RecordingAuth`` accepted.

    On the legacy path (no protected resource metadata) the SDK expects the MCP server's origin
    as the issuer; once ``RecordingAuth`` has accepted a differing one (with a warning in the
    record) the provider expects that issuer instead, so the rest of the flow (credential binding,
    the ``iss`` check) runs against what the server actually published. With protected resource
    metadata the SDK's own expectation (the advertised server) is untouched.
    """

    accepted_issuer: str | None = None

    def _expected_issuer(self) -> str:
        if self.context.auth_server_url is None and self.accepted_issuer:
            return self.accepted_issuer
        return super()._expected_issuer()


class _CrossAppAuth(httpx2.Auth):
    """SEP-990 cross-app access: the SDK's identity-assertion provider, for the authorization
    server the grant names (``--issuer``) or, when it names none, the first one the server's
    protected resource metadata lists (discovered on the first 401, as the other grants do)."""

    def __init__(
        self, server_url: str, settings: OAuthSettings, assertion: Callable[[str, str], Awaitable[str]]
    ) -> None:
        self.server_url = server_url
        self.settings = settings
        self.assertion = assertion
        self.inner: IdentityAssertionOAuthProvider | None = None
        if settings.issuer:
            self.inner = self._provider(settings.issuer)

    def _provider(self, issuer: str) -> IdentityAssertionOAuthProvider:
        return IdentityAssertionOAuthProvider(
            server_url=self.server_url,
            storage=self.settings.store,
            client_id=self.settings.client_id,
            client_secret=self.settings.client_secret,
            issuer=issuer,
            assertion_provider=self.assertion,
            scope=self.settings.scope or None,
            # Every authorization server supports HTTP Basic client authentication (RFC 6749 §2.3.1).
            token_endpoint_auth_method="client_secret_basic",
        )

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self.inner is None:
            if self.settings.store.tokens is not None:
                request.headers["Authorization"] = f"Bearer {self.settings.store.tokens.access_token}"
            response = yield request
            if response.status_code != 401:
                return
            urls = build_protected_resource_metadata_discovery_urls(
                extract_resource_metadata_from_www_auth(response), self.server_url
            )
            for url in urls:
                metadata = await handle_protected_resource_response(
                    (yield create_oauth_metadata_request(url))
                )
                if metadata is not None and metadata.authorization_servers:
                    self.inner = self._provider(str(metadata.authorization_servers[0]))
                    break
            else:
                raise OAuthFlowError(
                    "no protected resource metadata names an authorization server: give --issuer"
                )
            request.headers.pop("Authorization", None)
        flow = self.inner.async_auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                outgoing = await flow.asend((yield outgoing))
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()


class _AuthorizationStep:
    """The authorization-code redirect, completed without a browser when it can be.

    The authorization URL is fetched (recorded, redirects not followed): an authorization server
    that answers with a redirect to our ``redirect_uri`` carrying ``code`` completes the flow at
    once. Otherwise ``settings.redirect`` is asked (a person opens the URL), and without one the
    flow stops with ``AuthorizationRequired``.
    """

    def __init__(
        self, settings: OAuthSettings, http: Callable[[], httpx2.AsyncClient], record: Recorder
    ) -> None:
        self.settings = settings
        self.http = http
        self.record = record
        self.result: AuthorizationCodeResult | None = None

    async def redirect(self, url: str) -> None:
        landed = await self._follow(url)
        if landed is None:
            if self.settings.redirect is None:
                raise AuthorizationRequired(
                    "the authorization server wants a person to sign in: open the authorization URL", url
                )
            landed = await self.settings.redirect(url)
        query = parse_qs(urlsplit(landed).query)
        if "error" in query:
            description = query.get("error_description", [""])[0]
            raise AuthorizationRequired(
                f"the authorization server refused: {query['error'][0]}"
                + (f" ({description})" if description else ""),
                url,
            )
        self.result = AuthorizationCodeResult(
            code=query.get("code", [""])[0],
            state=query.get("state", [None])[0],
            iss=query.get("iss", [None])[0],
        )

    async def callback(self) -> AuthorizationCodeResult:
        if self.result is None:
            raise AuthorizationRequired("no authorization code came back")
        return self.result

    async def _follow(self, url: str) -> str | None:
        """The callback URL the authorization endpoint redirects to, if it does without a person."""
        auth = RecordingAuth(httpx2.Auth(), self.settings, self.record, 100_000)
        async with self.http() as client:
            for _ in range(AUTHORIZE_HOPS):
                wall = datetime.now(UTC)
                started = time.monotonic()
                request = client.build_request("GET", url)
                try:
                    response = await client.send(request, follow_redirects=False)
                except httpx2.HTTPError as exc:
                    failed = auth.exchange(request, None, wall, time.monotonic() - started)
                    failed.status, failed.error = "error", f"{type(exc).__name__}: {exc}"
                    self.record(failed)
                    return None
                self.record(auth.exchange(request, response, wall, time.monotonic() - started))
                location = response.headers.get("location")
                if not response.is_redirect or not location:
                    return None
                url = str(response.url.join(location))
                if self.settings.redirect_uri and url.startswith(self.settings.redirect_uri):
                    return url
        return None


def _id_jag_fetcher(
    settings: OAuthSettings, http: Callable[[], httpx2.AsyncClient], record: Recorder
) -> Callable[[str, str], Awaitable[str]]:
    """SEP-990: exchange the identity provider's ID token for an ID-JAG (RFC 8693), recorded."""

    async def fetch(audience: str, resource: str) -> str:
        data = {
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
            "subject_token": settings.idp_id_token,
            "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
            "audience": audience,
            "resource": resource,
            "client_id": settings.idp_client_id,
        }
        if settings.scope:
            data["scope"] = settings.scope
        auth = RecordingAuth(httpx2.Auth(), settings, record, 100_000)
        async with http() as client:
            request = client.build_request("POST", settings.idp_token_endpoint, data=data)
            wall, started = datetime.now(UTC), time.monotonic()
            response = await client.send(request)
            record(auth.exchange(request, response, wall, time.monotonic() - started))
        if response.status_code != 200:
            raise AuthorizationRequired(
                f"the identity provider refused the token exchange (HTTP {response.status_code}): "
                f"{auth.mask(response.text)[:300]}"
            )
        try:
            token = response.json()["access_token"]
        except (ValueError, KeyError, TypeError):
            raise AuthorizationRequired("the identity provider's answer carries no access_token") from None
        if not isinstance(token, str):
            raise AuthorizationRequired("the identity provider's access_token is not a string")
        return token

    return fetch


def recording_auth(
    server_url: str,
    settings: OAuthSettings,
    *,
    record: Recorder,
    on_failure: Callable[[str], None],
    body_limit: int,
    timeout: float,
    learn: Callable[[tuple[str, ...]], None] | None = None,
) -> RecordingAuth:
    """The provider for ``settings``, driven by a ``RecordingAuth`` (see the module docstring)."""

    def http() -> httpx2.AsyncClient:
        return httpx2.AsyncClient(timeout=timeout)

    return RecordingAuth(
        provider_for(server_url, settings, http, record), settings, record, body_limit, on_failure, learn
    )


def _insufficient_scope(response: httpx2.Response) -> bool:
    return (
        response.status_code == 403 and extract_field_from_www_auth(response, "error") == "insufficient_scope"
    )


def describe_failure(exc: BaseException) -> str | None:
    """A clear sentence for an OAuth failure, or None when ``exc`` is not one."""
    name = type(exc).__name__
    if isinstance(exc, AuthorizationRequired):
        return str(exc) + (f": {exc.url}" if exc.url else "")
    if name in {"OAuthFlowError", "OAuthTokenError", "OAuthRegistrationError"}:
        step = {
            "OAuthFlowError": "the authorization flow failed",
            "OAuthTokenError": "the token request failed",
            "OAuthRegistrationError": "client registration failed",
        }[name]
        return f"{step}: {exc}"
    return None
