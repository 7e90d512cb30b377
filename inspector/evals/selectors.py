"""Reads about evals: a user's suites and runs (others' are not found), a run's progress and its
results in the one shape the CLI's ``--json``, the REST API and the pages share, and the
overrides an eval conversation's tools get (the source ``evals.apps`` registers)."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import TypedDict
from uuid import UUID

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import Prefetch, QuerySet

from conversations.models import Conversation
from conversations.pricing import definitions_cost
from conversations.typealias import JSONDict
from inspector.evals.comparing import CellKey, Tally, below_baseline, history_compared, runs_cell_tallies
from inspector.evals.models import EvalCaseResult, EvalCell, EvalRun, Suite
from inspector.evals.statistics import CaseRun, cell_statistics

FAILURE_CLASSES: tuple[str, ...] = tuple(EvalCaseResult.Failure.values)


class Progress(TypedDict):
    """How far a run is: case runs in all, ended, passed, and running now."""

    status: str
    total: int
    finished: int
    passed: int
    running: int
    fraction: float


def suite_list(*, user: AbstractBaseUser) -> QuerySet[Suite]:
    """The user's suites, by name."""
    return Suite.objects.filter(owner_id=user.pk).order_by("name")


def suite_get(*, user: AbstractBaseUser | AnonymousUser, public_id: UUID | str) -> Suite:
    """Raises ``Suite.DoesNotExist`` for a suite that is not the user's (or no such id)."""
    if not user.is_authenticated:
        raise Suite.DoesNotExist
    return Suite.objects.get(owner_id=user.pk, public_id=public_id)


def suite_get_by_name(*, user: AbstractBaseUser, name: str) -> Suite:
    """Raises ``Suite.DoesNotExist`` when the user has no suite of that name."""
    return Suite.objects.get(owner_id=user.pk, name=name)


def run_list(*, user: AbstractBaseUser, suite: Suite | None = None) -> QuerySet[EvalRun]:
    """The user's runs, newest first (of one suite, if given)."""
    runs = EvalRun.objects.filter(owner_id=user.pk).select_related("suite")
    return runs.filter(suite=suite) if suite is not None else runs


def run_get(*, user: AbstractBaseUser | AnonymousUser, public_id: UUID | str) -> EvalRun:
    """Raises ``EvalRun.DoesNotExist`` for a run that is not the user's (or no such id)."""
    if not user.is_authenticated:
        raise EvalRun.DoesNotExist
    return EvalRun.objects.select_related("suite").get(owner_id=user.pk, public_id=public_id)


def run_progress(*, run: EvalRun) -> Progress:
    """The run's progress numbers (from its row, plus how many turns are in flight now)."""
    running = EvalCaseResult.objects.filter(cell__run=run, status=EvalCaseResult.Status.RUNNING).count()
    return Progress(
        status=run.status,
        total=run.total,
        finished=run.finished,
        passed=run.passed,
        running=running,
        fraction=round(run.progress, 4),
    )


def progress_json(progress: Progress) -> JSONDict:
    """``Progress`` as a JSON object (the same keys)."""
    return {
        "status": progress["status"],
        "total": progress["total"],
        "finished": progress["finished"],
        "passed": progress["passed"],
        "running": progress["running"],
        "fraction": progress["fraction"],
    }


def run_previous(*, run: EvalRun) -> EvalRun | None:
    """The suite's last finished run before ``run``: what its regressions are measured against."""
    return (
        EvalRun.objects.filter(
            suite_id=run.suite_id, status=EvalRun.Status.DONE, created_at__lte=run.created_at
        )
        .exclude(pk=run.pk)
        .order_by("-created_at", "-pk")
        .first()
    )


