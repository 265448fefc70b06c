"""Direct local-DP baselines: the full contingency table (FC) and all k-way marginals (AM).

Both are instances of the collection spine (:mod:`dpmarginals.local.collect`):

* **FC** (CALM §3.3): one group, every user reports her full record (a cell of the full
  contingency table) through one frequency oracle; any marginal is a projection of the
  noisy full table.  Expected SSE of a k-way marginal: ``|D| Var0`` (CALM eq. 4; ``2^d
  Var0`` for binary data), ``Var0`` the oracle's per-cell variance with all n users.
  Cormode et al.'s InpRR (oracle SUE, their "PRR"), InpPS (GRR, their "PS") and InpOLH
  are FC with a fixed oracle (:mod:`dpmarginals.local.cormode`).
* **AM** (CALM §3.4): users split into C(d, k) groups, one per k-way marginal, each
  reporting its marginal's cell.  Expected SSE: ``2^k C(d, k) Var0`` (CALM eq. 5).
  Cormode et al.'s MargRR (SUE) and MargPS (GRR) are AM with a fixed oracle.

Both release raw, unbiased estimates (cells may be negative, totals need not be 1), as the
papers compare them; ``postprocess="norm_sub"`` makes every answered table a distribution.

Methods that cannot run at a size refuse up front: FC when the full table does not fit in
``max_memory`` (d = 32 binary attributes is 2^32 cells), AM with fewer users than marginals.

Every method's public plan carries ``report_bits`` (per-user communication, Cormode et al.
Table 2), ``table2_bits`` (Table 2's formula where it has one), and where the papers give one
its analytic error: ``var0``, ``variance_factor`` (CALM's multiple of ``Var0``) and
``expected_sse`` (their product: the expected SSE of one k-way marginal).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, ClassVar

import numpy as np

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import (
    DPMarginalsError,
    check_choice,
    check_epsilon,
    check_k,
    check_positive_int,
)
from ..core.randomness import RNGLike
from ..core.table import MarginalTable
from ..inference import norm_sub, project
from ..inference.views import NoisyView
from ..oracles import ORACLES, adaptive_oracle, best_oracle, make_oracle
from ..protocol.formats import bits_for, group_oracle
from ..protocol.plan import GroupSpec, Plan
from ..synopsis.base import Synopsis, check_query, views_from_json, views_to_json
from .collect import Counts, estimate_views, group_supports

__all__ = [
    "AM",
    "FC",
    "FullTableSynopsis",
    "MarginalsSynopsis",
    "bits_for",
    "check_k",
    "collection_output_distribution",
    "every_record",
    "human_bytes",
]

POSTPROCESS = ("none", "norm_sub")
#: How a marginals method turns its noisy views into a synopsis: "views" (each query from
#: the views that contain it) or "pgm" (issue #9: shrinkage + a graphical model over all
#: of them, which also answers queries no view contains; the optional 'pgm' extra).
VIEW_INFERENCE = ("views", "pgm")
DEFAULT_MAX_MEMORY = 2**31  # bytes


# -- small shared helpers (used by every baseline module; bits_for from the protocol) ----
def human_bytes(nbytes: float) -> str:
    """A byte count for an error message: '137.4 GB'."""
    value = float(nbytes)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} PB"


def every_record(domain: Domain) -> Dataset:
    """All |D| records of ``domain``, row i the record of cell i (C order): the inputs an
    exact privacy check enumerates (small domains only)."""
    values = np.asarray(domain.values_of(np.arange(domain.cells())), dtype=np.int64)
    return Dataset(values.reshape(-1, len(domain)), domain)


def collection_output_distribution(plan: Plan, records: Dataset) -> np.ndarray:
    """P[(group, report) | record] for one user of the collection spine (CALM §4.2; FC, AM:
    CALM §3.3-3.4): rows ``records``, columns each group's oracle outputs, groups in plan order.

    As in :func:`~dpmarginals.local.collect.group_supports`, the user's group comes from a
    random partition independent of her record (weight 1/m here: its marginal when m divides
    n; the weights cancel in every privacy ratio) and she reports her cell of the group's
    marginal through the group's oracle, so block g is ``oracle.output_distribution(cell)/m``.
    """
    blocks = []
    for g, spec in enumerate(plan.groups):
        oracle = group_oracle(plan, g).oracle  # a memoized plan's: the composed law
        cells = records.cell_indices(spec.attributes)
        blocks.append(np.stack([oracle.output_distribution(int(c)) for c in cells]))
    return np.concatenate(blocks, axis=1) / plan.m


def apply_postprocess(table: np.ndarray, how: str) -> np.ndarray:
    """'none' keeps the unbiased estimate; 'norm_sub' projects it to a distribution."""
    if how == "norm_sub":
        return norm_sub(table, 1.0)
    return table


def mean_query_cells(domain: Domain, k: int, limit: int = 200_000) -> float:
    """Mean number of cells of a k-way marginal over all k-sets of attributes.

    The elementary symmetric polynomial e_k(sizes) / C(d, k), computed by the usual
    recurrence (no enumeration).
    """
    e = [1.0] + [0.0] * k
    for s in domain.sizes:
        for j in range(k, 0, -1):
            e[j] += e[j - 1] * s
    return e[k] / math.comb(len(domain), k)


def choose_oracle(oracle: str, epsilon: float, cells: int) -> str:
    """The oracle name for a group: "adaptive" (CALM §2.2.3), "best", or a fixed name."""
    if oracle == "adaptive":
        return adaptive_oracle(epsilon, cells).name
    if oracle == "best":
        return best_oracle(epsilon, cells).name
    return make_oracle(oracle, epsilon, cells).name


# -- synopses ------------------------------------------------------------------------------
@dataclass(eq=False)
class FullTableSynopsis(Synopsis):
    """A noisy full contingency table; any marginal is its projection (FC, InpRR, InpPS...).

    ``postprocess``: "none" (the unbiased projection) or "norm_sub" (Norm-Sub of each answer).
    """

    kind: ClassVar[str] = "full_table"
    domain: Domain
    table: np.ndarray
    method: str = "fc"
    info: dict[str, Any] = field(default_factory=dict)
    postprocess: str = "none"

    def __post_init__(self) -> None:
        self.table = np.asarray(self.table, dtype=np.float64).reshape(self.domain.shape)
        check_choice(self.postprocess, "postprocess", POSTPROCESS)

    def marginal(self, attrs: Sequence[str]) -> MarginalTable:
        attrs = check_query(self.domain, attrs)
        values = project(tuple(range(len(self.domain))), self.table, self.domain.indices(attrs))
        return MarginalTable(self.domain.project(attrs),
                             apply_postprocess(values, self.postprocess))

    def _payload(self) -> dict[str, Any]:
        return {"info": self.info, "postprocess": self.postprocess,
                "values": self.table.ravel().tolist()}

    @classmethod
    def _from_payload(cls, domain: Domain, method: str, payload: Mapping[str, Any]) -> Synopsis:
        return cls(domain, np.asarray(payload["values"], float), method,
                   dict(payload.get("info", {})), str(payload.get("postprocess", "none")))


@dataclass(eq=False)
class MarginalsSynopsis(Synopsis):
    """Independently estimated noisy marginals (AM, MargRR, MargPS, MargHT).

    A query inside one or more collected marginals is answered by the inverse-variance
    weighted average of their projections (weights ``1 / (C_i Var_i)``, ``C_i`` the number
    of cells summed per answer cell): unbiased when the marginals are.  These methods
    collect no information about larger attribute sets, so a query no collected marginal
    contains is an error (CALM §3.4: "no way to answer any t-way marginal queries for t > k").
    """

    kind: ClassVar[str] = "marginals"
    domain: Domain
    views: list[tuple[tuple[str, ...], np.ndarray]]
    variances: list[float] | None = None
    method: str = "am"
    info: dict[str, Any] = field(default_factory=dict)
    postprocess: str = "none"

    def __post_init__(self) -> None:
        check_choice(self.postprocess, "postprocess", POSTPROCESS)
        if self.variances is None:
            self.variances = [1.0] * len(self.views)
        if len(self.variances) != len(self.views):
            raise DPMarginalsError("variances must have one entry per view")

    def marginal(self, attrs: Sequence[str]) -> MarginalTable:
        attrs = check_query(self.domain, attrs)
        wanted = set(attrs)
        q = self.domain.indices(attrs)
        total, weight = None, 0.0
        assert self.variances is not None
        for (view_attrs, table), var in zip(self.views, self.variances, strict=True):
            if not wanted <= set(view_attrs):
                continue
            idx = self.domain.indices(view_attrs)
            c = math.prod(self.domain.size(a) for a in view_attrs if a not in wanted)
            w = 1.0 / (c * max(var, 1e-300))
            part = project(idx, table, q) * w
            total = part if total is None else total + part
            weight += w
        if total is None:
            sizes = sorted({len(a) for a, _ in self.views})
            raise DPMarginalsError(
                f"{self.method} collected only {'/'.join(map(str, sizes))}-way marginals and none "
                f"contains {list(attrs)}; it cannot answer this query (use calm, ft or em)")
        return MarginalTable(self.domain.project(attrs),
                             apply_postprocess(total / weight, self.postprocess))

    def _payload(self) -> dict[str, Any]:
        return {"info": self.info, "postprocess": self.postprocess,
                "variances": list(self.variances or []),
                "views": views_to_json(self.views)}

    @classmethod
    def _from_payload(cls, domain: Domain, method: str, payload: Mapping[str, Any]) -> Synopsis:
        views = views_from_json(domain, payload["views"])
        return cls(domain, views, [float(x) for x in payload["variances"]], method,
                   dict(payload.get("info", {})), str(payload.get("postprocess", "none")))


def release_views(domain: Domain, plan: Plan, views: Sequence[NoisyView], method: str,
                  postprocess: str, inference: str, population: int | None = None
                  ) -> Synopsis:
    """The synopsis of a marginals method's noisy views (``inference``: see
    :data:`VIEW_INFERENCE`; ``postprocess`` applies to "views"; ``population``: the users the
    groups were drawn from, when the views' variances leave out that sampling error, which
    the graphical model's shrinkage then adds, CALM §4.3)."""
    info = {"plan_hash": plan.hash, **plan.params, **reporting_groups(plan, views)}
    if inference == "pgm":
        from ..synopsis.stderr import collection_info
        from .calm_pgm import pgm_synopsis

        if all(g.oracle in ORACLES for g in plan.groups):  # what standard errors need
            info.update({"n": int(sum(v.users for v in views)),
                         **collection_info(plan, views)})
        return pgm_synopsis(domain, views, method, info, population=population)
    return MarginalsSynopsis(domain, [(v.attributes, v.table) for v in views],
                             [v.variance for v in views], method, info, postprocess)


