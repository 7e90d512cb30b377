"""Writes about evals: store or delete a suite, start a run, cancel it, and show a run's results
(a read, audited per conversation).

A run is driven step by step by ``evals.driver`` (``run_advance``); ``run_start`` hands a new run
to ``evals.execution.run_dispatch``, which drives it in the background (a Celery task, or a thread
of this process), unless the caller drives it itself (the CLI: ``driver.run_execute``).
"""

from __future__ import annotations

import difflib

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from conversations.models import Conversation, ModelProfile, Turn
from conversations.record.audit import audit_reads
from conversations.secret_sources import active_redactor
from conversations.services import DEMO_PROFILE_NAME, TurnNotCancellable, demo_profile_ensure, turn_cancel
from conversations.typealias import JSONDict
from inspector.evals.execution import run_dispatch
from inspector.evals.models import EvalCaseResult, EvalCell, EvalRun, Suite
from inspector.evals.selectors import run_results
from inspector.evals.suites import SuiteDefinition, SuiteError, parse_suite, suite_from_document
from servers.mcp_apps import model_visible
from servers.models import McpServer, Operation
from servers.selectors import server_get, server_spawn_refusal
from servers.services import DEMO_SERVER_NAME, SpawnRefused, demo_server_ensure, operation_start

# One run may not queue more conversations than this (cells × each case's repeats).
MAX_CASE_RUNS = 5000


def suite_save(*, owner: AbstractBaseUser, text: str | bytes, suite: Suite | None = None) -> Suite:
    """Store a suite from its YAML or JSON text: a new one, or ``suite`` changed. The name comes
    from the text; the owner has one suite per name.

    Raises:
        SuiteError: the text is no valid suite, or the owner already has another suite of that
            name (field ``name``).
    """
    definition = parse_suite(text)
    # Stored, shown and asked as redacted, like a question typed on the page: a secret pasted
    # into a suite goes nowhere (the markers are plain text inside the strings they replace).
    redact = active_redactor()
    definition = suite_from_document(redact.json(definition.as_json()))
    source = redact.text(text.decode("utf-8") if isinstance(text, bytes) else text)
    source_format = (
        Suite.Format.JSON if source.lstrip().removeprefix("\ufeff").startswith("{") else Suite.Format.YAML
    )
    clash = Suite.objects.filter(owner_id=owner.pk, name=definition.name)
    if suite is not None:
        clash = clash.exclude(pk=suite.pk)
    if clash.exists():
        raise SuiteError("name", f"you already have a suite named {definition.name!r}")
    if suite is None:
        suite = Suite(owner_id=owner.pk)
    suite.name = definition.name
    suite.definition = definition.as_json()
    suite.source = source
    suite.source_format = source_format
    suite.save()
    return suite


def suite_save_checked(
    *,
    owner: AbstractBaseUser,
    text: str | bytes,
    suite: Suite | None = None,
    source: str = Operation.Source.WEB,
) -> Suite:
    """``suite_save`` for the page and the API: the suite is stored only once it passes
    ``suite_check`` (its models, servers and every tool it names exist for ``owner`` now), so a
    misspelt tool is refused where it is typed, naming the field, not at its first run.

    Raises:
        SuiteError: as ``suite_save`` and ``suite_check``.
    """
    suite_check(definition=parse_suite(text), user=owner, source=source)
    return suite_save(owner=owner, text=text, suite=suite)


def suite_save_or_replace(
    *, owner: AbstractBaseUser, text: str | bytes, source: str = Operation.Source.CLI
) -> Suite:
    """Store a suite from a file, replacing the owner's suite of the same name (the CLI's way:
    the file is the source of truth, and its runs stay one history) — once it passes
    ``suite_check``: a refused file never replaces the stored suite.

    Raises:
        SuiteError: the text is no valid suite, or names a model, server or tool that does not
            exist (``suite_check``).
    """
    definition = parse_suite(text)
    suite_check(definition=definition, user=owner, source=source)
    existing = Suite.objects.filter(owner_id=owner.pk, name=definition.name).first()
    return suite_save(owner=owner, text=text, suite=existing)


