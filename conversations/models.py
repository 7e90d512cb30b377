"""Conversations, their turns, the steps of each turn and every raw exchange on the wire."""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from conversations.escaping import CarriableDecoder
from conversations.loop.hosts import HOST_CHOICES
from conversations.loop.paradigms import PARADIGMS
from conversations.loop.providers import PROVIDERS
from conversations.loop.splicing import ARGUMENT_MODE_LABELS, ENCODINGS

# The proxies' models live in their package and belong to this app (Django finds them here).
from conversations.proxy.models import ProxyKey as ProxyKey
from conversations.proxy.models import ProxySession as ProxySession

CAPABILITY_CHOICES = [("unknown", "unknown"), ("yes", "yes"), ("no", "no")]
TOOL_CHOICE_MODES = [
    ("auto", "auto — the model decides"),
    ("required", "required — must call a tool"),
    ("named", "named — must call the chosen tool"),
    ("none", "none — no tool calls"),
]


def default_model_deadline() -> float:
    """The deadline a new model profile starts with: ``MODEL_TIMEOUT_SECONDS`` (120 s)."""
    return float(settings.MODEL_TIMEOUT_SECONDS)


class ModelProfile(models.Model):
    """A model endpoint. Holds the *name* of the env var with the key, never the key itself."""

    name = models.CharField(max_length=80, unique=True)
    provider = models.CharField(
        max_length=24, choices=[(key, p.label) for key, p in PROVIDERS.items()], default="openai_chat"
    )
    base_url = models.URLField(max_length=500, blank=True, help_text="Empty: the provider's default.")
    model = models.CharField(max_length=120, help_text="The model name sent on the wire.")
    api_key_env = models.CharField(
        max_length=80, blank=True, help_text="Name of the environment variable that holds the API key."
    )
    native_tools = models.CharField(max_length=8, choices=CAPABILITY_CHOICES, default="unknown")
    structured_output = models.CharField(max_length=8, choices=CAPABILITY_CHOICES, default="unknown")
    parallel_calls = models.CharField(max_length=8, choices=CAPABILITY_CHOICES, default="unknown")
    chat_template = models.TextField(
        blank=True,
        help_text="The model's own Jinja chat template (pasted, or read from llama.cpp /props or Ollama "
        "/api/show): native calls are then spliced exactly as the model reads them.",
    )
    chat_template_source = models.CharField(
        max_length=200, blank=True, help_text="Where the template came from (empty: pasted by a user)."
    )
    chat_templates = models.JSONField(
        default=dict,
        blank=True,
        help_text="The engine's other named templates (e.g. tool_use), by name: each request is "
        "rendered with the one the engine would choose.",
    )
    special_tokens = models.JSONField(
        default=dict, blank=True, help_text="bos_token/eos_token for the template."
    )
    tokenizer = models.CharField(
        max_length=20,
        blank=True,
        choices=[("", "automatic")] + [(name, name) for name in ENCODINGS],
        help_text="The encoding token counts use. Empty: chosen from the chat template's family, "
        "else from the model name.",
    )
    added_tokens = models.JSONField(
        default=list,
        blank=True,
        help_text="The tokenizer's added special tokens (from a pasted tokenizer_config.json): each "
        "counts as one token.",
    )
    template_arguments = models.CharField(
        max_length=12,
        blank=True,
        choices=[
            ("", "automatic: as the engine the template came from passes them"),
            *ARGUMENT_MODE_LABELS,
        ],
        help_text="How tool-call arguments reach the chat template (docs/chat-templates.md §3).",
    )
    is_demo = models.BooleanField(
        default=False, help_text="The deterministic offline demo model served by this app."
    )
    stream = models.BooleanField(
        default=False, help_text="Use the provider's streaming mode (the raw event stream is stored)."
    )
    deadline_seconds = models.FloatField(
        default=default_model_deadline,
        validators=[MinValueValidator(0.1)],
        help_text="The whole-call deadline in seconds: a model call (a stream included) still going "
        "after it is cut, and what had arrived is kept, marked as cut.",
    )
    # Limits of this profile's turns (docs/turn-lifecycle.md#limits); empty: the global setting
    # of the same name in capitals (``conversations.limits``).
    max_steps = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Decisions (model replies) of one turn. Empty: the AGENT_MAX_STEPS setting.",
    )
    max_calls_per_reply = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Tool calls of one model reply that are run (the rest go back to the model as "
        "errors). Empty: the AGENT_MAX_CALLS_PER_REPLY setting.",
    )
    max_calls_per_turn = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Tool calls sent to MCP servers in one turn. Empty: the AGENT_MAX_CALLS_PER_TURN setting.",
    )
    host_preset = models.CharField(
        max_length=24,
        blank=True,
        choices=HOST_CHOICES,
        help_text="Run as this host: offer the servers' tools as it would (its names, schema rewriting "
        "and limits; docs/hosts.md). Empty: as this inspector offers them.",
    )
    response_body_limit = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1024)],
        help_text="Bytes of a model response body, counted after decompression. Empty: the "
        "RESPONSE_BODY_LIMIT setting.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # Set on the profile an import hangs its conversation off (when no local profile matches):
    # it belongs to the importer, is never run and is offered in no picker.
    imported_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} (demo)" if self.is_demo else self.name


