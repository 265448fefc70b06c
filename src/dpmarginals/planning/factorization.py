"""The strategy of the workload factorization mechanism, optimized for a workload of marginals.

McKenna, Maity, Mazumdar, Miklau, "A workload-adaptive mechanism for linear queries under
local differential privacy", PVLDB 13(11) 2020 (WFM).  A user of type u (her cell of the
full domain, one of n) reports output o with probability ``Q[o, u]``; Q (m x n) is
column-stochastic and eps-LDP when every row's largest entry is at most e^eps times its
smallest.  The aggregator counts the outputs, y (E[y] = Q x for the data vector x), and
answers the workload W by V y with ``V Q = W`` (unbiased).  For a fixed Q the best V is
``V = W (Q^T D^-1 Q)^-1 Q^T D^-1`` with ``D = diag(Q 1)``, and the expected total squared
error of one user of type u on W is ``z_u = sum_o (V∘V)[:, o] Q[o, u] - ||W[:, u]||^2``
(the paper's variance of V y); averaged over the n types it is

    (tr[(Q^T D^-1 Q)^-1 W^T W] - tr[W^T W]) / n,

the objective the paper minimizes.  W enters only through ``G = W^T W``; for all k-way
marginals of a product domain ``G[u, v] = C(agree(u, v), k)``, agree counting the
attributes on which the cells u and v agree (:func:`marginal_gram`).

**Optimization** (the paper's projected gradient descent).  The feasible set is written
with the row floors z: ``z_o <= Q[o, u] <= e^eps z_o`` and ``1^T Q = 1^T``; Q starts
random with m = 4n rows and every z_o = (1 + e^-eps) / (2m) (the authors' initialization,
``ryan112358/workload-factorization-mechanism``), which puts a fraction 1/(e^eps + 1) of
each column's rows at the upper bound, the optimal share of subset selection.  Each step
moves Q along the negative gradient and projects every column onto
``{z <= q <= e^eps z, sum q = 1}`` (exactly: a monotone piecewise-linear equation in one
shift per column, solved by safeguarded Newton steps).  Where we differ from the authors'
code, and why:

* the step size is found by backtracking (the sufficient-decrease test of projected
  gradient methods) with Nesterov momentum and a restart whenever the objective rises,
  instead of a fixed step halved every 50 iterations after a trial of three step sizes;
* z is not moved by the gradient.  The authors' code moves it along the gradient mass of
  the entries at their bounds; re-implemented here that update raised the objective
  (d = 6 binary, all 2-way marginals, eps = 1: 76.2 against 54.2 per query and user with
  z fixed), and a z step taken only when it lowers the objective improved it by < 0.1%.
  What matters is z's level, the share of each column's rows at the upper bound: the
  authors' 1/(e^eps + 1) is best at eps <= 1 but not above (d = 8 binary, 2-way
  marginals, eps = 4: 4.43 per query and user at that share, 3.16 at twice it, which
  equals users split over 6 groups reporting 4-way marginals by randomized response, a
  member of the class).  So :func:`optimize_strategy` probes the shares 1, 2, 4 and 8
  times it (at most 1/2) for a sixth of the iterations each and continues the best
  (:func:`_starts`): 1.5 times the paper's iterations.

``tests/test_wfm.py`` checks the gradient against finite differences and the projection
against its definition.  The optimized Q is finalized with its columns normalized and
every ratio at most e^eps (the optimization keeps a 1e-10 relative margin below e^eps, so
the float64 ratios of the published matrix never exceed e^eps).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
from scipy import linalg

from ..core.errors import DPMarginalsError, check_epsilon, check_k, check_positive_int

__all__ = [
    "STRATEGY_VERSION",
    "Strategy",
    "average_user_error",
    "ldp_ratio",
    "marginal_gram",
    "objective",
    "objective_and_gradient",
    "optimize_strategy",
    "project_columns",
    "workload_factor",
]

STRATEGY_VERSION = 2
"""Changes whenever the optimizer's output for the same inputs would change (cache key)."""
MARGIN = 1e-10
"""Relative margin below e^eps kept by the optimized ratios."""
DISK_CACHE_CELLS = 64
"""Strategies of domains this large or larger are also cached on disk (smaller ones take
well under a second to optimize)."""
_MEMORY: dict[str, Strategy] = {}


def marginal_gram(sizes: Sequence[int], k: int) -> np.ndarray:
    """``W^T W`` for W = every k-way marginal of a product domain (cells in C order):
    entry (u, v) is C(a, k), a the number of attributes on which cells u and v agree.

    >>> marginal_gram((2, 2), 1).tolist()
    [[2.0, 1.0, 1.0, 0.0], [1.0, 2.0, 0.0, 1.0], [1.0, 0.0, 2.0, 1.0], [0.0, 1.0, 1.0, 2.0]]
    """
    sizes = tuple(int(s) for s in sizes)
    k = check_k(k, len(sizes))
    values = np.asarray(list(product(*[range(s) for s in sizes])), dtype=np.int64)
    n = values.shape[0]
    agree = np.zeros((n, n), dtype=np.int64)
    for j in range(len(sizes)):
        agree += values[:, j][:, None] == values[:, j][None, :]
    table = np.array([math.comb(a, k) for a in range(len(sizes) + 1)], dtype=np.float64)
    return table[agree]


