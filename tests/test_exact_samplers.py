"""Every report format's implemented sampler has exactly its declared law, and that law is
exactly eps-LDP: enumerated in Fractions, on small domains.

Two levels, each exact:

1. **The primitives** (:mod:`dpmarginals.protocol.samplers`) against their declared laws,
   on their random words: a coin is ``[w < T]`` (probability T / 2^32, checked at T - 1
   and T); Lemire's ``uniform(n)`` maps every word of each value's block to it and rejects
   exactly ``2^32 mod n`` words per block (every block boundary of several n, and 10^5
   random words against the formula); the GRR sampler over all 2^16 coin halves and all
   2^16 index halves; the byte sampler's every straddling cell refined to its exact
   inverse CDF.
2. **Every format** (grr, oue, sue, olh, hr, ht, cms, em, matrix, and the memoized
   permanent + instantaneous layers of grr, oue, sue, em): the production randomizer runs
   with its primitives replaced by *choice points* that take each outcome of the
   primitive's declared law in turn, so the run explores every path of the implemented
   code; the law is the sum over paths of the product of the outcomes' probabilities, in
   Fractions.  It must sum to 1, equal the law the aggregator unbiases with, and have
   max_{y, x, x'} P[y | x] / P[y | x'] <= e^eps (checked against a rational lower bound of
   e^eps, so the inequality is exact).  OLH is enumerated conditionally on 36 hash seeds
   (the seed's law does not depend on the value, so the ratio is the same); the unary
   encodings' bits are choice points of their Bernoulli law (the byte sampler that draws
   them is the exact inverse CDF of that law, tested above).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from dpmarginals.core.domain import Domain
from dpmarginals.core.exact import WORD, exp_lower_bound
from dpmarginals.core.hashing import PRIME
from dpmarginals.local.cormode import InpHTCMS
from dpmarginals.local.em import EM
from dpmarginals.local.fourier import InpHT, MargHT
from dpmarginals.local.wfm import WFM
from dpmarginals.oracles import GRR, make_oracle
from dpmarginals.protocol import formats, randomizers, samplers
from dpmarginals.protocol.formats import STRATEGY_TOTAL, group_oracle
from dpmarginals.protocol.plan import GroupSpec, Plan
from dpmarginals.protocol.samplers import ByteSampler, WordStream, keep_or_uniform, uniform


# -- 1. the primitives ------------------------------------------------------------------------
def test_a_coin_is_the_word_below_its_threshold():
    for t in (0, 1, 2**31, WORD - 1, WORD):
        for w in {max(t - 1, 0), min(t, WORD - 1), 0, WORD - 1}:
            assert bool(samplers.coins(WordStream([w]), t, 1)[0]) == (w < t)


def _lemire(w: int, n: int) -> int | None:
    """Lemire's map of one word (None: rejected)."""
    scaled = w * n
    return None if scaled % WORD < WORD % n else scaled // WORD


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 10, 100, 1000, 65535, 2**31 - 1, WORD - 1, WORD])
def test_uniform_is_lemires_exact_map(n):
    """For n <= 1000 every block's first word, first accepted word and last word, and the
    words around them; for every n 10^5 random words: the implementation maps each word as
    Lemire's rule does, and the rule gives each value exactly floor(2^32 / n) words."""
    def implemented(w: int) -> int | None:
        src = WordStream([w, WORD - 1])  # a rejected word draws the next (always accepted)
        out = int(uniform(src, n, 1)[0])
        return out if src.used == 1 else None

    words: list[int] = list(np.random.default_rng(n % 1000).integers(0, WORD, 10**5))
    if n <= 1000:
        for j in range(n):
            start = -(-j * WORD // n)
            first = -(-(j * WORD + WORD % n) // n)
            end = -(-(j + 1) * WORD // n)
            assert end - first == WORD // n  # accepted words per value: all equal
            words += [start, first - 1, first, end - 1]
    for w in {int(w) for w in words if 0 <= w < WORD}:
        assert implemented(w) == _lemire(w, n), w
    assert _lemire(WORD - 1, n) is not None


@pytest.mark.parametrize(("eps", "size"), [(1.0, 4), (1.0, 6), (0.5, 3), (3.0, 1000)])
def test_grr_one_word_sampler_has_the_exact_law(eps, size):
    """A word's low half is the coin (kept iff below keep >> 16; equal, a tie: one more
    word decides against keep's low 16 bits), its high half the index (multiply-shift; the
    2^16 mod L biased halves redraw by :func:`uniform`).  Every coin half (true value 0,
    index half 0xFFFF: the unbiased index L - 1), then every index half with a losing
    coin: P(kept) = keep / 2^32 exactly, and each value is the index of exactly
    floor(2^16 / L) halves (the biased ones redraw; here the redraw word 2^32 - 1 gives
    L - 1)."""
    oracle = GRR(eps, size)
    keep = randomizers.threshold(oracle.keep, "keep")
    whole, rest = keep >> 16, keep & 0xFFFF
    assert whole < 0xFFFF
    coin_words = [c | (0xFFFF << 16) for c in range(1 << 16)]
    zeros = np.zeros(1 << 16, dtype=np.int64)
    for tie_word, tie_kept in ((0, rest > 0), (rest << 16, False)):
        src = WordStream([*coin_words, tie_word])
        out = keep_or_uniform(src, zeros, keep, size)
        assert src.used == (1 << 16) + (rest > 0)  # a tie word only when keep has low bits
        assert (out[:whole] == 0).all() and (out[whole + 1:] == size - 1).all()
        assert (out[whole] == 0) == tie_kept
        assert int((out == 0).sum()) == whole + tie_kept  # P(kept) = keep / 2^32 exactly
    index_words = [0xFFFF | (h << 16) for h in range(1 << 16)]
    biased = (1 << 16) % size
    src = WordStream([*index_words, *[WORD - 1] * biased])
    counts = np.bincount(keep_or_uniform(src, zeros, keep, size), minlength=size)
    expect = np.full(size, (1 << 16) // size)
    expect[size - 1] += biased
    np.testing.assert_array_equal(counts, expect)
    assert src.used == len(src.stream)


@pytest.mark.parametrize("q", [Fraction(1, 4), Fraction(1155802661, 2**32), Fraction(1, 2**20),
                               Fraction(1, 2)])
def test_byte_sampler_is_the_exact_inverse_cdf(q):
    """A byte of 8 Bernoulli(q) bits has P(v) = q^|v| (1 - q)^(8 - |v|); the sampler returns
    the value whose CDF interval holds U (its first 16 bits the cell the unit stands for,
    later words refining it).  Every straddling cell (refined at random and on a
    boundary's 2^-48 cell, which must read on) and 300 random clean cells."""
    sampler = ByteSampler(q)
    cdf = sampler.cdf
    weights = [q**k * (1 - q) ** (8 - k) for k in range(9)]
    assert all(cdf[v + 1] - cdf[v] == weights[bin(v).count("1")] for v in range(256))
    assert cdf[-1] == 1
    straddling = set(sampler.straddling.tolist())
    order = [c for c in range(1 << 16) if c not in straddling] + sampler.straddling.tolist()
    rng = np.random.default_rng(5)
    cases = [[int(i)] for i in rng.integers(0, sampler.clean, 300)]
    for i in range(sampler.clean, 1 << 16):
        cell = order[i]
        cases.append([i, int(rng.integers(0, WORD)), int(rng.integers(0, WORD))])
        for b in cdf[1:-1]:  # a boundary inside this cell: land on its 2^-48 cell
            fine = (b.numerator << 48) // b.denominator
            if fine >> 32 == cell:
                cases.append([i, fine - (cell << 32), *rng.integers(0, WORD, 2).tolist()])
    for units in cases:
        words = [units[0], *units[1:]]  # unit 0 is the low half of the first word
        src = WordStream(words)
        value = int(sampler.sample(1, src)[0])
        low, scale = Fraction(order[units[0]], 1 << 16), Fraction(1, 1 << 16)
        for w in units[1 : src.used]:
            scale /= WORD
            low += w * scale
        assert cdf[value] <= low and low + scale <= cdf[value + 1]


def test_uniform63_takes_the_low_31_bits_of_the_second_word():
    src = WordStream([5, 0xFFFF_FFFF])
    assert int(samplers.uniform63(src, 1)[0]) == 5 + ((2**31 - 1) << 32)


# -- 2. every format, enumerated ---------------------------------------------------------
class Chooser:
    """Depth-first enumeration of the choice points of one run of a randomizer."""

    def __init__(self) -> None:
        self.path: list[int] = []
        self.widths: list[int] = []
        self.at = 0
        self.prob = Fraction(1)

    def choose(self, options: Sequence[tuple[Any, Fraction]]) -> Any:
        if self.at == len(self.path):
            self.path.append(0)
            self.widths.append(len(options))
        value, prob = options[self.path[self.at]]
        self.at += 1
        self.prob *= prob
        return value

    def next_path(self) -> bool:
        """Advance to the next path (odometer over the choices); False when done."""
        while self.path:
            self.path[-1] += 1
            if self.path[-1] < self.widths[-1]:
                break
            self.path.pop()
            self.widths.pop()
        self.at, self.prob = 0, Fraction(1)
        return bool(self.path)


SEEDS = [(1, 0), (7, 3), (2**30 + 17, 12345), (PRIME - 2, PRIME - 1), (99991, 7), (5, 2**29)]


def _install(monkeypatch: pytest.MonkeyPatch, chooser: Chooser) -> None:
    """Replace the randomizers' primitives with choice points over their declared laws."""
    def coins(src, threshold, count):
        p = Fraction(threshold, WORD)
        return np.array([chooser.choose([(True, p), (False, 1 - p)]) for _ in range(count)])

    def uniform_(src, n, count):
        if n > 4096:  # OLH's seeds: conditional on a few (the seed's law ignores the value)
            values = [a - 1 for a, _ in SEEDS] if n == PRIME - 1 else [b for _, b in SEEDS]
            return np.array([chooser.choose([(v, Fraction(1, len(values))) for v in values])
                             for _ in range(count)], dtype=np.int64)
        return np.array([chooser.choose([(v, Fraction(1, n)) for v in range(n)])
                         for _ in range(count)], dtype=np.int64)

    def keep_or_uniform_(src, values, keep, size):
        beta = Fraction(keep, WORD)
        out = []
        for v in np.asarray(values).tolist():
            options = [(j, (1 - beta) / size + (beta if j == v else 0)) for j in range(size)]
            out.append(chooser.choose(options))
        return np.array(out, dtype=np.int64)

    def bernoulli_bytes(prob, n, width, size, src):
        """(n, width) bytes whose first ``size`` bits are Bernoulli(prob) choice points and
        the rest 0 (the byte sampler's law is checked above, bit by bit)."""
        options = [(1, Fraction(prob)), (0, 1 - Fraction(prob))]
        bits = np.zeros((n, 8 * width), dtype=np.uint8)
        for i in range(n):
            for j in range(size):
                bits[i, j] = chooser.choose(options)
        return np.packbits(bits, axis=1, bitorder="little")

    def uniform63(src, count):
        raise AssertionError("matrix outputs are enumerated through their weights")

    for module in (randomizers, formats):
        for name, fake in (("coins", coins), ("uniform", uniform_),
                           ("keep_or_uniform", keep_or_uniform_), ("uniform63", uniform63)):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, fake)
    monkeypatch.setattr(randomizers, "_bernoulli_bytes", bernoulli_bytes)


def enumerate_law(monkeypatch: pytest.MonkeyPatch, run: Callable[[], Any]) -> dict[Any, Fraction]:
    """The exact law of ``run()``'s output (a hashable form of the report)."""
    chooser = Chooser()
    law: dict[Any, Fraction] = {}
    with monkeypatch.context() as m:
        _install(m, chooser)
        while True:
            out = run()
            law[out] = law.get(out, Fraction(0)) + chooser.prob
            if not chooser.next_path():
                break
    assert sum(law.values()) == 1
    return law


def _key(native: np.ndarray) -> Any:
    return tuple(np.asarray(native).ravel().tolist())


def check_ldp(laws: Sequence[dict[Any, Fraction]], epsilon: float) -> Fraction:
    """The exact max ratio over outputs and input pairs; asserted <= e^eps."""
    outputs = set().union(*laws)
    worst = Fraction(1)
    for y in outputs:
        probs = [law.get(y, Fraction(0)) for law in laws]
        assert min(probs) > 0, f"output {y} is impossible under some input"
        worst = max(worst, max(probs) / min(probs))
    assert worst <= exp_lower_bound(Fraction(epsilon))
    return worst


def _format_laws(monkeypatch, fmt, inputs, perturb=None) -> list[dict[Any, Fraction]]:
    run = perturb or (lambda x: fmt.perturb(np.array([x]), rng=0))
    return [enumerate_law(monkeypatch, lambda x=x: _key(run(x))) for x in inputs]


@pytest.mark.parametrize("name", ["grr", "oue", "sue", "hr", "olh"])
@pytest.mark.parametrize(("eps", "size"), [(0.5, 3), (2.0, 5), (1.0, 8)])
def test_every_frequency_oracle_is_exactly_its_law_and_eps_ldp(monkeypatch, name, eps, size):
    oracle = make_oracle(name, eps, size)
    fmt = formats.CellReports(oracle, (size,))
    laws = _format_laws(monkeypatch, fmt, range(size))
    assert check_ldp(laws, eps) == oracle.privacy_ratio()  # olh: given the seed, p_g / q_g
    if name != "olh":
        for x, law in enumerate(laws):
            assert law == _declared_law(oracle, x)


def _declared_law(oracle: Any, x: int) -> dict[Any, Fraction]:
    """The oracle's declared law of the report of value x, exactly."""
    p, q, size = oracle.p_exact, oracle.q_exact, oracle.size
    if oracle.name == "grr":
        return {(y,): p if y == x else q for y in range(size)}
    if oracle.name == "hr":
        return {(j, b): Fraction(1, oracle.K) * (p if bin((x + 1) & j).count("1") % 2 == b
                                                 else 1 - p)
                for j in range(oracle.K) for b in (0, 1)}
    out = {}
    for bits in range(1 << size):
        ones = [(bits >> j) & 1 for j in range(size)]
        prob = math.prod((p if j == x else q) if b else 1 - (p if j == x else q)
                         for j, b in enumerate(ones))
        out[tuple(bits.to_bytes(oracle.report_bytes, "little"))] = prob
    return out


@pytest.mark.parametrize("name", ["grr", "oue", "sue"])
@pytest.mark.parametrize(("eps", "longitudinal", "size"), [(0.5, 2.0, 3), (1.0, 4.0, 6)])
def test_memoized_layers_compose_to_the_declared_law(monkeypatch, name, eps, longitudinal,
                                                     size):
    """A fresh report of a memoized plan (permanent response, then instantaneous noise) has
    exactly the composed law the aggregator unbiases with, eps-LDP per report; the
    permanent response alone is longitudinal-LDP."""
    dom = Domain(("a",), (size,))
    plan = Plan("calm", eps, dom, (GroupSpec(("a",), name, eps, size),),
                longitudinal=longitudinal)
    fmt = group_oracle(plan, 0)
    laws = _format_laws(monkeypatch, fmt, range(size))
    assert check_ldp(laws, eps) == fmt.oracle.privacy_ratio()
    for x, law in enumerate(laws):
        assert law == _declared_law(fmt.oracle, x)
    prr = _format_laws(monkeypatch, fmt, range(size),
                       lambda x: fmt.permanent(np.array([x]), None))
    assert check_ldp(prr, longitudinal) == fmt.memo[0].privacy_ratio()


BIN3 = Domain(("a", "b", "c"), (2, 2, 2))
MIXED3 = Domain(("a", "b", "c"), (3, 2, 2))


def _records(dom: Domain) -> np.ndarray:
    return np.stack(np.unravel_index(np.arange(dom.cells()), dom.shape), axis=1)


def _plan_laws(monkeypatch, plan: Plan) -> tuple[list[dict[Any, Fraction]], list[Any]]:
    """Per record of the plan's domain, the exact law of (group, report) with a uniform
    group (the device's draw; the service's assignment ignores the record too)."""
    fmts = formats.plan_oracles(plan)
    laws = []
    for row in _records(plan.domain):
        law: dict[Any, Fraction] = {}
        for g, (spec, fmt) in enumerate(zip(plan.groups, fmts, strict=True)):
            inputs = fmt.encode(row[list(plan.domain.indices(spec.attributes))][None, :])
            part = enumerate_law(monkeypatch, lambda fmt=fmt, inputs=inputs: _key(
                fmt.perturb(inputs, rng=0)))
            for y, p in part.items():
                law[(g, y)] = p / plan.m
        laws.append(law)
    return laws, fmts


def _declared_column(fmt: Any, y: tuple[int, ...]) -> int:
    """A report's column in the format's ``output_distribution``."""
    if fmt.name == "em":
        return int(np.ravel_multi_index(y, fmt.classes))
    return 2 * y[0] + y[1]


def _assert_declared(plan: Plan, laws, fmts) -> None:
    """The enumerated law of every group is the format's declared output distribution."""
    for row, law in zip(_records(plan.domain), laws, strict=True):
        for g, (spec, fmt) in enumerate(zip(plan.groups, fmts, strict=True)):
            x = fmt.encode(row[list(plan.domain.indices(spec.attributes))][None, :])[0]
            want = fmt.output_distribution(x)
            got = np.zeros(want.size)
            for (group, y), v in law.items():
                if group == g:
                    got[_declared_column(fmt, y)] = float(v * plan.m)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("eps", [0.5, 2.0])
@pytest.mark.parametrize(("method", "dom"), [
    (lambda e: InpHT(e, k=2), MIXED3), (lambda e: InpHT(e, k=2, support="attributes"), MIXED3),
    (lambda e: MargHT(e, k=2), BIN3), (lambda e: InpHTCMS(e, k=2, g=2, w=4, hash_seed=3), BIN3),
    (lambda e: EM(e, k=2), MIXED3), (lambda e: EM(e, k=2, oracle="oue"), MIXED3),
    (lambda e: EM(e, k=2, oracle="sue"), BIN3),
], ids=["inp_ht", "inp_ht_attributes", "marg_ht", "inp_htcms", "em", "em_oue", "em_sue"])
def test_every_report_format_is_exactly_its_law_and_eps_ldp(monkeypatch, method, dom, eps):
    plan = method(eps).plan(dom, 100_000)
    laws, fmts = _plan_laws(monkeypatch, plan)
    worst = check_ldp(laws, eps)
    assert float(worst) >= math.exp(eps) * (1 - 1e-7)  # tight: the budget is used
    _assert_declared(plan, laws, fmts)


@pytest.mark.parametrize(("oracle", "dom"), [("grr", MIXED3), ("oue", Domain(("a", "b"),
                                                                              (2, 2)))])
def test_em_memoized_composes_per_attribute(monkeypatch, oracle, dom):
    plan = EM(1.0, k=2, oracle=oracle).plan(dom, 1000)
    plan = Plan(plan.method, plan.epsilon, plan.domain, plan.groups, plan.params,
                longitudinal=3.0)
    laws, fmts = _plan_laws(monkeypatch, plan)
    check_ldp(laws, 1.0)
    _assert_declared(plan, laws, fmts)  # the product of the composed attribute laws


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_the_matrix_format_samples_exactly_its_integer_weights(eps):
    """u = uniform63 over all 2^63 values is the output o for exactly W[o, x] of them: the
    implementation's output at every cumulative-weight boundary of every column (the last
    u of each output and the first of the next) and 1,000 random u."""
    plan = WFM(eps, k=2, cache=False).plan(BIN3, 1000)
    fmt = group_oracle(plan, 0)
    weights = fmt.matrix.astype(object)
    assert all(sum(weights[:, x]) == STRATEGY_TOTAL for x in range(weights.shape[1]))
    rng = np.random.default_rng(1)
    for x in range(weights.shape[1]):
        bounds = np.cumsum(weights[:, x])
        probes = {int(u) for u in rng.integers(0, STRATEGY_TOTAL, 1000, dtype=np.uint64)}
        for b in bounds[:-1].tolist():
            probes |= {b - 1, b}
        for u in sorted(p for p in probes if 0 <= p < STRATEGY_TOTAL):
            src = WordStream([u & 0xFFFF_FFFF, u >> 32])
            o = int(fmt.perturb([x], rng=src)[0])
            assert (bounds[o - 1] if o else 0) <= u < bounds[o]
    for row in weights:  # exactly eps-LDP, in integers
        assert Fraction(max(row), min(row)) <= exp_lower_bound(Fraction(eps))
