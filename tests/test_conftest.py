"""The shared ``needs_data`` marker: one skip reason that tells a contributor what to set."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_needs_data_skips_with_the_shared_reason(tmp_path):
    (tmp_path / "conftest.py").write_text((HERE / "conftest.py").read_text())
    (tmp_path / "test_x.py").write_text(
        "import pytest\n\n\n@pytest.mark.needs_data\ndef test_x():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "DPMARGINALS_DATA"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider",
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert "1 skipped" in proc.stdout, proc.stdout
    assert "set DPMARGINALS_DATA to a folder" in proc.stdout
    assert "`dpmarginals datasets` lists them and their public sources" in proc.stdout


def test_no_test_file_words_its_own_data_skip():
    own = re.compile(r"reason=.*(DPMARGINALS_DATA|shared/data)")
    for path in set(HERE.glob("test_*.py")) - {Path(__file__)}:
        assert not own.search(path.read_text()), f"{path.name}: use @pytest.mark.needs_data"
