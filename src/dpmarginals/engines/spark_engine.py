"""Apache Spark: counting when one machine is not enough (the ``spark`` extra).

DataFrame API only -- built-in column functions, joins and aggregations, no Python UDFs
and no RDD lambdas -- so the work runs in the JVM, on the executors.  One Spark job per
kind of group (as the DuckDB engine), reading the groups' directories with ``group``
from the Hive-style path.  Results (a few thousand rows per group) come back to the
driver and numpy finishes them (:mod:`.base`).  Unary encodings are summed two bits per
int64 ``sum`` (32-bit lanes; at most 2^31 - 1 reports per group), at most 32 sums per
word; wide vectors are exploded into (word index, word) rows so that whole-stage code
generation stays on.

``pyspark`` is imported lazily: without it (or without Java) the engine raises
:class:`~dpmarginals.core.errors.DPMarginalsError` saying what to install.  Sessions: pass
one, or the active session is used, or a local one is made (master from
``$DPMARGINALS_SPARK_MASTER``, default ``local[*]``).

**Logging.**  A session made here logs at ``ERROR`` (Spark's WARN-level stack traces,
e.g. FileStreamSink's for every globbed path, ran to hundreds of lines before the
answer): a log4j2 configuration at that level is given to the driver JVM at startup
(which also drops Spark's startup banner), the level is set again right after the session
exists, and Python's ``py4j`` logger is kept at WARNING or above.  Set
``$DPMARGINALS_SPARK_LOG_LEVEL`` (e.g. ``WARN``, ``INFO``) or pass ``log_level=`` to see
more.  Sessions passed in or already active are left as their owner configured them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from functools import reduce
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import DPMarginalsError
from ..core.extras import lazy
from ..datasets.records_store import (
    RECORDS_MANIFEST,
    RecordsTable,
    as_records,
    is_records_dir,
    open_records,
    write_records,
)
from ..protocol.plan import Plan
from .base import (
    LANE,
    OLH_ALL,
    OLH_INVALID,
    PRIME,
    Counts,
    batch_key,
    empty_counts,
    finish_em,
    finish_lanes,
    finish_olh,
    finish_pairs,
    finish_values,
    plan_oracles,
    priority_seed,
)
from .parquet import MANIFEST, check_manifest, group_files, resolve_campaign

pa = lazy("pyarrow", extra="spark", what="the spark engine")

__all__ = ["SparkEngine", "SparkTupleCounter", "get_session", "require_pyspark",
           "spark_log_level"]

_INSTALL = ("the spark engine needs PySpark: pip install 'dpmarginals[spark]' "
            "(and Java 17, e.g. apt-get install openjdk-17-jre-headless)")
_LANE = LANE
_LOG_LEVELS = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")
_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
logger.pyspark.name = org.apache.spark.api.python.PythonGatewayServer
logger.pyspark.level = {level}
"""
_WIDE_WORDS = 3  # above this many words per report, explode to (word index, word) rows


def require_pyspark() -> Any:
    """The ``pyspark`` module, or a DPMarginalsError naming the extra to install."""
    from ..core.extras import require

    require("pyspark.sql", extra="spark", what="the spark engine")
    return require("pyspark", extra="spark", what="the spark engine")


def spark_log_level(level: str | None = None) -> str:
    """The log level for sessions made here: ``level``, else ``$DPMARGINALS_SPARK_LOG_LEVEL``,
    else ``ERROR`` (one of log4j's levels, case-insensitive)."""
    chosen = (level or os.environ.get("DPMARGINALS_SPARK_LOG_LEVEL") or "ERROR").upper()
    if chosen == "WARNING":
        chosen = "WARN"
    if chosen not in _LOG_LEVELS:
        raise DPMarginalsError(f"Spark log level must be one of {list(_LOG_LEVELS)}, got "
                               f"{level or os.environ.get('DPMARGINALS_SPARK_LOG_LEVEL')!r}")
    return chosen


def _log4j2_options(level: str) -> str:
    """JVM options pointing log4j2 at a console configuration of ``level`` (written once)."""
    path = Path(tempfile.gettempdir()) / f"dpmarginals-log4j2-{level.lower()}.properties"
    text = _LOG4J2.format(level=level.lower())
    if not path.is_file() or path.read_text() != text:
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)
    return f"-Dlog4j2.configurationFile={path.as_uri()}"


