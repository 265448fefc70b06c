"""The concentrated poisoning attack on a GRR group, measured (issue #33, point 13).

docs/deployment.md's table measured the concentrated attack on an OUE group (benchmarks/
load_service.py); the issue found that on a GRR group 1% of the reports, all in the target
group and all carrying the target cell, moved the cell by 5 release standard deviations
unflagged.  This measures both oracles the same way, in-process (the service's release is
``synopsis_from_counts`` after ``check_counts`` with its groups left out when flagged,
exactly what :func:`dpmarginals.service.releases.make_release` does; tickets change which
reports are stored, not the counts of the stored ones):

* Adult as `dpmarginals datasets --export adult` labels it (15 attributes, 2-41 values:
  CALM puts its small marginals through GRR), 20,000 users sampled from the real file,
  CALM epsilon 1, k 2;
* per oracle, the 2-way group of that oracle and its cell whose true frequency is nearest
  0.10 (the issue's cell);
* ``--replicates`` honest collections give the released cell's mean and standard error;
* the attack: the same honest collection plus 1% of n crafted reports (200), all in the
  target group, every one supporting the target cell (GRR: the cell itself; OUE: the
  naive vector with only that bit, and the "mimic" vector with the other bits at q).

Run: ``PYTHONPATH=src python benchmarks/poisoning_grr.py [--replicates 20] [--users 20000]``
(about a minute).  Prints a markdown table.
"""

from __future__ import annotations

import argparse

import numpy as np

from dpmarginals.aggregation import synopsis_from_counts
from dpmarginals.core.dataset import Dataset
from dpmarginals.datasets import load
from dpmarginals.local.calm import CALM
from dpmarginals.protocol.counts import Counts
from dpmarginals.protocol.reports import support_counts
from dpmarginals.protocol.simulate import simulate_reports
from dpmarginals.service.poisoning import check_counts, crafted_reports


def _target(plan, data, oracle: str, near: float) -> tuple[int, tuple[str, ...], int, float]:
    best = None
    for g, spec in enumerate(plan.groups):
        if spec.oracle != oracle or len(spec.attributes) != 2:
            continue
        truth = data.marginal(list(spec.attributes)).values.ravel()
        cell = int(np.argmin(np.abs(truth - near)))
        if best is None or abs(truth[cell] - near) < abs(best[3] - near):
            best = (g, tuple(spec.attributes), cell, float(truth[cell]))
    if best is None:
        raise SystemExit(f"the plan has no 2-way {oracle} group")
    return best


def _release(plan, counts: Counts, alpha: float = 1e-6):
    """The service's release: flagged groups left out (CALM releases without them)."""
    flags = check_counts(plan, counts, alpha=alpha)
    flagged = sorted({f.group for f in flags})
    if flagged:
        supports = [np.zeros_like(s) if g in flagged else s
                    for g, s in enumerate(counts.supports)]
        users = counts.users.copy()
        users[flagged] = 0
        counts = Counts(supports, users)
    return synopsis_from_counts(plan, counts), flagged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--near", type=float, default=0.10)
    args = parser.parse_args()
    adult = load("adult")  # the labelled Adult of `datasets --export adult`
    domain, everyone = adult.domain, adult.codes
    rng = np.random.default_rng(0)
    records = everyone[rng.choice(len(everyone), args.users, replace=False)]
    plan = CALM(epsilon=1.0, k=2).plan(domain, args.users)
    data = Dataset(records, domain)
    attackers = args.users // 100
    print(f"Adult, {args.users:,} users, CALM eps 1 k 2: {plan.m} groups "
          f"({sum(s.oracle == 'grr' for s in plan.groups)} GRR); attacker: {attackers} "
          f"reports (1%), all in the target group\n")
    print("| oracle | target (cells) | truth | honest release (mean +- SE) | attack | "
          "after | shift / SE | flagged |")
    print("|---|---|---:|---:|---|---:|---:|---|")
    for oracle in ("grr", "oue"):
        group, attrs, cell, truth = _target(plan, data, oracle, args.near)
        released = []
        honest = None
        for seed in range(args.replicates):
            groups = np.random.default_rng(100 + seed).permutation(np.arange(args.users)
                                                                   % plan.m)
            reports = simulate_reports(plan, records, max_epsilon=1.0, rng=100 + seed,
                                   groups=groups)
            if honest is None:
                honest = reports
            synopsis, _ = _release(plan, support_counts(plan, reports))
            released.append(synopsis.marginal(list(attrs)).values.ravel()[cell])
        se = float(np.std(released, ddof=1))
        before = released[0]
        attacks = [("all on the target cell", False)] if oracle == "grr" else [
            ("naive (that bit only)", False), ("mimic (other bits at q)", True)]
        for label, mimic in attacks:
            crafted = crafted_reports(plan, group, cell, attackers, mimic=mimic,
                                      rng=np.random.default_rng(42))
            synopsis, flagged = _release(plan, support_counts(plan, [*honest, *crafted]))
            after = float(synopsis.marginal(list(attrs)).values.ravel()[cell])
            cells = plan.groups[group].cells
            print(f"| {oracle} | {' x '.join(attrs)} cell {cell} ({cells}) | {truth:.4f} | "
                  f"{np.mean(released):.4f} +- {se:.4f} | {label} | {after:.4f} | "
                  f"{(after - before) / se:+.1f} | "
                  f"{'group ' + str(group) + ', left out' if flagged else '- (not detected)'}"
                  " |")


if __name__ == "__main__":
    main()
