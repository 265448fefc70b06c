"""Issue #16: the spine as types.  Real client reports -> the service -> ``Counts`` (numpy,
DuckDB, Spark) -> the plan's method's own ``release(plan, counts)``: one and the same
synopsis on every path, for every local method.

Spark tests skip without pyspark or Java, except in CI (``CI=true``), as in
``tests/test_engines.py``.  Nothing here is statistical: the paths must agree exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from itertools import combinations

import numpy as np
import pytest

from dpmarginals.core.dataset import Dataset
from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.local.binary_encoding import BinaryEncoding
from dpmarginals.local.collect import estimate_views, group_supports
from dpmarginals.methods import available, for_plan, make
from dpmarginals.oracles import ORACLES
from dpmarginals.protocol.counts import Counts
from dpmarginals.protocol.reports import PlanCodec, ReportError, support_counts
from dpmarginals.protocol.simulate import simulate_reports

DOMAIN = Domain(("a", "b", "c", "d"), (2, 3, 2, 2))
N = 4000
EPSILON = 1.0
# Every local method: its users report through a frequency oracle (calm ... marg_ps) or a
# report format of dpmarginals.protocol.formats (em, inp_em: "em"; ft, inp_ht, marg_ht:
# "ht"; inp_htcms: "cms"; wfm: "matrix"), and the service accepts its plan.
SPINE_METHODS = ["calm", "fc", "am", "be", "inp_rr", "inp_ps", "inp_olh", "marg_rr",
                 "marg_ps", "em", "inp_em", "ft", "inp_ht", "marg_ht", "inp_htcms", "wfm"]
FORMAT_METHODS = ["em", "inp_em", "ft", "inp_ht", "marg_ht", "inp_htcms", "wfm"]
# Exempt: calm_pgm's plan is CALM's (method "calm"), so its reports are CALM's and are
# released as "calm" (covered above); uni, the Uniform baseline (CALM §5.1), reads no
# record and has no reports (its plan has no groups, refused below); priview, aim, mst
# and residual are central DP.  adaptive collects in phases, each planned from the earlier phases'
# counts: its phase 1 is an ordinary plan, and tests/test_adaptive.py runs every phase
# through the service.  auto plans and releases with the method it picks (calm, calm_pgm or
# adaptive, each covered here), never under its own name.
EXEMPT = {"calm_pgm", "uni", "priview", "aim", "mst", "residual", "adaptive", "auto"}


def test_every_method_is_on_the_spine_or_exempt_with_a_reason():
    assert set(SPINE_METHODS) | EXEMPT == set(available())
    assert not set(SPINE_METHODS) & EXEMPT


def _data(seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, N)
    b = (a + rng.integers(0, 2, N)) % 3
    c = rng.integers(0, 2, N)
    d = (c ^ (rng.random(N) < 0.2)).astype(np.int64)
    return Dataset(np.column_stack([a, b, c, d]), DOMAIN)


def _reports(name: str, seed: int = 1):
    method = make(name, epsilon=EPSILON, k=2)
    plan = method.plan(DOMAIN, N)
    data = _data()
    if name == "be":
        data = BinaryEncoding(DOMAIN).encode(data)
    groups = np.arange(N, dtype=np.int64) % plan.m  # every group reports
    reports = simulate_reports(plan, data.codes, max_epsilon=EPSILON, groups=groups, rng=seed)
    return method, plan, reports


def _queries():
    return [q for r in (1, 2) for q in combinations(DOMAIN.attributes, r)]


def _assert_same_synopsis(got, want, what: str) -> None:
    assert type(got) is type(want), what
    for attrs in _queries():
        np.testing.assert_array_equal(got.marginal(attrs).values, want.marginal(attrs).values,
                                      err_msg=f"{what}: marginal over {attrs}")
    for field in ("views", "table"):
        if hasattr(want, field):
            a, b = getattr(got, field), getattr(want, field)
            if isinstance(b, np.ndarray):
                np.testing.assert_array_equal(a, b, err_msg=f"{what}: {field}")
            else:
                assert len(a) == len(b), what
                for va, vb in zip(a, b, strict=True):
                    np.testing.assert_array_equal(getattr(va, "table", va[-1]),
                                                  getattr(vb, "table", vb[-1]), err_msg=what)


# -- Counts ----------------------------------------------------------------------------------
def test_counts_merge_serialize_and_compare():
    a = Counts([np.array([1, 2]), np.array([0, 3, 1])], [3, 4])
    b = Counts([np.array([4, 0]), np.array([1, 1, 1])], [4, 3])
    merged = a.merge(b)
    assert merged == Counts([np.array([5, 2]), np.array([1, 4, 2])], [7, 7])
    assert merged.n == 14 and merged.m == 2
    back = Counts.from_dict(json.loads(json.dumps(merged.to_dict())))
    assert back == merged and back != a
    supports, users = merged
    assert users.tolist() == [7, 7] and supports[1].dtype == np.int64
    with pytest.raises(DPMarginalsError, match="different plans"):
        a.merge(Counts([np.array([1])], [1]))
    with pytest.raises(DPMarginalsError, match="users"):
        Counts([np.array([1])], [1, 2])
    with pytest.raises(DPMarginalsError):
        Counts.from_dict({"supports": [[1]], "users": [1], "extra": 1})


@pytest.mark.parametrize("per_user", [False, True])
def test_simulation_collects_counts_and_run_is_plan_collect_release(per_user):
    data = _data()
    for name in SPINE_METHODS:
        extra = {"hash_seed": 7} if name == "inp_htcms" else {}
        if name in ("em", "inp_em") and not per_user:
            continue  # EM randomizes every record: per_user=False is refused
        method = make(name, epsilon=EPSILON, k=2, per_user=per_user, **extra)
        plan = method.plan(DOMAIN, N)
        if name in FORMAT_METHODS:  # the method's own seeded simulation
            counts = method.simulate(data, plan, rng=3)
        else:
            sim = BinaryEncoding(DOMAIN).encode(data) if name == "be" else data
            counts = group_supports(sim, plan, rng=3, per_user=per_user)
        assert isinstance(counts, Counts) and counts.n == N
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # EM's failure warnings
            _assert_same_synopsis(method.run(data, rng=3), method.release(plan, counts), name)


@pytest.mark.parametrize("name", FORMAT_METHODS)
def test_the_generic_simulation_makes_the_clients_reports_for_report_formats(name):
    # group_supports randomizes every user as the client does (ht: her coefficient sampled
    # uniformly, not the method's partition); its Counts have the plan's sizes and release.
    method = make(name, epsilon=EPSILON, k=2)
    plan = method.plan(DOMAIN, N)
    counts = group_supports(_data(), plan, rng=5)
    assert counts.n == N and [s.size for s in counts.supports] == PlanCodec(plan).sizes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert method.release(plan, counts).marginal(("a", "b")).values.shape == (2, 3)


# -- the service and the engines ----------------------------------------------------------
def _spark_session():
    try:
        import pyspark.sql  # noqa: F401
        reason = None
    except ImportError:
        reason = "pyspark is not installed (pip install 'dpmarginals[spark]')"
    if reason is None and shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        reason = "Java is not installed (apt-get install openjdk-17-jre-headless)"
    if reason is not None:
        if os.environ.get("CI") == "true" and not os.environ.get("DPMARGINALS_SKIP_SPARK"):
            pytest.fail(f"Spark tests must run in CI: {reason}")
        pytest.skip(reason)
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("dpmarginals-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.driver.memory", "1g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    pytest.importorskip("fastapi")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    from dpmarginals.service.app import create_app

    app = create_app(tmp_path_factory.mktemp("spine") / "api.db", admin_token="t")
    with TestClient(app) as client:
        yield client


ADMIN = {"Authorization": "Bearer t"}


def _through_service(api, name: str, plan, reports) -> list[dict]:
    r = api.post("/campaigns", json={"id": name, "plan": plan.to_dict(), "settings": {
        "tickets": "off", "public": True}}, headers=ADMIN)  # (tickets: test_service_open.py)
    assert r.status_code == 201, r.text
    for i in range(0, len(reports), 2000):
        r = api.post(f"/campaigns/{name}/reports/batch", json={"reports": reports[i:i + 2000]})
        assert r.status_code == 201, r.text
    return [json.loads(line) for line in
            api.get(f"/campaigns/{name}/reports", headers=ADMIN).text.splitlines()]


@pytest.mark.parametrize("name", SPINE_METHODS)
def test_every_path_gives_the_methods_own_synopsis(api, name, tmp_path):
    from dpmarginals.aggregation import estimate, synopsis_from_counts
    from dpmarginals.engines import count_supports, export_reports

    warnings.simplefilter("ignore")  # EM's failure warnings (restored by pytest)
    method, plan, reports = _reports(name)
    exported = _through_service(api, name, plan, reports)
    assert len(exported) == N
    counts = support_counts(plan, reports)
    assert support_counts(plan, exported) == counts
    want = method.release(plan, counts)
    assert want.method == name
    # the plan's method releases, not CALM's pipeline
    _assert_same_synopsis(for_plan(plan).release(plan, counts), want, f"{name}: for_plan")
    _assert_same_synopsis(synopsis_from_counts(plan, counts), want, f"{name}: from counts")
    # the service's answers are the release's
    for attrs in _queries():
        r = api.get(f"/campaigns/{name}/marginals", params={"attributes": ",".join(attrs)})
        assert r.status_code == 200, r.text
        assert r.json()["reports"] == N
        np.testing.assert_allclose(np.asarray(r.json()["values"], dtype=float).ravel(),
                                   want.marginal(attrs).values.ravel(), rtol=1e-12, atol=1e-15,
                                   err_msg=f"{name}: service answer over {attrs}")
    # numpy and DuckDB (Spark below) count the exported reports to the same Counts
    export_reports(exported, plan, tmp_path, name)
    for engine in ("numpy", "duckdb"):
        assert count_supports(plan, tmp_path, engine) == counts, engine
        _assert_same_synopsis(estimate(plan, tmp_path, engine), want, f"{name}: {engine}")
    if all(g.oracle in ORACLES for g in plan.groups):
        # views through the spine's estimate step equal the release's inputs
        assert len(estimate_views(plan, counts)) == plan.m


def test_spark_counts_give_the_same_synopsis(api, tmp_path):
    from dpmarginals.aggregation import estimate
    from dpmarginals.engines import count_supports, export_reports

    spark = _spark_session()
    warnings.simplefilter("ignore")
    for name in SPINE_METHODS:
        method, plan, reports = _reports(name, seed=7)
        counts = support_counts(plan, reports)
        export_reports(reports, plan, tmp_path / name, name)
        assert count_supports(plan, tmp_path / name, "spark", spark=spark) == counts
        _assert_same_synopsis(estimate(plan, tmp_path / name, "spark", spark=spark),
                              method.release(plan, counts), f"{name}: spark")


def test_a_plan_without_reports_is_refused_with_the_reason(api):
    plan = make("uni", epsilon=EPSILON, k=2).plan(DOMAIN, N)
    assert not plan.groups
    r = api.post("/campaigns", json={"id": "x-uni", "plan": plan.to_dict()}, headers=ADMIN)
    assert r.status_code == 422, r.text
    assert "no groups" in r.json()["reason"]


@pytest.mark.parametrize("name", FORMAT_METHODS)
def test_out_of_range_reports_of_the_formats_are_refused_by_the_service(api, name):
    # A malicious client cannot post values outside the plan's: each bad payload is refused
    # (422, nothing stored) with a reason naming the value, batch or single report.
    _, plan, reports = _reports(name, seed=9)
    campaign = f"bad-{name}"
    r = api.post("/campaigns", json={"id": campaign, "plan": plan.to_dict()}, headers=ADMIN)
    assert r.status_code == 201, r.text
    codec = PlanCodec(plan)
    fast = codec._decode_batch(reports)  # the column-wise path agrees with report by report
    assert fast is not None and fast.rows == [codec._decode_one(r)[2] for r in reports]
    oracle = codec.oracle(0)
    good = reports[0]["payload"]
    if name in ("em", "inp_em"):
        bad = {f"class {oracle.classes[1]} of attribute 'b'": [good[0], oracle.classes[1],
                                                                *good[2:]],
               "4 integers": good[:3], "4 integers ": [*good[:3], True]}
    elif name == "wfm":
        bad = {f"matrix payload {oracle.size} is outside": oracle.size,
               "matrix payload -1 is outside": -1, "must be an integer": [good, 0],
               "must be an integer ": True}
    else:
        fmt = oracle.name
        bad = {f"{fmt} index {oracle.K}": [oracle.K, 0], f"{fmt} bit must be 0 or 1": [0, 2],
               "two integers": [0, 1, 0], "two integers ": [-1.0, 0]}
    for reason, payload in bad.items():
        item = dict(reports[1], payload=payload)
        assert codec._decode_batch([reports[2], item]) is None
        with pytest.raises(ReportError, match=reason.strip()):
            codec.decode([item])
        for path, body in ((f"/campaigns/{campaign}/reports", item),
                           (f"/campaigns/{campaign}/reports/batch",
                            {"reports": [reports[2], item]})):
            r = api.post(path, json=body)
            assert r.status_code == 422, (reason, r.text)
            assert reason.strip() in r.json()["reason"], r.json()
    assert api.get(f"/campaigns/{campaign}/status", headers=ADMIN).json()["reports"] == 0


# -- batch decoding ------------------------------------------------------------------------
def test_batch_decoding_is_columnwise_and_agrees_with_report_by_report():
    from dpmarginals.protocol.plan import GroupSpec, Plan
    from dpmarginals.protocol.reports import new_report_id

    sets = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d"), ("a", "c")]
    groups = tuple(GroupSpec(s, o, 1.0, DOMAIN.project(s).cells())
                   for s, o in zip(sets, ["grr", "oue", "olh", "hr", "sue"], strict=True))
    plan = Plan("calm", 1.0, DOMAIN, groups, {"k": 2})
    codec = PlanCodec(plan)
    reports = simulate_reports(plan, _data().codes[:500], max_epsilon=1.0, rng=5)
    fast = codec._decode_batch(reports)
    assert fast is not None
    slow = [codec._decode_one(r) for r in reports]
    assert fast.ids == [s[0] for s in slow] and fast.groups == [s[1] for s in slow]
    assert fast.rows == [s[2] for s in slow]
    assert codec.empty_counts() == support_counts(plan, [])
    # any bad report: the batch path declines, the report-by-report path names it
    fresh = new_report_id
    bad = [dict(reports[3], payload=10**30, report_id=fresh()),
           dict(reports[3], group=True, report_id=fresh()),
           dict(reports[4], report_id=reports[1]["report_id"]),
           dict(reports[3], version=1.0, report_id=fresh()),
           dict(reports[3], report_id=fresh().upper())]
    bad += [dict(r, payload=p, report_id=fresh()) for r, p in zip(
        [next(r for r in reports if r["group"] == g) for g in range(5)],
        [6, "A" * 4, [1, 0], [0, 2], "////"], strict=True)]
    for item in bad:
        batch = [*reports[:5], item, *reports[5:9]]
        assert codec._decode_batch(batch) is None
        with pytest.raises(ReportError, match="report "):
            codec.decode(batch)
