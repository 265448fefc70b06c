"""Figures in the papers' layouts (matplotlib, Agg backend: no display needed).

* :func:`curve_grid` -- a grid of panels, one line per method with error bars (standard
  deviation over repeats), log-scale y (SSE or total variation distance) against epsilon,
  N or k, as CALM Figures 4, 5, 6, 8, 9 and Cormode et al. Figures 4, 5, 9, 10;
* :func:`heatmap_grid` -- CALM Figure 7's heatmaps, with the analysis' choice outlined;
* :func:`point_panels` -- Cormode et al. Figures 7 and 8 (one value per category).

matplotlib is an optional dependency (``pip install dpmarginals[experiments]``); it is
imported when a figure is drawn.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["HeatmapPanel", "Panel", "curve_grid", "heatmap_grid", "point_panels", "style"]

_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"]
_MARKERS = ["o", "s", "^", "v", "D", "P", "X", "*", "<", ">", "h", "p"]
_FIXED = {  # the same look for a method in every figure
    "calm": ("#d62728", "o"), "fc": ("#1f77b4", "s"), "am": ("#2ca02c", "^"),
    "ft": ("#ff7f0e", "v"), "em": ("#9467bd", "D"), "be": ("#8c564b", "P"),
    "uni": ("#7f7f7f", "x"), "inp_rr": ("#1f77b4", "s"), "inp_ps": ("#2ca02c", "^"),
    "inp_ht": ("#d62728", "o"), "marg_rr": ("#9467bd", "D"), "marg_ps": ("#ff7f0e", "v"),
    "marg_ht": ("#8c564b", "P"), "inp_em": ("#e377c2", "X"), "inp_olh": ("#17becf", "*"),
    "inp_htcms": ("#bcbd22", "h"), "priview": ("#393b79", "*"), "nonoise": ("#000000", "_"),
    "majority": ("#7f7f7f", "|"), "calm-pgm": ("#2ca02c", "s"), "aim": ("#17becf", "D"),
    "mst": ("#e377c2", "^"), "adaptive": ("#1f77b4", "D"),
    "calm@panel-n": ("#d62728", "o"), "calm@full-n": ("#ff7f0e", "v"),
}


def _plt() -> Any:
    from ..core.extras import require

    matplotlib = require("matplotlib", extra="plots", what="drawing figures")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def style(label: str, position: int = 0) -> tuple[str, str]:
    """(color, marker) of a line: fixed for the papers' methods, cycling otherwise."""
    key = str(label).lower()
    if key in _FIXED:
        return _FIXED[key]
    return _COLORS[position % len(_COLORS)], _MARKERS[position % len(_MARKERS)]


@dataclass
class Panel:
    """One subplot: ``frame`` holds the rows to draw (None: an empty panel with ``note``)."""

    title: str
    frame: pd.DataFrame | None
    note: str = ""


def _panel_cells(axes: Any, panels: Sequence[Sequence[Any]]) -> Iterator[tuple[Any, Any]]:
    """Each grid cell's axes with its panel; cells past the end of a row are switched off."""
    for r, row in enumerate(panels):
        for c, ax in enumerate(axes[r]):
            if c >= len(row):
                ax.axis("off")
            else:
                yield ax, row[c]


def _save(fig: Any, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, bbox_inches="tight")
    _plt().close(fig)
    return path


