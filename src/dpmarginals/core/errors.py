"""Errors a user can cause.  The CLI prints their message on one line and exits 2."""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np


class DPMarginalsError(ValueError):
    """Bad input: the message names the field and the offending value."""


class DataNotFoundError(DPMarginalsError, FileNotFoundError):
    """A data set is not available locally and could not be downloaded."""


def check_writable(path: str | os.PathLike[str], option: str = "--out") -> None:
    """Raise :class:`DPMarginalsError` unless a file can be written at ``path``: its folder
    exists and is writable, and ``path`` is not a folder.  Checked before a release spends
    any budget, so a typo in ``--out`` loses no work and no privacy.

    >>> check_writable("/no/r.json")
    Traceback (most recent call last):
    ...
    dpmarginals.core.errors.DPMarginalsError: --out '/no/r.json': no such directory '/no'
    """
    target = Path(path)
    parent = target.parent
    if not parent.is_dir():
        raise DPMarginalsError(f"{option} {str(path)!r}: no such directory {str(parent)!r}")
    if target.is_dir():
        raise DPMarginalsError(f"{option} {str(path)!r} is a directory; name a file in it")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise DPMarginalsError(f"{option} {str(path)!r}: permission denied (cannot write "
                               f"{'it' if target.exists() else 'in ' + repr(str(parent))})")


def describe_os_error(exc: OSError, path: str | os.PathLike[str] | None = None) -> str:
    """Why an OSError happened, as one readable phrase (for "cannot write PATH: ...").

    ``exc.strerror`` is None when a library raises an OSError with a message only (pandas:
    "Cannot save file into a non-existent directory"), so fall back to the message; when
    ``path``'s folder is missing, say that.

    >>> describe_os_error(OSError("boom")), describe_os_error(FileNotFoundError(2, "No such"))
    ('boom', 'no such')
    >>> describe_os_error(OSError(), "/nonexistent/x.csv")
    "no such directory '/nonexistent'"
    """
    if path is not None:
        parent = Path(path).parent
        if not parent.exists():
            return f"no such directory {str(parent)!r}"
        if not parent.is_dir():
            return f"{str(parent)!r} is not a directory"
    reason = exc.strerror or str(exc) or type(exc).__name__
    return reason[:1].lower() + reason[1:]


EPSILON_CEILING = 20.0
"""The largest per-report or release epsilon anything here accepts for a real release or a
device (e^20 is about 5e8: no privacy is left); one cap and one message everywhere."""


def check_budget(epsilon: object, field: str = "epsilon") -> float:
    """A budget someone may publish under or a device may spend: a finite number in
    (0, :data:`EPSILON_CEILING`], else the one message every command gives.

    >>> check_budget(25)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dpmarginals.core.errors.DPMarginalsError: epsilon = 25.0 exceeds 20, beyond any ...
    """
    value = check_epsilon(epsilon, field)  # type: ignore[arg-type]
    if value > EPSILON_CEILING:
        raise DPMarginalsError(f"{field} = {value!r} exceeds {EPSILON_CEILING:g}, beyond any "
                               "meaningful privacy")
    return value


def check_epsilon(epsilon: float, field: str = "epsilon") -> float:
    """Validate a privacy budget: a finite number > 0."""
    try:
        value = float(epsilon)
    except (TypeError, ValueError):
        raise DPMarginalsError(f"{field} must be a number, got {epsilon!r}") from None
    if not (value > 0 and value < float("inf")):
        raise DPMarginalsError(f"{field} must be a finite number > 0, got {epsilon!r}")
    return value


def check_k(k: object, d: int | None = None) -> int:
    """k: an integer >= 1 (and <= d when d is given)."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise DPMarginalsError(f"k must be an integer >= 1, got {k!r}")
    if d is not None and k > d:
        raise DPMarginalsError(f"k = {k} exceeds the number of attributes d = {d}")
    return int(k)


def check_positive_int(value: object, field_name: str, minimum: int = 1) -> int:
    """An integer (anything with ``__index__``, not a bool) that is at least ``minimum``."""
    if isinstance(value, bool):
        raise DPMarginalsError(f"{field_name} must be an integer, got {value!r}")
    try:
        out = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise DPMarginalsError(f"{field_name} must be an integer, got {value!r}") from None
    if out < minimum:
        raise DPMarginalsError(f"{field_name} must be an integer >= {minimum}, got {value!r}")
    return out


def check_choice(value: object, field_name: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise DPMarginalsError(f"{field_name} must be one of {list(choices)}, got {value!r}")
    return str(value)


class PrivacyLeakWarning(UserWarning):
    """Something about to be published was read off the private data (as diffprivlib warns)."""
