"""Issue #15: a release boundary a privacy engineer can trust.

Releases vs. simulations, declared domains with labels, the privacy mark, measured vs.
reconstructed answers, PriView without the exact n.  CLI checks run the real command.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest

from command_line import central_ktuples, one_error_line
from command_line import dpmarginals as cli
from dpmarginals import CALM, Dataset, Domain, load_synopsis, make, release
from dpmarginals.core.errors import DPMarginalsError, PrivacyLeakWarning
from dpmarginals.core.provenance import NotPrivateWarning
from dpmarginals.core.randomness import SecureRandom
from populations import people as population

DOMAIN = {"education": ["school", "college", "phd"], "income": ["low", "mid", "high"],
          "sex": ["f", "m"], "age": {"bins": [18, 30, 45, 65, 90]}, "smoker": ["no", "yes"]}


def people(n: int = 4000, seed: int = 0) -> pd.DataFrame:
    return population(n, seed)


@pytest.fixture
def files(tmp_path):
    csv, dom = tmp_path / "people.csv", tmp_path / "people-domain.json"
    people().to_csv(csv, index=False)
    dom.write_text(json.dumps(DOMAIN))
    return csv, dom


# -- 1. release vs. simulation ----------------------------------------------------------------
def test_release_is_private_per_user_and_os_random(monkeypatch):
    draws = []
    real = SecureRandom.words
    monkeypatch.setattr(SecureRandom, "words", lambda self, count, bits: draws.append(
        count * bits) or real(self, count, bits))
    r = release(people(), DOMAIN, method="calm", epsilon=1.0, k=2)
    assert sum(draws) >= 32 * 2000  # >= 32 OS random bits per record: the per-user path
    mark = r.privacy
    assert (mark.private, mark.model, mark.method, mark.epsilon) == (True, "local", "calm", 1.0)
    assert mark.plan_hash == r.info["plan_hash"] and "os.urandom" in mark.randomness
    body = r.to_dict()
    assert body["privacy"]["private"] is True and body["privacy"]["package_version"]
    assert body["domain"]["income"] == ["low", "mid", "high"]
    assert "stage_seconds" not in body["info"]  # timings are not protected


def test_release_refuses_seeds_and_the_aggregate_path():
    for bad in ({"rng": 0}, {"seed": 1}, {"per_user": False}):
        with pytest.raises(DPMarginalsError, match="per-user path"):
            release(people(200), DOMAIN, epsilon=1.0, **bad)


def test_two_cli_releases_differ_and_query_shows_the_csvs_values(files, tmp_path):
    csv, dom = files
    outs = []
    for name in ("r1.json", "r2.json"):
        proc = cli("release", csv, "--domain", dom, "--method", "calm", "--epsilon", 1,
                   "--k", 3, "--out", tmp_path / name)
        assert proc.returncode == 0, proc.stderr
        assert "private local-DP release" in proc.stdout
        outs.append((tmp_path / name).read_bytes())
    assert outs[0] != outs[1]
    proc = cli("query", tmp_path / "r1.json", "--attributes", "income,education",
               "--format", "csv")
    assert proc.returncode == 0 and "warning" not in proc.stderr
    frame = pd.read_csv(__import__("io").StringIO(proc.stdout))
    assert set(frame["income"]) == {"low", "mid", "high"}
    assert set(frame["education"]) == {"school", "college", "phd"}
    assert abs(frame["fraction"].sum() - 1) < 1e-9


def test_run_out_needs_simulation_and_the_file_says_so(files, tmp_path):
    csv, dom = files
    out = tmp_path / "sim.json"
    proc = cli("run", "--dataset", csv, "--domain", dom, "--k", 2, "--epsilon", 1,
               "--queries", 3, "--out", out)
    one_error_line(proc, "--simulation", "release")
    assert not out.exists()
    proc = cli("run", "--dataset", csv, "--domain", dom, "--k", 2, "--epsilon", 1,
               "--queries", 3, "--out", out, "--simulation")
    assert proc.returncode == 0, proc.stderr
    mark = json.loads(out.read_text())["privacy"]
    assert mark["private"] is False and "seed 0" in mark["reason"]
    proc = cli("query", out, "--attributes", "sex")
    assert proc.returncode == 0
    warning = [ln for ln in proc.stderr.splitlines() if "warning" in ln]
    assert len(warning) == 1 and "NOT a private release" in warning[0]


def test_method_run_synopses_are_saved_as_not_private(tmp_path):
    data = Dataset.from_frame(people(500), DOMAIN)
    syn = CALM(epsilon=1.0, k=2).run(data, rng=0)
    syn.save(tmp_path / "s.json")
    with pytest.warns(NotPrivateWarning, match="not by dpmarginals.release"):
        back = load_synopsis(tmp_path / "s.json")
    assert back.privacy.private is False


def test_release_mark_survives_save_and_load(tmp_path):
    r = release(people(500), DOMAIN, epsilon=1.0, k=2)
    r.save(tmp_path / "r.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotPrivateWarning)
        back = load_synopsis(tmp_path / "r.json")
    assert back.privacy == r.privacy
    assert back.domain == r.domain and back.domain.labels_of("sex") == ("f", "m")


# -- 2. declared public domains with labels ------------------------------------------------
@pytest.mark.parametrize("command", ["release", "central"])
def test_an_out_that_cannot_be_written_is_refused_before_the_data_is_read(
        files, tmp_path, command):
    """A typo in --out (a missing folder, a folder) is one line before the data is even
    read (here a data file that does not exist is never reached): a release that failed
    to save would have spent its budget for nothing, and a second try composes with it."""
    _, dom = files
    gone = tmp_path / "no-such-data.csv"
    args = {"release": ("release", gone, "--domain", dom, "--epsilon", 1),
            "central": ("central", "--data", gone, "--max-k", 2, "--epsilon", 1,
                        "--delta", 1e-6)}[command]
    for out, why in ((tmp_path / "missing" / "r.json", "no such directory"),
                     (tmp_path, "is a directory")):
        proc = cli(*args, "--out", out)
        one_error_line(proc, "--out", why)


def test_release_without_a_domain_refuses_naming_the_flag(files, tmp_path):
    csv, _ = files
    proc = cli("release", csv, "--epsilon", 1, "--out", tmp_path / "r.json")
    one_error_line(proc, "--domain")
    with pytest.raises(DPMarginalsError, match="domain_from_data"):
        release(people(100), None, epsilon=1.0)


def test_domain_from_data_warns(files, tmp_path):
    csv, _ = files
    proc = cli("release", csv, "--domain-from-data", "--epsilon", 1, "--k", 2,
               "--out", tmp_path / "r.json")
    assert proc.returncode == 0
    assert "warning: the domain" in proc.stderr and "private data" in proc.stderr
    with pytest.warns(PrivacyLeakWarning):
        release(people(300), domain_from_data=True, epsilon=1.0, k=2)


def test_out_of_domain_value_names_column_row_and_value(files, tmp_path):
    frame = people(50)
    frame.loc[7, "education"] = "kindergarten"
    with pytest.raises(DPMarginalsError, match=r"column 'education' row 7: value 'kindergarten'"):
        release(frame, DOMAIN, epsilon=1.0)
    frame = people(50)
    frame.loc[3, "age"] = 95
    with pytest.raises(DPMarginalsError, match=r"column 'age' row 3: value 95"):
        Dataset.from_frame(frame, DOMAIN)
    csv = tmp_path / "bad.csv"
    frame.to_csv(csv, index=False)
    proc = cli("release", csv, "--domain", files[1], "--epsilon", 1, "--out", tmp_path / "x.json")
    one_error_line(proc, "'age'", "95")


def test_declared_other_value_takes_the_rest():
    frame = people(60)
    frame.loc[5, "education"] = "kindergarten"
    frame.loc[6, "age"] = 120
    dom = {**DOMAIN, "education": {"labels": ["school", "college"], "other": True},
           "age": {"bins": [18, 30, 45, 65, 90], "other": "unknown age"}}
    data = Dataset.from_frame(frame, dom)
    assert data.domain.labels_of("education") == ("school", "college", "other")
    assert data.to_frame(labels=True).loc[5, "education"] == "other"
    assert data.to_frame(labels=True).loc[6, "age"] == "unknown age"
    assert Domain.from_dict(data.domain.to_dict()) == data.domain  # round trip


def test_domain_naming_some_columns_does_not_drop_the_rest_silently():
    two = {"education": DOMAIN["education"], "sex": DOMAIN["sex"]}
    with pytest.raises(DPMarginalsError, match=r"columns \['income', 'age', 'smoker'\]"):
        Dataset.from_frame(people(50), two)
    assert Dataset.from_frame(people(50), two, extra_columns="ignore").d == 2


def test_labels_flow_through_to_frame_and_merge_with_the_users_data():
    frame = people(3000)
    frame["sex"] = pd.Categorical(frame["sex"], categories=["f", "m"])
    r = release(frame, DOMAIN, epsilon=2.0, k=2)
    table = r.marginal(["sex", "income"]).to_frame()
    assert list(table["sex"].cat.categories) == ["f", "m"]
    merged = frame.merge(table, on=["sex", "income"], how="left")
    assert merged["fraction"].notna().all()
    as_dict = r.marginal(["income"]).to_dict()
    assert as_dict["labels"] == {"income": ["low", "mid", "high"]}


def test_synthesize_writes_the_users_values(tmp_path):
    r = release(people(2000), DOMAIN, epsilon=2.0, k=2)
    r.save(tmp_path / "r.json")
    proc = cli("synthesize", tmp_path / "r.json", "--n", 50, "--out", tmp_path / "fake.csv")
    assert proc.returncode == 0, proc.stderr
    fake = pd.read_csv(tmp_path / "fake.csv")
    assert set(fake["education"]) <= {"school", "college", "phd"}
    assert set(fake["age"]) <= {"[18, 30)", "[30, 45)", "[45, 65)", "[65, 90]"}


def test_plan_hash_unchanged_for_unlabelled_domains():
    from dpmarginals.protocol.plan import GroupSpec, Plan

    plan = Plan("calm", 1.0, Domain(("a", "b"), (2, 3)), (GroupSpec(("a", "b"), "grr", 1.0, 6),))
    labelled = Plan("calm", 1.0, Domain.from_dict({"a": ["x", "y"], "b": 3}), plan.groups)
    assert labelled.hash != plan.hash  # the labels are part of the public plan
    assert Plan.from_dict(labelled.to_dict()).domain.labels_of("a") == ("x", "y")


# -- 4. PriView publishes no exact n --------------------------------------------------------
def test_priview_release_does_not_contain_the_exact_n():
    n = 5003
    data = Dataset.from_frame(people(n, seed=3), DOMAIN)
    syn = make("priview", epsilon=0.5, k=2, sampler="simulation").run(data, rng=4)
    text = json.dumps(syn.to_dict())
    assert f"{n}," not in text and f"{n}}}" not in text and f"{n}]" not in text
    # the published n is the mean of the noisy view totals: close to n, not equal
    assert syn.info["n"] != n and abs(syn.info["n"] - n) < 0.05 * n
    assert "n is not published" in syn.info["neighbouring"]


def test_priview_release_is_central_and_uses_opendp():
    r = release(people(800), DOMAIN, method="priview", epsilon=1.0, k=2)
    assert r.privacy.model == "central" and "OpenDP" in r.privacy.randomness
    assert r.info["noise_sampler"] == "opendp"


def test_residual_release_publishes_non_negative_tables():
    """release() made every method with a postprocess publish Norm-Sub'ed tables by setting
    postprocess="norm_sub", which ResidualPlanner does not know: it then skipped its own
    non-negative step and published negative cells (-2.5 on 10 rows at eps 0.5, -16 at
    0.05).  Its
    default ("nonneg") is kept; "none" is the unbiased answer."""
    r = release(people(10), DOMAIN, method="residual", model="central", epsilon=0.05,
                delta=1e-9, k=2)
    assert r.info["postprocess"] == "nonneg"
    attrs = list(DOMAIN)
    for i, a in enumerate(attrs):
        for b in attrs[i + 1:]:
            table = r.marginal([a, b]).values
            assert table.min() >= -1e-12 and abs(table.sum() - 1) < 1e-9
    raw = release(people(10), DOMAIN, method="residual", model="central", epsilon=0.5,
                  delta=1e-9, k=2, postprocess="none")
    assert raw.info["postprocess"] == "none"


@pytest.mark.parametrize("method", ["residual", "mst", "aim"])
def test_central_releases_refuse_a_marginal_too_wide_before_measuring(method):
    """A 10^6-valued attribute: ResidualPlanner tried to allocate 7.28 TiB inside OpenDP,
    MST ran minutes; now one line naming the widest marginal, before any measurement."""
    frame = pd.DataFrame({"a": range(50), "b": [0, 1] * 25, "c": [0, 1, 2, 0, 1] * 10})
    with pytest.raises(DPMarginalsError, match=r"the marginal over \['a', 'c'\] has "
                                               r"3,000,000 cells; a release handles at most"):
        release(frame, {"a": 10**6, "b": 2, "c": 3}, method=method, model="central",
                epsilon=1.0, delta=1e-9, k=2)


def test_the_width_check_reads_residuals_own_workload():
    """ResidualPlanner measures its workload's marginals, not every k-way one: a workload
    without the wide attribute releases; one with it is refused (the first cut of the
    check took the k widest attributes and refused both)."""
    frame = pd.DataFrame({"a": range(50), "b": [0, 1] * 25, "c": [0, 1, 2, 0, 1] * 10})
    domain = {"a": 10**6, "b": 2, "c": 3}
    r = release(frame, domain, method="residual", model="central", epsilon=1.0, delta=1e-9,
                k=2, workload=[("b", "c")])
    assert r.marginal(["b", "c"]).values.shape == (2, 3)
    with pytest.raises(DPMarginalsError, match=r"the marginal over \['a', 'c'\] has 3,000,000"):
        release(frame, domain, method="residual", model="central", epsilon=1.0, delta=1e-9,
                k=2, workload=[("a", "c")])


@pytest.mark.parametrize("method", ["residual", "priview", "mst", "calm"])
def test_an_epsilon_below_the_floor_is_one_line(method):
    """epsilon = 1e-300 divided by zero (residual, priview) or overflowed OpenDP (mst)."""
    central = method != "calm"
    with pytest.raises(DPMarginalsError, match=r"epsilon = 1e-300 is below 1e-12"):
        release(people(20), DOMAIN, method=method, model="central" if central else "local",
                epsilon=1e-300, delta=1e-9 if method in ("residual", "mst") else None, k=2)


def test_residual_takes_a_single_valued_attribute():
    """A size-1 attribute has no residual coefficient (it divided by zero); its marginals
    are the others' with one value."""
    frame = pd.DataFrame({"one": [0] * 600, "age": [0, 1, 2] * 200, "s": [0] * 300 + [1] * 300})
    r = release(frame, {"one": 1, "age": 3, "s": 2}, method="residual", model="central",
                epsilon=5.0, delta=1e-9, k=2)
    table = r.marginal(["one", "age"]).values
    assert table.shape == (1, 3) and abs(table.sum() - 1) < 1e-9
    assert np.abs(table - 1 / 3).max() < 0.05  # 600 rows at eps 5: sd of a cell ~ 0.005


