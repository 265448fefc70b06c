"""Central DP on a table: our AIM, MST and ResidualPlanner beside their peers (issue 35).

On Adult (the hd-datasets version, ``adult-pgm``: 48,842 rows, 15 attributes of 2-42
values), epsilon 1, delta 1e-9, the workload of all 455 3-way marginals, ``--seeds`` seeds
per implementation:

* **ours**: ``aim``, ``mst``, ``residual`` (``dpmarginals.methods.make``; noise from
  OpenDP, which takes no seed, so "seed" only numbers the run), with ``--accountant``:
  ``rdp`` gives our methods the same rho as the peers (Canonne-Kamath-Steinke's
  conversion, 0.014973 at eps 1, delta 1e-9), ``zcdp`` is our default (0.011781);
* **smartnoise-synth** (``snsynth.aim.AIMSynthesizer``, ``snsynth.mst.MSTSynthesizer``),
  run by ``--peer-python`` (a separate venv; the setting records its version).  1.0.8, the
  newest, pins ``mbi>=1.1,<2`` (private-pgm's JAX rewrite) and, through smartnoise-sql,
  ``opendp<0.15``, against our ``mbi>=2`` and ``opendp>=0.16``; 1.0.6, the last on
  private-pgm's numpy ``FactoredInference``, runs with the numpy-era ``mbi`` installed from
  a checkout of private-pgm at 514dea3 (``pip install --no-deps CHECKOUT``),
  smartnoise-sql 1.0.7, ``opendp<0.13`` and ``scipy<1.14`` (its ``Identity`` operator
  gives a class as dtype, which newer scipy's ``lsmr`` refuses); AIM and MST need neither
  opacus nor pac-synth (``--no-deps``);
* **private-pgm** ``mechanisms/aim.py`` (the authors' reference), run from a checkout
  given by ``--private-pgm DIR`` with that checkout's own ``src/mbi``, by
  ``--pgm-python``.  At 514dea3 (2024-11-09, the last commit before the JAX rewrite: the
  code behind the AIM paper's figures; the setting says ``mbi=numpy``) it needs numpy,
  scipy, pandas<3, networkx, attrs and autodp; ``hdmm`` (not on PyPI) is only its
  ``Identity(n)``, which the worker supplies as scipy's sparse identity.  At the JAX
  rewrite's head it needs jax 0.7.0, chex 0.1.90, optax, networkx, pandas<3 (its mbi fails
  under jax 0.10 with a tracer error) and is far slower: it compiles factor operations one
  at a time (on Adult 5,720 CPU-s for 46% of its budget, where 514dea3 spends 1,012 CPU-s
  on the whole release).

Each run is a subprocess (one per implementation and seed; the results are appended to
``--out`` as JSON lines, and a rerun skips what is there).  Measured per run: the workload
error (mean over the workload of ``0.5 ||p - p_hat||_1``, the AIM paper's) of the model's
marginals and of ``n`` synthetic rows sampled from it, the CPU seconds of the fit (the
process's user + system time, all threads) and the peak resident memory of the process.

    PYTHONPATH=src python benchmarks/central_peers.py --out results/peers.jsonl \\
        --peer-python /path/to/peers-venv/bin/python --private-pgm /path/to/private-pgm
    PYTHONPATH=src python benchmarks/central_peers.py --out results/peers.jsonl --report

Flags: ``--impl`` (comma list of ours-aim, ours-mst, ours-residual, smartnoise-aim,
smartnoise-mst, pgm-aim), ``--seeds``, ``--epsilon``, ``--delta``, ``--k``,
``--max-model-size`` and ``--iters`` (AIM's caps; the peers' defaults are 80 MB and
1000 mirror-descent steps, which ``ours-aim`` uses unless told), ``--timeout`` (seconds
of wall-clock per run).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

IMPLS = ("ours-aim", "ours-mst", "ours-residual", "smartnoise-aim", "smartnoise-mst",
         "pgm-aim")


# -- the worker: runs in any of the three environments (numpy + pandas only at the top) --
def workload_error(truth: dict, answers: dict) -> float:
    """Mean over the workload of 0.5 ||p - q||_1 between normalized tables."""
    errs = []
    for key, t in truth.items():
        q = np.asarray(answers[key], dtype=np.float64).ravel()
        errs.append(0.5 * np.abs(t / t.sum() - q / q.sum()).sum())
    return float(np.mean(errs))


def marginals_of(codes: np.ndarray, sizes: list[int], workload: list[tuple[int, ...]]) -> dict:
    out = {}
    for w in workload:
        idx = np.ravel_multi_index([codes[:, j] for j in w], [sizes[j] for j in w])
        out[w] = np.bincount(idx, minlength=int(np.prod([sizes[j] for j in w]))).astype(float)
    return out


def _worker(args: argparse.Namespace) -> None:
    import pandas as pd

    frame = pd.read_csv(Path(args.data) / "codes.csv")
    sizes = json.loads((Path(args.data) / "sizes.json").read_text())
    names = list(frame.columns)
    codes = frame.to_numpy(np.int64)
    workload = list(itertools.combinations(range(len(names)), args.k))
    truth = marginals_of(codes, sizes, workload)
    np.random.seed(args.seed)  # noqa: NPY002 - the peers draw from numpy's global generator
    cpu = time.process_time()
    wall = time.perf_counter()
    model_answers, synth = RUNNERS[args.worker](args, frame, names, sizes, workload)
    fit_cpu = time.process_time() - cpu
    fit_wall = time.perf_counter() - wall
    result = {"impl": args.worker, "seed": args.seed, "epsilon": args.epsilon,
              "delta": args.delta, "k": args.k, "fit_cpu_seconds": fit_cpu,
              "fit_wall_seconds": fit_wall,
              "model_error": workload_error(truth, model_answers) if model_answers else None,
              "synthetic_error": (workload_error(truth, marginals_of(synth, sizes, workload))
                                  if synth is not None else None)}
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(result), flush=True)


def _ours(args, frame, names, sizes, workload):
    from dpmarginals.core.dataset import Dataset
    from dpmarginals.core.domain import Domain
    from dpmarginals.methods import make
    from dpmarginals.synopsis.synthetic import synthesize

    domain = Domain(tuple(names), tuple(sizes))
    data = Dataset(frame.to_numpy(np.int64), domain, name="adult-pgm")
    method = args.worker.removeprefix("ours-")
    params = {"epsilon": args.epsilon, "delta": args.delta, "k": args.k,
              "accountant": args.accountant}
    if method == "aim":
        params.update(max_model_size=args.max_model_size, iters=args.iters)
    synopsis = make(method, **params).run(data)
    answers = {w: synopsis.marginal([names[j] for j in w]).values for w in workload}
    rows = synthesize(synopsis, len(frame), rng=args.seed).codes
    return answers, rows


def _smartnoise(args, frame, names, sizes, workload):
    from snsynth.aim import AIMSynthesizer
    from snsynth.mst import MSTSynthesizer

    if args.worker == "smartnoise-aim":
        synth = AIMSynthesizer(epsilon=args.epsilon, delta=args.delta, degree=args.k,
                               max_model_size=args.max_model_size, max_cells=10**12)
    else:
        synth = MSTSynthesizer(epsilon=args.epsilon, delta=args.delta)
    synth.fit(frame, categorical_columns=names)
    rows = synth.sample(len(frame))
    rows = rows.to_numpy(np.int64) if hasattr(rows, "to_numpy") else np.asarray(rows, np.int64)
    answers = None
    if args.worker == "smartnoise-aim":  # MST's model is over its compressed domain
        # the model's columns are the transformer's label codes: put its tables back on
        # the original codes through each column's category order
        model = synth.synthesizer
        cats = [t.categories for t in synth._transformer.transformers]
        answers = {}
        for w in workload:
            table = np.asarray(model.project(tuple(f"col{j}" for j in w)).datavector())
            table = table.reshape([len(cats[j]) for j in w])
            full = np.zeros([sizes[j] for j in w])
            full[np.ix_(*[np.asarray(_category_codes(cats[j]), np.int64) for j in w])] = table
            answers[w] = full
    return answers, rows


def _category_codes(categories):
    """The original codes of a smartnoise LabelTransformer's categories, in label order."""
    if isinstance(categories, dict):
        ordered = sorted(categories.items(), key=lambda kv: kv[1])
        return [int(k) for k, _ in ordered]
    return [int(c) for c in categories]


