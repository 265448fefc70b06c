"""Local-DP checks of every method's collection, from its own side (issue #15, point 6).

The exact, word-level enumeration of every report format's implemented sampler is in
``tests/test_exact_samplers.py``; here, every method's exposed output distribution is
eps-LDP and tight, equals the law of the reports a device makes from its plan, and the
method's simulated and per-user runs (many users at once: the vectorized code path)
follow it.

The frequency oracles have their own exact tests (``tests/test_oracles.py``).  Here: the
randomizers the methods run inline -- FT/InpHT and MargHT (CALM §3.5; Cormode et al.
§4.2-4.3), InpHTCMS (Cormode et al. B.2), EM/InpEM (CALM §3.6; Cormode et al. §4.4), BE
(CALM §5.3) and, through the same function, the collection spine of CALM and AM (CALM §3.4,
§4.2).  Each exposes its exact output distribution P[record, output]; we enumerate every
record of small domains and check that rows sum to 1 and that
max_{y, x, x'} P[y|x] / P[y|x'] <= e^eps, with equality where the mechanism is tight.

Then each exposed distribution is compared with reports drawn from the real per-user code
path (seeded, so deterministic).  Error budget: one chi-squared goodness-of-fit test per
randomizer at p >= 1e-4, i.e. a correct randomizer fails with probability 1e-4 per test
for a fresh seed (~6e-4 for the six tests).

The report formats of :mod:`dpmarginals.protocol.formats` (``ht``: InpHT/FT and MargHT;
``cms``: InpHTCMS; ``em``: EM and InpEM) are checked the same way from the client's side:
the distribution of the report a device makes from the plan alone (its group uniform, then
``PlanCodec(plan).oracle(g)``), enumerated over every record, is exactly eps-LDP, equals
the method's own exposed distribution, and the client's real reports (``simulate_reports``)
follow it (six more chi-squared tests at p >= 1e-4: ht for InpHT and for MargHT, cms,
em with OUE and with GRR, and WFM's ``matrix``: one output of the plan's strategy).

Finally every local method's ``per_user=True`` run with ``rng=None`` must randomize every
record with the OS CSPRNG (:class:`~dpmarginals.core.randomness.SecureRandom`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from dpmarginals import Dataset, Domain
from dpmarginals.core.randomness import SecureRandom
from dpmarginals.local.binary_encoding import BE, BinaryEncoding
from dpmarginals.local.calm import CALM
from dpmarginals.local.collect import group_supports
from dpmarginals.local.cormode import InpHTCMS
from dpmarginals.local.direct import AM, collection_output_distribution, every_record
from dpmarginals.local.em import EM, InpEM
from dpmarginals.local.fourier import FT, InpHT, MargHT
from dpmarginals.local.wfm import WFM
from dpmarginals.methods import available, make
from dpmarginals.oracles import ORACLES
from dpmarginals.protocol.plan import Plan
from dpmarginals.protocol.reports import PlanCodec
from dpmarginals.protocol.simulate import simulate_reports

BIN3 = Domain(("a", "b", "c"), (2, 2, 2))
BIN4 = Domain(("a", "b", "c", "d"), (2, 2, 2, 2))
MIXED = Domain(("a", "b"), (3, 2))
MIXED3 = Domain(("a", "b", "c"), (3, 2, 2))
N_PLAN = 100_000  # CALM-family plans depend on n; at 1e5 they cover every attribute here


def _spine(method: Callable[..., object]) -> Callable[[float, Domain], np.ndarray]:
    def dist(eps: float, dom: Domain) -> np.ndarray:
        plan = method(epsilon=eps, k=2).plan(dom, N_PLAN)  # type: ignore[attr-defined]
        return collection_output_distribution(plan, every_record(dom))

    return dist


# name -> P[record, output] for (epsilon, domain).  All are tight (max ratio == e^eps):
# every pair of distinct records differs in some bit/attribute that some output reveals at
# the full eps.  (Per pair the ratio can be smaller: e.g. MargHT/CALM outputs of marginals
# that miss the differing attribute have ratio 1, and two cells colliding under all g
# hashes of InpHTCMS are indistinguishable -- but the max over pairs is e^eps.)
RANDOMIZERS: dict[str, Callable[[float, Domain], np.ndarray]] = {
    "ft": lambda eps, dom: FT(eps, k=2).output_distribution(dom),
    "inp_ht_attributes": lambda eps, dom: InpHT(eps, k=2, support="attributes")
    .output_distribution(dom),
    "marg_ht": lambda eps, dom: MargHT(eps, k=2).output_distribution(dom),
    "inp_htcms": lambda eps, dom: InpHTCMS(eps, k=2).output_distribution(dom, hash_seed=3),
    "inp_htcms_small": lambda eps, dom: InpHTCMS(eps, k=2, g=2, w=4)
    .output_distribution(dom, hash_seed=3),
    "em": lambda eps, dom: EM(eps, k=2).output_distribution(dom),
    "em_oue": lambda eps, dom: EM(eps, k=2, oracle="oue").output_distribution(dom),
    "inp_em": lambda eps, dom: InpEM(eps, k=2).output_distribution(dom),
    "be": lambda eps, dom: BE(eps, k=2).output_distribution(dom, N_PLAN),
    "calm": _spine(CALM),
    "am": _spine(AM),
    # WFM (McKenna et al. 2020): the optimized strategy's columns; tight since the
    # optimizer keeps every row within 1e-10 (relative) of the e^eps ratio it may use
    "wfm": lambda eps, dom: WFM(eps, k=2).output_distribution(dom),
}


def _max_ratio(dist: np.ndarray) -> float:
    """max over outputs y and records x, x' of P[y|x] / P[y|x'] (inf if some is 0 vs > 0)."""
    used = dist.max(axis=0) > 0
    lo, hi = dist.min(axis=0)[used], dist.max(axis=0)[used]
    return math.inf if (lo == 0).any() else float((hi / lo).max())


def _check_rows(dist: np.ndarray, records: int) -> None:
    assert dist.shape[0] == records
    assert (dist >= 0).all()
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", sorted(RANDOMIZERS))
@pytest.mark.parametrize("dom", [BIN3, BIN4, MIXED, MIXED3], ids=["2x3", "2x4", "3x2", "3x2x2"])
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_randomizer_is_exactly_eps_ldp_and_tight(name, dom, eps):
    # Exact (no randomness): 1e-12 on the row sums, 1e-9 relative on the ratio (1e-7 below:
    # the thresholds are 32-bit; the exact bound is tests/test_exact_samplers.py's).
    dist = RANDOMIZERS[name](eps, dom)
    _check_rows(dist, dom.cells())
    worst = _max_ratio(dist)
    assert worst <= math.exp(eps) * (1 + 1e-9)
    # tight, up to the 32-bit thresholds (WFM: its integer strategy is mixed with 2^-20 of
    # the uniform distribution, which leaves every row a few 1e-7 below e^eps)
    assert worst >= math.exp(eps) * (1 - (1e-5 if name == "wfm" else 1e-7))


@pytest.mark.parametrize("method", [EM, InpEM])
def test_em_with_a_constant_attribute_is_private_but_not_tight(method):
    # Not tight: the budget is split over all d attributes, and a single-valued attribute
    # reports nothing, so its eps/d share is unused: the worst ratio is e^{eps (d-1)/d}.
    dom = Domain(("a", "b", "c"), (3, 2, 1))
    dist = method(1.2, k=2).output_distribution(dom)
    _check_rows(dist, dom.cells())
    assert _max_ratio(dist) == pytest.approx(math.exp(1.2 * 2 / 3), rel=1e-9)


# --- the exposed distribution is the randomizer's -------------------------------------------
def _copies(dom: Domain, record: tuple[int, ...], n: int) -> Dataset:
    return Dataset(np.tile(np.asarray(record, dtype=np.int64), (n, 1)), dom)


def _chi2_pvalue(observed: np.ndarray, expected: np.ndarray, df: int) -> float:
    keep = expected > 0
    assert (observed[~keep] == 0).all()
    stat = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    return float(stats.chi2.sf(stat, df))


def test_ft_simulation_follows_its_output_distribution():
    # N users with one record through InpHT's per-user simulation (the ``ht`` format's
    # randomizer for all N at once): the support counts reports per (coefficient, sign);
    # multinomial chi-squared against the method's exposed law, p >= 1e-4.
    method = InpHT(1.0, k=2, per_user=True)
    record, n = (2, 1), 200_000
    plan = method.plan(MIXED, n)
    counts = method.simulate(_copies(MIXED, record, n), plan, rng=2024)
    row = method.output_distribution(MIXED)[MIXED.index_of(record)]
    assert _chi2_pvalue(counts.supports[0], row * n, row.size - 1) >= 1e-4


def test_marg_ht_simulation_follows_its_output_distribution():
    # As above for MargHT on binary d = 3, k = 2: users split over the 3 marginals (their
    # group sizes are given), each group's reports per (coefficient, sign) against its law.
    method = MargHT(1.0, k=2, per_user=True)
    record, n = (1, 0, 1), 90_000
    plan = method.plan(BIN3, n)
    counts = method.simulate(_copies(BIN3, record, n), plan, rng=77)
    row = method.output_distribution(BIN3)[BIN3.index_of(record)] * plan.m
    blocks = np.split(row, np.cumsum([s.size for s in counts.supports])[:-1])
    expected = np.concatenate([b * u for b, u in zip(blocks, counts.users, strict=True)])
    df = sum(s.size - 1 for s in counts.supports)
    assert _chi2_pvalue(np.concatenate(counts.supports), expected, df) >= 1e-4


def _em_output_index(method: EM, dom: Domain, reports: np.ndarray) -> np.ndarray:
    """Each user's joint output index (C order over attributes) in output_distribution: a
    GRR class is the value, a unary one the bit vector read little-endian (the oracles'
    output index)."""
    widths = [1 if o is None else o.size if o.name == "grr" else 1 << o.size
              for o in method.attribute_oracles(dom)]
    return np.ravel_multi_index(tuple(np.asarray(reports, np.int64).T), tuple(widths))


@pytest.mark.parametrize("method", [InpEM(1.0, k=2), EM(1.0, k=2, oracle="oue")],
                         ids=["inp_em_grr", "em_oue"])
def test_em_randomize_follows_its_output_distribution(method):
    # EM.randomize (EM.run's per-user step), 100k users with one record of a 3 x 2 x 2
    # domain; multinomial chi-squared over the joint outputs, p >= 1e-4 per oracle kind.
    record, n = (2, 0, 1), 100_000
    reports = method.randomize(_copies(MIXED3, record, n), rng=5)
    row = method.output_distribution(MIXED3)[MIXED3.index_of(record)]
    observed = np.bincount(_em_output_index(method, MIXED3, reports), minlength=row.size)
    assert stats.chisquare(observed, row * n).pvalue >= 1e-4


def test_be_reports_follow_its_output_distribution():
    # BE.run is CALM.run on the encoded data, whose per-user step is group_supports(...,
    # per_user=True).  With GRR groups a support vector is the histogram of the group's
    # reports; chi-squared over all groups given their sizes, sum(cells - 1) df, p >= 1e-4.
    method = BE(1.0, k=2, per_user=True)
    record, n = (1, 1, 0), N_PLAN
    plan = method.plan(MIXED3, n)
    assert plan.m > 1 and {g.oracle for g in plan.groups} == {"grr"}
    enc = BinaryEncoding(MIXED3)
    supports, users = group_supports(enc.encode(_copies(MIXED3, record, n)), plan, rng=8,
                                     per_user=True)
    row = method.output_distribution(MIXED3, n)[MIXED3.index_of(record)]
    blocks = np.split(row * plan.m, np.cumsum([g.cells for g in plan.groups])[:-1])
    expected = np.concatenate([b * u for b, u in zip(blocks, users, strict=True)])
    df = sum(g.cells - 1 for g in plan.groups)
    assert _chi2_pvalue(np.concatenate(supports), expected, df) >= 1e-4


# --- the report formats, from the client's side ---------------------------------------------
# name -> the method whose plan the client reads (k = 2).  Every record differs from every
# other in some attribute that some report reveals at the full eps: all are tight.
FORMAT_PLANS: dict[str, Callable[[float], object]] = {
    "inp_ht": lambda eps: InpHT(eps, k=2),
    "inp_ht_attributes": lambda eps: InpHT(eps, k=2, support="attributes"),
    "ft": lambda eps: FT(eps, k=2),
    "marg_ht": lambda eps: MargHT(eps, k=2),
    "inp_htcms": lambda eps: InpHTCMS(eps, k=2, hash_seed=3),
    "inp_htcms_small": lambda eps: InpHTCMS(eps, k=2, g=2, w=4, hash_seed=3),
    "em": lambda eps: EM(eps, k=2),
    "em_oue": lambda eps: EM(eps, k=2, oracle="oue"),
    "em_sue": lambda eps: EM(eps, k=2, oracle="sue"),
    "inp_em": lambda eps: InpEM(eps, k=2),
    "wfm": lambda eps: WFM(eps, k=2),
}


def _client_distribution(plan: Plan, dom: Domain) -> np.ndarray:
    """P[(group, payload) | record] of the report a device makes from ``plan`` alone: a
    uniform group (choose_group; the service's assignment ignores the record too), then its
    oracle or format as :class:`PlanCodec` builds it, on the record's input.  Columns: the
    groups in plan order, each its format's outputs (ht, cms: 2 i + b; matrix: o; em: the
    classes in C order)."""
    codec = PlanCodec(plan)
    records = every_record(dom).codes
    blocks = []
    for g in range(plan.m):
        oracle, inputs = codec.oracle(g), codec.inputs(g, records)
        blocks.append(np.stack([oracle.output_distribution(x) for x in inputs]))
    return np.concatenate(blocks, axis=1) / plan.m


@pytest.mark.parametrize("name", sorted(FORMAT_PLANS))
@pytest.mark.parametrize("dom", [BIN3, BIN4, MIXED, MIXED3], ids=["2x3", "2x4", "3x2", "3x2x2"])
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_client_report_formats_are_exactly_eps_ldp_and_tight(name, dom, eps):
    # Exact (no randomness): 1e-12 on the row sums, 1e-9 relative on the ratio (1e-7 below:
    # the thresholds are 32-bit; the exact bound is tests/test_exact_samplers.py's).
    plan = FORMAT_PLANS[name](eps).plan(dom, N_PLAN)  # type: ignore[attr-defined]
    dist = _client_distribution(plan, dom)
    _check_rows(dist, dom.cells())
    worst = _max_ratio(dist)
    assert worst <= math.exp(eps) * (1 + 1e-9)
    # tight, up to the 32-bit thresholds (WFM: its integer strategy is mixed with 2^-20 of
    # the uniform distribution, which leaves every row a few 1e-7 below e^eps)
    assert worst >= math.exp(eps) * (1 - (1e-5 if name == "wfm" else 1e-7))


@pytest.mark.parametrize("name", sorted(FORMAT_PLANS))
def test_client_report_formats_are_the_methods_randomizers(name):
    # The client's report has the law of the method's own randomizer (RANDOMIZERS above),
    # column by column.
    method = FORMAT_PLANS[name](1.0)
    plan = method.plan(MIXED3, N_PLAN)  # type: ignore[attr-defined]
    client = _client_distribution(plan, MIXED3)
    own = method.output_distribution(MIXED3)  # type: ignore[attr-defined]
    np.testing.assert_allclose(client, own, rtol=1e-12, atol=1e-15)


def _payload_index(plan: Plan, reports: list) -> np.ndarray:
    """Each report's column in :func:`_client_distribution`."""
    codec = PlanCodec(plan)
    offsets = np.concatenate([[0], np.cumsum(codec.sizes)[:-1]])
    out = []
    for r in reports:
        oracle = codec.oracle(r["group"])
        if oracle.name == "em":
            local = int(np.ravel_multi_index(tuple(r["payload"]), oracle.classes))
        elif oracle.name == "matrix":
            local = r["payload"]
        else:
            local = 2 * r["payload"][0] + r["payload"][1]
        out.append(offsets[r["group"]] + local)
    return np.asarray(out)


