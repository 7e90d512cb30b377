"""Handlers of ``manage.py server`` subcommands that live outside the command's own module."""