def _pgm_backend(checkout: str) -> str:
    """``jax`` for private-pgm since its 2024-11 rewrite (395885b), ``numpy`` before it."""
    factor = (Path(checkout) / "src" / "mbi" / "factor.py").read_text()
    return "jax" if "import jax" in factor else "numpy"


def _pgm_aim(args, frame, names, sizes, workload):
    root = Path(args.private_pgm)
    sys.path[:0] = [str(root / "src"), str(root / "mechanisms"), str(root)]
    try:
        import hdmm  # noqa: F401 - the numpy-era aim.py measures through hdmm's Identity
    except ImportError:  # hdmm is not on PyPI; its Identity(n) is the n x n identity
        import types

        from scipy import sparse

        matrix = types.ModuleType("hdmm.matrix")
        matrix.Identity = lambda n: sparse.eye(n, format="csr")
        sys.modules["hdmm"] = types.ModuleType("hdmm")
        sys.modules["hdmm.matrix"] = matrix
    # autodp 0.2.3.1's privacy_calibrator, imported first, hits its own circular import
    # (the jax-era aim.py does not use autodp)
    with contextlib.suppress(ImportError):
        import autodp.rdp_acct  # noqa: F401
    from aim import AIM  # the checkout's mechanisms/aim.py
    from mbi import Dataset, Domain

    data = Dataset(frame, Domain(names, sizes))
    cliques = [(tuple(names[j] for j in w), 1.0) for w in workload]
    model, synth = AIM(args.epsilon, args.delta, max_model_size=args.max_model_size,
                       max_iters=args.iters).run(data, cliques, num_synth_rows=len(frame))
    answers = {w: np.asarray(model.project(tuple(names[j] for j in w)).datavector())
               for w in workload}
    return answers, synth.df[names].to_numpy(np.int64)