@pytest.mark.parametrize("name", ["inp_ht", "marg_ht", "inp_htcms_small", "em_oue", "inp_em",
                                  "wfm"])
def test_the_clients_reports_follow_their_exact_distribution(name):
    # simulate_reports (the device's randomizers) for 60k users with one record of 3 x 2 x 2,
    # groups drawn by the client; multinomial chi-squared over (group, payload), p >= 1e-4.
    plan = FORMAT_PLANS[name](1.0).plan(MIXED3, N_PLAN)  # type: ignore[attr-defined]
    record, n = (2, 0, 1), 60_000
    reports = simulate_reports(plan, np.tile(record, (n, 1)), max_epsilon=1.0, rng=404)
    row = _client_distribution(plan, MIXED3)[MIXED3.index_of(record)]
    observed = np.bincount(_payload_index(plan, reports), minlength=row.size)
    assert _chi2_pvalue(observed, row * n, int((row > 0).sum()) - 1) >= 1e-4


# --- per_user=True with rng=None: the OS CSPRNG ----------------------------------------------
NOT_LOCAL = {"aim", "mst", "priview", "residual", "uni"}  # central DP; uni: nothing (below)
LOCAL_METHODS = sorted(set(available()) - NOT_LOCAL)


def _small_data() -> Dataset:
    codes = np.random.default_rng(0).integers(0, 2, size=(300, 4))
    return Dataset(codes, BIN4)


