"""The experiment runner: determinism for any --jobs, resuming, the registry and the CLI."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from command_line import dpmarginals, one_error_line
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.experiments import (
    EXPERIMENTS,
    Experiment,
    get,
    load_results,
    names,
    run_experiment,
    seed_for,
)
from dpmarginals.experiments.runner import COMMON_COLUMNS, END_COLUMN

needs_data = pytest.mark.needs_data
TIMING = ["seconds"]


# -- a toy experiment (no data needed) --------------------------------------------------------
def _toy_tasks(quick: bool) -> list[dict]:
    return [{"key": f"toy|cell={i}", "cell": i, "repeat": i % 3} for i in range(6 if quick
                                                                               else 12)]


def _toy_run(task: dict, seed: int) -> list[dict]:
    if os.environ.get("TOY_FAIL_AT") == str(task["cell"]):
        raise RuntimeError("interrupted")
    if os.environ.get("TOY_KILL_AT") == str(task["cell"]):
        os._exit(1)  # a worker that dies (out of memory, a crash in native code)
    gen = np.random.default_rng(seed_for(seed, "toy", task["cell"]))
    return [{"panel": "p", "dataset": "toy", "n": 10, "d": 2, "k": 1, "epsilon": 0.5,
             "method": m, "repeat": task["repeat"], "status": "ok", "reason": "",
             "sse": float(gen.random()), "seconds": 0.001, "note": 'a "quoted", value'}
            for m in ("x", "y")]


def _toy_plot(frame: pd.DataFrame, out: Path, quick: bool) -> list[Path]:
    path = out / "toy.png"
    path.write_bytes(b"png")
    return [path]


TOY = Experiment(name="toy", title="Toy", paper="nothing", description="A toy.",
                 tasks=_toy_tasks, run_task=_toy_run, plot=_toy_plot,
                 summarize=lambda frame, quick: f"{len(frame)} rows\n",
                 columns=("sse", "seconds", "note"))


def _numbers(path: Path) -> pd.DataFrame:
    return pd.read_csv(path).drop(columns=TIMING)


def test_seed_for_is_a_pure_function_of_seed_and_key():
    a = seed_for(3, "users", "msnbc", 8, 65536, 0).generate_state(4)
    assert np.array_equal(a, seed_for(3, "users", "msnbc", 8, 65536, 0).generate_state(4))
    assert not np.array_equal(a, seed_for(4, "users", "msnbc", 8, 65536, 0).generate_state(4))
    assert not np.array_equal(a, seed_for(3, "users", "msnbc", 8, 65536, 1).generate_state(4))


def test_results_do_not_depend_on_jobs(tmp_path):
    one = run_experiment(TOY, tmp_path / "one", jobs=1, seed=5, progress=False)
    two = run_experiment(TOY, tmp_path / "two", jobs=2, seed=5, progress=False)
    assert one.tasks_run == two.tasks_run == 12
    pd.testing.assert_frame_equal(_numbers(one.results), _numbers(two.results))
    frame = pd.read_csv(one.results)
    assert list(frame.columns) == [*COMMON_COLUMNS, "sse", "seconds", "note", END_COLUMN]
    assert len(frame) == 24 and (frame["experiment"] == "toy").all()
    assert frame["note"].iloc[0] == 'a "quoted", value'
    other = run_experiment(TOY, tmp_path / "three", jobs=1, seed=6, progress=False)
    assert not np.allclose(pd.read_csv(other.results)["sse"], frame["sse"])
    assert one.summary.read_text().startswith("# Toy")
    assert one.out_dir == tmp_path / "one" / "toy"
    assert run_experiment(TOY, tmp_path, quick=True, progress=False).out_dir.name == "toy-quick"


def test_resume_after_an_interrupt(tmp_path, monkeypatch):
    monkeypatch.setenv("TOY_FAIL_AT", "7")
    with pytest.raises(RuntimeError, match="interrupted"):
        run_experiment(TOY, tmp_path, jobs=1, seed=1, progress=False)
    partial = load_results(tmp_path / "toy" / "results.csv")
    done = set(partial["task"].str.split("|seed", regex=False).str[0])
    assert done == {f"toy|cell={i}" for i in range(7)}
    monkeypatch.delenv("TOY_FAIL_AT")
    resumed = run_experiment(TOY, tmp_path, jobs=2, seed=1, progress=False)
    assert (resumed.tasks_run, resumed.tasks_skipped) == (5, 7)
    full = run_experiment(TOY, tmp_path / "ref", jobs=1, seed=1, progress=False)
    pd.testing.assert_frame_equal(_numbers(resumed.results), _numbers(full.results))
    again = run_experiment(TOY, tmp_path, jobs=1, seed=1, progress=False)
    assert again.tasks_run == 0
    fresh = run_experiment(TOY, tmp_path, jobs=1, seed=1, fresh=True, progress=False)
    assert fresh.tasks_run == 12


def test_a_worker_that_dies_fails_its_task_alone(tmp_path, monkeypatch):
    ref = run_experiment(TOY, tmp_path / "ref", jobs=1, seed=3, progress=False)
    expected = _numbers(ref.results)
    monkeypatch.setenv("TOY_KILL_AT", "4")  # only ever in a worker: jobs=2
    res = run_experiment(TOY, tmp_path, jobs=2, seed=3, progress=False)
    frame = pd.read_csv(res.results)
    failed = frame[frame["status"] == "failed"]
    assert list(failed["task"]) == ["toy|cell=4|seed=3"]
    assert "worker process died" in failed["reason"].iloc[0]
    ok = frame[frame["status"] == "ok"]
    assert ok["task"].nunique() == 11  # every other task ran, in spite of the broken pool
    pd.testing.assert_frame_equal(
        ok.drop(columns=TIMING).reset_index(drop=True),
        expected[expected["task"] != "toy|cell=4|seed=3"].reset_index(drop=True),
        check_dtype=False)  # the failed row's empty cells make some columns float
    monkeypatch.delenv("TOY_KILL_AT")
    resumed = run_experiment(TOY, tmp_path, jobs=2, seed=3, progress=False)
    assert resumed.tasks_run == 1  # the failed task is tried again
    pd.testing.assert_frame_equal(_numbers(resumed.results), expected, check_dtype=False)


def test_a_row_cut_short_drops_its_task(tmp_path):
    res = run_experiment(TOY, tmp_path, seed=2, progress=False)
    text = res.results.read_text()
    res.results.write_text(text[: len(text) - 10])  # the last row loses its end column
    frame = load_results(res.results, TOY.all_columns)
    assert frame["task"].nunique() == 11
    resumed = run_experiment(TOY, tmp_path, seed=2, progress=False)
    assert resumed.tasks_run == 1
    pd.testing.assert_frame_equal(_numbers(resumed.results), _numbers(res.results))


def test_results_written_with_other_columns_are_refused(tmp_path):
    out = tmp_path / "toy"
    out.mkdir()
    (out / "results.csv").write_text("a,b\n1,2\n")
    with pytest.raises(DPMarginalsError, match="--fresh"):
        run_experiment(TOY, tmp_path, progress=False)
    assert run_experiment(TOY, tmp_path, fresh=True, progress=False).tasks_run == 12


# -- the registry ---------------------------------------------------------------------------
ALL = ["calm-fig4", "calm-fig5", "calm-fig6", "calm-fig7", "calm-fig8", "calm-fig9",
       "cormode-fig4", "cormode-fig5", "cormode-fig9", "cormode-table3", "cormode-b2",
       "cormode-chi2", "cormode-chowliu", "calm-pgm", "central-tables", "adaptive",
       "calm-fig4-population", "heldout", "heldout-latent"]


def test_registry_lists_every_experiment():
    assert names() == ALL
    with pytest.raises(DPMarginalsError, match="available: calm-fig4"):
        get("calm-fig99")
    assert get(" CALM-FIG4 ").name == "calm-fig4"


@pytest.mark.parametrize("name", ALL)
def test_grids_are_well_formed(name):
    exp = EXPERIMENTS[name]
    for quick in (True, False):
        tasks = exp.tasks(quick)
        keys = [t["key"] for t in tasks]
        assert tasks and len(set(keys)) == len(keys)
        assert all("repeat" in t for t in tasks)
    assert len(exp.tasks(True)) <= len(exp.tasks(False))
    assert exp.all_columns[-1] == END_COLUMN


@needs_data
@pytest.mark.parametrize("name", ALL)
def test_one_quick_task_plots_and_summarizes(name, tmp_path):
    """The first task of every quick grid runs, and its rows plot and summarize."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("sklearn")
    exp = EXPERIMENTS[name]
    task = {**exp.tasks(True)[0]}
    rows = exp.run_task(task, 0)
    assert rows
    for r in rows:
        assert set(r) <= set(exp.all_columns), set(r) - set(exp.all_columns)
        assert r["status"] in ("ok", "not run", "failed")
        assert r["status"] == "ok" or r["reason"]
    frame = pd.DataFrame(rows).assign(task=task["key"], experiment=name)
    frame = frame.reindex(columns=list(exp.all_columns))
    paths = exp.plot(frame, tmp_path, True)
    assert paths and all(p.exists() and p.stat().st_size > 1000 for p in paths)
    assert "Orderings vs. the paper" in exp.summarize(frame, True)


