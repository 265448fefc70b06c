"""Error-optimal planning at any n: predict noise, sampling and reconstruction, take the least.

CALM's Algorithm 1 (:mod:`.error_model`) fixes the number of groups at ``m = theta n`` and
charges reconstruction a constant theta, so its plans get *worse* as n grows (MSNBC d = 16,
eps = 0.2 on all 989,818 users: its m = 120 plan gives SSE 0.0100, the n = 2^16 plan with
m = 65 gives 0.0055) and it cannot tell a data set whose pairs are nearly independent from one
whose pairs are strongly dependent.  This planner predicts the workload's mean SSE of any plan
from what is known about the data (a :class:`Structure`) and returns the least among a family
of candidates.

**The prediction.**  A query ``q``'s answer is split over the subsets ``S`` of ``q`` by an
orthonormal (Helmert) basis: the *top block* of ``S`` is the part of the ``S``-marginal that its
``(|S|-1)``-way sub-marginals do not fix.  Its error is

* **noise** if some group measures ``S``: ``D_S v_S`` with ``D_S = prod (c_a - 1)``
  coefficients and ``v_S = 1 / sum_{g ⊇ S} 1 / (C_g(S) Var_g)``, ``Var_g`` the variance of one
  orthonormal coefficient of group ``g``'s estimate
  (:func:`~.workload.coefficient_variance`, exact for GRR's multinomial counts) and ``C_g(S)``
  the cells of ``g`` behind one cell of ``S`` (CALM §4.4's pooling weights).  With
  ``shrink=True`` (the empirical-Bayes shrinkage of
  :func:`~dpmarginals.inference.shrinkage.eb_shrink`) a block of energy ``E_S`` costs its
  posterior error ``E_S N / (E_S + N)`` with ``N = D_S v_S`` instead of ``N``;
* **sampling** if measured: ``D_S / |S cells| * (1/N_S - 1/n)``, ``N_S`` the users of the groups
  that measure ``S`` (their marginal is not the population's); shrinkage removes it in the same
  proportion as the noise (both are error of the measured block);
* **reconstruction** if no group measures ``S``: ``E_S``, the squared distance between the
  ``S``-marginal and the maximum-entropy table of its facets (exactly the top block's energy,
  since both share every lower block); for a single attribute the distance to uniform.

A block's error reaches ``q``'s table multiplied by ``prod_{a in q - S} kappa_a``,
``kappa_a = sum_x p_a(x)^2`` (maximum entropy spreads an error of the ``S``-marginal over the
other attributes' values in proportion to their probabilities; ``1/c_a`` for uniform ones).

**The candidates** (:func:`candidate_families`): for every marginal size l whose groups fit
(at most :data:`~.workload.MAX_GROUP_CELLS` cells), m l-sets chosen greedily by the
reconstruction error they remove, for m on a grid that does not depend on n, each alone or
with every attribute also reported alone by one group; CALM's balanced subsets and covering
designs; and, given, CALM's own plan.  Each group gets the oracle of least variance for its
size.  Since the grid does not move with n and each candidate's predicted error falls as n
grows, the chosen plan's predicted error never rises with n.

**What the planner knows** (:class:`Structure`): the 1-way marginals (for ``kappa``) and the
interaction energies ``E_S``, from a public or synthetic sample (:meth:`Structure.from_data`),
from a first phase of reports (:func:`dpmarginals.local.adaptive.phase_one_structure`), or an
explicit prior per order (:meth:`Structure.prior`).

>>> from dpmarginals.core.domain import Domain
>>> from dpmarginals.planning.workload import Workload
>>> dom = Domain.from_dict({f"x{i}": 2 for i in range(8)})
>>> weak = Structure.prior(dom, {2: 1e-5, 3: 1e-6})
>>> plan_optimal(dom, 2**16, 1.0, Workload.all_k(dom, 3), weak).l
1
>>> strong = Structure.prior(dom, {2: 0.01, 3: 0.003})
>>> plan_optimal(dom, 2**16, 1.0, Workload.all_k(dom, 3), strong).l >= 3
True
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core import tuned as _tuned
from ..core.domain import Domain
from ..core.errors import DPMarginalsError, check_epsilon, check_positive_int
from ..oracles import make_oracle
from ..protocol.plan import GroupSpec, Plan
from .covering import balanced_subsets, cover_design, covering_size
from .workload import MAX_GROUP_CELLS, Workload, coefficient_variance

__all__ = [
    "Groups",
    "OptimalChoice",
    "Structure",
    "candidate_families",
    "group_variance",
    "plan_optimal",
    "predict",
]

#: Oracles a group may use; each group takes the one of least coefficient variance.
ORACLES = ("grr", "oue", "olh")
#: Queries of a large workload the prediction averages over (a fixed random sample).
MAX_QUERIES = 400
#: (query, subset) pairs the prediction visits at most: k-way queries have 2^k - 1 subsets.
SUBSET_BUDGET = 20_000
#: Interaction orders whose energies a :class:`Structure` computes set by set; higher ones are
#: extrapolated per order.
EXACT_ORDERS = 3
#: Most an interaction order's mean energy keeps of the order below it, beyond the orders
#: known (the last two known orders' ratio when that is smaller).  Measured on the data sets'
#: own energies (random sets, all users): order 4 keeps 1.5-12% of order 3 on Kosarak d = 16,
#: 32, MSNBC d = 16, Adult d = 15 and BR2000 d = 14, order 5 10-60% of order 4.  Noisy
#: reports overstate the triples, so their ratio to the pairs does not bound it; with the
#: earlier cap of 0.5 the planner saw 4-way interactions that are not there and, on Kosarak
#: d = 32, k = 8, eps = 0.2, chose 4-way groups that measured 2.7x CALM's error.
ORDER_DECAY = _tuned.ORDER_DECAY  # provenance: core/tuned.py
#: Largest interaction energy there is: the squared L2 distance between two distributions.
MAX_ENERGY = 2.0
#: Largest marginal size a candidate group reports.
MAX_L = 6
#: Fewest users a candidate plan may give one group.
MIN_GROUP_USERS = 32
#: The grid of group counts, as multiples of ceil(d / l) (the fewest l-sets that hold every
#: attribute): it does not depend on n.
M_MULTIPLES = (1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32)


def _mask(domain: Domain, attrs: Sequence[str]) -> int:
    out = 0
    for a in attrs:
        out |= 1 << domain.index(a)
    return out


def _members(mask: int) -> list[int]:
    out, i = [], 0
    while mask:
        if mask & 1:
            out.append(i)
        mask >>= 1
        i += 1
    return out


@dataclass
class Structure:
    """What a planner knows about the data: 1-way marginals and interaction energies.

    ``marginals[a]``: attribute ``a``'s distribution (uniform where missing).
    ``energy``: ``E_S`` per attribute set (a frozenset of names) of size >= 2, the squared
    distance between its marginal and the maximum-entropy table of its facets.
    ``order_energy[j]``: the mean ``E_S`` of an order-``j`` set not in ``energy``; orders
    beyond the largest given decay geometrically by the ratio of the last two (at most
    :data:`ORDER_DECAY`).
    ``lookup``: computes ``E_S`` of a set on demand (a public sample does), else None.
    ``source``: where it came from ("public data", "phase 1", "prior").
    ``capacity``: orders whose sets not in ``energy`` get the order's mean scaled by their
    capacity relative to the order's mean capacity (:meth:`capacity_of`), not the mean alone.
    The marginals are read once per attribute (:meth:`kappa` and :meth:`mean_capacity` keep
    what they derive from them), so give them at construction.
    """

    domain: Domain
    marginals: dict[str, np.ndarray] = field(default_factory=dict)
    energy: dict[frozenset[str], float] = field(default_factory=dict)
    order_energy: dict[int, float] = field(default_factory=dict)
    source: str = "prior"
    lookup: Callable[[tuple[str, ...]], float] | None = field(default=None, repr=False)
    capacity: tuple[int, ...] = ()
    _kappa: dict[str, float] = field(default_factory=dict, init=False, repr=False,
                                     compare=False)
    _mean_capacity: dict[int, float] = field(default_factory=dict, init=False, repr=False,
                                             compare=False)

    def kappa(self, attr: str) -> float:
        """``sum_x p(x)^2`` of the attribute's distribution."""
        if attr not in self._kappa:
            from ..inference.shrinkage import concentration

            p = self.marginals.get(attr)
            self._kappa[attr] = 1.0 / self.domain.size(attr) if p is None else concentration(p)
        return self._kappa[attr]

    def single_energy(self, attr: str) -> float:
        """The 1-way marginal's squared distance to uniform (its error if unmeasured)."""
        p = self.marginals.get(attr)
        if p is None:
            return self.order_energy.get(1, 0.0)
        p = np.asarray(p, dtype=np.float64)
        return float(((p - 1.0 / p.size) ** 2).sum())

    def order_mean(self, order: int) -> float:
        """The mean energy of an order-``order`` set: below the given orders, the lowest's;
        between two given orders, geometric interpolation (linear when one is 0); beyond
        them, the decay of :data:`ORDER_DECAY`."""
        if order in self.order_energy:
            return float(self.order_energy[order])
        known = sorted(j for j in self.order_energy if j >= 2)
        if not known:
            return 0.0
        if order < known[0]:
            return float(self.order_energy[known[0]])
        top = known[-1]
        if order < top:
            lo = max(j for j in known if j < order)
            hi = min(j for j in known if j > order)
            e_lo, e_hi = float(self.order_energy[lo]), float(self.order_energy[hi])
            t = (order - lo) / (hi - lo)
            if e_lo > 0 and e_hi > 0:
                return e_lo * (e_hi / e_lo) ** t
            return e_lo + (e_hi - e_lo) * t
        ratio = ORDER_DECAY
        if top - 1 in self.order_energy and self.order_energy[top - 1] > 0:
            ratio = min(ORDER_DECAY, self.order_energy[top] / self.order_energy[top - 1])
        return float(self.order_energy[top] * ratio ** (order - top))

    def capacity_of(self, attrs: Sequence[str]) -> float:
        """``prod_a (1 - kappa_a)``: how much the attributes can interact
        (:func:`dpmarginals.inference.shrinkage.interaction_capacity`)."""
        return math.prod(1.0 - self.kappa(a) for a in attrs)

    def mean_capacity(self, order: int) -> float:
        """The mean capacity of the order-``order`` sets of the domain (an elementary
        symmetric polynomial of the ``1 - kappa_a``, over the number of sets)."""
        if order not in self._mean_capacity:
            poly = np.zeros(order + 1)
            poly[0] = 1.0
            for a in self.domain.attributes:
                poly[1:] = poly[1:] + (1.0 - self.kappa(a)) * poly[:-1]
            self._mean_capacity[order] = float(poly[order]) / math.comb(len(self.domain), order)
        return self._mean_capacity[order]

    def energy_of(self, attrs: Sequence[str]) -> float:
        if len(attrs) == 1:
            return self.single_energy(attrs[0])
        key = frozenset(attrs)
        if key not in self.energy and self.lookup is not None and len(attrs) <= EXACT_ORDERS:
            self.energy[key] = float(self.lookup(tuple(attrs)))
        if key in self.energy:
            return self.energy[key]
        if len(attrs) in self.capacity:
            mean = self.mean_capacity(len(attrs))
            if mean > 0:
                return self.order_mean(len(attrs)) * self.capacity_of(attrs) / mean
        return self.order_mean(len(attrs))

    @classmethod
    def prior(cls, domain: Domain, order_energy: Mapping[int, float],
              marginals: Mapping[str, Sequence[float]] | None = None) -> Structure:
        """An explicit prior: the mean energy of an interaction of each order."""
        clean = {}
        for j, e in order_energy.items():
            j = check_positive_int(j, "order", 1)
            value = float(e)
            if not 0 <= value <= MAX_ENERGY:
                raise DPMarginalsError(f"order_energy[{j}] must be a number in [0, "
                                       f"{MAX_ENERGY:g}] (a squared distance between two "
                                       f"distributions), got {e!r}")
            clean[j] = value
        return cls(domain, {a: np.asarray(p, float) for a, p in (marginals or {}).items()},
                   {}, clean, "prior")

    @classmethod
    def from_data(cls, data: Any, orders: int = EXACT_ORDERS) -> Structure:
        """Energies measured on a (public or synthetic) :class:`~dpmarginals.core.dataset.Dataset`.

        Sets up to ``orders`` attributes are measured when the planner asks for them; the mean
        per order (from all pairs and, for triples, a fixed sample of at most 200) extrapolates
        the higher orders.
        """
        from ..inference import max_entropy

        dom = data.domain
        marginals = {a: data.marginal([a]).values for a in dom.attributes}

        def lookup(attrs: tuple[str, ...]) -> float:
            table = data.marginal(list(attrs)).values
            facets = [(f, data.marginal([attrs[i] for i in f]).values)
                      for f in itertools.combinations(range(len(attrs)), len(attrs) - 1)]
            base = max_entropy(tuple(range(len(attrs))), facets,
                               [dom.size(a) for a in attrs])
            return float(((table - base) ** 2).sum())

        out = cls(dom, marginals, {}, {}, "public data", lookup)
        gen = np.random.default_rng(0)
        for order in range(2, min(orders, len(dom)) + 1):
            sets = list(itertools.combinations(dom.attributes, order))
            if len(sets) > 200:
                sets = [sets[i] for i in gen.choice(len(sets), 200, replace=False)]
            out.order_energy[order] = float(np.mean([out.energy_of(s) for s in sets]))
        return out


