"""Backlog fidelity: does the controller's evaluation predict what a config does to the jobs the
cluster carries over at a decision?

At the first period boundary t of a replayed span (`autosched.adapt.experiment.boundaries`, as
`autosched run` decides), a simulator runs the policy's default config up to t. REAL: the same
simulator goes on with the default, and another one is reconfigured at t to the config under test
(as `autosched run` deploys it); the backlog jobs (queued or running at t) finish later or
sooner, and the real change is the sum of their remaining times (end - t) under the config over
that under the default, minus 1. PREDICTED: the controller's evaluation workloads at t
(`autosched.adapt.controller.round_workloads` on the observation: the backlog re-submitted at t
with its imputed remaining work, then the coming period's jobs) are simulated under both
configs, and the same ratio is taken over the backlog rows. Two observations: without the
backlog's history (what `autosched run` does today) and with it (``observe(...,
backlog_history=True)``: attained GPU-seconds and age). Two sources for the coming period's
jobs: ``future`` (the real arrivals: isolates the backlog) and ``stat`` (the model the
controller tunes on, `--samples` samples, the controller's first-round seed; pooled over the
samples). Two diagnostic columns give the backlog its TRUE remaining work (what no controller
knows), without and with its history: they separate the history's error from the imputation's.

The configs: the ones the report's strategies deployed at t (autosched, last_period,
oracle_period; those present) and ``oracle_static``'s, read from an `autosched run --json` report
(``--run-json``; ``--run K`` for the K-th run of a ``--seeds N`` report, whose seed then also
seeds the controller's observation and samples unless ``--seed`` says otherwise); the policy is
the report's.

    PYTHONPATH=src python benchmarks/backlog_fidelity.py ../shared/traces/microsoft-itp-elasticflow/cluster02.csv \\
        --cluster 11x8 --span 21 --run-json itp02.json
    # the fourth run (seed 3) of an 8-seed report
    PYTHONPATH=src python benchmarks/backlog_fidelity.py ... --run-json itp02-8seeds.json --run 3
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from autosched.adapt.controller import round_seed_of, round_workloads
from autosched.adapt.experiment import DAY, Settings, boundaries
from autosched.adapt.observe import observe
from autosched.adapt.sources import FutureSource, ModelSource
from autosched.cli.common import load_inputs
from autosched.policies import get_policy
from autosched.sim import Simulator
from autosched.sim.engine import DONE, FUTURE


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def configs_from_run(path: Path, t: float, run: int = 0) -> tuple[str, int, dict[str, dict]]:
    """The policy of an `autosched run --json` report, and the configs its strategies deployed
    at `t` (autosched, last_period, oracle_period: their timelines) and oracle_static's. `run`:
    which run of a `--seeds N` report (0: the first; k: its ``runs[k - 1]``), whose seed is
    returned too."""
    rep = json.loads(Path(path).read_text())
    one = rep if run == 0 else rep["runs"][run - 1]
    strat = one["strategies"]
    out = {}
    for name in ("autosched", "last_period", "oracle_period"):
        at = [e for e in strat.get(name, {}).get("timeline", []) if abs(e["time"] - t) < 1.0]
        if at:
            out[name] = at[0]["config"]
    if "oracle_static" in strat:
        out["oracle_static"] = strat["oracle_static"]["timeline"][0]["config"]
    return rep["settings"]["policy"], int(one["settings"]["seed"]), out


def real_remaining(trace, cluster, cls, default: dict, config: dict, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The backlog at t (rows) and each one's real remaining time (end - t) under the default and
    under `config` deployed at t."""
    base = Simulator(trace, cluster, cls(default)).run(until=t)
    state = np.asarray(base.state)
    rows = np.flatnonzero((state != DONE) & (state != FUTURE))
    other = Simulator(trace, cluster, cls(default)).run(until=t)
    other.reconfigure(config)
    end_d = base.run().records().end[rows]
    end_c = other.run().records().end[rows]
    return rows, end_d - t, end_c - t


