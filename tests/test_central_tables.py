"""Issue #18: central DP for a table (AIM and MST through OpenDP), and the k-tuple release
as a release like the others.

The noise of AIM and MST is OpenDP's, which takes no seed: the checks on released numbers
have wide, stated budgets; the privacy accounting is checked exactly.
"""

from __future__ import annotations

import io
import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest

from command_line import central_ktuples, one_error_line
from command_line import dpmarginals as cli
from dpmarginals import Dataset, Domain, load_release, load_synopsis, make, release
from dpmarginals.central.accounting import rdp_epsilon, zcdp_epsilon, zcdp_rho
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.inference.graphical_model import GraphicalModel
from populations import people as population

pytest.importorskip("opendp.extras.mbi")
pytest.importorskip("polars")
pytest.importorskip("mbi")
contingency = pytest.importorskip("dpmarginals.central.contingency")
mbi_bridge = pytest.importorskip("dpmarginals.central.mbi_bridge")

DOMAIN = {"education": ["school", "college", "phd"], "income": ["low", "mid", "high"],
          "sex": ["f", "m"], "age": {"bins": [18, 30, 45, 65, 90]}}


def people(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    return population(n, seed, smoker=False)


@pytest.fixture(scope="module")
def mst_release():
    """One private MST release (about 20 s of JAX compiling on a loaded machine)."""
    return release(people(), DOMAIN, model="central", method="mst", epsilon=2.0, delta=1e-9,
                   k=2)


# -- accounting -------------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon, delta", [(0.1, 1e-9), (1.0, 1e-9), (10.0, 1e-9),
                                            (1.0, 1 / 48842**2)])
def test_rho_from_epsilon_delta_and_back_is_exact(epsilon, delta):
    rho = contingency.contingency_rho(epsilon, delta)
    log_inv = math.log(1 / delta)
    assert rho == pytest.approx((math.sqrt(epsilon + log_inv) - math.sqrt(log_inv)) ** 2,
                                rel=1e-12)
    assert rho == zcdp_rho(epsilon, delta)
    assert zcdp_epsilon(rho, delta) == pytest.approx(epsilon, rel=1e-12)


def test_the_rdp_accountant_gives_more_rho_for_the_same_guarantee():
    pytest.importorskip("dp_accounting")
    rho = contingency.contingency_rho(1.0, 1e-9, "rdp")
    assert rho > zcdp_rho(1.0, 1e-9)
    assert rdp_epsilon(rho, 1e-9) <= 1.0 + 1e-9


@pytest.mark.parametrize("method", ["aim", "mst"])
def test_opendp_certifies_the_release_at_epsilon_delta(method):
    """OpenDP's own privacy map: at most rho zCDP, and through OpenDP's own (tighter)
    zCDP -> (epsilon, delta) conversion at most our epsilon."""
    import opendp.prelude as dp

    algo = make(method, epsilon=1.0, delta=1e-9, k=2)
    meas, spent = algo.measurement(Domain.from_dict({"a": 3, "b": 2, "c": 4}))
    assert spent <= algo.rho == zcdp_rho(1.0, 1e-9)
    d_in = [dp.polars.Bound(per_group=1)]
    approx = dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(meas), 1e-9)
    eps, delta = approx.map(d_in)
    assert delta <= 1e-9 and eps <= 1.0


# -- the release: labels, round trip, mark, standard errors -----------------------------------
def test_aim_shows_its_progress_one_step_per_model_fit(monkeypatch):
    """AIM ran six minutes on Adult with no line of progress: OpenDP's loop has no hook, but
    it calls our estimator once per round, which now steps a bar (no total: the rounds end
    when the budget does)."""
    import dpmarginals.central.contingency as contingency

    bars = []

    class Bar:
        def __init__(self, **kwargs):
            self.kwargs, self.steps = kwargs, 0
            bars.append(self)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n):
            self.steps += n

    monkeypatch.setattr(contingency, "tqdm", Bar)
    data = Dataset.from_frame(people(2000), DOMAIN)
    synopsis = make("aim", epsilon=1.0, delta=1e-9, k=2).run(data)
    (bar,) = bars
    assert bar.kwargs["desc"] == "aim: model fits" and "total" not in bar.kwargs
    # a fit after the 1-way marginals and after every multi-way round
    assert bar.steps >= synopsis.info["multiway_measured"] + 1


def test_central_release_round_trip_with_labels(mst_release, tmp_path):
    r = mst_release
    mark = r.privacy
    assert (mark.private, mark.model, mark.method, mark.epsilon, mark.delta) == (
        True, "central", "mst", 2.0, 1e-9)
    assert "OpenDP" in mark.randomness and "one record" in mark.unit
    table = r.marginal(["income", "education"])
    frame = table.to_frame()
    assert list(frame["income"].cat.categories) == ["low", "mid", "high"]
    assert set(frame["education"]) == {"school", "college", "phd"}
    assert abs(table.values.sum() - 1) < 1e-9 and (table.values >= 0).all()
    # MST measures a spanning tree of 2-way marginals: 3,000 records, rho = 0.046, so each
    # count has noise ~ 5; 10x that on a fraction is 0.02 per cell (a very wide budget)
    truth = Dataset.from_frame(people(), DOMAIN).marginal(["income", "education"]).values
    assert np.abs(table.values - truth).max() < 0.05
    r.save(tmp_path / "r.json")
    body = json.loads((tmp_path / "r.json").read_text())
    assert body["privacy"]["model"] == "central" and body["privacy"]["delta"] == 1e-9
    assert body["kind"] == "contingency" and body["info"]["n"] != 3000  # n is not published
    back = load_synopsis(tmp_path / "r.json")
    assert back.privacy == mark
    for attrs in (["income", "education"], ["age", "sex", "income"]):
        assert np.allclose(back.marginal(attrs).values, r.marginal(attrs).values, atol=1e-12)