def curve_grid(
    panels: Sequence[Sequence[Panel]],
    path: str | Path,
    *,
    x: str,
    y: str,
    hue: str = "method",
    hue_order: Sequence[str] | None = None,
    labels: dict[str, str] | None = None,
    xlabel: str = "epsilon",
    ylabel: str = "SSE",
    ylog: bool = True,
    xlog: bool = False,
    xticks: Sequence[float] | None = None,
    xticklabels: Sequence[str] | None = None,
    row_labels: Sequence[str] | None = None,
    suptitle: str | None = None,
    ylim: tuple[float, float] | None = None,
    share_y: bool = True,
) -> Path:
    """A grid of line plots: mean of ``y`` over repeats per (``hue``, ``x``), +- 1 sd."""
    plt = _plt()
    nrows, ncols = len(panels), max(len(r) for r in panels)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.4 * ncols, 2.7 * nrows + 0.6),
                             squeeze=False, sharey=share_y)
    handles: dict[str, Any] = {}
    hue_order = list(dict.fromkeys(hue_order)) if hue_order is not None else None
    all_hues = list(hue_order) if hue_order is not None else []
    for ax, panel in _panel_cells(axes, panels):
        ax.set_title(panel.title, fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        if ylog:
            ax.set_yscale("log")
        if xlog:
            ax.set_xscale("log", base=2)
        frame = panel.frame
        ok = frame[frame["status"] == "ok"] if frame is not None and len(frame) else None
        if ok is None or not len(ok):
            ax.text(0.5, 0.5, textwrap.fill(panel.note or "not run", 32), ha="center",
                    va="center", fontsize=7, transform=ax.transAxes, color="#555555")
            ax.set_xticks([])
            ax.tick_params(labelleft=False, left=False)
            continue
        stats = ok.groupby([hue, x])[y].agg(["mean", "std"]).reset_index()
        hues = [h for h in (hue_order or sorted(stats[hue].unique()))
                if h in set(stats[hue])]
        for h in stats[hue].unique():
            if h not in all_hues:
                all_hues.append(h)
        for h in hues:
            s = stats[stats[hue] == h].sort_values(x)
            color, marker = style(h, all_hues.index(h))
            sd = s["std"].fillna(0.0).to_numpy()
            mean = s["mean"].to_numpy()
            lower = np.minimum(sd, mean * 0.999) if ylog else sd
            line = ax.errorbar(s[x], mean, yerr=[lower, sd], color=color, marker=marker,
                               markersize=4, linewidth=1.2, capsize=2,
                               label=(labels or {}).get(h, str(h)))
            handles.setdefault(str(h), line)
        if panel.note:
            ax.text(0.02, 0.02, textwrap.fill(panel.note, 45), fontsize=6,
                    transform=ax.transAxes, va="bottom", color="#555555")
        if xticks is not None:
            ax.set_xticks(list(xticks))
            if xticklabels is not None:
                ax.set_xticklabels(list(xticklabels), fontsize=7)
        ax.tick_params(labelsize=7)
        if ylim is not None:
            ax.set_ylim(*ylim)
    for r in range(nrows):
        if row_labels is not None:
            axes[r][0].set_ylabel(f"{row_labels[r]}\n{ylabel}", fontsize=9)
        else:
            axes[r][0].set_ylabel(ylabel, fontsize=9)
    for c in range(ncols):
        axes[nrows - 1][c].set_xlabel(xlabel, fontsize=9)
    order = [str(h) for h in all_hues if str(h) in handles]
    fig.legend([handles[h] for h in order], [(labels or {}).get(h, h) for h in order],
               loc="lower center", ncol=min(len(order), 8), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, -0.01))
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97 if suptitle else 1))
    return _save(fig, Path(path))


@dataclass
class HeatmapPanel:
    """A heatmap: ``values[i, j]`` for row label i and column label j (NaN: not run)."""

    title: str
    values: np.ndarray
    row_labels: Sequence[str]
    col_labels: Sequence[str]
    xlabel: str
    ylabel: str
    marks: list[tuple[int, int]] = field(default_factory=list)


