"""Synopses: what a release publishes, and how any marginal is answered from it."""

from __future__ import annotations

import functools
import importlib
import json
import warnings
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..core.domain import Domain
from ..core.errors import DPMarginalsError
from ..core.provenance import NOT_RELEASED, Provenance, warn_if_not_private
from ..core.table import MarginalTable
from ..inference import ConsistencyWarning
from ..inference.consistency import make_consistent_each
from ..inference.views import NoisyView

__all__ = ["Synopsis", "UniformSynopsis", "ViewSynopsis", "load_synopsis",
           "maximal_overlaps", "synopsis_from_dict"]

SYNOPSIS_FORMAT = "dpmarginals.synopsis"
_KINDS: dict[str, type[Synopsis]] = {}


MAX_QUERY_CELLS = 2**26
"""The largest marginal answered (64 Mi cells, 512 MiB of float64)."""


def check_query(domain: Domain, attrs: Sequence[str]) -> tuple[str, ...]:
    attrs = tuple(attrs)
    if not attrs:
        raise DPMarginalsError("a marginal needs at least one attribute")
    cells = domain.project(attrs).cells()  # also names unknown or repeated attributes
    if cells > MAX_QUERY_CELLS:
        raise DPMarginalsError(
            f"the marginal over {list(attrs)} has {cells:,} cells "
            f"({cells * 8 / 2**30:,.1f} GiB as float64); at most {MAX_QUERY_CELLS:,} are "
            "answered: ask for fewer or smaller attributes"
        )
    return attrs