@dataclass(frozen=True)
class _Subsets:
    """The workload's subsets with their spread weights ``W_S`` (mean over queries)."""

    masks: np.ndarray        # uint64 bitmask per subset
    weight: np.ndarray       # W_S
    cells: np.ndarray        # cells of S
    coefs: np.ndarray        # D_S = prod (c_a - 1)
    energy: np.ndarray       # E_S
    order: np.ndarray        # |S|
    _inside: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def inside(self, group: int) -> np.ndarray:
        """Indices of the subsets a group's attribute set contains (cached)."""
        if group not in self._inside:
            if not hasattr(self, "_index"):
                object.__setattr__(self, "_index", {int(m): i for i, m in
                                                    enumerate(self.masks.tolist())})
            index = self._index  # type: ignore[attr-defined]
            found, sub = [], group
            while sub:  # every non-empty submask of the group
                i = index.get(sub)
                if i is not None:
                    found.append(i)
                sub = (sub - 1) & group
            self._inside[group] = np.array(found, dtype=np.int64)
        return self._inside[group]


def _workload_subsets(workload: Workload, structure: Structure,
                      max_queries: int = MAX_QUERIES) -> _Subsets:
    dom = workload.domain
    queries = list(workload.queries)
    # about SUBSET_BUDGET (query, subset) pairs: fewer queries of larger marginals
    max_queries = max(50, min(max_queries, SUBSET_BUDGET >> workload.max_size))
    if len(queries) > max_queries:
        gen = np.random.default_rng(0)
        queries = [queries[i] for i in sorted(gen.choice(len(queries), max_queries,
                                                         replace=False))]
    kappa = {a: structure.kappa(a) for a in dom.attributes}
    weight: dict[tuple[str, ...], float] = {}
    for q in queries:
        for j in range(1, len(q) + 1):
            for sub in itertools.combinations(q, j):
                spread = math.prod(kappa[a] for a in q if a not in sub)
                weight[sub] = weight.get(sub, 0.0) + spread
    subs = list(weight)
    return _Subsets(
        masks=np.array([_mask(dom, s) for s in subs], dtype=np.uint64),
        weight=np.array([weight[s] for s in subs]) / len(queries),
        cells=np.array([math.prod(dom.size(a) for a in s) for s in subs], dtype=np.float64),
        coefs=np.array([math.prod(dom.size(a) - 1 for a in s) for s in subs], dtype=np.float64),
        energy=np.array([structure.energy_of(s) for s in subs]),
        order=np.array([len(s) for s in subs]),
    )