def reporting_groups(plan: Plan, views: Sequence[NoisyView]) -> dict[str, Any]:
    """``{"collection": [...]}``: every group's attributes, oracle, epsilon and users, what
    the noise-aware association tests rebuild a measured answer from
    (:mod:`dpmarginals.applications.release_noise`).  Not ``info["groups"]``, which tells
    the standard errors that consistency pooled the groups (these methods do not)."""
    from ..synopsis.stderr import collection_info

    return {"collection": collection_info(plan, views)["groups"]}


def reported_views(plan: Plan, counts: Counts) -> list[NoisyView]:
    """Every group's unbiased view; a group without reports is an error (these methods
    answer a query from the views that contain it, so none may be missing)."""
    counts.check([g.cells for g in plan.groups])
    empty = [g for g in range(plan.m) if counts.users[g] <= 0]
    if empty:
        raise DPMarginalsError(f"{plan.method}: {len(empty)} of the plan's {plan.m} groups have "
                               f"no reports yet (group {empty[0]} first); every group must "
                               "report before the release")
    return estimate_views(plan, counts)


def check_view_inference(method: Any) -> None:
    """Validate ``method.inference``; fail before collecting when 'pgm' lacks its extra."""
    check_choice(method.inference, "inference", VIEW_INFERENCE)
    if method.inference == "pgm":
        from ..inference.pgm import require_mbi

        require_mbi()


