"""The docs' install commands work from a clone (dpmarginals is not on the public index)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_docs_install_extras_from_the_checkout():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for doc in sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text()
        # commands (a line or an inline code span), not quoted error messages
        assert not re.search(r"(^|`)pip install ['\"]?dpmarginals\[", text, re.M), (
            f"{doc.name}: `pip install dpmarginals[...]` fails from a clone; use "
            "`pip install -e \".[extra]\"` from the repository root")
        for extra in re.findall(r"pip install -e ['\"]\.\[(\w+)\]['\"]", text):
            assert extra in extras, f"{doc.name}: no extra {extra!r} in pyproject.toml"
