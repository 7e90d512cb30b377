"""What the ``server`` and ``proxy`` commands share: a stdio server's own command line after
``--`` is split off before argparse reads the rest (argparse would not give it, options of its
own included, to a positional after an option such as ``--timeout``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser


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