def true_remaining(obs, sim: Simulator, t: float):
    """`obs` with each backlog job's true remaining work instead of its imputed one (diagnostic)."""
    tr = sim.trace
    state = np.asarray(sim.state)
    rows = np.flatnonzero((state != DONE) & (state != FUTURE))
    if not np.array_equal(obs.backlog.job_id, tr.job_id[rows]):
        raise SystemExit("the backlog is not in trace order")
    dur = tr.duration if tr.time_limit is None else np.fmin(tr.duration, tr.time_limit)
    part = sim.cluster.partition_of(tr)
    left = np.array([dur[j] - sim.partitions[part[j]].served(int(j), t) for j in rows])
    return replace(obs, backlog=obs.backlog.replace(duration=np.maximum(left, 1.0)))


def predicted(workloads: list, backlog_ids: set, t: float, cluster, cls, default: dict,
              config: dict) -> tuple[float, float, float]:
    """Over the workloads: the backlog rows' summed remaining time under the default and under
    `config`, and the workloads' avg JCT change (config vs default, pooled)."""
    rem_d = rem_c = jct_d = jct_c = 0.0
    for w in workloads:
        mine = (w.submit_time == t) & np.isin(w.job_id, list(backlog_ids))
        rd = Simulator(w, cluster, cls(default)).run().records()
        rc = Simulator(w, cluster, cls(config)).run().records()
        rem_d += float((rd.end[mine] - t).sum())
        rem_c += float((rc.end[mine] - t).sum())
        jct_d += float(rd.jct.mean())
        jct_c += float(rc.jct.mean())
    return rem_d, rem_c, jct_c / jct_d - 1.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--skip", type=float, default=0.0, help="days skipped at the start")
    ap.add_argument("--span", type=float, default=21.0, help="days replayed")
    ap.add_argument("--run-json", type=Path, required=True, help="an `autosched run --json` report of this run")
    ap.add_argument("--samples", type=int, default=4, help="stat samples (the controller's default)")
    ap.add_argument("--seed", type=int, default=None, help="the controller's seed (default: the run's)")
    ap.add_argument("--run", type=int, default=0, help="which run of a `--seeds N` report to read the configs of (0: the first)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    tr, cl, _ = load_inputs(args.trace, args.cluster, quiet=True)
    tr = tr.window(tr.start + args.skip * DAY, tr.start + (args.skip + args.span) * DAY)  # as `autosched run`
    t = boundaries(tr, Settings().period)[1]
    policy, run_seed, configs = configs_from_run(args.run_json, t, args.run)
    seed = run_seed if args.seed is None else args.seed
    st = Settings(seed=seed)
    cls = get_policy(policy)
    default = cls.space.default()
    sim = Simulator(tr, cl, cls(default)).run(until=t)
    obs = {h: observe(sim, t, max(tr.start, t - st.history), seed=seed, backlog_history=h) for h in (False, True)}
    obs["true, no history"] = true_remaining(obs[False], sim, t)
    obs["true, history"] = true_remaining(obs[True], sim, t)
    ids = set(obs[False].backlog.job_id.tolist())
    say(f"{args.trace.name}: day {(t - tr.start) / DAY:.2f}, backlog {len(ids)} jobs, policy {policy}")
    round_seed = round_seed_of(seed, 0)  # the controller's first round
    sources = {"future": FutureSource(tr), "stat": ModelSource("stat", args.samples)}
    print("| trace | cluster | config | backlog | real: default remaining (job-h) | real change "
          "| source | predicted without history | predicted with history | true remaining work, without history "
          "| true remaining work, with history | workload avg JCT change without / with history |")
    print("|" + "---|" * 12)
    for name, config in configs.items():
        rows, rd, rc = real_remaining(tr, cl, cls, default, config, t)
        real = rc.sum() / rd.sum() - 1.0
        for sname, src in sources.items():
            cells = []
            jcts = []
            for h in obs:
                wl = round_workloads(src, obs[h], st.period, cl, round_seed)
                pd, pc, jct = predicted(wl, ids, t, cl, cls, default, config)
                cells.append(f"{pc / pd - 1:+.1%} ({pd / 3600:,.0f} job-h)")
                jcts.append(f"{jct:+.1%}")
            print(f"| {args.trace.stem} | {args.cluster} | {name} | {len(rows)} | {rd.sum() / 3600:,.0f} "
                  f"| {real:+.1%} | {sname} | {' | '.join(cells)} | {' / '.join(jcts[:2])} |", flush=True)
    say(f"total: {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
