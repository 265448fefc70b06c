"""Counting engines (numpy, DuckDB, Spark): exact equality with ``oracle.support``, the
Parquet layout, the service export, ``dpmarginals estimate``, and the central-DP counting
passes on every engine.

Spark tests share one ``local[2]`` SparkSession per test session.  They skip, with the
reason, when pyspark or Java is missing -- except in CI (``CI=true``), where they fail so
that a missing install cannot hide them (set ``DPMARGINALS_SKIP_SPARK=1`` to skip there).

Error budget: every comparison between engines is exact; the one statistical check (the
hash-based contribution bounding keeps a near-uniform sample) is seeded and uses a
chi-square test at p >= 1e-4.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from command_line import dpmarginals
from dpmarginals.aggregation import estimate, synopsis_from_counts
from dpmarginals.central import DPMarginals, SparseRecords
from dpmarginals.cli.argtypes import OneLineParser
from dpmarginals.cli.engines import register
from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.datasets.records_store import load_records, write_records
from dpmarginals.engines import count_supports, export_reports, write_reports
from dpmarginals.engines.base import priority
from dpmarginals.engines.duckdb_engine import DuckDBEngine, DuckDBTupleCounter
from dpmarginals.engines.parquet import (
    ReportWriter,
    campaign_path,
    from_table,
    group_files,
    report_schema,
    to_table,
)
from dpmarginals.oracles import make_oracle
from dpmarginals.protocol import randomizers
from dpmarginals.protocol.plan import GroupSpec, Plan
from dpmarginals.protocol.reports import PlanCodec, support_counts

pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas")

# -- fixtures -----------------------------------------------------------------------------
DOMAIN = Domain(("a", "b", "c", "d"), (4, 5, 7, 9))


def _spec(attrs: tuple[str, ...], oracle: str, eps: float = 1.0) -> GroupSpec:
    return GroupSpec(attrs, oracle, eps, DOMAIN.project(attrs).cells())


PLAN = Plan("calm", 1.0, DOMAIN, (
    _spec(("a", "b"), "grr"),                 # 20 cells
    _spec(("a", "b", "c"), "oue"),            # 140 cells: 3 words, padding bits
    _spec(("b", "c", "d"), "oue", 2.0),       # 315 cells: 5 words (Spark's wide path)
    _spec(("c", "d"), "sue"),                 # 63 cells: one word, one padding bit
    _spec(("b", "d"), "olh", 2.0),            # 45 cells, g = 8
    _spec(("a", "c"), "olh", 0.5),            # 28 cells, g = 3
    _spec(("a", "d"), "hr"),                  # 36 cells, K = 64
    _spec(("a",), "oue"),                     # 4 cells, no reports at all
    _spec(("c",), "grr", 3.0),                # 7 cells
))
EMPTY_GROUP = 7


def _native_reports(seed: int = 0) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for g, spec in enumerate(PLAN.groups):
        if g == EMPTY_GROUP:
            continue
        oracle = make_oracle(spec.oracle, spec.epsilon, spec.cells)
        n = 3000 + 257 * g
        values = rng.zipf(1.5, size=n) % spec.cells
        out[g] = randomizers.perturb(oracle, values, rng)
    return out


def _reference(reports: dict[int, np.ndarray]) -> tuple[list[np.ndarray], np.ndarray]:
    supports, users = [], []
    for g, spec in enumerate(PLAN.groups):
        oracle = make_oracle(spec.oracle, spec.epsilon, spec.cells)
        if g in reports:
            supports.append(np.asarray(oracle.support(reports[g]), np.int64))
            users.append(len(reports[g]))
        else:
            supports.append(np.zeros(spec.cells, np.int64))
            users.append(0)
    return supports, np.asarray(users)


def _assert_counts_equal(got: tuple, want: tuple) -> None:
    (s1, u1), (s2, u2) = got, want
    np.testing.assert_array_equal(np.asarray(u1), np.asarray(u2))
    assert len(s1) == len(s2)
    for g, (a, b) in enumerate(zip(s1, s2, strict=True)):
        assert a.dtype.kind == "i", g
        np.testing.assert_array_equal(a, b, err_msg=f"group {g} ({PLAN.groups[g].oracle})")


@pytest.fixture(scope="module")
def reports() -> dict[int, np.ndarray]:
    return _native_reports()


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory, reports: dict[int, np.ndarray]) -> str:
    root = tmp_path_factory.mktemp("reports")
    # small part files: several per group, so merging across files is exercised
    write_reports(PLAN, root, "c1", reports, rows_per_file=1500)
    return str(root)


def _spark_unavailable() -> str | None:
    try:
        import pyspark.sql  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install 'dpmarginals[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Java is not installed (apt-get install openjdk-17-jre-headless)"
    return None


def _require_spark() -> None:
    """Skip without pyspark or Java, except in CI (``CI=true``), where that fails."""
    reason = _spark_unavailable()
    if reason is not None:
        if os.environ.get("CI") == "true" and not os.environ.get("DPMARGINALS_SKIP_SPARK"):
            pytest.fail(f"Spark tests must run in CI: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def spark():
    _require_spark()
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("dpmarginals-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.driver.memory", "1g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# -- schemas and layout -------------------------------------------------------------------
def test_every_oracle_round_trips_through_its_parquet_schema(reports):
    for g, native in reports.items():
        spec = PLAN.groups[g]
        oracle = make_oracle(spec.oracle, spec.epsilon, spec.cells)
        table = to_table(oracle, native, {"group": g})
        assert table.schema.equals(report_schema(oracle), check_metadata=False)
        assert all(t == pa.int64() for t in table.schema.types)
        back = from_table(oracle, table)
        np.testing.assert_array_equal(back, native)
        assert back.dtype == native.dtype


def test_layout_is_hive_partitioned_with_plan_and_metadata(stored):
    cdir = campaign_path(stored, "c1")
    assert json.loads((cdir / "_plan.json").read_text())["hash"] == PLAN.hash
    files = group_files(cdir, 1)
    assert len(files) == 3 and all(f.parent.name == "group=1" for f in files)
    assert group_files(cdir, EMPTY_GROUP) == []
    meta = json.loads(pq.read_schema(files[0]).metadata[b"dpmarginals"])
    assert meta["plan_hash"] == PLAN.hash and meta["group"] == 1 and meta["oracle"] == "oue"
    assert pq.read_schema(files[0]).names == ["word0", "word1", "word2"]


def test_writer_validates_reports_and_refuses_another_plan(tmp_path):
    with pytest.raises(DPMarginalsError, match=r"outside 0\.\.19"):
        write_reports(PLAN, tmp_path, "x", {0: np.array([0, 20])})
    with pytest.raises(DPMarginalsError, match="group must be one of"):
        write_reports(PLAN, tmp_path, "x", {9: np.array([0])})
    with pytest.raises(DPMarginalsError, match="beyond value 62"):
        write_reports(PLAN, tmp_path, "x", {3: np.full((1, 8), 255, np.uint8)})
    with pytest.raises(DPMarginalsError, match="campaign id"):
        campaign_path(tmp_path, "../evil")
    other = Plan("calm", 1.0, DOMAIN, PLAN.groups[:1])
    with pytest.raises(DPMarginalsError, match="made under plan"):
        write_reports(other, tmp_path, "x", {0: np.array([1])})


# -- the three engines give identical counts ----------------------------------------------
def test_numpy_and_duckdb_count_exactly_oracle_support(stored, reports):
    want = _reference(reports)
    _assert_counts_equal(count_supports(PLAN, reports, "numpy"), want)
    _assert_counts_equal(count_supports(PLAN, stored, "numpy"), want)
    _assert_counts_equal(count_supports(PLAN, stored, "duckdb"), want)
    _assert_counts_equal(count_supports(PLAN, stored, "duckdb", threads=1), want)
    _assert_counts_equal(count_supports(PLAN, campaign_path(stored, "c1"), "duckdb"), want)


def test_spark_counts_exactly_oracle_support(spark, stored, reports):
    _assert_counts_equal(count_supports(PLAN, stored, "spark", spark=spark), _reference(reports))


def test_counts_merge_across_exports(tmp_path, reports):
    """Two exports into one campaign count as the union of their reports."""
    half = {g: r[: len(r) // 2] for g, r in reports.items()}
    rest = {g: r[len(r) // 2 :] for g, r in reports.items()}
    write_reports(PLAN, tmp_path, "m", half)
    write_reports(PLAN, tmp_path, "m", rest)
    want = _reference(reports)
    for engine in ("numpy", "duckdb"):
        _assert_counts_equal(count_supports(PLAN, tmp_path, engine), want)


def _bad_campaign(root, group: int, columns: dict[str, list]) -> None:
    """A hand-made part file (no metadata) in the layout, for malformed-report tests."""
    writer = ReportWriter(PLAN, root, "bad")
    writer.close()
    d = campaign_path(root, "bad") / f"group={group}"
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({k: pa.array(v, pa.int64()) for k, v in columns.items()}),
                   d / "part-0.parquet")


MALFORMED = [
    (0, {"value": [1, 20]}, "outside 0..19"),
    (0, {"value": [1, None]}, "null"),
    (4, {"seed": [(5 << 32) | 7, 3], "y": [0, 0]}, "seed outside the hash family"),
    (4, {"seed": [(5 << 32) | 7], "y": [8]}, "hashed value outside"),
    (6, {"j": [3], "bit": [2]}, "hr bit 2"),
    (6, {"j": [64], "bit": [0]}, "hr index 64"),
    (3, {"word0": [-(1 << 63)]}, "beyond value 62"),
    (1, {"word0": [0], "word1": [0], "word2": [1 << 12]}, "beyond value 139"),
]


@pytest.mark.parametrize(("group", "columns", "message"), MALFORMED)
def test_malformed_reports_raise_on_numpy_and_duckdb(tmp_path, group, columns, message):
    _bad_campaign(tmp_path, group, columns)
    for engine in ("numpy", "duckdb"):
        with pytest.raises(DPMarginalsError, match=message.split()[-1]):
            count_supports(PLAN, tmp_path, engine, campaign="bad")


def test_malformed_reports_raise_on_spark(spark, tmp_path):
    for i, (group, columns, message) in enumerate(MALFORMED):
        root = tmp_path / str(i)
        _bad_campaign(root, group, columns)
        with pytest.raises(DPMarginalsError, match=message.split()[-1]):
            count_supports(PLAN, root, "spark", spark=spark)


def test_reports_of_another_plan_or_group_are_refused(tmp_path, stored):
    other = Plan("calm", 2.0, DOMAIN, PLAN.groups)
    for engine in ("numpy", "duckdb"):
        with pytest.raises(DPMarginalsError, match="made under plan"):
            count_supports(other, stored, engine)
    # a part file moved into another group's directory
    write_reports(PLAN, tmp_path, "mv", {0: np.array([1, 2]), 8: np.array([3])})
    cdir = campaign_path(tmp_path, "mv")
    src = group_files(cdir, 8)[0]
    src.rename(cdir / "group=0" / src.name)
    for engine in ("numpy", "duckdb"):
        with pytest.raises(DPMarginalsError, match="of group 8"):
            count_supports(PLAN, tmp_path, engine)


def test_bad_sources_give_clear_errors(tmp_path, reports):
    with pytest.raises(DPMarginalsError, match="engine must be one of"):
        count_supports(PLAN, tmp_path, "polars")
    with pytest.raises(DPMarginalsError, match="reads reports from Parquet"):
        count_supports(PLAN, reports, "duckdb")
    with pytest.raises(DPMarginalsError, match="no such reports directory"):
        count_supports(PLAN, tmp_path / "missing", "duckdb")
    (tmp_path / "campaign=a").mkdir()
    (tmp_path / "campaign=b").mkdir()
    with pytest.raises(DPMarginalsError, match="several campaigns"):
        count_supports(PLAN, tmp_path, "numpy")


def test_missing_pyspark_names_the_extra(monkeypatch):
    import sys

    from dpmarginals.engines import spark_engine

    monkeypatch.setitem(sys.modules, "pyspark", None)
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    with pytest.raises(DPMarginalsError, match=r"dpmarginals\[spark\]"):
        spark_engine.get_session()


# -- export from the collection service ---------------------------------------------------
def test_export_of_stored_rows_and_json_reports(tmp_path, reports):
    codec = PlanCodec(PLAN)
    small = {g: r[:200] for g, r in reports.items()}
    json_reports = [rep for g, r in small.items() for rep in codec.reports(g, r)]
    decoded = codec.decode(json_reports)
    rows = zip(decoded.ids, decoded.groups, decoded.rows, strict=True)
    assert export_reports(rows, PLAN, tmp_path, "rows", chunk=97) == {
        g: 200 for g in small}
    assert export_reports(iter(json_reports), PLAN, tmp_path, "json", chunk=101) == {
        g: 200 for g in small}
    want = support_counts(PLAN, json_reports)
    for campaign in ("rows", "json"):
        for engine in ("numpy", "duckdb"):
            _assert_counts_equal(count_supports(PLAN, tmp_path, engine, campaign=campaign),
                                 want)
    with pytest.raises(DPMarginalsError, match="must be 8 bytes"):
        export_reports([(0, b"\x00")], PLAN, tmp_path, "bad")
    with pytest.raises(DPMarginalsError, match="report 0"):
        export_reports([{"version": 1}], PLAN, tmp_path, "bad")


# -- dpmarginals estimate -----------------------------------------------------------------
def _run_cli(argv: list[str]) -> int:
    parser = OneLineParser(prog="dpmarginals")
    sub = parser.add_subparsers(dest="command", parser_class=OneLineParser)
    register(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except DPMarginalsError as exc:
        print(f"dpmarginals: error: {exc}")
        return 2


def test_estimate_command_builds_the_services_synopsis(tmp_path, stored, reports, capsys):
    plan_file = tmp_path / "plan.json"
    PLAN.save(plan_file)
    out = tmp_path / "synopsis.json"
    assert _run_cli(["estimate", "--reports", stored, "--plan", str(plan_file),
                     "--engine", "duckdb", "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["reports"] == sum(len(r) for r in reports.values())
    assert summary["groups_reporting"] == PLAN.m - 1
    from dpmarginals.synopsis.base import load_synopsis

    got = load_synopsis(out)
    want = synopsis_from_counts(PLAN, *_reference(reports))
    for attrs in (("a", "b"), ("b", "c", "d"), ("a",)):
        np.testing.assert_allclose(got.marginal(attrs).values, want.marginal(attrs).values,
                                   atol=1e-12)
    # the plan stored with the reports is the default; text output
    assert _run_cli(["estimate", "--reports", stored, "--engine", "numpy"]) == 0
    assert "synopsis from" in capsys.readouterr().out


def test_estimate_command_errors_are_one_line(tmp_path, stored, capsys):
    assert _run_cli(["estimate", "--reports", str(tmp_path / "nope")]) == 2
    assert "no such reports directory" in capsys.readouterr().out
    other = tmp_path / "other.json"
    Plan("calm", 2.0, DOMAIN, PLAN.groups).save(other)
    assert _run_cli(["estimate", "--reports", stored, "--plan", str(other)]) == 2
    assert "made under plan" in capsys.readouterr().out
    assert _run_cli(["estimate", "--reports", stored, "--threads", "2",
                     "--engine", "numpy"]) == 2
    with pytest.raises(SystemExit) as exc:
        _run_cli(["estimate", "--reports", stored, "--engine", "polars"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice" in err


def test_spark_command_stderr_is_short(stored, tmp_path):
    # Spark's WARN-level stack traces (FileStreamSink, one per globbed path) ran to ~860
    # lines before the answer; a session made by dpmarginals logs at ERROR by default.
    _require_spark()
    proc = dpmarginals("estimate", "--reports", stored, "--engine", "spark", "--spark-master",
                       "local[2]", "--out", tmp_path / "synopsis.json",
                       env={"DPMARGINALS_SPARK_LOG_LEVEL": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "synopsis from" in proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) < 20 and "Exception" not in proc.stderr, proc.stderr[-3000:]


def test_estimate_function_records_engine_and_times(stored):
    synopsis = estimate(PLAN, stored, "duckdb")
    assert synopsis.info["engine"] == "duckdb"
    assert set(synopsis.info["stage_seconds"]) == {"count", "estimate"}


# -- central DP: the counting passes on every engine --------------------------------------
def _records(seed: int = 5, n: int = 3000) -> SparseRecords:
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(n):
        base = [1, 2, 3, 4, 5] if i % 2 else [2, 3, 7, 8]
        extra = rng.choice(np.arange(10, 40), size=rng.integers(0, 9), replace=False)
        recs.append(base + [int(x) for x in extra])
    recs.append([])  # an empty record counts as a user
    return SparseRecords.from_lists(recs)


def _release(res) -> list:
    return [(lv.tuples.tolist(), lv.counts.tolist(), lv.contribution_bound, lv.threshold,
             lv.candidates) for lv in res.levels] + [res.items]


NO_BOUNDING = {"max_k": 4, "eta": 0.3, "percentile": 100.0}  # Delta_k = the largest |W_u|
BOUNDING = {"max_k": 3, "max_contribution": 6}


def test_duckdb_extraction_equals_numpy_when_nobody_is_bounded(tmp_path):
    recs = _records()
    for kw in (NO_BOUNDING, {**NO_BOUNDING, "no_spurious": True},
               {**NO_BOUNDING, "max_materialized": 10}):
        algo = DPMarginals(2.0, 1e-6, **kw)
        want = _release(algo.fit(recs, rng=3, simulation=True))
        assert want[1][0], "the data must yield pairs"
        assert _release(algo.fit(recs, rng=3, simulation=True, engine="duckdb")) == want
    # from a records directory: scanned by DuckDB, or loaded by numpy
    path = tmp_path / "records"
    write_records(recs, path, rows_per_file=5000)
    algo = DPMarginals(2.0, 1e-6, **NO_BOUNDING)
    want = _release(algo.fit(recs, rng=4, simulation=True))
    assert _release(algo.fit(path, rng=4, simulation=True, engine="duckdb")) == want
    assert _release(algo.fit(str(path), rng=4, simulation=True)) == want
    loaded = load_records(path)
    np.testing.assert_array_equal(loaded.indptr, recs.indptr)
    np.testing.assert_array_equal(loaded.items, recs.items)


def test_duckdb_bounding_keeps_the_hash_chosen_rows(tmp_path):
    """k = 1: each user keeps her ``delta`` items of smallest (priority, item)."""
    recs = _records(n=2000)
    counter = DuckDBTupleCounter(recs)
    try:
        sizes = counter.sizes(1, None, 1000)
        np.testing.assert_array_equal(np.sort(sizes), np.sort(recs.lengths()))
        delta = 6
        from dpmarginals.central.noise import SimulationNoise

        keys, counts = counter.kept(1, delta, SimulationNoise(11))
        seed = counter.seed
    finally:
        counter.close()
    assert seed is not None
    rows, items = recs.rows(), recs.items
    prio = priority(rows, items, seed)
    order = np.lexsort((items, prio, rows))
    rank = np.empty(rows.size, np.int64)
    first = np.searchsorted(rows[order], rows[order])  # rows sorted by record already
    rank[order] = np.arange(rows.size) - first
    hist = np.bincount(items[rank < delta], minlength=recs.n_items)
    np.testing.assert_array_equal(keys, np.flatnonzero(hist))
    np.testing.assert_array_equal(counts, hist[keys])


def test_hash_bounding_keeps_a_near_uniform_sample():
    """Users all holding the same 12 items keep 3: each item about n/4 times (chi-square,
    p >= 1e-4; seeded)."""
    recs = SparseRecords.from_lists([list(range(12))] * 4000)
    counter = DuckDBTupleCounter(recs)
    try:
        counter.sizes(1, None, 100)
        from dpmarginals.central.noise import SimulationNoise

        _, counts = counter.kept(1, 3, SimulationNoise(2))
    finally:
        counter.close()
    assert counts.sum() == 3 * 4000
    assert stats.chisquare(counts).pvalue >= 1e-4


def test_spark_extraction_equals_duckdb_and_numpy(spark):
    recs = _records(n=1500)
    algo = DPMarginals(2.0, 1e-6, **NO_BOUNDING)
    want = _release(algo.fit(recs, rng=3, simulation=True))
    assert _release(algo.fit(recs, rng=3, simulation=True, engine="spark", spark=spark)) == want
    bounded = DPMarginals(2.0, 1e-6, **BOUNDING)
    duck = _release(bounded.fit(recs, rng=5, simulation=True, engine="duckdb"))
    assert _release(bounded.fit(recs, rng=5, simulation=True, engine="spark",
                                spark=spark)) == duck


def test_central_engine_argument_is_checked():
    with pytest.raises(DPMarginalsError, match="engine must be one of"):
        DPMarginals(1.0, 1e-6, 2).fit(_records(n=50), rng=0, simulation=True, engine="polars")


def test_duckdb_engine_reuses_a_connection(stored, reports):
    import duckdb

    con = duckdb.connect()
    _assert_counts_equal(DuckDBEngine(connection=con).count(PLAN, campaign_path(stored, "c1")),
                         _reference(reports))
    con.close()


def test_cli_parser_registration_is_standalone():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    assert parser.parse_args(["estimate", "--reports", "x"]).engine == "duckdb"
