"""Run the real ``dpmarginals`` command in a subprocess and check its one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def dpmarginals(*args: object, env: dict[str, str] | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m dpmarginals.cli ARGS`` with the current environment plus ``env``."""
    return subprocess.run([sys.executable, "-m", "dpmarginals.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def one_error_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    """Assert a non-zero exit with exactly one ``dpmarginals: error:`` line naming ``words``."""
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("dpmarginals: error:"), proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def central_ktuples(tmp_path: Path, frame: object) -> Path:
    """Write ``frame`` (a DataFrame of records) as a CSV and release its k-tuples with
    ``dpmarginals central`` (eps 2, delta 1e-6, up to pairs); the release's path."""
    csv, out = tmp_path / "baskets.csv", tmp_path / "k.json"
    frame.to_csv(csv, index=False)
    proc = dpmarginals("central", "--data", csv, "--epsilon", 2, "--delta", 1e-6, "--max-k", 2,
                       "--out", out)
    assert proc.returncode == 0, proc.stderr
    return out
