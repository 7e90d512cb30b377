"""The ``server`` command's sub-commands that live beside it (``servers/management/commands/server.py``)."""
