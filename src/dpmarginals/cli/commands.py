"""The ``dpmarginals`` command.

Every error a user can cause prints one line, ``dpmarginals: error: ...``, and exits 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..central.accounting import check_delta
from ..core.errors import DPMarginalsError, check_writable
from ..synopsis.stderr import INTERACTION_DECAY, REPLICATES
from .argtypes import OneLineParser, number_in, validated
from .argtypes import epsilon as _epsilon
from .argtypes import open_fraction as _fraction
from .argtypes import positive_int as _positive_int
from .argtypes import seed as _seed
from .central import CENTRAL
from .engines import ESTIMATE
from .experiments import COMMANDS as EXPERIMENT_COMMANDS
from .plans import longitudinal as _longitudinal
from .service import COMMANDS as SERVICE_COMMANDS
from .spec import Command, Later, add_commands, arg

__all__ = ["main"]

_delta = validated(check_delta)
_positive_float = number_in(0.0, float("inf"))


# -- commands -------------------------------------------------------------------------
def _cmd_datasets(args: argparse.Namespace) -> int:
    from ..datasets import describe, load

    if args.export is not None:
        if args.out is None:
            raise DPMarginalsError("--export needs --out FILE.csv")
        data = load(args.export, data_home=args.data_home)
        out = Path(args.out)
        domain_path = out.with_name(out.name.split(".")[0] + "-domain.json")
        try:
            data.to_frame(labels=True).to_csv(out, index=False)
            data.domain.save(domain_path)
        except OSError as exc:
            raise DPMarginalsError(f"cannot write {str(out)!r}: {exc.strerror or exc}") from None
        print(f"wrote {data.n:,} rows of {data.name} ({', '.join(data.domain.attributes)}) to "
              f"{out}, its domain to {domain_path}")
        return 0
    frame = describe(data_home=args.data_home)
    if args.json:
        print(frame.to_json(orient="records"))
    else:
        print(frame.to_string(index=False))
    return 0


def _cmd_plan(args: argparse.Namespace) -> int:
    from ..planning.error_model import choose_marginals

    if args.optimal:
        return _cmd_plan_optimal(args)
    if args.workload is not None:
        return _cmd_plan_workload(args)
    if args.out is not None:
        return _cmd_plan_out(args)
    if args.d is None or args.k is None:
        raise DPMarginalsError("plan needs --d and --k (or --workload FILE)")
    sizes = None if args.values_per_attribute is None else [args.values_per_attribute] * args.d
    choice = choose_marginals(args.n, args.d, args.epsilon, args.k, args.theta, sizes=sizes)
    out = {"l": choice.l, "m": choice.m, "oracle": choice.oracle,
           "noise_error": choice.noise_error, "sampling_error": choice.sampling_error}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"CALM plan for n={args.n}, d={args.d}, k={args.k}, epsilon={args.epsilon}, "
              f"theta={args.theta}")
        print(f"  marginal size l = {choice.l}, number of marginals m = {choice.m}, "
              f"oracle = {choice.oracle.upper()}")
        print(f"  noise error k*NE = {choice.noise_error:.3g}, "
              f"sampling error SE = {choice.sampling_error:.3g}")
    return 0


def _cmd_plan_out(args: argparse.Namespace) -> int:
    """``plan --domain FILE ... --out plan.json``: a campaign's plan, no server needed."""
    from .plans import build_plan, describe_plan

    missing = [f"--{f}" for f in ("domain", "k") if getattr(args, f) is None]
    if missing:
        raise DPMarginalsError(f"plan --out needs {' and '.join(missing)} (the domain JSON "
                               "names the attributes)")
    plan = build_plan(args.method, args.domain, args.epsilon, args.k, args.n, args.oracle,
                      args.longitudinal_epsilon, phases=not args.single_phase)
    if args.d is not None and args.d != len(plan.domain):
        raise DPMarginalsError(f"--d {args.d} but the domain has {len(plan.domain)} attributes")
    _save_plan(plan, args.out)
    chose = plan.params.get("auto") if isinstance(plan.params, dict) else None
    print(json.dumps({"out": args.out, "plan_hash": plan.hash, "method": plan.method,
                      "groups": plan.m, **({"auto": chose} if chose else {})}) if args.json else
          f"wrote the plan ({describe_plan(plan)}) to {args.out}; create a campaign with "
          f"`dpmarginals campaign create --plan {args.out} ...`"
          + (f"\n  method auto chose {chose['chose']}: {chose['reason']}" if chose else ""))
    return 0


def _save_plan(plan: Any, path: str) -> None:
    try:
        plan.save(path)
    except OSError as exc:
        raise DPMarginalsError(f"cannot write {path!r}: {exc.strerror or exc}") from None


