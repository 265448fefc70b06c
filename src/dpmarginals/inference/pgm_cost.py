"""What a graphical-model fit costs: predicted before it starts, enforced while it runs.

``mbi``'s mirror descent (McKenna, Sheldon, Miklau, ICML 2019, Algorithm 1, with its Armijo
line search) compiles one XLA program for the model's structure and then runs ``iters``
steps of it.  Each step calls the marginal oracle (message passing on the junction tree)
twice, and the oracle broadcasts every clique's potential into the junction-tree clique that
holds it and sums it back out.  So, with E the cells of those holding cliques summed over
the model's cliques and T the cells that go through ``exp``/``logsumexp`` (every junction-tree
clique once, plus each clique once per message it sends), the cost model is::

    setup seconds   = SETUP_BASE + SETUP_PER_OP * (cliques + messages)
    compile seconds = COMPILE_BASE + COMPILE_PER_CLIQUE * cliques
                      + COMPILE_PER_MESSAGE * messages + COMPILE_PER_CLIQUE_PAIR * cliques^2
    step seconds    = STEP_PER_CELL * E + STEP_PER_EXP_CELL * T
                      + STEP_PER_OP * (cliques + messages)
    memory MB       = MEMORY_BASE_MB + MEMORY_PER_OP_MB * (cliques + messages)
                      + MEMORY_PER_CLIQUE_PAIR_MB * cliques^2
                      + (MEMORY_BYTES_PER_CELL * (E + T) + MEMORY_BYTES_PER_TREE_CELL * J) / 2**20

with J the junction tree's cells.  The constants are CPU seconds (all threads) and MB,
fitted by ``benchmarks/pgm_cost.py`` (which prints them for another machine) to 16 model
structures (1 to 560 cliques, junction trees of 252 to 16.8M cells) measured on the
project's machine (2 shared vCPUs, jax 0.10.2, mbi 2.0.0) and then raised (compilation
by 1.5x, steps and memory by 1.25x), so that the predictions err on the safe side: on
those structures a fit's measured CPU time was 0.45-1.42x its prediction and its memory
0.62-1.38x.  CPU time, not wall time, because a shared machine stretches wall time by a
factor that changes from minute to minute (up to 8x while calibrating) while the CPU time
a fit needs stays put; on an unshared machine the two agree within the few parallel
parts.  Compilation is predicted for every first fit of a structure in a process,
although JAX's persistent cache (:func:`dpmarginals.inference.pgm.require_mbi`) usually
loads it in a second or two instead: what is cached must not change which model is fit.

A fit is refused before it starts when its prediction exceeds the limits
(:func:`check_fit`), and stopped when it has used more than :data:`OVERRUN` times its
predicted CPU time (:class:`FitWatch`, checked after every block of
``mbi.estimation.CALLBACK_EVERY`` steps; XLA's compilation itself cannot be interrupted).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError

__all__ = [
    "MAX_FIT_MEMORY_MB",
    "MAX_FIT_SECONDS",
    "OVERRUN",
    "FitCost",
    "FitWatch",
    "check_fit",
    "check_limits",
    "fit_within",
    "limits_to_json",
    "predict_fit",
    "within",
]

#: Default limits on a fit's predicted CPU seconds and memory; raise them with
#: ``max_fit_seconds`` / ``max_fit_memory_mb`` (``--max-fit-seconds``, ``--max-fit-memory-mb``).
MAX_FIT_SECONDS = 30.0
MAX_FIT_MEMORY_MB = 4096.0
#: A running fit stops once it has used this many times its predicted CPU seconds, plus
#: :data:`SLACK` seconds.
OVERRUN = 2.0
#: CPU seconds every fit may use beyond ``OVERRUN`` x its prediction: on a busy machine JAX's
#: worker threads spend CPU time waiting, and a fit predicted at 0.2 s was stopped at 0.4 s
#: in a CI run (tests/test_pgm.py, AM with the pgm inference, load ~4 on 2 cores).
SLACK = 2.0

# Calibrated by benchmarks/pgm_cost.py (see the module docstring).  The setup (building the
# loss, the first oracle call, reading the potentials back) is paid by every fit, compiled
# or not; it is a generous bound, so that tiny fits are not stopped by scheduling noise.
SETUP_BASE = 0.2
SETUP_PER_OP = 1e-3
COMPILE_BASE = 1.5
COMPILE_PER_CLIQUE = 0.034
COMPILE_PER_MESSAGE = 0.042
COMPILE_PER_CLIQUE_PAIR = 2.3e-4
STEP_PER_CELL = 3.4e-9
STEP_PER_EXP_CELL = 2.4e-8
STEP_PER_OP = 4.5e-7
MEMORY_BASE_MB = 160.0
MEMORY_PER_OP_MB = 1.2
MEMORY_PER_CLIQUE_PAIR_MB = 2.6e-3
MEMORY_BYTES_PER_CELL = 6.2
MEMORY_BYTES_PER_TREE_CELL = 43.0
#: Mirror-descent steps per block (``mbi.estimation.CALLBACK_EVERY``): a fit runs whole blocks.
BLOCK = 50


@dataclass(frozen=True)
class FitCost:
    """A fit's predicted cost and the structure it was predicted from.

    ``cliques``: the model's cliques; ``tree_cliques``/``tree_cells``: the junction tree's
    maximal cliques and their cells; ``messages``: its directed edges; ``step_cells``
    (E) and ``exp_cells`` (T): the cells one step touches (see the module docstring);
    ``iters``: the steps it runs (whole blocks); ``compiled``: the structure was compiled
    in this process already, so no compilation is predicted.
    """

    cliques: int
    tree_cliques: int
    tree_cells: int
    messages: int
    step_cells: int
    exp_cells: int
    iters: int
    compiled: bool
    setup_seconds: float
    compile_seconds: float
    step_seconds: float
    memory_mb: float

    @property
    def seconds(self) -> float:
        """Predicted CPU seconds of the whole fit (compilation + every step)."""
        return self.setup_seconds + self.compile_seconds + self.iters * self.step_seconds

    def describe(self) -> str:
        """One phrase naming both predictions and where they come from."""
        compile_part = "" if self.compiled else f"{self.compile_seconds:.0f} s compiling + "
        return (f"{self.seconds:,.0f} s ({compile_part}{self.iters} iterations x "
                f"{self.step_seconds:.2g} s over a junction tree of {self.tree_cells:,} cells "
                f"in {self.tree_cliques} cliques, {self.step_cells:,} cells per iteration for "
                f"{self.cliques} measured cliques) and {self.memory_mb:,.0f} MB of memory")


def predict_fit(domain: Domain, cliques: Sequence[Sequence[str]], iters: int, *,
                compiled: bool = False) -> FitCost:
    """The predicted CPU seconds and memory of ``mbi``'s fit of a model on ``cliques``."""
    # the fit names attributes by index; the loss keeps the maximal cliques
    indices = tuple(sorted(tuple(sorted(map(domain.index, c))) for c in cliques))
    return _predict(domain.sizes, indices, iters, compiled)