# -- the settings FC and AM share -----------------------------------------------------------
@dataclass
class DirectSettings:
    """What FC and AM (and Cormode et al.'s fixed-oracle versions) are configured by: the
    budget, the marginal size k, the oracle (one of ``oracles``: "adaptive", "best" or a
    name), the per-user path, and the post-processing of the released tables."""

    epsilon: float
    k: int = 3
    oracle: str = "adaptive"
    per_user: bool = False
    postprocess: str = "none"
    oracles: ClassVar[tuple[str, ...]] = ("adaptive", "best", "grr", "oue", "olh", "hr", "sue")

    def __post_init__(self) -> None:
        self.epsilon = check_epsilon(self.epsilon)
        self.k = check_k(self.k)
        check_choice(self.oracle, "oracle", self.oracles)
        check_choice(self.postprocess, "postprocess", POSTPROCESS)


# -- FC ------------------------------------------------------------------------------------
@dataclass
class FC(DirectSettings):
    """Full contingency table through one frequency oracle (CALM §3.3).

    ``oracle``: "adaptive" (CALM §2.2.3, as CALM §5.1 runs FC), "best", or a fixed oracle
    name.  ``max_memory``: refuse up front (with the memory needed) when the full table, or
    the per-user reports with ``per_user=True``, would need more bytes than this.

    >>> dom = Domain(tuple(f"a{i}" for i in range(8)), (2,) * 8)
    >>> plan = FC(epsilon=0.5).plan(dom, 2**16)
    >>> plan.params["variance_factor"], plan.groups[0].oracle
    (256, 'oue')
    """

    max_memory: int = DEFAULT_MAX_MEMORY
    name: ClassVar[str] = "fc"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.max_memory = check_positive_int(self.max_memory, "max_memory")

    def memory_needed(self, domain: Domain, n: int) -> int:
        """Bytes the collection needs: ~4 float64 copies of the full table, plus the
        packed reports (and their unpacking) for unary oracles on the per-user path."""
        cells = domain.cells()
        need = 4 * 8 * cells
        if self.per_user:
            oracle = choose_oracle(self.oracle, self.epsilon, max(cells, 2))
            if oracle in ("oue", "sue"):
                need += 3 * n * ((cells + 7) // 8)
            elif oracle == "olh":
                need += 8 * 4 * min(n, 2**14)
        return need

    def _check_size(self, domain: Domain, n: int) -> None:
        need = self.memory_needed(domain, n)
        if need > self.max_memory:
            cells = domain.cells()
            what = "the per-user reports and " if self.per_user else ""
            raise DPMarginalsError(
                f"{self.name} needs {what}the full contingency table of {cells:,} cells "
                f"(d = {len(domain)}): about {human_bytes(need)} of memory, over the limit "
                f"max_memory = {human_bytes(self.max_memory)}; use fewer attributes, a method "
                f"that scales (calm, ft), or raise max_memory")
        if domain.cells() < 2:
            raise DPMarginalsError("the domain has a single cell: there is nothing to estimate")

    def plan(self, domain: Domain, n: int) -> Plan:
        """One group: every user reports her cell of the full table."""
        check_k(self.k, len(domain))
        self._check_size(domain, n)
        cells = domain.cells()
        name = choose_oracle(self.oracle, self.epsilon, cells)
        oracle = make_oracle(name, self.epsilon, cells)
        var0 = float(oracle.variance(max(int(n), 1)))
        params = {"k": self.k, "n": int(n), "oracle": name, "cells": cells,
                  "report_bits": oracle.report_bits, "table2_bits": self._table2_bits(domain),
                  "var0": var0, "variance_factor": cells, "expected_sse": cells * var0}
        group = GroupSpec(tuple(domain.attributes), name, self.epsilon, cells)
        return Plan(self.name, self.epsilon, domain, (group,), params)

    def _table2_bits(self, domain: Domain) -> int | None:
        return None

    def run(self, data: Dataset, *, rng: RNGLike = None) -> FullTableSynopsis:
        plan = self.plan(data.domain, data.n)
        return self.release(plan, group_supports(data, plan, rng=rng, per_user=self.per_user))

    def release(self, plan: Plan, counts: Counts) -> FullTableSynopsis:
        """The full table unbiased from the collection's counts (then ``postprocess``)."""
        (view,) = reported_views(plan, counts)
        info = {"plan_hash": plan.hash, **plan.params, **reporting_groups(plan, [view])}
        return FullTableSynopsis(plan.domain, view.table, self.name, info, self.postprocess)


# -- AM --------------------------------------------------------------------------------------
@dataclass
class AM(DirectSettings):
    """All k-way marginals, users partitioned into C(d, k) groups (CALM §3.4).

    ``inference="pgm"`` releases the noisy marginals as one graphical model (issue #9,
    :data:`VIEW_INFERENCE`) instead of answering each query from the views that contain it.

    >>> dom = Domain(tuple(f"a{i}" for i in range(8)), (2,) * 8)
    >>> plan = AM(epsilon=0.5, k=3).plan(dom, 2**16)
    >>> plan.m, plan.params["variance_factor"]
    (56, 448)
    """

    inference: str = "views"
    name: ClassVar[str] = "am"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_view_inference(self)

    def plan(self, domain: Domain, n: int) -> Plan:
        d = len(domain)
        k = check_k(self.k, d)
        m = math.comb(d, k)
        if n < m:
            raise DPMarginalsError(
                f"{self.name} needs at least C({d}, {k}) = {m:,} users (one group per {k}-way "
                f"marginal); the data has {n:,}")
        groups = []
        for idx in combinations(range(d), k):
            attrs = tuple(domain.attributes[i] for i in idx)
            cells = domain.project(attrs).cells()
            if cells < 2:
                raise DPMarginalsError(f"the marginal over {list(attrs)} has a single cell")
            groups.append(GroupSpec(attrs, choose_oracle(self.oracle, self.epsilon, cells),
                                    self.epsilon, cells))
        n_g = max(n // m, 1)
        oracles = [make_oracle(g.oracle, self.epsilon, g.cells) for g in groups]
        # expected SSE of a k-way marginal: its cells times the per-cell variance with n/m users
        sse = float(np.mean([g.cells * o.variance(n_g) for g, o in zip(groups, oracles,
                                                                      strict=True)]))
        var0 = float(oracles[0].variance(max(int(n), 1)))
        factor = mean_query_cells(domain, k) * m
        params = {"k": k, "n": int(n), "m": m, "oracle": sorted({g.oracle for g in groups}),
                  "report_bits": bits_for(m) + max(o.report_bits for o in oracles),
                  "table2_bits": self._table2_bits(d, k), "var0": var0,
                  "variance_factor": round(factor) if float(factor).is_integer() else factor,
                  "expected_sse": sse}
        return Plan(self.name, self.epsilon, domain, tuple(groups), params)

    def _table2_bits(self, d: int, k: int) -> int | None:
        return None

    def run(self, data: Dataset, *, rng: RNGLike = None) -> Synopsis:
        plan = self.plan(data.domain, data.n)
        return self.release(plan, group_supports(data, plan, rng=rng, per_user=self.per_user))

    def release(self, plan: Plan, counts: Counts) -> Synopsis:
        """The k-way marginals unbiased from the collection's counts, released by
        ``inference`` (each group a sample of the n users: the oracle's variance leaves out
        the sampling error, which the graphical model counts, as calm-pgm's does)."""
        return release_views(plan.domain, plan, reported_views(plan, counts), self.name,
                             self.postprocess, self.inference, population=counts.n)