def _quiet_py4j(level: str) -> None:
    """Keep Python's ``py4j`` logger at WARNING or above unless it was configured."""
    logger = logging.getLogger("py4j")
    if logger.level == logging.NOTSET:
        wanted = logging.getLevelName("WARNING" if level in ("WARN", "FATAL", "OFF") else level)
        logger.setLevel(max(logging.WARNING, wanted if isinstance(wanted, int) else 0))


def get_session(spark: Any = None, master: str | None = None,
                log_level: str | None = None) -> Any:
    """``spark`` if given, else the active SparkSession (unless ``master`` is given), else a
    new one on ``master`` (default ``$DPMARGINALS_SPARK_MASTER``, else ``local[*]``) that
    logs at :func:`spark_log_level` (default ``ERROR``; see the module docstring)."""
    if spark is not None:
        return spark
    require_pyspark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        return active
    master = master or os.environ.get("DPMARGINALS_SPARK_MASTER", "local[*]")
    level = spark_log_level(log_level)
    _quiet_py4j(level)
    try:
        session = (SparkSession.builder.master(master).appName("dpmarginals")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions",
                           str(max(2, 2 * (os.cpu_count() or 1))))
                   .config("spark.driver.extraJavaOptions", _log4j2_options(level))
                   .getOrCreate())
        session.sparkContext.setLogLevel(level)
    except Exception as exc:  # Java missing or too old: py4j/pyspark raise several types
        raise DPMarginalsError(f"cannot start Spark ({master}): {exc}; {_INSTALL}") from None
    return session


def _functions() -> Any:
    from pyspark.sql import functions as F

    return F


def _to_numpy(frame: Any) -> dict[str, np.ndarray]:
    """A small result DataFrame -> numpy columns (Arrow when available; no pandas)."""
    if hasattr(frame, "toArrow"):
        table = frame.toArrow()
        out: dict[str, np.ndarray] = {}
        for name in table.column_names:
            col = table.column(name)
            if col.null_count and pa.types.is_integer(col.type):  # keep nulls visible
                data = col.fill_null(0).to_numpy()
                out[name] = np.ma.masked_array(data, mask=col.is_null().to_numpy(
                    zero_copy_only=False))
            else:
                out[name] = np.asarray(col.to_numpy(zero_copy_only=False))
        return out
    rows = frame.collect()
    cols = {}
    for i, name in enumerate(frame.columns):
        values = [r[i] for r in rows]
        if any(v is None for v in values):
            cols[name] = np.ma.masked_array([0 if v is None else v for v in values],
                                            mask=[v is None for v in values])
        else:
            cols[name] = np.asarray(values)
    return cols


def _small_frame(spark: Any, columns: dict[str, np.ndarray]) -> Any:
    """A small driver-side table (int64 columns) as a DataFrame."""
    table = pa.table({k: pa.array(np.asarray(v, dtype=np.int64)) for k, v in columns.items()})
    try:
        return spark.createDataFrame(table)
    except (TypeError, ValueError):  # pyspark < 4 takes no Arrow table
        from pyspark.sql.types import LongType, StructField, StructType

        schema = StructType([StructField(k, LongType(), False) for k in columns])
        rows = list(zip(*(np.asarray(v, np.int64).tolist() for v in columns.values()),
                        strict=True))
        return spark.createDataFrame(rows, schema)


def _is_local(path: str | Path) -> bool:
    text = str(path)
    return "://" not in text or text.startswith("file://")


def _local(path: str | Path) -> Path:
    text = str(path)
    return Path(text[len("file://"):] if text.startswith("file://") else text)


def _analysis_error() -> tuple[type[BaseException], ...]:
    try:
        from pyspark.errors import AnalysisException
    except ImportError:  # pragma: no cover - pyspark < 3.4
        from pyspark.sql.utils import AnalysisException
    return (AnalysisException,)


