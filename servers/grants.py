"""OAuth grants: each user's authorization for an HTTP server, stored sealed.

A grant's settings become the gateway's ``OAuthSettings`` (``grant_settings``) for each operation
its owner runs; what the flow obtained (tokens, a registration) is sealed back afterwards
(``grant_keep``). Nothing here speaks HTTP: the flow itself is ``servers.gateway.oauth``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from django.conf import settings as django_settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.utils import timezone
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from conversations.models import AuditEvent
from conversations.record.audit import audit_change
from conversations.record.exchanges import release_connection
from conversations.redaction import Redactor
from servers.gateway.oauth import AuthorizationRequired, GrantStore, OAuthSettings
from servers.models import McpServer, OAuthGrant
from servers.vault import UnsealError, seal, unseal

# Settings a grant keeps in plain text (nothing secret).
PLAIN_SETTINGS = (
    "client_id",
    "client_metadata_url",
    "signing_alg",
    "idp_client_id",
    "idp_issuer",
    "idp_token_endpoint",
    "scope",
    "issuer",
)
SECRET_SETTINGS = ("client_secret", "private_key", "idp_id_token")
# How long a browser sign-in may take before the connect gives up.
BROWSER_SIGN_IN_SECONDS = 600.0


def grant_get(*, server: McpServer, user: AbstractBaseUser | None) -> OAuthGrant | None:
    """``user``'s grant for ``server`` (None: the CLI's, which belongs to no user); there is at
    most one (a database constraint)."""
    rows = OAuthGrant.objects.filter(server=server)
    rows = rows.filter(user__isnull=True) if user is None else rows.filter(user=user)  # type: ignore[misc]
    return rows.first()


def grant_for_user(*, server: McpServer, user_id: int) -> OAuthGrant | None:
    """The grant of the user with id ``user_id`` for ``server``, if they have one."""
    return OAuthGrant.objects.filter(server=server, user_id=user_id).first()


def grant_share(*, grant: OAuthGrant, shared: bool, actor: AbstractBaseUser) -> OAuthGrant:
    """Let the grant's owner's team mates' turns use ``grant`` when they have no grant of their
    own (``shared``), or stop that; the choice is the owner's alone and written to the audit log.

    Raises:
        PermissionError: ``actor`` is not the grant's owner.
    """
    if grant.user_id is None or grant.user_id != actor.pk:
        raise PermissionError("only the grant's owner may share it")
    if grant.shared_with_team != shared:
        grant.shared_with_team = shared
        grant.save(update_fields=["shared_with_team", "updated_at"])
        audit_change(
            actor=actor,
            action=AuditEvent.Action.GRANT_SHARED if shared else AuditEvent.Action.GRANT_UNSHARED,
            via="web",
            subject=grant.server.name,
            detail={"server_id": grant.server_id, "grant": str(grant.public_id), "scope": grant.scope},
        )
    return grant


def run_secrets(*, server: McpServer, oauth: OAuthSettings | None) -> list[str]:
    """The secret values a run on ``server`` carries: the one list every redactor of a turn, a
    workbench operation and their sampling, elicitation and app rounds is given (with
    ``conversations.secret_sources.active_redactor``'s patterns, rules and configured values).

    The server's sealed and ``${VAR}`` env and header values, and the credentials of the grant
    it is reached with (``oauth``: access and refresh tokens, client secret, private key, ID
    token). A grant's credentials are no configured secret of the installation: they mask only
    the records of the runs that grant serves, so a redacted marker in another user's record
    never confirms a guess of them (docs/deployment-security.md, "The redactor").
    """
    return [*server.secret_values(), *(oauth.secrets() if oauth is not None else ())]


def user_run_secrets(*, server: McpServer, user: AbstractBaseUser | None) -> list[str]:
    """``run_secrets`` for a run of ``user``'s on ``server`` (their grant, if they have one)."""
    grant = None if server.spawns_process else grant_get(server=server, user=user)
    return run_secrets(server=server, oauth=grant_settings(grant=grant) if grant is not None else None)


def redactor_guarded(redact: Redactor, oauth: OAuthSettings | None) -> Redactor:
    """``redact``, knowing too the credentials ``oauth``'s flow obtained after it was built (a
    token refreshed or first issued during the run), so a server repeating them stores a marker."""
    if oauth is None:
        return redact
    fresh = [value for value in oauth.secrets() if value not in redact.secrets]
    if not fresh:
        return redact
    return dataclasses.replace(
        redact, secrets=tuple(sorted({*redact.secrets, *fresh}, key=len, reverse=True))
    )


def grant_configure(
    *, server: McpServer, user: AbstractBaseUser | None, grant: str, values: dict[str, str]
) -> OAuthGrant:
    """Create or reset ``user``'s grant for ``server``: new settings, no tokens yet.

    ``values`` holds the flags given (``PLAIN_SETTINGS`` and ``SECRET_SETTINGS``); secrets are
    sealed before they are stored.
    """
    # get_or_create: two configures at once (a double-clicked Connect) end with the one row.
    row, _ = OAuthGrant.objects.get_or_create(server=server, user=user)  # type: ignore[misc]
    row.grant = grant
    row.settings = {name: values[name] for name in PLAIN_SETTINGS if values.get(name)}
    secrets = {name: values[name] for name in SECRET_SETTINGS if values.get(name)}
    row.sealed_secrets = seal(json.dumps(secrets)) if secrets else ""
    row.sealed_tokens = ""
    row.sealed_client = ""
    row.sealed_callback = ""
    row.scope = ""
    row.expires_at = None
    row.authorized_at = None
    row.save()
    return row


def _opened(value: str) -> dict[str, Any]:
    if not value:
        return {}
    try:
        loaded = json.loads(unseal(value))
    except (UnsealError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def grant_settings(
    *,
    grant: OAuthGrant,
    redirect: Callable[[str], Awaitable[str]] | None = None,
) -> OAuthSettings:
    """The gateway's view of ``grant``, with its stored tokens and registration loaded.

    ``redirect`` is how a person completes a sign-in the authorization server does not
    complete on its own (a browser or a terminal); without one the flow stops and says so.
    """
    store = GrantStore()
    tokens = _opened(grant.sealed_tokens)
    if tokens:
        store.tokens = OAuthToken.model_validate(tokens)
        store.expires_at = grant.expires_at.timestamp() if grant.expires_at else None
    client = _opened(grant.sealed_client)
    if client:
        store.client_info = OAuthClientInformationFull.model_validate(client)
    plain = {name: str(grant.settings.get(name, "")) for name in PLAIN_SETTINGS}
    secrets = {name: str(value) for name, value in _opened(grant.sealed_secrets).items()}
    return OAuthSettings(
        owner=f"user:{grant.user_id}" if grant.user_id else "cli",
        grant=grant.grant,
        redirect_uri=django_settings.OAUTH_REDIRECT_URL,
        client_id=plain["client_id"],
        client_secret=secrets.get("client_secret", ""),
        client_metadata_url=plain["client_metadata_url"],
        private_key=secrets.get("private_key", ""),
        signing_alg=plain["signing_alg"] or "RS256",
        idp_client_id=plain["idp_client_id"],
        idp_id_token=secrets.get("idp_id_token", ""),
        idp_issuer=plain["idp_issuer"],
        idp_token_endpoint=plain["idp_token_endpoint"],
        scope=plain["scope"],
        issuer=plain["issuer"],
        store=store,
        redirect=redirect,
        interactive=redirect is not None,
    )


def grant_keep(*, grant: OAuthGrant, oauth: OAuthSettings) -> None:
    """Seal back what the flow obtained (a new token, a refresh, a registration), if anything."""
    store = oauth.store
    if not store.changed:
        return
    if store.tokens is not None:
        grant.sealed_tokens = seal(store.tokens.model_dump_json(exclude_none=True))
        grant.scope = (store.tokens.scope or "")[:500]
        grant.expires_at = datetime.fromtimestamp(store.expires_at, UTC) if store.expires_at else None
        grant.authorized_at = timezone.now()
    if store.client_info is not None:
        grant.sealed_client = seal(store.client_info.model_dump_json(exclude_none=True))
    grant.save(
        update_fields=["sealed_tokens", "sealed_client", "scope", "expires_at", "authorized_at", "updated_at"]
    )
    store.changed = False


def grant_ensure(*, server: McpServer, user: AbstractBaseUser) -> OAuthGrant:
    """``user``'s grant for ``server``, made on first use (authorization code: the client is
    registered dynamically, or by its metadata document when ``OAUTH_CLIENT_METADATA_URL`` is set)."""
    existing = grant_get(server=server, user=user)
    if existing is not None:
        # A sign-in abandoned earlier must not send this Connect to its old URL.
        existing.settings = {k: v for k, v in existing.settings.items() if not k.startswith("pending_")}
        existing.sealed_callback = ""
        existing.save(update_fields=["settings", "sealed_callback", "updated_at"])
        return existing
    values = {"client_metadata_url": django_settings.OAUTH_CLIENT_METADATA_URL}
    return grant_configure(server=server, user=user, grant="authorization_code", values=values)


def grant_client_register(
    *, server: McpServer, user: AbstractBaseUser, client_id: str, client_secret: str
) -> OAuthGrant:
    """``user``'s grant for ``server`` set to a client registered with the authorization server
    beforehand: the authorization code grant with this client id and (sealed) secret, no tokens
    yet. The next connect uses it instead of registering one (docs/oauth.md, "In the browser")."""
    values = {"client_id": client_id, "client_secret": client_secret}
    return grant_configure(server=server, user=user, grant="authorization_code", values=values)


_T = TypeVar("_T")


def _released(read_or_write: Callable[..., _T]) -> Callable[..., _T]:
    """``read_or_write`` run on a thread of the gateway loop's executor (``asyncio.to_thread``),
    handing the thread's pooled connection back after it: those threads stay idle, and a
    connection they kept would stay lent."""

    def run(*args: Any) -> _T:
        try:
            return read_or_write(*args)
        finally:
            release_connection()

    return run


def _pending_set(grant_id: int, url: str) -> None:
    row = OAuthGrant.objects.get(pk=grant_id)
    state = parse_qs(urlsplit(url).query).get("state", [""])[0]
    row.settings = {**row.settings, "pending_url": url, "pending_state": state}
    row.sealed_callback = ""
    row.save(update_fields=["settings", "sealed_callback", "updated_at"])


def _callback_take(grant_id: int, state: str) -> str | None:
    """The callback URL stored for the sign-in waiting on ``state`` ("" while none came back);
    None once that sign-in is no longer the grant's pending one (a newer Connect replaced it)."""
    row = OAuthGrant.objects.get(pk=grant_id)
    if row.settings.get("pending_state") != state:
        return None
    if not row.sealed_callback:
        return ""
    url = unseal(row.sealed_callback)
    row.sealed_callback = ""
    row.settings = {k: v for k, v in row.settings.items() if not k.startswith("pending_")}
    row.save(update_fields=["settings", "sealed_callback", "updated_at"])
    return url


def browser_redirect(*, grant: OAuthGrant) -> Callable[[str], Awaitable[str]]:
    """A sign-in completed in the browser: the authorization URL is kept on the grant (the
    Connect view sends the browser there) and the callback page hands back where it led."""

    async def wait(url: str) -> str:
        # Each sign-in is a flow of its own, known by its state: the callback it takes must
        # carry it, and a newer Connect (which clears the pending flow, grant_ensure) ends this
        # one at once, so an abandoned sign-in neither holds the server's session lock nor takes
        # the callback meant for the next.
        state = parse_qs(urlsplit(url).query).get("state", [""])[0]
        await asyncio.to_thread(_released(_pending_set), grant.pk, url)
        deadline = time.monotonic() + BROWSER_SIGN_IN_SECONDS
        while time.monotonic() < deadline:
            landed = await asyncio.to_thread(_released(_callback_take), grant.pk, state)
            if landed is None:
                raise AuthorizationRequired("a newer sign-in to this server replaced this one", url)
            if landed:
                return landed
            await asyncio.sleep(0.3)
        raise AuthorizationRequired("nobody came back from the authorization server in time", url)

    return wait


def grant_callback_store(*, user: AbstractBaseUser, state: str, url: str) -> OAuthGrant | None:
    """Keep (sealed) the callback URL for ``user``'s sign-in waiting on ``state``; None when no
    sign-in of theirs waits on it."""
    if not state:
        return None
    for row in OAuthGrant.objects.filter(user=user):  # type: ignore[misc]
        if row.settings.get("pending_state") == state:
            row.sealed_callback = seal(url)
            row.save(update_fields=["sealed_callback", "updated_at"])
            return row
    return None
