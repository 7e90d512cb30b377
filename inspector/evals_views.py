"""The eval pages: a user's suites (typed in or uploaded, edited in place), starting a run, the
run's live progress and its results (the matrix, the description variants side by side, the
failing cases with their conversations), and a suite's runs over time.

Login is enforced by ``LoginRequiredMiddleware``; a suite or run is looked up among the user's
own, so anyone else's is a 404 exactly like a missing one. The run page follows its progress by
polling :func:`run_progress` (one small JSON document for the whole run, however many
conversations it holds) and swaps in :func:`run_results` when the run has finished.
"""

from __future__ import annotations

from uuid import UUID

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from conversations.signed_in import signed_in_user as _user
from inspector import evals_results
from inspector.evals import selectors as eval_selectors
from inspector.evals import services as eval_services
from inspector.evals.comparing import runs_compare
from inspector.evals.models import EvalRun, Suite
from inspector.evals.suites import SuiteError
from inspector.evals_forms import EXAMPLE_SUITE, RunForm, SuiteForm, SuiteUploadForm

STATUS_BAD_REQUEST = 400


def _suite(request: HttpRequest, public_id: UUID) -> Suite:
    """One of the user's suites; anyone else's is a 404, exactly like a missing one."""
    try:
        return eval_selectors.suite_get(user=_user(request), public_id=public_id)
    except Suite.DoesNotExist:
        raise Http404("No such suite.") from None


def _run(request: HttpRequest, public_id: UUID) -> EvalRun:
    """One of the user's runs; anyone else's is a 404, exactly like a missing one."""
    try:
        return eval_selectors.run_get(user=_user(request), public_id=public_id)
    except EvalRun.DoesNotExist:
        raise Http404("No such eval run.") from None


def _results(request: HttpRequest, run: EvalRun) -> evals_results.RunResults | None:
    """A finished run's results as the page shows them, the read of its conversations audited."""
    if not run.is_finished:
        return None
    document = eval_services.run_results_read(run=run, actor=_user(request), via="eval results")
    return evals_results.run_results(run, document)


def _list_page(
    request: HttpRequest,
    form: SuiteForm,
    *,
    upload: SuiteUploadForm | None = None,
    status: int = 200,
) -> HttpResponse:
    suites = eval_selectors.suite_list(user=_user(request))
    context = {
        "suites": evals_results.suite_rows(suites),
        "form": form,
        "upload": upload or SuiteUploadForm(),
    }
    return render(request, "evals/suite_list.html", context, status=status)


def _detail_page(
    request: HttpRequest,
    suite: Suite,
    *,
    form: SuiteForm | None = None,
    run_form: RunForm | None = None,
    status: int = 200,
) -> HttpResponse:
    definition = suite.definition if isinstance(suite.definition, dict) else {}
    context = {
        "suite": suite,
        "summary": evals_results.suite_summary(definition),
        "form": form or SuiteForm(initial={"document": suite.source}),
        "run_form": run_form or RunForm(initial=_run_defaults(suite)),
        "history": evals_results.suite_history(suite),
        "hidden": {
            "name": evals_results.any_hidden(suite.name),
            "source": evals_results.any_hidden(suite.source),
        },
    }
    return render(request, "evals/suite_detail.html", context, status=status)


def _run_defaults(suite: Suite) -> dict[str, int]:
    repeats = suite.definition.get("repeats", 1) if isinstance(suite.definition, dict) else 1
    return {
        "concurrency": EvalRun._meta.get_field("concurrency").get_default(),
        "repeats": repeats if isinstance(repeats, int) else 1,
    }


@require_GET
def suite_list(request: HttpRequest) -> HttpResponse:
    return _list_page(request, SuiteForm(initial={"document": EXAMPLE_SUITE}))


@require_POST
def suite_create(request: HttpRequest) -> HttpResponse:
    form = SuiteForm(request.POST)
    if not form.is_valid():
        return _list_page(request, form, status=STATUS_BAD_REQUEST)
    try:
        suite = eval_services.suite_save_checked(owner=_user(request), text=form.cleaned_data["document"])
    except SuiteError as exc:
        form.add_error("document", str(exc))
        return _list_page(request, form, status=STATUS_BAD_REQUEST)
    return redirect("inspector-eval-suite", public_id=suite.public_id)


@require_POST
def suite_upload(request: HttpRequest) -> HttpResponse:
    upload = SuiteUploadForm(request.POST, request.FILES)
    if not upload.is_valid():
        return _list_page(request, SuiteForm(), upload=upload, status=STATUS_BAD_REQUEST)
    content = upload.content()
    try:
        suite = eval_services.suite_save_checked(owner=_user(request), text=content)
    except SuiteError as exc:
        upload.add_error("file", str(exc))
        # A file that is text goes into the editor, so it can be put right here.
        text = content.decode("utf-8", errors="replace").removeprefix("\ufeff")
        return _list_page(
            request, SuiteForm(initial={"document": text}), upload=upload, status=STATUS_BAD_REQUEST
        )
    return redirect("inspector-eval-suite", public_id=suite.public_id)