@pytest.fixture
def secure_words(monkeypatch):
    """Count the bits SecureRandom draws; forbid the oracles' aggregate samplers."""
    drawn = [0]
    original = SecureRandom.words

    def counting(self: SecureRandom, count: int, bits: int) -> np.ndarray:
        drawn[0] += count * bits
        return original(self, count, bits)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("per_user=True must not use the aggregate sampler")

    monkeypatch.setattr(SecureRandom, "words", counting)
    for cls in ORACLES.values():
        monkeypatch.setattr(cls, "sample_support", refuse)
    return drawn


def test_every_local_method_is_checked():
    assert {"calm", "fc", "am", "ft", "em", "be", "inp_htcms", "marg_ht"} <= set(LOCAL_METHODS)


@pytest.mark.parametrize("name", LOCAL_METHODS)
def test_per_user_without_rng_randomizes_every_record_with_secure_random(name, secure_words):
    # Every user's randomization draws at least 32 bits from os.urandom (a GRR report is
    # exactly one 32-bit word); the public group assignment may still use an OS-seeded
    # numpy Generator.
    if name == "calm_pgm":
        pytest.importorskip("mbi")
    data = _small_data()
    make(name, epsilon=1, k=2, per_user=True).run(data, rng=None)
    assert secure_words[0] >= 32 * data.n


def test_uniform_reads_no_record_and_draws_nothing(secure_words):
    # uni (CALM §5.1) answers every query with the uniform table: no report, no randomness.
    syn = make("uni", epsilon=1, k=2).run(_small_data(), rng=None)
    assert secure_words[0] == 0
    np.testing.assert_allclose(syn.marginal(("a", "b")).values, 0.25)