class SparkEngine:
    """Counts a campaign's reports with Spark (see the module docstring)."""

    def __init__(self, spark: Any = None) -> None:
        self.spark = get_session(spark)

    def count(self, plan: Plan, reports: str | Path, *, campaign: str | None = None) -> Counts:
        oracles = plan_oracles(plan)
        if _is_local(reports):
            cdir = resolve_campaign(_local(reports), campaign)
            check_manifest(cdir, plan)
            present = [g for g in range(plan.m) if group_files(cdir, g)]
            base = str(cdir.resolve())
        else:
            base = str(reports).rstrip("/")
            if campaign is not None and not base.endswith(f"campaign={campaign}"):
                base = f"{base}/campaign={campaign}"
            self._check_remote_manifest(base, plan)
            present = list(range(plan.m))
        supports, users = empty_counts(plan)
        batches: dict[tuple[str, int], list[int]] = {}
        for g in present:
            batches.setdefault(batch_key(oracles[g]), []).append(g)
        for (kind, width), groups in batches.items():
            frame = self._read(base, groups)
            if frame is None:
                continue
            if kind == "value":
                res = _to_numpy(frame.groupBy("group", "value").count())
            elif kind == "pairs":
                res = _to_numpy(frame.groupBy("group", "j", "bit").count())
            elif kind == "em":
                res = _to_numpy(frame.groupBy("group", *[f"v{i}" for i in range(width)])
                                .count())
            elif kind == "olh":
                res = _to_numpy(self._olh(frame, [(g, oracles[g]) for g in groups]))
            else:
                res = _to_numpy(self._words(frame, width))
            for g in groups:
                at = np.asarray(res["group"]) == g
                part = {k: v[at] for k, v in res.items()}
                if kind == "value":
                    supports[g], users[g] = finish_values(oracles[g], g, part["value"],
                                                          part["count"])
                elif kind == "pairs":
                    supports[g], users[g] = finish_pairs(oracles[g], g, part["j"], part["bit"],
                                                         part["count"])
                elif kind == "em":
                    supports[g], users[g] = finish_em(
                        oracles[g], g, [part[f"v{i}"] for i in range(width)], part["count"])
                elif kind == "olh":
                    supports[g], users[g] = finish_olh(oracles[g], g, part["v"], part["count"])
                elif at.any():
                    supports[g], users[g] = self._finish_words(oracles[g], g, part, width)
        return Counts(supports, users)

    def _check_remote_manifest(self, base: str, plan: Plan) -> None:
        try:
            rows = self.spark.read.option("wholetext", "true").text(
                f"{base}/{MANIFEST}").collect()
        except _analysis_error():
            return
        if rows:
            stored = Plan.from_dict(json.loads(rows[0][0]))
            if stored.hash != plan.hash:
                raise DPMarginalsError(f"the reports in {base!r} were made under plan "
                                       f"{stored.hash[:12]}..., not {plan.hash[:12]}...")

    def _read(self, base: str, groups: Sequence[int]) -> Any:
        pattern = (f"{base}/group={groups[0]}" if len(groups) == 1 else
                   f"{base}/group={{{','.join(str(g) for g in groups)}}}")
        try:
            return (self.spark.read.option("basePath", base).parquet(pattern)
                    .withColumn("group", _functions().col("group").cast("long")))
        except _analysis_error() as exc:
            if "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc):
                return None
            raise DPMarginalsError(f"Spark cannot read the reports of groups {list(groups)} "
                                   f"under {base!r}: {exc}") from None

    def _olh(self, frame: Any, groups: list[tuple[int, Any]]) -> Any:
        F = _functions()
        gs, vs, hs = [], [], []
        for g, oracle in groups:
            v = np.arange(-2, oracle.size, dtype=np.int64)
            gs.append(np.full(v.size, g))
            vs.append(v)
            hs.append(np.full(v.size, oracle.g))
        values = _small_frame(self.spark, {"group": np.concatenate(gs), "v": np.concatenate(vs),
                                           "g": np.concatenate(hs)})
        seed, y, v, g = F.col("seed"), F.col("y"), F.col("v"), F.col("g")
        a, b = F.shiftright(seed, 32), seed.bitwiseAND(F.lit(0xFFFFFFFF))
        invalid = (seed.isNull() | y.isNull() | (seed < 0) | (a < 1) | (a >= PRIME)
                   | (b >= PRIME) | (y < 0) | (y >= g))
        hit = ((a * v + b) % F.lit(PRIME)) % g == y
        cond = (v == OLH_ALL) | ((v == OLH_INVALID) & invalid) | ((v >= 0) & hit)
        return (frame.join(F.broadcast(values), "group").where(cond)
                .groupBy("group", "v").count())

    def _words(self, frame: Any, width: int) -> Any:
        F = _functions()
        lane = F.lit(_LANE)
        if width <= _WIDE_WORDS:
            sums = [F.sum(F.shiftright(f"word{i}", t).bitwiseAND(lane)).alias(f"s{i}_{t}")
                    for i in range(width) for t in range(32)]
            nulls = reduce(lambda x, y: x | y, [F.col(f"word{i}").isNull() for i in range(width)])
            return frame.groupBy("group").agg(
                F.count(F.lit(1)).alias("count"),
                F.sum(F.when(nulls, 1).otherwise(0)).alias("nulls"), *sums)
        exploded = frame.select("group", F.posexplode(
            F.array(*[F.col(f"word{i}") for i in range(width)])).alias("wi", "w"))
        sums = [F.sum(F.shiftright("w", t).bitwiseAND(lane)).alias(f"s{t}") for t in range(32)]
        return exploded.groupBy("group", "wi").agg(
            F.count(F.lit(1)).alias("count"),
            F.sum(F.when(F.col("w").isNull(), 1).otherwise(0)).alias("nulls"), *sums)

    def _finish_words(self, oracle: Any, g: int, part: dict[str, np.ndarray], width: int
                      ) -> tuple[np.ndarray, int]:
        if width <= _WIDE_WORDS:
            lanes = np.array([[part[f"s{i}_{t}"][0] for t in range(32)] for i in range(width)],
                             dtype=np.int64)
            return finish_lanes(oracle, g, lanes, int(part["count"][0]), int(part["nulls"][0]))
        order = np.argsort(part["wi"])
        lanes = np.stack([np.asarray(part[f"s{t}"], np.int64)[order] for t in range(32)],
                         axis=1)
        if lanes.shape[0] != width:
            raise DPMarginalsError(f"group {g}: expected {width} words per report")
        users = int(part["count"][order][0])
        return finish_lanes(oracle, g, lanes, users, int(np.asarray(part["nulls"]).sum()))