def maximal_overlaps(measured: Sequence[Sequence[str]],
                     attrs: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """The largest parts of ``attrs`` that one measured set holds, in the query's order.

    >>> maximal_overlaps([("a", "b", "c"), ("b", "d"), ("c",)], ["d", "c", "b"])
    (('d', 'b'), ('c', 'b'))
    """
    parts = {frozenset(attrs) & frozenset(m) for m in measured} - {frozenset()}
    keep = [p for p in parts if not any(p < q for q in parts)]
    ordered = [tuple(a for a in attrs if a in p) for p in keep]
    return tuple(sorted(ordered, key=lambda t: (-len(t), [attrs.index(a) for a in t])))


class Synopsis(ABC):
    """A released summary that answers marginal queries.

    ``provenance`` is its privacy mark (:mod:`dpmarginals.core.provenance`): None until a
    release path sets it, and a synopsis without it is saved as not private.  Every
    answer says which attribute sets of the query were measured
    (:attr:`MarginalTable.measured`, from :meth:`measured_sets`).
    """

    kind: ClassVar[str]
    domain: Domain
    method: str
    provenance: Provenance | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            _KINDS[cls.kind] = cls
        if "marginal" in cls.__dict__:  # every answer carries what was measured
            cls.marginal = _with_measured(cls.__dict__["marginal"])  # type: ignore[method-assign]

    @abstractmethod
    def marginal(self, attrs: Sequence[str]) -> MarginalTable:
        """The estimated marginal over ``attrs`` (in the order given)."""

    def measured_sets(self, attrs: Sequence[str]) -> tuple[tuple[str, ...], ...]:
        """The largest parts of ``attrs`` some report measured jointly.  Default: the
        whole query (methods whose reports cover every attribute, e.g. FC, FT, EM)."""
        return (tuple(attrs),)

    @abstractmethod
    def _payload(self) -> dict[str, Any]: ...

    @classmethod
    @abstractmethod
    def _from_payload(cls, domain: Domain, method: str, payload: Mapping[str, Any]) -> Synopsis: ...

    @classmethod
    def _check_payload(cls, body: Mapping[str, Any], domain: Domain, source: str) -> None:
        """Refuse, in one line naming the field and value, a saved payload this kind cannot
        trust (before :meth:`_from_payload` reads it).  Default: nothing beyond what
        :meth:`_from_payload` checks."""
        return None

    @property
    def privacy(self) -> Provenance:
        """The privacy mark as saved: ``provenance``, or "not private" when unset."""
        if self.provenance is not None:
            return self.provenance
        return Provenance.simulation(self.method, "unknown", None, NOT_RELEASED,
                                     randomness="unknown", unit="unknown")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-serialisable form that :func:`synopsis_from_dict` reads back."""
        return {"format": SYNOPSIS_FORMAT, "version": 1, "kind": self.kind, "method": self.method,
                "privacy": self.privacy.to_dict(), "domain": self.domain.to_dict(),
                **self._payload()}

    def save(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON, with the digest of its content
        (:mod:`.release_file`: an edit is then detected on load)."""
        from .release_file import save_sealed

        save_sealed(self.to_dict(), path)

    @staticmethod
    def load(path: str | Path) -> Synopsis:
        return load_synopsis(path)


def _with_measured(marginal: Any) -> Any:
    @functools.wraps(marginal)
    def tagged(self: Synopsis, attrs: Sequence[str], *args: Any, **kwargs: Any) -> MarginalTable:
        table = marginal(self, attrs, *args, **kwargs)
        if table.measured is not None:
            return table
        return table.replace(measured=self.measured_sets(table.attributes),
                             domain=self.domain.project(table.attributes))

    return tagged


def views_to_json(views: Sequence[tuple[Sequence[str], np.ndarray]]) -> list[dict[str, Any]]:
    """The JSON form of (attributes, table) views: the one serializer of a view list."""
    return [{"attributes": list(a), "values": t.ravel().tolist()} for a, t in views]


def views_from_json(domain: Domain, body: Sequence[Mapping[str, Any]]
                    ) -> list[tuple[tuple[str, ...], np.ndarray]]:
    """The (attributes, table) views of :func:`views_to_json`'s output, tables shaped by
    ``domain``."""
    views = []
    for v in body:
        attrs = tuple(v["attributes"])
        views.append((attrs, np.asarray(v["values"], float).reshape(
            domain.project(attrs).shape)))
    return views


def read_json(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise DPMarginalsError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DPMarginalsError(f"{str(path)!r} is not valid JSON: {exc}") from None


#: Why a file without a digest is not taken for a private release.
UNSEALED = ("it records no digest of its content (saved by an older dpmarginals, or the "
            "digest was removed), so nothing tells whether it was edited")


def load_synopsis(path: str | Path) -> Synopsis:
    """Read a synopsis written by :meth:`Synopsis.save`; warns if it is not private.

    Its digest is checked (an altered file is refused, :mod:`.release_file`) and every
    field validated; a file without a digest is read as not private."""
    from .release_file import check_digest

    body = read_json(path)
    if isinstance(body, dict) and body.get("format") == "dpmarginals.ktuples":
        raise DPMarginalsError(f"{str(path)!r} is a k-tuple release (`dpmarginals central`), "
                               "not a model of a table: open it with dpmarginals.load_release")
    if not isinstance(body, dict) or body.get("format") != SYNOPSIS_FORMAT:
        raise DPMarginalsError(f"{str(path)!r} is not a dpmarginals synopsis")
    sealed = check_digest(body, str(path))
    synopsis = synopsis_from_dict(body, source=str(path))
    if not sealed and synopsis.privacy.private:
        synopsis.provenance = replace(synopsis.privacy, private=False, reason=UNSEALED)
    warn_if_not_private(synopsis.privacy, str(path))
    return synopsis


def synopsis_from_dict(body: Mapping[str, Any], *, source: str = "synopsis") -> Synopsis:
    """Rebuild a synopsis from :meth:`Synopsis.to_dict` output (any registered kind),
    every field checked first (:mod:`.release_file`; ``source`` names the file in errors)."""
    from .release_file import check_header, check_privacy

    methods = importlib.import_module("dpmarginals.methods")  # registers every kind
    kind = body.get("kind")
    if kind not in _KINDS:
        raise DPMarginalsError(f"synopsis kind {kind!r} is unknown; known: {sorted(_KINDS)}")
    check_header(body, source, list(_KINDS), methods.available())
    check_privacy(body, source)
    try:
        domain = Domain.from_dict(body["domain"])
        _KINDS[kind]._check_payload(body, domain, source)
        synopsis = _KINDS[kind]._from_payload(domain, body["method"], body)
        if isinstance(body.get("privacy"), Mapping):
            synopsis.provenance = Provenance.from_dict(body["privacy"])
        return synopsis
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, DPMarginalsError):
            raise
        raise DPMarginalsError(f"malformed {kind!r} synopsis: {exc!r}") from None


@dataclass(eq=False)
class ViewSynopsis(Synopsis):
    """Consistent, non-negative marginals ("views"); other marginals by max-entropy.

    A query inside one view is read off it; otherwise the answer is the maximum-entropy
    table consistent with every view's projection on its overlap with the query
    (CALM §4.1, PriView).
    """

    kind: ClassVar[str] = "views"
    domain: Domain
    views: list[tuple[tuple[str, ...], np.ndarray]]
    method: str = "calm"
    info: dict[str, Any] = field(default_factory=dict)

    def marginal(self, attrs: Sequence[str], *, std: bool = False) -> MarginalTable:
        """``std=True`` also attaches per-cell standard errors (:mod:`dpmarginals.synopsis.stderr`;
        needs ``info["groups"]``, which ``CALM.run`` records) and per-query 95% intervals
        (:mod:`dpmarginals.synopsis.intervals`)."""
        from ..inference.maxent import MAXENT_ITERATIONS, MAXENT_TOL, _max_entropy

        attrs = check_query(self.domain, attrs)
        query = self.domain.indices(attrs)
        table = _max_entropy(query, self._index_views(), self.domain.sizes, tol=MAXENT_TOL,
                             max_iter=MAXENT_ITERATIONS, init=None, return_info=False)
        if not std:
            return MarginalTable(self.domain.project(attrs), table)
        from .intervals import with_uncertainty

        return with_uncertainty(self, MarginalTable(self.domain.project(attrs), table))

    def measured_sets(self, attrs: Sequence[str]) -> tuple[tuple[str, ...], ...]:
        return maximal_overlaps([a for a, _ in self.views], attrs)

    def _index_views(self) -> list[Any]:
        """The views by attribute index, checked once (every query reads them)."""
        from ..inference import as_view

        key = [(a, id(t)) for a, t in self.views]
        cached = self.__dict__.get("_checked")
        if cached is None or cached[0] != key:
            cached = (key, [as_view((self.domain.indices(a), t), self.domain.sizes, index=i,
                                    copy=False) for i, (a, t) in enumerate(self.views)])
            self.__dict__["_checked"] = cached
        return cached[1]

    def _payload(self) -> dict[str, Any]:
        return {"info": self.info,
                "views": views_to_json(self.views)}

    @classmethod
    def _check_payload(cls, body: Mapping[str, Any], domain: Domain, source: str) -> None:
        from ..oracles import ORACLES
        from .release_file import check_views

        check_views(body, domain, source, sorted(ORACLES))

    @classmethod
    def _from_payload(cls, domain: Domain, method: str, payload: Mapping[str, Any]) -> Synopsis:
        views = views_from_json(domain, payload["views"])
        return cls(domain, views, method, dict(payload.get("info", {})))


@dataclass(eq=False)
class UniformSynopsis(Synopsis):
    """The Uniform baseline (CALM §5.1 "Uni"): every marginal is uniform; no data used."""

    kind: ClassVar[str] = "uniform"
    domain: Domain
    method: str = "uni"

    def marginal(self, attrs: Sequence[str]) -> MarginalTable:
        return MarginalTable.uniform(self.domain.project(check_query(self.domain, attrs)))

    def measured_sets(self, attrs: Sequence[str]) -> tuple[tuple[str, ...], ...]:
        return ()  # nothing is measured

    def _payload(self) -> dict[str, Any]:
        return {}

    @classmethod
    def _from_payload(cls, domain: Domain, method: str, payload: Mapping[str, Any]) -> Synopsis:
        return cls(domain, method)


def consistent_synopsis(
    domain: Domain, views: list[NoisyView], method: str, info: dict, *, max_rounds: int = 1000
) -> ViewSynopsis:
    """Consistency + non-negativity over the noisy views (§4.4), packed as a synopsis.

    The weighted averages use 1/(C_i Var_i): CALM's 1/C_i when every group has the same
    size and oracle, and the variance-optimal generalisation §4.4 mentions otherwise.
    ``info`` gets how it ended (:class:`~dpmarginals.inference.ConsistencyResult`):
    ``consistency_rounds``, ``consistent``, ``max_inconsistency``, ``min_cell``,
    ``consistency_dual_rounds``, ``consistency_gap`` and ``consistency_mixing``.
    """
    return consistent_synopses(domain, [views], method, info, max_rounds=max_rounds)[0]


def consistent_synopses(
    domain: Domain, problems: Sequence[Sequence[NoisyView]], method: str, info: dict, *,
    max_rounds: int = 1000
) -> list[ViewSynopsis]:
    """:func:`consistent_synopsis` of each list of noisy views over the same groups (a
    bootstrap's replicates), their projections batched
    (:func:`~dpmarginals.inference.consistency.make_consistent_each`)."""
    if not problems:
        return []
    first = problems[0]
    for r, views in enumerate(problems[1:], 1):
        if [v.variance for v in views] != [v.variance for v in first]:
            raise DPMarginalsError(f"consistent_synopses: problem {r}'s view variances differ "
                                   "from problem 0's; fit it alone")
    index_views = [[(domain.indices(v.attributes), v.table) for v in views]
                   for views in problems]
    with warnings.catch_warnings():
        # Non-convergence is reported in ``info`` (consistent=False, the residuals).
        warnings.simplefilter("ignore", ConsistencyWarning)
        results = make_consistent_each(index_views, domain.sizes,
                                       variances=[v.variance for v in first],
                                       max_rounds=max_rounds)
    out = []
    for result in results:
        made = {**info, "consistency_rounds": result.rounds, "consistent": result.converged,
                "max_inconsistency": result.max_inconsistency, "min_cell": result.min_cell,
                "consistency_dual_rounds": result.dual_rounds,
                "consistency_gap": None if np.isnan(result.gap) else result.gap,
                "consistency_mixing": result.mixing}
        views = [(tuple(domain.attributes[i] for i in attrs), table)
                 for attrs, table in result]
        out.append(ViewSynopsis(domain, views, method, made))
    return out