@needs_data
def test_common_random_numbers_across_methods():
    """Every method and epsilon of a repeat sees the same users; repeats differ."""
    from dpmarginals.experiments.common import sample_users

    a = sample_users("msnbc", 8, 1000, 0, 0)
    assert np.array_equal(a.codes, sample_users("msnbc", 8, 1000, 0, 0).codes)
    assert not np.array_equal(a.codes, sample_users("msnbc", 8, 1000, 0, 1).codes)


def test_value_capping_and_column_duplication():
    from dpmarginals.core.dataset import Dataset
    from dpmarginals.core.domain import Domain
    from dpmarginals.experiments.common import cap_values, duplicate_columns

    codes = np.array([[0, 0], [1, 1], [2, 1], [3, 1], [3, 0], [3, 2]])
    data = Dataset(codes, Domain(("a", "b"), (4, 3)), {"a": ("w", "x", "y", "z")})
    capped = cap_values(data, 3)
    assert capped.domain.sizes == (3, 3)
    assert capped.labels["a"] == ("z", "w", "other")
    assert capped.column("a").tolist() == [1, 2, 2, 0, 0, 0]
    dup = duplicate_columns(data, 5)
    assert dup.domain.attributes == ("a", "b", "a#1", "b#1", "a#2")
    assert np.array_equal(dup.column("a#2"), data.column("a"))