class Comparison(models.Model):
    """One question run side by side under several paradigms (and models): a group of conversations."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="comparisons")
    question = models.TextField()
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.question[:80]


class Conversation(models.Model):
    """A thread of turns against one model profile and a set of MCP servers."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200)
    model_profile = models.ForeignKey(ModelProfile, on_delete=models.PROTECT, related_name="conversations")
    paradigm = models.CharField(
        max_length=16, choices=[(key, p.label) for key, p in PARADIGMS.items()], default="native"
    )
    tool_choice = models.CharField(max_length=10, choices=TOOL_CHOICE_MODES, default="auto")
    tool_choice_name = models.CharField(
        max_length=200, blank=True, help_text="With tool_choice 'named': the MCP tool, as server/tool."
    )
    servers = models.ManyToManyField("servers.McpServer", blank=True, related_name="conversations")
    comparison = models.ForeignKey(
        Comparison, null=True, blank=True, on_delete=models.SET_NULL, related_name="conversations"
    )
    # Set on conversations brought in from an exported transcript: they are read-only, and this
    # keeps what the export said (original id, owner, model profile, servers) for re-export.
    imported_meta = models.JSONField(null=True, blank=True, decoder=CarriableDecoder)
    # A replay re-runs a recorded turn against today's servers and profile, to see what changed.
    replay_of = models.ForeignKey(
        "Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="replays"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # The anchor of the keyed chain (conversations.record.integrity): how many turns are sealed, the
    # last seal, and a MAC over both, so removing the tail or a whole turn is detected.
    chain_turns = models.PositiveIntegerField(default=0)
    chain_head = models.CharField(max_length=64, blank=True)
    chain_anchor = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "-created_at"])]

    def __str__(self) -> str:
        return self.title

    @property
    def read_only(self) -> bool:
        """Imported, or recorded by a proxy: no question is asked here."""
        return self.imported_meta is not None or self.recorded_by_proxy

    @functools.cached_property
    def recorded_by_proxy(self) -> bool:
        """A proxy session's conversation: the host ran its turns (``conversations.proxy``)."""
        return self.pk is not None and ProxySession.objects.filter(conversation_id=self.pk).exists()


# The check a runner's write with a claim that no longer holds violates (``record.store``).
TURN_CLAIM_FENCE = "turn_claim_fence"


