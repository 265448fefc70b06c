"""Cormode, Kulkarni and Srivastava (SIGMOD 2018): §5, §6 and appendix B.

Their MovieLens genre flags are not available offline: MSNBC's "visited category j" flags
(989,818 sessions, most pairs positively correlated like the genres) stand in for them.
The NYC taxi flags come from a 5,589-trip sample of March 2019 (the paper: 3M trips of
2013-16); users are drawn from it with replacement to reach N.  epsilon = ln 3 (about
1.1) unless varied; ``inp_rr``/``marg_rr`` use Wang et al.'s OUE probabilities, as the
paper's experiments do (§5.1).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.errors import DPMarginalsError
from .common import (
    LN3,
    all_queries,
    not_run,
    run_method,
    sample_users,
    truths,
)
from .plots import Panel, curve_grid, point_panels
from .runner import Experiment, seed_for
from .summaries import Check, checks_markdown, fmt, pivot_table

__all__ = ["CORMODE_EXPERIMENTS"]

METHODS = ("inp_rr", "inp_ps", "inp_ht", "marg_rr", "marg_ps", "marg_ht")
LABELS = {"inp_rr": "InpRR", "inp_ps": "InpPS", "inp_ht": "InpHT", "marg_rr": "MargRR",
          "marg_ps": "MargPS", "marg_ht": "MargHT", "inp_em": "InpEM", "inp_olh": "InpOLH",
          "inp_htcms": "InpHTCMS", "calm": "CALM", "nonprivate": "non-private"}
EXTRA = {"inp_rr": {"oracle": "oue"}, "marg_rr": {"oracle": "oue"}}
TVD_COLUMNS = ("sse", "sse_sd", "tvd", "queries", "seconds", "release_seconds", "l", "m")


def _pow2(n: int) -> str:
    e = math.log2(n)
    return f"2^{int(e)}" if e == int(e) else f"{n:,}"


def _params(method: str, eps: float, k: int) -> dict[str, Any]:
    return {"epsilon": eps, "k": k, **EXTRA.get(method, {})}


def _tvd_rows(task: dict[str, Any], seed: int, data: Any, eps: float, k: int,
              methods: tuple[str, ...], **fields: Any) -> list[dict[str, Any]]:
    """Every method on every k-way marginal (mean total variation distance)."""
    exact = truths(data, all_queries(data.domain, k))
    rows = []
    for meth in methods:
        rng = seed_for(seed, "method", task["dataset"], data.n, data.d, k, eps,
                       task["repeat"], meth)
        rows.append(run_method(meth, _params(meth, eps, k), data, exact, rng, fields={
            "dataset": task["dataset"], "n": data.n, "d": data.d, "k": k, "epsilon": eps,
            "repeat": task["repeat"], "panel": fields.pop("panel", task.get("panel")),
            **fields}))
    return rows


def _checks(frame: pd.DataFrame, group: list[str]) -> list[Check]:
    """The paper's main orderings, per setting (mean TVD over repeats)."""
    ok = frame[frame["status"] == "ok"]
    means = ok.groupby([*group, "method"])["tvd"].mean().rename("mean").reset_index()
    c_ht = Check("InpHT has the lowest (or within 10% of the lowest) error for k >= 2",
                 "§5.2 'INPHT "
                 "convincingly achieves the lowest (or near lowest) error across all "
                 "parameter settings'")
    c_ps = Check("MargPS beats MargRR", "§5.2 'MARGPS achieves better accuracy than MARGRR'")
    c_inp = Check("InpPS is the worst method for k >= 2 and d >= 8", "§5.2 'INPPS has very "
                  "large errors'")
    c_k1 = Check("for k = 1 MargPS, MargHT and InpHT are alike (within 1.5x)", "§5.2 "
                 "'largely indistinguishable in their accuracy' (MargRR: see below)")
    c_rr = Check("for k = 1 MargRR's TVD is about 2x MargPS's (1.5x-2.7x)", "our analysis: on "
                 "a 2-cell marginal OUE has 4x GRR's variance, e^eps/(e^eps-1)^2 vs. "
                 "4e^eps/(e^eps-1)^2 per user; the paper calls them 'effectively the same'")
    for key, g in means.groupby(group):
        by = dict(zip(g["method"], g["mean"], strict=True))
        key = key if isinstance(key, tuple) else (key,)
        where = ", ".join(f"{c}={fmt(v) if isinstance(v, float) else v}"
                          for c, v in zip(group, key, strict=True))
        kv = dict(zip(group, key, strict=True))
        if "inp_ht" in by and kv.get("k", 2) >= 2:
            best = min(by, key=by.get)
            c_ht.add(by["inp_ht"] <= 1.1 * by[best],
                     f"{where} (best {LABELS.get(best, best)})")
        alike = [by[m] for m in ("marg_ps", "marg_ht", "inp_ht") if m in by]
        if kv.get("k") == 1 and len(alike) == 3:
            c_k1.add(max(alike) <= 1.5 * min(alike), where)
        if kv.get("k") == 1 and "marg_rr" in by and "marg_ps" in by:
            c_rr.add(1.5 <= by["marg_rr"] / by["marg_ps"] <= 2.7,
                     f"{where}: {by['marg_rr'] / by['marg_ps']:.2f}")
        if "marg_ps" in by and "marg_rr" in by:
            c_ps.add(by["marg_ps"] < by["marg_rr"], where)
        if "inp_ps" in by and kv.get("k", 2) >= 2 and kv.get("d", 8) >= 8:
            c_inp.add(by["inp_ps"] >= max(by.values()), where)
    return [c_ht, c_ps, c_inp, c_k1, c_rr]


# -- Figure 4: TVD vs. N ------------------------------------------------------------------
def _fig4_tasks(quick: bool) -> list[dict[str, Any]]:
    ns = (2**14, 2**15, 2**16) if quick else (2**16, 2**17, 2**18, 2**19)
    repeats = 2 if quick else 10
    return [{"key": f"cormode-fig4|d={d}|n={n}|rep={r}", "dataset": "msnbc", "n": n, "d": d,
             "repeat": r} for d in (4, 8, 16) for n in ns for r in range(repeats)]


