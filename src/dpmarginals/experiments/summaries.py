"""Markdown helpers for the experiments' ``summary.md``: tables and ordering checks."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

__all__ = ["Check", "checks_markdown", "fmt", "pivot_table", "setting_label"]


def fmt(value: Any, digits: int = 3) -> str:
    """A number with ``digits`` significant digits ('—' for missing)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, str):
        return value
    v = float(value)
    if v == 0:
        return "0"
    if abs(v) >= 1e4 or abs(v) < 1e-3:
        return f"{v:.{digits - 1}e}"
    return f"{v:.{digits}g}"


def setting_label(dataset: str, panel: str, epsilon: float) -> str:
    """A setting of a CALM-figure grid as the checks name it: the data set, the panel's
    label up to its first ``)`` and eps, e.g. ``msnbc (a) eps=1`` for panel ``(a) n=2^16``.

    >>> setting_label("msnbc", "(a) n=2^16, k=3", 1.0), setting_label("", "(b) d=8", 0.2)
    ('msnbc (a) eps=1', '(b) eps=0.2')
    """
    return f"{dataset} {panel.split(')')[0]}) eps={epsilon:g}".lstrip()


def pivot_table(frame: pd.DataFrame, *, rows: str, cols: str, value: str,
                row_order: Sequence[Any] | None = None, col_fmt: Callable[[Any], str] = str,
                digits: int = 3, with_sd: bool = False) -> str:
    """Mean of ``value`` over repeats (``ok`` rows): one markdown row per ``rows`` value."""
    ok = frame[frame["status"] == "ok"]
    if not len(ok):
        return "_no successful runs_\n"
    stats = ok.groupby([rows, cols])[value].agg(["mean", "std"])
    col_vals = sorted(ok[cols].unique())
    row_vals = [r for r in (row_order or sorted(ok[rows].unique())) if r in set(frame[rows])]
    head = f"| {rows} | " + " | ".join(col_fmt(c) for c in col_vals) + " |"
    lines = [head, "|---" * (len(col_vals) + 1) + "|"]
    for r in row_vals:
        cells = []
        for c in col_vals:
            if (r, c) in stats.index:
                mean, sd = stats.loc[(r, c)]
                cells.append(fmt(mean, digits) + (f" ± {fmt(sd, 2)}" if with_sd else ""))
            else:
                cells.append("not run")
        lines.append(f"| {r} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


class Check:
    """A claim of a paper checked over settings: holds in ``hits`` of ``total``."""

    def __init__(self, claim: str, source: str) -> None:
        self.claim, self.source = claim, source
        self.hits, self.total = 0, 0
        self.exceptions: list[str] = []

    def add(self, holds: bool | None, where: str) -> None:
        if holds is None:
            return
        self.total += 1
        if holds:
            self.hits += 1
        else:
            self.exceptions.append(where)

    def line(self, limit: int = 6) -> str:
        if self.total == 0:
            return f"- {self.claim} ({self.source}): not testable on this grid."
        verdict = ("**agrees**" if self.hits == self.total else
                   "**mostly agrees**" if self.hits >= 0.75 * self.total else "**differs**")
        text = (f"- {self.claim} ({self.source}): {verdict}, holds in {self.hits}/"
                f"{self.total} settings")
        if self.exceptions:
            more = len(self.exceptions) - limit
            shown = "; ".join(self.exceptions[:limit]) + (f"; … {more} more" if more > 0
                                                          else "")
            text += f". Exceptions: {shown}"
        return text + "."


def checks_markdown(checks: Sequence[Check]) -> str:
    return "## Orderings vs. the paper\n\n" + "\n".join(c.line() for c in checks) + "\n"