class Turn(models.Model):
    """One user message and the agent run that answers it."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        INTERRUPTED = "interrupted"
        CANCELLED = "cancelled"

    FINISHED = frozenset({Status.DONE, Status.FAILED, Status.INTERRUPTED, Status.CANCELLED})

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="turns")
    seq = models.PositiveIntegerField()
    question = models.TextField()
    # Who asked (a team mate may ask in a shared conversation): the OAuth grants the turn's
    # servers are reached with are this user's (``servers.toolhost``). Empty: the owner.
    asked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    answer = models.TextField(blank=True)
    error = models.TextField(blank=True)
    # What this turn ran with, frozen: profiles and conversations may change later.
    paradigm = models.CharField(max_length=16)
    tool_choice = models.CharField(max_length=10)
    tool_choice_name = models.CharField(max_length=200, blank=True)
    model_name = models.CharField(max_length=120, blank=True)
    # The exact tool list offered to the model: MCP definitions and the provider names they got.
    tools = models.JSONField(default=list, blank=True, decoder=CarriableDecoder)
    # The neutral message list the turn ended with: the next turn's history.
    transcript = models.JSONField(default=list, blank=True, decoder=CarriableDecoder)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Lifecycle (conversations.lifecycle): the process running the turn writes ``heartbeat_at``
    # while it runs; a running turn whose heartbeat stopped is marked interrupted by any process.
    # ``runner`` names that process (host:pid:boot) so its own host can tell it died at once.
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    runner = models.CharField(max_length=200, blank=True)
    # The claim the runner holds (a random token the atomic claim sets; 0: never claimed). Every
    # write of the runner carries it, and the database refuses one whose claim no longer holds —
    # the turn ended by another process, or claimed again (``conversations.record.store``, fencing).
    # The check keeps claims positive: a refused write sets -1, which it cannot commit.
    claim = models.BigIntegerField(default=0)
    # A cancel asked for (by whom): the runner sees it within a second and ends the turn cancelled.
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_by = models.CharField(max_length=150, blank=True)
    # Written when the turn ends (conversations.record.integrity.turn_seal): a keyed digest of each
    # step, in seq order, and the turn's seal over its shown fields, those digests, its
    # exchanges' hashes and the previous turn's seal. Empty: not ended, or made before sealing.
    seal = models.CharField(max_length=64, blank=True)
    seal_steps = models.JSONField(default=list, blank=True)
    # The rule the seal was made under (integrity.SEAL_RULE_*): 2 for seals made before rule 3.
    seal_rule = models.PositiveSmallIntegerField(default=2)
    # What the conversation list shows of the ended turn, worked out from its steps when it is
    # sealed (``integrity.turn_summary``), so the list reads a turn, not each of its steps:
    # the provider-reported tokens of its model calls (NULL: none reported) and the tools it
    # called, ``[server id, server name, tool name]`` each, distinct, in the order first called.
    # ``tools_called`` NULL: not summarized (running, or ended before summaries) — the list then
    # reads the turn's steps.
    usage_total = models.BigIntegerField(null=True, blank=True)
    tools_called = models.JSONField(null=True, blank=True, decoder=CarriableDecoder)

    class Meta:
        ordering = ["conversation", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "seq"], name="turn_seq_unique"),
            models.CheckConstraint(condition=models.Q(claim__gte=0), name=TURN_CLAIM_FENCE),
        ]
        indexes = [
            # The list's text and tool filters map matching turn ids to their conversations: with
            # the conversation in the index (PostgreSQL INCLUDE) that is an index-only lookup.
            models.Index(fields=["id"], include=["conversation"], name="turn_id_conversation_idx"),
            # The stale-turn check reads only running turns, every few seconds in every process.
            models.Index(
                fields=["heartbeat_at"],
                condition=models.Q(status="running"),
                name="turn_running_heartbeat_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"turn {self.seq} of {self.conversation_id}"

    @property
    def is_finished(self) -> bool:
        """Done, failed, interrupted or cancelled: nothing runs it any more."""
        return self.status in self.FINISHED

    def mark_running(self) -> None:
        self.status = self.Status.RUNNING
        self.started_at = timezone.now()

    def mark_done(self, answer: str) -> None:
        self.status = self.Status.DONE
        self.answer = answer
        self.finished_at = timezone.now()

    def mark_failed(self, error: str) -> None:
        self.status = self.Status.FAILED
        self.error = error
        self.finished_at = timezone.now()

    def mark_interrupted(self, error: str) -> None:
        self.status = self.Status.INTERRUPTED
        self.error = error
        self.finished_at = timezone.now()

    def mark_cancelled(self, error: str) -> None:
        self.status = self.Status.CANCELLED
        self.error = error
        self.finished_at = timezone.now()


class Step(models.Model):
    """One thing the agent did, in order: connect, a model decision, a tool call, an error...

    A ``tool`` step hangs off the ``decide`` step whose call it executes (``parent``); the page
    shows them on one row. ``updated_at`` moves whenever the step or a child changes, which is
    how a reconnecting browser catches up.
    """

    class Kind(models.TextChoices):
        CONNECT = "connect"
        DECIDE = "decide"
        TOOL = "tool"
        ANSWER = "answer"
        FALLBACK = "fallback"
        ERROR = "error"

    class Status(models.TextChoices):
        RUNNING = "running"
        OK = "ok"
        ERROR = "error"

    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="steps")
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.RUNNING)
    title = models.CharField(max_length=300, blank=True)
    # decide/answer: the text the model reads, when it can be shown (else the request body is).
    prompt = models.TextField(blank=True)
    prompt_exact = models.BooleanField(default=False)
    prompt_source = models.CharField(
        max_length=300, blank=True, help_text="Where the spliced prompt comes from."
    )
    # Token counts of the spliced prompt, each tool definition and each tool result (named encoding).
    tokens = models.JSONField(default=dict, blank=True, decoder=CarriableDecoder)
    # The provider's own usage report for this call (tokens in and out), as it sent it.
    usage = models.JSONField(default=dict, blank=True, decoder=CarriableDecoder)
    # decide/answer: what the paradigm parsed out of the raw reply.
    text = models.TextField(blank=True)
    calls = models.JSONField(default=list, blank=True, decoder=CarriableDecoder)
    diagnostics = models.JSONField(default=list, blank=True, decoder=CarriableDecoder)
    # tool: what was called and what came back.
    server = models.ForeignKey(
        "servers.McpServer", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The server's name when there is no server row (imported transcripts, deleted servers).
    server_name = models.CharField(max_length=40, blank=True)
    tool_name = models.CharField(max_length=200, blank=True)
    arguments = models.JSONField(null=True, blank=True, decoder=CarriableDecoder)
    result = models.JSONField(null=True, blank=True, decoder=CarriableDecoder)
    is_error = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["turn", "seq"]
        constraints = [models.UniqueConstraint(fields=["turn", "seq"], name="step_seq_unique")]
        # The list's tool filter matches a tool call by its name or by its ``server/tool`` title.
        indexes = [
            # The turn rides along (PostgreSQL INCLUDE): the filter reads the index alone.
            models.Index(
                fields=["tool_name"],
                condition=models.Q(kind="tool"),
                include=["turn"],
                name="step_tool_turn_idx",
            ),
            models.Index(
                fields=["title"],
                condition=models.Q(kind="tool"),
                include=["turn"],
                name="step_tool_title_turn_idx",
            ),
            # The page's catch-up mark (the newest change of a conversation's steps) reads one
            # entry per turn from this index, not every step's row (10,000 on a long one).
            models.Index(fields=["turn", "updated_at"], name="step_turn_updated_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} step {self.seq}"

    @property
    def duration_ms(self) -> int | None:
        if self.finished_at is None:
            return None
        return int((self.finished_at - self.started_at).total_seconds() * 1000)


class ExchangeQuerySet(models.QuerySet["Exchange"]):
    def bulk_create(self, objs: Iterable[Exchange], *args: Any, **kwargs: Any) -> list[Exchange]:
        """As Django's, with each row's ``conversation`` filled in from its turn where missing."""
        rows = list(objs)
        missing = {row.turn_id for row in rows if row.turn_id is not None and row.conversation_id is None}
        if missing:
            owners = dict(Turn.objects.filter(pk__in=missing).values_list("pk", "conversation_id"))
            for row in rows:
                if row.turn_id is not None and row.conversation_id is None:
                    row.conversation_id = owners.get(row.turn_id)
        return super().bulk_create(rows, *args, **kwargs)


# How much of a body PostgreSQL's full-text search indexes (``selectors.exchange_search_document``).
# A tsvector holds at most 1 MB; 200,000 characters of the most varied text stay well below it,
# and a body is cut there (the SQLite fallback reads whole bodies).
FTS_BODY_CHARS = 200_000
# The most an exchange's ``search_start`` and ``search_length`` hold: they are 32-bit integer
# columns and the search index reads from ``search_start + 1``, which must fit one too. A request
# whose span lies past it is indexed from its start instead (``record.exchanges.request_search_span``).
SEARCH_SPAN_MOST = 2**31 - 2


class Exchange(models.Model):
    """One raw pair on the wire (or one unpaired message), exactly as sent and received.

    LLM bodies are the bytes the HTTP client sent and received; MCP bodies are the JSON-RPC
    messages seen on the SDK transport's streams. Secrets (API keys, Authorization headers)
    never reach this table.

    ``conversation`` repeats the turn's conversation (it is never set on its own): the audit
    list's text filter maps matching exchanges straight to their conversations instead of
    joining every match to its turn. It has no foreign-key constraint and no index of its own,
    so it costs the recorder nothing per insert; rows go with their turn (``turn`` cascades).
    """

    class Channel(models.TextChoices):
        LLM = "llm"
        MCP = "mcp"

    class Direction(models.TextChoices):
        CLIENT = "client", "client → server"
        SERVER = "server", "server → client"
        LOCAL = "local", "local"

    turn = models.ForeignKey(Turn, null=True, blank=True, on_delete=models.CASCADE, related_name="exchanges")
    conversation = models.ForeignKey(
        Conversation,
        null=True,
        blank=True,
        editable=False,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="+",
    )
    step = models.ForeignKey(Step, null=True, blank=True, on_delete=models.CASCADE, related_name="exchanges")
    server = models.ForeignKey(
        "servers.McpServer", null=True, blank=True, on_delete=models.SET_NULL, related_name="exchanges"
    )
    server_name = models.CharField(max_length=40, blank=True)
    seq = models.PositiveIntegerField(default=0)
    channel = models.CharField(max_length=4, choices=Channel.choices)
    direction = models.CharField(max_length=8, choices=Direction.choices, default=Direction.CLIENT)
    label = models.CharField(max_length=200, help_text="e.g. POST /chat/completions, tools/call")
    jsonrpc_id = models.CharField(max_length=64, blank=True)
    request_headers = models.JSONField(default=dict, blank=True, decoder=CarriableDecoder)
    request_body = models.TextField(blank=True)
    response_headers = models.JSONField(default=dict, blank=True, decoder=CarriableDecoder)
    response_body = models.TextField(blank=True)
    status = models.CharField(max_length=32, blank=True, help_text="HTTP status, or ok / error / timeout")
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    duration_ms = models.FloatField(null=True, blank=True)
    # The conversation's hash chain (conversations.record.integrity); empty for server-only records.
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64, blank=True)
    # The rule ``hash`` was made under (``conversations.record.integrity``): 1 unkeyed SHA-256 (records
    # made before keyed sealing), 2 HMAC with the installation's integrity key over the content,
    # 3 the same over the content with each body as its SHA-256 (new records).
    chain_version = models.PositiveSmallIntegerField(default=3)
    # What full-text search indexes of ``request_body`` (PostgreSQL): all of it when these are
    # NULL, else ``search_length`` characters from offset ``search_start``. A model request
    # repeats the turn's history, so the writer indexes only what it adds to the turn's previous
    # request (``strings.changed_span``) and, once the turn has ended, its last one whole. Both
    # at most ``SEARCH_SPAN_MOST``.
    search_start = models.PositiveIntegerField(null=True, blank=True, editable=False)
    search_length = models.PositiveIntegerField(null=True, blank=True, editable=False)
    # What full-text search indexes in place of ``response_body`` unless empty (PostgreSQL): a
    # streamed reply as it assembled (its events cut words anywhere), redacted and cut to what
    # the index reads (``FTS_BODY_CHARS``). Derived, not evidence: no hash covers it.
    response_search = models.TextField(blank=True, default="", editable=False)

    objects = ExchangeQuerySet.as_manager()

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [models.Index(fields=["server", "started_at"]), models.Index(fields=["turn", "seq"])]

    def __str__(self) -> str:
        return f"{self.channel} {self.label}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.turn_id is not None and self.conversation_id is None:
            self.conversation_id = Turn.objects.values_list("conversation_id", flat=True).get(pk=self.turn_id)
        super().save(*args, **kwargs)


class RedactionRule(models.Model):
    """A staff-defined pattern redacted from every record written after it is saved."""

    name = models.SlugField(max_length=40, unique=True, help_text="Shown in the marker: [REDACTED:name].")
    pattern = models.CharField(max_length=500, help_text="A Python regular expression.")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ValidationError({"pattern": f"not a valid regular expression: {exc}"}) from exc


class SecretsChange(models.Model):
    """One change to what the redactor must know: a staff rule, a model profile's key variable,
    a server's env or headers (``secret_sources``). Written only by the database's own triggers
    (``secret_sources.watch_sql``), so no way of changing those rows (a form, the admin, a bulk
    update, SQL) goes unseen; read only as the version of the configured secrets, by which each
    process knows whether the ones it read last still hold. A random token per change, so a
    change rolled back and another made after it are never taken for one another."""

    token = models.CharField(max_length=36)

    def __str__(self) -> str:
        return f"secrets change {self.pk}"


class Team(models.Model):
    """People who see each other's conversations: ``members`` see and act on each other's things;
    ``viewers`` (a class following its lecturer) see the members' things read-only, and the team
    sees nothing of theirs (``conversations.selectors.access``)."""

    name = models.CharField(max_length=80, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="inspector_teams", blank=True)
    viewers = models.ManyToManyField(
        settings.AUTH_USER_MODEL,
        related_name="inspector_teams_viewed",
        blank=True,
        help_text="Follow the members' conversations and workbench read-only; their own stay unseen by the team.",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AuditEvent(models.Model):
    """Who read, exported, imported or pruned which conversation, who registered, changed,
    enabled, disabled or deleted which MCP server, when a turn was sealed, and who set a profile's
    prices or reset what it had learned, and when (visible to staff)."""

    class Action(models.TextChoices):
        OPENED = "opened"
        EXPORTED = "exported"
        IMPORTED = "imported"
        PRUNED = "pruned"
        SERVER_CREATED = "server.created"
        SERVER_CHANGED = "server.changed"
        SERVER_ENABLED = "server.enabled"
        SERVER_DISABLED = "server.disabled"
        SERVER_DELETED = "server.deleted"
        # A turn's record sealed (conversations.record.integrity), a profile's prices set
        # (conversations.pricing), a learned capability reset (conversations.capabilities).
        SEALED = "sealed"
        PROFILE_PRICE_SET = "profile.price_set"
        PROFILE_CAPABILITY_RESET = "profile.capability_reset"
        # An OAuth grant's owner let their team mates' turns and calls use it, or stopped that.
        GRANT_SHARED = "grant.shared"
        GRANT_UNSHARED = "grant.unshared"

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(max_length=150, blank=True, help_text="Kept when the user is deleted.")
    action = models.CharField(max_length=24, choices=Action.choices)
    conversation_public_id = models.UUIDField(null=True, blank=True, db_index=True)
    # Through what it happened (page, rows, api, admin, cli...) and what exactly (a turn, a body,
    # a server's name): repeated reads of the same thing are folded on these (conversations.record.audit).
    via = models.CharField(max_length=40, blank=True)
    subject = models.CharField(max_length=200, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-at"]
        indexes = [
            models.Index(fields=["conversation_public_id", "actor", "-at"], name="audit_repeat_read_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.actor_name} {self.action} {self.conversation_public_id or ''}"


class TraceDelivery(models.Model):
    """A turn's trace on its way to the OTLP/HTTP collector (``conversations.record.trace_delivery``,
    docs/traces.md §5): pending until the collector accepts it, retried while it is down."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"  # the collector refused it for good (a 4xx other than 429)

    turn = models.OneToOneField(Turn, on_delete=models.CASCADE, related_name="trace_delivery")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # What the last attempt met (a status code, a connection error), never a header.
    last_error = models.CharField(max_length=500, blank=True)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="trace_delivery_due_idx")]

    def __str__(self) -> str:
        return f"trace of turn {self.turn_id}: {self.status}"