RUNNERS = {"ours-aim": _ours, "ours-mst": _ours, "ours-residual": _ours,
           "smartnoise-aim": _smartnoise, "smartnoise-mst": _smartnoise,
           "pgm-aim": _pgm_aim}


# -- the driver ---------------------------------------------------------------------------
def _export(directory: Path) -> None:
    from dpmarginals.datasets import load

    data = load("adult-pgm")
    import pandas as pd

    pd.DataFrame(data.codes, columns=list(data.domain.attributes)).to_csv(
        directory / "codes.csv", index=False)
    (directory / "sizes.json").write_text(json.dumps([int(s) for s in data.domain.sizes]))


def _done(path: Path) -> set[tuple[str, int, str]]:
    if not path.exists():
        return set()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["impl"], r["seed"], r.get("setting", "")) for r in rows}


@functools.cache
def _peer_version(python: str) -> str:
    """smartnoise-synth's version in the peer venv (1.0.8 runs on private-pgm's JAX-era mbi
    1.1, 1.0.6 on its numpy-era ``FactoredInference``)."""
    code = "import importlib.metadata as m; print(m.version('smartnoise-synth'))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


def _setting(args: argparse.Namespace, impl: str) -> str:
    if impl.startswith("ours"):
        extra = ""
        if impl == "ours-aim":
            extra = f",mms={args.max_model_size},iters={args.iters}"
        elif impl == "ours-mst":  # MST's own default (5000 steps, as its paper's code)
            from dpmarginals.central.contingency import MST

            extra = f",iters={MST.iters}"
        return f"accountant={args.accountant}{extra}"
    if impl.startswith("smartnoise"):
        version = _peer_version(args.peer_python) if args.peer_python else "?"
        mms = f",mms={args.max_model_size},iters=1000" if impl == "smartnoise-aim" else ""
        return f"snsynth={version}{mms}"
    if impl == "pgm-aim":
        numpy = args.private_pgm and _pgm_backend(args.private_pgm) == "numpy"
        backend = ",mbi=numpy" if numpy else ""
        return f"mms={args.max_model_size},iters={args.iters}{backend}"
    return ""


