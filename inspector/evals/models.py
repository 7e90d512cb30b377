"""Eval suites, their runs, each run's cells (model × paradigm × variant) and each case's result.

A suite is stored as the validated document (``evals.suites.SuiteDefinition.as_json``) plus the
text it was written in. A run freezes the document it ran, so editing the suite later changes no
result; every case of every cell runs as an ordinary recorded conversation, which the case's
result points at.
"""

from __future__ import annotations

import uuid
from decimal import Decimal

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from conversations.typealias import JSONDict


def default_concurrency() -> int:
    """How many turns a new run keeps in flight at once: ``EVAL_CONCURRENCY`` (4)."""
    return int(settings.EVAL_CONCURRENCY)


class Suite(models.Model):
    """A named eval suite of one user: what to run (models, paradigms, servers, variants) and the
    cases with what each expects."""

    class Format(models.TextChoices):
        JSON = "json"
        YAML = "yaml"

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="eval_suites")
    name = models.CharField(max_length=200)
    # The validated document (evals.suites.SuiteDefinition.as_json()): what runs read.
    definition = models.JSONField(default=dict)
    # The text as its author wrote it (comments and key order kept), shown again for editing.
    source = models.TextField(blank=True)
    source_format = models.CharField(max_length=4, choices=Format.choices, default=Format.JSON)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="eval_suite_owner_name_unique")]

    def __str__(self) -> str:
        return self.name


class EvalRun(models.Model):
    """One execution of a suite: every case in every cell, ``repeats`` times, at most
    ``concurrency`` turns at once. ``total`` and ``finished`` are the progress (case runs)."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        CANCELLED = "cancelled"

    FINISHED = frozenset({Status.DONE, Status.FAILED, Status.CANCELLED})

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    suite = models.ForeignKey(Suite, on_delete=models.CASCADE, related_name="runs")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="eval_runs")
    # The suite's document as it was when the run started, and the servers its names resolved to.
    definition = models.JSONField(default=dict)
    servers = models.ManyToManyField("servers.McpServer", blank=True, related_name="+")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    concurrency = models.PositiveIntegerField(default=default_concurrency, validators=[MinValueValidator(1)])
    repeats = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    # Progress, in case runs (a case × a cell × a repeat): how many there are, how many ended.
    total = models.PositiveIntegerField(default=0)
    finished = models.PositiveIntegerField(default=0)
    passed = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    # Who drives the run now: a process (``conversations.lifecycle.runner_name``: the CLI, a thread
    # of a web process) or a Celery task chain (``celery:<token>``). Every step the driver takes
    # saves the row, so ``updated_at`` is its heartbeat; a run whose driver is gone is taken over
    # (``evals.execution.runs_resume_stale``).
    driver = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["suite", "-created_at"], name="eval_run_suite_created_idx")]

    def __str__(self) -> str:
        return f"run of {self.suite_id} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def progress(self) -> float:
        """The share of case runs that have ended, 0..1."""
        return self.finished / self.total if self.total else (1.0 if self.is_finished else 0.0)

    def mark_running(self) -> None:
        self.status = self.Status.RUNNING
        self.started_at = self.started_at or timezone.now()

    def mark_done(self) -> None:
        self.status = self.Status.DONE
        self.finished_at = timezone.now()

    def mark_failed(self, error: str) -> None:
        self.status = self.Status.FAILED
        self.error = error
        self.finished_at = timezone.now()

    def mark_cancelled(self, error: str) -> None:
        self.status = self.Status.CANCELLED
        self.error = error
        self.finished_at = timezone.now()


class EvalCell(models.Model):
    """One model × paradigm × variant of a run; its numbers are summed from its case results."""

    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="cells")
    position = models.PositiveIntegerField()
    model = models.CharField(max_length=80, help_text="The model profile's name, as the suite names it.")
    profile = models.ForeignKey(
        "conversations.ModelProfile", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    paradigm = models.CharField(max_length=16)
    variant = models.CharField(max_length=80)
    # The variant's overrides of tool definitions, keyed server/tool (evals.suites.ToolOverride as JSON):
    # each conversation of this cell offers its tools with them (conversations.loop.tool_overrides).
    overrides = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["run", "position"]
        constraints = [models.UniqueConstraint(fields=["run", "position"], name="eval_cell_position_unique")]

    def __str__(self) -> str:
        return f"{self.model} · {self.paradigm} · {self.variant}"


class EvalCaseResult(models.Model):
    """One case of a cell, one repeat: the conversation it ran as, and how it was graded."""

    class Status(models.TextChoices):
        PENDING = "pending"  # not started yet (waits for a free slot)
        RUNNING = "running"  # its turn is queued or running
        PASSED = "passed"
        FAILED = "failed"
        CANCELLED = "cancelled"  # the run was cancelled while its turn was in flight: not graded

    class Failure(models.TextChoices):
        WRONG_TOOL = "wrong_tool", "wrong tool"
        WRONG_ARGUMENTS = "wrong_arguments", "wrong arguments"
        NO_CALL = "no_call", "no call"
        EXTRA_CALL = "extra_call", "extra call"
        WRONG_ORDER = "wrong_order", "wrong order"
        PARSE_FAILURE = "parse_failure", "parse failure"
        VALIDATION_FAILURE = "validation_failure", "validation failure"
        WRONG_ANSWER = "wrong_answer", "wrong answer"
        ERROR = "error", "turn failed"

    cell = models.ForeignKey(EvalCell, on_delete=models.CASCADE, related_name="results")
    case_index = models.PositiveIntegerField()
    repeat = models.PositiveIntegerField(default=0)
    question = models.TextField()
    conversation = models.ForeignKey(
        "conversations.Conversation", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The conversation in which the case's judge (a model-graded check, ``evals.judging``) was
    # asked: recorded like any other, owned by the run's owner, so the verdict can be audited.
    judge_conversation = models.ForeignKey(
        "conversations.Conversation", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    failure = models.CharField(max_length=20, choices=Failure.choices, blank=True)
    reason = models.TextField(blank=True)
    # The tool calls the turn made, as graded: [{"tool": "server/tool", "arguments": {...}}].
    calls = models.JSONField(default=list, blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    # What the tool definitions alone weigh as input, every model call counted (a variant's
    # wording changes it): conversations.pricing.tool_definitions_tokens.
    definition_tokens = models.PositiveIntegerField(default=0)
    # How many model requests carried those definitions: definition_tokens / this is one
    # request's weight (a case that ends after one call is not "cheaper" per request).
    definition_requests = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=14, decimal_places=8, null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cell", "case_index", "repeat"]
        constraints = [
            models.UniqueConstraint(fields=["cell", "case_index", "repeat"], name="eval_case_result_unique")
        ]
        indexes = [models.Index(fields=["conversation"], name="eval_case_conversation_idx")]

    def __str__(self) -> str:
        return f"case {self.case_index} of cell {self.cell_id}: {self.status}"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.PASSED, self.Status.FAILED)

    def mark_graded(
        self,
        *,
        failure: str,
        reason: str,
        calls: list[JSONDict],
        input_tokens: int,
        output_tokens: int,
        definition_tokens: int,
        cost: Decimal | None,
        latency_ms: int | None,
        definition_requests: int = 0,
    ) -> None:
        """Record the grade: passed when ``failure`` is empty."""
        self.status = self.Status.FAILED if failure else self.Status.PASSED
        self.failure = failure
        self.reason = reason
        self.calls = calls
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.definition_tokens = definition_tokens
        self.definition_requests = definition_requests
        self.cost = cost
        self.latency_ms = latency_ms
        self.finished_at = timezone.now()
