"""``manage.py proxy``: proxy keys, and the stdio MCP proxy a host runs in place of a server.

proxy key create --user USER [--name NAME] [--openai-upstream URL] [--anthropic-upstream URL]
                 [--gemini-upstream URL]     prints the key once; its last line is the key alone
proxy key list [--user USER]
proxy key revoke PREFIX_OR_ID
proxy stdio --key KEY --name NAME [--session S] -- COMMAND [ARGS...]
                                             run COMMAND behind the recording proxy
                                             (the key may come from INSPECTOR_PROXY_KEY instead)

``proxy stdio`` writes nothing of its own to stdout (that is the host's channel): its few notes
go to stderr beside the server's. docs/proxy-mcp.md.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, CommandParser

from conversations.proxy.keys import create_key, revoke
from conversations.proxy.models import ProxyKey
from servers.commandline import StdioCommandLine
from servers.proxy.service import proxy_stdio

KEY_ENV = "INSPECTOR_PROXY_KEY"
MIN_PREFIX = 6


class Command(StdioCommandLine):
    help = "Proxy keys, and the recording stdio MCP proxy (docs/proxy-mcp.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        key = sub.add_parser("key", help="create, list or revoke proxy keys")
        key_sub = key.add_subparsers(dest="key_action", required=True)
        create = key_sub.add_parser("create", help="make a key; it is printed once, on the last line")
        create.add_argument("--user", required=True, help="the username whose traffic it records")
        create.add_argument("--name", default="")
        create.add_argument("--openai-upstream", default="")
        create.add_argument("--anthropic-upstream", default="")
        create.add_argument("--gemini-upstream", default="")
        listing = key_sub.add_parser("list", help="the keys (their prefixes, never the keys)")
        listing.add_argument("--user", default="")
        gone = key_sub.add_parser("revoke", help="revoke a key by its prefix or id")
        gone.add_argument("key")
        stdio = sub.add_parser(
            "stdio", help="run a stdio MCP server behind the recording proxy: -- COMMAND [ARGS...]"
        )
        stdio.add_argument("--key", default="", help=f"the proxy key (default: ${KEY_ENV})")
        stdio.add_argument("--name", required=True, help="the server's name in the record")
        stdio.add_argument(
            "--session", default=None, help="record into this session (else by inactivity gap)"
        )
        stdio.add_argument("command", nargs="*", help="-- COMMAND [ARGS...]")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "stdio":
            self._stdio(options)
            return
        {"create": self._create, "list": self._list, "revoke": self._revoke}[options["key_action"]](options)

    def _create(self, options: dict[str, Any]) -> None:
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"no user {options['user']!r}")
        key, raw = create_key(
            user,
            name=options["name"],
            openai_upstream=options["openai_upstream"],
            anthropic_upstream=options["anthropic_upstream"],
            gemini_upstream=options["gemini_upstream"],
        )
        self.stdout.write(f"Proxy key {key.pk} for {options['user']} ({key.prefix}…). It is shown once, now:")
        self.stdout.write(raw)

    def _list(self, options: dict[str, Any]) -> None:
        keys = ProxyKey.objects.select_related("user").order_by("-created_at")
        if options["user"]:
            keys = keys.filter(user__username=options["user"])
        for key in keys:
            state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "active"
            used = f"last used {key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never used"
            self.stdout.write(
                f"{key.pk}\t{key.prefix}…\t{key.user.get_username()}\t{key.name or '-'}\t{state}\t{used}"
            )

    def _revoke(self, options: dict[str, Any]) -> None:
        wanted = options["key"].rstrip("…").strip()
        if wanted.isdigit():
            found = list(ProxyKey.objects.filter(pk=int(wanted)))
        elif len(wanted) < MIN_PREFIX:
            raise CommandError(f"give the key's id or at least {MIN_PREFIX} characters of its prefix")
        else:
            found = list(ProxyKey.objects.filter(prefix__startswith=wanted))
        if len(found) != 1:
            raise CommandError(
                f"{'no key' if not found else f'{len(found)} keys'} match {wanted!r}: give its id or a longer prefix"
            )
        revoke(found[0])
        self.stdout.write(f"Revoked key {found[0].pk} ({found[0].prefix}…).")

    def _stdio(self, options: dict[str, Any]) -> None:
        raw_key = options["key"] or os.environ.get(KEY_ENV, "")
        command = self.stdio_command or options["command"]
        if not raw_key:
            raise CommandError(f"give the proxy key: --key KEY or ${KEY_ENV}")
        if not command:
            raise CommandError("give the server's command after --: proxy stdio --key K --name N -- COMMAND")
        try:
            code = proxy_stdio(command, raw_key=raw_key, name=options["name"], session=options["session"])
        except OSError as exc:
            raise CommandError(f"could not start {command[0]!r}: {exc}") from None
        sys.stdout.flush()
        sys.exit(code)
