"""What the ``server`` and ``proxy`` commands share: a stdio server's own command line after
``--`` is split off before argparse reads the rest (argparse would not give it, options of its
own included, to a positional after an option such as ``--timeout``), and the MCP SDK's
deprecation warnings said as one plain line, only when asked for (``-v 2``), never as Python's
file-line-and-source display."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandParser
from mcp import MCPDeprecationWarning

# From this verbosity on (``-v 2``) each distinct SDK deprecation is printed once.
SHOW_DEPRECATIONS_FROM = 2


@contextmanager
def plain_sdk_deprecations(verbosity: int, write: Callable[[str], Any]) -> Iterator[None]:
    """While the block runs, the SDK's ``MCPDeprecationWarning`` is one plain line (at
    ``verbosity`` 2 or more, once per message) or nothing; other warnings are shown as before.

    The SDK warns about its own API (an argument left out, a method of an older protocol
    revision) on each call, which says nothing a user can act on that the command does not say
    itself. Warnings are process-wide (the gateway's loop runs on another thread): the hook is
    installed for the whole command.
    """
    seen: set[str] = set()
    shown = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if not issubclass(category, MCPDeprecationWarning):
            shown(message, category, filename, lineno, file, line)
            return
        text = " ".join(str(message).split())
        if verbosity >= SHOW_DEPRECATIONS_FROM and text not in seen:
            seen.add(text)
            write(f"note: the MCP SDK says: {text}")

    with warnings.catch_warnings():
        # Every occurrence reaches the hook, which says each message once.
        warnings.filterwarnings("always", category=MCPDeprecationWarning)
        warnings.showwarning = show
        yield


class StdioCommandLine(BaseCommand):
    """A management command whose arguments may end in ``-- COMMAND [ARGS...]``, kept in
    ``stdio_command``. Used by the terminal and by ``call_command`` alike."""

    stdio_command: list[str] = []

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parse_args = parser.parse_args

        def split_then_parse(args: Any = None, namespace: Any = None) -> Any:
            arguments = list(args) if args is not None else []
            if "--" in arguments:
                split = arguments.index("--")
                arguments, self.stdio_command = arguments[:split], arguments[split + 1 :]
            return parse_args(arguments, namespace)

        parser.parse_args = split_then_parse  # type: ignore[method-assign]
        return parser

    def execute(self, *args: Any, **options: Any) -> Any:
        # ``self.stderr`` is what ``super().execute`` sets it to by the time anything warns.
        with plain_sdk_deprecations(int(options.get("verbosity") or 1), lambda text: self.stderr.write(text)):
            return super().execute(*args, **options)