@lru_cache(maxsize=256)  # a bootstrap re-fits one structure many times
def _predict(sizes: tuple[int, ...], cliques: tuple[tuple[int, ...], ...], iters: int,
             compiled: bool) -> FitCost:
    from .pgm import require_mbi

    mbi = require_mbi()  # 64-bit JAX first, mbi's import warnings silenced, as everywhere
    from mbi.clique_utils import clique_mapping, maximal_subset
    from mbi.junction_tree import make_junction_tree, maximal_cliques

    dom = mbi.Domain(tuple(range(len(sizes))), sizes)
    model = maximal_subset(list(cliques))
    tree, _ = make_junction_tree(dom, model)
    nodes = maximal_cliques(tree)
    holder = clique_mapping(nodes, model, dom)
    tree_cells = sum(dom.size(c) for c in nodes)
    step_cells = sum(dom.size(holder[c]) for c in model)
    exp_cells = tree_cells + sum(dom.size(a) + dom.size(b) for a, b in tree.edges())
    messages = 2 * tree.number_of_edges()
    ops, k = len(model) + messages, len(model)
    steps = BLOCK * max(1, math.ceil(iters / BLOCK))
    return FitCost(
        cliques=k, tree_cliques=len(nodes), tree_cells=tree_cells, messages=messages,
        step_cells=step_cells, exp_cells=exp_cells, iters=steps, compiled=compiled,
        setup_seconds=SETUP_BASE + SETUP_PER_OP * ops,
        compile_seconds=0.0 if compiled else (
            COMPILE_BASE + COMPILE_PER_CLIQUE * k + COMPILE_PER_MESSAGE * messages
            + COMPILE_PER_CLIQUE_PAIR * k**2),
        step_seconds=(STEP_PER_CELL * step_cells + STEP_PER_EXP_CELL * exp_cells
                      + STEP_PER_OP * ops),
        memory_mb=(MEMORY_BASE_MB + MEMORY_PER_OP_MB * ops + MEMORY_PER_CLIQUE_PAIR_MB * k**2
                   + (MEMORY_BYTES_PER_CELL * (step_cells + exp_cells)
                      + MEMORY_BYTES_PER_TREE_CELL * tree_cells) / 2**20))


