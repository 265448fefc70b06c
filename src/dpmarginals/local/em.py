"""EM baselines: every user reports every attribute with eps/d (CALM §3.6; Cormode et al. §4.4).

Each user perturbs each of her d attributes independently through a frequency oracle with
budget eps/d (budget splitting; by composition the report is eps-LDP).  A marginal over Q is
reconstructed by Expectation Maximization over the users' reported Q-tuples (Fanti et al.;
``notes/calm-missing-pieces.md`` §4):

    T <- T * (1/n) sum_j L_j / <L_j, T>,   L_j(v) = prod_{a in Q} l_a(y_a^j | v_a),

with users grouped by identical reported tuples so one iteration costs O(#distinct tuples x
cells), never a loop over users.

**Collection** (:mod:`dpmarginals.protocol.formats`, format ``em``): the plan has one group
of every attribute; a report is each attribute's reported class (GRR: the value; OUE/SUE:
the bit vector read as an integer).  EM needs, for a query Q, the histogram of the users'
reported Q-tuples; the support keeps it for every k-set of attributes (mergeable, of a size
fixed by the plan: the sum over k-sets of the product of their classes), so a query of at
most k attributes is answered from a k-set containing it and a larger one is an error.  A
unary report of c values has 2^c classes, so "adaptive" (CALM §5.1) takes OUE only for
attributes of at most :data:`MAX_UNARY_VALUES` values and GRR above (in CALM's settings,
c <= 3, it is GRR anyway).  GRR likelihoods are p / q; OUE/SUE ones are
(p/q)^{y[x]} ((1-p)/(1-q))^{1-y[x]} up to a factor independent of x.

* ``em`` (CALM §3.6): the per-attribute oracle chosen adaptively (§5.1), EM initialised
  with the unbiased estimator T(v) = (1/n) sum_j prod_a s_a(y_a^j, v_a),
  s = (1[y = x] - q)/(p - q) for GRR and (y[x] - q)/(p - q) for unary encodings (its
  Norm-Sub, floored at 1e-12); stop when no cell moves by ``tol`` = 1e-6, at most 1000
  iterations (RAPPOR's values; CALM's are not given).
* ``inp_em`` (Cormode et al. §4.4): (eps/d)-randomized response per attribute, uniform
  start, Omega = ``tol`` = 1e-5 (their §5.4).

**Failure detection.**  Cormode et al. (§4.4, Table 3) report that InpEM often "immediately
terminates after a single step and outputs the prior (uniform) distribution".  For every
marginal the synopsis records :class:`EMDiagnostics` and flags a failure when

* ``stopped_at_prior``: the stopping rule fired at the first iteration from the uniform
  prior, so the answer is the prior up to ``tol``, not an estimate from the reports; or
* ``rejected``: the reports reject EM's answer in favour of the (Norm-Sub'd) unbiased
  estimate by a likelihood-ratio test, 2 (l(T_unbiased) - l(T_em)) > chi2_{cells-1} at
  level ``alpha`` (conservative: T_unbiased is not the maximiser).

A failure is never returned silently: ``on_failure="warn"`` (default) issues an
:class:`EMFailureWarning`, ``"raise"`` raises :class:`~dpmarginals.core.errors.DPMarginalsError`,
``"fallback"`` warns and answers with the Norm-Sub'd unbiased estimate instead.  Counts are
kept in ``synopsis.info`` (``em_queries``, ``em_failures``, ``em_stopped_at_prior``,
``em_not_converged``) and per query in ``synopsis.diagnostics``.  ``em_stopped_at_start``
also counts CALM-initialised runs that stopped at once: at small eps/d the likelihood is
so flat that EM returns its (Norm-Sub'd unbiased) starting point, which is not flagged as
a failure (the start is an estimate from the reports) but explains why EM does worse than
the Uniform baseline there (CALM §5.2).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any, ClassVar

import numpy as np

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError, check_choice, check_epsilon, check_k, check_positive_int
from ..core.randomness import RNGLike
from ..core.table import MarginalTable
from ..inference import norm_sub
from ..oracles import FrequencyOracle, adaptive_oracle
from ..protocol.counts import Counts
from ..protocol.formats import (
    MAX_GROUP_SUPPORT,
    AttributeReports,
    group_oracle,
    kset_histograms,
)
from ..protocol.plan import GroupSpec, Plan
from ..synopsis.base import Synopsis, check_query, views_to_json
from .direct import every_record

__all__ = ["EM", "EMDiagnostics", "EMFailureWarning", "EMSynopsis", "InpEM", "em_marginal"]

INITS = ("unbiased", "uniform")
ON_FAILURE = ("warn", "raise", "fallback")
ATTRIBUTE_ORACLES = ("adaptive", "grr", "oue", "sue")
FLOOR = 1e-12
MAX_UNARY_VALUES = 8
"""EM's unary reports: at most 2^8 = 256 classes per attribute (module docstring)."""