def heatmap_grid(panels: Sequence[Sequence[HeatmapPanel]], path: str | Path, *,
                 suptitle: str | None = None, fmt: str = "{:.4f}") -> Path:
    """CALM Figure 7 style: numbers in the cells, the analysis' choice outlined in blue."""
    plt = _plt()
    nrows, ncols = len(panels), max(len(r) for r in panels)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 4.6 * nrows), squeeze=False)
    for ax, p in _panel_cells(axes, panels):
        vals = np.asarray(p.values, dtype=float)
        masked = np.ma.masked_invalid(vals)
        im = ax.imshow(masked, aspect="auto", cmap="YlOrRd", origin="upper")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.03).ax.tick_params(labelsize=6)
        ax.set_xticks(range(len(p.col_labels)))
        ax.set_xticklabels(p.col_labels, fontsize=7)
        ax.set_yticks(range(len(p.row_labels)))
        ax.set_yticklabels(p.row_labels, fontsize=7)
        ax.set_xlabel(p.xlabel, fontsize=8)
        ax.set_ylabel(p.ylabel, fontsize=8)
        ax.set_title(p.title, fontsize=9)
        small = vals.shape[1] > 6
        for i in range(vals.shape[0]):
            for j in range(vals.shape[1]):
                if math.isfinite(vals[i, j]):
                    ax.text(j, i, fmt.format(vals[i, j]), ha="center", va="center",
                            fontsize=5 if small else 7,
                            color="blue" if (i, j) in p.marks else "black",
                            fontweight="bold" if (i, j) in p.marks else "normal")
        for i, j in p.marks:
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False,
                                       edgecolor="blue", linewidth=1.8))
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    return _save(fig, Path(path))


def point_panels(panels: Sequence[Panel], path: str | Path, *, category: str, y: str,
                 hue: str, hue_order: Sequence[str] | None = None, ylabel: str = "",
                 ylog: bool = False, hline: float | None = None, hline_label: str = "",
                 labels: dict[str, str] | None = None, suptitle: str | None = None,
                 xlabel: str = "") -> Path:
    """Per category (x axis) one point per hue with an error bar (mean +- sd over repeats)."""
    plt = _plt()
    ncols = len(panels)
    most = max((len(set(p.frame[category])) for p in panels if p.frame is not None),
               default=3)
    fig, axes = plt.subplots(1, ncols, figsize=(max(5.0, 0.95 * most) * ncols, 3.8),
                             squeeze=False)
    handles: dict[str, Any] = {}
    for c, panel in enumerate(panels):
        ax = axes[0][c]
        ax.set_title(panel.title, fontsize=9)
        frame = panel.frame
        ok = frame[frame["status"] == "ok"] if frame is not None else None
        if ok is None or not len(ok):
            ax.text(0.5, 0.5, panel.note or "not run", ha="center", va="center",
                    transform=ax.transAxes)
            continue
        cats = list(dict.fromkeys(ok[category]))
        hues = [h for h in (hue_order or list(dict.fromkeys(ok[hue]))) if h in set(ok[hue])]
        stats = ok.groupby([category, hue])[y].agg(["mean", "std"]).reset_index()
        width = 0.8 / max(len(hues), 1)
        for i, h in enumerate(hues):
            s = stats[stats[hue] == h].set_index(category).reindex(cats)
            xs = np.arange(len(cats)) - 0.4 + width * (i + 0.5)
            color, marker = style(h, i)
            line = ax.errorbar(xs, s["mean"], yerr=s["std"].fillna(0.0), fmt=marker,
                               color=color, capsize=2, markersize=5,
                               label=(labels or {}).get(h, str(h)))
            handles.setdefault(str(h), line)
        if hline is not None:
            handles.setdefault(hline_label or "threshold",
                               ax.axhline(hline, color="black", linestyle="--", linewidth=1))
        ax.set_xticks(range(len(cats)))
        ax.set_xticklabels([str(x) for x in cats], fontsize=7, rotation=20, ha="right")
        if ylog:
            ax.set_yscale("log")
        ax.set_ylabel(ylabel, fontsize=9)
        if xlabel:
            ax.set_xlabel(xlabel, fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
        ax.tick_params(labelsize=7)
    fig.legend(list(handles.values()), [(labels or {}).get(h, h) for h in handles],
               loc="lower center", ncol=min(len(handles), 6), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, -0.02))
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95 if suptitle else 1))
    return _save(fig, Path(path))
