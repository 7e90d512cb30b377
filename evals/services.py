"""Writes about evals: store a suite, start a run, cancel it.

A run is driven step by step by ``evals.driver`` (``run_advance``); ``run_start`` hands a new run
to ``evals.execution.run_dispatch``, which drives it in the background (a Celery task, or a thread
of this process), unless the caller drives it itself (the CLI: ``driver.run_execute``).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from conversations.models import ModelProfile
from conversations.services import DEMO_PROFILE_NAME, demo_profile_ensure
from evals.execution import run_dispatch
from evals.models import EvalCaseResult, EvalCell, EvalRun, Suite
from evals.suites import SuiteDefinition, SuiteError, parse_suite, suite_from_document
from servers.models import McpServer
from servers.selectors import server_get, server_spawn_refusal
from servers.services import DEMO_SERVER_NAME, demo_server_ensure

# One run may not queue more conversations than this (cells × cases × repeats).
MAX_CASE_RUNS = 5000


def suite_save(*, owner: AbstractBaseUser, text: str | bytes, suite: Suite | None = None) -> Suite:
    """Store a suite from its YAML or JSON text: a new one, or ``suite`` changed. The name comes
    from the text; the owner has one suite per name.

    Raises:
        SuiteError: the text is no valid suite, or the owner already has another suite of that
            name (field ``name``).
    """
    definition = parse_suite(text)
    source = text.decode("utf-8") if isinstance(text, bytes) else text
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


def suite_save_or_replace(*, owner: AbstractBaseUser, text: str | bytes) -> Suite:
    """Store a suite from a file, replacing the owner's suite of the same name (the CLI's way:
    the file is the source of truth, and its runs stay one history).

    Raises:
        SuiteError: the text is no valid suite.
    """
    definition = parse_suite(text)
    existing = Suite.objects.filter(owner_id=owner.pk, name=definition.name).first()
    return suite_save(owner=owner, text=text, suite=existing)


def suite_delete(*, suite: Suite) -> None:
    """Delete a suite and its runs (their conversations stay, as ordinary conversations)."""
    suite.delete()


def run_start(
    *,
    suite: Suite,
    user: AbstractBaseUser,
    concurrency: int | None = None,
    repeats: int | None = None,
    dispatch: bool = True,
) -> EvalRun:
    """Create a run of ``suite`` as ``user``: every cell and case run, pending. With
    ``dispatch`` it is driven in the background once this transaction commits
    (``run_dispatch``); without, the caller drives it (``run_execute``).

    ``concurrency`` (default ``EVAL_CONCURRENCY``) bounds the turns in flight; ``repeats``
    (default: the suite's) runs each case that many times per cell.

    Raises:
        SuiteError: the stored definition is invalid, a model profile or server it names does
            not exist or may not be used by ``user`` (the field names which), or the run would
            be too big.
        ValueError: ``concurrency`` or ``repeats`` is below 1.
    """
    definition = suite_from_document(suite.definition)
    repeats = definition.repeats if repeats is None else repeats
    concurrency = int(settings.EVAL_CONCURRENCY) if concurrency is None else concurrency
    if repeats < 1 or concurrency < 1:
        raise ValueError("concurrency and repeats must be at least 1")
    profiles = _profiles(definition)
    servers = _servers(definition, user)
    total = len(definition.cells) * len(definition.cases) * repeats
    if total > MAX_CASE_RUNS:
        raise SuiteError(
            "", f"{total} case runs (cells × cases × repeats): at most {MAX_CASE_RUNS} in one run"
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
                for repeat in range(repeats)
                for index, case in enumerate(definition.cases)
            )
        if dispatch:
            transaction.on_commit(lambda: run_dispatch(run.pk))
    return run


def _profiles(definition: SuiteDefinition) -> dict[str, ModelProfile]:
    profiles: dict[str, ModelProfile] = {}
    for index, name in enumerate(definition.models):
        if name == DEMO_PROFILE_NAME:
            profiles[name] = demo_profile_ensure()
            continue
        profile = ModelProfile.objects.filter(name=name, imported_by__isnull=True).first()
        if profile is None:
            raise SuiteError(f"models[{index}]", f"no model profile named {name!r}")
        profiles[name] = profile
    return profiles


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


def run_cancel(*, run: EvalRun) -> EvalRun:
    """Stop a run: no more cases start; the turns in flight run to their end (each can be
    cancelled on its conversation's page) and are not graded. Cancelling twice changes nothing."""
    with transaction.atomic():
        run = EvalRun.objects.select_for_update().get(pk=run.pk)
        if not run.is_finished:
            run.mark_cancelled("cancelled before every case had run")
            run.save()
    return run
