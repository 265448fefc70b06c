"""argparse pieces shared by every ``dpmarginals`` subcommand: one-line errors, value types.

``--epsilon`` is refused above :data:`~dpmarginals.core.errors.EPSILON_CEILING` (20), as
the Python API, the device and the service refuse it, with the same message: a budget that
large protects nobody (a report is e^20 times likelier under the true value).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn

from ..core.errors import DPMarginalsError, check_budget

__all__ = [
    "OneLineParser",
    "epsilon",
    "hide_secrets",
    "non_negative_int",
    "number_in",
    "open_fraction",
    "positive_int",
    "seed",
    "validated",
]


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line: ``dpmarginals: error: ... (see PROG --help)``.

    Subcommands' errors start with the program's name alone, like every other error.
    """

    def error(self, message: str) -> NoReturn:
        program = self.prog.split()[0] if self.prog else "dpmarginals"
        self.exit(2, f"{program}: error: {hide_secrets(message)} (see {self.prog} --help)\n")


def hide_secrets(message: str) -> str:
    """argparse's message with the values of unrecognized options hidden: it repeats
    unrecognized arguments, and a mistyped ``--analyst-tokn SECRET`` must not print the
    secret (issue #33).  Option names and lone arguments stay.

    >>> hide_secrets("unrecognized arguments: --analyst-tokn s3cret --x=1 extra.csv")
    'unrecognized arguments: --analyst-tokn <hidden> --x=<hidden> extra.csv'
    >>> hide_secrets("ambiguous option: --tok=s3cret could match --token, --token-file")
    'ambiguous option: --tok=<hidden> could match --token, --token-file'
    """
    for head in ("unrecognized arguments: ", "ambiguous option: "):
        if message.startswith(head):
            words = message[len(head):].split(" ")
            for i, word in enumerate(words):
                if word.startswith("-") and "=" in word:
                    words[i] = word.split("=", 1)[0] + "=<hidden>"
                elif (head[0] == "u" and i and not word.startswith("-")
                      and words[i - 1].startswith("-") and "=" not in words[i - 1]):
                    words[i] = "<hidden>"
            return head + " ".join(words)
    return message


def validated(check: Callable[[str], object]) -> Callable[[str], object]:
    """An argparse type from a checker that raises :class:`DPMarginalsError`."""

    def convert(text: str) -> object:
        try:
            return check(text)
        except DPMarginalsError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = getattr(check, "__name__", "value")
    return convert


def _int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what} >= {minimum}, got {value}")
        return value

    return convert


#: A whole number >= 1.
positive_int = _int_at_least(1, "a whole number")
#: A whole number >= 0.
non_negative_int = _int_at_least(0, "a whole number")
#: A simulation seed: a whole number >= 0 (what numpy's SeedSequence accepts).
seed = _int_at_least(0, "an integer seed")


def number_in(low: float, high: float, *, low_open: bool = True,
              high_open: bool = True) -> Callable[[str], float]:
    """A float type accepting values between ``low`` and ``high`` (open ends by default)."""

    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        if not (above and below):
            span = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
            raise argparse.ArgumentTypeError(f"expected a number in {span}, got {value:g}")
        return value

    return convert


epsilon = validated(check_budget)
open_fraction = number_in(0.0, 1.0)
