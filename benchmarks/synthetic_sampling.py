"""Synthetic records drawn i.i.d. against rounded, from the same central release.

On Adult (``adult-pgm``, the setting of ``benchmarks/central_peers.py``: eps 1, delta 1e-9,
all 455 3-way marginals), fit ``--method`` (mst or aim) once per seed, then draw n =
48,842 records from the release ``--draws`` times with ``sampling="iid"`` and
``"rounded"`` (:func:`dpmarginals.synopsis.synthetic.synthesize`); print per fit the
model's workload error and each sampler's mean, one JSON line each, then the mean ratios
to the model's error and the paired change of rounded against i.i.d.

    DPMARGINALS_DATA=... PYTHONPATH=src python benchmarks/synthetic_sampling.py \\
        --method mst --seeds 5
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

import central_peers as peers
from dpmarginals.core.dataset import Dataset
from dpmarginals.core.domain import Domain
from dpmarginals.methods import make
from dpmarginals.synopsis.synthetic import SAMPLING, synthesize


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--method", choices=("mst", "aim"), default="mst")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--draws", type=int, default=3)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    folder = Path(tempfile.mkdtemp())
    peers._export(folder)
    frame = pd.read_csv(folder / "codes.csv")
    sizes = json.loads((folder / "sizes.json").read_text())
    names = list(frame.columns)
    codes = frame.to_numpy(np.int64)
    workload = list(itertools.combinations(range(len(names)), 3))
    truth = peers.marginals_of(codes, sizes, workload)
    data = Dataset(codes, Domain(tuple(names), tuple(sizes)), name="adult-pgm")
    fits = []
    for seed in range(args.seeds):  # OpenDP's noise takes no seed: every fit is fresh
        synopsis = make(args.method, epsilon=1.0, delta=1e-9, k=3, accountant="rdp").run(data)
        answers = {w: synopsis.marginal([names[j] for j in w]).values for w in workload}
        row = {"method": args.method, "fit": seed,
               "model": peers.workload_error(truth, answers)}
        for sampling in SAMPLING:
            errors = [peers.workload_error(truth, peers.marginals_of(
                synthesize(synopsis, len(frame), rng=1000 * seed + draw,
                           sampling=sampling).codes, sizes, workload))
                for draw in range(args.draws)]
            row[sampling] = float(np.mean(errors))
        print(json.dumps(row), flush=True)
        fits.append(row)
    model = np.array([f["model"] for f in fits])
    iid, rounded = (np.array([f[s] for f in fits]) for s in ("iid", "rounded"))
    change = 100 * np.log(rounded / iid)
    spread = change.std(ddof=1) / math.sqrt(change.size) if change.size > 1 else math.nan
    print(f"{args.method}: model {model.mean():.4f}; synthetic rows / model: iid "
          f"{(iid / model).mean():.3f}, rounded {(rounded / model).mean():.3f}; rounded "
          f"against iid {change.mean():+.2f}% +- {spread:.2f}% ({len(fits)} fits, "
          f"{args.draws} draws each)")


if __name__ == "__main__":
    main()
