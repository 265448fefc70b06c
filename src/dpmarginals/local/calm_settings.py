"""The settings of CALM's collection, shared by CALM and BE (CALM on the bits of the data).

Light to import: BE's module reaches CALM itself only when it plans or releases.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import check_epsilon, check_k

__all__ = ["CALMSettings"]


@dataclass
class CALMSettings:
    """The budget ``epsilon``, the marginal size ``k``, Algorithm 1's target reconstruction
    error ``theta``, the number ``m`` and size ``l`` of the marginals when forced, the
    ``oracle`` choice, and ``per_user`` (randomize every record rather than sample the
    aggregate counts).  Checks the budget and k; the rest is checked where it is used."""

    epsilon: float
    k: int = 3
    theta: float = 1e-3
    m: int | None = None
    l: int | None = None
    oracle: str = "adaptive"
    per_user: bool = False

    def __post_init__(self) -> None:
        self.epsilon = check_epsilon(self.epsilon)
        self.k = check_k(self.k)
