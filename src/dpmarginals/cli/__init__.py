"""The ``dpmarginals`` command: one module per group of subcommands."""

from .commands import main

__all__ = ["main"]