def workload_factor(gram: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """B (n x r) with ``B B^T = gram``, r its numerical rank (eigenvalues above ``tol``
    times the largest): given the information matrix, the objective and its gradient cost
    O(n^2 r + m n r) instead of O(n^3 + m n^2) (r = 176 for 3-way marginals of 10 bits)."""
    values, vectors = np.linalg.eigh(np.asarray(gram, dtype=np.float64))
    keep = values > tol * max(float(values.max()), 0.0)
    return vectors[:, keep] * np.sqrt(values[keep])


def _information(Q: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any]:
    """Row sums d, R = D^-1 Q, and the Cholesky factor of ``Q^T D^-1 Q``."""
    d = Q.sum(axis=1)
    root = Q / np.sqrt(d)[:, None]
    return d, Q / d[:, None], linalg.cho_factor(root.T @ root, lower=True, check_finite=False)


def objective(Q: np.ndarray, factor: np.ndarray) -> float:
    """``tr[(Q^T D^-1 Q)^-1 B B^T]`` (inf where the information matrix is singular)."""
    try:
        _, _, chol = _information(Q)
    except linalg.LinAlgError:
        return math.inf
    return float(np.sum(factor * linalg.cho_solve(chol, factor, check_finite=False)))


def objective_and_gradient(Q: np.ndarray, factor: np.ndarray) -> tuple[float, np.ndarray]:
    """The objective and its gradient in Q.

    With M = Q^T D^-1 Q, X = M^-1 B and R = D^-1 Q: dL = -tr(M^-1 dM M^-1 G), and row o of
    the gradient is ``-2 (R X X^T)[o] + ||(R X)[o]||^2 1^T`` (the second term from d_o).
    """
    _, R, chol = _information(Q)
    X = linalg.cho_solve(chol, factor, check_finite=False)
    RX = R @ X
    grad = -2.0 * (RX @ X.T) + np.sum(RX * RX, axis=1)[:, None]
    return float(np.sum(factor * X)), grad


def project_columns(R: np.ndarray, low: np.ndarray, high: np.ndarray, *,
                    tol: float = 1e-12, max_steps: int = 200) -> np.ndarray:
    """The Euclidean projection of every column of R onto ``{low <= q <= high, sum q = 1}``
    (needs ``sum low <= 1 <= sum high``): ``clip(r + lam, low, high)`` with the shift lam
    solving the column's monotone piecewise-linear equation ``f(lam) = 1``: Newton steps
    kept inside a bracket, else a false-position step (Illinois), exact on a linear piece.
    """
    R = np.asarray(R, dtype=np.float64)
    lo_b, hi_b = low[:, None], high[:, None]
    if low.sum() > 1 + tol or high.sum() < 1 - tol:
        raise DPMarginalsError("no column-stochastic matrix fits between these row bounds")
    below, above = (lo_b - R).min(axis=0), (hi_b - R).max(axis=0)
    f_below = np.full(R.shape[1], float(low.sum()) - 1.0)
    f_above = np.full(R.shape[1], float(high.sum()) - 1.0)
    side = np.zeros(R.shape[1], dtype=np.int8)  # which end moved last: -1 below, +1 above
    lam = np.clip((1.0 - R.sum(axis=0)) / R.shape[0], below, above)
    shifted, clipped = np.empty_like(R), np.empty_like(R)  # reused: this loop is memory-bound
    for _ in range(max_steps):
        np.add(R, lam, out=shifted)
        np.clip(shifted, lo_b, hi_b, out=clipped)
        gap = clipped.sum(axis=0) - 1.0
        if np.abs(gap).max() <= tol:
            break
        free = np.equal(clipped, shifted).sum(axis=0)  # (an entry exactly at a bound: 0-width)
        low_side, high_side = gap < 0, gap > 0
        # Illinois: an end kept twice in a row has its value halved (no one-sided stall)
        f_above = np.where(low_side & (side == -1), 0.5 * f_above, f_above)
        f_below = np.where(high_side & (side == 1), 0.5 * f_below, f_below)
        below, f_below = np.where(low_side, lam, below), np.where(low_side, gap, f_below)
        above, f_above = np.where(high_side, lam, above), np.where(high_side, gap, f_above)
        side = np.where(low_side, -1, np.where(high_side, 1, side)).astype(np.int8)
        newton = lam - gap / np.maximum(free, 1)
        width = np.where(f_above > f_below, f_above - f_below, 1.0)
        false_position = below - f_below * (above - below) / width
        inside = (free > 0) & (newton > below) & (newton < above)
        lam = np.where(inside, newton, false_position)
    np.add(R, lam, out=shifted)
    return np.clip(shifted, lo_b, hi_b, out=shifted)


def ldp_ratio(Q: np.ndarray) -> float:
    """max over rows of max/min (the eps-LDP ratio of the mechanism whose column u is the
    output distribution of type u; inf if a row mixes zeros and non-zeros)."""
    Q = np.asarray(Q, dtype=np.float64)
    used = Q.max(axis=1) > 0
    lo, hi = Q.min(axis=1)[used], Q.max(axis=1)[used]
    return math.inf if (lo <= 0).any() else float((hi / lo).max())


def average_user_error(Q: np.ndarray, gram: np.ndarray) -> float:
    """The paper's objective in its own units: the expected total squared error on W of
    one user, averaged over the n types, ``(tr[M^-1 G] - tr G) / n``."""
    factor = workload_factor(gram)
    return (objective(Q, factor) - float(np.trace(gram))) / gram.shape[0]


@dataclass(frozen=True)
class Strategy:
    """An optimized strategy matrix and how it was found.

    ``matrix`` (m x n): column u is the output distribution of a user in cell u.
    ``objective``: ``tr[(Q^T D^-1 Q)^-1 W^T W]``; ``average_error``: the paper's
    per-user total squared error on W averaged over types (module docstring).
    """

    matrix: np.ndarray
    sizes: tuple[int, ...]
    k: int
    epsilon: float
    objective: float
    average_error: float
    iterations: int
    seed: int
    seconds: float = 0.0
    history: tuple[float, ...] = field(default=(), repr=False)

    @property
    def rows(self) -> int:
        return int(self.matrix.shape[0])


def _starts(n: int, rows: int, epsilon: float, seed: int
            ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Starting strategies and their row floors z (module docstring).  Random starts (the
    paper's) with equal floors that put a share s of each column's rows at the upper bound,
    for s = 1, 2, 4, 8 times max(1/(e^eps + 1), 1/n) (at most 1/2); and, where
    e^eps + 1 >= n (randomized response's regime, which the random starts miss: d = 4
    binary, 3-way marginals, eps = 3 ended 16% above it), randomized response over the
    full domain with its rows replicated to m."""
    top = math.exp(epsilon) * (1.0 - MARGIN)
    base = max(1.0 / (top + 1.0), 1.0 / n)
    shares = sorted({min(0.5, base * 2**j) for j in range(4)} | {base})
    rng = np.random.default_rng(seed)
    noise = rng.random((rows, n))
    starts = []
    for share in shares:
        floor = np.full(rows, 1.0 / (rows * (1.0 + share * (top - 1.0))))
        starts.append((project_columns(noise, floor, top * floor), floor))
    if top + 1.0 >= n:
        cell = np.arange(rows) % n
        copies = np.bincount(cell, minlength=n)[cell].astype(np.float64)
        rr = np.where(cell[:, None] == np.arange(n)[None, :], top, 1.0) / (top + n - 1.0)
        starts.append((rr / copies[:, None], 1.0 / ((top + n - 1.0) * copies)))
    return starts


def _pgd(factor: np.ndarray, start: np.ndarray, floor: np.ndarray, top: float,
         iterations: int) -> tuple[np.ndarray, float, list[float]]:
    """Projected gradient descent with backtracking and restarted momentum from ``start``
    within the row bounds [floor, top floor] (module docstring); returns the best matrix,
    its objective and the objective per iteration."""
    low, high = floor, top * floor
    Q = start
    value, grad = objective_and_gradient(Q, factor)
    best, best_value = Q, value
    ahead, ahead_value, ahead_grad = Q, value, grad
    step = 0.1 * float(Q.mean()) / max(float(np.abs(grad).mean()), 1e-300)
    momentum, history = 1.0, [value]
    for _ in range(iterations):
        while True:
            trial = project_columns(ahead - step * ahead_grad, low, high)
            moved = trial - ahead
            trial_value = objective(trial, factor)
            if trial_value <= (ahead_value + float(np.sum(ahead_grad * moved))
                               + float(np.sum(moved * moved)) / (2 * step)):
                break
            step *= 0.5
            if step < 1e-300:
                return best, best_value, history
        if ahead is Q and not moved.any():  # a fixed point of the projected step
            break
        if trial_value > value:  # the momentum overshot: restart from the last iterate
            momentum, ahead = 1.0, Q
            ahead_value, ahead_grad = objective_and_gradient(Q, factor)
            continue
        following = (1.0 + math.sqrt(1.0 + 4.0 * momentum**2)) / 2.0
        ahead = project_columns(trial + (momentum - 1.0) / following * (trial - Q), low, high)
        momentum, Q, value = following, trial, trial_value
        try:
            ahead_value, ahead_grad = objective_and_gradient(ahead, factor)
        except linalg.LinAlgError:
            momentum, ahead = 1.0, Q
            ahead_value, ahead_grad = objective_and_gradient(Q, factor)
        if value < best_value:
            best, best_value = Q, value
        history.append(value)
        step *= 1.2
    return best, best_value, history


def _finalize(Q: np.ndarray, epsilon: float) -> np.ndarray:
    """Columns normalized; refuse (a bug) if any ratio exceeds e^eps."""
    out = Q / Q.sum(axis=0, keepdims=True)
    if not ldp_ratio(out) <= math.exp(epsilon):
        raise DPMarginalsError(f"the optimized strategy has ratio {ldp_ratio(out)!r} > e^eps")
    return out


def cache_path(key: str) -> Path:
    """Where a strategy is cached on disk: ``$DPMARGINALS_CACHE`` (else the user cache,
    ``$XDG_CACHE_HOME/dpmarginals`` or ``~/.cache/dpmarginals``), under ``wfm/``."""
    root = os.environ.get("DPMARGINALS_CACHE")
    if root:
        base = Path(root).expanduser()
    else:
        from ..datasets.files import cache_dir

        base = cache_dir()
    return base / "wfm" / f"{key}.npz"


def optimize_strategy(sizes: Sequence[int], k: int, epsilon: float, *,
                      rows: int | None = None, iterations: int = 300, seed: int = 0,
                      cache: bool = True) -> Strategy:
    """The WFM strategy for all k-way marginals of a domain of ``sizes`` at ``epsilon``.

    ``rows``: m, default 4n (the authors' recommendation; fewer rows lose accuracy:
    d = 6 binary, 2-way marginals, eps = 1: 78.7 per query and user at m = n, 57.4 at 2n,
    54.2 at 4n).  ``iterations`` of :func:`_pgd` from a random start seeded by ``seed``.
    With ``cache`` the result is kept in memory, and on disk (:func:`cache_path`) from
    :data:`DISK_CACHE_CELLS` cells up, keyed by every input and :data:`STRATEGY_VERSION`.

    >>> s = optimize_strategy((2, 2), 1, 1.0, iterations=50, cache=False)
    >>> s.matrix.shape, bool(abs(s.matrix.sum(axis=0) - 1).max() < 1e-12)
    ((16, 4), True)
    """
    sizes = tuple(int(s) for s in sizes)
    k = check_k(k, len(sizes))
    epsilon = check_epsilon(epsilon)
    n = math.prod(sizes)
    rows = 4 * n if rows is None else check_positive_int(rows, "rows", n)
    iterations = check_positive_int(iterations, "iterations")
    spec = {"version": STRATEGY_VERSION, "sizes": list(sizes), "k": k, "epsilon": epsilon,
            "rows": rows, "iterations": iterations, "seed": int(seed)}
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:32]
    if cache and key in _MEMORY:
        return _MEMORY[key]
    path = cache_path(key)
    on_disk = cache and n >= DISK_CACHE_CELLS
    gram = marginal_gram(sizes, k)
    trace = float(np.trace(gram))
    if on_disk and path.is_file():
        with np.load(path) as saved:
            matrix, value = saved["matrix"], float(saved["objective"])
        history: tuple[float, ...] = ()
        seconds = 0.0
    else:
        start = time.perf_counter()
        factor, top = workload_factor(gram), math.exp(epsilon) * (1.0 - MARGIN)
        probe = min(iterations, max(10, iterations // 6))
        runs = [(*_pgd(factor, Q0, floor, top, probe), floor)
                for Q0, floor in _starts(n, rows, epsilon, int(seed))]
        best, value, steps, floor = min(runs, key=lambda run: run[1])
        if iterations > probe:
            best, value, more = _pgd(factor, best, floor, top, iterations - probe)
            steps = steps + more[1:]
        seconds = time.perf_counter() - start
        matrix, history = _finalize(best, epsilon), tuple(steps)
        value = objective(matrix, factor)
        if on_disk:
            _save(path, matrix, value)
    if not ldp_ratio(matrix) <= math.exp(epsilon):
        raise DPMarginalsError(f"the cached strategy {path} is not {epsilon}-LDP; delete it")
    out = Strategy(matrix, sizes, k, epsilon, value, (value - trace) / n, iterations,
                   int(seed), seconds, history)
    if cache:
        _MEMORY[key] = out
    return out


def _save(path: Path, matrix: np.ndarray, value: float) -> None:
    """Write the cache file atomically; a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(partial, matrix=matrix, objective=np.float64(value))
        partial.replace(path)
    except OSError:
        pass
