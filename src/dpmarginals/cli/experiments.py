"""The ``dpmarginals experiment`` and ``dpmarginals synthesize`` subcommands.

``COMMANDS`` holds both as data (:mod:`.spec`); ``register(subparsers)`` adds them to the
``dpmarginals`` parser (the subparsers action of
:func:`dpmarginals.cli.commands.build_parser`, whose parser class prints one-line errors).
Errors a user can cause raise :class:`~dpmarginals.core.errors.DPMarginalsError`, which the
CLI prints as one line.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from ..core.errors import DPMarginalsError, describe_os_error
from ..synopsis.synthetic import SAMPLING
from .argtypes import positive_int as _positive_int
from .argtypes import seed as _seed
from .spec import Command, add_commands, arg

__all__ = ["COMMANDS", "register"]

_EXPERIMENT_HELP = """\
Reproduce a figure or table of the CALM (CCS 2018) and Cormode-Kulkarni-Srivastava
(SIGMOD 2018) evaluations on the real data sets (see `dpmarginals datasets`; set
$DPMARGINALS_DATA to the folder holding them), or run one of this project's own
benchmarks: `heldout` (issue #36: random Bayesian networks and real data sets no constant
was chosen on; reported, never tuned on), `heldout-latent` (a second family, latent-class
populations, first run on the release it reports), `adaptive`, `calm-pgm`, ... (--list). Writes
OUT/NAME/results.csv (one row per method x setting x repeat), the figure(s) as PNG and
summary.md (the numbers and the papers' orderings checked) -- OUT/NAME-quick/ with
--quick. An interrupted run resumes from the rows already written; the same --seed gives
the same numbers for any --jobs."""


def _cmd_experiment(args: argparse.Namespace) -> int:
    from ..experiments.registry import describe, get
    from ..experiments.runner import run_experiment

    if args.list or args.name is None:
        if args.name is None and not args.list:
            raise DPMarginalsError("name an experiment (dpmarginals experiment --list shows "
                                   "them)")
        rows = describe()
        width = max(len(n) for n, _, _ in rows)
        for name, paper, title in rows:
            print(f"{name:<{width}}  {title} [{paper}]")
        return 0
    experiment = get(args.name)
    if args.population == "full":
        if experiment.name != "calm-fig4":
            raise DPMarginalsError("--population full applies to calm-fig4 only (CALM planned "
                                   "for the panel's n, every user of the data set reporting)")
        experiment = get("calm-fig4-population")
    from ..experiments.preflight import check_ready

    check_ready(experiment, args.quick)  # extras and data files, before anything runs
    start = time.perf_counter()
    result = run_experiment(experiment, args.out, quick=args.quick, jobs=args.jobs,
                            seed=args.seed, fresh=args.fresh)
    elapsed = time.perf_counter() - start
    ok = int((result.frame["status"] == "ok").sum()) if len(result.frame) else 0
    print(f"{experiment.name}{' (quick)' if args.quick else ''}: {result.tasks_run} task(s) "
          f"run, {result.tasks_skipped} already done; {len(result.frame)} rows ({ok} ok) in "
          f"{elapsed:.1f} s")
    print(f"  results: {result.results}")
    for fig in result.figures:
        print(f"  figure:  {fig}")
    print(f"  summary: {result.summary}")
    return 0


def _cmd_synthesize(args: argparse.Namespace) -> int:
    import numpy as np

    from ..private_release import load_release
    from ..synopsis.synthetic import synthesize

    synopsis = load_release(args.synopsis)
    if not hasattr(synopsis, "marginal") or not hasattr(synopsis, "domain"):
        raise DPMarginalsError(f"{args.synopsis!r} is a k-tuple release (`central`): it lists "
                               "frequent tuples, not a model of the table, so it cannot be "
                               "sampled from")
    mark = synopsis.privacy
    if not mark.private and not args.simulation:
        raise DPMarginalsError(f"{args.synopsis!r} is not a private release ({mark.reason}); "
                               "add --simulation to sample from it anyway (the records are "
                               "then marked not private)")
    attrs = None
    if args.attributes:
        attrs = [a.strip() for a in args.attributes.split(",") if a.strip()]
    degree: Any = None if args.degree == "joint" else int(args.degree)
    rng = np.random.SeedSequence(args.seed) if args.seed is not None else None
    data = synthesize(synopsis, args.n, rng=rng, attributes=attrs, degree=degree,
                      sampling=args.sampling)
    out = Path(args.out)
    try:
        if out.suffix.lower() in (".parquet", ".pq"):
            from ..core.extras import require

            require("pyarrow", extra="engines", what="writing a Parquet file")
            data.to_frame(labels=True).to_parquet(out, index=False)
        else:
            data.to_frame(labels=True).to_csv(out, index=False)
    except OSError as exc:
        raise DPMarginalsError(f"cannot write {str(out)!r}: {describe_os_error(exc, out)}"
                               ) from None
    sidecar = out.with_name(out.name + ".privacy.json")
    sidecar.write_text(json.dumps({
        "synthetic_from": str(args.synopsis), "records": data.n,
        "privacy": mark.to_dict(), "note": "post-processing of the release: the same "
        "guarantee" if mark.private else "sampled from a file that is NOT private"}, indent=1))
    print(f"wrote {data.n} synthetic records over {data.d} attributes to {out} "
          f"({mark.describe()}; see {sidecar.name})")
    return 0


def _degree(text: str) -> str:
    if text == "joint":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or 'joint', got "
                                         f"{text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return str(value)


#: ``experiment`` and ``synthesize``, in the order ``dpmarginals --help`` lists them.
COMMANDS = (
    Command(
        "experiment", help="reproduce a figure/table of the papers (CSV + PNG + summary)",
        run=_cmd_experiment, description=_EXPERIMENT_HELP,
        epilog="Example: dpmarginals experiment calm-fig4 --quick --out results/",
        args=(
            arg("name", nargs="?", default=None,
                help="experiment name (see --list), e.g. calm-fig4, cormode-fig4"),
            arg("--list", action="store_true", help="list the experiments and exit"),
            arg("--out", default="results",
                help="output folder (default: results); files go to OUT/NAME[-quick]/"),
            arg("--quick", action="store_true",
                help="a reduced grid (fewer repeats/queries, smaller n) that finishes in a "
                "few minutes, as CI runs it"),
            arg("--jobs", type=_positive_int, default=1,
                help="worker processes (default 1); results do not depend on it"),
            arg("--seed", type=_seed, default=0,
                help="simulation seed (default 0): users, reports and queries; for "
                "heldout also the 16 networks (heldout-latent its 12 models), so each --seed "
                "is a new held-out draw"),
            arg("--population", choices=("panel", "full"), default="panel",
                help="calm-fig4: 'full' plans CALM for each panel's n but lets every user "
                "of the data set report (~1M: the reading that reproduces the paper's "
                "0.0055 in Fig. 4b; docs/results.md); default: the panel's n users"),
            arg("--fresh", action="store_true",
                help="discard the results already written instead of resuming"),
        ),
    ),
    Command(
        "synthesize", help="sample synthetic records from a saved synopsis",
        run=_cmd_synthesize,
        description="Sample N synthetic records from a release (or a simulation saved by "
        "`run --simulation --out`; dpmarginals.synopsis.synthetic.synthesize): attribute by "
        "attribute by the chain rule over a Bayesian network whose conditionals are the "
        "synopsis's marginals (each attribute has up to --degree parents, chosen along the "
        "Chow-Liu tree of the synopsis's 2-way marginals), or from the joint marginal with "
        "--degree joint. Post-processing only: no privacy budget is spent. Writes the "
        "data's own values as CSV (or Parquet), and FILE.privacy.json beside it.",
        args=(
            arg("synopsis", help="synopsis JSON file"),
            arg("--n", type=_positive_int, required=True, help="number of records"),
            arg("--simulation", action="store_true",
                help="sample from a synopsis that is not a private release (a simulation)"),
            arg("--out", required=True, help="output file (.csv or .parquet)"),
            arg("--seed", type=_seed, default=None,
                help="make the sampling reproducible (default: fresh randomness)"),
            arg("--attributes", default=None,
                help="comma-separated attributes to synthesize (default: all)"),
            arg("--degree", type=_degree, default="2",
                help="parents per attribute (default 2), or 'joint' to sample the joint "
                "marginal of all the attributes"),
            arg("--sampling", choices=SAMPLING, default="rounded",
                help="rounded (default): the records sharing the parents' values take each "
                "value of the next attribute floor or ceil of its expected count, as "
                "private-pgm does; iid: independent draws (more sampling error)"),
        ),
    ),
)


def register(subparsers: Any) -> None:
    """Add ``experiment`` and ``synthesize`` to the ``dpmarginals`` command."""
    add_commands(subparsers, COMMANDS)