def suite_delete(*, suite: Suite, actor: AbstractBaseUser | None = None) -> None:
    """Delete a suite with its runs, their cells and their grades. The conversations the runs
    asked stay, as ordinary conversations of their owner: they are the record of what was sent
    and received (each keeps its recorded tool definitions, the variant's wording included), and
    deleting them is the conversation list's business. A run still going is cancelled first
    (``run_cancel`` as ``actor``), so no turn of it is left running."""
    for run in EvalRun.objects.filter(suite=suite).exclude(status__in=EvalRun.FINISHED):
        run_cancel(run=run, actor=actor)
    suite.delete()


def run_results_read(*, run: EvalRun, actor: AbstractBaseUser, via: str) -> JSONDict:
    """The run's results (``selectors.run_results``) as shown to ``actor`` through ``via`` (the
    page, the API), with a read-audit entry for each conversation the run holds
    (``conversations.record.audit.audit_reads``; subject ``eval run <id>``): the results show what each
    conversation asked, called and answered, as a comparison shows its runs. Access is the
    caller's to check (``selectors.run_get``)."""
    results = run_results(run)
    cases = EvalCaseResult.objects.filter(cell__run=run)
    audit_reads(
        actor=actor,
        conversations=Conversation.objects.filter(
            Q(pk__in=cases.filter(conversation__isnull=False).values("conversation_id"))
            | Q(pk__in=cases.filter(judge_conversation__isnull=False).values("judge_conversation_id"))
        ),
        via=via,
        subject=f"eval run {run.public_id}",
        detail={"eval_run": str(run.public_id)},
    )
    return results


def run_start(
    *,
    suite: Suite,
    user: AbstractBaseUser,
    concurrency: int | None = None,
    repeats: int | None = None,
    dispatch: bool = True,
    source: str = Operation.Source.WEB,
) -> EvalRun:
    """Create a run of ``suite`` as ``user``: every cell and case run, pending. With
    ``dispatch`` it is driven in the background once this transaction commits
    (``run_dispatch``); without, the caller drives it (``run_execute``).

    ``concurrency`` (default ``EVAL_CONCURRENCY``) bounds the turns in flight; ``repeats``
    (default: the suite's) runs each case that many times per cell, but a case that states its
    own ``repeats`` runs that many times. The tools of each server
    a description variant rewords are listed first (a workbench operation of ``user`` from
    ``source``, on the record like any listing), so that a variant naming a tool or parameter
    the server does not have is refused rather than silently changing nothing.

    Raises:
        SuiteError: the stored definition is invalid, a model profile or server it names does
            not exist or may not be used by ``user``, a variant names a tool or a parameter its
            server does not offer, or a server's tools could not be listed to check that (the
            field names which), or the run would be too big.
        ValueError: ``concurrency`` or ``repeats`` is below 1.
    """
    definition = suite_from_document(suite.definition)
    repeats = definition.repeats if repeats is None else repeats
    concurrency = int(settings.EVAL_CONCURRENCY) if concurrency is None else concurrency
    if repeats < 1 or concurrency < 1:
        raise ValueError("concurrency and repeats must be at least 1")
    profiles, servers = suite_check(definition=definition, user=user, source=source)
    per_case = definition.case_repeats(repeats)
    total = len(definition.cells) * sum(per_case)
    if total > MAX_CASE_RUNS:
        raise SuiteError(
            "", f"{total} case runs (cells × each case's repeats): at most {MAX_CASE_RUNS} in one run"
        )
    with transaction.atomic():
        run = EvalRun.objects.create(
            suite=suite,
            owner_id=user.pk,
            definition=definition.as_json(),
            concurrency=concurrency,
            repeats=repeats,
            total=total,
        )
        run.servers.set(servers)
        for position, (model, paradigm, variant) in enumerate(definition.cells):
            overrides = {tool: override.as_json() for tool, override in definition.variants[variant].items()}
            cell = EvalCell.objects.create(
                run=run,
                position=position,
                model=model,
                profile=profiles[model],
                paradigm=paradigm,
                variant=variant,
                overrides=overrides,
            )
            EvalCaseResult.objects.bulk_create(
                EvalCaseResult(cell=cell, case_index=index, repeat=repeat, question=case.question)
                for repeat in range(max(per_case))
                for index, case in enumerate(definition.cases)
                if repeat < per_case[index]
            )
        if dispatch:
            transaction.on_commit(lambda: run_dispatch(run.pk))
    return run


