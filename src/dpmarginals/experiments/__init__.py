"""Reproduce the papers' evaluations: ``dpmarginals experiment NAME``.

>>> from dpmarginals.experiments import names
>>> names()[:2]
['calm-fig4', 'calm-fig5']

``run_experiment(get(name), out, quick=..., jobs=..., seed=...)`` writes
``out/NAME[-quick]/results.csv``, the PNG figure(s) and ``summary.md``; see
:mod:`.runner` for determinism and resuming, :mod:`.registry` for the list.
"""

from __future__ import annotations

from .registry import EXPERIMENTS, describe, get, names
from .runner import Experiment, RunResult, load_results, run_experiment, seed_for

__all__ = [
    "EXPERIMENTS",
    "Experiment",
    "RunResult",
    "describe",
    "get",
    "load_results",
    "names",
    "run_experiment",
    "seed_for",
]
