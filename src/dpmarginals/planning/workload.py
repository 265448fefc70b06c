"""Workload-aware planning: choose (l, m), the attribute sets and the oracle (issue #9).

CALM's Algorithm 1 compares its Noise Error with a fixed threshold theta.  Here every
candidate plan is scored by the error it predicts **for the stated workload** (a k, i.e.
every k-way marginal, or an explicit list of attribute sets), and the least is chosen:

* candidates: every marginal size l, several numbers m of groups (the covering design
  of the workload when l reaches its query sizes, balanced subsets otherwise), and every
  candidate oracle (GRR, OUE, OLH, HR; those whose report exceeds ``max_report_bits`` are
  dropped);
* predicted SSE of a query Q, in an orthonormal basis where it splits over the subsets
  S ⊆ Q (each with ``prod_{a∈S} (c_a - 1)`` coefficients):

  - **noise**: every group containing S measures the coefficients of S's marginal with
    variance ``C_g(S) Var_g`` (``Var_g`` the variance of one orthonormal coefficient of
    the group's estimate, :func:`coefficient_variance`, with ``n / m`` users, ``C_g(S)``
    the cells of the group's marginal per cell of S); pooled (as
    consistency and the graphical model do) ``v_S = 1 / sum_g 1 / (C_g(S) Var_g)``; in Q's
    table those coefficients are scaled by ``1 / sqrt(prod_{a∈Q∖S} c_a)``;
  - **sampling**: a group's users are a sample of the population:
    ``(1 - 1/|S|) / N_S`` spread over the coefficients (uniform-frequency bound, CALM
    eq. 8's per-query form), ``N_S`` the users of the groups containing S;
  - **reconstruction**: coefficients of an S inside no group are not measured; their
    error is what max-entropy gets wrong.  Without data we charge CALM's ``theta`` per
    query that no group covers, times the share of its interaction coefficients
    (|S| >= 2) that no group measures; with a public or synthetic data set (``public=``)
    we measure it: the SSE between that data's marginal on Q and the max-entropy
    reconstruction from that data's marginals on the candidate's attribute sets.

The workload file (``dpmarginals plan --workload FILE``) is JSON: either a list of
attribute lists, ``[["age", "sex"], ["age", "income", "zip"]]``, or ``{"k": 3}`` for every
3-way marginal (optionally ``{"k": 3, "attributes": [...]}`` to restrict to some).

>>> from dpmarginals.core.domain import Domain
>>> dom = Domain(tuple(f"a{i}" for i in range(8)), (2,) * 8)
>>> best = plan_workload(dom, 2**16, 2.0, Workload.all_k(dom, 3))
>>> (best.l, best.m, best.oracle), best.covers
((3, 16, 'grr'), False)
>>> strict = plan_workload(dom, 2**16, 2.0, Workload.all_k(dom, 3), theta=0.01)
>>> (strict.l, strict.m, strict.oracle), strict.covers   # CALM's own plan (Table 2)
((4, 14, 'grr'), True)
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.domain import Domain
from ..core.errors import DPMarginalsError, check_epsilon, check_positive_int, describe_os_error
from ..oracles import make_oracle
from ..protocol.plan import GroupSpec, Plan
from .covering import balanced_subsets, cover_design, covering_size

__all__ = [
    "ORACLE_CANDIDATES",
    "Workload",
    "WorkloadChoice",
    "coefficient_variance",
    "load_workload",
    "plan_workload",
    "predict_error",
]

ORACLE_CANDIDATES = ("grr", "oue", "olh", "hr")
#: Largest marginal (cells) a group may report.
MAX_GROUP_CELLS = 2**12


@dataclass(frozen=True)
class Workload:
    """The marginals an analyst will ask for: attribute sets over a domain."""

    domain: Domain
    queries: tuple[tuple[str, ...], ...]
    k: int | None = None  # set when the workload is "every k-way marginal"

    def __post_init__(self) -> None:
        if not self.queries:
            raise DPMarginalsError("the workload has no queries")
        canon = []
        for q in self.queries:
            q = tuple(q)
            self.domain.project(q)  # names unknown or repeated attributes
            canon.append(self.domain.in_order(q))
        object.__setattr__(self, "queries", tuple(dict.fromkeys(canon)))

    @classmethod
    def all_k(cls, domain: Domain, k: int, attributes: Sequence[str] | None = None) -> Workload:
        attrs = tuple(attributes) if attributes is not None else domain.attributes
        k = check_positive_int(k, "k")
        if k > len(attrs):
            raise DPMarginalsError(f"k = {k} exceeds the {len(attrs)} attributes")
        if math.comb(len(attrs), k) > 200_000:
            raise DPMarginalsError(f"C({len(attrs)}, {k}) queries are too many to plan for")
        return cls(domain, tuple(itertools.combinations(attrs, k)), k)

    @property
    def max_size(self) -> int:
        return max(len(q) for q in self.queries)

    def to_dict(self) -> dict[str, Any]:
        if self.k is not None and len(self.queries) == math.comb(len(self.domain), self.k):
            return {"k": self.k}
        return {"queries": [list(q) for q in self.queries]}


def load_workload(path: str | Path, domain: Domain) -> Workload:
    """Read a workload file: a JSON list of attribute lists, or ``{"k": K}``."""
    try:
        body = json.loads(Path(path).read_text())
    except OSError as exc:
        raise DPMarginalsError(f"cannot read workload {str(path)!r}: "
                               f"{describe_os_error(exc, path)}") from None
    except json.JSONDecodeError as exc:
        raise DPMarginalsError(f"workload {str(path)!r} is not valid JSON: {exc}") from None
    return parse_workload(body, domain)


def parse_workload(body: Any, domain: Domain) -> Workload:
    if isinstance(body, Mapping) and "k" in body:
        return Workload.all_k(domain, body["k"], body.get("attributes"))
    if isinstance(body, Mapping) and "queries" in body:
        body = body["queries"]
    if (isinstance(body, list) and body
            and all(isinstance(q, list) and q and all(isinstance(a, str | int) for a in q)
                    for q in body)):
        return Workload(domain, tuple(tuple(str(a) for a in q) for q in body))
    raise DPMarginalsError('a workload is a non-empty JSON list of attribute lists, e.g. '
                           '[["a", "b"], ["b", "c"]], or {"k": 3}')


@dataclass(frozen=True)
class WorkloadChoice:
    """A scored candidate plan: what the groups report and the workload error it predicts.

    ``noise``, ``sampling``, ``reconstruction`` and ``total`` are mean SSEs per query.
    """

    l: int
    m: int
    oracle: str
    sets: tuple[tuple[str, ...], ...]
    noise: float
    sampling: float
    reconstruction: float
    covers: bool
    report_bits: int
    reconstruction_source: str = "theta"
    candidates: tuple[dict[str, Any], ...] = field(default=(), repr=False)

    @property
    def total(self) -> float:
        return self.noise + self.sampling + self.reconstruction

    def plan(self, domain: Domain, n: int, epsilon: float) -> Plan:
        """The deployable plan (method "calm": CALM and calm-pgm both run it)."""
        groups = tuple(GroupSpec(s, self.oracle, epsilon, domain.project(s).cells())
                       for s in self.sets)
        params = {"l": self.l, "m": self.m, "workload": True,
                  "predicted_sse": self.total, "noise_error": self.noise,
                  "sampling_error": self.sampling, "reconstruction_error": self.reconstruction}
        return Plan("calm", epsilon, domain, groups, params)

    def to_dict(self) -> dict[str, Any]:
        return {"l": self.l, "m": self.m, "oracle": self.oracle, "covers": self.covers,
                "report_bits": self.report_bits, "predicted_sse": self.total,
                "noise_error": self.noise, "sampling_error": self.sampling,
                "reconstruction_error": self.reconstruction,
                "reconstruction_source": self.reconstruction_source,
                "attribute_sets": [list(s) for s in self.sets]}


def predict_error(
    domain: Domain,
    n: int,
    epsilon: float,
    sets: Sequence[Sequence[str]],
    oracle: str,
    workload: Workload,
    *,
    theta: float = 1e-3,
    public: Any = None,
) -> tuple[float, float, float]:
    """Mean (noise, sampling, reconstruction) SSE per workload query of one plan."""
    sizes = dict(zip(domain.attributes, domain.sizes, strict=True))
    m = len(sets)
    users = n / m
    groups = []
    for s in sets:
        cells = math.prod(sizes[a] for a in s)
        var = coefficient_variance(make_oracle(oracle, epsilon, cells), max(int(users), 1))
        groups.append((frozenset(s), cells, var))
    cache: dict[frozenset[str], tuple[float, float, bool]] = {}

    def block(sub: frozenset[str]) -> tuple[float, float, bool]:
        if sub not in cache:
            inside = [(cells, var) for s, cells, var in groups if sub <= s]
            coef = math.prod(sizes[a] - 1 for a in sub)
            if not inside:
                cache[sub] = (0.0, 0.0, False)
            else:
                size = math.prod(sizes[a] for a in sub)
                prec = sum(1.0 / (cells / size * var) for cells, var in inside)
                n_s = users * len(inside)
                cache[sub] = (coef / prec, coef / size / n_s, True)
        return cache[sub]

    noise = sampling = recon = 0.0
    for q in workload.queries:
        covered = any(set(q) <= s for s, _, _ in groups)
        for j in range(1, len(q) + 1):
            for sub in itertools.combinations(q, j):
                nv, sv, _ = block(frozenset(sub))
                # S's coefficients in Q's table are S-marginal's / sqrt(prod_{Q∖S} c).
                spread = math.prod(sizes[a] for a in q if a not in sub)
                noise += nv / spread
                sampling += sv / spread
        if not covered and public is not None:
            recon += _public_reconstruction(public, q, sets)
        elif not covered:  # theta, for the share of the interactions no group measures
            inter = [sub for j in range(2, len(q) + 1) for sub in itertools.combinations(q, j)]
            weight = [math.prod(sizes[a] - 1 for a in sub) for sub in inter]
            missing = sum(w for sub, w in zip(inter, weight, strict=True)
                          if not block(frozenset(sub))[2])
            recon += theta * missing / max(sum(weight), 1)
    count = len(workload.queries)
    return noise / count, sampling / count, recon / count


def coefficient_variance(oracle: Any, users: int) -> float:
    """Mean variance of one non-constant orthonormal coefficient of an oracle's estimate.

    For a contrast s (``sum s = 0``, ``|s| = 1``) of the unbiased frequencies from
    ``users`` users, averaged over an orthonormal basis of contrasts (so ``s_x^2`` averages
    to 1/L whatever the data):

    * GRR (one-hot reports, multinomial counts):
      ``(q + (p - q)(1 - p + q) / L) / (users (p - q)^2)``;
    * other pure oracles (independent support bits, as OUE):
      ``(q (1 - q) + (p (1 - p) - q (1 - q)) / L) / (users (p - q)^2)``.

    For large L both tend to CALM's f -> 0 per-cell variance; for small L GRR's is larger
    (e.g. x1.58 at L = 4, eps = 1).
    """
    p, q, size = oracle.p, oracle.q, oracle.size
    if oracle.name == "grr":
        top = q + (p - q) * (1 - p + q) / size
    else:
        top = q * (1 - q) + (p * (1 - p) - q * (1 - q)) / size
    return top / (users * (p - q) ** 2)


def _public_reconstruction(public: Any, q: Sequence[str], sets: Sequence[Sequence[str]]
                           ) -> float:
    """SSE of max-entropy on ``public``'s marginals of the sets, against its marginal on q."""
    from ..inference import max_entropy

    dom = public.domain
    views = []
    for s in sets:
        shared = [a for a in s if a in q]
        if shared:
            views.append((dom.indices(shared), public.marginal(shared).values))
    est = max_entropy(dom.indices(q), _dedupe(views), dom.sizes)
    return float(((est - public.marginal(q).values) ** 2).sum())