def suite_check(
    *, definition: SuiteDefinition, user: AbstractBaseUser, source: str
) -> tuple[dict[str, ModelProfile], list[McpServer]]:
    """Everything a suite names exists for ``user`` now: its models (profiles), its servers, and
    every tool it names — a variant's, a case's expected call's, the ``named`` tool_choice's —
    among the tools those servers list (``_tools_check``). A mistake in the suite is refused
    here, naming the field, so it is never run and graded as if the model had failed.

    Raises:
        SuiteError: naming the field and, for a tool, the closest name the server has.
    """
    profiles = _profiles(definition)
    _judges_check(definition)
    servers = _servers(definition, user)
    _tools_check(definition, servers, user, source)
    return profiles, servers


def _profiles(definition: SuiteDefinition) -> dict[str, ModelProfile]:
    profiles: dict[str, ModelProfile] = {}
    for index, name in enumerate(definition.models):
        if name == DEMO_PROFILE_NAME:
            profiles[name] = demo_profile_ensure()
            continue
        profile = ModelProfile.objects.filter(name=name, imported_by__isnull=True).first()
        if profile is None:
            raise SuiteError(f"models[{index}]", _no_such_profile(name))
        profiles[name] = profile
    return profiles


def _judges_check(definition: SuiteDefinition) -> None:
    """Every case's judge names a model profile that exists and is no demo: the demo model
    cannot judge (its replies follow rules about tools, not rubrics; docs/evals.md).

    Raises:
        SuiteError: at ``cases[N].judge.profile``, with the closest real profile name.
    """
    for index, case in enumerate(definition.cases):
        if case.judge is None:
            continue
        where = f"cases[{index}].judge.profile"
        name = case.judge.profile
        profile = ModelProfile.objects.filter(name=name, imported_by__isnull=True).first()
        if name == DEMO_PROFILE_NAME or (profile is not None and profile.is_demo):
            raise SuiteError(where, "the demo model cannot judge; choose a real profile")
        if profile is None:
            raise SuiteError(where, _no_such_profile(name))


def _no_such_profile(name: str) -> str:
    names = list(ModelProfile.objects.filter(imported_by__isnull=True).values_list("name", flat=True))
    closest = difflib.get_close_matches(name, names, n=1)
    hint = f"; did you mean {closest[0]!r}?" if closest else ""
    return f"no model profile named {name!r}{hint}"


def _servers(definition: SuiteDefinition, user: AbstractBaseUser) -> list[McpServer]:
    servers: list[McpServer] = []
    for index, name in enumerate(definition.servers):
        if name == DEMO_SERVER_NAME:
            servers.append(demo_server_ensure())
            continue
        try:
            server = server_get(user=user, name=name)
        except McpServer.DoesNotExist:
            raise SuiteError(f"servers[{index}]", f"no MCP server named {name!r} that you may use") from None
        refusal = server_spawn_refusal(server=server, user=user)
        if refusal:
            raise SuiteError(f"servers[{index}]", refusal)
        servers.append(server)
    return servers


def _named_tools(definition: SuiteDefinition) -> list[tuple[str, str]]:
    """Every ``server/tool`` the suite names outside its variants, with the field naming it."""
    named = [
        (f"cases[{index}].expect[{position}].tool", expected.tool)
        for index, case in enumerate(definition.cases)
        for position, expected in enumerate(case.expect)
    ]
    if definition.tool_choice == "named" and definition.tool:
        named.append(("tool", definition.tool))
    return named


