"""Where the rest of the gap is on the held-out benchmark: the adaptive method with the
true structure known (a diagnostic; held-out numbers are reported, never tuned on).

For held-out settings (``dpmarginals experiment heldout``'s users, queries and report
streams, seed 0) the adaptive method's mean SSE over CALM's, as shipped, with every later
phase planned from the users' own interaction energies (``Structure.from_data``: perfect
earlier phases), and with those energies also setting every block's shrinkage
(``E / (E + N)``), as ``benchmarks/adaptive_headroom.py`` does on the dev grid.

    DPMARGINALS_DATA=... PYTHONPATH=src python benchmarks/heldout_headroom.py \\
        --settings 1,4,5,7,9 --repeats 3 --jobs 2
"""

from __future__ import annotations

import argparse
import functools
import warnings
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import pandas as pd

VARIANTS = ("adaptive", "true structure", "true structure + known energies")


def _one(args: tuple[int, int]) -> dict[str, Any]:
    from dpmarginals.experiments.common import evaluate_synopsis, truths
    from dpmarginals.experiments.heldout import SETTINGS, _users
    from dpmarginals.experiments.runner import seed_for
    from dpmarginals.local import adaptive
    from dpmarginals.local.calm import CALM
    from dpmarginals.local.collect import collect
    from dpmarginals.planning.optimal import Structure
    from dpmarginals.synopsis.evaluate import random_queries

    warnings.simplefilter("ignore")
    index, r = args
    s = SETTINGS[index - 1]
    data = _users(s, s.n, 0, r)
    exact = truths(data, random_queries(data.domain, s.k, 50,
                                        rng=seed_for(0, "heldout-queries", s.index, r)))
    eps, k = s.epsilon, s.k
    truth = Structure.from_data(data)

    def sse(synopsis: Any) -> float:
        return float(evaluate_synopsis(synopsis, exact)[0].mean())

    calm = CALM(epsilon=eps, k=k)
    plan = calm.plan(data.domain, data.n)
    row = {"setting": s.label, "repeat": r, "calm": sse(calm.release(plan, collect(
        data, plan, rng=seed_for(0, "heldout-reports", "calm", s.index, r)), data.n))}
    planned, shrink = adaptive.phase_one_structure, adaptive.eb_shrink
    try:
        for variant in VARIANTS:
            adaptive.phase_one_structure = (planned if variant == "adaptive"
                                            else lambda *a, **kw: truth)
            adaptive.eb_shrink = (functools.partial(shrink, energies=truth.energy_of)
                             if variant.endswith("energies") else shrink)
            method = adaptive.Adaptive(epsilon=eps, k=k)
            phases = method.collect(data, rng=seed_for(0, "heldout-reports", "adaptive",
                                                       s.index, r))
            row[variant] = sse(method.release([p.plan for p in phases],
                                              [p.counts for p in phases]))
    finally:
        adaptive.phase_one_structure, adaptive.eb_shrink = planned, shrink
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--settings", default="1,4,5,7,9")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    todo = [(int(i), r) for i in args.settings.split(",") for r in range(args.repeats)]
    with ProcessPoolExecutor(args.jobs) as pool:
        frame = pd.DataFrame(list(pool.map(_one, todo)))
    means = frame.groupby("setting", sort=False).mean(numeric_only=True)
    ratios = pd.DataFrame({v: means[v] / means["calm"] for v in VARIANTS})
    print(ratios.round(3).to_string())
    print("\nmedian " + ", ".join(f"{v} {ratios[v].median():.3f}" for v in VARIANTS))
    print("geometric mean " + ", ".join(f"{v} {np.exp(np.log(ratios[v]).mean()):.3f}"
                                        for v in VARIANTS))


if __name__ == "__main__":
    main()