def _planning_domain(args: argparse.Namespace, option: str) -> tuple[Any, Any]:
    """The domain and the public sample (or None) of ``plan --workload`` / ``--optimal``:
    from --domain, else the --public data set's, else --d attributes of
    --values-per-attribute values (default 2); cut to the first --d attributes."""
    from ..core.domain import Domain

    public = None
    if args.public is not None:
        ns = argparse.Namespace(dataset=args.public, domain=args.domain, d=args.d, n=None,
                                seed=0)
        public = _load_data(ns)
    if args.domain is not None:
        domain = Domain.load(args.domain)
    elif public is not None:
        domain = public.domain
    elif args.d is not None:
        domain = Domain.from_dict({str(i): args.values_per_attribute or 2
                                   for i in range(args.d)})
    else:
        raise DPMarginalsError(f"plan {option} needs the attributes: --domain FILE, "
                               "--public DATASET or --d D")
    if args.d is not None and args.d != len(domain):
        domain = domain.project(domain.attributes[: args.d])
    return domain, public


def _cmd_plan_workload(args: argparse.Namespace) -> int:
    """Issue #9: the plan with the least predicted error for the workload in a file."""
    from ..planning.workload import ORACLE_CANDIDATES, load_workload, plan_workload

    domain, public = _planning_domain(args, "--workload")
    workload = load_workload(args.workload, domain)
    oracles = ORACLE_CANDIDATES if args.oracles is None else tuple(
        o.strip().lower() for o in args.oracles.split(",") if o.strip())
    choice = plan_workload(domain, args.n, args.epsilon, workload, oracles=oracles,
                           max_report_bits=args.max_report_bits, theta=args.theta,
                           public=public)
    if args.out is not None:
        _save_plan(choice.plan(domain, args.n, args.epsilon), args.out)
    if args.json:
        print(json.dumps({**choice.to_dict(), "queries": len(workload.queries),
                          "candidates": list(choice.candidates[:10])}))
        return 0
    print(f"Workload plan for n={args.n}, d={len(domain)}, epsilon={args.epsilon}: "
          f"{len(workload.queries)} queries of up to {workload.max_size} attributes")
    print(f"  marginal size l = {choice.l}, number of marginals m = {choice.m}, "
          f"oracle = {choice.oracle.upper()} ({choice.report_bits} bits per report), "
          f"{'covers every query' if choice.covers else 'reconstructs some queries'}")
    print(f"  predicted SSE per query = {choice.total:.3g}: noise {choice.noise:.3g}, "
          f"sampling {choice.sampling:.3g}, reconstruction {choice.reconstruction:.3g} "
          f"({choice.reconstruction_source})")
    print("  next best:")
    for row in choice.candidates[1:6]:
        print(f"    l={row['l']} m={row['m']} {row['oracle'].upper()}: "
              f"{row['predicted_sse']:.3g}")
    return 0


def _parse_prior(text: str) -> dict[int, float]:
    """``"2=1e-4,3=1e-5"``: the mean interaction energy of each order."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        order, _, value = part.partition("=")
        try:
            out[int(order)] = float(value)
        except ValueError:
            raise DPMarginalsError(f"--prior must be ORDER=ENERGY pairs like 2=1e-4,3=1e-5, "
                                   f"got {part!r}") from None
    return out


def _cmd_plan_optimal(args: argparse.Namespace) -> int:
    """Issue #20: error-optimal planning at any n (noise + sampling + reconstruction)."""
    from ..planning.optimal import Structure, plan_optimal
    from ..planning.workload import Workload, load_workload

    domain, public = _planning_domain(args, "--optimal")
    if args.workload is not None:
        workload = load_workload(args.workload, domain)
    elif args.k is not None:
        workload = Workload.all_k(domain, args.k)
    else:
        raise DPMarginalsError("plan --optimal needs --k K or --workload FILE")
    if public is not None:
        structure = Structure.from_data(public.project(domain.attributes))
    elif args.prior is not None:
        structure = Structure.prior(domain, _parse_prior(args.prior))
    else:
        raise DPMarginalsError("plan --optimal needs what is known about the data: --public "
                               "DATASET (a public or synthetic sample) or --prior 2=E2,3=E3 "
                               "(mean interaction energy per order); with no knowledge at all, "
                               "`--method adaptive` learns it from a first phase of reports")
    choice = plan_optimal(domain, args.n, args.epsilon, workload, structure, shrink=False)
    if args.out is not None:
        _save_plan(choice.plan(domain, args.epsilon, params={"k": workload.max_size}),
                   args.out)
    if args.json:
        print(json.dumps({**choice.to_dict(), "queries": len(workload.queries),
                          "candidates": list(choice.candidates[:10])}))
        return 0
    print(f"Error-optimal plan for n={args.n}, d={len(domain)}, epsilon={args.epsilon}: "
          f"{len(workload.queries)} queries of up to {workload.max_size} attributes "
          f"(structure: {structure.source})")
    print(f"  {choice.family}: {choice.m} groups of up to {choice.l} attributes, oracles "
          f"{', '.join(sorted(set(choice.oracles))).upper()}")
    print(f"  predicted SSE per query = {choice.total:.3g}: noise {choice.noise:.3g}, "
          f"sampling {choice.sampling:.3g}, reconstruction {choice.reconstruction:.3g}")
    print("  next best:")
    for row in choice.candidates[1:6]:
        print(f"    {row['family']}: {row['predicted_sse']:.3g}")
    return 0


