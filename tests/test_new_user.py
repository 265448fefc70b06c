"""Issue #19: what a new user tripped over in the CLI, each run as the real command."""

from __future__ import annotations

import pandas as pd

from command_line import dpmarginals as cli
from command_line import one_error_line


def test_a_directory_as_data_is_one_line(tmp_path):
    one_error_line(cli("run", "--dataset", tmp_path, "--k", 2, "--epsilon", 1),
                   "is a directory")
    one_error_line(cli("central", "--data", tmp_path, "--epsilon", 1, "--delta", 1e-9,
                       "--max-k", 2), "is a directory")
    one_error_line(cli("release", tmp_path, "--domain-from-data", "--epsilon", 1,
                       "--out", tmp_path / "r.json"), "is a directory")


def test_bare_command_is_a_usage_error():
    proc = cli()
    assert proc.returncode == 2 and "usage: dpmarginals" in proc.stderr and not proc.stdout


def test_method_help_lists_the_methods():
    from dpmarginals.methods import available

    for command in ("run", "release"):
        text = " ".join(cli(command, "--help").stdout.split())
        assert all(name in text for name in available()), command


def test_ft_raw_estimates_are_said_to_be_no_distributions(tmp_path):
    csv, dom = tmp_path / "d.csv", tmp_path / "d.json"
    pd.DataFrame({"a": [0, 1] * 200, "b": [0, 0, 1, 1] * 100, "c": [1, 0] * 200}).to_csv(
        csv, index=False)
    dom.write_text('{"a": 2, "b": 2, "c": 2}')
    proc = cli("run", "--dataset", csv, "--domain", dom, "--method", "ft", "--k", 2,
               "--epsilon", 1, "--queries", 3)
    assert proc.returncode == 0 and "not distributions" in proc.stderr
    assert "--postprocess norm_sub" in proc.stderr
    proc = cli("run", "--dataset", csv, "--domain", dom, "--method", "ft", "--k", 2,
               "--epsilon", 1, "--queries", 3, "--postprocess", "norm_sub")
    assert proc.returncode == 0 and "not distributions" not in proc.stderr


def test_fourier_methods_plan_at_huge_epsilon_from_python():
    """The CLI caps epsilon at 100; from Python FT/MargHT must still not overflow."""
    import numpy as np

    from dpmarginals import Dataset, Domain, make

    data = Dataset(np.random.default_rng(0).integers(0, 2, (500, 4)),
                   Domain(tuple("abcd"), (2,) * 4))
    for name in ("ft", "marg_ht"):
        plan = make(name, epsilon=1000.0, k=2).plan(data.domain, data.n)
        assert np.isfinite(plan.params["var0"]) and plan.params["var0"] >= 0
