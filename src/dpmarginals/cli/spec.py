"""Subcommands as data: each ``cli`` module lists its :class:`Command` s, and
:func:`add_commands` builds them into argparse.

A command's arguments are :func:`arg` s (``add_argument``'s flags and keywords) and
:class:`Group` s of them; a command with actions of its own (``campaign create``, ...)
names them in :class:`Actions`.  A keyword value that is :class:`Later` is computed when
the parser is built, not when its table is imported.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Actions", "Arg", "Command", "Group", "Later", "add_command", "add_commands", "arg"]

#: What runs a command: its parsed arguments in, the exit status out.
Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Later:
    """A keyword value made when the parser is built (e.g. a help text naming every
    method, which imports them all)."""

    make: Callable[[], Any]


@dataclass(frozen=True)
class Arg:
    """One ``add_argument``: its flags (or positional name) and keywords."""

    flags: tuple[str, ...]
    options: Mapping[str, Any]


def arg(*flags: str, **options: Any) -> Arg:
    """``Arg(flags, options)`` in ``add_argument``'s own spelling."""
    return Arg(flags, options)


@dataclass(frozen=True)
class Group:
    """An ``add_argument_group`` titled ``title``, holding ``args``."""

    title: str
    args: tuple[Arg, ...]


@dataclass(frozen=True)
class Actions:
    """A command's own subcommands (``add_subparsers``); ``allow_abbrev=False``: their
    options must be spelled in full."""

    dest: str
    metavar: str
    commands: tuple[Command, ...]
    allow_abbrev: bool = True


@dataclass(frozen=True)
class Command:
    """One subcommand: its ``add_parser`` keywords, its arguments in order, and what runs
    it (``run``; None: print the command's help and return 2, as a command of
    :class:`Actions` does when given none)."""

    name: str
    help: str
    run: Handler | None
    description: str | None = None
    epilog: str | None = None
    args: tuple[Arg | Group, ...] = ()
    parser_options: Mapping[str, Any] = field(default_factory=dict)
    actions: Actions | None = None


def add_commands(subparsers: Any, commands: Iterable[Command]) -> None:
    """Add ``commands`` in order to ``subparsers`` (an ``add_subparsers()`` action)."""
    for command in commands:
        add_command(subparsers, command)


def add_command(subparsers: Any, command: Command) -> argparse.ArgumentParser:
    """Add ``command`` to ``subparsers``; its parser."""
    parser = subparsers.add_parser(command.name, help=command.help,
                                   description=command.description, epilog=command.epilog,
                                   **command.parser_options)
    for item in command.args:
        if isinstance(item, Group):
            group = parser.add_argument_group(item.title)
            for one in item.args:
                _add_argument(group, one)
        else:
            _add_argument(parser, item)
    actions = command.actions
    if actions is not None:
        parser_class = type(parser) if actions.allow_abbrev else _no_abbreviations(type(parser))
        add_commands(parser.add_subparsers(dest=actions.dest, metavar=actions.metavar,
                                           parser_class=parser_class), actions.commands)
    parser.set_defaults(func=command.run or _help_of(parser))
    return parser


def _add_argument(container: Any, argument: Arg) -> None:
    options = {key: value.make() if isinstance(value, Later) else value
               for key, value in argument.options.items()}
    container.add_argument(*argument.flags, **options)


def _help_of(parser: argparse.ArgumentParser) -> Handler:
    """A command given no action: its help, and status 2."""
    def print_help(args: argparse.Namespace) -> int:
        parser.print_help()
        return 2

    return print_help


def _no_abbreviations(parser_class: type) -> type:
    """``parser_class`` without argparse's abbreviations (a prefix of ``--token-file``
    would take a token as a file name)."""
    class Exact(parser_class):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["allow_abbrev"] = False
            super().__init__(*args, **kwargs)

    return Exact
