"""Issue #16.4: a slim core.  Each optional dependency, when missing, is one line naming its
extra (``pip install -e '.[EXTRA]'``); the core commands need none of them."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from command_line import one_error_line
from dpmarginals.core.extras import EXTRAS, MissingExtraError

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(__import__("dpmarginals").__file__).resolve().parents[1]  # this tree's code

# A sys.meta_path finder refusing the named top-level modules, as if they were not installed.
BLOCK = """
import sys
BLOCKED = {blocked!r}
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in BLOCKED:
            raise ModuleNotFoundError(f'No module named {{name!r}} (refused)', name=name)
sys.meta_path.insert(0, Refuse())
from dpmarginals.cli import main
sys.argv = ['dpmarginals', *sys.argv[1:]]
sys.exit(main())
"""
OPTIONAL = sorted({m for modules in EXTRAS.values() for m in modules}
                  | {"jaxlib", "statsmodels", "patsy", "requests"})


def cli_without(blocked, *args, cwd=None):
    """``dpmarginals ARGS`` in a subprocess where the ``blocked`` modules cannot be imported."""
    return subprocess.run([sys.executable, "-c", BLOCK.format(blocked=set(blocked)),
                           *map(str, args)], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(SRC)})


def _extra_line(line: str, extra: str) -> None:
    assert f"optional {extra!r} extra" in line and f".[{extra}]" in line, line


def test_extras_named_in_errors_are_the_pyproject_extras():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert set(EXTRAS) <= set(extras)
    assert {"all", "test"} <= set(extras) and "dpmarginals[all]" in extras["test"]
    core = " ".join(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "dependencies"])
    for heavy in ("statsmodels", "matplotlib", "duckdb", "pyarrow", "opendp", "jax",
                  "pyspark", "pooch"):
        assert heavy not in core, heavy


def test_core_commands_work_without_any_optional_module(tmp_path):
    rng = np.random.default_rng(0)
    pd.DataFrame(rng.integers(0, 2, (400, 4)), columns=list("abcd")).to_csv(
        tmp_path / "d.csv", index=False)
    (tmp_path / "d.json").write_text('{"a": 2, "b": 2, "c": 2, "d": 2}')
    assert cli_without(OPTIONAL, "--help").returncode == 0
    proc = cli_without(OPTIONAL, "release", "d.csv", "--domain", "d.json", "--method", "calm",
                       "--epsilon", 1, "--k", 2, "--out", "r.json", cwd=tmp_path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    proc = cli_without(OPTIONAL, "query", "r.json", "--attributes", "a,b", "--format", "csv",
                       cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stderr
    proc = cli_without(OPTIONAL, "plan", "--d", 4, "--epsilon", 1, "--k", 2, "--n", 400,
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_gated_commands_name_their_extra_on_one_line(tmp_path):
    _extra_line(one_error_line(cli_without({"statsmodels"}, "demo")), "demo")
    _extra_line(one_error_line(cli_without({"statsmodels"}, "datasets", "--export", "randhie",
                                           "--out", tmp_path / "p.csv")), "demo")
    (tmp_path / "d.parquet").write_bytes(b"PAR1")
    _extra_line(one_error_line(cli_without(
        {"pyarrow", "fastparquet"}, "release", tmp_path / "d.parquet", "--domain-from-data",
        "--epsilon", 1, "--out", tmp_path / "r.json")), "engines")
    _extra_line(one_error_line(cli_without({"fastapi", "uvicorn"}, "serve", "--db",
                                           tmp_path / "s.db")), "service")


def _missing(monkeypatch, *modules):
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError


@pytest.mark.parametrize("extra, modules, call", [
    ("engines", ("duckdb",), lambda: __import__(
        "dpmarginals.engines.duckdb_engine", fromlist=["x"]).connect()),
    ("engines", ("pyarrow", "pyarrow.parquet"), lambda: __import__(
        "dpmarginals.engines.parquet", fromlist=["x"]).pa.table),
    ("central", ("opendp", "opendp.prelude"), lambda: __import__(
        "dpmarginals.central.noise", fromlist=["x"]).OpenDPNoise()),
    ("plots", ("matplotlib",), lambda: __import__(
        "dpmarginals.experiments.plots", fromlist=["x"])._plt()),
    ("demo", ("statsmodels", "statsmodels.datasets", "statsmodels.datasets.randhie"),
     lambda: __import__("dpmarginals.datasets.builtin", fromlist=["x"]).randhie_frame()),
    ("datasets", ("pooch",), lambda: __import__(
        "dpmarginals.datasets.files", fromlist=["x"]).pooch.retrieve),
    ("tables", ("polars",), lambda: __import__(
        "dpmarginals.central.opendp_tables", fromlist=["x"]).require_tables()),
    ("pgm", ("jax", "mbi"), lambda: __import__(
        "dpmarginals.inference.pgm", fromlist=["x"]).require_mbi()),
    ("spark", ("pyspark", "pyspark.sql"), lambda: __import__(
        "dpmarginals.engines.spark_engine", fromlist=["x"]).require_pyspark()),
])
def test_a_missing_module_is_one_line_naming_its_extra(monkeypatch, extra, modules, call):
    _missing(monkeypatch, *modules)
    with pytest.raises(Exception) as info:
        call()
    message = str(info.value)
    assert isinstance(info.value, MissingExtraError), repr(info.value)
    assert "\n" not in message
    _extra_line(message, extra)


@pytest.mark.parametrize("method, blocked, extra", [
    ("aim", {"polars"}, "tables"),
    ("aim", {"opendp"}, "tables"),
    ("aim", {"mbi", "jax", "jaxlib"}, "tables"),
    ("mst", {"polars"}, "tables"),
    ("priview", {"opendp"}, "central"),
    ("residual", {"opendp"}, "central"),
])
def test_every_central_method_without_its_extra_is_one_line_on_the_command(
        tmp_path, method, blocked, extra):
    """Issue 35: `release --model central --method M` itself, in a process where the extra's
    modules cannot be imported, prints one line naming the extra (no traceback), before
    reading the data."""
    pd.DataFrame(np.random.default_rng(0).integers(0, 2, (400, 3)), columns=list("abc")
                 ).to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "d.json").write_text('{"a": 2, "b": 2, "c": 2}')
    delta = [] if method == "priview" else ["--delta", "1e-9"]
    proc = cli_without(blocked, "release", "d.csv", "--domain", "d.json", "--model", "central",
                       "--method", method, "--epsilon", 1, *delta, "--out", "r.json",
                       cwd=tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    _extra_line(one_error_line(proc), extra)
    assert not (tmp_path / "r.json").exists()


def test_the_k_tuple_command_without_opendp_is_one_line(tmp_path):
    (tmp_path / "r.dat").write_text("1 2 3\n1 2\n" * 50)
    proc = cli_without({"opendp"}, "central", "--data", tmp_path / "r.dat", "--epsilon", 1,
                       "--delta", "1e-6", "--max-k", 2)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    _extra_line(one_error_line(proc), "central")
