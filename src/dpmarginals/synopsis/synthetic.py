"""Synthetic records sampled from a synopsis (CALM §5.4 trains classifiers on them).

A synopsis answers marginals, not records; two ways to turn it into a data set:

* :func:`sample_marginal` -- draw ``n`` records from one marginal table (what CALM §5.4
  does with the 6-way marginal of five features and the label).  The table is projected
  onto the probability simplex first (Norm-Sub), since several methods release raw
  unbiased estimates with negative cells.
* :func:`synthesize` -- all (or the chosen) attributes by the chain rule over a Bayesian
  network whose conditionals are marginals of the synopsis:

  1. learn the Chow–Liu tree from the synopsis's 2-way marginals
     (:func:`dpmarginals.inference.chow_liu.chow_liu_tree`) and order the attributes by a
     breadth-first walk from the attribute with the largest total mutual information;
  2. give every attribute up to ``degree`` parents among the attributes before it: its
     tree parent first, then the others by decreasing mutual information with it;
  3. sample attribute by attribute from P(a | parents) = M(parents, a) / M(parents), with
     M the synopsis's marginal over parents + a (Norm-Sub'd).  A parent configuration the
     released marginal gives no mass falls back to the marginal of ``a``.

  A synopsis that *is* a graphical model (AIM, MST, calm-pgm: a ``model`` with
  :meth:`~dpmarginals.inference.graphical_model.GraphicalModel.sampling_network`) is
  sampled exactly instead: every attribute, along the model's triangulated structure, its
  parents the neighbours that separate it from the attributes drawn before, so the records
  are draws from the released model itself (``degree`` does not apply).  Through a
  Chow-Liu network of degree 2, AIM's synthetic records on Adult had 4.2x the model's
  workload error (0.254 against 0.061, ``benchmarks/central_peers.py``, one seed); drawn
  from the model, 1.10x (0.0645 against 0.0589, five seeds: the sampling error of n rows).

  Each step draws ``sampling="rounded"`` (the default) or ``"iid"``.  Rounded: the rows
  sharing a parent configuration, ``m`` of them, are put in random order and row ``j``
  takes the child value at ``(j + U) / m`` of the conditional's cumulative distribution
  (one uniform ``U`` per configuration: systematic sampling), so every child value gets
  ``floor`` or ``ceil`` of its expected count ``m P(a | parents)`` and the rows stay
  exchangeable.  private-pgm's ``synthetic_data`` rounds the same way (floor, then the
  remainders drawn without replacement); i.i.d. draws add the multinomial's sampling error
  on top of the model's.  On Adult (48,842 records, its 455 3-way marginals), MST's
  synthetic records had 1.052x the model's workload error drawn i.i.d. and 1.040x rounded
  (-1.1% +- 0.1%, five fits), AIM's 1.103x and 1.063x (two fits;
  ``benchmarks/synthetic_sampling.py``).

  With ``degree=None`` the joint marginal of all the attributes is sampled directly
  (exact, for small domains).  The synthetic joint equals the synopsis's joint when the
  latter factorizes along the network (always for ``degree >= d - 1``); otherwise it is the
  network's approximation, as in PrivBayes.  Everything is post-processing of the release:
  no privacy budget is spent.

>>> from dpmarginals.datasets import load
>>> data = load("randhie", d=4)
>>> fake = synthesize(data, 1000, rng=0)      # a Dataset also answers marginals
>>> fake.n, fake.domain == data.domain
(1000, True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..core.dataset import Dataset
from ..core.domain import Domain
from ..core.errors import DPMarginalsError
from ..core.randomness import RNGLike, simulation_rng
from ..core.table import MarginalTable
from .base import MAX_QUERY_CELLS

__all__ = ["SAMPLING", "network", "sample_marginal", "synthesize"]

_CHUNK = 1 << 16
#: How each conditional (or the joint) is drawn: see the module docstring.
SAMPLING = ("rounded", "iid")


def _check_n(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise DPMarginalsError(f"n (the number of synthetic records) must be an integer >= 1, "
                               f"got {n!r}")
    return int(n)


def _labels(labels: Mapping[str, Sequence[str]] | None, domain: Domain) -> dict:
    if not labels:
        return {}
    return {a: tuple(v) for a, v in labels.items()
            if a in domain.attributes and len(v) == domain.size(a)}


def _positions(config: np.ndarray, gen: np.random.Generator, sampling: str) -> np.ndarray:
    """Each row's point in [0, 1) at which its configuration's cumulative distribution is
    read: independent uniforms (``"iid"``), or systematic sampling within each
    configuration's rows taken in random order (``"rounded"``: module docstring)."""
    n = config.size
    if sampling == "iid":
        return gen.random(n)
    shuffled = gen.permutation(n)
    order = shuffled[np.argsort(config[shuffled], kind="stable")]
    sorted_config = config[order]
    starts = np.flatnonzero(np.r_[True, sorted_config[1:] != sorted_config[:-1]])
    sizes = np.diff(np.r_[starts, n])
    rank = np.arange(n) - np.repeat(starts, sizes)
    points = np.empty(n)
    points[order] = (rank + np.repeat(gen.random(starts.size), sizes)) / np.repeat(sizes, sizes)
    return points