def group_variance(epsilon: float, cells: int, users: float,
                   oracles: Sequence[str] = ORACLES) -> tuple[str, float]:
    """The oracle of least coefficient variance for a group, and that variance."""
    best = None
    for name in oracles:
        oracle = make_oracle(name, epsilon, max(int(cells), 2))
        var = coefficient_variance(oracle, max(int(users), 1))
        if best is None or var < best[1]:
            best = (name, var)
    assert best is not None
    return best


@dataclass(frozen=True)
class Groups:
    """Groups of users, each reporting one attribute set through one oracle."""

    masks: np.ndarray      # uint64 per group
    cells: np.ndarray      # cells of its marginal
    variance: np.ndarray   # variance of one orthonormal coefficient of its estimate
    users: np.ndarray      # users in the group

    @classmethod
    def of(cls, domain: Domain, sets: Sequence[Sequence[str]], epsilon: float, users: float,
           oracles: Sequence[str] = ORACLES) -> tuple[Groups, list[str]]:
        cells = [domain.project(s).cells() for s in sets]
        chosen = {c: group_variance(epsilon, c, users, oracles) for c in set(cells)}
        return (cls(np.array([_mask(domain, s) for s in sets], dtype=np.uint64),
                    np.array(cells, dtype=np.float64),
                    np.array([chosen[c][1] for c in cells]),
                    np.full(len(sets), float(users))),
                [chosen[c][0] for c in cells])

    @classmethod
    def reported(cls, domain: Domain, views: Sequence[Any]) -> Groups:
        """Groups that already reported, from their views (each with ``attributes``,
        ``table``, ``users`` and ``variance``, the coefficient variance): an earlier phase's,
        pooled into every candidate's prediction."""
        return cls(np.array([_mask(domain, v.attributes) for v in views], dtype=np.uint64),
                   np.array([v.table.size for v in views], dtype=np.float64),
                   np.array([v.variance for v in views], dtype=np.float64),
                   np.array([v.users for v in views], dtype=np.float64))

    def __add__(self, other: Groups) -> Groups:
        return Groups(*(np.concatenate([a, b]) for a, b in
                        zip((self.masks, self.cells, self.variance, self.users),
                            (other.masks, other.cells, other.variance, other.users),
                            strict=True)))

    @classmethod
    def empty(cls) -> Groups:
        return cls(np.zeros(0, np.uint64), np.zeros(0), np.zeros(0), np.zeros(0))


