"""Shared test set-up: the ``needs_data`` marker for tests on the papers' real data sets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: Why a ``needs_data`` test skipped, and what an outside contributor sets to run it.
DATA_REASON = ("needs the papers' data sets: set DPMARGINALS_DATA to a folder holding them "
               "(`dpmarginals datasets` lists them and their public sources; see README "
               "'Data sets')")


def data_dir() -> Path | None:
    """``$DPMARGINALS_DATA`` when it names an existing folder, else None."""
    home = os.environ.get("DPMARGINALS_DATA")
    return Path(home) if home and Path(home).is_dir() else None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"needs_data: {DATA_REASON}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("needs_data") is not None and data_dir() is None:
        pytest.skip(DATA_REASON)
