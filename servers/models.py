"""The MCP server registry, and what the workbench did with each server."""

from __future__ import annotations

import re
import uuid

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from conversations.loop.wire import SECRET_HEADER_RE
from servers.gateway.config import ERAS, ConfigError, ServerConfig, has_references, resolve_references
from servers.gateway.oauth import GRANTS, OAuthSettings
from servers.gateway.transports import TRANSPORTS
from servers.vault import UnsealError, is_sealed, unseal

server_name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$",
    "Use 1-40 letters, digits, '_' or '-' (the name prefixes tool names sent to models).",
)
SECRET_NAME_RE = re.compile(SECRET_HEADER_RE.pattern, re.IGNORECASE)


# The syslog severities of MCP's logging/setLevel, least severe first.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class McpServer(models.Model):
    """One MCP server the agent can connect to: how to reach it and which protocol era to speak.

    ``env`` and ``headers`` map names to values; a secret value is stored sealed
    (``servers.vault``) or as a ``${VAR}`` reference, never in plain text.
    """

    name = models.CharField(max_length=40, unique=True, validators=[server_name_validator])
    description = models.CharField(max_length=300, blank=True)
    transport = models.CharField(
        max_length=16, choices=[(key, t.label) for key, t in TRANSPORTS.items()], default="stdio"
    )
    command = models.CharField(max_length=500, blank=True, help_text="stdio: the executable to launch.")
    args = models.JSONField(default=list, blank=True, help_text="stdio: a JSON list of arguments.")
    env = models.JSONField(
        default=dict,
        blank=True,
        help_text="stdio: extra environment variables. Write secrets as ${VAR} references to the "
        "worker's environment; the value itself is then never stored.",
    )
    cwd = models.CharField(max_length=500, blank=True, help_text="stdio: working directory.")
    url = models.URLField(max_length=500, blank=True, help_text="http: the streamable HTTP endpoint.")
    headers = models.JSONField(
        default=dict, blank=True, help_text="http: extra request headers; secrets as ${VAR} references."
    )
    era = models.CharField(
        max_length=12,
        choices=[(key, label) for key, label in ERAS.items()],
        default="legacy",
        help_text="Protocol era: the initialize handshake, auto (probe server/discover, then fall "
        "back), or 2026-07-28 stateless with no probe.",
    )
    call_timeout = models.FloatField(default=30.0, help_text="Seconds before a request is cancelled.")
    roots = models.JSONField(
        default=list,
        blank=True,
        help_text="Roots offered to a server that asks (roots/list): a list of {uri, name}.",
    )
    sampling_profile = models.ForeignKey(
        "conversations.ModelProfile",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The model that answers the server's sampling requests (none: sampling is not offered).",
    )
    sampling_review = models.BooleanField(
        default=False,
        help_text="Workbench: show each sampling request to the user, who may edit, approve or refuse "
        "it before the model is called (off: the model answers at once).",
    )
    elicitation = models.BooleanField(
        default=True, help_text="Offer elicitation: the server may ask the workbench user for input."
    )
    log_level = models.CharField(
        max_length=9,
        blank=True,
        choices=[(level, level) for level in LOG_LEVELS],
        help_text="Sent as logging/setLevel on each new session (none: the server's own default).",
    )
    enabled = models.BooleanField(default=True)
    allow_non_staff_spawn = models.BooleanField(
        default=False,
        verbose_name="Allow non-staff to spawn",
        help_text="stdio: let users without staff rights start this server's process (workbench "
        "calls, conversations). Off: only staff may; everyone else is told so.",
    )
    is_demo = models.BooleanField(default=False, help_text="The bundled teaching server.")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"

    def __str__(self) -> str:
        return self.name

    @property
    def spawns_process(self) -> bool:
        return TRANSPORTS[self.transport].spawns_process

    def secret_values(self) -> list[str]:
        """The plain values of every secret entry that can be resolved here (to mask them)."""
        values: list[str] = []
        for value in (*self.env.values(), *self.headers.values()):
            text = str(value)
            try:
                if is_sealed(text):
                    values.append(unseal(text))
                elif has_references(text):
                    values.append(resolve_references(text))
            except (UnsealError, ConfigError):
                continue
        return values

    def to_config(self, *, interactive: bool = False, oauth: OAuthSettings | None = None) -> ServerConfig:
        """The plain, Django-free description the gateway pools sessions by.

        ``interactive`` configs (the workbench) advertise elicitation when the server allows it;
        agent turns have nobody to ask.

        Raises:
            ConfigError: a sealed secret cannot be decrypted.
        """
        try:
            env = tuple(sorted((str(k), unseal(str(v))) for k, v in self.env.items()))
            headers = tuple(sorted((str(k), unseal(str(v))) for k, v in self.headers.items()))
        except UnsealError as exc:
            raise ConfigError(str(exc)) from None
        return ServerConfig(
            server_id=self.pk,
            name=self.name,
            transport=self.transport,
            command=self.command,
            args=tuple(str(a) for a in self.args),
            env=env,
            cwd=self.cwd,
            url=self.url,
            headers=headers,
            era=self.era,
            call_timeout=self.call_timeout,
            roots=tuple(
                (str(r.get("uri", "")), str(r.get("name", ""))) for r in self.roots if isinstance(r, dict)
            ),
            sampling=self.sampling_profile_id is not None,
            elicitation=interactive and self.elicitation,
            log_level=self.log_level,
            secrets=tuple(self.secret_values()),
            oauth=oauth if not self.spawns_process else None,
        )