def _errors(subsets: _Subsets, groups: Groups, n: float, shrink: bool
            ) -> tuple[float, float, float]:
    """Mean (noise, sampling, reconstruction) SSE per query of ``groups``."""
    size = len(subsets.masks)
    precision, users = np.zeros(size), np.zeros(size)
    if len(groups.masks):
        parts = [subsets.inside(int(g)) for g in groups.masks.tolist()]
        idx = np.concatenate(parts)
        reps = np.array([p.size for p in parts])
        precision = subsets.cells * np.bincount(
            idx, np.repeat(1.0 / (groups.cells * groups.variance), reps), minlength=size)
        users = np.bincount(idx, np.repeat(groups.users, reps), minlength=size)
    measured = precision > 0
    noise = np.where(measured, subsets.coefs / np.where(measured, precision, 1.0), 0.0)
    sampling = np.where(measured, subsets.coefs / subsets.cells
                        * np.maximum(1.0 / np.maximum(users, 1.0) - 1.0 / n, 0.0), 0.0)
    if shrink:  # shrinkage acts on noise and sampling error alike: E N / (E + N)
        e, both = subsets.energy, noise + sampling
        factor = np.where(both > 0, e / np.maximum(e + both, 1e-300), 1.0)
        keep = subsets.order >= 2
        noise = np.where(keep, noise * factor, noise)
        sampling = np.where(keep, sampling * factor, sampling)
    recon = np.where(measured, 0.0, subsets.energy)
    w = subsets.weight
    return float(w @ noise), float(w @ sampling), float(w @ recon)