def _dedupe(views: list[tuple[tuple[int, ...], np.ndarray]]) -> list:
    seen: dict[tuple[int, ...], np.ndarray] = {}
    for attrs, table in views:
        order = np.argsort(attrs)
        key = tuple(attrs[i] for i in order)
        seen.setdefault(key, np.transpose(table, order))
    return list(seen.items())


def _candidate_sets(domain: Domain, workload: Workload, l: int, theta_m: int
                    ) -> list[tuple[tuple[str, ...], ...]]:
    """Attribute-set families with marginal size l worth scoring."""
    d = len(domain)
    names = domain.attributes
    out: list[tuple[tuple[str, ...], ...]] = []
    k = workload.k
    if k is not None and len(workload.queries) == math.comb(d, k) and l >= k:
        if covering_size(d, k, l, max_blocks=4096) is not None:
            design = cover_design(d, k, l)
            assert design is not None
            out.append(tuple(tuple(names[i] for i in b) for b in design))
    elif l >= workload.max_size:
        out.append(_greedy_cover(domain, workload, l))
    top = math.comb(d, l)
    ms = sorted({min(top, m) for m in (d, 2 * d, 4 * d, 8 * d, theta_m, top)
                 if m >= math.ceil(d / l)})
    for m in ms:
        if m == top:
            blocks = list(itertools.combinations(range(d), l))
        else:
            blocks = balanced_subsets(d, l, m)
        out.append(tuple(tuple(names[i] for i in b) for b in blocks))
    return list(dict.fromkeys(out))