def _check_sampling(sampling: object) -> str:
    if sampling not in SAMPLING:
        raise DPMarginalsError(f"sampling must be one of {', '.join(SAMPLING)}, got "
                               f"{sampling!r}")
    return str(sampling)


def sample_marginal(table: MarginalTable, n: int, *, rng: RNGLike = None,
                    labels: Mapping[str, Sequence[str]] | None = None,
                    name: str = "synthetic", sampling: str = "rounded") -> Dataset:
    """``n`` records from ``table`` (its attributes only), in random order: every cell
    ``floor`` or ``ceil`` of ``n p`` records (``sampling="rounded"``) or i.i.d. draws."""
    from ..inference import project_to_simplex

    n = _check_n(n)
    sampling = _check_sampling(sampling)
    gen = simulation_rng(rng)
    cdf = np.cumsum(project_to_simplex(table.values).ravel())
    points = _positions(np.zeros(n, dtype=np.int64), gen, sampling) * cdf[-1]
    cells = np.minimum(np.searchsorted(cdf, points, side="right"), cdf.size - 1)
    codes = np.column_stack(np.unravel_index(cells, table.domain.shape)) if len(
        table.domain) else np.zeros((n, 0), np.int64)
    return Dataset(codes, table.domain, _labels(labels, table.domain), name)


def network(source: object, attributes: Sequence[str] | None = None, degree: int = 2
            ) -> list[tuple[str, tuple[str, ...]]]:
    """The sampling order and each attribute's parents (steps 1-2 of :func:`synthesize`)."""
    from ..inference.chow_liu import chow_liu_tree, pairwise_mutual_information

    if isinstance(degree, bool) or not isinstance(degree, int | np.integer) or degree < 0:
        raise DPMarginalsError(f"degree must be an integer >= 0 (or None), got {degree!r}")
    attrs, mi = pairwise_mutual_information(source, attributes)
    root = attrs[int(np.argmax(mi.sum(axis=1)))]
    tree = chow_liu_tree(source, attrs)
    parent = tree.parents(root)
    order: list[str] = []
    queue = [root]
    while queue:  # breadth-first, children by decreasing MI with their parent
        node = queue.pop(0)
        order.append(node)
        kids = [a for a in attrs if parent.get(a) == node]
        kids.sort(key=lambda a: -mi[attrs.index(a), attrs.index(node)])
        queue.extend(kids)
    out = []
    for pos, a in enumerate(order):
        before = order[:pos]
        i = attrs.index(a)
        ranked = sorted(before, key=lambda b: -mi[i, attrs.index(b)])
        first = [parent[a]] if parent.get(a) is not None else []
        chosen = (first + [b for b in ranked if b not in first])[:int(degree)]
        out.append((a, tuple(chosen)))
    return out


