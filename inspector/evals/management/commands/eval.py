"""``manage.py eval``: run an eval suite for CI, list runs, show one, compare two.

``eval run SUITE [--json] [--junit FILE] [--min-accuracy X] [--baseline RUN_ID|latest
[--fail-on-regression]]`` stores the suite file (replacing the
user's suite of the same name, so its runs stay one history) and runs it in this process: each
case is an ordinary conversation handed to the turn dispatcher (the embedded thread pool, or
Celery workers when ``REDIS_URL`` is set). A progress line goes to stderr, and nothing else
until the run ends: the INFO log lines of the turns it runs (each turn sealed...) are held back
while it runs, warnings still show. The results (a table, or with ``--json`` one JSON object) go
to stdout. The exit code is non-zero when the run did not finish, any cell's accuracy is
below ``--min-accuracy``, or, with ``--fail-on-regression``, a cell's pass rate is below the 95%
interval of the baseline run's (``inspector.evals.comparing``). ``eval compare A B`` prints that comparison
of two runs, case by case.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from inspector.evals.comparing import comparison_lines, regression_message, runs_compare
from inspector.evals.driver import run_execute
from inspector.evals.models import EvalRun, Suite
from inspector.evals.reports import junit_xml, progress_line, results_table
from inspector.evals.selectors import (
    Progress,
    run_get,
    run_list,
    run_previous,
    run_results,
    suite_get_by_name,
)
from inspector.evals.services import run_start, suite_save_or_replace
from inspector.evals.suites import MAX_SUITE_CHARS, SuiteError
from servers.models import Operation

# Exit codes a CI script can tell apart (CommandError's own is 1).
EXIT_BELOW_MIN_ACCURACY = 2
EXIT_RUN_UNFINISHED = 3
EXIT_REGRESSION = 4


class Command(BaseCommand):
    help = "Run eval suites (which paradigm, model and tool description gets the call right), list runs, show one."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="action", required=True, metavar="{run,list,show,compare}")
        run = commands.add_parser("run", help="Run a suite file (YAML or JSON) or a stored suite by name.")
        run.add_argument(
            "suite", metavar="SUITE", help="A suite file, or the name of one of your stored suites."
        )
        run.add_argument("--json", action="store_true", help="Print the results as one JSON object.")
        run.add_argument("--junit", metavar="FILE", help="Also write the results as JUnit XML to FILE.")
        run.add_argument(
            "--min-accuracy",
            type=float,
            metavar="X",
            help=f"Exit with code {EXIT_BELOW_MIN_ACCURACY} when any cell's accuracy (0..1) is below X.",
        )
        run.add_argument(
            "--concurrency", type=int, help="Turns in flight at once (default: EVAL_CONCURRENCY)."
        )
        run.add_argument("--repeats", type=int, help="Runs of each case per cell (default: the suite's).")
        run.add_argument(
            "--baseline",
            metavar="RUN_ID",
            help="Compare with this run of yours case by case ('latest': the suite's last finished run).",
        )
        run.add_argument(
            "--fail-on-regression",
            action="store_true",
            help=f"With --baseline: exit with code {EXIT_REGRESSION} when a cell's pass rate is below the 95%% "
            "interval of its pass rate in the baseline.",
        )
        list_ = commands.add_parser("list", help="List your runs, newest first.")
        list_.add_argument("--json", action="store_true")
        list_.add_argument("--limit", type=int, default=50)
        show = commands.add_parser("show", help="Show a run's results.")
        show.add_argument("run_id", metavar="RUN_ID", help="The run's id (a uuid).")
        show.add_argument("--json", action="store_true")
        compare = commands.add_parser("compare", help="Compare two runs case by case (A the baseline).")
        compare.add_argument("baseline", metavar="A", help="The baseline run's id.")
        compare.add_argument("run_id", metavar="B", help="The run to compare with it.")
        compare.add_argument("--json", action="store_true")
        for sub in (run, list_, show, compare):
            sub.add_argument(
                "--user",
                help="The user to act as, who owns the suites and runs (default: the first superuser).",
            )

    def handle(self, *args: Any, **options: Any) -> None:
        user = _owner(options["user"])
        action = options["action"]
        if action == "run":
            self._run(user, options)
        elif action == "list":
            self._list(user, options)
        elif action == "compare":
            comparison = runs_compare(_run_of(user, options["baseline"]), _run_of(user, options["run_id"]))
            self._print_comparison(comparison, as_json=options["json"])
        else:
            self._show(user, options)

    def _run(self, user: AbstractBaseUser, options: dict[str, Any]) -> None:
        minimum: float | None = options["min_accuracy"]
        if minimum is not None and not 0.0 <= minimum <= 1.0:
            raise CommandError("--min-accuracy is a share from 0 to 1, e.g. 0.8")
        if options["fail_on_regression"] and not options["baseline"]:
            raise CommandError("--fail-on-regression needs --baseline RUN_ID (or --baseline latest)")
        suite = _suite(user, options["suite"])
        # Resolved before the run: a baseline that does not exist fails at once, not after it.
        baseline = None
        if options["baseline"] and options["baseline"] != "latest":
            baseline = _run_of(user, options["baseline"])
        with _warnings_only_logged():
            try:
                run = run_start(
                    suite=suite,
                    user=user,
                    concurrency=options["concurrency"],
                    repeats=options["repeats"],
                    dispatch=False,
                    source=Operation.Source.CLI,
                )
            except SuiteError as exc:
                raise CommandError(f"the suite cannot run: {exc}") from None
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            run = run_execute(run=run, on_progress=_ProgressPrinter())
        results = run_results(run)
        if options["baseline"] == "latest":
            baseline = run_previous(run=run)
            if baseline is None:
                self.stderr.write("no earlier finished run of this suite: nothing to compare with")
        comparison = runs_compare(baseline, run) if baseline is not None else None
        if comparison is not None:
            results["baseline"] = comparison
        if options["junit"]:
            Path(options["junit"]).write_text(junit_xml(results), encoding="utf-8")
        self._print_results(results, as_json=options["json"])
        if comparison is not None and not options["json"]:
            for line in comparison_lines(comparison):
                self.stdout.write(line)
        if run.status != EvalRun.Status.DONE:
            raise CommandError(f"the run {run.status}: {run.error}", returncode=EXIT_RUN_UNFINISHED)
        if minimum is not None:
            cells = results["cells"]
            assert isinstance(cells, list)
            below = [
                cell
                for cell in cells
                if isinstance(cell, dict)
                and (not isinstance(cell.get("accuracy"), (int, float)) or cell["accuracy"] < minimum)  # type: ignore[operator]
            ]
            if below:
                names = "; ".join(
                    f"{cell['model']} · {cell['paradigm']} · {cell['variant']} {cell['accuracy']}"
                    for cell in below
                )
                raise CommandError(
                    f"{len(below)} cell(s) below the minimum accuracy {minimum}: {names}",
                    returncode=EXIT_BELOW_MIN_ACCURACY,
                )

        if options["fail_on_regression"] and comparison is not None and comparison["regression"]:
            raise CommandError(
                regression_message(comparison),
                returncode=EXIT_REGRESSION,
            )

    def _print_comparison(self, comparison: Any, *, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(comparison, indent=2))
        else:
            for line in comparison_lines(comparison):
                self.stdout.write(line)

    def _print_results(self, results: Any, *, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps(results, indent=2))
        else:
            for line in results_table(results):
                self.stdout.write(line)

    def _list(self, user: AbstractBaseUser, options: dict[str, Any]) -> None:
        runs = list(run_list(user=user)[: max(1, options["limit"])])
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    [
                        {
                            "run": str(run.public_id),
                            "suite": run.suite.name,
                            "status": run.status,
                            "total": run.total,
                            "finished": run.finished,
                            "passed": run.passed,
                            "created_at": run.created_at.isoformat(),
                        }
                        for run in runs
                    ],
                    indent=2,
                )
            )
            return
        if not runs:
            self.stdout.write("no runs yet: eval run SUITE starts one")
        for run in runs:
            self.stdout.write(
                f"{run.public_id}  {run.created_at:%Y-%m-%d %H:%M}  {run.status:<9}  "
                f"{run.passed}/{run.total} passed  {run.suite.name}"
            )

    def _show(self, user: AbstractBaseUser, options: dict[str, Any]) -> None:
        self._print_results(run_results(_run_of(user, options["run_id"])), as_json=options["json"])


def _run_of(user: AbstractBaseUser, public_id: str) -> EvalRun:
    try:
        return run_get(user=user, public_id=public_id)
    except (EvalRun.DoesNotExist, ValidationError, ValueError):
        raise CommandError(f"no run {public_id!r} of yours") from None


@contextmanager
def _warnings_only_logged() -> Iterator[None]:
    """Log nothing below WARNING while the block runs (the root logger's level, which every logger
    without a level of its own follows): the turns the run starts log an INFO line each (a sealed
    turn, ``conversations.record.integrity``), and on the terminal those would break up the progress line."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        root.setLevel(level)


