"""A proxy key (what a host's traffic authenticates with) and a proxy session (the conversation
a key's traffic is recorded into). Imported by ``conversations.models``, so they belong to the
``conversations`` app."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ProxyKey(models.Model):
    """A key a host puts in its proxy URLs (or ``proxy stdio --key``): its traffic is recorded as
    its user's. Only a SHA-256 of the key is stored (``conversations.proxy.keys``); ``prefix``,
    its first characters, is what pages show of it."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="proxy_keys")
    name = models.CharField(max_length=80, blank=True)
    prefix = models.CharField(max_length=16, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    # Where each format's model calls are forwarded ("": not set, the route says so).
    openai_upstream = models.URLField(max_length=500, blank=True)
    anthropic_upstream = models.URLField(max_length=500, blank=True)
    gemini_upstream = models.URLField(max_length=500, blank=True)
    # With a chat template, each model call gets its spliced prompt as the loop's do.
    profile = models.ForeignKey(
        "conversations.ModelProfile", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})" if self.name else f"{self.prefix}…"

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


class ProxySession(models.Model):
    """One proxy session: a key's traffic under one session hint (``X-Inspector-Session`` or
    ``--session``), or without one until a quiet gap of ``PROXY_SESSION_GAP_SECONDS``. It is a
    conversation; ``tools`` keeps each server's tool list as its last ``tools/list`` answered
    (linking reads the names a host may have namespaced), ``turn`` the turn its traffic goes
    into now."""

    key = models.ForeignKey(ProxyKey, on_delete=models.CASCADE, related_name="sessions")
    hint = models.CharField(max_length=200, blank=True)
    conversation = models.OneToOneField(
        "conversations.Conversation", on_delete=models.CASCADE, related_name="proxy_session"
    )
    turn = models.ForeignKey(
        "conversations.Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    tools = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_activity_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["key", "hint", "-last_activity_at"], name="proxy_session_lookup_idx")]

    def __str__(self) -> str:
        return f"proxy session {self.pk} of key {self.key_id}"
