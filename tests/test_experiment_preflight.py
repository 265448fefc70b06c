"""`dpmarginals experiment` checks its extras and data files before running anything
(issue #33, point 6).

Before, without matplotlib it ran the whole grid and failed at the figure; with one of its
data sets missing it ran the others' tasks first.  Now nothing runs (no output folder is
made) and the one-line error names the extra, or the file and ``$DPMARGINALS_DATA``.
"""

from __future__ import annotations

import os

import pytest

from command_line import dpmarginals, one_error_line
from dpmarginals.experiments.registry import EXPERIMENTS, get


def test_without_matplotlib_nothing_runs(tmp_path):
    """A stand-in ``matplotlib`` that cannot be imported, first on the path."""
    fake = tmp_path / "fake" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("not installed")\n')
    path = os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])
    out = tmp_path / "out"
    proc = dpmarginals("experiment", "cormode-b2", "--quick", "--out", out,
                       env={"PYTHONPATH": path})
    one_error_line(proc, "experiment 'cormode-b2'", "'plots' extra", "nothing was run")
    assert not out.exists()


@pytest.mark.needs_data
def test_a_missing_data_file_is_named_before_anything_runs(tmp_path):
    """msnbc present, nltcs missing: cormode-chowliu reads both; the error names nltcs's
    file and $DPMARGINALS_DATA, and no task of msnbc ran."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "msnbc").symlink_to(os.path.join(os.environ["DPMARGINALS_DATA"], "msnbc"))
    out = tmp_path / "out"
    proc = dpmarginals("experiment", "cormode-chowliu", "--quick", "--out", out,
                       env={"DPMARGINALS_DATA": str(data), "DPMARGINALS_OFFLINE": "1",
                            "XDG_CACHE_HOME": str(tmp_path / "cache")})
    one_error_line(proc, "nltcs/nltcs.csv.gz", "$DPMARGINALS_DATA", "nothing was run")
    assert not out.exists()


def test_every_experiment_names_its_data_sets_and_extras():
    """The checks cover every registered experiment's grids (quick and full)."""
    from dpmarginals.datasets import get_info
    from dpmarginals.experiments.preflight import data_sets, needs

    for name, experiment in EXPERIMENTS.items():
        assert ("matplotlib", "plots") in needs(name)
        for quick in (True, False):
            for data in data_sets(experiment, quick):
                assert get_info(data).files, (name, data)
    assert set(data_sets(get("calm-pgm"), True)) == {"adult3", "br2000", "kosarak", "msnbc"}
    assert ("mbi", "pgm") in needs("calm-pgm") and ("sklearn", "experiments") in needs(
        "calm-fig6")


@pytest.mark.needs_data  # check_ready also finds calm-pgm's quick data sets
def test_the_check_imports_mbi_in_64_bit_mode():
    """mbi warns at import when JAX is in float32 mode ("can cause estimation algorithms to
    stall"); the check used to import it first, so every calm-pgm, heldout and
    central-tables run printed that warning although the fits run in 64-bit."""
    pytest.importorskip("mbi")
    import subprocess
    import sys

    code = ("import warnings; warnings.simplefilter('always');"
            "from dpmarginals.experiments.preflight import check_ready;"
            "from dpmarginals.experiments.registry import get;"
            "check_ready(get('calm-pgm'), True);"
            "import jax, mbi; print('x64', jax.config.jax_enable_x64)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "DPMARGINALS_OFFLINE": "1"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "x64 True" in proc.stdout
    assert "float32" not in proc.stderr and "compilation cache" not in proc.stderr