# -- central DP ----------------------------------------------------------------------------
class SparkTupleCounter:
    """The counting passes of the central-DP k-tuple extraction on Spark (the protocol of
    :class:`~dpmarginals.central.dp_marginals.TupleCounter`; the DuckDB counter's steps).

    ``data``: a records directory (:func:`.parquet.write_records`; local or on storage
    Spark reads, e.g. ``hdfs://`` or ``s3a://``), or in-memory data, which is staged
    through a local temporary records directory (fine in local mode; on a cluster, put a
    records directory on shared storage instead).
    """

    def __init__(self, data: Any, *, spark: Any = None) -> None:
        self.spark = get_session(spark)
        self._tmp: str | None = None
        if isinstance(data, str | Path) and not _is_local(data):
            self.records = self._remote_records(str(data).rstrip("/"))
        elif isinstance(data, str | Path) and is_records_dir(_local(data)):
            self.records = open_records(_local(data))
        else:
            self._tmp = tempfile.mkdtemp(prefix="dpm-spark-")
            self.records = write_records(as_records(data), Path(self._tmp) / "records")
        path = str(self.records.path)
        path = str(Path(path).resolve()) if _is_local(path) else path
        self.entries = self.spark.read.parquet(f"{path}/entries").select("record", "item")
        self.n = int(self.records.n)
        self.seed: tuple[int, ...] | None = None
        self._cached: list[Any] = []
        self.w: Any = None
        self.held: Any = None
        self.uc: Any = None
        self._max_size = 0

    def _remote_records(self, base: str) -> RecordsTable:
        try:
            manifest = json.loads(self.spark.read.option("wholetext", "true").text(
                f"{base}/{RECORDS_MANIFEST}").collect()[0][0])
            items = _to_numpy(self.spark.read.parquet(f"{base}/items.parquet").orderBy("item"))
        except (*_analysis_error(), IndexError, ValueError) as exc:
            raise DPMarginalsError(f"cannot open records {base!r}: {exc}") from None
        binary = bool(manifest.get("binary", False))
        values = None if binary else tuple(str(v) for v in items["value"])
        return RecordsTable(base, int(manifest["users"]), tuple(manifest["columns"]),
                            np.asarray(items["column"], np.int64), values,
                            str(manifest.get("name", "records")))

    def _persist(self, frame: Any) -> Any:
        frame = frame.persist()
        self._cached.append(frame)
        return frame

    def close(self) -> None:
        for frame in self._cached:
            frame.unpersist()
        self._cached.clear()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def _current(self, k: int) -> Any:
        F = _functions()
        if k == 1:
            return self.entries.select("record", F.col("item").alias("key"))
        return self.w

    def sizes(self, k: int, index: Any, cap: int) -> np.ndarray:
        F = _functions()
        if k >= 2:
            self._build_w(k, index)
        if self.uc is not None:
            self.uc.unpersist()
        self.uc = self._persist(self._current(k).groupBy("record").agg(
            F.count(F.lit(1)).alias("c")))
        hist = _to_numpy(self.uc.groupBy(F.least(F.col("c"), F.lit(int(cap))).alias("s"))
                         .count())
        values = np.asarray(hist.get("s", []), np.int64)
        counts = np.asarray(hist.get("count", []), np.int64)
        self._max_size = int(values.max()) if values.size else 0
        if values.size and self._max_size >= cap:
            self._max_size = int(self.uc.agg(F.max("c")).collect()[0][0])
        zeros = self.n - int(counts.sum())
        return np.repeat(np.concatenate([[0], values]), np.concatenate([[zeros], counts]))

    def kept(self, k: int, delta: int, noise: Any) -> tuple[np.ndarray, np.ndarray]:
        F = _functions()
        from pyspark.sql import Window

        cur = self._current(k)
        if self._max_size <= delta:
            rows = cur
        else:
            if self.seed is None:
                self.seed = priority_seed(noise)
            joined = cur.join(self.uc, "record")
            light = joined.where(F.col("c") <= delta).select("key")
            window = Window.partitionBy("record").orderBy("prio", "key")
            heavy = (joined.where(F.col("c") > delta)
                     .withColumn("prio", _priority_column(self.seed))
                     .withColumn("rn", F.row_number().over(window))
                     .where(F.col("rn") <= delta).select("key"))
            rows = light.unionByName(heavy)
        res = _to_numpy(rows.groupBy("key").count())
        keys = np.asarray(res.get("key", []), np.int64)
        order = np.argsort(keys)
        return keys[order], np.asarray(res.get("count", []), np.int64)[order]

    def advance(self, k: int, index: Any, s1_items: np.ndarray) -> None:
        F = _functions()
        if k == 1:
            table = _small_frame(self.spark, {"item": s1_items,
                                              "idx": np.arange(len(s1_items))})
            held = self.entries.join(F.broadcast(table), "item").select("record", "idx")
        else:
            keys = index.keys[k]
            table = _small_frame(self.spark, {"key": keys, "idx": np.arange(keys.size)})
            held = self.w.join(F.broadcast(table), "key").select("record", "idx")
        old = self.held
        self.held = self._persist(held)
        self.held.count()  # materialise before the previous stage's frames go
        if old is not None:
            old.unpersist()

    def _build_w(self, k: int, index: Any) -> None:
        F = _functions()
        m1 = index.m1
        tuples = index.tuples[k - 1]
        lvl = _small_frame(self.spark, {
            "idx": np.arange(tuples.shape[0]), "prefix": index.prefix(k - 1),
            "last": index.last(k - 1), **{f"c{i}": tuples[:, i] for i in range(k - 1)}})
        a = self.held.join(F.broadcast(lvl), "idx")
        x = a.select(*[F.col(c).alias(f"x_{c}") for c in a.columns])
        y = a.select(F.col("record").alias("y_record"), F.col("prefix").alias("y_prefix"),
                     F.col("idx").alias("y_idx"), F.col("last").alias("y_last"))
        pairs = x.join(y, (F.col("x_record") == F.col("y_record"))
                       & (F.col("x_prefix") == F.col("y_prefix"))
                       & (F.col("x_idx") < F.col("y_idx")))
        items = [f"x_c{i}" for i in range(k - 1)] + ["y_last"]
        for drop in range(k - 2):  # the subtuples without one of the shared k-2 items
            rest = items[:drop] + items[drop + 1 :]
            sub = lvl.select(*[F.col(f"c{i}").alias(f"l{i}") for i in range(k - 1)])
            cond = reduce(lambda p, q: p & q,
                          [F.col(c) == F.col(f"l{i}") for i, c in enumerate(rest)])
            pairs = pairs.join(F.broadcast(sub), cond, "left_semi")
        w = pairs.select(F.col("x_record").alias("record"),
                         (F.col("x_idx") * F.lit(m1) + F.col("y_last")).alias("key"))
        old = self.w
        self.w = self._persist(w)
        self.w.count()
        if old is not None:
            old.unpersist()


def _priority_column(seed: tuple[int, ...]) -> Any:
    """:func:`.base.priority` as a Spark column expression (all intermediates < 2^63)."""
    F = _functions()
    s0, s1, s2, s3, s4 = (F.lit(int(s)) for s in seed)
    p = F.lit(PRIME)
    record, key = F.col("record"), F.col("key")
    t = ((record % p) * s0 + key.bitwiseAND(p)) % p
    t = (t * s1 + F.shiftright(key, 31)) % p
    h = (s2 * t + s3) % p
    h = (h * t + s4) % p
    return (h * t + s0) % p
