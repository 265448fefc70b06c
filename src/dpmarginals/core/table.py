"""MarginalTable: the joint distribution of a few attributes, as fractions."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .domain import Domain
from .errors import DPMarginalsError

__all__ = ["MarginalTable"]


@dataclass(frozen=True, eq=False)
class MarginalTable:
    """A marginal over ``domain.attributes``: ``values[v1, ..., vk]`` is a fraction.

    ``values`` has shape ``domain.shape``.  Released tables sum to 1 (within 1e-6);
    unbiased intermediate estimates may not, so the check is opt-in via
    :meth:`validated`.  ``std`` (same shape, optional) is a per-cell standard error.
    ``measured`` (set by every synopsis): the largest attribute sets of the query that some
    report measured jointly; the table is *reconstructed* (by a model, e.g. maximum
    entropy) unless one of them is the whole query.  None: not a release (exact data).
    ``lower``/``upper`` (optional, same shape): a per-cell nominal 95% interval, and
    ``note`` why it is not ``values ± 1.96 std`` (:mod:`dpmarginals.synopsis.intervals`).

    >>> t = MarginalTable(Domain(("a", "b"), (2, 2)), np.array([[0.1, 0.2], [0.3, 0.4]]))
    >>> t.project(["b"]).values
    array([0.4, 0.6])
    """

    domain: Domain
    values: np.ndarray
    std: np.ndarray | None = field(default=None)
    measured: tuple[tuple[str, ...], ...] | None = field(default=None)
    lower: np.ndarray | None = field(default=None)
    upper: np.ndarray | None = field(default=None)
    note: str | None = field(default=None)

    def __post_init__(self) -> None:
        vals = np.asarray(self.values, dtype=np.float64)
        if vals.shape != self.domain.shape:
            raise DPMarginalsError(
                f"table shape {vals.shape} does not match domain shape {self.domain.shape}"
            )
        object.__setattr__(self, "values", vals)
        for name in ("std", "lower", "upper"):
            arr = getattr(self, name)
            if arr is not None:
                arr = np.asarray(arr, dtype=np.float64)
                if arr.shape != vals.shape:
                    raise DPMarginalsError(f"{name} shape {arr.shape} != table shape "
                                           f"{vals.shape}")
                object.__setattr__(self, name, arr)

    @property
    def attributes(self) -> tuple[str, ...]:
        return self.domain.attributes

    @property
    def reconstructed(self) -> bool | None:
        """True when no report measured the query's attributes together (None: unknown)."""
        if self.measured is None:
            return None
        return not any(set(m) == set(self.attributes) for m in self.measured)

    def describe_basis(self) -> str | None:
        """One line saying whether the table was measured or reconstructed, or None."""
        if self.measured is None:
            return None
        if not self.reconstructed:
            return f"measured: {', '.join(self.attributes)} were measured together"
        sets = "; ".join(", ".join(m) for m in self.measured) or "nothing"
        return ("reconstructed by a model (maximum entropy or a graphical model): "
                f"{', '.join(self.attributes)} were not measured together; measured: {sets}")

    def replace(self, **changes: object) -> MarginalTable:
        """A copy with some fields changed (the table is frozen)."""
        return dataclasses.replace(self, **changes)

    def validated(self, tol: float = 1e-6) -> MarginalTable:
        """Return self after checking the fractions are non-negative and sum to 1."""
        total = float(self.values.sum())
        if abs(total - 1.0) > tol or (self.values < -tol).any():
            raise DPMarginalsError(
                f"marginal over {list(self.attributes)} is not a distribution (sum {total:.6g})"
            )
        return self

    def project(self, attrs: Sequence[str]) -> MarginalTable:
        """Marginalize onto ``attrs`` (a subset, any order)."""
        sub = self.domain.project(attrs)
        axes = self.domain.indices(sub.attributes)
        drop = tuple(i for i in range(len(self.domain)) if i not in axes)
        summed = self.values.sum(axis=drop)
        kept = [a for a in range(len(self.domain)) if a in axes]
        order = [kept.index(a) for a in axes]
        return MarginalTable(sub, np.transpose(summed, order))

    def to_frame(self, value_name: str = "fraction") -> pd.DataFrame:
        """Long format: one row per cell, one column per attribute, then the fraction.

        >>> MarginalTable(Domain(("a",), (2,)), np.array([0.25, 0.75])).to_frame()
           a  fraction
        0  0      0.25
        1  1      0.75
        """
        grid = np.indices(self.domain.shape).reshape(len(self.domain), -1).T
        frame = pd.DataFrame(grid, columns=list(self.attributes))
        for j, a in enumerate(self.attributes):
            names = self.domain.labels[j]
            if names is not None:  # the user's own values, as the categories they came in
                frame[a] = pd.Categorical.from_codes(grid[:, j], categories=list(names.names))
        frame[value_name] = self.values.ravel()
        for name in ("std", "lower", "upper"):
            if getattr(self, name) is not None:
                frame[name] = getattr(self, name).ravel()
        return frame

    def sse(self, truth: MarginalTable) -> float:
        """Sum of squared errors against another table over the same attributes (CALM §5.1)."""
        other = truth.project(self.attributes)
        return float(((self.values - other.values) ** 2).sum())

    def total_variation(self, truth: MarginalTable) -> float:
        """Total variation distance, half the L1 distance (Cormode et al. §5.1)."""
        other = truth.project(self.attributes)
        return float(0.5 * np.abs(self.values - other.values).sum())

    def to_dict(self) -> dict:
        out: dict = {"attributes": list(self.attributes), "sizes": list(self.domain.sizes),
                     "values": self.values.ravel().tolist()}
        labels = {a: list(lab.names) for a, lab in zip(self.attributes, self.domain.labels,
                                                       strict=True) if lab is not None}
        if labels:
            out["labels"] = labels
        for name in ("std", "lower", "upper"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name).ravel().tolist()
        if self.measured is not None:
            out["measured"] = [list(m) for m in self.measured]
            out["reconstructed"] = self.reconstructed
        if self.note is not None:
            out["note"] = self.note
        return out

    @classmethod
    def from_dict(cls, spec: dict) -> MarginalTable:
        dom = Domain(tuple(spec["attributes"]), tuple(spec["sizes"]))
        if spec.get("labels"):
            dom = dom.with_labels(spec["labels"])
        arrays = {name: np.asarray(spec[name]).reshape(dom.shape)
                  for name in ("std", "lower", "upper") if spec.get(name) is not None}
        measured = spec.get("measured")
        return cls(dom, np.asarray(spec["values"]).reshape(dom.shape),
                   measured=None if measured is None else tuple(tuple(m) for m in measured),
                   note=spec.get("note"), **arrays)

    @classmethod
    def uniform(cls, domain: Domain) -> MarginalTable:
        return cls(domain, np.full(domain.shape, 1.0 / domain.cells()))
