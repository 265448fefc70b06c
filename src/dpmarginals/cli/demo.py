"""``dpmarginals demo``: a local-DP release end to end on the built-in real data set."""

from __future__ import annotations

import time

import numpy as np

from ..local.calm import CALM
from ..synopsis.base import UniformSynopsis
from ..synopsis.evaluate import evaluate, exact_marginals, random_queries

__all__ = ["run_demo"]


def run_demo(*, epsilon: float = 1.0, k: int = 2, seed: int | None = None,
             shown_queries: int = 2, print_fn=print) -> dict:
    """Every row of the built-in data set is one user who randomizes her own record.

    Without ``seed`` the users' randomness comes from the OS's secure source, as it
    would on real devices; with a seed the run is a reproducible simulation.
    """
    from ..datasets import BUILTIN, load

    data = load(BUILTIN)
    method = CALM(epsilon=epsilon, k=k, per_user=True)
    plan = method.plan(data.domain, data.n)
    start = time.perf_counter()
    synopsis = method.run(data, rng=seed)
    seconds = time.perf_counter() - start

    print_fn(f"Data: {data.name} ({data.n} people, {data.d} attributes: "
             f"{', '.join(data.domain.attributes)})")
    print_fn(f"CALM with epsilon = {epsilon}: {plan.m} groups of users, each reports one "
             f"{plan.params['l']}-way marginal through "
             f"{'/'.join(sorted({g.oracle.upper() for g in plan.groups}))} "
             f"({'OS-entropy randomness' if seed is None else f'simulation seed {seed}'})")
    queries = random_queries(data.domain, k, 50, rng=np.random.default_rng(12345))
    for attrs in queries[:shown_queries]:
        true = data.marginal(attrs).to_frame("true")
        est = synopsis.marginal(attrs).to_frame("estimated")
        frame = true.merge(est, on=list(attrs))  # both carry the data's own labels
        print_fn("")
        print_fn(frame.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    exact = exact_marginals(data, queries)
    errors = evaluate(synopsis, exact, queries)
    uniform = evaluate(UniformSynopsis(data.domain), exact, queries)
    print_fn("")
    print_fn(f"Over 50 random {k}-way marginals: mean SSE {errors.sse_mean:.4f} "
             f"(Uniform baseline {uniform.sse_mean:.4f}), mean total variation distance "
             f"{errors.tvd_mean:.3f} (Uniform {uniform.tvd_mean:.3f}); release took "
             f"{seconds:.2f} s")
    return {"sse_mean": errors.sse_mean, "uniform_sse_mean": uniform.sse_mean,
            "tvd_mean": errors.tvd_mean, "seconds": seconds}