def run_history(*, suite: Suite, limit: int = 50) -> list[JSONDict]:
    """The suite's runs over time, oldest first (the last ``limit``): each run's id, when, status,
    passed of finished case runs, accuracy (0..1, null before any ended) and whether, done, it
    has a cell below the finished run before it by the gate's rule (``regression``:
    ``comparing.below_baseline``; per cell, ``run_results`` says which)."""
    runs = list(EvalRun.objects.filter(suite=suite).order_by("-created_at", "-pk")[:limit])[::-1]
    entries = history_compared(runs, before=run_previous(run=runs[0]) if runs else None)
    history: list[JSONDict] = []
    for entry in entries:
        run = entry.run
        accuracy = run.passed / run.finished if run.finished else None
        history.append(
            {
                "run": str(run.public_id),
                "created_at": run.created_at.isoformat(),
                "status": run.status,
                "passed": run.passed,
                "finished": run.finished,
                "total": run.total,
                "accuracy": round(accuracy, 4) if accuracy is not None else None,
                "regression": bool(entry.below),
            }
        )
    return history


def run_results(run: EvalRun) -> JSONDict:
    """The run as one JSON object: what ``eval run --json`` prints and the API returns.

    ``{"run", "suite", "status", "error", "created_at", "started_at", "finished_at",
    "concurrency", "repeats", "progress": Progress, "previous_run", "regression",
    "cells": [cell, ...]}`` where each cell is ``{"model", "paradigm", "variant", "cases",
    "passed", "accuracy" (0..1; null before any case ended), "finished", one count per failure
    class ("wrong_tool", "wrong_arguments", "no_call", "extra_call", "parse_failure",
    "validation_failure", "wrong_answer", "error"), "input_tokens", "output_tokens",
    "definition_tokens" (every request counted), "definition_requests",
    "definition_tokens_per_request", "definition_tokens_per_case", "definition_cost" (what those
    tokens cost as input, US dollars as a string; null without a price), the statistics of
    ``inspector.evals.statistics.cell_statistics`` ("pass_rate", "pass_rate_ci", "k",
    "pass_at_k", "pass_hat_k", "latency_ms_mean", "latency_ms_p95", "tokens_per_case",
    "cost_per_case"), "cost" (US dollars as a string; null without a price), "latency_ms"
    (mean per case), "conversations" (uuids, in case order), "results" ([{"case", "repeat",
    "status", "failure", "conversation", "judge_conversation"}], every case run), "failures"
    ([{"case", "repeat", "question", "failure", "reason", "conversation", "judge_conversation"}];
    ``judge_conversation``: where a case's judge was asked, or null), "previous_accuracy", "regression"}``.
    ``cases`` counts case runs (each case × its repeats).
    """
    previous = run_previous(run=run)
    before = runs_cell_tallies([previous]).get(previous.pk, {}) if previous is not None else {}
    cells = [_cell_json(cell, before) for cell in _cells(run)]
    return {
        "run": str(run.public_id),
        "suite": run.suite.name,
        "suite_id": str(run.suite.public_id),
        "status": run.status,
        "error": run.error,
        "created_at": run.created_at.isoformat(),
        "started_at": run.started_at.isoformat() if run.started_at else None,
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "concurrency": run.concurrency,
        "repeats": run.repeats,
        "progress": progress_json(run_progress(run=run)),
        "previous_run": str(previous.public_id) if previous is not None else None,
        "regression": any(cell["regression"] for cell in cells),
        "cells": cells,  # type: ignore[dict-item]
    }


def _cells(run: EvalRun) -> list[EvalCell]:
    return list(
        EvalCell.objects.filter(run=run)
        .select_related("profile__price", "run")
        .order_by("position")
        .prefetch_related(
            Prefetch(
                "results",
                queryset=EvalCaseResult.objects.order_by("case_index", "repeat").select_related(
                    "conversation", "judge_conversation"
                ),
            )
        )
    )


def _accuracy(results: list[EvalCaseResult]) -> float | None:
    ended = [result for result in results if result.is_finished]
    if not ended:
        return None
    return sum(1 for result in ended if result.status == EvalCaseResult.Status.PASSED) / len(ended)