def synthesize(synopsis: object, n: int, *, rng: RNGLike = None,
               attributes: Sequence[str] | None = None, degree: int | None = 2,
               labels: Mapping[str, Sequence[str]] | None = None,
               name: str = "synthetic", sampling: str = "rounded") -> Dataset:
    """``n`` synthetic records from any synopsis (see the module docstring).

    ``sampling``: ``"rounded"`` (each conditional's expected counts, rounded; the default)
    or ``"iid"`` (independent draws).

    ``labels`` (e.g. the original data set's ``labels``; by default the source's own, when
    it has any) are attached to the result, so ``to_frame(labels=True)`` shows readable
    values.
    """
    n = _check_n(n)
    sampling = _check_sampling(sampling)
    if labels is None:
        labels = getattr(synopsis, "labels", None)
    domain = getattr(synopsis, "domain", None)
    if domain is None or not hasattr(synopsis, "marginal"):
        raise DPMarginalsError("synthesize needs a synopsis (or a Dataset): an object with "
                               ".domain and .marginal")
    attrs = tuple(domain.attributes if attributes is None else attributes)
    sub = domain.project(attrs)
    gen = simulation_rng(rng)
    if degree is None or len(attrs) == 1:
        if sub.cells() > MAX_QUERY_CELLS:
            raise DPMarginalsError(
                f"the joint marginal of {len(attrs)} attributes has {sub.cells():,} cells; "
                "sample by the chain rule instead (degree=2)")
        return sample_marginal(synopsis.marginal(list(attrs)), n, rng=gen,  # type: ignore
                               labels=labels, name=name, sampling=sampling)
    steps, drawn = _sampling_steps(synopsis, attrs, int(degree))
    codes = np.zeros((n, len(drawn)), dtype=np.int64)
    col = {a: i for i, a in enumerate(drawn)}
    sizes = domain.project(drawn)
    from ..inference import project_to_simplex

    for a, parents in steps:
        table = synopsis.marginal([*parents, a])  # type: ignore[attr-defined]
        p = project_to_simplex(table.values)
        size = sizes.size(a)
        joint = p.reshape(-1, size)
        child = joint.sum(axis=0)
        mass = joint.sum(axis=1, keepdims=True)
        cond = np.where(mass > 0, joint / np.where(mass > 0, mass, 1.0), child / child.sum())
        if parents:
            config = np.ravel_multi_index([codes[:, col[b]] for b in parents],
                                          [sizes.size(b) for b in parents])
        else:
            config = np.zeros(n, dtype=np.int64)
        cdf = np.cumsum(cond, axis=1)
        u = _positions(config, gen, sampling) * cdf[config, -1]
        out = codes[:, col[a]]
        for lo in range(0, n, _CHUNK):  # n x size comparisons, a chunk at a time
            hi = min(lo + _CHUNK, n)
            out[lo:hi] = (u[lo:hi, None] >= cdf[config[lo:hi]]).sum(axis=1)
        np.minimum(out, size - 1, out=out)
    codes = codes[:, [col[a] for a in attrs]] if drawn != attrs else codes
    return Dataset(codes, sub, _labels(labels, sub), name)


def _sampling_steps(synopsis: object, attrs: tuple[str, ...], degree: int
                    ) -> tuple[list[tuple[str, tuple[str, ...]]], tuple[str, ...]]:
    """The chain rule's steps and every attribute they draw: a graphical model's exact
    network over all its attributes (the records are then cut to ``attrs``), else the
    Chow-Liu network of ``degree`` over ``attrs``."""
    from ..inference.graphical_model import FACTOR_LIMIT, GraphicalModel

    model = getattr(synopsis, "model", None)
    if isinstance(model, GraphicalModel):
        steps = model.sampling_network()
        domain = model.domain
        if max(domain.project([*p, a]).cells() for a, p in steps) <= FACTOR_LIMIT:
            return steps, tuple(a for a, _ in steps)
    return network(synopsis, attrs, degree), attrs