def test_priview_says_it_has_no_standard_errors():
    """It said "re-run it with this version of dpmarginals" about a file this version made."""
    r = release(people(400), DOMAIN, method="priview", model="central", epsilon=1.0, k=2)
    with pytest.raises(DPMarginalsError, match="priview releases carry no standard errors"):
        r.marginal(list(DOMAIN)[:2], std=True)


def test_cli_release_over_an_earlier_release_says_budgets_add_up(tmp_path):
    """A release written over a private release warns (one line) that releases of the same
    people compose; the file is replaced as before (scripts keep working)."""
    people(300).to_csv(tmp_path / "p.csv", index=False)
    (tmp_path / "d.json").write_text(json.dumps(DOMAIN))
    out = tmp_path / "r.json"
    command = ["release", tmp_path / "p.csv", "--domain", tmp_path / "d.json", "--model",
               "central", "--method", "residual", "--epsilon", "1", "--delta", "1e-9", "--k",
               "2", "--out", out]
    first = cli(*command)
    assert first.returncode == 0 and "now replaced" not in first.stderr, first.stderr
    again = cli(*command)
    assert again.returncode == 0
    assert (f"{out} held a private central-DP release (residual, epsilon 1, delta 1e-09), now "
            "replaced: releases of the same people compose") in again.stderr


