"""The ``morphz`` command line (click): every command calls the application service."""

from morphz.cli.main import cli, main

__all__ = ["cli", "main"]