class EMFailureWarning(UserWarning):
    """EM returned an answer the reports do not support (e.g. it stopped at the prior)."""


@dataclass(frozen=True)
class EMDiagnostics:
    """How the EM reconstruction of one marginal went."""

    attributes: tuple[str, ...]
    iterations: int
    converged: bool
    stopped_at_start: bool
    stopped_at_prior: bool
    lr_statistic: float
    lr_pvalue: float
    failed: bool
    reason: str


def _class_matrices(oracle: FrequencyOracle | None) -> tuple[np.ndarray, np.ndarray]:
    """One attribute's (likelihood, score) matrices, row r for reported class r.

    ``lik[r, x]``: P[class r | value x] up to a factor independent of x; ``score[r, x]``:
    unbiased for 1[value = x] (E[score[class, x]] = 1[value = x]).  GRR: class = the value;
    OUE/SUE: class = the bit vector as an integer (bit x of r is value x's bit).
    """
    if oracle is None:
        return np.ones((1, 1)), np.ones((1, 1))
    p, q = oracle.p, oracle.q
    if oracle.name == "grr":
        eye = np.eye(oracle.size)
        return q + (p - q) * eye, (eye - q) / (p - q)
    patterns = (np.arange(1 << oracle.size)[:, None] >> np.arange(oracle.size)) & 1
    return np.where(patterns, p / q, (1 - p) / (1 - q)), (patterns - q) / (p - q)


def _joint(mats: Sequence[np.ndarray], rows: np.ndarray) -> np.ndarray:
    """Row u: the outer product over attributes of mats[j][rows[u, j]] (C order)."""
    out = mats[0][rows[:, 0]]
    for j in range(1, len(mats)):
        nxt = mats[j][rows[:, j]]
        out = (out[:, :, None] * nxt[:, None, :]).reshape(rows.shape[0], -1)
    return out


def em_marginal(
    lik: np.ndarray, weights: np.ndarray, start: np.ndarray, tol: float, max_iter: int
) -> tuple[np.ndarray, int, bool]:
    """EM for a mixture with known components: returns (T, iterations, converged).

    ``lik`` (U, V): likelihood of report class u given cell v; ``weights`` (U,): fraction of
    users in class u.  Stops when no cell moves by ``tol`` or after ``max_iter`` updates.
    """
    t = start.copy()
    for it in range(1, max_iter + 1):
        post = lik * t
        new = (weights / post.sum(axis=1)) @ post
        moved = float(np.abs(new - t).max())
        t = new
        if moved < tol:
            return t, it, True
    return t, max_iter, False


def _loglik(lik: np.ndarray, weights: np.ndarray, t: np.ndarray) -> float:
    return float(weights @ np.log(np.maximum(lik @ t, 1e-300)))