class UserPreference(models.Model):
    """How one user likes the pages: teaching mode on or off, the colour scheme, and the class view."""

    class Theme(models.TextChoices):
        SYSTEM = "system", "as the system"
        LIGHT = "light", "light"
        DARK = "dark", "dark"

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preference")
    teaching = models.BooleanField(
        default=False, help_text="Explain every field, name the roles, mark selection and execution."
    )
    theme = models.CharField(max_length=8, choices=Theme.choices, default=Theme.SYSTEM)
    class_view = models.BooleanField(
        default=False, help_text="Hide what a first lesson does not need (headers, ids, timings, the seal)."
    )
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"preferences of user {self.user_id}"


class LearnedCapability(models.Model):
    """A capability the runner learned a model lacks because its provider refused it at run time
    (``auto`` then starts lower): when, why, and on which turn. Resetting it from the profile page
    deletes this row and sets the capability back to unknown."""

    profile = models.ForeignKey(ModelProfile, on_delete=models.CASCADE, related_name="learned_capabilities")
    capability = models.CharField(max_length=24)
    reason = models.TextField(help_text="What the provider said (redacted).")
    learned_at = models.DateTimeField(default=timezone.now)
    turn = models.ForeignKey(Turn, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["profile", "capability"]
        constraints = [
            models.UniqueConstraint(fields=["profile", "capability"], name="learned_capability_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.profile} lacks {self.capability}"


class ModelPrice(models.Model):
    """What a profile's model costs, in US dollars per million tokens (empty: unknown). Shown as
    the cost of each model call and turn; set on the Models page, where its source is named."""

    profile = models.OneToOneField(ModelProfile, on_delete=models.CASCADE, related_name="price")
    input_per_million = models.DecimalField(max_digits=10, decimal_places=4, null=True, blank=True)
    output_per_million = models.DecimalField(max_digits=10, decimal_places=4, null=True, blank=True)
    source = models.CharField(max_length=200, blank=True, help_text="Where the prices come from.")
    updated_by = models.CharField(max_length=150, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"price of {self.profile}"