# -- the command line -------------------------------------------------------------------------
def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``dpmarginals ARGV`` with the experiment/synthesize subcommands registered."""
    from dpmarginals.cli import commands as cli
    from dpmarginals.cli.experiments import register

    build = cli.build_parser

    def build_with_experiments() -> argparse.ArgumentParser:
        parser = build()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        if "experiment" not in sub.choices:
            register(sub)
        return parser

    cli.build_parser = build_with_experiments
    try:
        code = cli.main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        cli.build_parser = build
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_list(capsys):
    code, out, _ = run_cli(capsys, "experiment", "--list")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == ALL


def test_cli_errors_are_one_line(capsys):
    for argv, match in ((("experiment", "nope"), "unknown experiment 'nope'"),
                        (("experiment",), "name an experiment"),
                        (("experiment", "calm-fig4", "--jobs", "0"), "expected a whole number"),
                        (("synthesize", "missing.json", "--n", "5", "--out", "x.csv"),
                         "cannot read 'missing.json'")):
        code, _, err = run_cli(capsys, *argv)
        assert code == 2, argv
        assert len(err.strip().splitlines()) == 1 and match in err, err


@needs_data
def test_cli_runs_a_quick_experiment(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    code, out, _ = run_cli(capsys, "experiment", "cormode-fig5", "--quick", "--out",
                           str(tmp_path), "--jobs", "2")
    assert code == 0, out
    folder = tmp_path / "cormode-fig5-quick"
    assert {"results.csv", "cormode-fig5.png", "summary.md"} <= {p.name for p in
                                                                 folder.iterdir()}
    assert "2 task(s) run" in out
    frame = pd.read_csv(folder / "results.csv")
    assert len(frame) == 2 * 7 * 6 and (frame["status"] == "ok").all()
    code, out, _ = run_cli(capsys, "experiment", "cormode-fig5", "--quick", "--out",
                           str(tmp_path))
    assert "0 task(s) run, 2 already done" in out


def test_cli_synthesize(capsys, tmp_path):
    from dpmarginals.datasets import load
    from dpmarginals.methods import make

    syn_path = tmp_path / "syn.json"
    make("calm", epsilon=1.0, k=2).run(load("randhie", d=4), rng=0).save(syn_path)
    out = tmp_path / "fake.csv"
    code, _, err = run_cli(capsys, "synthesize", str(syn_path), "--n", "300", "--out",
                           str(out), "--seed", "4")
    assert code == 2 and "not a private release" in err and not out.exists()
    code, said, err = run_cli(capsys, "synthesize", str(syn_path), "--n", "300", "--out",
                              str(out), "--seed", "4", "--simulation")
    assert code == 0 and "300 synthetic records" in said and "NOT a private" in said
    assert json.loads((tmp_path / "fake.csv.privacy.json").read_text())["privacy"][
        "private"] is False
    first = pd.read_csv(out)
    assert first.shape == (300, 4)
    run_cli(capsys, "synthesize", str(syn_path), "--n", "300", "--out", str(out), "--seed", "4",
            "--simulation")
    pd.testing.assert_frame_equal(first, pd.read_csv(out))
    code, _, _ = run_cli(capsys, "synthesize", str(syn_path), "--n", "50", "--out",
                         str(tmp_path / "j.parquet"), "--degree", "joint",
                         "--attributes", "visits,coinsurance", "--simulation")
    assert code == 0 and pd.read_parquet(tmp_path / "j.parquet").shape == (50, 2)


def test_synthesize_into_a_missing_folder_names_path_and_reason(tmp_path):
    from dpmarginals import release
    from dpmarginals.datasets import load

    syn_path = tmp_path / "syn.json"
    release(load("randhie", d=3), epsilon=1.0, k=2).save(syn_path)
    proc = dpmarginals("synthesize", syn_path, "--n", "10", "--out", "/nonexistent/x.csv")
    line = one_error_line(proc, "/nonexistent/x.csv", "no such directory '/nonexistent'")
    assert "None" not in line


def test_evaluate_against_exact_answers_computed_once():
    """evaluate() with the exact answers of exact_marginals gives what it gives with the
    data (which recounts it for every synopsis)."""
    from dpmarginals.local.calm import CALM
    from dpmarginals.synopsis.base import UniformSynopsis
    from dpmarginals.synopsis.evaluate import evaluate, exact_marginals, random_queries
    from populations import correlated_binary

    data = correlated_binary(4000, 6, seed=3)
    queries = random_queries(data.domain, 3, 6, rng=4)
    exact = exact_marginals(data, queries)
    for synopsis in (CALM(epsilon=1.0, k=3).run(data, rng=5), UniformSynopsis(data.domain)):
        with_data, with_exact = evaluate(synopsis, data, queries), evaluate(synopsis, exact)
        np.testing.assert_array_equal(with_data.sse, with_exact.sse)
        np.testing.assert_array_equal(with_data.tvd, with_exact.tvd)
        assert with_exact.queries == [tuple(q) for q in queries]