@dataclass(eq=False)
class EMSynopsis(Synopsis):
    """The histograms of the users' reported classes on every k-set of attributes (the
    ``em`` format's counts), answering marginals of at most k attributes by EM."""

    kind: ClassVar[str] = "em_reports"
    domain: Domain
    views: list[tuple[tuple[str, ...], np.ndarray]]  # (k-set, histogram shaped by classes)
    lik: list[np.ndarray]
    score: list[np.ndarray]
    init: str = "unbiased"
    tol: float = 1e-6
    max_iter: int = 1000
    on_failure: str = "warn"
    alpha: float = 1e-3
    method: str = "em"
    info: dict[str, Any] = field(default_factory=dict)
    diagnostics: dict[tuple[str, ...], EMDiagnostics] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.lik = [np.asarray(x, float) for x in self.lik]
        self.score = [np.asarray(x, float) for x in self.score]
        classes = [m.shape[0] for m in self.lik]
        self.views = [(tuple(a), np.asarray(h, np.int64).reshape(
            [classes[i] for i in self.domain.indices(a)])) for a, h in self.views]
        if not self.views:
            raise DPMarginalsError("an EM synopsis needs at least one histogram")
        check_choice(self.init, "init", INITS)
        check_choice(self.on_failure, "on_failure", ON_FAILURE)
        for key in ("em_queries", "em_failures", "em_stopped_at_prior", "em_stopped_at_start",
                    "em_not_converged"):
            self.info.setdefault(key, 0)
        self._cache: dict[tuple[str, ...], np.ndarray] = {}

    @property
    def n(self) -> int:
        return int(self.views[0][1].sum())

    def _grouped(self, attrs: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The reported ``attrs``-tuples (from a k-set's histogram) as (likelihoods, weights,
        scores), one row per tuple reported at least once, in C order."""
        check_query(self.domain, attrs)
        found = next(((a, h) for a, h in self.views if set(attrs) <= set(a)), None)
        if found is None:
            k = len(self.views[0][0])
            raise DPMarginalsError(
                f"{self.method} kept the reports' {k}-way histograms and none contains "
                f"{list(attrs)}; it cannot answer this query (collect with a larger k)")
        view_attrs, hist = found
        keep = tuple(view_attrs.index(a) for a in attrs)
        drop = tuple(i for i in range(len(view_attrs)) if i not in keep)
        projected = np.transpose(hist.sum(axis=drop), np.argsort(np.argsort(keep)))
        present = np.flatnonzero(projected)
        tuples = np.column_stack(np.unravel_index(present, projected.shape))
        weights = projected.ravel()[present] / projected.sum()
        cols = list(self.domain.indices(attrs))
        lik = _joint([self.lik[c] for c in cols], tuples)
        score = _joint([self.score[c] for c in cols], tuples)
        return lik, weights, score

    def unbiased_marginal(self, attrs: Sequence[str]) -> MarginalTable:
        """The unbiased estimator EM starts from in CALM (cells may be negative)."""
        attrs = tuple(attrs)
        sub = self.domain.project(attrs)
        _, weights, score = self._grouped(attrs)
        return MarginalTable(sub, (weights @ score).reshape(sub.shape))

    def marginal(self, attrs: Sequence[str]) -> MarginalTable:
        attrs = tuple(attrs)
        if not attrs:
            raise DPMarginalsError("a marginal needs at least one attribute")
        sub = self.domain.project(attrs)
        if attrs in self._cache:
            return MarginalTable(sub, self._cache[attrs].reshape(sub.shape))
        lik, weights, score = self._grouped(attrs)
        cells = lik.shape[1]
        alt = np.maximum(norm_sub(weights @ score, 1.0), FLOOR)
        alt /= alt.sum()
        start = np.full(cells, 1.0 / cells) if self.init == "uniform" else alt
        table, iters, converged = em_marginal(lik, weights, start, self.tol, self.max_iter)
        diag = self._diagnose(attrs, lik, weights, alt, table, iters, converged)
        self.diagnostics[attrs] = diag
        self.info["em_queries"] += 1
        self.info["em_failures"] += int(diag.failed)
        self.info["em_stopped_at_prior"] += int(diag.stopped_at_prior)
        self.info["em_stopped_at_start"] += int(diag.stopped_at_start)
        self.info["em_not_converged"] += int(not diag.converged)
        if diag.failed:
            message = f"{self.method}: EM failed on the marginal over {list(attrs)}: {diag.reason}"
            if self.on_failure == "raise":
                raise DPMarginalsError(message)
            if self.on_failure == "fallback":
                message += "; answering with the Norm-Sub'd unbiased estimate instead"
                table = norm_sub(weights @ score, 1.0)
            warnings.warn(message, EMFailureWarning, stacklevel=2)
        self._cache[attrs] = table
        return MarginalTable(sub, table.reshape(sub.shape))

    def _diagnose(self, attrs: tuple[str, ...], lik: np.ndarray, weights: np.ndarray,
                  alt: np.ndarray, table: np.ndarray, iters: int,
                  converged: bool) -> EMDiagnostics:
        from scipy.stats import chi2

        cells = lik.shape[1]
        stat = max(2.0 * self.n * (_loglik(lik, weights, alt) - _loglik(lik, weights, table)),
                   0.0)
        pvalue = float(chi2.sf(stat, max(cells - 1, 1)))
        at_start = converged and iters == 1
        at_prior = at_start and self.init == "uniform"
        rejected = pvalue < self.alpha
        reasons = []
        if at_prior:
            reasons.append(f"it stopped at the uniform prior after one iteration (every cell "
                           f"moved less than tol = {self.tol:g}; Cormode et al. Table 3)")
        if rejected:
            reasons.append(f"the reports reject its answer against the unbiased estimate "
                           f"(likelihood ratio {stat:.1f} on {cells - 1} df, p = {pvalue:.2g})")
        if not converged:
            reasons.append(f"it did not converge in {self.max_iter} iterations")
        return EMDiagnostics(attrs, iters, converged, at_start, at_prior, stat, pvalue,
                             at_prior or rejected, "; ".join(reasons) or "ok")

    def _payload(self) -> dict[str, Any]:
        return {"info": self.info, "init": self.init, "tol": self.tol,
                "max_iter": self.max_iter, "on_failure": self.on_failure, "alpha": self.alpha,
                "views": views_to_json(self.views),
                "lik": [x.tolist() for x in self.lik], "score": [x.tolist() for x in self.score],
                "diagnostics": [asdict(d) for d in self.diagnostics.values()]}

    @classmethod
    def _from_payload(cls, domain: Domain, method: str, payload: Mapping[str, Any]) -> Synopsis:
        lik = [np.asarray(x, float) for x in payload["lik"]]
        if "views" in payload:
            views = [(tuple(v["attributes"]), np.asarray(v["values"], np.int64))
                     for v in payload["views"]]
        else:  # saved before the k-set histograms: every user's class tuple, counted
            views = _histograms(domain, np.asarray(payload["classes"], np.int64),
                                np.asarray(payload["counts"], np.int64),
                                [m.shape[0] for m in lik], int(payload["info"]["k"]))
        out = cls(domain, views, lik,
                  [np.asarray(x, float) for x in payload["score"]],
                  str(payload["init"]), float(payload["tol"]), int(payload["max_iter"]),
                  str(payload["on_failure"]), float(payload.get("alpha", 1e-3)), method,
                  dict(payload.get("info", {})))
        for d in payload.get("diagnostics", []):
            diag = EMDiagnostics(**{**d, "attributes": tuple(d["attributes"])})
            out.diagnostics[diag.attributes] = diag
        return out


def _histograms(domain: Domain, tuples: np.ndarray, counts: np.ndarray,
                classes: list[int], k: int) -> list[tuple[tuple[str, ...], np.ndarray]]:
    """The histograms of reported class tuples (U, d) with their counts on every k-set."""
    ksets = list(combinations(range(len(domain)), k))
    return [(tuple(domain.attributes[i] for i in q), h)
            for q, h in zip(ksets, kset_histograms(tuples, counts, classes, ksets), strict=True)]


@dataclass
class EM:
    """Budget-split reports of every attribute, marginals by EM; see the module docstring.

    ``oracle``: the per-attribute frequency oracle, "adaptive" (CALM §2.2.3 with eps/d)
    or "grr", "oue", "sue".  EM always randomizes every user's record (it
    needs the joint reports), so ``per_user`` must be True (False is an error, not ignored);
    with ``rng=None`` the randomization draws from the OS CSPRNG.

    >>> dom = Domain(tuple(f"a{i}" for i in range(8)), (2,) * 8)
    >>> plan = EM(epsilon=1.0).plan(dom, 1000)
    >>> plan.params["epsilon_per_attribute"], plan.params["report_bits"]
    (0.125, 8)
    """

    epsilon: float
    k: int = 3
    init: str = "unbiased"
    oracle: str = "adaptive"
    tol: float = 1e-6
    max_iter: int = 1000
    on_failure: str = "warn"
    alpha: float = 1e-3
    per_user: bool = True
    name: ClassVar[str] = "em"

    def __post_init__(self) -> None:
        self.epsilon = check_epsilon(self.epsilon)
        self.k = check_k(self.k)
        if not self.per_user:
            raise DPMarginalsError(
                f"{self.name} randomizes every user's record (it needs the joint reports): "
                "per_user=False is not available")
        check_choice(self.init, "init", INITS)
        check_choice(self.oracle, "oracle", ATTRIBUTE_ORACLES)
        check_choice(self.on_failure, "on_failure", ON_FAILURE)
        self.max_iter = check_positive_int(self.max_iter, "max_iter")
        if not (0 < float(self.tol) < 1):
            raise DPMarginalsError(f"tol must be in (0, 1), got {self.tol!r}")
        if not (0 < float(self.alpha) < 1):
            raise DPMarginalsError(f"alpha must be in (0, 1), got {self.alpha!r}")

    def _oracles(self, domain: Domain) -> list[str]:
        """Attribute j's oracle name at eps/d: "none" for a single-valued attribute; for
        "adaptive", CALM §2.2.3's choice with OUE only up to :data:`MAX_UNARY_VALUES`."""
        eps = self.epsilon / len(domain)
        out = []
        for size in domain.sizes:
            if size < 2:
                out.append("none")
            elif self.oracle == "adaptive":
                chosen = adaptive_oracle(eps, size).name
                out.append("grr" if size > MAX_UNARY_VALUES else chosen)
            elif self.oracle != "grr" and size > MAX_UNARY_VALUES:
                raise DPMarginalsError(
                    f"{self.name} with oracle={self.oracle!r}: a unary report of {size} values "
                    f"has 2^{size} classes, over EM's limit of {MAX_UNARY_VALUES} values "
                    "(module docstring); use oracle='grr' or 'adaptive'")
            else:
                out.append(self.oracle)
        return out

    def attribute_oracles(self, domain: Domain) -> list[FrequencyOracle | None]:
        """Attribute j's oracle at exactly eps/d (None for a single-valued attribute: no
        report), as the ``em`` format derives it."""
        reports = AttributeReports(self.epsilon, domain.sizes, tuple(self._oracles(domain)),
                                   min(self.k, len(domain)))
        return list(reports.attribute_oracles)

    def randomize(self, data: Dataset, *, rng: RNGLike = None) -> np.ndarray:
        """Every user's report (CALM §3.6; Cormode et al. §4.4): attribute j through
        :meth:`attribute_oracles`' oracle j (eps/d each, eps in all by composition), as the
        client does (the ``em`` format's ``perturb``); one reported class per user and
        attribute, (n, d).  ``rng=None``: the OS CSPRNG."""
        plan = self.plan(data.domain, data.n)
        return group_oracle(plan, 0).perturb(data.codes, rng=rng)

    def output_distribution(self, domain: Domain) -> np.ndarray:
        """P[report | record] of :meth:`randomize` for every record of ``domain`` (rows:
        cells in C order): the product over attributes of the oracles' output
        distributions, columns in C order over the attributes' output indices."""
        dists = [np.ones((size, 1)) if o is None
                 else np.stack([o.output_distribution(v) for v in range(size)])
                 for o, size in zip(self.attribute_oracles(domain), domain.sizes, strict=True)]
        return _joint(dists, every_record(domain).codes.astype(np.int64))

    def plan(self, domain: Domain, n: int) -> Plan:
        """One group of every attribute in the ``em`` format: each attribute through its
        oracle at eps/d; the support keeps the reports' histograms on the k-sets."""
        d = len(domain)
        check_k(self.k, d)
        eps = self.epsilon / d
        names = self._oracles(domain)
        reports = AttributeReports(self.epsilon, domain.sizes, tuple(names), self.k)
        if reports.size > MAX_GROUP_SUPPORT:
            raise DPMarginalsError(
                f"{self.name} keeps the histograms of the reported classes on all C({d}, "
                f"{self.k}) {self.k}-sets of attributes: {reports.size:,} counts, over the "
                f"limit of {MAX_GROUP_SUPPORT:,}; use a smaller k or fewer attributes")
        params = {"k": self.k, "n": int(n), "epsilon_per_attribute": eps,
                  "attribute_oracles": names, "init": self.init, "tol": self.tol,
                  "max_iter": self.max_iter, "report_bits": reports.report_bits,
                  "table2_bits": d if domain.is_binary() else None,
                  "var0": None, "variance_factor": None, "expected_sse": None}
        group = GroupSpec(tuple(domain.attributes), "em", self.epsilon, domain.cells())
        return Plan(self.name, self.epsilon, domain, (group,), params)

    def run(self, data: Dataset, *, rng: RNGLike = None) -> EMSynopsis:
        """Plan, simulated collection (:meth:`simulate`), release."""
        plan = self.plan(data.domain, data.n)
        return self.release(plan, self.simulate(data, plan, rng=rng))

    def simulate(self, data: Dataset, plan: Plan, *, rng: RNGLike = None) -> Counts:
        """The Counts of ``plan``'s collection with every row of ``data`` as one user (every
        record randomized as the client does; OS entropy unless ``rng`` is given)."""
        reports = group_oracle(plan, 0)
        return Counts([reports.support(reports.perturb(data.codes, rng=rng))], [data.n])

    def release(self, plan: Plan, counts: Counts) -> EMSynopsis:
        """The k-set histograms with every attribute's likelihood and score matrices; the
        answers are computed by EM per query (init, tol and max_iter: the plan's)."""
        if plan.m != 1 or plan.groups[0].oracle != "em":
            raise DPMarginalsError(f"{self.name} releases a plan of one em group")
        reports = group_oracle(plan, 0)
        counts.check([reports.size])
        if counts.users[0] <= 0:
            raise DPMarginalsError(f"{self.name}: no reports yet")
        mats = [_class_matrices(o) for o in reports.attribute_oracles]
        names = plan.groups[0].attributes
        views = [(tuple(names[i] for i in q), h)
                 for q, h in zip(reports.ksets, reports.split(counts.supports[0]), strict=True)]
        info = {"plan_hash": plan.hash, **plan.params}
        params = plan.params
        return EMSynopsis(plan.domain, views, [m[0] for m in mats], [m[1] for m in mats],
                          str(params.get("init", self.init)), float(params.get("tol", self.tol)),
                          int(params.get("max_iter", self.max_iter)), self.on_failure,
                          self.alpha, self.name, info)


@dataclass
class InpEM(EM):
    """Cormode et al.'s InpEM (§4.4): (eps/d)-RR per attribute, uniform start, Omega = 1e-5."""

    init: str = "uniform"
    oracle: str = "grr"
    tol: float = 1e-5
    max_iter: int = 10_000
    name: ClassVar[str] = "inp_em"