def test_standard_errors_of_measured_marginals_only(mst_release):
    r = mst_release
    inside = next(c for c, _ in r.measurements if len(c) == 2)
    table = r.marginal(list(inside), std=True)
    assert table.std is not None and (table.std > 0).all()
    outside = next(q for q in itertools.combinations(DOMAIN, 2)
                   if not any(set(q) <= set(c) for c, _ in r.measurements))
    with pytest.raises(DPMarginalsError, match="no calibrated standard error"):
        r.marginal(list(outside), std=True)


def test_measurement_std_is_the_inverse_variance_combination():
    dom = Domain(("a", "b", "c"), (2, 3, 4))
    model = GraphicalModel(dom, [(("a",), np.zeros(2))])
    syn = contingency.ContingencySynopsis(dom, model, [(("a",), 4.0), (("a", "b"), 2.0),
                                                       (("a", "c"), 8.0)], total=100.0)
    # a from (a): var 16; from (a, b): 3 cells of var 4 each = 12; from (a, c): 4 x 64 = 256
    expected = math.sqrt(1 / (1 / 16 + 1 / 12 + 1 / 256)) / 100
    assert np.allclose(syn.measurement_std(["a"]), expected)
    assert np.allclose(syn.marginal(["b", "a"], std=True).std, 2.0 / 100)


def test_numpy_marginals_equal_mbi_s():
    """The numpy variable elimination that replaces mbi's JAX one for AIM's scoring."""
    pytest.importorskip("jax")
    import jax.numpy as jnp
    import mbi

    dom = mbi.Domain(("a", "b", "c", "d"), (2, 3, 2, 4))
    rng = np.random.default_rng(1)
    tables = {cl: mbi.Factor(dom.project(cl), jnp.asarray(rng.normal(size=dom.project(cl).shape)))
              for cl in [("a", "b"), ("b", "c"), ("c", "d")]}
    pots = mbi.CliqueVector(dom, list(tables), tables)
    marg = mbi.marginal_oracles.message_passing_stable(pots, 50.0)
    model = mbi_bridge.model_class()(potentials=pots, marginals=marg, total=50.0)
    reference = mbi.MarkovRandomField(potentials=pots, marginals=marg, total=50.0)
    for query in [("a", "d"), ("d", "b", "a"), ("c",)]:
        assert np.allclose(np.asarray(model.project(query).values),
                           np.asarray(reference.project(query).values), atol=1e-9)
    assert isinstance(model.cliques, list) and model.domain.attrs == ("a", "b", "c", "d")


