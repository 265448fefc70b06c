"""The command line as a new user meets it: help, results, and one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from command_line import dpmarginals, one_error_line
from dpmarginals.cli.commands import main
from dpmarginals.core.domain import Domain


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse exits for --help and usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_installed_entry_point_help():
    exe = shutil.which("dpmarginals")
    cmd = [exe] if exe else [sys.executable, "-m", "dpmarginals.cli"]
    proc = subprocess.run([*cmd, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    for command in ("demo", "datasets", "plan", "run", "query"):
        assert command in proc.stdout


def test_plan_json_is_the_papers_example(capsys):
    code, out, _ = run_cli(capsys, "plan", "--n", "65536", "--d", "8", "--k", "3",
                           "--epsilon", "2.0", "--json")
    assert code == 0
    plan = json.loads(out)
    assert (plan["l"], plan["m"]) == (4, 14)
    assert set(plan) == {"l", "m", "oracle", "noise_error", "sampling_error"}
    for eps in ("0.2", "0.8", "1.4"):
        _, out, _ = run_cli(capsys, "plan", "--n", "65536", "--d", "8", "--k", "3",
                            "--epsilon", eps, "--json")
        assert json.loads(out)["l"] == 2


def test_run_on_a_csv_and_query_the_synopsis(capsys, tmp_path):
    rng = __import__("numpy").random.default_rng(0)
    frame = pd.DataFrame({"a": rng.integers(0, 2, 3000), "b": rng.integers(0, 3, 3000),
                          "c": rng.integers(0, 2, 3000)})
    csv = tmp_path / "people.csv"
    frame.to_csv(csv, index=False)
    dom = tmp_path / "domain.json"
    dom.write_text(json.dumps({"a": 2, "b": 3, "c": 2}))
    syn = tmp_path / "syn.json"
    code, out, err = run_cli(capsys, "run", "--dataset", str(csv), "--domain", str(dom),
                             "--method", "calm", "--epsilon", "1.0", "--k", "2",
                             "--queries", "3", "--seed", "1", "--out", str(syn), "--simulation",
                             "--json")
    assert code == 0, err
    result = json.loads(out)
    assert {"method", "sse_mean", "sse_std", "uniform_sse_mean", "seconds", "l", "m"} <= set(result)
    assert {"plan", "collect", "consistency", "queries", "exact_answers"} <= set(
        result["stage_seconds"])  # the exact answers are computed once, timed apart
    code, out, _ = run_cli(capsys, "query", str(syn), "--attributes", "b,a", "--format", "csv")
    assert code == 0
    table = pd.read_csv(__import__("io").StringIO(out))
    assert list(table.columns) == ["b", "a", "fraction"] and len(table) == 6
    assert abs(table.fraction.sum() - 1) < 1e-6


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--dataset", "nosuchdata", "--epsilon", "1", "--k", "2"], "nosuchdata"),
        (["run", "--dataset", "adult", "--epsilon", "0", "--k", "2"], "epsilon"),
        (["run", "--dataset", "adult", "--epsilon", "-1", "--k", "2"], "epsilon"),
        (["plan", "--n", "100", "--d", "3", "--k", "5", "--epsilon", "1"], "k"),
        (["query", "missing.json", "--attributes", "a"], "missing.json"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(capsys, argv, message):
    code, _, err = run_cli(capsys, *argv)
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in err


def test_value_out_of_domain_and_malformed_domain(capsys, tmp_path):
    csv = tmp_path / "d.csv"
    pd.DataFrame({"a": [0, 1, 5], "b": [0, 1, 1]}).to_csv(csv, index=False)
    dom = tmp_path / "dom.json"
    dom.write_text(json.dumps({"a": 2, "b": 2}))
    code, _, err = run_cli(capsys, "run", "--dataset", str(csv), "--domain", str(dom),
                           "--epsilon", "1", "--k", "1")
    assert code == 2 and "d.csv line 4, column 'a': value 5 is not in" in err
    assert len(err.splitlines()) == 1
    dom.write_text("{\"a\": 2, ")
    code, _, err = run_cli(capsys, "run", "--dataset", str(csv), "--domain", str(dom),
                           "--epsilon", "1", "--k", "1")
    assert code == 2 and "not valid JSON" in err and len(err.splitlines()) == 1


def test_datasets_lists_every_data_set(capsys):
    code, out, _ = run_cli(capsys, "datasets", "--json")
    assert code == 0
    names = {row["name"] for row in json.loads(out)}
    assert {"adult", "adult3", "msnbc", "kosarak", "nyc-taxis", "acs", "br2000"} <= names


def test_demo_runs_offline_and_beats_uniform(capsys, monkeypatch):
    monkeypatch.delenv("DPMARGINALS_DATA", raising=False)
    code, out, err = run_cli(capsys, "demo", "--seed", "0")
    assert code == 0, err
    assert "Uniform baseline" in out and "estimated" in out


@pytest.mark.needs_data
def test_run_on_real_msnbc(capsys):
    code, out, err = run_cli(capsys, "run", "--dataset", "msnbc", "--d", "16", "--n", "65536",
                             "--k", "3", "--epsilon", "1.0", "--queries", "20", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["sse_mean"] * 10 < result["uniform_sse_mean"]


CEILING_MESSAGE = "epsilon = 25.0 exceeds 20, beyond any meaningful privacy"


def test_one_epsilon_cap_with_one_message_everywhere(tmp_path):
    """release, plan, run and the Python API refuse epsilon 25 as the device and the service
    do (issue 33 point 4: release and plan took 25 and 50 and labelled the output private)."""
    from dpmarginals import release
    from dpmarginals.core.errors import DPMarginalsError
    from dpmarginals.protocol.checks import check_plan
    from dpmarginals.protocol.plan import GroupSpec, Plan

    csv, dom = tmp_path / "people.csv", tmp_path / "domain.json"
    frame = pd.DataFrame({"a": [0, 1, 1, 0] * 50, "b": [0, 1, 2, 2] * 50})
    frame.to_csv(csv, index=False)
    dom.write_text(json.dumps({"a": 2, "b": 3}))
    commands = (
        ["run", "--dataset", csv, "--domain", dom, "--k", "2", "--queries", "5"],
        ["release", csv, "--domain", dom, "--k", "2", "--out", tmp_path / "r.json"],
        ["plan", "--n", "1000", "--d", "5", "--k", "2"],
        ["plan", "--n", "1000", "--k", "2", "--domain", dom, "--out", tmp_path / "p.json"],
    )
    for argv in commands:
        one_error_line(dpmarginals(*argv, "--epsilon", "25"), CEILING_MESSAGE)
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "p.json").exists()
    with pytest.raises(DPMarginalsError, match=CEILING_MESSAGE):
        release(frame, {"a": 2, "b": 3}, epsilon=25, k=2)
    plan = Plan("calm", 25.0, Domain.from_dict({"a": 2, "b": 3}),
                (GroupSpec(("a", "b"), "grr", 25.0, 6),))
    with pytest.raises(DPMarginalsError, match=CEILING_MESSAGE):
        check_plan(plan.to_dict(), 20.0)
    proc = dpmarginals(*commands[0], "--epsilon", "20", "--json")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert json.loads(proc.stdout)["sse_mean"] < 1e-6