def _load_data(args: argparse.Namespace) -> Any:
    from ..core.dataset import Dataset
    from ..datasets import available, load

    name = args.dataset
    path = Path(name)
    if name not in available() and (path.suffix or path.exists()):
        data = Dataset.from_file(path, args.domain)
        if args.d is not None:
            if args.d > data.d:
                raise DPMarginalsError(f"--d {args.d} exceeds the {data.d} attributes of {name}")
            data = data.project(data.domain.attributes[: args.d])
        if args.n is not None:
            data = data.sample(args.n, rng=np.random.SeedSequence([args.seed, 1]))
        return data
    if args.domain is not None:
        raise DPMarginalsError(f"--domain applies to CSV/Parquet files, not the data set {name!r}")
    return load(name, d=args.d, n=args.n, rng=np.random.SeedSequence([args.seed, 1]))


def _check_fit_limits(args: argparse.Namespace) -> None:
    """The fit's limits go with calm's graphical-model inference only."""
    method = (args.method or "auto").lower()
    if any(getattr(args, key, None) is not None for key in FIT_LIMITS) and not (
            method in ("auto", "calm_pgm", "calm-pgm")
            or (method in ("calm", "adaptive") and args.inference == "pgm")):
        raise DPMarginalsError("--max-fit-seconds and --max-fit-memory-mb apply to "
                               "--method calm-pgm and --method calm|adaptive --inference pgm "
                               "(and auto, which passes them on), not to "
                               f"--method {args.method}" + (f" --inference {args.inference}"
                                                            if args.inference else ""))


def _method_params(args: argparse.Namespace) -> dict[str, Any]:
    _check_fit_limits(args)
    params: dict[str, Any] = {"epsilon": args.epsilon, "k": args.k}
    if args.delta is not None:
        params["delta"] = args.delta
    for key in ("theta", "m", "l", "oracle", "inference", "postprocess", *_CENTRAL_OPTIONS,
                *FIT_LIMITS):
        value = getattr(args, key, None)
        if value is not None:
            params[key] = value
    if args.per_user:
        params["per_user"] = True
    return params


def _cmd_run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..core.provenance import Provenance
    from ..methods import make
    from ..private_release import resolve_method
    from ..synopsis.base import UniformSynopsis
    from ..synopsis.evaluate import evaluate, exact_marginals, random_queries

    args.method, central = resolve_method(args.method, args.model, args.delta)
    model = "central" if central else "local"
    if args.out is not None and not args.simulation:
        raise DPMarginalsError(
            "run makes seeded simulations, not releases: `dpmarginals release` makes a private "
            "one; add --simulation to save this one, marked not private")
    if args.out is not None:
        check_writable(args.out)
    data = _load_data(args)
    method = make(args.method, **_method_params(args))
    queries = random_queries(data.domain, args.k, args.queries,
                             rng=np.random.SeedSequence([args.seed, 2]))
    clock = time.perf_counter()
    exact = exact_marginals(data, queries)  # once, for every run and the Uniform baseline
    exact_seconds = time.perf_counter() - clock
    seeds = np.random.SeedSequence([args.seed, 3]).spawn(args.repeats)
    sse, tvd, seconds, query_seconds = [], [], 0.0, 0.0
    synopsis = None
    for seed in tqdm(seeds, desc=f"{args.method} runs", disable=None, file=sys.stderr):
        start = time.perf_counter()
        synopsis = method.run(data, rng=seed)
        released = time.perf_counter()
        errors = evaluate(synopsis, exact, queries)
        query_seconds += time.perf_counter() - released
        seconds += time.perf_counter() - start
        sse.append(errors.sse)
        tvd.append(errors.tvd)
    uniform = evaluate(UniformSynopsis(data.domain), exact, queries)
    sse_all, tvd_all = np.concatenate(sse), np.concatenate(tvd)
    info = getattr(synopsis, "info", {})
    out = {"method": args.method, "model": model, "dataset": args.dataset, "n": data.n,
           "d": data.d, "delta": args.delta,
           "k": args.k, "epsilon": args.epsilon, "queries": args.queries,
           "repeats": args.repeats, "sse_mean": float(sse_all.mean()),
           "sse_std": float(sse_all.std()), "tvd_mean": float(tvd_all.mean()),
           "uniform_sse_mean": uniform.sse_mean, "uniform_tvd_mean": uniform.tvd_mean,
           "seconds": seconds / args.repeats, "l": info.get("l"), "m": info.get("m"),
           "consistent": info.get("consistent"),
           "stage_seconds": {**info.get("stage_seconds", {}),
                             "queries": query_seconds / args.repeats,
                             "exact_answers": exact_seconds}}
    if args.out is not None and synopsis is not None:
        path = ("the curator's noise" if model == "central" else "per-user randomization"
                if args.per_user else "aggregate counts sampled from their exact distribution")
        synopsis.provenance = Provenance.simulation(
            method.name, model, args.epsilon,
            f"seeded simulation by `dpmarginals run` (seed {args.seed}, {path}, "
            f"{args.repeats} run(s), the last saved); do not publish it",
            plan_hash=info.get("plan_hash"), randomness=f"numpy generator, seed {args.seed}",
            delta=float(args.delta or 0.0))
        synopsis.save(args.out)
    if getattr(method, "postprocess", None) == "none":
        print(f"dpmarginals: note: {args.method}'s answers are raw unbiased estimates, not "
              "distributions (cells can be negative, so SSE and TVD can exceed Uniform's and "
              "TVD can exceed 1); --postprocess norm_sub makes them distributions",
              file=sys.stderr)
    if info.get("consistent") is False:
        print(f"dpmarginals: note: consistency stopped after {info['consistency_rounds']} rounds "
              f"(max inconsistency {info['max_inconsistency']:.2g}, min cell "
              f"{info['min_cell']:.2g})", file=sys.stderr)
    if args.json:
        print(json.dumps(out))
        return 0
    budget = f"epsilon={args.epsilon}" + (f", delta={args.delta:g}" if args.delta else "")
    print(f"{args.method} ({model} DP) on {args.dataset}: n={data.n}, d={data.d}, k={args.k}, "
          f"{budget}" + (f", l={out['l']}, m={out['m']}" if out["l"] else ""))
    if info.get("noise_sampler") == "opendp" and info.get("seeded_noise") is False:
        print(f"  {args.method}'s noise is OpenDP's, which takes no seed: the runs are not "
              "reproducible")
    print(f"  SSE over {args.queries} random {args.k}-way marginals x {args.repeats} run(s): "
          f"{out['sse_mean']:.3g} (sd {out['sse_std']:.2g});  Uniform baseline: "
          f"{out['uniform_sse_mean']:.3g}")
    print(f"  total variation distance: {out['tvd_mean']:.3g} "
          f"(Uniform {out['uniform_tvd_mean']:.3g})")
    saved = f"; simulation (not private) saved to {args.out}" if args.out else ""
    print(f"  {out['seconds']:.2f} s per run{saved}")
    return 0


