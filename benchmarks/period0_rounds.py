"""What a round inside period 0 can know: at each round time (days from the start), the jobs
seen so far, the offered load (GPU-hours / capacity) of the controller's sampled weeks against the
real coming week, and what a config does on each: the sampled weeks' mean change in average JCT
under `--config` against the default, and the real week's (`FutureSource`: what an oracle tunes on).
Both carry the backlog as the controller does (`round_workloads`), on a cluster that ran the
default up to each round (what every round sees when the earlier ones kept it); the samples use
the seeds the controller's rounds from the first one on would use.

ITP cluster02 is why `Settings.early_rounds` exists. The real week after day 3 is heavy (516
jobs, load 0.91), and the first round's 3 days of history (145 jobs) are light: its samples carry
0.28 of capacity (3 seeds x 4 samples), and a config that gains 68% on the real week gains 1.5% on them. The history
grows each day (220 jobs by day 6), the samples get heavier (0.46-0.55 at days 5-6) and the same
config's predicted gain larger (5.9-8.3%), so a round there can deploy before the first boundary.

    PYTHONPATH=src python benchmarks/period0_rounds.py ../shared/traces/microsoft-itp-elasticflow/cluster02.csv \\
        --cluster 11x8 --span 21 --run-json itp02.json

judges the config oracle_period's first round chose, read from an `autosched run --json` report
of it (`--run-json`; here the oracles' report); `--config '{"queues": 3, ...}'` judges another one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from autosched.adapt.controller import round_seed_of, round_workloads
from autosched.adapt.experiment import DAY, Settings
from autosched.adapt.observe import observe
from autosched.adapt.sources import FutureSource, ModelSource
from autosched.cli.common import load_inputs
from autosched.cluster import ClusterSpec
from autosched.data import sample_path
from autosched.policies import get_policy
from autosched.sim import Simulator
from autosched.trace.table import Trace


def load(w: Trace, now: float, capacity: float, horizon: float) -> float:
    """Offered load of the jobs submitted after `now` (the backlog is submitted at `now`)."""
    return w.take(np.flatnonzero(w.submit_time > now)).gpu_seconds() / (capacity * horizon)


def change(workloads: list[Trace], cluster: ClusterSpec, cls: type, default: dict, config: dict) -> float:
    """Mean over the workloads of avg JCT under `config` / under the default, minus 1."""
    return float(np.mean([Simulator(w, cluster, cls(config)).run().records().jct.mean() /
                          Simulator(w, cluster, cls(default)).run().records().jct.mean() - 1.0 for w in workloads]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path, nargs="?", help="a trace (default: the bundled sample)")
    ap.add_argument("--cluster", default="32x8")
    ap.add_argument("--skip", type=float, default=0.0, help="days skipped at the start")
    ap.add_argument("--span", type=float, default=28.0, help="days replayed")
    ap.add_argument("--at", default="3,4,5,6", help="round times, days from the start")
    ap.add_argument("--config", help="the config to judge, as JSON (default: oracle_period's first round, --run-json)")
    ap.add_argument("--run-json", type=Path, help="an `autosched run --json` report of this run")
    ap.add_argument("--samples", type=int, default=4, help="the controller's samples a round")
    ap.add_argument("--seeds", type=int, default=3, help="controller seeds (each its own observation and samples)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    tr, cl, _ = load_inputs(args.trace or sample_path(), args.cluster, quiet=True)
    tr = tr.window(tr.start + args.skip * DAY, tr.start + (args.skip + args.span) * DAY)  # as `autosched run`
    st = Settings()
    cls = get_policy(st.policy)
    default = cls.space.default()
    if args.config:
        config = cls.space.validate(json.loads(args.config))
    elif args.run_json:
        rep = json.loads(args.run_json.read_text())
        first = rep["strategies"]["oracle_period"]["decisions"][0]
        if first["time"] >= rep["boundaries"][1] or first["candidate"] is None:
            raise SystemExit(f"{args.run_json}: oracle_period's first decision is not a round inside period 0 that tuned")
        config = first["candidate"]
    else:
        raise SystemExit("give --config or --run-json")
    capacity = float(cl.gpus)
    print("| day | jobs seen | real coming week: jobs, load, config vs default | sampled weeks: jobs, load, config vs default (mean over seeds x samples) |")
    print("|---|---|---|---|")
    for index, day in enumerate(float(x) for x in args.at.split(",")):
        now = tr.start + round(day * DAY)
        sim = Simulator(tr, cl, cls(default)).run(until=now)
        seen = int(((tr.submit_time >= tr.start) & (tr.submit_time <= now)).sum())
        real = sampled = None
        jobs, loads, changes = [], [], []
        for seed in range(args.seeds):
            obs = observe(sim, now, max(tr.start, now - st.history), seed=seed)
            if real is None:
                (w,) = round_workloads(FutureSource(tr), obs, st.period, cl, 0)
                new = int((w.submit_time > now).sum())
                real = f"{new}, {load(w, now, capacity, st.period):.2f}, {change([w], cl, cls, default, config):+.1%}"
            round_seed = round_seed_of(seed, index)
            ws = round_workloads(ModelSource(st.model, args.samples), obs, st.period, cl, round_seed)
            jobs += [int((w.submit_time > now).sum()) for w in ws]
            loads += [load(w, now, capacity, st.period) for w in ws]
            changes.append(change(ws, cl, cls, default, config))
        sampled = (f"{np.mean(jobs):.0f} ({min(jobs)}–{max(jobs)}), {np.mean(loads):.2f} ({min(loads):.2f}–"
                   f"{max(loads):.2f}), {np.mean(changes):+.1%}")
        print(f"| {day:g} | {seen} | {real} | {sampled} |", flush=True)
    print(f"total: {time.perf_counter() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