def _fig4_run(task: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    data = sample_users(task["dataset"], task["d"], task["n"], seed, task["repeat"])
    rows = []
    for k in (1, 2, 3):
        rows += _tvd_rows(task, seed, data, LN3, k, METHODS, panel=f"d={task['d']}, k={k}")
    return rows


def _grid_plot(frame: pd.DataFrame, path: Path, *, x: str, xlabel: str, xlog: bool,
               suptitle: str, rows: str = "d", cols: str = "k") -> Path:
    grid = []
    for rv in sorted(frame[rows].unique()):
        row = []
        for cv in sorted(frame[cols].unique()):
            sub = frame[(frame[rows] == rv) & (frame[cols] == cv)]
            row.append(Panel(f"{rows}={rv}, {cols}={cv}", sub))
        grid.append(row)
    xs = sorted(frame[x].dropna().unique())
    ticks = [f"2^{int(math.log2(v))}" for v in xs] if xlog else [f"{v:g}" for v in xs]
    return curve_grid(grid, path, x=x, y="tvd", hue_order=list(METHODS), labels=LABELS,
                      ylabel="mean TVD", xlabel=xlabel, xlog=xlog, xticks=xs,
                      xticklabels=ticks, suptitle=suptitle, share_y=False)


def _fig4_plot(frame: pd.DataFrame, out: Path, quick: bool) -> list[Path]:
    return [_grid_plot(frame, out / "cormode-fig4.png", x="n", xlabel="N", xlog=True,
                       suptitle="Cormode et al. Fig. 4: mean TVD of all k-way marginals vs. N "
                       "(MSNBC for MovieLens, eps = ln 3)" + (" (quick grid)" if quick else ""))]


def _halving_check(frame: pd.DataFrame) -> Check:
    c = Check("error halves when N quadruples (TVD ratio between N and 4N in [0.35, 0.7])",
              "§5.2 'error should be proportional to 1/sqrt(N)'")
    ok = frame[frame["status"] == "ok"]
    means = ok.groupby(["d", "k", "method", "n"])["tvd"].mean()
    for (d, k, meth), g in means.groupby(level=[0, 1, 2]):
        s = g.droplevel([0, 1, 2])
        for n in s.index:
            if 4 * n in s.index:
                r = s[4 * n] / s[n]
                c.add(0.35 <= r <= 0.7, f"{LABELS[meth]} d={d} k={k} N={_pow2(n)}: {r:.2f}")
    return c


def _fig4_summary(frame: pd.DataFrame, quick: bool) -> str:
    parts = [checks_markdown([*_checks(frame, ["d", "k", "n"]), _halving_check(frame)]),
             "## Mean TVD over all k-way marginals (rows: method, columns: N)\n"]
    for (d, k), sub in frame.groupby(["d", "k"]):
        parts.append(f"### d={d}, k={k}\n")
        parts.append(pivot_table(sub, rows="method", cols="n", value="tvd",
                                 row_order=list(METHODS), col_fmt=_pow2))
    return "\n".join(parts)


FIG4 = Experiment(
    name="cormode-fig4",
    title="Cormode et al. Figure 4: total variation distance vs. N",
    paper="Cormode et al. §5.2, Figure 4",
    description=("Mean total variation distance of all k-way marginals (k = 1, 2, 3) of the "
                 "top-d MSNBC categories (d = 4, 8, 16; MSNBC stands in for the MovieLens "
                 "genres) for InpRR, InpPS, InpHT, MargRR, MargPS, MargHT at eps = ln 3, as "
                 "N grows; 10 repeats."),
    tasks=_fig4_tasks, run_task=_fig4_run, plot=_fig4_plot, summarize=_fig4_summary,
    columns=TVD_COLUMNS,
    quick_note="N = 2^14, 2^15, 2^16, 2 repeats.",
    full_note="N = 2^16 ... 2^19 (the paper: 50K <= N <= 0.5M, powers of 2), 10 repeats.",
)


# -- Figure 5: TVD vs. k (taxi) --------------------------------------------------------------
def _fig5_tasks(quick: bool) -> list[dict[str, Any]]:
    n, repeats = (2**16, 2) if quick else (2**18, 10)
    return [{"key": f"cormode-fig5|n={n}|rep={r}", "dataset": "nyc-taxis", "n": n, "d": 8,
             "repeat": r} for r in range(repeats)]


def _fig5_run(task: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    data = sample_users(task["dataset"], task["d"], task["n"], seed, task["repeat"])
    rows = []
    for k in range(1, 8):
        rows += _tvd_rows(task, seed, data, LN3, k, METHODS, panel="NYC taxi, d=8")
    return rows


def _fig5_plot(frame: pd.DataFrame, out: Path, quick: bool) -> list[Path]:
    ks = sorted(frame["k"].unique())
    return [curve_grid([[Panel(f"NYC taxi flags, N={_pow2(int(frame['n'].iloc[0]))}, d=8, "
                               "eps=ln 3", frame)]], out / "cormode-fig5.png", x="k",
                       y="tvd", hue_order=list(METHODS), labels=LABELS, ylabel="mean TVD",
                       xlabel="k", xticks=ks, xticklabels=[str(k) for k in ks],
                       suptitle="Cormode et al. Fig. 5: effect of varying k"
                       + (" (quick grid)" if quick else ""))]


def _fig5_summary(frame: pd.DataFrame, quick: bool) -> str:
    ok = frame[frame["status"] == "ok"]
    means = ok.groupby(["k", "method"])["tvd"].mean().rename("mean").reset_index()
    c = Check("InpHT is the method of choice for k <= d/2 = 4 (lowest TVD)", "§5.3")
    c2 = Check("for k > 4 InpHT stays competitive (within 2x of the best)", "§5.3")
    for k, g in means.groupby("k"):
        by = dict(zip(g["method"], g["mean"], strict=True))
        if "inp_ht" not in by:
            continue
        best = min(by, key=by.get)
        if k <= 4:
            c.add(by["inp_ht"] <= by[best] * 1.0001, f"k={k} (best {LABELS[best]})")
        else:
            c2.add(by["inp_ht"] <= 2 * by[best], f"k={k} (best {LABELS[best]})")
    return "\n".join([checks_markdown([c, c2]), "## Mean TVD (rows: method, columns: k)\n",
                      pivot_table(frame, rows="method", cols="k", value="tvd",
                                  row_order=list(METHODS), col_fmt=lambda k: f"k={k}")])


FIG5 = Experiment(
    name="cormode-fig5",
    title="Cormode et al. Figure 5: total variation distance vs. k",
    paper="Cormode et al. §5.3, Figure 5",
    description=("Mean TVD of all k-way marginals, k = 1..7, of the 8 NYC taxi flags, "
                 "N = 2^18 trips drawn with replacement from the 5,589 of the sample, "
                 "eps = ln 3; 10 repeats."),
    tasks=_fig5_tasks, run_task=_fig5_run, plot=_fig5_plot, summarize=_fig5_summary,
    columns=TVD_COLUMNS,
    quick_note="N = 2^16, 2 repeats.", full_note="N = 2^18, 10 repeats.",
)


# -- Figure 9 (appendix B.1): TVD vs. eps ------------------------------------------------------
FIG9_EPS = (0.4, 0.6, 0.8, 1.0, 1.2, 1.4)


def _fig9_tasks(quick: bool) -> list[dict[str, Any]]:
    n, repeats = (2**16, 2) if quick else (2**18, 10)
    eps = (0.4, 0.8, 1.4) if quick else FIG9_EPS
    return [{"key": f"cormode-fig9|d={d}|n={n}|rep={r}", "dataset": "msnbc", "n": n, "d": d,
             "repeat": r, "eps": list(eps)} for d in (4, 8, 16) for r in range(repeats)]


def _fig9_run(task: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    data = sample_users(task["dataset"], task["d"], task["n"], seed, task["repeat"])
    rows = []
    for eps in task["eps"]:
        for k in (1, 2, 3):
            rows += _tvd_rows(task, seed, data, eps, k, METHODS, panel=f"d={task['d']}, k={k}")
    return rows


def _fig9_plot(frame: pd.DataFrame, out: Path, quick: bool) -> list[Path]:
    return [_grid_plot(frame, out / "cormode-fig9.png", x="epsilon", xlabel="epsilon",
                       xlog=False, suptitle="Cormode et al. Fig. 9: mean TVD vs. eps, N = "
                       f"{_pow2(int(frame['n'].iloc[0]))} (MSNBC for MovieLens)"
                       + (" (quick grid)" if quick else ""))]


def _fig9_summary(frame: pd.DataFrame, quick: bool) -> str:
    c = Check("MargPS beats MargHT at the largest eps", "B.1 'MARGPS's accuracy gets better "
              "than MARGHT with increase in eps'")
    ok = frame[frame["status"] == "ok"]
    means = ok.groupby(["d", "k", "epsilon", "method"])["tvd"].mean()
    top = max(frame["epsilon"])
    for (d, k), g in means.groupby(level=[0, 1]):
        s = g.droplevel([0, 1])
        if (top, "marg_ps") in s.index and (top, "marg_ht") in s.index and k >= 2:
            c.add(s[(top, "marg_ps")] < s[(top, "marg_ht")], f"d={d} k={k}")
    parts = [checks_markdown([*_checks(frame, ["d", "k", "epsilon"]), c]),
             "## Mean TVD (rows: method, columns: eps)\n"]
    for (d, k), sub in frame.groupby(["d", "k"]):
        parts.append(f"### d={d}, k={k}\n")
        parts.append(pivot_table(sub, rows="method", cols="epsilon", value="tvd",
                                 row_order=list(METHODS), col_fmt=lambda e: f"{e:g}"))
    return "\n".join(parts)


FIG9 = Experiment(
    name="cormode-fig9",
    title="Cormode et al. Figure 9 (appendix B.1): total variation distance vs. epsilon",
    paper="Cormode et al. appendix B.1, Figure 9",
    description=("Mean TVD of all k-way marginals (k = 1, 2, 3; d = 4, 8, 16 MSNBC "
                 "categories for the MovieLens genres), N = 2^18, 0.4 <= eps <= 1.4; "
                 "10 repeats."),
    tasks=_fig9_tasks, run_task=_fig9_run, plot=_fig9_plot, summarize=_fig9_summary,
    columns=TVD_COLUMNS,
    quick_note="N = 2^16, eps in {0.4, 0.8, 1.4}, 2 repeats.",
    full_note="N = 2^18, eps = 0.4, 0.6, ..., 1.4, 10 repeats.",
)


# -- Table 3: InpEM failures --------------------------------------------------------------------
TABLE3 = ((2**16, 8, 1, 0.2, "3/8"), (2**18, 8, 2, 0.1, "15/28"), (2**16, 8, 2, 0.2, "3/28"),
          (2**16, 12, 2, 0.2, "19/66"), (2**18, 16, 2, 0.1, "120/120"),
          (2**18, 16, 2, 0.2, "72/120"), (2**19, 24, 2, 0.2, "276/276"))


def _table3_tasks(quick: bool) -> list[dict[str, Any]]:
    repeats, shrink = (1, 4) if quick else (5, 1)
    out = []
    for i, (n, d, k, eps, paper) in enumerate(TABLE3):
        n = n // shrink
        for r in range(repeats):
            out.append({"key": f"cormode-table3|row={i}|n={n}|d={d}|k={k}|eps={eps}|rep={r}",
                        "dataset": "nyc-taxis", "n": n, "d": d, "k": k, "eps": eps,
                        "paper": paper, "repeat": r, "panel": f"row {i + 1}"})
    return out


def _table3_run(task: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    data = sample_users(task["dataset"], task["d"], task["n"], seed, task["repeat"])

    def em_info(synopsis: Any, row: dict[str, Any]) -> None:
        info = getattr(synopsis, "info", {}) or {}
        row.update(em_failures=info.get("em_failures"), em_queries=info.get("em_queries"),
                   em_stopped_at_prior=info.get("em_stopped_at_prior"),
                   em_not_converged=info.get("em_not_converged"))

    exact = truths(data, all_queries(data.domain, task["k"]))
    rows = []
    for meth in ("inp_em", "inp_ht"):
        rng = seed_for(seed, "method", task["key"].split("|rep=")[0], task["repeat"], meth)
        rows.append(run_method(meth, _params(meth, task["eps"], task["k"]), data, exact, rng,
                               fields={"panel": task["panel"], "dataset": task["dataset"],
                                       "n": task["n"], "d": task["d"], "k": task["k"],
                                       "epsilon": task["eps"], "repeat": task["repeat"],
                                       "paper": task["paper"]},
                               after=em_info if meth == "inp_em" else None))
    return rows


def _table3_plot(frame: pd.DataFrame, out: Path, quick: bool) -> list[Path]:
    ok = frame[(frame["status"] == "ok") & (frame["method"] == "inp_em")].copy()
    ok["failed fraction"] = ok["em_failures"] / ok["em_queries"]
    ok["stopped at prior"] = ok["em_stopped_at_prior"] / ok["em_queries"]
    long = ok.melt(id_vars=["panel", "repeat", "status"],
                   value_vars=["failed fraction", "stopped at prior"], var_name="measure",
                   value_name="fraction")
    paper = frame.drop_duplicates("panel")[["panel", "paper"]]
    frac = [eval_fraction(p) for p in paper["paper"]]
    extra = pd.DataFrame({"panel": paper["panel"], "repeat": 0, "status": "ok",
                          "measure": "paper (failed)", "fraction": frac})
    long = pd.concat([long, extra], ignore_index=True)
    long["setting"] = long["panel"].map(_row_label(frame))
    return [point_panels([Panel("InpEM failures per setting (fraction of all k-way "
                                "marginals)", long)], out / "cormode-table3.png",
                         category="setting", y="fraction", hue="measure",
                         hue_order=["paper (failed)", "failed fraction", "stopped at prior"],
                         ylabel="fraction of marginals",
                         suptitle="Cormode et al. Table 3: InpEM failures on the taxi flags"
                         + (" (quick grid)" if quick else ""))]


def eval_fraction(text: str) -> float:
    a, b = text.split("/")
    return int(a) / int(b)


def _row_label(frame: pd.DataFrame) -> dict[str, str]:
    first = frame.drop_duplicates("panel")
    return {r.panel: f"N={_pow2(int(r.n))} d={int(r.d)} k={int(r.k)} eps={r.epsilon:g}"
            for r in first.itertuples()}


def _table3_summary(frame: pd.DataFrame, quick: bool) -> str:
    ok = frame[frame["status"] == "ok"]
    em, ht = ok[ok["method"] == "inp_em"], ok[ok["method"] == "inp_ht"]
    lines = ["| N | d | k | eps | paper: failed/total | ours: failed (mean over runs) | "
             "ours: stopped at prior | InpEM TVD | InpHT TVD |", "|---|---|---|---|---|---|---|"
             "---|---|"]
    c = Check("InpEM fails on a sizeable share of the marginals at small eps", "Table 3")
    for panel, g in em.groupby("panel", sort=False):
        r0 = g.iloc[0]
        total = int(r0["em_queries"])
        failed = g["em_failures"].mean()
        prior = g["em_stopped_at_prior"].mean()
        h = ht[ht["panel"] == panel]["tvd"].mean()
        lines.append(f"| {_pow2(int(r0['n']))} | {int(r0['d'])} | {int(r0['k'])} | "
                     f"{r0['epsilon']:g} | {r0['paper']} | {failed:.1f}/{total} | "
                     f"{prior:.1f}/{total} | {fmt(g['tvd'].mean())} | {fmt(h)} |")
        c.add(failed >= 0.1 * total, f"N={_pow2(int(r0['n']))} d={int(r0['d'])} "
              f"eps={r0['epsilon']:g}: {failed:.1f}/{total} (paper {r0['paper']})")
    return "\n".join([checks_markdown([c]), "## Failures\n",
                      "A marginal *fails* when EM's stopping rule fires at the first iteration "
                      "from the uniform prior (the paper's definition: 'terminates after a "
                      "single step and outputs the prior'), or when the reports reject EM's "
                      "answer against the unbiased estimate by a likelihood-ratio test "
                      "(dpmarginals.local.em). 'Stopped at prior' counts the first kind "
                      "only. d > 8 duplicates the 8 flags' columns (§5.4).\n",
                      "\n".join(lines), ""])


TABLE3_EXP = Experiment(
    name="cormode-table3",
    title="Cormode et al. Table 3: failure rate of InpEM",
    paper="Cormode et al. appendix B, Table 3",
    description=("InpEM ((eps/d)-RR per attribute, EM from the uniform prior, Omega = 1e-5) "
                 "on every k-way marginal of the NYC taxi flags (columns duplicated for "
                 "d > 8) in the paper's seven settings; failures counted per marginal, with "
                 "InpHT's TVD for comparison."),
    tasks=_table3_tasks, run_task=_table3_run, plot=_table3_plot, summarize=_table3_summary,
    columns=(*TVD_COLUMNS, "paper", "em_failures", "em_queries", "em_stopped_at_prior",
             "em_not_converged"),
    quick_note="N divided by 4, one run per setting.",
    full_note="The paper's N, 5 runs per setting.",
)


# -- Appendix B.2 (Figure 10): frequency oracles vs. d -------------------------------------------
B2_METHODS = ("inp_ht", "inp_olh", "inp_htcms")


def _b2_tasks(quick: bool) -> list[dict[str, Any]]:
    n, repeats = (2**16, 2) if quick else (2**18, 10)
    ds = (4, 8, 12, 16) if quick else (4, 6, 8, 10, 12, 14, 16)
    return [{"key": f"cormode-b2|d={d}|n={n}|rep={r}", "dataset": "zipf", "n": n, "d": d,
             "repeat": r} for d in ds for r in range(repeats)]


def _b2_run(task: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    data = sample_users("zipf", task["d"], task["n"], seed, task["repeat"])
    return _tvd_rows(task, seed, data, LN3, 2, B2_METHODS, panel="k=2")


def _b2_plot(frame: pd.DataFrame, out: Path, quick: bool) -> list[Path]:
    ds = sorted(frame["d"].unique())
    return [curve_grid([[Panel(f"synthetic Zipf data, N={_pow2(int(frame['n'].iloc[0]))}, "
                               "k=2, eps=ln 3", frame)]], out / "cormode-b2.png", x="d",
                       y="tvd", hue_order=list(B2_METHODS), labels=LABELS,
                       ylabel="mean TVD", xlabel="d", xticks=ds,
                       xticklabels=[str(d) for d in ds],
                       suptitle="Cormode et al. Fig. 10 (B.2): frequency oracles vs. d"
                       + (" (quick grid)" if quick else ""))]


def _b2_summary(frame: pd.DataFrame, quick: bool) -> str:
    ok = frame[frame["status"] == "ok"]
    means = ok.groupby(["d", "method"])["tvd"].mean()
    secs = ok.groupby(["d", "method"])["release_seconds"].mean()
    c1 = Check("for small d (<= 6) InpOLH is about as accurate as InpHT (within 2x)",
               "B.2 'For small d, the INPOLH scheme ... obtains accuracy equivalent to INPHT'")
    c2 = Check("InpHTCMS is less accurate than InpHT", "B.2 'not competitive in terms of "
               "accuracy'")
    for d in sorted(ok["d"].unique()):
        s = means.loc[d]
        if "inp_olh" in s and "inp_ht" in s and d <= 6:
            c1.add(s["inp_olh"] <= 2 * s["inp_ht"], f"d={d}: {fmt(s['inp_olh'])} vs "
                   f"{fmt(s['inp_ht'])}")
        if "inp_htcms" in s and "inp_ht" in s:
            c2.add(s["inp_htcms"] > s["inp_ht"], f"d={d}")
    tab = pivot_table(frame, rows="method", cols="d", value="tvd",
                      row_order=list(B2_METHODS), col_fmt=lambda d: f"d={d}")
    times = ", ".join(f"d={d} {LABELS[m]} {v:.2f}s" for (d, m), v in secs.items()
                      if d == max(ok["d"]))
    return "\n".join([checks_markdown([c1, c2]), "## Mean TVD of all 2-way marginals\n", tab,
                      f"Release time at the largest d (aggregate simulation): {times}. The "
                      "paper's InpOLH decoded every report against every cell (O(N 2^d)) and "
                      "timed out after 12 hours at d = 12 and 16; our simulation samples "
                      "OLH's support counts from their exact distribution (O(2^d)), so it "
                      "runs at every d.\n"])


B2 = Experiment(
    name="cormode-b2",
    title="Cormode et al. appendix B.2 (Figure 10): InpOLH and InpHTCMS vs. InpHT",
    paper="Cormode et al. appendix B.2, Figure 10",
    description=("Mean TVD of all 2-way marginals of synthetic, lightly skewed binary data "
                 "(each record's cell of the 2^d table from a Zipf law with exponent 1 over "
                 "a fixed random ranking) as d grows, e^eps = 3, N = 2^18; InpHTCMS with "
                 "g = 5 hash functions of width w = 256 as in the paper."),
    tasks=_b2_tasks, run_task=_b2_run, plot=_b2_plot, summarize=_b2_summary,
    columns=TVD_COLUMNS,
    quick_note="N = 2^16, d in {4, 8, 12, 16}, 2 repeats.",
    full_note="N = 2^18, d = 4, 6, ..., 16, 10 repeats.",
)


# -- §6.1: chi-squared association tests on the taxi flags ------------------------------------
DEPENDENT = (("Night_pick", "Night_drop"), ("Toll", "Far"), ("CC", "Tip"))
INDEPENDENT = (("M_drop", "CC"), ("Far", "Night_pick"), ("Toll", "Night_pick"))
CHI2_METHODS = ("inp_ht", "marg_ps")
#: The three tests of every private table: the paper's (noise ignored), ours by Monte Carlo
#: through the mechanism, ours by the asymptotic weighted chi-squares.
CHI2_TESTS = {"paper": "", "mc": "_mc", "asym": "_asym"}
CHI2_TEST_LABELS = {"paper": "paper's test", "mc": "noise-aware (MC)",
                    "asym": "noise-aware (asym.)"}


def _chi2_tasks(quick: bool) -> list[dict[str, Any]]:
    repeats = 10 if quick else 100
    return [{"key": f"cormode-chi2|n={2**18}|rep={r}", "dataset": "nyc-taxis", "n": 2**18,
             "d": 8, "k": 2, "repeat": r} for r in range(repeats)]


def _chi2_fields(res: Any, suffix: str) -> dict[str, Any]:
    return {f"pvalue{suffix}": res.pvalue, f"critical{suffix}": res.critical_value,
            f"dependent{suffix}": res.dependent}


def _chi2_run(task: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    from ..applications.association import chi_squared_test, independence_test
    from ..datasets import load
    from ..methods import make

    data = sample_users(task["dataset"], 8, task["n"], seed, task["repeat"])
    trips = load("nyc-taxis")
    sources: dict[str, Any] = {"nonprivate": data}
    reasons: dict[str, str] = {}
    for meth in CHI2_METHODS:
        try:
            m = make(meth, **_params(meth, LN3, 2))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sources[meth] = m.run(data, rng=seed_for(seed, "method", task["repeat"], meth))
        except DPMarginalsError as exc:
            reasons[meth] = str(exc)
    rows = []
    base = {"dataset": task["dataset"], "n": task["n"], "d": 8, "k": 2, "epsilon": LN3,
            "repeat": task["repeat"]}
    for expect, pairs in (("dependent", DEPENDENT), ("independent", INDEPENDENT)):
        for a, b in pairs:
            pair = f"{a}-{b}"
            for meth in (*CHI2_METHODS, "nonprivate"):
                fields = {**base, "panel": pair, "method": meth, "expected": expect}
                if meth in reasons:
                    rows.append(not_run(reasons[meth], **fields))
                    continue
                res = chi_squared_test(sources[meth].marginal([a, b]), task["n"])
                row = {**fields, "status": "ok", "reason": "", "chi2": res.statistic,
                       "pvalue": res.pvalue, "dof": res.dof, "critical": res.critical_value,
                       "dependent": res.dependent,
                       "correct": res.dependent == (expect == "dependent")}
                if meth != "nonprivate":  # ours: the same statistic against its noisy null
                    mc = independence_test(sources[meth], [a, b], rng=seed_for(
                        seed, "mc", task["repeat"], meth, pair))
                    row.update(_chi2_fields(mc, "_mc"))
                    asym = independence_test(sources[meth], [a, b], method="asymptotic")
                    row.update(_chi2_fields(asym, "_asym"))
                rows.append(row)
            if task["repeat"] == 0:  # the real trips themselves, n = 5,589
                res = chi_squared_test(trips.marginal([a, b]), trips.n)
                rows.append({**base, "n": trips.n, "panel": pair, "method": "trips",
                             "expected": expect, "status": "ok", "reason": "",
                             "chi2": res.statistic, "pvalue": res.pvalue, "dof": res.dof,
                             "critical": res.critical_value, "dependent": res.dependent,
                             "correct": res.dependent == (expect == "dependent")})
    return rows


def _chi2_decisions(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (repeat, pair, method, test) with its decision and the non-private
    decision of the same repeat and pair (``rejected``, ``nonprivate``: floats 0/1)."""
    ok = frame[(frame["status"] == "ok") & frame["method"].isin([*CHI2_METHODS, "nonprivate"])]
    nonpriv = ok[ok["method"] == "nonprivate"].set_index(["repeat", "panel"])["dependent"]
    parts = []
    for test, suffix in CHI2_TESTS.items():
        sub = ok[ok["method"].isin(CHI2_METHODS)][["repeat", "panel", "expected", "method",
                                                     f"dependent{suffix}"]].dropna()
        parts.append(sub.rename(columns={f"dependent{suffix}": "rejected"}).assign(test=test))
    out = pd.concat(parts, ignore_index=True)
    out["rejected"] = out["rejected"].astype(str).isin(["True", "1", "1.0"]).astype(float)
    keys = list(zip(out["repeat"], out["panel"], strict=True))
    out["nonprivate"] = [float(str(nonpriv.get(k)) in ("True", "1", "1.0")) for k in keys]
    return out


def _chi2_plot(frame: pd.DataFrame, out: Path, quick: bool) -> list[Path]:
    sub = frame[frame["method"].isin([*CHI2_METHODS, "nonprivate"])]
    crit = float(frame["critical"].dropna().iloc[0])
    grid = " (quick grid)" if quick else ""
    paths = [point_panels([Panel(f"{kind} pairs", sub[sub["expected"] == kind])
                           for kind in ("dependent", "independent")],
                          out / "cormode-chi2.png", category="panel", y="chi2", hue="method",
                          hue_order=["nonprivate", *CHI2_METHODS], labels=LABELS, ylog=True,
                          hline=crit, hline_label=f"critical value {crit:.2f} (1 dof, 95%)",
                          ylabel="chi-squared statistic",
                          suptitle="Cormode et al. Fig. 7: chi-squared tests, N = 2^18 taxi "
                          "trips, eps = ln 3" + grid)]
    dec = _chi2_decisions(frame)
    if len(dec):
        dec["who"] = dec["method"].map(LABELS) + ", " + dec["test"].map(CHI2_TEST_LABELS)
        nonpriv = dec.drop_duplicates(["repeat", "panel"]).assign(
            who="non-private", rejected=lambda f: f["nonprivate"])
        long = (pd.concat([nonpriv, dec], ignore_index=True)  # one rate per point: no bars
                .groupby(["expected", "panel", "who"], sort=False)["rejected"].mean()
                .reset_index().assign(status="ok"))
        order = ["non-private", *[f"{LABELS[m]}, {t}" for m in CHI2_METHODS
                                  for t in CHI2_TEST_LABELS.values()]]
        paths.append(point_panels(
            [Panel(f"{kind} pairs", long[long["expected"] == kind])
             for kind in ("dependent", "independent")],
            out / "cormode-chi2-decisions.png", category="panel", y="rejected", hue="who",
            hue_order=order, hline=0.05, hline_label="alpha = 0.05",
            ylabel="fraction of runs rejecting independence",
            suptitle="Cormode et al. §6.1: the paper's test vs. noise-aware tests, N = 2^18 "
            "taxi trips, eps = ln 3" + grid))
    return paths


def _chi2_summary(frame: pd.DataFrame, quick: bool) -> str:
    ok = frame[frame["status"] == "ok"].copy()
    ok["correct"] = ok["correct"].astype(float)
    lines = ["| pair | expected | trips (n=5,589) chi2 | non-private (N=2^18) chi2 | "
             + " | ".join(f"{LABELS[m]} chi2 (decision right)" for m in CHI2_METHODS) + " |",
             "|---" * (4 + len(CHI2_METHODS)) + "|"]
    for pair, g in ok.groupby("panel", sort=False):
        cells = [pair, g["expected"].iloc[0]]
        for meth in ("trips", "nonprivate", *CHI2_METHODS):
            s = g[g["method"] == meth]
            if not len(s):
                cells.append("—")
                continue
            text = fmt(s["chi2"].mean())
            if meth in CHI2_METHODS:
                text += f" ({s['correct'].sum():.0f}/{len(s)})"
            elif meth == "trips":
                text += f" (p={fmt(s['pvalue'].iloc[0])})"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    c = Check("InpHT's chi2 values are close to the non-private ones (within a factor 2)",
              "§6.1")
    c2 = Check("the paper's private tests reach the expected decision", "§6.1 (the paper's "
               "expectation for each pair)")
    for pair, g in ok.groupby("panel", sort=False):
        npv = g[g["method"] == "nonprivate"]["chi2"].mean()
        ht = g[g["method"] == "inp_ht"]["chi2"].mean()
        if npv > 0 and ht > 0:
            c.add(0.5 <= ht / npv <= 2.0, f"{pair}: {fmt(ht)} vs {fmt(npv)}")
        for meth in CHI2_METHODS:
            s = g[g["method"] == meth]
            if len(s):
                c2.add(bool(s["correct"].mean() >= 0.5), f"{pair} {LABELS[meth]}")
    dec = _chi2_decisions(frame)
    c3 = Check("the noise-aware (MC) tests reach the expected decision", "§6.1 (the "
               "paper's expectation for each pair)")
    for (pair, meth), g in dec[dec["test"] == "mc"].groupby(["panel", "method"], sort=False):
        want = float(g["expected"].iloc[0] == "dependent")
        c3.add(bool((g["rejected"] == want).mean() >= 0.5), f"{pair} {LABELS[meth]}")
    checks = [c, c2, c3]
    for test in CHI2_TESTS:
        ck = Check(f"{CHI2_TEST_LABELS[test]}: on the pairs the paper calls independent, the "
                   "runs where the non-private test does not reject are rejected at most at "
                   "the level, 5% (+ 2 binomial sd over those runs: a valid 5% test rejects a "
                   "true null in 5% of runs)", "issue 18")
        for (pair, meth), g in dec[(dec["test"] == test) & (dec["expected"] == "independent")
                                   ].groupby(["panel", "method"], sort=False):
            calm = g[g["nonprivate"] == 0]
            if len(calm):
                bound = 0.05 + 2 * math.sqrt(0.05 * 0.95 / len(calm))
                ck.add(bool(calm["rejected"].mean() <= bound),
                       f"{pair} {LABELS[meth]}: {calm['rejected'].sum():.0f}/{len(calm)}")
        checks.append(ck)
    return "\n".join([checks_markdown(checks), "## Chi-squared statistics\n",
                      "Mean over repeats; the critical value for 1 degree of freedom at 95% is "
                      "3.84; every test uses n = N = 2^18 users (the trips row uses the 5,589 "
                      "real trips). '(x/y)': runs whose decision (the paper's test) matches "
                      "the expectation.\n",
                      "\n".join(lines), "", _chi2_decision_table(frame, dec)])


def _chi2_decision_table(frame: pd.DataFrame, dec: pd.DataFrame) -> str:
    """Rejection rates of every test, and the noise-aware tests' mean critical values."""
    if not len(dec):
        return ""
    ok = frame[(frame["status"] == "ok") & frame["method"].isin(CHI2_METHODS)]
    head = ["pair", "expected", "non-private rejects"]
    for meth in CHI2_METHODS:
        head += [f"{LABELS[meth]}: {t}" for t in ("paper", "MC", "asym.", "MC critical")]
    lines = ["## Decisions: the paper's test vs. noise-aware tests\n",
             "Fraction of runs rejecting independence at alpha = 0.05 (x/y: runs). The "
             "noise-aware tests compare the same statistic with its distribution under "
             "independence through the mechanism (MC: 999 simulated releases; asym.: "
             "Gaboardi et al.'s weighted chi-squares); 'MC critical' is the mean "
             "Monte-Carlo critical value, against the paper's 3.84. Among the runs where "
             "the non-private test does not reject, the rejections are in brackets.\n",
             "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for pair, g in dec.groupby("panel", sort=False):
        first = g.drop_duplicates("repeat")
        cells = [pair, g["expected"].iloc[0],
                 f"{first['nonprivate'].sum():.0f}/{len(first)}"]
        for meth in CHI2_METHODS:
            for test in CHI2_TESTS:
                s = g[(g["method"] == meth) & (g["test"] == test)]
                calm = s[s["nonprivate"] == 0]
                text = f"{s['rejected'].sum():.0f}/{len(s)}" if len(s) else "—"
                if len(calm) and len(calm) < len(s):
                    text += f" ({calm['rejected'].sum():.0f}/{len(calm)})"
                cells.append(text)
            crit = ok[(ok["panel"] == pair) & (ok["method"] == meth)]["critical_mc"]
            cells.append(fmt(pd.to_numeric(crit, errors="coerce").mean()))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


CHI2 = Experiment(
    name="cormode-chi2",
    title="Cormode et al. §6.1 (Figure 7): chi-squared association tests",
    paper="Cormode et al. §6.1, Figure 7",
    description=("Chi-squared independence tests (1 degree of freedom, 95%) from 2-way "
                 "marginals released by InpHT and MargPS at eps = ln 3 from N = 2^18 trips "
                 "(drawn with replacement from the 5,589 taxi trips), on the three pairs the "
                 "paper expects dependent and the three it expects independent, next to the "
                 "non-private statistic: the paper's test, which compares the noisy "
                 "statistic with the chi-squared critical value "
                 "(dpmarginals.applications.chi_squared_test), and ours, which compares it "
                 "with its distribution under independence through the mechanism "
                 "(independence_test: Monte Carlo, and the asymptotic weighted chi-squares)."),
    tasks=_chi2_tasks, run_task=_chi2_run, plot=_chi2_plot, summarize=_chi2_summary,
    columns=("chi2", "pvalue", "dof", "critical", "dependent", "correct", "expected",
             "pvalue_mc", "critical_mc", "dependent_mc", "pvalue_asym", "critical_asym",
             "dependent_asym"),
    quick_note="10 repeats.", full_note="100 repeats.",
)


# -- §6.2: Chow-Liu trees -----------------------------------------------------------------------
CL_METHODS = ("inp_ht", "marg_ps", "calm")
CL_EPS = (0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4)


CL_DATA = {"nltcs": "NLTCS disability flags (strong pairwise MI, like the genres)",
           "msnbc": "MSNBC categories (weak pairwise MI)"}


def _cl_tasks(quick: bool) -> list[dict[str, Any]]:
    n, repeats = (2**16, 2) if quick else (2**18, 10)
    eps = (0.2, 0.6, 1.0, 1.4) if quick else CL_EPS
    return [{"key": f"cormode-chowliu|{ds}|n={n}|rep={r}", "dataset": ds, "n": n, "d": 10,
             "k": 2, "repeat": r, "eps": list(eps)} for ds in CL_DATA for r in range(repeats)]


def _cl_run(task: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    from ..applications.chow_liu import chow_liu_tree, compare_trees
    from ..methods import make

    data = sample_users(task["dataset"], task["d"], task["n"], seed, task["repeat"])
    best = chow_liu_tree(data).total_mutual_information
    base = {"dataset": task["dataset"], "n": task["n"], "d": task["d"], "k": 2,
            "repeat": task["repeat"], "panel": CL_DATA[task["dataset"]]}
    rows = []
    for eps in task["eps"]:
        rows.append({**base, "epsilon": eps, "method": "nonprivate", "status": "ok",
                     "reason": "", "mi": best, "mi_nonprivate": best, "ratio": 1.0})
        for meth in CL_METHODS:
            try:
                m = make(meth, **_params(meth, eps, 2))
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    syn = m.run(data, rng=seed_for(seed, "method", task["dataset"],
                                                   task["repeat"], eps, meth))
            except DPMarginalsError as exc:
                rows.append(not_run(str(exc), **base, epsilon=eps, method=meth))
                continue
            cmp = compare_trees(syn, data)
            rows.append({**base, "epsilon": eps, "method": meth, "status": "ok", "reason": "",
                         "mi": cmp["private"], "mi_nonprivate": cmp["nonprivate"],
                         "ratio": cmp["ratio"], "mi_estimated": cmp["private_estimated"],
                         "shared_edges": cmp["shared_edges"]})
    return rows


def _cl_plot(frame: pd.DataFrame, out: Path, quick: bool) -> list[Path]:
    eps = sorted(frame["epsilon"].unique())
    n = _pow2(int(frame["n"].iloc[0]))
    panels = [Panel(f"{CL_DATA[ds]}, d=10, N={n}", frame[frame["dataset"] == ds])
              for ds in CL_DATA if ds in set(frame["dataset"])]
    return [curve_grid([panels], out / "cormode-chowliu.png", share_y=False, x="epsilon",
                       y="mi", ylog=False,
                       hue_order=["nonprivate", *CL_METHODS], labels=LABELS,
                       ylabel="true total MI of the tree (nats)", xticks=eps,
                       xticklabels=[f"{e:g}" for e in eps],
                       suptitle="Cormode et al. Fig. 8: Chow-Liu trees from private 2-way "
                       "marginals" + (" (quick grid)" if quick else ""))]


def _cl_summary(frame: pd.DataFrame, quick: bool) -> str:
    ok = frame[frame["status"] == "ok"]
    means = ok.groupby(["dataset", "epsilon", "method"])["ratio"].mean()
    c1 = Check("InpHT's tree has nearly the non-private MI (ratio >= 0.95)", "§6.2")
    c2 = Check("MargPS is less accurate than InpHT at low eps (<= 0.6)", "§6.2 'MARGPS is less "
               "accurate at low eps's but catches up with INPHT as eps increases'")
    for (ds, eps), s in means.groupby(level=[0, 1]):
        s = s.droplevel([0, 1])
        if "inp_ht" in s:
            c1.add(s["inp_ht"] >= 0.95, f"{ds} eps={eps:g}: {s['inp_ht']:.3f}")
        if "marg_ps" in s and "inp_ht" in s and eps <= 0.6:
            c2.add(s["marg_ps"] <= s["inp_ht"], f"{ds} eps={eps:g}: MargPS {s['marg_ps']:.3f}"
                   f" vs InpHT {s['inp_ht']:.3f}")
    parts = [checks_markdown([c1, c2])]
    for ds, sub in ok.groupby("dataset", sort=False):
        parts += [f"## {CL_DATA.get(ds, ds)}\n",
                  "True total MI of the private tree / the non-private tree's:\n",
                  pivot_table(sub, rows="method", cols="epsilon", value="ratio",
                              row_order=["nonprivate", *CL_METHODS],
                              col_fmt=lambda e: f"{e:g}"),
                  "True total MI (nats), mean ± sd over repeats:\n",
                  pivot_table(sub, rows="method", cols="epsilon", value="mi",
                              row_order=["nonprivate", *CL_METHODS],
                              col_fmt=lambda e: f"{e:g}", with_sd=True),
                  "Edges shared with the non-private tree (of 9):\n",
                  pivot_table(sub[sub["method"] != "nonprivate"], rows="method",
                              cols="epsilon", value="shared_edges",
                              row_order=list(CL_METHODS), col_fmt=lambda e: f"{e:g}")]
    return "\n".join(parts)


CHOWLIU = Experiment(
    name="cormode-chowliu",
    title="Cormode et al. §6.2 (Figure 8): Chow-Liu trees from private marginals",
    paper="Cormode et al. §6.2, Figure 8",
    description=("The Chow-Liu tree learnt from the 2-way marginals released by InpHT, MargPS "
                 "(and CALM) on N = 2^18 users (d = 10 binary attributes), scored by the true "
                 "total mutual information of its edges, vs. the non-private tree "
                 "(dpmarginals.applications.compare_trees). Two stand-ins for the MovieLens "
                 "genre flags: NLTCS (21,574 people drawn with replacement; strongly "
                 "positively correlated flags, as the paper describes MovieLens) and the "
                 "top-10 MSNBC categories (weakly correlated)."),
    tasks=_cl_tasks, run_task=_cl_run, plot=_cl_plot, summarize=_cl_summary,
    columns=("mi", "mi_nonprivate", "ratio", "mi_estimated", "shared_edges"),
    quick_note="N = 2^16, eps in {0.2, 0.6, 1.0, 1.4}, 2 repeats.",
    full_note="N = 2^18 (the paper: 200K users), eps = 0.2, ..., 1.4, 10 repeats.",
)

CORMODE_EXPERIMENTS: list[Experiment] = [FIG4, FIG5, FIG9, TABLE3_EXP, B2, CHI2, CHOWLIU]
