"""What a saved release says about itself: private or simulated, and under which guarantee.

Every synopsis or release file carries a ``privacy`` block (issue #15).  Only
:func:`dpmarginals.release` (every record randomized on the per-user path with the OS's
secure randomness), the collection service and the engines (reports made by clients), and
``central`` without a seed mark a file ``private: true``; a synopsis from ``Method.run`` or
``run --simulation`` is marked ``private: false`` and says why, and readers warn about it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["NOT_RELEASED", "NotPrivateWarning", "Provenance", "warn_if_not_private"]

LOCAL_UNIT = "one person: each row of the data is one user, who randomizes her own record"
CENTRAL_UNIT = "one record, added or removed"
OS_RANDOMNESS = "operating system CSPRNG (os.urandom), one draw per record"


class NotPrivateWarning(UserWarning):
    """A file that is not a private release (a simulation or an unmarked synopsis)."""


@dataclass(frozen=True)
class Provenance:
    """The privacy mark of one release: how it was made and what it guarantees."""

    private: bool
    model: str  # "local" or "central"
    method: str
    epsilon: float | None
    delta: float = 0.0
    unit: str = LOCAL_UNIT
    randomness: str = OS_RANDOMNESS
    plan_hash: str | None = None
    package_version: str = ""
    reason: str | None = None  # why a file is not private

    def __post_init__(self) -> None:
        if not self.package_version:
            from .. import __version__

            object.__setattr__(self, "package_version", __version__)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> Provenance:
        """Read a saved mark; anything but a JSON ``true`` for ``private`` is not private."""
        known = {f: spec[f] for f in cls.__dataclass_fields__ if f in spec}
        known["private"] = spec.get("private") is True
        if not known["private"] and not known.get("reason"):
            known["reason"] = f"its privacy mark says private = {spec.get('private')!r}"
        return cls(**{"model": "unknown", "method": "unknown", "epsilon": None, **known})

    @classmethod
    def simulation(cls, method: str, model: str, epsilon: float | None, reason: str,
                   **more: Any) -> Provenance:
        """The mark of a simulation: not private, with the reason in the file."""
        more.setdefault("unit", CENTRAL_UNIT if model == "central" else LOCAL_UNIT)
        return cls(False, model, method, epsilon, reason=reason,
                   randomness=more.pop("randomness", "seeded simulation"), **more)

    def describe(self) -> str:
        """One line for a reader."""
        if self.private:
            delta = f", delta {self.delta:g}" if self.delta else ""
            return (f"private {self.model}-DP release ({self.method}, "
                    f"epsilon {self.epsilon:g}{delta})")
        return f"NOT a private release: {self.reason or 'no privacy mark'}"


NOT_RELEASED = ("made by Method.run or an older dpmarginals, not by dpmarginals.release: "
                "a simulation or an experiment; do not publish it")


def warn_if_not_private(mark: Provenance, source: str) -> None:
    """Warn (one line) when a file read from ``source`` is not a private release."""
    if not mark.private:
        warnings.warn(f"{source} is {mark.describe()}", NotPrivateWarning, stacklevel=3)
