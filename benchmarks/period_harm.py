"""Why did a period lose? A strategy's deployed configs, read from an `autosched run --json`
report, are replayed on the real trace against the fixed default, and the jobs of one period
(default: the strategy's worst against the default) are taken apart:

- per stretch of the period between deployments: jobs, their average JCT under the default and
  under the strategy, and the hours the strategy added or saved in all;
- the jobs the strategy delayed most (submit day, GPUs, duration, JCT default -> strategy);
- what the controller had seen at each deployment: jobs in the history and the widest of them;
- each changed knob held at the default through the whole timeline (the other knobs as deployed),
  and what that does to every period.

ITP cluster02's seed 4 (docs/history.md, "early rounds in period 0") is what it was written for:

    PYTHONPATH=src python benchmarks/period_harm.py ../shared/traces/microsoft-itp-elasticflow/cluster02.csv \\
        --cluster 11x8 --span 21 --run-json itp02-8seeds.json --run 4

``--run K`` reads the K-th run of a ``--seeds N`` report (0: the first, its top level).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from autosched.adapt.experiment import DAY
from autosched.cli.common import load_inputs
from autosched.cluster import ClusterSpec
from autosched.data import sample_path
from autosched.policies import get_policy
from autosched.sim import Simulator
from autosched.sim.engine import JobRecords
from autosched.trace.table import Trace

Timeline = list[tuple[float, dict]]


def timeline_of(path: Path, run: int, strategy: str) -> tuple[str, int, Timeline, list[float]]:
    """The policy, seed, (time, config) timeline of `strategy` and period boundaries of run `run`
    of a report."""
    rep = json.loads(path.read_text())
    one = rep if run == 0 else rep["runs"][run - 1]
    if strategy not in one["strategies"]:
        raise SystemExit(f"{path}: run {run} has no strategy {strategy!r} (it has {', '.join(one['strategies'])})")
    line = [(float(e["time"]), dict(e["config"])) for e in one["strategies"][strategy]["timeline"]]
    return rep["settings"]["policy"], int(one["settings"]["seed"]), line, [float(b) for b in one["boundaries"]]


def replay(trace: Trace, cluster: ClusterSpec, cls: type, line: Timeline) -> JobRecords:
    """The real trace under the timeline's configs, each switched in at its time (as `autosched run`)."""
    sim = Simulator(trace, cluster, cls(line[0][1]))
    for t, config in line[1:]:
        sim.run(until=t)
        sim.reconfigure(config)
    return sim.run().records()


def changes(rec: JobRecords, base: JobRecords, periods: list[np.ndarray]) -> str:
    return ", ".join(f"P{i} {rec.jct[m].mean() / base.jct[m].mean() - 1:+.1%}" for i, m in enumerate(periods) if m.any())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path, nargs="?", help="the report's trace (default: the bundled sample)")
    ap.add_argument("--cluster", default="32x8")
    ap.add_argument("--skip", type=float, default=0.0, help="days skipped at the start, as the report's run")
    ap.add_argument("--span", type=float, default=28.0, help="days replayed, as the report's run")
    ap.add_argument("--run-json", type=Path, required=True, help="an `autosched run --json` report of this trace")
    ap.add_argument("--run", type=int, default=0, help="which run of a --seeds N report (0: the first)")
    ap.add_argument("--strategy", default="autosched")
    ap.add_argument("--period", type=int, default=None, help="the period to take apart (default: the worst)")
    ap.add_argument("--top", type=int, default=6, help="how many of the most delayed jobs to list")
    args = ap.parse_args()
    tr, cl, _ = load_inputs(args.trace or sample_path(), args.cluster, quiet=True)
    tr = tr.window(tr.start + args.skip * DAY, tr.start + (args.skip + args.span) * DAY)  # as `autosched run`
    policy, seed, line, bounds = timeline_of(args.run_json, args.run, args.strategy)
    if abs(bounds[0] - tr.start) > 1.0 or not bounds[-2] <= tr.end < bounds[-1]:
        raise SystemExit(f"{args.run_json}: its periods run from {bounds[0]:g} s to {bounds[-1]:g} s, the trace window "
                         f"from {tr.start:g} s to {tr.end:g} s: give the report's --skip and --span")
    cls = get_policy(policy)
    default = cls.space.default()
    day = lambda t: (t - bounds[0]) / DAY  # noqa: E731
    sub = tr.submit_time
    periods = [(sub >= a) & (sub < b) for a, b in zip(bounds[:-1], bounds[1:])]
    base = replay(tr, cl, cls, [(bounds[0], default)])
    rec = replay(tr, cl, cls, line)
    loss = [rec.jct[m].mean() / base.jct[m].mean() - 1 if m.any() else -np.inf for m in periods]
    p = int(np.argmax(loss)) if args.period is None else args.period
    print(f"{args.strategy}, run {args.run} (seed {seed}), against the default: {changes(rec, base, periods)}")
    print("deployments (day: knobs changed from the default; the history then: jobs, widest in GPUs):")
    for t, config in line[1:]:
        seen = sub < t
        knobs = {k: v for k, v in config.items() if v != default[k]}
        print(f"  day {day(t):.2f}: {knobs}; {int(seen.sum())} jobs, widest {int(tr.num_gpus[seen].max())}")
    cuts = sorted({bounds[p], bounds[p + 1], *(t for t, _ in line[1:] if bounds[p] < t < bounds[p + 1])})
    print(f"period {p} (days {day(bounds[p]):.2f}-{day(bounds[p + 1]):.2f}), by stretch between deployments:")
    for a, b in zip(cuts[:-1], cuts[1:]):
        m = (sub >= a) & (sub < b)
        if not m.any():
            continue
        d, s = base.jct[m], rec.jct[m]
        print(f"  days {day(a):.2f}-{day(b):.2f}: {int(m.sum())} jobs (widest {int(tr.num_gpus[m].max())} GPUs), "
              f"avg JCT {d.mean() / 3600:.1f} h -> {s.mean() / 3600:.1f} h ({s.mean() / d.mean() - 1:+.1%}), "
              f"{(s - d).sum() / 3600:+,.0f} job-hours")
    rows = np.flatnonzero(periods[p])
    worst = rows[np.argsort(-(rec.jct[rows] - base.jct[rows]))[:args.top]]
    print(f"the {len(worst)} jobs of period {p} delayed most:")
    for j in worst:
        print(f"  day {day(sub[j]):.2f}, {int(tr.num_gpus[j])} GPUs, {tr.duration[j] / 3600:.1f} h long: "
              f"JCT {base.jct[j] / 3600:.1f} h -> {rec.jct[j] / 3600:.1f} h")
    print("each changed knob held at the default through the timeline:")
    for k in cls.space.names:
        if any(c[k] != default[k] for _, c in line[1:]):
            held = [(t, {**c, k: default[k]}) for t, c in line]
            print(f"  {k} = {default[k]}: {changes(replay(tr, cl, cls, held), base, periods)}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
