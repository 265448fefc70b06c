"""Issue #16: the package layout follows the spine, with no import cycle between packages."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "dpmarginals"


def _imports(path: Path) -> set[str]:
    """Every dpmarginals module ``path`` imports, at any depth (lazy imports included)."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    package = parts if parts[-1] == "__init__" else parts[:-1]
    package = [p for p in package if p != "__init__"]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                found.add(".".join(base + ([node.module] if node.module else [])))
            elif (node.module or "").startswith("dpmarginals"):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("dpmarginals")}
    return found


def _part(parts: tuple[str, ...] | list[str]) -> str | None:
    """The part of dpmarginals a module belongs to: its package, or the top-level module
    itself (``methods``, ``aggregation``, ...); None for ``dpmarginals/__init__.py``."""
    if not parts or parts[0] == "__init__":
        return None
    return parts[0]


def package_graph() -> dict[str, set[str]]:
    """Part -> the parts it imports: every package and every top-level module, none exempt
    (the package's ``__init__`` re-exports the public names and is the one root)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        source = _part(path.relative_to(PACKAGE).with_suffix("").parts)
        if source is None:
            continue
        for target in _imports(path):
            parts = target.split(".")[1:]
            if parts and not (PACKAGE / parts[0]).is_dir() and not (
                    PACKAGE / f"{parts[0]}.py").is_file():
                continue
            dest = _part(parts)
            if dest is not None and dest != source:
                graph[source].add(dest)
    return graph


def test_no_import_cycle_between_packages():
    graph = package_graph()
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            assert state.get(nxt) != 1, f"import cycle: {' -> '.join([*path, nxt])}"
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_every_local_randomizer_lives_in_protocol():
    """One randomizer per report format (issue 31): no module outside protocol/ draws a
    device's random words or defines a ``perturb`` (the methods in local/ used to keep
    their own copies of ht's and cms's randomizers: ``src.random(...) >= p``)."""
    pattern = re.compile(r"def perturb\(|random_words\(|\.words\(|"
                         r"\b(src|source)\.(random|integers)\(|"
                         r"client_rng\([^)]*\)\.(random|integers)\(")
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "protocol" or rel == Path("core/randomness.py"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if pattern.search(line):
                offenders.append(f"{rel}:{number}: {line.strip()}")
    assert offenders == []


def test_the_client_needs_only_numpy_and_the_standard_library():
    code = ("import sys, dpmarginals.protocol.device, dpmarginals.protocol.http, "
            "dpmarginals.protocol.simulate; "
            "heavy = {'pandas', 'scipy', 'fastapi', 'duckdb', 'pyarrow', 'opendp', 'jax', "
            "'matplotlib', 'statsmodels', 'pyspark', 'mbi', 'tqdm'}; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]", out


# A sys.meta_path finder that refuses every module outside the standard library and ALLOWED,
# as on a device that has only numpy: importing the rest fails like an absent package.
ONLY_ALLOWED = """
import sys
ALLOWED = {allowed!r}
class Refuse:
    def find_spec(self, name, path=None, target=None):
        top = name.split('.')[0]
        if top in sys.stdlib_module_names or top in ALLOWED:
            return None
        raise ModuleNotFoundError(f'No module named {{name!r}} (refused)', name=name)
sys.meta_path.insert(0, Refuse())
"""


# What a device installs: numpy, and rfc8785 (pure Python: the plans' canonical JSON).
DEVICE = {"numpy", "rfc8785", "dpmarginals"}


def test_the_client_makes_reports_with_only_numpy_installed():
    code = ONLY_ALLOWED.format(allowed=DEVICE) + """
from dpmarginals.core.domain import Domain
from dpmarginals.protocol.checks import check_plan
from dpmarginals.protocol.device import Device
from dpmarginals.protocol.simulate import simulate_reports
from dpmarginals.protocol.plan import GroupSpec, Plan
import numpy as np
plan = Plan("calm", 1.0, Domain(("sex", "age"), (2, 3)),
            (GroupSpec(("sex", "age"), "oue", 1.0, 6), GroupSpec(("age",), "grr", 1.0, 3)),
            longitudinal=4.0)
check_plan(plan, max_epsilon=1.0)
phone = Device(None, max_epsilon=1.0, max_total_epsilon=3.0)
report = phone.report(plan, {"sex": 1, "age": 2}, origin="https://x", campaign="c")
many = simulate_reports(plan, np.array([[0, 1], [1, 2]]), max_epsilon=1.0)
print(report["group"] in (0, 1), len(report["report_id"]), type(many).__name__)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("True 32"), proc.stdout


def test_the_client_makes_every_report_format_from_the_plan_alone_with_only_numpy():
    # ht (InpHT, MargHT), cms (InpHTCMS), em (EM): the plan's JSON is all the device gets.
    import json

    from dpmarginals.core.domain import Domain
    from dpmarginals.methods import make

    dom = Domain(("a", "b", "c"), (2, 3, 2))
    plans = [make(name, epsilon=1.0, k=2).plan(dom, 10_000).to_dict()
             for name in ("inp_ht", "marg_ht", "inp_htcms", "em")]
    code = ONLY_ALLOWED.format(allowed=DEVICE) + f"""
import json
import numpy as np
from dpmarginals.protocol.simulate import simulate_reports
from dpmarginals.protocol.reports import support_counts
from dpmarginals.protocol.plan import Plan
for spec in json.loads({json.dumps(json.dumps(plans))}):
    reports = simulate_reports(spec, np.array([[0, 1, 1], [1, 2, 0]] * 50), max_epsilon=1.0)
    counts = support_counts(Plan.from_dict(spec), reports)
    print(spec["method"], counts.n, sum(int(s.sum()) for s in counts.supports) > 0)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:4] == ["inp_ht 100 True", "marg_ht 100 True",
                                           "inp_htcms 100 True", "em 100 True"], proc.stdout