@pytest.mark.slow
def test_aim_release_end_to_end_on_the_cli(tmp_path):
    csv, dom = tmp_path / "people.csv", tmp_path / "people-domain.json"
    people().to_csv(csv, index=False)
    dom.write_text(json.dumps(DOMAIN))
    out = tmp_path / "r.json"
    proc = cli("release", csv, "--domain", dom, "--model", "central", "--method", "aim",
               "--epsilon", 1, "--delta", 1e-9, "--k", 2, "--rounds", 8, "--iters", 200,
               "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "private central-DP release (aim, epsilon 1, delta 1e-09)" in proc.stdout
    proc = cli("query", out, "--attributes", "age,sex,income")
    assert proc.returncode == 0, proc.stderr
    assert "# private central-DP release (aim, epsilon 1, delta 1e-09)" in proc.stdout
    assert "[45, 65)" in proc.stdout and "high" in proc.stdout
    body = json.loads(cli("query", out, "--attributes", "income", "--format", "json").stdout)
    assert body["privacy"]["model"] == "central" and body["privacy"]["method"] == "aim"
    # --std on a measured marginal: the measurements' std and the interval ± 1.96 std
    body = json.loads(cli("query", out, "--attributes", "income", "--std", "--format",
                          "json").stdout)
    values, std = np.array(body["values"]), np.array(body["std"])
    assert (std > 0).all()
    assert (np.array(body["lower"]) <= values).all() and (values <= np.array(body["upper"])).all()
    proc = cli("synthesize", out, "--n", 50, "--out", tmp_path / "s.csv")
    assert proc.returncode == 0, proc.stderr
    assert set(pd.read_csv(tmp_path / "s.csv")["income"]) <= {"low", "mid", "high"}


# -- refusals ---------------------------------------------------------------------------------
@pytest.mark.parametrize("args, words", [
    (["--model", "central", "--method", "calm", "--epsilon", 1], ["'calm'", "local-DP"]),
    (["--model", "local", "--method", "mst", "--epsilon", 1, "--delta", 1e-9],
     ["'mst'", "central"]),
    (["--model", "central", "--method", "aim", "--epsilon", 1], ["'aim'", "delta"]),
    (["--method", "calm", "--epsilon", 1, "--delta", 1e-9], ["1e-09", "pure"]),
    (["--model", "central", "--method", "priview", "--epsilon", 1, "--delta", 1e-6],
     ["1e-06", "'priview'"]),
    (["--model", "central", "--epsilon", 1, "--delta", 0.01], ["0.01", "1/n"]),
    (["--model", "central", "--epsilon", 1, "--delta", 2], ["delta", "2"]),
    (["--model", "global", "--epsilon", 1], ["--model", "'global'"]),
])
def test_bad_model_method_delta_combinations_are_one_line(tmp_path, args, words):
    csv, dom = tmp_path / "people.csv", tmp_path / "people-domain.json"
    people(400).to_csv(csv, index=False)
    dom.write_text(json.dumps(DOMAIN))
    proc = cli("release", csv, "--domain", dom, *args, "--out", tmp_path / "r.json")
    one_error_line(proc, *words)
    assert not (tmp_path / "r.json").exists()


def test_release_api_refuses_the_same_combinations():
    with pytest.raises(DPMarginalsError, match="'calm' is a local-DP method"):
        release(people(50), DOMAIN, model="central", method="calm", epsilon=1.0)
    with pytest.raises(DPMarginalsError, match=r"'aim' is \(epsilon, delta\)-DP"):
        release(people(50), DOMAIN, model="central", epsilon=1.0)
    with pytest.raises(DPMarginalsError, match="model must be 'local' or 'central'"):
        release(people(50), DOMAIN, model="curator", epsilon=1.0)


def test_run_says_priview_is_central(tmp_path):
    csv, dom = tmp_path / "people.csv", tmp_path / "people-domain.json"
    people(2000).to_csv(csv, index=False)
    dom.write_text(json.dumps(DOMAIN))
    proc = cli("run", "--dataset", csv, "--domain", dom, "--method", "priview", "--k", 2,
               "--epsilon", 1, "--queries", 3)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("priview (central DP) on ")
    proc = cli("run", "--dataset", csv, "--domain", dom, "--method", "priview", "--k", 2,
               "--epsilon", 1, "--queries", 3, "--json")
    assert json.loads(proc.stdout)["model"] == "central"


# -- the k-tuple release ----------------------------------------------------------------------
def test_query_answers_one_k_tuple_of_a_central_release(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"color": rng.choice(["red", "blue"], 3000, p=[0.7, 0.3]),
                          "size": rng.choice(["S", "M"], 3000)})
    out = central_ktuples(tmp_path, frame)
    truth = int(((frame["color"] == "red") & (frame["size"] == "S")).sum())
    proc = cli("query", out, "--tuple", "size=S,color=red", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    body = json.loads(proc.stdout)
    # the noise of a pair's count has sd sigma_2 sqrt(Delta_2) (about 30 here): 200 is > 6 sd
    assert body["count"] is not None and abs(body["count"] - truth) < 200
    assert body["privacy"]["model"] == "central" and body["privacy"]["private"] is True
    proc = cli("query", out, "--tuple", "color=green")
    assert proc.returncode == 0, proc.stderr
    assert "not extracted" in proc.stdout and "private central-DP release" in proc.stdout
    one_error_line(cli("query", out, "--tuple", "red"), "'red'", "COLUMN=VALUE")
    one_error_line(cli("query", out), "--attributes", "--tuple")
    proc = cli("query", out, "--attributes", "color", "--format", "csv")
    assert proc.returncode == 0 and "private central-DP release" in proc.stderr
    assert set(pd.read_csv(io.StringIO(proc.stdout))["color"]) == {"red", "blue"}
    loaded = load_release(out)
    assert loaded.count([("color", "red"), ("size", "S")]) == body["count"]
    with pytest.raises(DPMarginalsError, match=r"k-tuple release.*load_release"):
        load_synopsis(out)


def test_a_long_aim_run_warns_about_a_low_map_count(tmp_path):
    """XLA maps memory per compiled program; past vm.max_map_count a long AIM run aborts in
    LLVM, so it is warned about up front (and not otherwise)."""
    import warnings

    from dpmarginals.central.contingency import AIM
    from dpmarginals.central.map_count import check_map_count

    limit = tmp_path / "max_map_count"
    limit.write_text("65530\n")
    with pytest.warns(RuntimeWarning, match=r"368 rounds .*vm.max_map_count \(65530\)"):
        check_map_count(368, limit)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_map_count(100, limit)            # a short run
        limit.write_text("1048576\n")
        check_map_count(368, limit)            # a raised limit
        check_map_count(368, tmp_path / "no")  # not Linux
    dom = Domain(tuple(f"a{i}" for i in range(23)), (2,) * 23)
    assert AIM(epsilon=1.0, delta=1e-9, k=3).plan(dom, 1000).params["rounds"] == 368