def _tools_check(
    definition: SuiteDefinition, servers: list[McpServer], user: AbstractBaseUser, source: str
) -> None:
    """Every ``server/tool`` the suite names — a case's expected call, the ``named`` tool, a
    variant's key — and every parameter a variant names, is one the server offers the model now.

    Raises:
        SuiteError: naming the field (``cases[0].expect[0].tool``, ``tool``,
            ``variants.terse.demo/get_weather``,
            ``variants.terse.demo/get_weather_forecast.parameters.town``) with the closest real
            name, or the server (``servers[0]``) whose tools could not be listed.
    """
    named = _named_tools(definition)
    used = {key.partition("/")[0] for overrides in definition.variants.values() for key in overrides}
    used |= {tool.partition("/")[0] for _, tool in named}
    offered = {
        server.name: _tools_offered(server, user, source, f"servers[{index}]")
        for index, server in enumerate(servers)
        if server.name in used
    }
    for variant, overrides in definition.variants.items():
        for key, override in overrides.items():
            where = f"variants.{variant}.{key}"
            server_name, _, tool_name = key.partition("/")
            tools = offered.get(server_name)
            if tools is None:
                raise SuiteError(where, f"server {server_name!r} is not among the suite's servers")
            if tool_name not in tools:
                raise SuiteError(where, _no_such_tool(server_name, tool_name, sorted(tools)))
            parameters = tools[tool_name]
            for parameter in override.parameters:
                if parameter not in parameters:
                    takes = ", ".join(parameters) or "no parameters"
                    raise SuiteError(
                        f"{where}.parameters.{parameter}", f"no such parameter of {key}; it takes {takes}"
                    )
    for where, key in named:
        server_name, _, tool_name = key.partition("/")
        tools = offered.get(server_name)
        if tools is None:
            servers_named = ", ".join(definition.servers) or "none"
            raise SuiteError(
                where, f"server {server_name!r} is not among the suite's servers ({servers_named})"
            )
        if tool_name not in tools:
            raise SuiteError(where, _no_such_tool(server_name, tool_name, sorted(tools)))


def _tools_offered(
    server: McpServer, user: AbstractBaseUser, source: str, where: str
) -> dict[str, tuple[str, ...]]:
    """The tools ``server`` offers the model now, by name, each with its parameters' names.

    Raises:
        SuiteError: at ``where``, when they could not be listed.
    """
    try:
        listing = operation_start(server=server, user=user, kind=Operation.Kind.TOOLS_LIST, source=source)
    except SpawnRefused as exc:
        raise SuiteError(where, str(exc)) from None
    if listing.status != Operation.Status.OK or not isinstance(listing.result, list):
        problem = listing.error or f"the listing ended {listing.status}"
        raise SuiteError(
            where, f"its tools could not be listed to check the tools the suite names: {problem}"
        )
    offered: dict[str, tuple[str, ...]] = {}
    for tool in listing.result:
        if not isinstance(tool, dict) or not model_visible(tool):
            continue
        schema = tool.get("inputSchema")
        properties = schema.get("properties") if isinstance(schema, dict) else None
        offered[str(tool.get("name"))] = tuple(properties) if isinstance(properties, dict) else ()
    return offered


def _no_such_tool(server_name: str, tool_name: str, tools: list[str]) -> str:
    closest = difflib.get_close_matches(tool_name, tools, n=1)
    hint = f"; did you mean {server_name}/{closest[0]}?" if closest else ""
    return f"no such tool{hint} ({server_name} offers {', '.join(tools) or 'no tools'})"


def run_cancel(*, run: EvalRun, actor: AbstractBaseUser | None = None) -> EvalRun:
    """Stop a run: no more cases start, and the turns in flight are cancelled
    (``conversations.services.turn_cancel`` as ``actor``; None: the command line); their case runs
    end ``cancelled``, ungraded, and each conversation keeps what it recorded and says who
    cancelled. The run ends ``cancelled``. Cancelling twice, or a finished run, changes nothing."""
    with transaction.atomic():
        run = EvalRun.objects.select_for_update().get(pk=run.pk)
        if run.is_finished:
            return run
        in_flight = list(
            EvalCaseResult.objects.filter(cell__run=run, status=EvalCaseResult.Status.RUNNING).select_related(
                "conversation"
            )
        )
        stopped = sum(1 for result in in_flight if result.conversation is not None)
        who = actor.get_username() if actor is not None else "the command line"
        reason = f"cancelled by {who}"
        run.mark_cancelled(
            f"{reason}: {run.finished} of {run.total} case runs had ended; "
            f"{stopped} in flight were cancelled, the rest never started"
        )
        run.save()
        EvalCaseResult.objects.filter(pk__in=[result.pk for result in in_flight]).update(
            status=EvalCaseResult.Status.CANCELLED, reason=reason, finished_at=timezone.now()
        )
    # After the commit: a step of the driver that starts now finds the run over and starts nothing.
    for turn in Turn.objects.filter(
        conversation__in=[result.conversation for result in in_flight if result.conversation is not None],
        status__in=(Turn.Status.QUEUED, Turn.Status.RUNNING),
    ).select_related("conversation"):
        try:
            turn_cancel(turn=turn, actor=actor)
        except TurnNotCancellable:  # it ended meanwhile
            continue
    return run
