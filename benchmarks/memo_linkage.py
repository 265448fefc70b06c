"""How much two memoized reports of one device link, against two devices' (issue-free;
docs/device-spec.md §4).

A server that sees two reports of one family (one attribute set, oracle, longitudinal
epsilon) wants to tell "one device, twice" from "two devices with the same value".  For
the implemented laws (:func:`dpmarginals.oracles.memoized.memoized`: the permanent
response at L_eps, the instantaneous noise at its exact threshold) this prints, per
longitudinal / per-report ratio, the best test's advantage (total variation between the
pair's two laws): exact for GRR, and for OUE bounded through the Hellinger affinity of
its independent bits (1 - BC <= TV <= sqrt(1 - BC^2)), with the expected Hamming distance
of the pair under each hypothesis.

    python benchmarks/memo_linkage.py
"""

from __future__ import annotations

import math

import numpy as np

from dpmarginals.oracles.memoized import memoized

WORD = 2**32
RATIOS = (1.0, 1.5, 2.0, 3.0, 4.0, 8.0)


def _bit_pair(one: float, flip: float) -> tuple[np.ndarray, np.ndarray]:
    """Joint law of two reports' bit whose permanent bit is 1 w.p. ``one``, each report
    flipping it w.p. ``flip``: one device (a shared permanent bit), two devices."""
    law = lambda x: np.array([1 - x, x])  # noqa: E731
    same = sum((one if b else 1 - one) * np.outer(law(flip if b == 0 else 1 - flip),
                                                  law(flip if b == 0 else 1 - flip))
               for b in (0, 1))
    p = one * (1 - flip) + (1 - one) * flip
    return same, np.outer(law(p), law(p))


def oue(epsilon: float, ratio: float, cells: int) -> tuple[float, float, float, float]:
    """(TV lower bound, TV upper bound, E Hamming one device, E Hamming two devices)."""
    prr, inst, _ = memoized("oue", epsilon, epsilon * ratio, cells)
    flip = inst / WORD
    s1, d1 = _bit_pair(float(prr.p), flip)
    s0, d0 = _bit_pair(float(prr.q), flip)
    bc = math.exp(math.log(np.sqrt(s1 * d1).sum()) + (cells - 1) * math.log(np.sqrt(s0 * d0).sum()))
    ham = lambda law: 2 * law[0, 1]  # noqa: E731
    return (1 - bc, math.sqrt(max(0.0, 1 - bc * bc)), ham(s1) + (cells - 1) * ham(s0),
            ham(d1) + (cells - 1) * ham(d0))


def grr(epsilon: float, ratio: float, size: int) -> float:
    """The exact TV between one device's pair of reports and two devices' (same value)."""
    prr, keep, _ = memoized("grr", epsilon, epsilon * ratio, size)
    perm = np.array(prr.output_distribution(0), dtype=np.float64)
    beta = keep / WORD
    inst = beta * np.eye(size) + (1 - beta) / size  # row: permanent value -> report
    same = np.einsum("p,pa,pb->ab", perm, inst, inst)
    one = perm @ inst
    return 0.5 * float(np.abs(same - np.outer(one, one)).sum())


def main() -> None:
    eps = 1.0
    print(f"per-report epsilon {eps:g}; advantage = best test's TV (one device twice vs two "
          "devices, same value)")
    print("L/eps | GRR 16 values | OUE 16 cells: TV, Hamming same/diff | OUE 1,024 cells")
    for r in RATIOS:
        lo16, hi16, hs16, hd16 = oue(eps, r, 16)
        lo1k, hi1k, hs1k, hd1k = oue(eps, r, 1024)
        print(f"{r:5g} | {grr(eps, r, 16):.3f} | [{lo16:.3f}, {hi16:.3f}], {hs16:.1f}/{hd16:.1f} "
              f"| [{lo1k:.3f}, {hi1k:.3f}], {hs1k:.0f}/{hd1k:.0f}")


if __name__ == "__main__":
    main()