# -- 5. measured or reconstructed -------------------------------------------------------------
def test_answers_say_measured_or_reconstructed(tmp_path):
    data = Dataset.from_frame(people(5000), DOMAIN)
    syn = CALM(epsilon=1.0, k=2, l=2, m=3).run(data, rng=1)
    views = [set(a) for a, _ in syn.views]
    inside = syn.marginal(list(sorted(views[0])))
    assert inside.reconstructed is False and inside.measured == (inside.attributes,)
    pairs = [(a, b) for a in DOMAIN for b in DOMAIN if a < b and not any(
        {a, b} <= v for v in views)]
    outside = syn.marginal(list(pairs[0]))
    assert outside.reconstructed is True
    assert all(len(m) == 1 for m in outside.measured)
    assert "reconstructed" in outside.describe_basis()
    syn.save(tmp_path / "s.json")
    with pytest.warns(NotPrivateWarning):
        proc_json = cli("query", tmp_path / "s.json", "--attributes", ",".join(pairs[0]),
                        "--format", "json")
        load_synopsis(tmp_path / "s.json")
    body = json.loads(proc_json.stdout)
    assert body["reconstructed"] is True and body["privacy"]["private"] is False
    proc = cli("query", tmp_path / "s.json", "--attributes", ",".join(pairs[0]), "--std",
               "--replicates", 5)
    assert proc.returncode == 0, proc.stderr
    assert "model-based" in proc.stdout.splitlines()[0]


