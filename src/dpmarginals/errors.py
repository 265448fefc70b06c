"""Errors a user can cause.  The CLI prints their message on one line and exits 2."""

from __future__ import annotations


class DPMarginalsError(ValueError):
    """Bad input: the message names the field and the offending value."""


class DataNotFoundError(DPMarginalsError, FileNotFoundError):
    """A data set is not available locally and could not be downloaded."""


def check_epsilon(epsilon: float, field: str = "epsilon") -> float:
    """Validate a privacy budget: a finite number > 0."""
    try:
        value = float(epsilon)
    except (TypeError, ValueError):
        raise DPMarginalsError(f"{field} must be a number, got {epsilon!r}") from None
    if not (value > 0 and value < float("inf")):
        raise DPMarginalsError(f"{field} must be a finite number > 0, got {epsilon!r}")
    return value
