"""Time Slurm's time-limit backfill in the simulator on a real trace, and check that a faster
planner decides the same.

    .venv/bin/python benchmarks/slurm_backfill.py [--days 2] [--repeat 3] [--save starts.npy | --check starts.npy]

The trace is the Philly slice of `benchmarks/simulator.py` (submitted in [2017-10-02, +N days),
32x8 GPUs), with every job given a time limit of 2 x its run time rounded up to the minute (as a
user over-asks), under the default `multifactor` config (Slurm's time-limit backfill, bf_interval
30 s, bf_max_job_test 500). Prints the best and median wall time of the simulation itself (in
process, after loading) and the number of backfill cycles. --save writes every job's start time;
--check compares with such a file and fails unless every start is identical.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from simulator import make_slice  # noqa: E402

from autosched.cluster import ClusterSpec  # noqa: E402
from autosched.policies import get_policy  # noqa: E402
from autosched.sim import Simulator  # noqa: E402
from autosched.trace import load_trace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--config", action="append", default=[], help="KNOB=VALUE (repeatable)")
    ap.add_argument("--save", help="write the start times (.npy)")
    ap.add_argument("--check", help="fail unless the start times equal this file's (.npy)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "slice.csv"
        make_slice(args.days, path)
        trace, _ = load_trace(path)
    trace = trace.replace(time_limit=np.ceil(2 * trace.duration / 60.0) * 60.0)
    policy = get_policy("multifactor")
    config = policy.space.parse_assignments(args.config)
    times, sim = [], None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        sim = Simulator(trace, ClusterSpec.uniform_nodes(32, 8), policy(config)).run()
        times.append(time.perf_counter() - t0)
    assert sim is not None
    starts = sim.records().first_start
    print(f"{len(trace)} jobs, {args.days}-day slice, 32x8, multifactor {sim.policies[0].backfill_kind}: "
          f"best {min(times):.2f} s, median {statistics.median(times):.2f} s "
          f"(runs: {', '.join(f'{t:.2f}' for t in times)}); avg wait {np.mean(starts - trace.submit_time):.1f} s")
    if args.save:
        np.save(args.save, starts)
    if args.check:
        ref = np.load(args.check)
        same = np.array_equal(ref, starts)
        print(f"starts identical to {args.check}: {same} "
              f"({int(np.sum(ref != starts))} of {len(starts)} differ)")
        if not same:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