def predict(
    domain: Domain,
    n: int,
    epsilon: float,
    sets: Sequence[Sequence[str]],
    workload: Workload,
    structure: Structure,
    *,
    existing: Groups | None = None,
    shrink: bool = True,
    oracles: Sequence[str] = ORACLES,
) -> tuple[float, float, float]:
    """Predicted mean (noise, sampling, reconstruction) SSE per workload query of a plan whose
    ``sets`` share ``n`` users equally, pooled with the ``existing`` groups (a first phase)."""
    subsets = _workload_subsets(workload, structure)
    groups, _ = Groups.of(domain, sets, epsilon, n / len(sets), oracles)
    if existing is not None:
        total = n + float(existing.users.sum())
        groups = existing + groups
    else:
        total = n
    return _errors(subsets, groups, total, shrink)


def _greedy_sets(domain: Domain, subsets: _Subsets, l: int, m: int, noise_of: Callable[
        [np.ndarray], np.ndarray], covered: np.ndarray) -> list[tuple[str, ...]]:
    """m l-sets grown one attribute at a time by the error they remove.

    A subset's gain is ``W_S (E_S - E_S N_S / (E_S + N_S))`` (its reconstruction error less the
    shrunk noise of measuring it once at the candidate's group size), counted once: a subset
    measured by an earlier set gains nothing more.  Each set starts from the attribute of
    greatest remaining gain and adds the attribute that adds the most.
    """
    d = len(domain)
    gain = subsets.weight * (subsets.energy - subsets.energy * noise_of(subsets.coefs)
                             / np.maximum(subsets.energy + noise_of(subsets.coefs), 1e-300))
    live = ~covered & (gain > 0) & (subsets.order <= l)
    masks, gain = subsets.masks[live], gain[live]
    chosen: list[int] = []
    seen: set[int] = set()
    uses = np.zeros(d)
    for _ in range(m):
        block = 0
        for _ in range(l):
            # a subset adds to attribute a's score when a is its only attribute outside the block
            outside = masks & np.uint64(~block & ((1 << 64) - 1))
            single = (outside != 0) & ((outside & (outside - np.uint64(1))) == 0)
            attr = np.log2(outside[single].astype(np.float64)).round().astype(np.int64)
            score = np.bincount(attr, gain[single], minlength=d) - 1e-12 * uses
            score[_members(block)] = -np.inf
            block |= 1 << int(np.argmax(score))
        if block in seen:  # nothing left to gain
            break
        seen.add(block)
        chosen.append(block)
        gain = np.where((masks & np.uint64(block)) == masks, 0.0, gain)
        for a in _members(block):
            uses[a] += 1
    names = domain.attributes
    return [tuple(names[i] for i in _members(b)) for b in chosen]