class Operation(models.Model):
    """One thing done with a server from the workbench or the CLI: connect, list, call, read...

    Its exchanges are the raw JSON-RPC messages (and HTTP metadata, stderr, nested model calls)
    it caused, in order; a 2026-07-28 call that needed input spans several ``tools/call`` round
    trips and they all belong here, grouped as one logical call.
    """

    class Kind(models.TextChoices):
        CONNECT = "connect"
        TOOLS_LIST = "tools/list"
        TOOLS_CALL = "tools/call"
        RESOURCES_LIST = "resources/list"
        TEMPLATES_LIST = "resources/templates/list"
        RESOURCE_READ = "resources/read"
        RESOURCE_SUBSCRIBE = "resources/subscribe"
        PROMPTS_LIST = "prompts/list"
        PROMPT_GET = "prompts/get"
        COMPLETE = "completion/complete"
        LOG_LEVEL = "logging/setLevel"
        PING = "ping"
        # Not a request: the MCP App of a tool call an agent turn made, opened from its step.
        APP = "ui/app", "app of a turn's tool call"

    class Status(models.TextChoices):
        RUNNING = "running"
        OK = "ok"
        ERROR = "error"
        CANCELLED = "cancelled"
        TIMEOUT = "timeout"

    class Source(models.TextChoices):
        WEB = "web"
        CLI = "cli"

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="operations")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source = models.CharField(max_length=4, choices=Source.choices, default=Source.WEB)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    target = models.CharField(max_length=500, blank=True, help_text="The tool, resource URI or prompt.")
    arguments = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    result = models.JSONField(null=True, blank=True)
    is_error = models.BooleanField(default=False, help_text="A tool result with isError: true.")
    error = models.TextField(blank=True)
    # Who the server said it was on this operation's session (identity, protocol, capabilities).
    session = models.JSONField(default=dict, blank=True)
    # structuredContent checked against the tool's outputSchema: {"checked", "valid", "errors"}.
    output_check = models.JSONField(default=dict, blank=True)
    # The server's sampling requests answered during the operation, in order: the seq of the
    # nested model call's exchange and what became of each parameter (servers.sampling).
    sampling = models.JSONField(default=list, blank=True)
    # A tools/call sent on purpose with arguments that break the tool's inputSchema ("send
    # anyway"): the validation errors the user overrode, as they were shown. Empty: none.
    invalid_arguments = models.JSONField(default=list, blank=True)
    cancel_requested = models.BooleanField(default=False)
    saved_call = models.ForeignKey(
        "SavedCall", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    exchanges = models.ManyToManyField("conversations.Exchange", blank=True, related_name="+")
    # For an ``app`` operation: the turn's tool step whose arguments and result the app is shown.
    step = models.ForeignKey(
        "conversations.Step", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # host:pid:boot of the process running it (``conversations.lifecycle.runner_name``): the stale
    # check ends an operation whose process is gone (``operations.operations_end_stale``).
    runner = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(default=timezone.now, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["server", "kind", "-started_at"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.target}".strip()

    @property
    def is_finished(self) -> bool:
        return self.status != self.Status.RUNNING

    @property
    def duration_ms(self) -> int | None:
        if self.finished_at is None:
            return None
        return int((self.finished_at - self.started_at).total_seconds() * 1000)


class PendingInput(models.Model):
    """A server's request waiting for the workbench user: an elicitation to answer, or (``kind``
    ``sampling``) a sampling request to review — ``accept`` is approved, ``decline`` refused,
    ``expired`` not reviewed in time; ``answer`` then holds the fields the user edited."""

    class Status(models.TextChoices):
        WAITING = "waiting"
        ACCEPTED = "accept"
        DECLINED = "decline"
        CANCELLED = "cancel"
        EXPIRED = "expired"

    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="questions")
    kind = models.CharField(max_length=16, default="elicitation")
    params = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.WAITING)
    answer = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    answered_at = models.DateTimeField(null=True, blank=True)
    # Who answered (empty: nobody — it expired, or the operation answered it by itself).
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.kind} for {self.operation_id} ({self.status})"

    def mark_answered(self, *, action: str, content: dict[str, object] | None) -> None:
        self.status = action
        self.answer = {"action": action, **({"content": content} if content is not None else {})}
        self.answered_at = timezone.now()