def _cell_json(cell: EvalCell, before: dict[CellKey, Tally]) -> JSONDict:
    results = list(cell.results.all())
    ended = [result for result in results if result.is_finished]
    passed = sum(1 for result in ended if result.status == EvalCaseResult.Status.PASSED)
    failures = Counter(result.failure for result in ended if result.failure)
    costs = [result.cost for result in ended if result.cost is not None]
    latencies = [result.latency_ms for result in ended if result.latency_ms is not None]
    accuracy = _accuracy(results)
    definition_tokens = sum(result.definition_tokens for result in ended)
    definition_requests = sum(result.definition_requests for result in ended)
    # Priced as the conversation page and Compare price them (conversations.pricing).
    definition_cost = definitions_cost(definition_tokens, cell.profile) if cell.profile is not None else None
    previous = before.get((cell.model, cell.paradigm, cell.variant))
    data: JSONDict = {
        "model": cell.model,
        "paradigm": cell.paradigm,
        "variant": cell.variant,
        "cases": len(results),
        "finished": len(ended),
        "passed": passed,
        "accuracy": round(accuracy, 4) if accuracy is not None else None,
    }
    for name in FAILURE_CLASSES:
        data[name] = failures.get(name, 0)
    data.update(
        cell_statistics(  # type: ignore[arg-type]
            (
                CaseRun(
                    case=result.case_index,
                    passed=result.status == EvalCaseResult.Status.PASSED,
                    latency_ms=result.latency_ms,
                    tokens=result.input_tokens + result.output_tokens,
                    cost=result.cost,
                )
                for result in ended
            ),
            k=cell.run.repeats,
            case_k=_case_repeats(cell.run),
        )
    )
    data.update(
        {
            "input_tokens": sum(result.input_tokens for result in ended),
            "output_tokens": sum(result.output_tokens for result in ended),
            "definition_tokens": definition_tokens,
            # One request's weight, and a case's (a case of one call against one of two weighs
            # its definitions once, not half as much per request).
            "definition_requests": definition_requests,
            "definition_tokens_per_request": (
                round(definition_tokens / definition_requests) if definition_requests else None
            ),
            "definition_tokens_per_case": round(definition_tokens / len(ended)) if ended else None,
            "definition_cost": str(definition_cost) if definition_cost is not None else None,
            "cost": str(sum(costs, Decimal(0))) if costs else None,
            "latency_ms": round(sum(latencies) / len(latencies)) if latencies else None,
            "conversations": [
                str(result.conversation.public_id) for result in results if result.conversation is not None
            ],
            "results": [
                {
                    "case": result.case_index,
                    "repeat": result.repeat,
                    "question": result.question,
                    "status": result.status,
                    "failure": result.failure,
                    "latency_ms": result.latency_ms,
                    "conversation": str(result.conversation.public_id) if result.conversation else None,
                    "judge_conversation": (
                        str(result.judge_conversation.public_id) if result.judge_conversation else None
                    ),
                }
                for result in results
            ],
            "failures": [
                {
                    "case": result.case_index,
                    "repeat": result.repeat,
                    "question": result.question,
                    "failure": result.failure,
                    "reason": result.reason,
                    "conversation": str(result.conversation.public_id) if result.conversation else None,
                    "judge_conversation": (
                        str(result.judge_conversation.public_id) if result.judge_conversation else None
                    ),
                }
                for result in ended
                if result.failure
            ],
            "previous_accuracy": round(previous[0] / previous[1], 4) if previous and previous[1] else None,
            "regression": previous is not None and below_baseline((passed, len(ended)), previous),
        }
    )
    return data


def _case_repeats(run: EvalRun) -> dict[int, int]:
    """The repeats of the run's cases that state their own (by case index), from the definition
    the run was started with."""
    cases = run.definition.get("cases") if isinstance(run.definition, dict) else None
    return {
        index: case["repeats"]
        for index, case in enumerate(cases if isinstance(cases, list) else [])
        if isinstance(case, dict) and isinstance(case.get("repeats"), int)
    }


def conversation_overrides(conversation: Conversation) -> dict[str, JSONDict]:
    """The tool-definition overrides of the eval cell the conversation runs a case of (empty
    for any other conversation): the source registered with ``conversations.loop.tool_overrides``."""
    # Every turn asks this, as its connect step is being written (P2): read by the case result
    # alone, by the conversation's id, unordered (the cells' default order, by their run's
    # creation time, joined a third table, and any order is built for nothing: a conversation
    # runs one case).
    found = (
        EvalCaseResult.objects.filter(conversation_id=conversation.pk)
        .order_by()
        .values_list("cell__overrides", flat=True)[:1]
    )
    overrides = next(iter(found), None)
    return dict(overrides) if isinstance(overrides, dict) else {}