def _cmd_query(args: argparse.Namespace) -> int:
    from ..private_release import load_release

    release = load_release(args.synopsis)
    if (args.attributes is None) == (args.tuple is None):
        raise DPMarginalsError("query needs --attributes A,B (a marginal, or the tuples over "
                               "those columns) or --tuple ITEM,ITEM (one k-tuple's count)")
    if not hasattr(release, "marginal") or not hasattr(release, "domain"):
        return _query_tuples(release, args)
    if args.tuple is not None:
        raise DPMarginalsError(f"--tuple applies to k-tuple releases (`dpmarginals central`); "
                               f"{args.synopsis!r} is a synopsis: ask --attributes")
    attrs = [a.strip() for a in args.attributes.split(",") if a.strip()]
    synopsis = release
    table = synopsis.marginal(attrs)
    if args.std:
        from ..synopsis.intervals import with_uncertainty

        public = None
        if args.public is not None:
            from ..core.dataset import Dataset
            from ..datasets import available, load

            if args.public in available():
                public = load(args.public, d=len(synopsis.domain))
            else:  # a CSV/Parquet file over the synopsis's domain
                public = Dataset.from_file(args.public, synopsis.domain)
        table = with_uncertainty(synopsis, table, replicates=args.replicates, public=public,
                                 progress=True)
    basis = table.describe_basis()
    if args.std and table.reconstructed:
        basis = f"{basis}; the standard errors are model-based (they assume that model)"
    if table.note:
        basis = f"{basis}\n{table.note}" if basis else table.note
    mark = synopsis.privacy.describe()
    frame = table.to_frame()
    if args.format == "json":
        body = table.to_dict()
        if table.std is not None:
            body["std_basis"] = "model-based" if table.reconstructed else "measured"
        print(json.dumps({**body, "privacy": synopsis.privacy.to_dict()}))
    elif args.format == "csv":
        for line in [*(basis or "").splitlines(), mark]:
            if line:
                print(f"dpmarginals: {line}", file=sys.stderr)
        print(frame.to_csv(index=False), end="")
    else:
        for line in [*(basis or "").splitlines(), mark]:
            if line:
                print(f"# {line}")
        print(frame.to_string(index=False, float_format=lambda x: f"{x:.6f}"))
    return 0


def _query_tuples(release: Any, args: argparse.Namespace) -> int:
    """``query`` on a central k-tuple release: the noisy counts of the extracted tuples
    over ``--attributes``, or of the one ``--tuple``."""
    if args.std:
        raise DPMarginalsError("--std: a k-tuple release has no standard errors")
    if args.tuple is not None:
        return _query_one_tuple(release, args)
    attrs = [a.strip() for a in args.attributes.split(",") if a.strip()]
    frame = release.tuple_counts(attrs)
    note = (f"k-tuple release ({release.provenance.describe()}): noisy counts of the "
            f"{len(frame)} extracted tuples over {', '.join(attrs)}; tuples not listed were "
            "not extracted")
    if args.format == "json":
        print(json.dumps({"attributes": attrs, "tuples": frame.to_dict(orient="records"),
                          "privacy": release.provenance.to_dict(), "note": note}))
    elif args.format == "csv":
        print(f"dpmarginals: {note}", file=sys.stderr)
        print(frame.to_csv(index=False), end="")
    else:
        print(f"# {note}")
        print(frame.to_string(index=False))
    return 0