class _ProgressPrinter:
    """Writes the progress line to stderr when it changes (over itself on a terminal)."""

    def __init__(self) -> None:
        self.last = ""
        self.live = sys.stderr.isatty()

    def __call__(self, progress: Progress) -> None:
        line = progress_line(progress)
        if line == self.last:
            return
        self.last = line
        finished = progress["status"] not in ("queued", "running")
        if self.live:
            sys.stderr.write(f"\r{line}\033[K" + ("\n" if finished else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _suite(user: AbstractBaseUser, name: str) -> Suite:
    """The suite a file holds (stored, replacing the user's suite of its name), else the user's
    stored suite of that name."""
    path = Path(name)
    if path.is_file():
        if path.stat().st_size > MAX_SUITE_CHARS * 4:
            raise CommandError(f"{name}: the file is too big for a suite")
        try:
            return suite_save_or_replace(owner=user, text=path.read_bytes())
        except SuiteError as exc:
            raise CommandError(f"{name}: {exc}") from None
    try:
        return suite_get_by_name(user=user, name=name)
    except Suite.DoesNotExist:
        raise CommandError(f"no suite file {name!r}, and you have no stored suite of that name") from None


def _owner(username: str | None) -> AbstractBaseUser:
    """The named user, else the first superuser (as ``manage.py ask`` does).

    Raises:
        CommandError: no user has that name, or (without ``--user``) there is no superuser.
    """
    users = get_user_model().objects
    if username:
        user = users.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user named {username!r}")
        return user
    superuser = users.filter(is_superuser=True).order_by("pk").first()
    if superuser is None:
        raise CommandError(
            "no superuser to run as: create one (`manage.py createsuperuser`) or name the user with --user NAME"
        )
    return superuser
