"""Optional dependencies: imported where they are used, through :func:`require`.

The core install (numpy, scipy, pandas, tqdm) releases, queries and plans; everything else
is an extra of ``pyproject.toml``.  A missing extra is a :class:`MissingExtraError`, a
:class:`~dpmarginals.core.errors.DPMarginalsError` the CLI prints on one line.

>>> require("json", extra="engines").__name__
'json'
>>> require("no_such_module_xyz", extra="engines", what="counting with DuckDB")
Traceback (most recent call last):
...
dpmarginals.core.extras.MissingExtraError: counting with DuckDB needs the optional 'engines' \
extra: pip install -e '.[engines]' (from a checkout) or pip install 'dpmarginals[engines]'
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any

from .errors import DPMarginalsError

__all__ = ["EXTRAS", "MissingExtraError", "lazy", "message", "require", "require_extra"]

#: extra -> the modules it brings (pyproject.toml's optional dependencies, by import name).
EXTRAS = {
    "demo": ("statsmodels",),
    "plots": ("matplotlib",),
    "engines": ("duckdb", "pyarrow"),
    "central": ("opendp",),
    "tables": ("opendp", "polars", "mbi", "jax"),
    "datasets": ("pooch",),
    "service": ("fastapi", "uvicorn", "psycopg"),
    "pgm": ("mbi", "jax"),
    "spark": ("pyspark", "pyarrow"),
    "experiments": ("sklearn", "matplotlib", "pooch"),
}


class MissingExtraError(DPMarginalsError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, message: str, extra: str, module: str) -> None:
        super().__init__(message)
        self.extra = extra
        self.module = module


def message(extra: str, what: str | None = None, module: str | None = None) -> str:
    """The one-line error for a missing ``extra``."""
    subject = what or (f"{module!r}" if module else "this")
    return (f"{subject} needs the optional {extra!r} extra: pip install -e '.[{extra}]' "
            f"(from a checkout) or pip install 'dpmarginals[{extra}]'")


def require(module: str, extra: str, what: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(message(extra, what, module), extra, module) from None


def require_extra(extra: str, what: str | None = None) -> None:
    """Check that every module of ``extra`` is installed, before any work starts: the first
    missing one is a :class:`MissingExtraError` naming ``extra`` (one line).  Nothing is
    imported (an import can be slow or print warnings: JAX's on mbi's import)."""
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package that is missing or broken
            found = False
        if not found:
            require(module, extra=extra, what=what)


class _Lazy:
    """A module imported on first attribute access (for module-level ``pa = lazy(...)``)."""

    def __init__(self, module: str, extra: str, what: str | None) -> None:
        self._spec = (module, extra, what)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(require(*self._spec), name)

    def __repr__(self) -> str:
        return f"<lazy module {self._spec[0]!r} (extra {self._spec[1]!r})>"


def lazy(module: str, extra: str, what: str | None = None) -> Any:
    """``module``, imported when first used; missing, its use raises :class:`MissingExtraError`.

    >>> pa = lazy("no_such_module_xyz", extra="engines")
    >>> pa.table
    Traceback (most recent call last):
    ...
    dpmarginals.core.extras.MissingExtraError: 'no_such_module_xyz' needs the optional \
'engines' extra: pip install -e '.[engines]' (from a checkout) or pip install \
'dpmarginals[engines]'
    """
    return _Lazy(module, extra, what)
