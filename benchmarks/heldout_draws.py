"""Several held-out draws read together (issue #36): is a miss a setting's kind, or chance?

One draw of ``dpmarginals experiment heldout --seed S`` has a new network in every setting
and 10 repeats; whether auto is above CALM in a setting then turns on that network and on
its repeats.  This reads the ``results.csv`` of several draws and prints a line per draw
(auto's median and geometric mean, the settings above CALM and more than 1.1x the better
of calm-pgm and adaptive) and a row per setting over the draws (the geometric mean and
range of the ratio to CALM, in how many draws auto and calm-pgm are above it, and the mean
log ratio in standard errors over the draws, ``z``: above Student's t quantile, 2.57 for
six draws, the setting's kind).  Draws run at different commits are read as they are: say
which commits when quoting the figures.

    python benchmarks/heldout_draws.py /work/heldout5 /work/heldout6 ...   # folders or CSVs

Nothing is chosen on this: the draws are held out (docs/beyond-calm.md §7).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.experiments.heldout import draws_markdown


def results_csv(path: Path) -> Path:
    """``path`` itself, or the ``results.csv`` under it (``DIR/heldout/results.csv``)."""
    if path.is_file():
        return path
    for candidate in (path / "results.csv", path / "heldout" / "results.csv",
                      path / "heldout-latent" / "results.csv"):
        if candidate.is_file():
            return candidate
    raise SystemExit(f"heldout_draws: no results.csv in {path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("draws", nargs="+", type=Path,
                    help="each a draw's --out folder or its results.csv")
    args = ap.parse_args()
    paths = [results_csv(p) for p in args.draws]
    frames = []
    for path in paths:
        try:
            frames.append(pd.read_csv(path))
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise SystemExit(f"heldout_draws: {path}: not a CSV ({exc})") from None
    try:
        print(draws_markdown(frames, [str(p) for p in paths]), end="")
    except DPMarginalsError as exc:
        raise SystemExit(f"heldout_draws: {exc}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