def drive(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = _done(out)
    with tempfile.TemporaryDirectory() as tmp:
        _export(Path(tmp))
        for impl, seed in itertools.product(args.impl.split(","), range(args.seeds)):
            setting = _setting(args, impl)
            if (impl, seed, setting) in done:
                continue
            python = {"smartnoise-aim": args.peer_python, "smartnoise-mst": args.peer_python,
                      "pgm-aim": args.pgm_python or sys.executable}.get(impl, sys.executable)
            if impl.startswith("smartnoise") and not python:
                print(f"skip {impl}: no --peer-python", file=sys.stderr)
                continue
            if impl == "pgm-aim" and not args.private_pgm:
                print(f"skip {impl}: no --private-pgm checkout", file=sys.stderr)
                continue
            cmd = [python, __file__, "--worker", impl, "--data", tmp, "--seed", str(seed),
                   "--epsilon", str(args.epsilon), "--delta", str(args.delta),
                   "--k", str(args.k), "--max-model-size", str(args.max_model_size),
                   "--iters", str(args.iters), "--accountant", args.accountant]
            if args.private_pgm:
                cmd += ["--private-pgm", args.private_pgm]
            env = dict(os.environ)
            if python != sys.executable:
                env.pop("PYTHONPATH", None)
            started = time.perf_counter()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                      timeout=args.timeout)
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                if not lines:
                    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                    row = {"impl": impl, "seed": seed, "error": " | ".join(tail)}
                else:
                    row = json.loads(lines[-1][7:])
            except subprocess.TimeoutExpired:
                row = {"impl": impl, "seed": seed,
                       "error": f"not finished after {args.timeout} s wall"}
            row["setting"] = setting
            row["wall_seconds"] = time.perf_counter() - started
            row["load_average"] = os.getloadavg()[0]
            with out.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)


def report(path: Path) -> None:
    """The markdown table: mean (sd) over seeds per implementation and setting."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["impl"], r.get("setting", "")), []).append(r)
    print("| implementation | setting | runs | model error | synthetic-rows error | "
          "fit CPU s | peak MB |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (impl, setting), rs in sorted(groups.items()):
        ok = [r for r in rs if "error" not in r]

        def cell(key: str, fmt: str, runs: list[dict] = ok) -> str:
            vals = [r[key] for r in runs if r.get(key) is not None]
            if not vals:
                return "-"
            sd = f" ({np.std(vals):{fmt}})" if len(vals) > 1 else ""
            return f"{np.mean(vals):{fmt}}{sd}"

        failed = [r["error"] for r in rs if "error" in r]
        note = f" ({len(failed)} failed: {failed[0][:60]})" if failed else ""
        print(f"| {impl} | {setting} | {len(ok)}{note} | {cell('model_error', '.4f')} | "
              f"{cell('synthetic_error', '.4f')} | {cell('fit_cpu_seconds', '.0f')} | "
              f"{cell('peak_rss_mb', '.0f')} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="results/central_peers.jsonl")
    p.add_argument("--impl", default=",".join(IMPLS))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-9)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--max-model-size", type=float, default=80.0)
    p.add_argument("--iters", type=int, default=1000)
    p.add_argument("--accountant", choices=("zcdp", "rdp"), default="rdp")
    p.add_argument("--peer-python", default=None)
    p.add_argument("--private-pgm", default=None)
    p.add_argument("--pgm-python", default=None)
    p.add_argument("--timeout", type=float, default=4 * 3600)
    p.add_argument("--report", action="store_true")
    p.add_argument("--worker", choices=IMPLS, default=None, help=argparse.SUPPRESS)
    p.add_argument("--data", default=None, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        _worker(args)
    elif args.report:
        report(Path(args.out))
    else:
        drive(args)


if __name__ == "__main__":
    main()