@require_GET
def suite_detail(request: HttpRequest, public_id: UUID) -> HttpResponse:
    return _detail_page(request, _suite(request, public_id))


@require_POST
def suite_update(request: HttpRequest, public_id: UUID) -> HttpResponse:
    suite = _suite(request, public_id)
    form = SuiteForm(request.POST)
    if not form.is_valid():
        return _detail_page(request, suite, form=form, status=STATUS_BAD_REQUEST)
    try:
        eval_services.suite_save_checked(
            owner=_user(request), text=form.cleaned_data["document"], suite=suite
        )
    except SuiteError as exc:
        form.add_error("document", str(exc))
        suite.refresh_from_db()  # the page shows the suite as stored beside the text as typed
        return _detail_page(request, suite, form=form, status=STATUS_BAD_REQUEST)
    return redirect("inspector-eval-suite", public_id=suite.public_id)


@require_POST
def suite_delete(request: HttpRequest, public_id: UUID) -> HttpResponse:
    """Delete the suite and its runs (a run still going is cancelled); the conversations they
    asked stay in the owner's list (``evals.services.suite_delete``)."""
    suite = _suite(request, public_id)
    eval_services.suite_delete(suite=suite, actor=_user(request))
    messages.success(request, f"Deleted the suite {suite.name}; its runs' conversations are kept.")
    return redirect("inspector-evals")


@require_POST
def run_create(request: HttpRequest, public_id: UUID) -> HttpResponse:
    suite = _suite(request, public_id)
    run_form = RunForm(request.POST)
    if not run_form.is_valid():
        return _detail_page(request, suite, run_form=run_form, status=STATUS_BAD_REQUEST)
    try:
        run = eval_services.run_start(
            suite=suite,
            user=_user(request),
            concurrency=run_form.cleaned_data["concurrency"],
            repeats=run_form.cleaned_data["repeats"],
        )
    except SuiteError as exc:  # a model or server the suite names is not there, or not the user's
        run_form.add_error(None, f"Not run: {exc}")
        return _detail_page(request, suite, run_form=run_form, status=STATUS_BAD_REQUEST)
    return redirect("inspector-eval-run", public_id=run.public_id)


@require_POST
def run_cancel(request: HttpRequest, public_id: UUID) -> HttpResponse:
    """Start no more of the run's cases and cancel the turns in flight."""
    run = _run(request, public_id)
    eval_services.run_cancel(run=run, actor=_user(request))
    return redirect("inspector-eval-run", public_id=run.public_id)


@require_GET
def run_detail(request: HttpRequest, public_id: UUID) -> HttpResponse:
    run = _run(request, public_id)
    context = {
        "run": run,
        "suite": run.suite,
        "progress": evals_results.run_progress(run),
        "results": _results(request, run),
        "choices": evals_results.baseline_choices(run, None),
    }
    return render(request, "evals/run_detail.html", context)


@require_GET
def run_progress(request: HttpRequest, public_id: UUID) -> JsonResponse:
    """What the page polls: ``evals.selectors.run_progress`` plus ``done`` and ``percent``."""
    run = _run(request, public_id)
    return JsonResponse(evals_results.run_progress(run).as_json())


@require_GET
def run_results(request: HttpRequest, public_id: UUID) -> HttpResponse:
    """The results alone (the page swaps them in when its run has finished)."""
    run = _run(request, public_id)
    context = {
        "run": run,
        "progress": evals_results.run_progress(run),
        "results": _results(request, run),
    }
    return render(request, "evals/_results.html", context)


@require_GET
def run_compare(request: HttpRequest, public_id: UUID) -> HttpResponse:
    """The run compared case by case with a baseline run (``?baseline=<run id>``, one of the
    user's; anyone else's is a 404): what ``eval compare BASELINE RUN`` prints, as
    ``evals.comparing.runs_compare`` computes it. Without a baseline, the picker alone."""
    run = _run(request, public_id)
    baseline: EvalRun | None = None
    chosen = request.GET.get("baseline", "")
    if chosen:
        try:
            baseline = _run(request, UUID(chosen))
        except ValueError:
            raise Http404("No such eval run.") from None
    context = {
        "run": run,
        "suite": run.suite,
        "baseline": baseline,
        "choices": evals_results.baseline_choices(run, baseline),
        "comparison": evals_results.comparison_view(runs_compare(baseline, run)) if baseline else None,
    }
    return render(request, "evals/run_compare.html", context)
