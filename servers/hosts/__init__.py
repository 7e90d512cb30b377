"""A server's tools as each host presents them (``reports``) and its readiness for them (``check``).

The presets themselves, and the rewriting, are in ``conversations.loop.hosts`` (a turn run "as
host H" uses them too); docs/hosts.md describes every rule and the ``--json`` documents.
"""
