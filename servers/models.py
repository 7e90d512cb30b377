"""The MCP server registry."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from servers.gateway.config import ERAS, ServerConfig
from servers.gateway.transports import TRANSPORTS

server_name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$",
    "Use 1-40 letters, digits, '_' or '-' (the name prefixes tool names sent to models).",
)


class McpServer(models.Model):
    """One MCP server the agent can connect to: how to reach it and which protocol era to speak."""

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
    enabled = models.BooleanField(default=True)
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

    def to_config(self) -> ServerConfig:
        """The plain, Django-free description the gateway pools sessions by."""
        return ServerConfig(
            server_id=self.pk,
            name=self.name,
            transport=self.transport,
            command=self.command,
            args=tuple(str(a) for a in self.args),
            env=tuple(sorted((str(k), str(v)) for k, v in self.env.items())),
            cwd=self.cwd,
            url=self.url,
            headers=tuple(sorted((str(k), str(v)) for k, v in self.headers.items())),
            era=self.era,
            call_timeout=self.call_timeout,
        )