class SavedCall(models.Model):
    """A manual tool call kept to run again later (and see what changed)."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="saved_calls")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    name = models.CharField(max_length=120)
    tool = models.CharField(max_length=200)
    arguments = models.JSONField(default=dict, blank=True)
    baseline = models.ForeignKey(
        Operation,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The call it was saved from: re-runs are compared with it.",
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["server", "name"]

    def __str__(self) -> str:
        return self.name


class OAuthGrant(models.Model):
    """One user's OAuth authorization for one HTTP server (``user`` empty: the CLI's own).

    ``settings`` holds what is not secret (client id, client metadata URL, scope, identity
    provider); the client secret, private key and ID token, the tokens obtained and the client
    registration are stored sealed (``servers.vault``) and never shown.
    """

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="oauth_grants")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    grant = models.CharField(max_length=24, choices=list(GRANTS.items()), default="authorization_code")
    settings = models.JSONField(default=dict, blank=True)
    sealed_secrets = models.TextField(blank=True)
    sealed_tokens = models.TextField(blank=True)
    sealed_client = models.TextField(blank=True)
    # A browser sign-in in progress: the sealed callback URL the authorization server sent back.
    sealed_callback = models.TextField(blank=True)
    scope = models.CharField(max_length=500, blank=True, help_text="The scope granted, as last received.")
    expires_at = models.DateTimeField(null=True, blank=True)
    authorized_at = models.DateTimeField(null=True, blank=True)
    # The owner's explicit, audited choice (``grant_share``): their team mates' turns on this
    # server may use this grant when they have none of their own (workbench calls use only the
    # caller's own grant).
    shared_with_team = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["server", "id"]
        # One grant per server and user; NULL never equals NULL in a unique index, so the CLI's
        # grant (no user) needs a constraint of its own.
        constraints = [
            models.UniqueConstraint(
                fields=["server", "user"],
                condition=models.Q(user__isnull=False),
                name="oauth_grant_one_per_server_and_user",
            ),
            models.UniqueConstraint(
                fields=["server"],
                condition=models.Q(user__isnull=True),
                name="oauth_grant_one_cli_grant_per_server",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.grant} for {self.server_id}"

    @property
    def has_token(self) -> bool:
        return bool(self.sealed_tokens)