def _greedy_cover(domain: Domain, workload: Workload, l: int) -> tuple[tuple[str, ...], ...]:
    """l-sets covering every query: each new set is grown from the uncovered query that
    shares most attributes with others (greedy, not optimal)."""
    uncovered = [set(q) for q in workload.queries]
    counts = {a: sum(a in q for q in uncovered) for a in domain.attributes}
    sets: list[tuple[str, ...]] = []
    while uncovered:
        block = set(max(uncovered, key=len))
        for q in sorted(uncovered, key=lambda q: (-len(q & block), len(q))):
            if len(block | q) <= l:
                block |= q
        for a in sorted(domain.attributes, key=lambda a: -counts[a]):
            if len(block) >= l:
                break
            block.add(a)
        sets.append(domain.in_order(block))
        uncovered = [q for q in uncovered if not q <= block]
    return tuple(dict.fromkeys(sets))


def plan_workload(
    domain: Domain,
    n: int,
    epsilon: float,
    workload: Workload,
    *,
    oracles: Sequence[str] = ORACLE_CANDIDATES,
    max_report_bits: int | None = None,
    theta: float = 1e-3,
    public: Any = None,
    max_l: int | None = None,
) -> WorkloadChoice:
    """The candidate plan with the least predicted workload SSE (see the module docstring).

    ``public``: a :class:`~dpmarginals.core.dataset.Dataset` over (at least) the domain's
    attributes, public or synthetic, used to measure reconstruction error instead of
    charging ``theta`` per uncovered query.
    """
    n = check_positive_int(n, "n")
    epsilon = check_epsilon(epsilon)
    if workload.domain != domain:
        raise DPMarginalsError("the workload is over another domain")
    if public is not None:
        missing = [a for a in domain.attributes if a not in public.domain]
        if missing:
            raise DPMarginalsError(f"the public data set lacks the attributes {missing}")
        public = public.project(domain.attributes)
    d = len(domain)
    theta_m = max(1, int(theta * n))
    rows = []
    best: WorkloadChoice | None = None
    for l in range(1, min(d, max_l or d) + 1):
        if math.prod(sorted(domain.sizes)[-l:]) > MAX_GROUP_CELLS:
            break
        for sets in _candidate_sets(domain, workload, l, theta_m):
            if len(sets) > n:
                continue
            cells = max(domain.project(s).cells() for s in sets)
            for name in oracles:
                if cells < 2:
                    continue
                bits = make_oracle(name, epsilon, cells).report_bits
                if max_report_bits is not None and bits > max_report_bits:
                    continue
                ne, se, re = predict_error(domain, n, epsilon, sets, name, workload,
                                           theta=theta, public=public)
                covers = all(any(set(q) <= set(s) for s in sets) for q in workload.queries)
                choice = WorkloadChoice(l, len(sets), name, tuple(sets), ne, se, re, covers,
                                        bits, "theta" if public is None else "public data")
                rows.append({"l": l, "m": len(sets), "oracle": name, "predicted_sse":
                             choice.total, "noise_error": ne, "sampling_error": se,
                             "reconstruction_error": re, "covers": covers})
                if best is None or choice.total < best.total:
                    best = choice
    if best is None:
        raise DPMarginalsError("no candidate plan fits: every oracle's report exceeds "
                               f"max_report_bits={max_report_bits}" if max_report_bits
                               else "no candidate plan fits the domain")
    rows.sort(key=lambda r: r["predicted_sse"])
    return WorkloadChoice(best.l, best.m, best.oracle, best.sets, best.noise, best.sampling,
                          best.reconstruction, best.covers, best.report_bits,
                          best.reconstruction_source, tuple(rows))
