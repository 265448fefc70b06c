"""The Cormode-Kulkarni-Srivastava family (SIGMOD'18, §4 and appendix B.2), and the registry.

=============  ========================================  ==============================
name           what the user sends                       implementation
=============  ========================================  ==============================
``inp_rr``     her full table, eps/2-RR per cell (PRR)   :class:`InpRR` = FC with SUE
``inp_ps``     one cell of the full table by PS (GRR)    :class:`InpPS` = FC with GRR
``inp_ht``     one Hadamard coefficient, eps-RR          :class:`~.fourier.InpHT` (= FT)
``marg_rr``    a random k-way marginal, PRR per cell     :class:`MargRR` = AM with SUE
``marg_ps``    one cell of a random k-way marginal, PS   :class:`MargPS` = AM with GRR
``marg_ht``    one coefficient of a random marginal      :class:`~.fourier.MargHT`
``inp_em``     every attribute by (eps/d)-RR             :class:`~.em.InpEM`
``inp_olh``    her cell through OLH (B.2)                :class:`InpOLH` = FC with OLH
``inp_htcms``  Apple's Hadamard count-mean sketch (B.2)  :class:`InpHTCMS`
=============  ========================================  ==============================

PRR is eps/2 randomized response on every bit (their Fact 3.2; SUE); Cormode et al.'s
experiments used Wang et al.'s OUE probabilities instead ("these make little difference"),
available as ``oracle="oue"``.  PS with p_s = (1 + (m - 1) e^-eps)^-1 is GRR (Fact 3.1).
Users pick their marginal by the balanced random partition of the collection spine.

:data:`BASELINES` maps every baseline name of issue #4 to its class (PriView imported only
when made), for :data:`dpmarginals.methods._REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError, check_epsilon
from ..core.hashing import PRIME as HASH_PRIME
from ..core.hashing import independent_collision
from ..core.randomness import RNGLike, client_rng, simulation_rng
from ..oracles import fwht
from ..protocol.counts import Counts
from ..protocol.formats import (
    bits_for,
    group_oracle,
    sketch_coefficients,
    sketch_hash,
    support_sizes,
)
from ..protocol.plan import GroupSpec, Plan
from .binary_encoding import BE, BinaryEncoding
from .direct import (
    AM,
    DEFAULT_MAX_MEMORY,
    FC,
    POSTPROCESS,
    FullTableSynopsis,
    check_choice,
    check_k,
    check_positive_int,
    every_record,
    human_bytes,
)
from .em import EM, InpEM
from .fourier import FT, InpHT, MargHT, rr_keep

__all__ = ["BASELINES", "InpHTCMS", "InpOLH", "InpPS", "InpRR", "MargPS", "MargRR",
           "sketch_hashes"]



@dataclass
class InpRR(FC):
    """Parallel RR on the full input (Cormode et al. §4.2): FC with SUE (or OUE).

    >>> dom = Domain(tuple(f"a{i}" for i in range(8)), (2,) * 8)
    >>> InpRR(epsilon=1.0).plan(dom, 1000).params["report_bits"]
    256
    """

    oracle: str = "sue"
    name: ClassVar[str] = "inp_rr"
    oracles: ClassVar[tuple[str, ...]] = ("sue", "oue")

    def _table2_bits(self, domain: Domain) -> int | None:
        return domain.cells()  # 2^d


@dataclass
class InpPS(FC):
    """Preferential sampling on the full input (Cormode et al. §4.2): FC with GRR.

    >>> dom = Domain(tuple(f"a{i}" for i in range(8)), (2,) * 8)
    >>> InpPS(epsilon=1.0).plan(dom, 1000).params["report_bits"]
    8
    """

    oracle: str = "grr"
    name: ClassVar[str] = "inp_ps"
    oracles: ClassVar[tuple[str, ...]] = ("grr",)

    def _table2_bits(self, domain: Domain) -> int | None:
        return BinaryEncoding(domain).d2  # d


@dataclass
class InpOLH(FC):
    """Optimized local hashing of the full input (Cormode et al. B.2; Wang et al. 2017).

    The aggregate path samples each cell's support count exactly (binomials); the
    per-user path (``per_user=True``) makes and decodes every report, O(n |D|) work.
    """

    oracle: str = "olh"
    name: ClassVar[str] = "inp_olh"
    oracles: ClassVar[tuple[str, ...]] = ("olh",)


@dataclass
class MargRR(AM):
    """Parallel RR on a random k-way marginal (Cormode et al. §4.3): AM with SUE (or OUE).

    >>> dom = Domain(tuple(f"a{i}" for i in range(8)), (2,) * 8)
    >>> MargRR(epsilon=1.0).plan(dom, 1000).params["report_bits"]
    14
    """

    oracle: str = "sue"
    name: ClassVar[str] = "marg_rr"
    oracles: ClassVar[tuple[str, ...]] = ("sue", "oue")

    def _table2_bits(self, d: int, k: int) -> int | None:
        return d + 2**k


@dataclass
class MargPS(AM):
    """Preferential sampling on a random k-way marginal (Cormode et al. §4.3): AM with GRR."""

    oracle: str = "grr"
    name: ClassVar[str] = "marg_ps"
    oracles: ClassVar[tuple[str, ...]] = ("grr",)

    def _table2_bits(self, d: int, k: int) -> int | None:
        return d + k


def sketch_hashes(coefficients: np.ndarray, w: int, cells: int) -> np.ndarray:
    """h_j(x) = ((a x^2 + b x + c) mod P) mod w for x < cells, j < g: shape (g, cells), from
    the (3, g) coefficients the plan lists (degree-2 polynomials with uniform coefficients
    mod P = 2^31 - 1 are 3-wise independent, Cormode et al. B.2)."""
    coef = np.asarray(coefficients, dtype=np.int64)[:, :, None]
    return sketch_hash(coef, np.arange(cells, dtype=np.int64)[None, :], w)


@dataclass
class InpHTCMS:
    """Apple's private Hadamard count-mean sketch on the full input (Cormode et al. B.2).

    g hash functions (3-wise independent) map a cell x of the full table to [w].  A user
    picks j in [g] and l in [w] uniformly, and sends (j, l, b): b is the sign
    H_w[l, h_j(x)] through eps-randomized response.  The aggregator builds the sketch
    M[j, c] = c_eps g sum_l S[j, l] H_w[l, c] (S: sums of reported signs, c_eps =
    (e^eps + 1)/(e^eps - 1)), estimates every cell by (1/g) sum_j M[j, h_j(x)], removes the
    expected collisions (exact collision probability of the family) and marginalises the
    estimated full table.  Unbiased over the draw of the hash functions, whose coefficients
    the plan lists (drawn from ``hash_seed``, or the run's ``rng`` when None).  Defaults g = 5,
    w = 256 as in B.2.  No analytic error is given by the papers; ``noise_sse`` in the plan
    is the sketch's noise term only (hash collisions add a data-dependent error).

    The plan has one group of every attribute in the protocol's ``cms`` format: a report
    (j, l, b) travels as ``[j w + l, b]`` and the support counts reports per (j, l, b).
    """

    epsilon: float
    k: int = 3
    g: int = 5
    w: int = 256
    hash_seed: int | None = None
    per_user: bool = False
    postprocess: str = "none"
    max_memory: int = DEFAULT_MAX_MEMORY
    name: ClassVar[str] = "inp_htcms"

    def __post_init__(self) -> None:
        self.epsilon = check_epsilon(self.epsilon)
        self.k = check_k(self.k)
        self.g = check_positive_int(self.g, "g")
        self.w = check_positive_int(self.w, "w", 2)
        if self.w & (self.w - 1):
            raise DPMarginalsError(f"w must be a power of two (Hadamard size), got {self.w}")
        check_choice(self.postprocess, "postprocess", POSTPROCESS)

    def plan(self, domain: Domain, n: int, *, hash_seed: int | None = None) -> Plan:
        check_k(self.k, len(domain))
        cells = domain.cells()
        need = 8 * cells * (self.g + 4)
        if need > self.max_memory or cells >= HASH_PRIME:
            raise DPMarginalsError(
                f"{self.name} estimates every cell of the full table ({cells:,} cells, d = "
                f"{len(domain)}): about {human_bytes(need)} of memory, over the limit "
                f"max_memory = {human_bytes(self.max_memory)}")
        seed = hash_seed if hash_seed is not None else (self.hash_seed or 0)
        p = rr_keep(self.epsilon)
        coll = independent_collision(self.w)
        per_cell = 1.0 / ((2 * p - 1) ** 2 * n * (1 - coll) ** 2)
        n_c = cells / 2**self.k
        coefficients = sketch_coefficients(seed, self.g).tolist()
        params = {"k": self.k, "n": int(n), "g": self.g, "w": self.w, "hash_seed": int(seed),
                  "hash_coefficients": coefficients,
                  "p": p, "collision_probability": coll,
                  "report_bits": bits_for(self.g) + bits_for(self.w) + 1, "table2_bits": None,
                  "var0": per_cell, "variance_factor": None, "expected_sse": None,
                  "noise_sse": 2**self.k * per_cell * (n_c + n_c * (n_c - 1) / self.w)}
        group = GroupSpec(tuple(domain.attributes), "cms", self.epsilon, cells)
        return Plan(self.name, self.epsilon, domain, (group,), params)

    def run(self, data: Dataset, *, rng: RNGLike = None) -> FullTableSynopsis:
        """Plan (the hash seed drawn from ``rng`` unless fixed), simulated collection
        (:meth:`simulate`), release."""
        sim = simulation_rng(rng)
        seed = self.hash_seed if self.hash_seed is not None else int(sim.integers(2**53))
        plan = self.plan(data.domain, data.n, hash_seed=seed)
        # the seeded stream continues from the seed's draw; None keeps OS entropy
        return self.release(plan, self.simulate(data, plan, rng=None if rng is None else sim))

    def simulate(self, data: Dataset, plan: Plan, *, rng: RNGLike = None) -> Counts:
        """The Counts of ``plan``'s collection with every row of ``data`` as one user, each
        report made by the ``cms`` format as a device makes it (OS entropy when
        ``per_user=True`` and ``rng`` is None)."""
        fmt = group_oracle(plan, 0)
        src = client_rng(None) if (self.per_user and rng is None) else simulation_rng(rng)
        cells = data.cell_indices(plan.domain.attributes)
        return Counts([fmt.support(fmt.perturb(cells, rng=src))], [data.n])

    def release(self, plan: Plan, counts: Counts) -> FullTableSynopsis:
        """The sketch M[j, c] = c_eps g sum_l S[j, l] H_w[l, c] from the signed sums per
        (j, l), every cell's mean over the g rows, collisions removed (class docstring);
        g, w and the hash seed are the plan's."""
        if plan.m != 1 or plan.groups[0].oracle != "cms":
            raise DPMarginalsError(f"{self.name} releases a plan of one cms group")
        counts.check(support_sizes(plan))
        n = int(counts.users[0])
        if n <= 0:
            raise DPMarginalsError(f"{self.name}: no reports yet")
        fmt = group_oracle(plan, 0)
        g, w = fmt.g, fmt.w
        p, coll = fmt.p, independent_collision(w)
        by_bit = counts.supports[0].reshape(g, w, 2)
        sums = by_bit[:, :, 0] - by_bit[:, :, 1]  # S[j, l]
        sketch = fwht(sums) * (g / (2 * p - 1))  # M[j, c]
        hashes = sketch_hashes(fmt.coefficient_array, w, plan.domain.cells())
        est = sketch[np.arange(g)[:, None], hashes].mean(axis=0)  # per cell, counts
        table = (est / n - coll) / (1 - coll)
        info = {"plan_hash": plan.hash, **plan.params}
        return FullTableSynopsis(plan.domain, table, self.name, info, self.postprocess)

    def output_distribution(self, domain: Domain, hash_seed: int | None = None) -> np.ndarray:
        """P[(j, l, b) | record] of the ``cms`` format for every record of ``domain`` (rows:
        cells in C order; column (j w + l) 2 + b), with the hashes of ``hash_seed``
        (default: the method's, else 0, as :meth:`plan`)."""
        fmt = group_oracle(self.plan(domain, 1, hash_seed=hash_seed), 0)
        cells = every_record(domain).cell_indices(domain.attributes)
        return np.stack([fmt.output_distribution(int(c)) for c in cells])


BASELINES: dict[str, Callable[..., Any]] = {
    "fc": FC,
    "am": AM,
    "ft": FT,
    "em": EM,
    "be": BE,
    "inp_rr": InpRR,
    "inp_ps": InpPS,
    "inp_ht": InpHT,
    "marg_rr": MargRR,
    "marg_ps": MargPS,
    "marg_ht": MargHT,
    "inp_em": InpEM,
    "inp_olh": InpOLH,
    "inp_htcms": InpHTCMS,
}
