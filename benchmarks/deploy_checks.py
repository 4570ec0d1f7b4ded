"""Would another guardrail check have refused a deployment? For each run of an `autosched run
--json` report, autosched's FIRST deployment is judged again on exactly the fresh samples its
guardrail used (the observation of the default run at that time, the round's validation seed),
and on the same samples at a heavier load:

- ``avg_jct``: the guardrail's own gain, recomputed (it must equal the report's predicted gain:
  the check that the round was reproduced);
- ``p99``, ``p95``: the gain in those percentiles of JCT (a rule on the samples' tail);
- ``xL avg_jct``: the gain when each fresh sample's bursts are scaled by ``--load`` (a busier
  week than forecast; `autosched.workload.level.rescale`), the backlog unchanged.

Only first deployments: before one, the cluster ran the default, so the round's observation can
be rebuilt from a default run alone. ITP cluster02's seed 4 (docs/history.md) is why it exists:

    PYTHONPATH=src python benchmarks/deploy_checks.py ../shared/traces/microsoft-itp-elasticflow/cluster02.csv \\
        --cluster 11x8 --span 21 --run-json itp02-8seeds.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from autosched.adapt.controller import VALIDATION_SEED_OFFSET, round_seed_of, round_workloads
from autosched.adapt.experiment import DAY
from autosched.adapt.observe import observe
from autosched.adapt.sources import ModelSource, concat
from autosched.cli.common import load_inputs
from autosched.cluster import fit_to_cluster
from autosched.data import sample_path
from autosched.policies import get_policy
from autosched.sim import Simulator
from autosched.tune import ExecutionConfig, Objective, SearchConfig, Tuner
from autosched.workload.level import rescale


def gain(tuner: Tuner, policy: str, running: dict, candidate: dict, workloads: list, metric: str) -> float:
    """Mean paired relative gain of `candidate` over `running` in `metric` (lower is better)."""
    r = [getattr(m, metric) for m in tuner.evaluate(policy, running, workloads)[1]]
    c = [getattr(m, metric) for m in tuner.evaluate(policy, candidate, workloads)[1]]
    return float(np.mean([(a - b) / a for a, b in zip(r, c)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path, nargs="?", help="the report's trace (default: the bundled sample)")
    ap.add_argument("--cluster", default="32x8")
    ap.add_argument("--skip", type=float, default=0.0, help="days skipped at the start, as the report's run")
    ap.add_argument("--span", type=float, default=28.0, help="days replayed, as the report's run")
    ap.add_argument("--run-json", type=Path, required=True, help="an `autosched run --json` report of this trace")
    ap.add_argument("--load", type=float, default=2.0, help="the heavier week's load, a multiple of the forecast's")
    args = ap.parse_args()
    tr, cl, _ = load_inputs(args.trace or sample_path(), args.cluster, quiet=True)
    tr = tr.window(tr.start + args.skip * DAY, tr.start + (args.skip + args.span) * DAY)  # as `autosched run`
    rep = json.loads(args.run_json.read_text())
    s = rep["settings"]
    if s["with_replay"] or s["level_sd"] or not s["carry_backlog"]:
        raise SystemExit(f"{args.run_json}: made with settings this check does not rebuild (replay mix, "
                         "load scenarios or no backlog)")
    policy, period, metric = s["policy"], float(s["period"]), s["metric"]
    cls = get_policy(policy)
    default = cls.space.default()
    source = ModelSource(s["model"], s["samples"], validation_samples=s["validation_samples"])
    tuner = Tuner(policy, cl, Objective(metric), SearchConfig(budget=1), ExecutionConfig())
    print(f"first deployments of autosched (gains over the default; {metric} must equal the report's):")
    for run in [rep, *rep.get("runs", [])]:
        seed = int(run["settings"]["seed"])
        start = float(run["boundaries"][0])
        decisions = run["strategies"]["autosched"]["decisions"]
        first = next((i for i, d in enumerate(decisions) if d["deployed"]), None)
        if first is None:
            print(f"  seed {seed}: never deployed")
            continue
        d = decisions[first]
        t, candidate = float(d["time"]), d["config"]
        sim = Simulator(tr, cl, cls(default)).run(until=t)
        obs = observe(sim, t, max(start, t - float(s["history"])), seed=seed,
                      backlog_history=bool(s["backlog_history"]))
        val_seed = round_seed_of(seed, first) + VALIDATION_SEED_OFFSET
        fresh = round_workloads(source, obs, period, cl, val_seed, fresh=True)
        busy = []
        for i, w in enumerate(source.validation_workloads(obs, period, val_seed)):
            w = rescale(w, args.load, t, period, np.random.default_rng([val_seed, i, 7]))
            w, _ = fit_to_cluster(concat(obs.backlog, w) if len(obs.backlog) else w, cl)
            busy.append(w)
        g = {m: gain(tuner, policy, default, candidate, fresh, m) for m in (metric, "p99_jct", "p95_jct")}
        heavy = gain(tuner, policy, default, candidate, busy, metric)
        print(f"  seed {seed}, day {(t - start) / DAY:.2f}: report {d['predicted_gain']:+.2%}, {metric} "
              f"{g[metric]:+.2%}, p99 {g['p99_jct']:+.2%}, p95 {g['p95_jct']:+.2%}, "
              f"x{args.load:g} {metric} {heavy:+.2%}", flush=True)


if __name__ == "__main__":
    main()