def check_limits(max_fit_seconds: float | None,
                 max_fit_memory_mb: float | None) -> tuple[float, float]:
    """Validate the two limits: positive numbers, ``None`` or ``math.inf`` for none."""
    out = []
    for name, value in (("max_fit_seconds", max_fit_seconds),
                        ("max_fit_memory_mb", max_fit_memory_mb)):
        try:
            number = math.inf if value is None else float(value)
        except (TypeError, ValueError):
            raise DPMarginalsError(f"{name} must be a number, got {value!r}") from None
        if not number > 0:
            raise DPMarginalsError(f"{name} must be > 0, got {value!r}")
        out.append(number)
    return out[0], out[1]


def limits_to_json(max_fit_seconds: float, max_fit_memory_mb: float) -> dict[str, Any]:
    """The limits as strict JSON (no limit: ``None``)."""
    return {"max_fit_seconds": None if math.isinf(max_fit_seconds) else max_fit_seconds,
            "max_fit_memory_mb": None if math.isinf(max_fit_memory_mb) else max_fit_memory_mb}


def within(cost: FitCost, max_fit_seconds: float, max_fit_memory_mb: float) -> bool:
    """Whether both predictions are within their limits."""
    return cost.seconds <= max_fit_seconds and cost.memory_mb <= max_fit_memory_mb


def fit_within(domain: Domain, cliques: Sequence[Sequence[str]], iters: int,
               max_fit_seconds: float, max_fit_memory_mb: float) -> bool:
    """Whether a fit on ``cliques`` is predicted within the limits.

    The terms that need no junction tree (compilation and memory grow with the cliques'
    number, each step touches at least every clique's own cells) are checked first: for a
    plan of thousands of cliques the tree takes seconds to build, and its bound alone is
    far over the limits.
    """
    k = len(cliques)
    own_cells = sum(domain.project(c).cells() for c in cliques)
    steps = BLOCK * max(1, math.ceil(iters / BLOCK))
    seconds = (SETUP_BASE + COMPILE_BASE + COMPILE_PER_CLIQUE * k + COMPILE_PER_CLIQUE_PAIR * k**2
               + steps * STEP_PER_CELL * own_cells)
    memory = MEMORY_BASE_MB + MEMORY_PER_OP_MB * k + MEMORY_PER_CLIQUE_PAIR_MB * k**2
    if seconds > max_fit_seconds or memory > max_fit_memory_mb:
        return False
    return within(predict_fit(domain, cliques, iters), max_fit_seconds, max_fit_memory_mb)


def check_fit(cost: FitCost, max_fit_seconds: float, max_fit_memory_mb: float) -> None:
    """Refuse a fit whose prediction exceeds a limit, naming both predictions and limits."""
    if within(cost, max_fit_seconds, max_fit_memory_mb):
        return
    raise DPMarginalsError(
        f"the graphical-model fit would take {cost.describe()}, over the limits of "
        f"{max_fit_seconds:,g} s and {max_fit_memory_mb:,g} MB (CPU time on this machine); "
        "raise max_fit_seconds / max_fit_memory_mb (--max-fit-seconds, --max-fit-memory-mb), "
        "or use CALM's inference or fewer or smaller marginals")


class FitWatch:
    """An ``mbi`` callback that stops a fit past :data:`OVERRUN` times its predicted CPU time
    (plus :data:`SLACK`).

    Call it with the marginals after each block; it waits for them (JAX dispatches
    asynchronously), then compares the CPU time used since it was made.
    """

    def __init__(self, cost: FitCost) -> None:
        self.cost = cost
        self.steps = 0
        self._cpu = time.process_time()
        self._wall = time.perf_counter()

    @property
    def cpu_seconds(self) -> float:
        return time.process_time() - self._cpu

    @property
    def wall_seconds(self) -> float:
        return time.perf_counter() - self._wall

    def __call__(self, marginals: Any) -> None:
        import jax

        jax.block_until_ready(marginals)
        self.steps += BLOCK
        used = self.cpu_seconds
        if used > OVERRUN * self.cost.seconds + SLACK:
            raise DPMarginalsError(
                f"the graphical-model fit was stopped after {self.steps} of {self.cost.iters} "
                f"iterations: it used {used:,.1f} s of CPU time ({self.wall_seconds:,.1f} s "
                f"wall), more than {OVERRUN:g}x its predicted {self.cost.seconds:,.1f} s "
                f"+ {SLACK:g} s "
                f"({self.cost.describe()}); use CALM's inference or fewer or smaller marginals")