def _query_one_tuple(release: Any, args: argparse.Namespace) -> int:
    """The noisy count of one k-tuple, or why there is none."""
    items = [t.strip() for t in args.tuple.split(",") if t.strip()]
    pairs: list[Any] = items
    if not release.binary:
        bad = [t for t in items if "=" not in t]
        if bad:
            raise DPMarginalsError(f"--tuple: {bad[0]!r} is not COLUMN=VALUE (this release's "
                                   "items are a column's values, e.g. color=red)")
        pairs = [tuple(t.split("=", 1)) for t in items]
    if not 1 <= len(items) <= release.max_k:
        raise DPMarginalsError(f"--tuple: a tuple of 1..{release.max_k} items, got "
                               f"{len(items)}")
    if len(set(items)) != len(items):
        raise DPMarginalsError(f"--tuple: items repeat in {items}")
    unseen = [t for t, p in zip(items, pairs, strict=True) if release.item_id(p) is None]
    count = release.count(pairs)
    level = release.levels[len(items) - 1]
    mark = release.provenance.describe()
    note = ("extracted" if count is not None else
            f"not extracted: its noisy count was at most the threshold "
            f"{level.threshold:g} of level k = {len(items)}, or no record holds it")
    if unseen:  # not even extracted alone (a misspelt item, or a rare one)
        names = sorted(release.columns()) if release.binary else sorted(
            f"{c}={v}" for c, v in release.items)
        note += (f"; {unseen[0]!r} is none of the release's items ({', '.join(names[:8])}"
                 f"{', ...' if len(names) > 8 else ''})")
    if args.format == "json":
        print(json.dumps({"tuple": items, "count": count, "note": note,
                          "privacy": release.provenance.to_dict()}))
    elif args.format == "csv":
        print(f"dpmarginals: {mark}", file=sys.stderr)
        print(f"tuple,count\n{' '.join(items)},{'' if count is None else count}")
    else:
        print(f"# k-tuple release ({mark})")
        print(f"{', '.join(items)}: {count if count is not None else '-'} ({note})")
    return 0


def _cmd_release(args: argparse.Namespace) -> int:
    from ..private_release import release

    inputs = [Path(p).resolve() for p in (args.data, args.domain) if p is not None]
    if Path(args.out).resolve() in inputs:
        raise DPMarginalsError(f"--out {args.out!r} is one of the inputs; write the release "
                               "elsewhere")
    check_writable(args.out)  # before any budget is spent
    _check_fit_limits(args)
    params = {key: getattr(args, key) for key in ("theta", "m", "l", "oracle", "inference",
                                                   "postprocess", *_CENTRAL_OPTIONS,
                                                   *FIT_LIMITS)
              if getattr(args, key) is not None}
    synopsis = release(args.data, args.domain, method=args.method, model=args.model,
                       epsilon=args.epsilon, delta=args.delta, k=args.k,
                       domain_from_data=args.domain_from_data,
                       extra_columns="ignore" if args.ignore_extra_columns else "error",
                       **params)
    earlier = _earlier_release(args.out)
    synopsis.save(args.out)
    if earlier is not None:
        warnings.warn(f"{args.out} held {earlier}, now replaced: releases of the same "
                      "people compose, so if the earlier one was published or shared, their "
                      f"privacy budgets add up (this one's: epsilon "
                      f"{synopsis.privacy.epsilon:g})", UserWarning, stacklevel=2)
    info = getattr(synopsis, "info", {})
    shape = f", l={info['l']}, m={info['m']}" if info.get("l") else ""
    if info.get("phases"):  # l of the last phase alone would mislead
        shape = f", {info['phases']} phases, {info['m']} groups in all"
    if info.get("measured"):
        shape = f", {info['measured']} marginals measured (rho {info['rho']:.4g})"
    print(f"{synopsis.privacy.describe()}{shape}: {len(synopsis.domain)} attributes, "
          f"saved to {args.out}")
    if info.get("consistent") is False:
        print(f"  note: the tables did not reach consistency and non-negativity in "
              f"{info.get('consistency_rounds')} rounds (largest disagreement "
              f"{info.get('max_inconsistency', float('nan')):.2g}, smallest cell "
              f"{info.get('min_cell', float('nan')):.2g}): answers from different tables "
              "may disagree, and cells fall below 0, by that much")
    if info.get("auto"):
        print(f"  method auto chose {info['auto']['chose']}"
              + (f" (inference {info['auto']['inference']})" if info["auto"]["inference"]
                 else "") + f": {info['auto']['reason']}")
    return 0