def test_uniform_measures_nothing():
    data = Dataset.from_frame(people(100), DOMAIN)
    table = make("uni", epsilon=1.0, k=2).run(data).marginal(["sex"])
    assert table.measured == () and table.reconstructed is True


# -- central k-tuple releases open in query and synthesize -----------------------------------
def test_query_and_synthesize_open_central_releases(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"color": rng.choice(["red", "blue"], 3000),
                          "size": rng.choice(["S", "M"], 3000)})
    out = central_ktuples(tmp_path, frame)
    body = json.loads(out.read_text())
    assert body["format"] == "dpmarginals.ktuples" and body["privacy"]["private"] is True
    assert body["privacy"]["model"] == "central" and body["privacy"]["delta"] == 1e-6
    proc = cli("query", out, "--attributes", "color,size", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    tuples = pd.read_csv(__import__("io").StringIO(proc.stdout))
    assert list(tuples.columns) == ["color", "size", "count"] and len(tuples) == 4
    assert abs(tuples["count"].sum() - 3000) < 300
    proc = cli("synthesize", out, "--n", 10, "--out", tmp_path / "x.csv")
    one_error_line(proc, "k-tuple release", "not a model")


# -- the service answers with the plan's labels and marks its synopsis private ---------------
def test_service_answers_show_the_users_values(tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from dpmarginals.aggregation import synopsis_from_reports
    from dpmarginals.protocol.simulate import simulate_reports
    from dpmarginals.service.app import create_app

    data = Dataset.from_frame(people(3000), DOMAIN)
    plan = CALM(epsilon=1.0, k=2).plan(data.domain, data.n)
    token = {"Authorization": "Bearer t0ken-for-tests-0123456789"}
    app = create_app(tmp_path / "s.db", admin_token=token["Authorization"].split()[1])
    with TestClient(app) as api:
        r = api.post("/campaigns", json={"id": "p", "plan": plan.to_dict()}, headers=token)
        assert r.status_code == 201, r.text
        given = api.get("/campaigns/p/assignment", params={"count": data.n}).json()
        reports = simulate_reports(plan, data.codes, max_epsilon=1.0, rng=0,
                                   groups=np.asarray(given["groups"]))
        assert synopsis_from_reports(plan, reports).privacy.private is True
        ticketed = [{**rep, "ticket": t} for rep, t in zip(reports, given["tickets"],
                                                           strict=True)]
        r = api.post("/campaigns/p/reports/batch", json={"reports": ticketed})
        assert r.status_code < 300, r.text
        body = api.get("/campaigns/p/marginals", params={"attributes": "income,sex"},
                       headers=token).json()
        assert body["labels"] == {"income": ["low", "mid", "high"], "sex": ["f", "m"]}
        csv = api.get("/campaigns/p/marginals", headers=token,
                      params={"attributes": "income", "format": "csv"}).text
        assert csv.splitlines()[1].startswith("low,")


def test_the_client_takes_the_users_own_values():
    from dpmarginals.protocol.device import Device, ValueSubstituted
    from dpmarginals.protocol.plan import GroupSpec, Plan

    dom = Domain.from_dict({"sex": ["f", "m"], "age": {"bins": [18, 30, 65, 90]},
                            "country": {"labels": ["US", "DE"], "other": True}})
    plan = Plan("calm", 20.0, dom, (GroupSpec(("sex", "age", "country"), "grr", 20.0, 18),))
    phone = Device(None, max_epsilon=20, max_total_epsilon=100)
    # at epsilon 20 GRR reports the truth except with probability < 1e-7 (OS randomness)
    report = phone.report(plan, {"sex": "m", "age": 37, "country": "FR"}, origin="o",
                          campaign="a")
    assert report["payload"] == dom.index_of((1, 1, 2))  # GRR sends the cell itself
    # a value the domain lacks is reported at random (a refusal would tell the server),
    # and the app is told, locally
    with pytest.warns(ValueSubstituted, match=r"'sex': value 'x' is not in the declared"):
        phone.report(plan, {"sex": "x", "age": 37, "country": "US"}, origin="o", campaign="b")
    with pytest.warns(ValueSubstituted, match=r"'age': value 12 is not in"):
        phone.report(plan, {"sex": "f", "age": 12, "country": "US"}, origin="o", campaign="c")


# -- what an attacker's and a careless user's trial found ----------------------------------
def test_a_huge_declared_attribute_is_refused_before_any_work(tmp_path):
    frame = pd.DataFrame({"visits": [0, 1, 2] * 50, "sex": ["f", "m", "f"] * 50})
    dom = {"visits": 10_000_000, "sex": ["f", "m"]}
    with pytest.raises(DPMarginalsError, match=r"'visits' has 10,000,000 values"):
        release(frame, dom, epsilon=1.0, k=2)


def test_a_domain_read_off_the_data_is_marked_not_private():
    with pytest.warns(PrivacyLeakWarning):
        r = release(people(300), domain_from_data=True, epsilon=1.0, k=2)
    assert r.privacy.private is False and "read off the private data" in r.privacy.reason
    with pytest.warns(PrivacyLeakWarning):
        data = Dataset.from_frame(people(300))
    assert release(data, epsilon=1.0, k=2).privacy.private is False
    assert release(Dataset.from_frame(people(300), DOMAIN), epsilon=1.0, k=2).privacy.private


def test_only_a_json_true_is_private(tmp_path):
    r = release(people(300), DOMAIN, epsilon=1.0, k=2)
    body = r.to_dict()
    body["privacy"]["private"] = "false"
    (tmp_path / "s.json").write_text(json.dumps(body))
    with pytest.warns(NotPrivateWarning, match="private = 'false'"):
        assert load_synopsis(tmp_path / "s.json").privacy.private is False


def test_release_does_not_overwrite_its_inputs(files):
    csv, dom = files
    before = csv.read_bytes()
    one_error_line(cli("release", csv, "--domain", dom, "--epsilon", 1, "--out", csv),
                   "one of the inputs")
    one_error_line(cli("release", csv, "--domain", dom, "--epsilon", 1, "--out", dom),
                   "one of the inputs")
    assert csv.read_bytes() == before


def test_more_domain_and_data_mistakes_are_one_line(tmp_path):
    csv = tmp_path / "h.csv"
    csv.write_text("sex,smoker\n")
    dom = tmp_path / "d.json"
    dom.write_text('{"sex": ["f", "m"], "smoker": ["no", "yes"]}')
    one_error_line(cli("release", csv, "--domain", dom, "--epsilon", 1,
                       "--out", tmp_path / "r.json"), "no rows")
    for text, words in (('{"sex": NaN}', "'sex'"), ('{"sex": 2, "sex": 3}', "more than once"),
                        ('{"sex": {"labels": ["f"], "othre": true}}', "othre"),
                        ('{"sex": {"labels": ["f", "f"]}}', "'sex': value labels repeat")):
        dom.write_text(text)
        with pytest.raises(DPMarginalsError, match=words):
            Domain.load(dom)


def test_uniform_is_a_release_too():
    assert release(people(100), DOMAIN, method="uni", epsilon=1.0).privacy.private


def test_a_plan_is_taken_as_sent_or_not_at_all():
    from dpmarginals.protocol.plan import Plan

    plan = CALM(epsilon=1.0, k=2).plan(Domain.from_dict(DOMAIN), 1000).to_dict()
    for field, bad in (("epsilon", "1"), ("epsilon", True), ("version", 1.5),
                       ("format", "junk")):
        with pytest.raises(DPMarginalsError, match=repr(field)[1:-1]):
            Plan.from_dict({**plan, field: bad})
    groups = [{**plan["groups"][0], "cells": float(plan["groups"][0]["cells"])}]
    with pytest.raises(DPMarginalsError, match="'cells' must be a JSON integer"):
        Plan.from_dict({**plan, "groups": groups})


def test_a_malformed_assignment_is_a_clear_error(monkeypatch):
    from dpmarginals.protocol.http import ServiceClient, ServiceError

    client = ServiceClient("http://127.0.0.1:9", "c")
    for body in ([1], {}, {"group": "1"}, {"group": True}):
        monkeypatch.setattr(client, "request", lambda *a, body=body, **k: (200, body))
        with pytest.raises(ServiceError, match="assignment is not an integer group"):
            client.assignment()
    monkeypatch.setattr(client, "request", lambda *a, **k: (200, {"groups": [0]}))
    with pytest.raises(ServiceError, match="not 2 groups"):
        client.assignment(2)


def test_a_closed_pipe_is_no_traceback(files, tmp_path):
    csv, dom = files
    out = tmp_path / "r.json"
    assert cli("release", csv, "--domain", dom, "--epsilon", 1, "--k", 3, "--out", out
               ).returncode == 0
    # the reader goes away before the command writes (its imports alone take far longer)
    proc = subprocess.Popen([sys.executable, "-m", "dpmarginals.cli", "query", str(out),
                             "--attributes", "education,income", "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "Traceback" not in err, err


def test_a_plan_that_leaves_attributes_out_says_so():
    """CALM's Algorithm 1 gives m = theta n groups: at 2,000 users 2 groups of 2 of the 5
    attributes, so one is never collected and its answers are uniform guesses; the release
    (and `plan`, `campaign create`) warns, naming it.  Enough users: no warning."""
    with pytest.warns(UserWarning, match=r"plan's 2 groups leave out \['[a-z]+'\]: nothing is "
                                          "collected about them"):
        release(people(2000), DOMAIN, method="calm", epsilon=1.0, k=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        release(people(4000), DOMAIN, method="calm", epsilon=1.0, k=2)


def test_small_input_mistakes_are_one_line_errors(tmp_path):
    """A domain JSON with a BOM is read (CSV files with one are); a ';'-separated file is
    told so; a list as the domain and a dict given to read_records are named, not
    TypeError / AttributeError (a new user's trial)."""
    from dpmarginals.core.records import read_records

    (tmp_path / "d.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(DOMAIN).encode())
    assert Domain.load(tmp_path / "d.json").attributes == tuple(DOMAIN)
    frame = people(50)
    frame.to_csv(tmp_path / "semi.csv", sep=";", index=False)
    with pytest.raises(DPMarginalsError, match="is the file separated by ';'"):
        release(tmp_path / "semi.csv", DOMAIN, epsilon=1.0, k=2)
    with pytest.raises(DPMarginalsError, match="domain must be a Domain, a dict"):
        release(frame, [["sex", 2]], epsilon=1.0, k=2)
    frame.to_csv(tmp_path / "p.csv", index=False)
    assert read_records(tmp_path / "p.csv", DOMAIN).codes.shape == (50, len(DOMAIN))