@functools.lru_cache(maxsize=256)
def _balanced(d: int, l: int, m: int) -> tuple[tuple[int, ...], ...]:
    return tuple(balanced_subsets(d, l, m))


def candidate_families(
    domain: Domain,
    n: int,
    epsilon: float,
    workload: Workload,
    structure: Structure,
    *,
    existing: Groups | None = None,
    max_l: int | None = None,
    max_cells: int = MAX_GROUP_CELLS,
    oracles: Sequence[str] = ORACLES,
    extra: Sequence[tuple[str, Sequence[Sequence[str]]]] = (),
    subsets: _Subsets | None = None,
) -> list[tuple[str, list[tuple[str, ...]]]]:
    """Named families of attribute sets worth scoring (see the module docstring)."""
    d = len(domain)
    names = domain.attributes
    if subsets is None:
        subsets = _workload_subsets(workload, structure)
    covered = np.zeros(len(subsets.masks), dtype=bool)
    singles = [(a,) for a in names]
    out: list[tuple[str, list[tuple[str, ...]]]] = [(name, [tuple(s) for s in sets])
                                                     for name, sets in extra]
    top_l = min(d, max_l or d, max(workload.max_size, 1) + 1, MAX_L)
    for l in range(1, top_l + 1):
        cells = math.prod(sorted(domain.sizes)[-l:])
        if cells > max_cells:
            break
        base = math.ceil(d / l)
        ms = sorted({min(math.comb(d, l), math.ceil(base * f)) for f in M_MULTIPLES})
        ms = [m for m in ms if n / m >= MIN_GROUP_USERS]
        for m in ms:
            users = n / m

            def noise_of(coefs: np.ndarray, users: float = users, l: int = l) -> np.ndarray:
                c = math.prod(sorted(domain.sizes)[-l:])
                return coefs * group_variance(epsilon, c, users, oracles)[1]

            greedy = singles if l == 1 else _greedy_sets(domain, subsets, l, m, noise_of,
                                                         covered)
            if len(greedy) == m:
                out.append((f"greedy l={l} m={m}", greedy))
                if l >= 2 and n / (m + d) >= MIN_GROUP_USERS:
                    out.append((f"greedy l={l} m={m} + singles", greedy + singles))
            if l >= 2 and m <= 2 * d:
                blocks = _balanced(d, l, m)
                out.append((f"balanced l={l} m={m}", [tuple(names[i] for i in b)
                                                      for b in blocks]))
        k = workload.k
        if k is not None and 2 <= k <= l and covering_size(d, k, l, max_blocks=4096):
            design = cover_design(d, k, l)
            if design is not None and n / len(design) >= MIN_GROUP_USERS:
                out.append((f"covering l={l} m={len(design)}",
                            [tuple(names[i] for i in b) for b in design]))
    seen: set[tuple[tuple[str, ...], ...]] = set()
    unique = []
    for name, sets in out:
        key = tuple(sorted(sets))
        if key not in seen:
            seen.add(key)
            unique.append((name, sets))
    return unique


