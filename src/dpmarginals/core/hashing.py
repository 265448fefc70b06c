"""The Mersenne prime P = 2^31 - 1 of every hash family in the package (OLH's
Carter-Wegman family, the count-mean sketches' degree-2 polynomials) and the exact
collision probabilities of reducing residues mod P into [w]."""

from __future__ import annotations

from fractions import Fraction

__all__ = ["PRIME", "distinct_collision", "distinct_collision_exact", "independent_collision"]

PRIME = (1 << 31) - 1


def distinct_collision(w: int) -> float:
    """P[u mod w == u' mod w] for two *distinct* uniform residues u != u' mod P (OLH)."""
    return float(distinct_collision_exact(w))


def distinct_collision_exact(w: int) -> Fraction:
    """:func:`distinct_collision` as an exact rational."""
    m, r = divmod(PRIME, w)
    same = r * (m + 1) * m + (w - r) * m * (m - 1)
    return Fraction(same, PRIME * (PRIME - 1))


def independent_collision(w: int) -> float:
    """P[u mod w == u' mod w] for *independent* uniform u, u' in [0, P) (sketch hashes)."""
    q, r = divmod(PRIME, w)
    return (r * (q + 1) ** 2 + (w - r) * q**2) / PRIME**2
