"""Run an experiment's grid: parallel, deterministic for a seed, resumable, with progress.

An :class:`Experiment` is a list of *tasks* (JSON-able parameter dicts, each with a unique
``key``), a function that runs one task and returns its result rows, and functions that
draw the figure(s) and the markdown summary from all rows.  :func:`run_experiment`

* skips the tasks whose rows are already in ``results.csv`` (resume after an interrupt;
  ``fresh=True`` starts over);
* runs the others over ``jobs`` processes, appending each finished task's rows to the CSV
  at once (one ``write`` per task, so an interrupt loses at most the running tasks);
* gives every task its own random stream, ``SeedSequence`` derived from ``(seed, task
  key)`` (:func:`seed_for`), so no result depends on ``jobs`` or on the order in which
  tasks finish; the file is rewritten in grid order at the end, so two runs with the same
  seed write the same numbers (only the ``seconds`` timing column differs);
* shows a tqdm progress bar on stderr (hidden when stderr is not a terminal);
* survives a worker process that dies (out of memory, a crash in native code): the tasks
  it may have been running are run again one at a time, and one that kills its worker
  alone is recorded with status ``"failed"`` and the reason (retried on the next resume).

>>> ss = seed_for(0, "data", "msnbc", 65536)
>>> ss.entropy == seed_for(0, "data", "msnbc", 65536).entropy
True
>>> bool(seed_for(0, "a").generate_state(1)[0] != seed_for(0, "b").generate_state(1)[0])
True
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.errors import DPMarginalsError, describe_os_error

__all__ = [
    "COMMON_COLUMNS",
    "Experiment",
    "RunResult",
    "load_results",
    "run_experiment",
    "seed_for",
]

#: Columns every experiment writes, in this order, before its own ``columns``.
COMMON_COLUMNS: tuple[str, ...] = (
    "experiment", "task", "panel", "dataset", "n", "d", "k", "epsilon", "method", "repeat",
    "status", "reason",
)
#: The last column of every row: the number of rows its task wrote.  A task whose rows
#: were cut short by an interrupt has fewer rows than that (or a row without it) and is
#: dropped when the file is read back, so it runs again.
END_COLUMN = "task_rows"

Task = dict[str, Any]
Row = dict[str, Any]


def seed_for(seed: int, *parts: object) -> np.random.SeedSequence:
    """A ``SeedSequence`` determined by the user's ``seed`` and a key (any printable parts).

    The key is hashed (SHA-256) into the sequence's entropy, so streams for different keys
    are independent and a key's stream does not depend on which other tasks run.
    """
    digest = hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).digest()
    words = [int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4)]
    return np.random.SeedSequence([int(seed) & 0xFFFFFFFF, *words])


@dataclass(frozen=True)
class Experiment:
    """One reproducible figure or table.

    ``tasks(quick)`` lists the grid; ``run_task(task, seed)`` returns the task's rows (dicts
    over :data:`COMMON_COLUMNS` + ``columns``; missing entries are written empty);
    ``plot(frame, out_dir, quick)`` writes PNG files and returns their paths;
    ``summarize(frame, quick)`` returns markdown.
    """

    name: str
    title: str
    paper: str
    description: str
    tasks: Callable[[bool], list[Task]]
    run_task: Callable[[Task, int], list[Row]]
    plot: Callable[[pd.DataFrame, Path, bool], list[Path]]
    summarize: Callable[[pd.DataFrame, bool], str]
    columns: tuple[str, ...] = ()
    quick_note: str = ""
    full_note: str = ""

    @property
    def all_columns(self) -> tuple[str, ...]:
        extra = tuple(c for c in self.columns if c not in COMMON_COLUMNS)
        return (*COMMON_COLUMNS, *extra, END_COLUMN)


@dataclass
class RunResult:
    """What :func:`run_experiment` did and wrote."""

    experiment: str
    out_dir: Path
    results: Path
    figures: list[Path]
    summary: Path
    tasks_total: int
    tasks_run: int
    tasks_skipped: int
    seconds: float
    frame: pd.DataFrame = field(repr=False)


# -- the results file ----------------------------------------------------------------------
def load_results(path: str | Path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Read a results CSV; rows cut short by an interrupt (and their task) are dropped."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return pd.DataFrame(columns=list(columns or ()))
    text = path.read_text()
    if not text.endswith("\n"):  # the last write was cut short: drop its partial line
        text = text[: text.rfind("\n") + 1]
    try:
        frame = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""],
                            low_memory=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DPMarginalsError(
            f"cannot read the results file {str(path)!r} to resume ({exc}); delete it or "
            "run with --fresh") from None
    if columns is not None and list(frame.columns) != list(columns):
        raise DPMarginalsError(
            f"{str(path)!r} was written with other columns (an older version of the "
            "experiment?); run with --fresh to start over")
    if END_COLUMN in frame.columns and len(frame):
        declared = pd.to_numeric(frame[END_COLUMN], errors="coerce")
        counts = frame.groupby("task")["task"].transform("size")
        broken = declared.isna() | (declared != counts)
        if broken.any():
            frame = frame[~frame["task"].isin(set(frame.loc[broken, "task"]))]
    return frame.reset_index(drop=True)


def _format(value: Any) -> Any:
    if isinstance(value, float | np.floating):
        v = float(value)
        return "" if math.isnan(v) else repr(v)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, bool | np.bool_):
        return int(bool(value))
    if isinstance(value, list | tuple | dict):
        return json.dumps(value)
    if isinstance(value, str):
        return " ".join(value.splitlines())
    return "" if value is None else value


def _rows_text(rows: Sequence[Row], columns: Sequence[str]) -> str:
    unknown = {c for r in rows for c in r} - set(columns)
    if unknown:
        raise DPMarginalsError(f"rows have columns the experiment does not declare: "
                               f"{sorted(unknown)}")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    for row in rows:
        writer.writerow({c: _format(row.get(c)) for c in columns[:-1]}
                        | {columns[-1]: len(rows)})
    return buf.getvalue()


def _header(columns: Sequence[str]) -> str:
    return ",".join(columns) + "\n"


# -- running tasks -------------------------------------------------------------------------
def _call(run_task: Callable[[Task, int], list[Row]], task: Task, seed: int
          ) -> tuple[str, list[Row], float]:
    start = time.perf_counter()
    rows = run_task(task, seed)
    return task["key"], rows, time.perf_counter() - start


def _pool(jobs: int) -> ProcessPoolExecutor:
    methods = multiprocessing.get_all_start_methods()
    # fork shares the parent's parsed data sets and starts fast; spawn elsewhere
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    return ProcessPoolExecutor(max_workers=jobs, mp_context=ctx)


#: Status of a task whose worker process died when it ran alone (retried on resume).
FAILED = "failed"


def _failed_row(task: Task, columns: Sequence[str]) -> Row:
    fields = {c: v for c, v in task.items() if c in columns and np.isscalar(v)}
    return {**fields, "status": FAILED,
            "reason": "its worker process died (out of memory, or a crash in native code)"}


def _run_isolated(run_task: Callable[[Task, int], list[Row]], task: Task, seed: int,
                  columns: Sequence[str]) -> tuple[str, list[Row]]:
    """``task`` alone in a fresh worker: its rows, or a failed row if the worker dies."""
    with _pool(1) as pool:
        try:
            key, rows, _ = pool.submit(_call, run_task, task, seed).result()
        except BrokenProcessPool:
            return task["key"], [_failed_row(task, columns)]
    return key, rows


def _run_parallel(run_task: Callable[[Task, int], list[Row]], todo: Sequence[Task], seed: int,
                  jobs: int, columns: Sequence[str],
                  record: Callable[[str, list[Row]], None]) -> None:
    """Run ``todo`` over ``jobs`` workers.  When a worker dies the pool breaks: the tasks
    seen running are re-run one at a time (:func:`_run_isolated`), the rest in a new pool."""
    queue = list(todo)
    while queue:
        with _pool(jobs) as pool:
            futures = {pool.submit(_call, run_task, t, seed): t for t in queue}
            pending, running, recorded = set(futures), set(), set()
            try:
                while pending:
                    running |= {f for f in pending if f.running()}
                    finished, pending = wait(pending, timeout=0.5,
                                             return_when=FIRST_COMPLETED)
                    for fut in finished:
                        key, rows, _ = fut.result()
                        record(key, rows)
                        recorded.add(fut)
                queue = []
            except BrokenProcessPool:
                broken = []
                for fut in futures:
                    if fut in recorded:
                        continue
                    if fut.done() and fut.exception() is None:  # finished before the break
                        key, rows, _ = fut.result()
                        record(key, rows)
                    else:
                        broken.append(fut)
                suspects = [f for f in broken if f in running] or broken[:1]
                for fut in suspects:
                    record(*_run_isolated(run_task, futures[fut], seed, columns))
                queue = [futures[f] for f in broken if f not in suspects]
            except BaseException:
                for fut in pending:
                    fut.cancel()
                raise


def _progress(total: int, name: str, show: bool | None) -> Any:
    from tqdm import tqdm

    disable = None if show is None else not show
    return tqdm(total=total, desc=name, unit="task", disable=disable, file=sys.stderr,
                dynamic_ncols=True)


def run_experiment(
    experiment: Experiment,
    out: str | Path = "results",
    *,
    quick: bool = False,
    jobs: int = 1,
    seed: int = 0,
    fresh: bool = False,
    progress: bool | None = None,
    plot: bool = True,
) -> RunResult:
    """Run (or resume) ``experiment`` into ``out/NAME`` (``out/NAME-quick`` with ``quick``).

    Writes ``results.csv`` (one row per method x setting x repeat), the PNG figure(s) and
    ``summary.md``; returns a :class:`RunResult`.
    """
    if jobs < 1:
        raise DPMarginalsError(f"jobs must be >= 1, got {jobs}")
    start = time.perf_counter()
    name = experiment.name + ("-quick" if quick else "")
    out_dir = Path(out) / name
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DPMarginalsError(f"cannot create the output folder {str(out_dir)!r}: "
                               f"{describe_os_error(exc)}") from None
    results = out_dir / "results.csv"
    columns = experiment.all_columns
    tasks = experiment.tasks(quick)
    keys = [t["key"] for t in tasks]
    if len(set(keys)) != len(keys):
        raise DPMarginalsError(f"{experiment.name}: duplicate task keys in the grid")
    keyed = [{**t, "key": f"{t['key']}|seed={seed}"} for t in tasks]
    order = {t["key"]: i for i, t in enumerate(keyed)}

    if fresh and results.exists():
        results.unlink()
    done = load_results(results, columns)
    if len(done):  # a task whose worker died is tried again
        done = done[~done["task"].isin(done.loc[done["status"] == FAILED, "task"])]
    done_keys = set(done["task"]) if len(done) else set()
    todo = [t for t in keyed if t["key"] not in done_keys]
    # Rewrite the file from the complete rows (drops any row cut short by an interrupt).
    with results.open("w", newline="") as fh:
        fh.write(_header(columns))
        if len(done):
            done.to_csv(fh, header=False, index=False, lineterminator="\n")

    bar = _progress(len(keyed), name, progress)
    bar.update(len(keyed) - len(todo))
    try:
        with results.open("a", newline="") as fh:
            def record(key: str, rows: list[Row]) -> None:
                for r in rows:
                    r.setdefault("experiment", experiment.name)
                    r["task"] = key
                fh.write(_rows_text(rows, columns))
                fh.flush()
                bar.update(1)

            if jobs == 1 or len(todo) <= 1:
                for t in todo:
                    key, rows, _ = _call(experiment.run_task, t, seed)
                    record(key, rows)
            else:
                _run_parallel(experiment.run_task, todo, seed, jobs, columns, record)
    finally:
        bar.close()

    frame = load_results(results, columns)
    frame = frame[frame["task"].isin(order)]
    frame = frame.assign(_o=frame["task"].map(order)).sort_values(["_o"], kind="stable")
    frame = frame.drop(columns="_o").reset_index(drop=True)
    _rewrite_sorted(results, frame, columns)

    figures: list[Path] = []
    if plot and len(frame):
        figures = experiment.plot(frame, out_dir, quick)
    summary = out_dir / "summary.md"
    text = _summary_header(experiment, quick, seed, frame) + experiment.summarize(frame, quick)
    summary.write_text(text.rstrip() + "\n")
    return RunResult(experiment.name, out_dir, results, figures, summary, len(keyed),
                     len(todo), len(keyed) - len(todo), time.perf_counter() - start, frame)


def _rewrite_sorted(path: Path, frame: pd.DataFrame, columns: Sequence[str]) -> None:
    """Rewrite the CSV in grid order (atomically, via a temporary file)."""
    tmp = path.with_suffix(".csv.tmp")
    frame.to_csv(tmp, index=False, columns=list(columns), lineterminator="\n")
    os.replace(tmp, path)


def _summary_header(experiment: Experiment, quick: bool, seed: int, frame: pd.DataFrame
                    ) -> str:
    grid = "quick (reduced) grid" if quick else "full grid"
    note = experiment.quick_note if quick else experiment.full_note
    not_run = frame[frame["status"] != "ok"] if len(frame) else frame
    lines = [f"# {experiment.title}", "",
             f"Reproduces {experiment.paper}. {experiment.description}", "",
             f"*{grid}, seed {seed}, {len(frame)} rows.*" + (f" {note}" if note else ""), ""]
    if len(not_run):
        lines.append("Not run (the method refuses the setting up front, or the paper skips it):")
        lines.append("")
        reasons = (not_run.groupby(["method", "reason"], dropna=False)
                   .agg(settings=("task", "nunique")).reset_index())
        for _, r in reasons.iterrows():
            lines.append(f"- **{r['method']}** ({r['settings']} task(s)): {r['reason']}")
        lines.append("")
    return "\n".join(lines) + "\n"
