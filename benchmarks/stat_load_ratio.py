"""How heavy are a workload model's sampled periods, against the real next period? For each trace
and rolling weekly origin, the ratio of sampled to real next-week offered load (GPU-hours /
capacity), job count and p90 duration, with the model fitted on

* ``true 21d``: the true last 21 days (the setting of `autosched workload evaluate`),
* ``true 7d``: the true last 7 days,
* ``observed 7d``: the last 7 days as the controller of `autosched run` sees them at the origin
  (`observe` on a simulator run up to it with the policy's default config: unfinished jobs'
  durations imputed). This is what `autosched run` tunes on.

Prints one row per (trace, history, model): mean ± sd over origins x seeds of each ratio, the
ratio of summed loads (sampled / real over all origins: not pulled up by light weeks as a mean of
ratios is), the number of origins whose mean load ratio is within 0.9-1.1, and the mean over
origins of sampled load / the true last week's load: the model's own bias, apart from how much
the real next week differs from the last one (which no model fitted on the past can know).

    PYTHONPATH=src python benchmarks/stat_load_ratio.py                       # every trace
    PYTHONPATH=src python benchmarks/stat_load_ratio.py --traces sample,cluster04 --models stat,hybrid
    PYTHONPATH=src python benchmarks/stat_load_ratio.py --per-origin          # one line per origin too
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from autosched.adapt import observe
from autosched.cluster import fit_to_cluster, parse_cluster
from autosched.data import sample_path
from autosched.policies.tiresias import Tiresias
from autosched.sim import Simulator
from autosched.trace import load_trace
from autosched.trace.table import Trace
from autosched.workload import parse_model_spec

DAY = 86400.0
TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
ITP = TRACES / "microsoft-itp-elasticflow"
PHILLY = TRACES / "philly" / "philly_jobs_sia.csv"
# name -> (path, cluster, drop jobs longer than (s) or None, origins in days from the trace start).
# Cluster sizes are those of benchmarks/workload_eval.py (ITP sized for ~0.8 mean load) and of
# docs/results.md (Philly, all durations, 72x8; the 2-day-capped Philly of docs/workload.md, 32x8).
SETS: dict[str, tuple[Path | None, str, float | None, list[int]]] = {
    "sample": (None, "32x8", None, [7, 14, 21]),  # its first job is at 115 s
    "philly": (PHILLY, "72x8", None, list(range(35, 92, 7))),
    "philly2d": (PHILLY, "32x8", 2 * DAY, list(range(49, 92, 7))),
    "cluster04": (ITP / "cluster04.csv", "72x8", None, [21, 28, 35, 42, 49]),
    "cluster07": (ITP / "cluster07.csv", "44x8", None, [21, 28, 35, 42, 49]),
    "cluster02": (ITP / "cluster02.csv", "16x8", None, [21, 28, 35, 42, 49]),
    "cluster06": (ITP / "cluster06.csv", "16x8", None, [21, 28, 35, 42, 49]),
    "cluster03": (ITP / "cluster03.csv", "32x8", None, [32, 39, 46]),
    "cluster05": (ITP / "cluster05.csv", "2x8", None, [21, 28, 35, 42, 49]),
    "cluster01": (ITP / "cluster01.csv", "8x8", None, [44]),
}
HISTORIES = ("true 21d", "true 7d", "observed 7d")


def load_set(name: str) -> tuple[Trace, object, list[float]]:
    path, spec, cap, days = SETS[name]
    cl = parse_cluster(spec)
    tr = load_trace(path if path is not None else sample_path())[0]
    if cap is not None:
        tr = tr.take(np.flatnonzero(tr.duration <= cap))
    tr, _ = fit_to_cluster(tr, cl)
    # Origins are times in the trace's clock, as `workload evaluate --first` reads them (Philly
    # and the sample start at 00:00 of a Monday; an ITP trace at the start of its collection).
    return tr, cl, [d * DAY for d in days]


def sd(x: np.ndarray) -> float:
    return float(x.std(ddof=1)) if len(x) > 1 else 0.0


def ratios(sample: Trace, real: Trace) -> tuple[float, float, float]:
    p90 = float(np.percentile(sample.duration, 90) / np.percentile(real.duration, 90)) if len(sample) else 0.0
    return sample.gpu_seconds() / real.gpu_seconds(), len(sample) / len(real), p90


def measure(name: str, models: list[str], seeds: int, per_origin: bool) -> list[dict]:
    t0 = time.perf_counter()
    tr, cl, origins = load_set(name)
    sim = Simulator(tr, cl, Tiresias())
    # (history, model) -> rows of (origin index, load, count, p90) and summed GPU-seconds.
    rows: dict[tuple[str, str], list[tuple[int, float, float, float]]] = {}
    sums: dict[tuple[str, str], list[float]] = {}
    real_sum = 0.0
    lasts: dict[tuple[str, str], list[float]] = {}
    for k, t in enumerate(origins):
        real = tr.window(t, t + 7 * DAY)
        if len(real) == 0:
            continue
        real_sum += real.gpu_seconds()
        last_week = tr.window(t - 7 * DAY, t).gpu_seconds()
        sim.run(until=t)
        hists = {"true 21d": (tr.window(t - 21 * DAY, t), 21), "true 7d": (tr.window(t - 7 * DAY, t), 7),
                 "observed 7d": (observe(sim, t, t - 7 * DAY, seed=0).history, 7)}
        for hname, (hist, days) in hists.items():
            if len(hist) == 0:
                continue
            for spec in models:
                # fitted on the window [t - days, t), as evaluate and the controller fit
                model = parse_model_spec(spec).fit(hist, max(t - days * DAY, tr.start), t)
                n = 1 if model.deterministic else seeds
                got = []
                for s in range(n):
                    samp, _ = fit_to_cluster(model.sample(t, 7 * DAY, seed=s), cl)
                    got.append((k, *ratios(samp, real)))
                    sums.setdefault((hname, spec), []).append(samp.gpu_seconds() / n)
                rows.setdefault((hname, spec), []).extend(got)
                if last_week > 0:
                    lasts.setdefault((hname, spec), []).append(
                        np.mean([g[1] for g in got]) * real.gpu_seconds() / last_week)
                if per_origin:
                    a = np.array(got)[:, 1:]
                    print(f"  {name} day {(t - tr.start) / DAY:3.0f} real load "
                          f"{real.gpu_seconds() / (cl.gpus * 7 * DAY):.2f} {hname:11s} {spec:8s}: load "
                          f"{a[:, 0].mean():.2f} count {a[:, 1].mean():.2f} p90 {a[:, 2].mean():.2f}", flush=True)
    out = []
    for (hname, spec), rs in rows.items():
        a = np.array(rs)
        per_o = [a[a[:, 0] == k, 1].mean() for k in np.unique(a[:, 0])]
        out.append(dict(trace=name, cluster=cl.describe(), origins=len(per_o), history=hname, model=spec,
                        load=a[:, 1].mean(), load_sd=sd(a[:, 1]), count=a[:, 2].mean(), count_sd=sd(a[:, 2]),
                        p90=a[:, 3].mean(), p90_sd=sd(a[:, 3]), pooled=sum(sums[(hname, spec)]) / real_sum,
                        within=sum(0.9 <= x <= 1.1 for x in per_o),
                        vs_last=float(np.mean(lasts.get((hname, spec), [np.nan])))))
    print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default=",".join(SETS), help=f"comma-separated, of {', '.join(SETS)}")
    ap.add_argument("--models", default="replay,stat", help="model specs, comma-separated")
    ap.add_argument("--seeds", type=int, default=4, help="samples per stochastic model and origin")
    ap.add_argument("--per-origin", action="store_true")
    args = ap.parse_args()
    models = args.models.split(",")
    print("| trace | cluster | origins | history | model | load ratio | job count ratio | p90 duration ratio "
          "| summed load ratio | origins in 0.9-1.1 | load vs the true last week |")
    print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    for name in args.traces.split(","):
        for r in measure(name, models, args.seeds, args.per_origin):
            print(f"| {r['trace']} | {r['cluster']} | {r['origins']} | {r['history']} | {r['model']} "
                  f"| {r['load']:.2f} ± {r['load_sd']:.2f} | {r['count']:.2f} ± {r['count_sd']:.2f} "
                  f"| {r['p90']:.2f} ± {r['p90_sd']:.2f} | {r['pooled']:.2f} | {r['within']} of {r['origins']} "
                  f"| {r['vs_last']:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