@dataclass(frozen=True)
class OptimalChoice:
    """The chosen plan's sets and oracles, its predicted errors and the runners-up.

    ``noise``, ``sampling``, ``reconstruction``: predicted mean SSE per workload query
    (the existing groups' reports pooled in).
    """

    family: str
    sets: tuple[tuple[str, ...], ...]
    oracles: tuple[str, ...]
    noise: float
    sampling: float
    reconstruction: float
    source: str
    candidates: tuple[dict[str, Any], ...] = field(default=(), repr=False)

    @property
    def total(self) -> float:
        return self.noise + self.sampling + self.reconstruction

    @property
    def m(self) -> int:
        return len(self.sets)

    @property
    def l(self) -> int:  # noqa: E743 (CALM's name for the marginal size)
        return max(len(s) for s in self.sets)

    def plan(self, domain: Domain, epsilon: float, method: str = "calm",
             params: Mapping[str, Any] | None = None) -> Plan:
        groups = tuple(GroupSpec(s, o, epsilon, domain.project(s).cells())
                       for s, o in zip(self.sets, self.oracles, strict=True))
        body = {"l": self.l, "m": self.m, "family": self.family,
                "predicted_sse": self.total, "noise_error": self.noise,
                "sampling_error": self.sampling, "reconstruction_error": self.reconstruction,
                "structure": self.source, **(params or {})}
        return Plan(method, epsilon, domain, groups, body)

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "l": self.l, "m": self.m, "predicted_sse": self.total,
                "noise_error": self.noise, "sampling_error": self.sampling,
                "reconstruction_error": self.reconstruction, "structure": self.source,
                "attribute_sets": [list(s) for s in self.sets], "oracles": list(self.oracles)}


def plan_optimal(
    domain: Domain,
    n: int,
    epsilon: float,
    workload: Workload,
    structure: Structure,
    *,
    existing: Groups | None = None,
    shrink: bool = True,
    max_l: int | None = None,
    max_cells: int = MAX_GROUP_CELLS,
    oracles: Sequence[str] = ORACLES,
    extra: Sequence[tuple[str, Sequence[Sequence[str]]]] = (),
) -> OptimalChoice:
    """The candidate plan for ``n`` users with the least predicted workload SSE.

    ``existing``: groups that already reported (a first phase), pooled into every candidate's
    prediction.  ``shrink``: predict for empirical-Bayes shrinkage (the ``pgm`` inference and
    the adaptive method's); False predicts for CALM's unshrunk consistency.  ``extra``: more
    named candidate families (e.g. CALM's own plan).
    """
    n = check_positive_int(n, "n")
    epsilon = check_epsilon(epsilon)
    if workload.domain != domain:
        raise DPMarginalsError("the workload is over another domain")
    subsets = _workload_subsets(workload, structure)
    prior_users = 0.0 if existing is None else float(existing.users.sum())
    rows = []
    scored: list[OptimalChoice] = []
    for name, sets in candidate_families(domain, n, epsilon, workload, structure,
                                         existing=existing, max_l=max_l,
                                         max_cells=max_cells, oracles=oracles, extra=extra,
                                         subsets=subsets):
        if not sets or n / len(sets) < 1:
            continue
        groups, chosen = Groups.of(domain, sets, epsilon, n / len(sets), oracles)
        pooled = groups if existing is None else existing + groups
        ne, se, re = _errors(subsets, pooled, n + prior_users, shrink)
        rows.append({"family": name, "l": max(len(s) for s in sets), "m": len(sets),
                     "predicted_sse": ne + se + re, "noise_error": ne, "sampling_error": se,
                     "reconstruction_error": re})
        scored.append(OptimalChoice(name, tuple(sets), tuple(chosen), ne, se, re,
                                    structure.source))
    if not scored:
        raise DPMarginalsError(f"no candidate plan fits {n} users (each group needs at least "
                               f"{MIN_GROUP_USERS})")
    rows.sort(key=lambda r: r["predicted_sse"])
    best = min(scored, key=lambda c: c.total)
    return OptimalChoice(best.family, best.sets, best.oracles, best.noise, best.sampling,
                         best.reconstruction, best.source, tuple(rows))
