"""``Counts``: what every collection of a plan's reports comes down to (numpy + stdlib only).

Per group of the plan: the oracle's native support vector (``oracle.support`` of the
group's reports, int64) and the number of users who reported.  Simulation (the aggregate
sampler and the per-user path of :mod:`dpmarginals.local.collect`), the service's store
and every engine (numpy, DuckDB, Spark) build it; a method's ``release(plan, counts)``
turns it into a synopsis.  Counts of disjoint sets of reports merge by addition.

>>> a = Counts([np.array([1, 2]), np.array([0, 3, 1])], [3, 4])
>>> b = Counts.from_dict(a.to_dict())
>>> a == b, a.merge(b).users.tolist(), a.n
(True, [6, 8], 7)
>>> supports, users = a          # unpacks as the (supports, users) pair it replaces
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..core.errors import DPMarginalsError

__all__ = ["Counts"]


def _int_vector(values: Any, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        if arr.ndim == 1 and arr.dtype.kind == "f" and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise DPMarginalsError(f"{what} must be a 1-D array of integers")
    return arr.astype(np.int64, copy=False)


class Counts:
    """Support counts per group (one int64 vector each) and users per group (int64, m)."""

    __slots__ = ("supports", "users")

    def __init__(self, supports: Sequence[Any], users: Sequence[int] | np.ndarray) -> None:
        self.supports: list[np.ndarray] = [_int_vector(s, f"the support of group {g}")
                                           for g, s in enumerate(supports)]
        self.users: np.ndarray = _int_vector(users, "users")
        if self.users.shape != (len(self.supports),):
            raise DPMarginalsError(f"{len(self.supports)} supports but users of shape "
                                   f"{self.users.shape}")
        if (self.users < 0).any():
            raise DPMarginalsError("users per group must be >= 0")

    @classmethod
    def zeros(cls, sizes: Sequence[int]) -> Counts:
        """No reports yet: one zero support of each length in ``sizes``."""
        return cls([np.zeros(int(s), dtype=np.int64) for s in sizes],
                   np.zeros(len(sizes), dtype=np.int64))

    @property
    def m(self) -> int:
        return len(self.supports)

    @property
    def n(self) -> int:
        """Users in all groups."""
        return int(self.users.sum())

    def __iter__(self) -> Iterator[Any]:
        yield self.supports
        yield self.users

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> Any:
        return (self.supports, self.users)[i]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Counts):
            return NotImplemented
        return (self.m == other.m and np.array_equal(self.users, other.users)
                and all(a.shape == b.shape and np.array_equal(a, b)
                        for a, b in zip(self.supports, other.supports, strict=True)))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Counts(m={self.m}, users={self.users.tolist()})"

    def merge(self, other: Counts) -> Counts:
        """The counts of both sets of reports (disjoint sets: counts add)."""
        if not isinstance(other, Counts):
            raise DPMarginalsError(f"can only merge Counts, got {type(other).__name__}")
        shapes = [s.shape for s in self.supports]
        if shapes != [s.shape for s in other.supports]:
            raise DPMarginalsError("cannot merge counts of different plans (group sizes differ)")
        return Counts([a + b for a, b in zip(self.supports, other.supports, strict=True)],
                      self.users + other.users)

    __add__ = merge

    def subset(self, groups: Sequence[int]) -> Counts:
        return Counts([self.supports[g] for g in groups], self.users[list(groups)])

    def check(self, sizes: Sequence[int]) -> Counts:
        """Raise unless there is one support of each length in ``sizes`` (a plan's groups)."""
        got = [int(s.size) for s in self.supports]
        if got != [int(s) for s in sizes]:
            raise DPMarginalsError(f"expected counts for the plan's {len(sizes)} groups of "
                                   f"sizes {list(sizes)[:8]}, got {len(got)} of sizes {got[:8]}")
        return self

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"supports": [[...], ...], "users": [...]}``."""
        return {"supports": [s.tolist() for s in self.supports], "users": self.users.tolist()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Counts:
        if not isinstance(data, Mapping) or set(data) != {"supports", "users"}:
            raise DPMarginalsError('counts must be {"supports": [...], "users": [...]}')
        return cls(list(data["supports"]), data["users"])