def _earlier_release(path: str) -> str | None:
    """What a release file at ``path`` holds (a private release's mark), or None."""
    from ..core.provenance import Provenance

    try:
        mark = Provenance.from_dict(json.loads(Path(path).read_text(encoding="utf-8"))["privacy"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return f"a {mark.describe()}" if mark.private else None


#: AIM's and MST's options (``release`` and ``run``), passed on only when given.
_CENTRAL_OPTIONS = ("max_model_size", "rounds", "iters")

#: ``--model``, ``--delta`` and AIM's cost caps (``release`` and ``run``).
_CENTRAL_ARGS = (
    arg("--model", choices=("local", "central"), default=None,
        help="local: every person randomizes her own record (methods calm, ...); "
        "central: a curator holds the table (aim, mst, priview, residual); default: the "
        "method's own"),
    arg("--delta", type=_delta, default=None,
        help="aim, mst, residual: the delta of (epsilon, delta)-DP, well below 1/n "
        "(e.g. 1e-9); the other methods are pure epsilon-DP and take none"),
    arg("--max-model-size", type=_positive_float, default=None, metavar="MB",
        help="aim: cap on the graphical model's junction tree in MB (default 80, "
        "the AIM paper's; smaller is faster)"),
    arg("--rounds", type=_positive_int, default=None,
        help="aim: the round budget T (default 16 d, the paper's)"),
    arg("--iters", type=_positive_int, default=None,
        help="aim, mst: mirror-descent steps per model fit, warm-started (default: aim "
        "250, the AIM paper's code 1000; mst 5000, as its paper's code)"),
)


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(epsilon=args.epsilon, k=args.k, seed=args.seed)
    return 0


# -- the commands ---------------------------------------------------------------------
#: calm-pgm's limits on its graphical-model fit (``dpmarginals.inference.pgm_cost``).
FIT_LIMITS = ("max_fit_seconds", "max_fit_memory_mb")

_above_zero = number_in(0.0, float("inf"), high_open=False)
_FIT_LIMIT_ARGS = (
    arg("--max-fit-seconds", type=_above_zero, default=None, metavar="S",
        help="calm-pgm (or calm --inference pgm): the graphical-model fit's limit "
        "in predicted CPU seconds (default 30); the weakest marginals are modelled "
        "through their sub-marginals to stay within it, and a fit that cannot is "
        "refused before it starts"),
    arg("--max-fit-memory-mb", type=_above_zero, default=None, metavar="MB",
        help="calm-pgm: the same for the fit's predicted memory (default 4096)"),
)


def _with_methods(text: str) -> Later:
    """``text`` followed by the methods' names, listed when the parser is built (listing
    them imports every method)."""
    def names() -> str:
        from ..methods import available

        return text + ", ".join(available())

    return Later(names)


DEMO = Command(
    "demo", help="a local-DP release end to end on the built-in data set", run=_cmd_demo,
    description="Run CALM on the built-in real survey data set (no files "
    "needed) and print true vs. estimated marginal cells.",
    args=(
        arg("--epsilon", type=_epsilon, default=1.0, help="privacy budget (default 1.0)"),
        arg("--k", type=_positive_int, default=2, help="marginal size shown (default 2)"),
        arg("--seed", type=_seed, default=None,
            help="make the run a reproducible simulation with this seed (default: "
            "every user's randomness comes from the OS's secure source)"),
    ),
)

RELEASE = Command(
    "release", help="a private release of a CSV/Parquet table of people", run=_cmd_release,
    description="Make a private release. Local model (default): every row "
    "is one person, whose record is randomized on the per-user path with the "
    "operating system's secure randomness. Central model (--model central): "
    "a curator holds the table and publishes noisy marginals: AIM (default), "
    "MST or ResidualPlanner, (epsilon, delta)-DP through OpenDP, or PriView. No seed: for "
    "simulations use `run`. The file is marked private with its model, "
    "method, epsilon (and delta), unit of privacy and domain.",
    epilog="Example: dpmarginals release adult.csv --domain "
    "adult-domain.json --model central --method aim --epsilon 1 --delta "
    "1e-9 --out r.json",
    args=(
        arg("data", help="CSV (plain or compressed) or Parquet file, one row per person"),
        arg("--domain", default=None, metavar="DOMAIN.json",
            help="the public domain: {\"attr\": size}, {\"attr\": [\"a\", \"b\"]} or "
            "{\"attr\": {\"bins\": [0, 18, 65], \"other\": true}}; required unless "
            "--domain-from-data"),
        arg("--domain-from-data", action="store_true",
            help="read the domain off the data (it is then published: a privacy leak)"),
        arg("--ignore-extra-columns", action="store_true",
            help="drop data columns the domain does not name (default: refuse)"),
        arg("--method", default=None, metavar="METHOD",
            help=_with_methods("release method (default auto: calm, calm-pgm or adaptive, "
                               "chosen from the domain, n, epsilon and k, recorded in the "
                               "file; aim with --model central): ")),
        arg("--epsilon", type=_epsilon, required=True, help="privacy budget"),
        *_CENTRAL_ARGS,
        arg("--k", type=_positive_int, default=3,
            help="size of the marginals to answer well (default 3; aim's workload: "
            "all k-way marginals)"),
        arg("--theta", type=_fraction, default=None, help="CALM's theta (default 0.001)"),
        arg("--m", type=_positive_int, default=None, help="override the number of marginals"),
        arg("--l", type=_positive_int, default=None, help="override the marginal size"),
        arg("--oracle", default=None, help="adaptive (default), best, grr, oue, olh or hr"),
        arg("--inference", default=None, help="consistency (default) or pgm"),
        arg("--postprocess", choices=("none", "norm_sub", "nonneg"), default=None,
            help="ft, am and marg_*: make each table a distribution (norm_sub, the "
            "default here) or publish the raw unbiased estimates (none); residual: "
            "non-negative least squares (nonneg, its default) or unbiased (none)"),
        *_FIT_LIMIT_ARGS,
        arg("--out", required=True, metavar="RELEASE.json", help="where to save it"),
    ),
)

DATASETS = Command(
    "datasets", help="list the data sets and whether they are available", run=_cmd_datasets,
    description="List the data sets `--dataset` accepts.",
    args=(
        arg("--data-home", default=None,
            help="data directory (default: $DPMARGINALS_DATA, then the user cache)"),
        arg("--json", action="store_true", help="print JSON records"),
        arg("--export", default=None, metavar="NAME",
            help="write data set NAME as a CSV of its values (--out) and its domain "
            "JSON beside it (FILE-domain.json), e.g. to try `release` on it"),
        arg("--out", default=None, metavar="FILE.csv", help="with --export: the CSV"),
    ),
)

PLAN = Command(
    "plan", help="CALM's choice of marginal size l and count m (Alg. 1)", run=_cmd_plan,
    description="Choose CALM's marginal size l and number m of marginals "
    "from the error analysis (CALM §4.3, Algorithm 1).",
    args=(
        arg("--n", type=_positive_int, required=True, help="number of users"),
        arg("--d", type=_positive_int, default=None, help="number of attributes"),
        arg("--k", type=_positive_int, default=None,
            help="marginal size to answer (not with --workload)"),
        arg("--epsilon", type=_epsilon, required=True, help="privacy budget"),
        arg("--theta", type=_fraction, default=1e-3,
            help="target reconstruction error (default 0.001, as in the paper)"),
        arg("--values-per-attribute", type=_positive_int, default=None, metavar="C",
            help="values of each attribute (default 2: binary)"),
        arg("--workload", default=None, metavar="FILE",
            help="choose (l, m) and the oracle for this workload (JSON: a list of "
            "attribute lists, or {\"k\": 3}) by its predicted error"),
        arg("--domain", default=None, metavar="FILE",
            help="with --workload or --out: domain JSON naming the attributes "
            "({\"attr\": size})"),
        arg("--public", default=None, metavar="DATASET",
            help="with --workload: a public or synthetic data set (name or CSV/Parquet) "
            "to measure reconstruction error instead of charging theta"),
        arg("--oracles", default=None,
            help="with --workload: candidate oracles (default grr,oue,olh,hr)"),
        arg("--max-report-bits", type=_positive_int, default=None, metavar="B",
            help="with --workload: only oracles whose report fits in B bits"),
        arg("--out", default=None, metavar="PLAN.json",
            help="write the campaign's plan (for `campaign create --plan` or an "
            "offline `client --plan`); needs --domain (and --k, or --workload)"),
        arg("--single-phase", action="store_true",
            help="with --out and --method auto: the campaign cannot run in phases "
            "(auto then plans CALM's collection)"),
        arg("--method", default="auto",
            help="with --out: the method that builds the plan (default auto: the "
            "adaptive method's phase 1, or CALM's plan with --single-phase, chosen from "
            "the domain, n, epsilon and k; calm; adaptive: "
            "phase 1 of an adaptive collection in phases, see `campaign next-phase`)"),
        arg("--optimal", action="store_true",
            help="error-optimal planning at any n: the plan of least predicted noise + "
            "sampling + reconstruction error, with --public DATASET or --prior"),
        arg("--prior", default=None, metavar="2=E2,3=E3",
            help="with --optimal: the mean interaction energy of each order (squared "
            "distance of a marginal from the max-entropy table of its sub-marginals)"),
        arg("--oracle", default=None,
            help="with --out: CALM's oracle choice (default adaptive)"),
        arg("--longitudinal-epsilon", type=_longitudinal, default="auto",
            metavar="EPS|auto|none",
            help="with --out: what any number of reports of an unchanged value may "
            "reveal (devices keep a permanent response and noise it afresh for each "
            "report); auto (default): 4 x --epsilon where the plan's groups can be "
            "memoized; none: every report is charged in full"),
        arg("--json", action="store_true", help="print one JSON object"),
    ),
)

RUN = Command(
    "run", help="simulate a release on a data set and measure its error", run=_cmd_run,
    description="Run a release with every row as one user, answer random "
    "k-way marginals, and report their SSE (CALM §5.1) and total variation "
    "distance next to the Uniform baseline. sse_std is the standard "
    "deviation of the per-query SSE over all queries and runs.",
    args=(
        arg("--dataset", required=True,
            help="a data set name (see `dpmarginals datasets`) or a CSV/Parquet file"),
        arg("--domain", default=None,
            help="domain JSON for a CSV/Parquet file (as for `release`); without it "
            "the domain is read off the data, with a warning"),
        arg("--d", type=_positive_int, default=None, help="keep the first d attributes"),
        arg("--n", type=_positive_int, default=None,
            help="sample n users with replacement (default: every row once)"),
        arg("--method", default=None, metavar="METHOD",
            help=_with_methods("release method (default calm, or aim with --model "
                               "central): ")),
        arg("--epsilon", type=_epsilon, required=True, help="privacy budget"),
        *_CENTRAL_ARGS,
        arg("--k", type=_positive_int, required=True, help="marginal size"),
        arg("--theta", type=_fraction, default=None, help="CALM's theta (default 0.001)"),
        arg("--m", type=_positive_int, default=None, help="override the number of marginals"),
        arg("--l", type=_positive_int, default=None, help="override the marginal size"),
        arg("--oracle", default=None,
            help="adaptive (default), best, grr, oue, olh or hr"),
        arg("--inference", default=None,
            help="how the noisy marginals become answers: pgm (shrinkage + a graphical "
            "model, needs the 'pgm' extra) for calm, am, marg_rr, marg_ps and marg_ht; "
            "default consistency (calm) or views (the others)"),
        arg("--postprocess", choices=("none", "norm_sub", "nonneg"), default=None,
            help="ft, am and marg_*: raw unbiased estimates (none, the papers' "
            "default: cells may be negative, so TVD can exceed 1) or distributions "
            "(norm_sub); residual: nonneg (its default) or none"),
        *_FIT_LIMIT_ARGS,
        arg("--per-user", action="store_true",
            help="randomize every user's record (slower) instead of sampling the "
            "aggregate counts from their exact distribution"),
        arg("--queries", type=_positive_int, default=50, help="random queries (default 50)"),
        arg("--repeats", type=_positive_int, default=1, help="independent runs (default 1)"),
        arg("--seed", type=_seed, default=0, help="simulation seed (default 0)"),
        arg("--simulation", action="store_true",
            help="with --out: yes, save this seeded simulation (marked not private)"),
        arg("--out", default=None,
            help="save the (last) synopsis as JSON (needs --simulation; for a private "
            "release use `dpmarginals release`)"),
        arg("--json", action="store_true", help="print one JSON object"),
    ),
)

QUERY = Command(
    "query", help="answer a marginal from a saved synopsis", run=_cmd_query,
    description="Answer one marginal from a release (or a simulation "
    "saved by `run --simulation --out`), with the data's own values, and "
    "say whether it was measured or reconstructed, and under which privacy "
    "guarantee. On a k-tuple release of `central`, --attributes lists the "
    "extracted tuples over those columns with their noisy counts, and "
    "--tuple gives one tuple's count (or says it was not extracted).",
    epilog="Examples: dpmarginals query r.json --attributes age,sex,income; "
    "dpmarginals query k.json --tuple frontpage,news (items of a transactional "
    "release) or --tuple color=red,size=M (a table's values)",
    args=(
        arg("synopsis", help="release or synopsis JSON file"),
        arg("--attributes", default=None, help="comma-separated attribute names"),
        arg("--tuple", default=None, metavar="ITEM,ITEM",
            help="k-tuple releases: the noisy count of this tuple (items: a "
            "transactional file's item ids, or COLUMN=VALUE of a table)"),
        arg("--format", choices=("table", "csv", "json"), default="table"),
        arg("--std", action="store_true",
            help="add per-cell standard errors (analytic for a marginal inside one "
            "collected marginal, scaled by how much Norm-Sub's clipping removes, "
            "which a parametric bootstrap of the release measures; else that "
            "bootstrap: seconds on a 48-group plan, a progress bar on a terminal) "
            "and a nominal 95%% interval (lower, upper) that covers this "
            "query, not only queries on average: for a reconstructed marginal it "
            "spans every value the measured tables allow, and a note says so"),
        arg("--replicates", type=_positive_int, default=REPLICATES,
            help=f"bootstrap replicates for --std (default {REPLICATES})"),
        arg("--public", default=None, metavar="DATASET",
            help="with --std: a public or synthetic data set (name, or CSV/Parquet "
            "over the synopsis's domain) telling how fast interactions fade with their "
            "order, for the interactions no report measured (default: an assumed "
            f"ratio of {INTERACTION_DECAY:g} per order)"),
    ),
)

#: Every subcommand, in the order ``dpmarginals --help`` lists them.
COMMANDS = (DEMO, RELEASE, DATASETS, PLAN, RUN, CENTRAL, *SERVICE_COMMANDS, ESTIMATE,
            *EXPERIMENT_COMMANDS, QUERY)


def build_parser() -> argparse.ArgumentParser:
    """The ``dpmarginals`` parser: its ``--version`` and :data:`COMMANDS`."""
    parser = OneLineParser(
        prog="dpmarginals",
        description="Release marginal tables of multi-attribute data under differential "
        "privacy (CALM and the methods it is compared with).",
        epilog="Start with `dpmarginals demo`; `dpmarginals COMMAND --help` explains each command.",
    )
    parser.add_argument("--version", action="version", version=f"dpmarginals {__version__}")
    add_commands(parser.add_subparsers(dest="command", metavar="COMMAND",
                                       parser_class=OneLineParser), COMMANDS)
    return parser


def _one_line_warning(message: Warning | str, category: type[Warning], *_: Any,
                      **__: Any) -> None:
    print(f"dpmarginals: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warning
            return int(args.func(args))
    except DPMarginalsError as exc:
        print(f"dpmarginals: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dpmarginals: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `dpmarginals query ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except MemoryError:
        print("dpmarginals: error: out of memory; try a smaller --n, --d or --k", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
