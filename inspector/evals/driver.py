"""Driving a run, one short step at a time (``run_advance``): grade the case runs whose turns
have ended, start pending ones while fewer than the run's ``concurrency`` turns are in flight
(each an ordinary conversation, queued through ``conversations.services.conversation_start`` and
so handed to the same dispatcher as any turn: the embedded thread pool, or Celery workers), and
mark the run done when every case run has ended. ``run_execute`` takes those steps in the
caller's thread until the end (the CLI, the embedded driver thread); the Celery task
``evals.tasks.advance_run`` takes one and queues itself again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from conversations.lifecycle import runner_name
from conversations.loop.providers import USAGE_INPUT_KEYS, USAGE_OUTPUT_KEYS
from conversations.models import Step, Turn
from conversations.pricing import tool_definitions_requests, tool_definitions_tokens, turn_cost
from conversations.services import TurnNotCancellable, conversation_start, turn_cancel
from conversations.typealias import JSONValue
from inspector.evals.grading import Grade, MadeCall, TurnFacts, grade_case, is_parse_problem
from inspector.evals.judging import judge_grade, judge_overdue, judge_start
from inspector.evals.models import EvalCaseResult, EvalRun
from inspector.evals.selectors import Progress, run_progress
from inspector.evals.suites import Case, Judge, SuiteDefinition, suite_from_document
from servers.models import McpServer

_NOT_SENT = "not sent: "

ProgressCallback = Callable[[Progress], None]


def run_advance(*, run: EvalRun, driver: str = "") -> bool:
    """One step of a run (see the module's docstring); returns whether its driver should stop:
    the run has finished, or another driver has taken it over.

    ``driver`` names who takes the step (``EvalRun.driver``): the first step claims an undriven
    run for it, and a driver whose run was taken over (``execution.runs_resume_stale``) changes
    nothing. Safe to call from several processes at once: the run's row is locked for the step,
    and each case run is claimed by one conditional UPDATE (``case_claim``), so a duplicate or
    redelivered step never starts the same case twice.
    """
    with transaction.atomic():
        locked = EvalRun.objects.select_for_update().select_related("owner").filter(pk=run.pk).first()
        if locked is None or locked.is_finished:  # None: deleted with its suite
            return True
        run = locked
        if driver:
            if run.driver and run.driver != driver:
                return True
            run.driver = driver
        if run.status == EvalRun.Status.QUEUED:
            run.mark_running()
        definition = suite_from_document(run.definition)
        in_flight = 0
        running = (
            EvalCaseResult.objects.filter(cell__run=run, status=EvalCaseResult.Status.RUNNING)
            .select_related("cell__profile", "conversation", "judge_conversation")
            .order_by("pk")
        )
        for result in running:
            turn = _case_turn(result)
            if turn is not None and not turn.is_finished:
                in_flight += 1
                continue
            if turn is not None and turn.status == Turn.Status.INTERRUPTED:
                # Its runner died (a process stopped): no verdict on the model; asked again.
                _retry(result)
                continue
            case = definition.cases[result.case_index]
            facts, grade = _facts_and_grade(case, turn)
            if grade.passed and case.judge is not None:
                judged = _judge_step(run, result, case.judge, facts)
                if judged is None:  # the judge has not answered yet
                    in_flight += 1
                    continue
                grade = judged
            _grade(result, turn, facts, grade)
            run.finished += 1
            run.passed += result.status == EvalCaseResult.Status.PASSED
        free = run.concurrency - in_flight
        if free > 0:
            pending = (
                EvalCaseResult.objects.filter(cell__run=run, status=EvalCaseResult.Status.PENDING)
                .select_related("cell__profile")
                .order_by("repeat", "case_index", "cell__position")[:free]
            )
            servers = list(run.servers.all())
            for result in pending:
                in_flight += _start_case(run, definition, result, servers)
        if in_flight == 0 and run.finished >= run.total:
            run.mark_done()
        run.save()
        return run.is_finished


def case_claim(*, result: EvalCaseResult) -> bool:
    """Move a pending case run to running, atomically; False if it was not pending (another
    step started it). Of two steps for the same case run only one gets True."""
    now = timezone.now()
    claimed = EvalCaseResult.objects.filter(pk=result.pk, status=EvalCaseResult.Status.PENDING).update(
        status=EvalCaseResult.Status.RUNNING, started_at=now
    )
    if claimed:
        result.status, result.started_at = EvalCaseResult.Status.RUNNING, now
    return claimed == 1


def _retry(result: EvalCaseResult) -> None:
    """Put a case run whose turn was interrupted back to pending; the interrupted conversation
    stays among the owner's conversations, as recorded."""
    result.status = EvalCaseResult.Status.PENDING
    result.conversation = None
    result.judge_conversation = None
    result.started_at = None
    result.save(update_fields=["status", "conversation", "judge_conversation", "started_at"])


def _case_turn(result: EvalCaseResult, *, judge: bool = False) -> Turn | None:
    """The first turn of the case's conversation (with ``judge``, of its judge's)."""
    conversation = result.judge_conversation if judge else result.conversation
    if conversation is None:
        return None
    return conversation.turns.order_by("seq").first()


def _start_case(
    run: EvalRun, definition: SuiteDefinition, result: EvalCaseResult, servers: list[McpServer]
) -> int:
    """Start the case run's turn; returns how many turns that put in flight (0 or 1)."""
    if not case_claim(result=result):
        return 0
    cell = result.cell
    if cell.profile is None:
        result.mark_graded(
            failure=EvalCaseResult.Failure.ERROR,
            reason=f"the model profile {cell.model!r} was deleted",
            calls=[],
            input_tokens=0,
            output_tokens=0,
            definition_tokens=0,
            cost=None,
            latency_ms=None,
        )
        result.save()
        run.finished += 1
        return 0
    conversation, _ = conversation_start(
        owner=run.owner,
        model_profile=cell.profile,
        question=result.question,
        servers=servers,
        paradigm=cell.paradigm,
        tool_choice=definition.tool_choice,
        tool_choice_name=definition.tool,
    )
    result.conversation = conversation
    result.save(update_fields=["conversation"])
    return 1


def _facts_and_grade(case: Case, turn: Turn | None) -> tuple[TurnFacts, Grade]:
    """The case's grade by its own checks (its judge, if any, comes after: ``_judge_step``)."""
    if turn is None:
        grade = Grade(
            EvalCaseResult.Failure.ERROR, "the case's conversation was deleted before it was graded"
        )
        return TurnFacts(status="failed", error=grade.reason, answer="", calls=()), grade
    facts = turn_facts(turn)
    return facts, grade_case(case, facts)


def _judge_step(run: EvalRun, result: EvalCaseResult, judge: Judge, facts: TurnFacts) -> Grade | None:
    """One step of a case's judge (``evals.judging``): start its conversation, or wait for it
    (None: not answered yet), or grade by its verdict; a judge past ``EVAL_JUDGE_SECONDS`` is
    cancelled and the case graded ``error``. Its turn interrupted (its runner died): asked again."""
    if result.judge_conversation is None:
        conversation = judge_start(owner=run.owner, judge=judge, question=result.question, facts=facts)
        if conversation is None:
            return Grade(
                EvalCaseResult.Failure.ERROR,
                f"the judge's model profile {judge.profile!r} was deleted (or is now the demo)",
            )
        result.judge_conversation = conversation
        result.save(update_fields=["judge_conversation"])
        return None
    turn = _case_turn(result, judge=True)
    if turn is None:
        return Grade(EvalCaseResult.Failure.ERROR, "the judge's conversation holds no turn")
    if turn.status == Turn.Status.INTERRUPTED:
        result.judge_conversation = None
        result.save(update_fields=["judge_conversation"])
        return None
    if not turn.is_finished:
        if not judge_overdue(turn, timezone.now()):
            return None
        try:
            turn_cancel(turn=turn, actor=None)
        except TurnNotCancellable:  # it ended meanwhile: graded at the next step
            return None
        return Grade(
            EvalCaseResult.Failure.ERROR,
            f"the judge ({judge.profile}) gave no verdict within {float(settings.EVAL_JUDGE_SECONDS):g} s; "
            "its turn was cancelled",
        )
    usages = Step.objects.filter(turn=turn).exclude(usage={}).values_list("usage", flat=True)
    return judge_grade(judge, turn, sum(_usage_count(usage, USAGE_OUTPUT_KEYS) for usage in usages))


def _grade(result: EvalCaseResult, turn: Turn | None, facts: TurnFacts, grade: Grade) -> None:
    usages = (
        list(Step.objects.filter(turn=turn).exclude(usage={}).values_list("usage", flat=True)) if turn else []
    )
    profile = result.cell.profile
    cost = turn_cost(turn, profile) if turn is not None and profile is not None else None
    latency = None
    if turn is not None and turn.started_at is not None and turn.finished_at is not None:
        latency = max(0, int((turn.finished_at - turn.started_at).total_seconds() * 1000))
    result.mark_graded(
        failure=grade.failure,
        reason=grade.reason,
        calls=[call.as_json() for call in facts.calls],
        input_tokens=sum(_usage_count(usage, USAGE_INPUT_KEYS) for usage in usages),
        output_tokens=sum(_usage_count(usage, USAGE_OUTPUT_KEYS) for usage in usages),
        definition_tokens=tool_definitions_tokens(turn) if turn is not None else 0,
        definition_requests=tool_definitions_requests(turn) if turn is not None else 0,
        cost=cost.total if cost is not None else None,
        latency_ms=latency,
    )
    result.save()


def _usage_count(usage: JSONValue, keys: tuple[str, ...]) -> int:
    if not isinstance(usage, dict):
        return 0
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def turn_facts(turn: Turn) -> TurnFacts:
    """What grading reads of a finished turn: its calls (from its ``tool`` steps, with the
    host's verdict on each) and the parse problems its model steps noted."""
    calls: list[MadeCall] = []
    problems: list[str] = []
    for step in Step.objects.filter(turn=turn).order_by("seq"):
        if step.kind == Step.Kind.TOOL:
            tool = f"{step.server_name}/{step.tool_name}" if step.server_name else step.tool_name
            rejected = step.error.removeprefix(_NOT_SENT) if step.error.startswith(_NOT_SENT) else ""
            arguments = step.arguments if isinstance(step.arguments, dict) else None
            calls.append(MadeCall(tool=tool, arguments=arguments, rejected=rejected))
        elif step.kind in (Step.Kind.DECIDE, Step.Kind.ANSWER, Step.Kind.ERROR):
            problems.extend(_parse_problems(step))
    return TurnFacts(
        status=turn.status, error=turn.error, answer=turn.answer, calls=calls, parse_problems=problems
    )


def _parse_problems(step: Step) -> list[str]:
    """The diagnostics of a model step that say its reply could not be read."""
    texts = [item for item in step.diagnostics if isinstance(item, str)] + (
        [step.error] if step.error else []
    )
    return [text for text in texts if is_parse_problem(text)]


def run_execute(
    *,
    run: EvalRun,
    on_progress: ProgressCallback | None = None,
    poll_seconds: float | None = None,
    driver: str | None = None,
) -> EvalRun:
    """Drive ``run`` to its end in this thread (the CLI, the embedded driver thread), calling
    ``on_progress`` after each step, as ``driver`` (default: this process,
    ``conversations.lifecycle.runner_name``); it stops early when another driver took the run
    over or the run was deleted. A step that fails marks the run failed and re-raises."""
    wait = float(settings.EVAL_POLL_SECONDS) if poll_seconds is None else poll_seconds
    driver = runner_name() if driver is None else driver
    try:
        while True:
            finished = run_advance(run=run, driver=driver)
            if finished and not EvalRun.objects.filter(pk=run.pk).exists():
                return run
            run.refresh_from_db()
            if on_progress is not None:
                on_progress(run_progress(run=run))
            if finished:
                return run
            time.sleep(wait)
    except Exception as exc:
        run_fail(run=run, error=f"the run could not go on: {type(exc).__name__}: {exc}")
        raise


def run_fail(*, run: EvalRun, error: str) -> None:
    """Mark an unfinished run failed, saying why (a run that has finished is left alone)."""
    EvalRun.objects.filter(pk=run.pk).exclude(status__in=EvalRun.FINISHED).update(
        status=EvalRun.Status.FAILED, error=error[:2000]
    )
