"""Time Slurm's time-limit backfill in the simulator on a real trace, and check that the lazy
planner starts every job when the reference planner does.

    .venv/bin/python benchmarks/slurm_backfill.py [--days 2] [--repeat 3] [--reference] [--save starts.npy | --check starts.npy]
    .venv/bin/python benchmarks/slurm_backfill.py --trace ../shared/traces/microsoft-itp-elasticflow/cluster04.csv --cluster 88x8 --order
    .venv/bin/python benchmarks/slurm_backfill.py --trace limits/cluster02.csv --keep-limits --span 21d --cluster 11x8 --compare

The trace is the Philly slice of `benchmarks/simulator.py` (submitted in [2017-10-02, +N days),
32x8 GPUs), or --trace on --cluster (--skip and --span cut a window of it, as `autosched run`
does), with every job given a time limit of 2 x its run time rounded up to the minute (as a user
over-asks), or, with --keep-limits, the trace's own limits (e.g. drawn by `autosched trace
limits`). The config is the default `multifactor` one (Slurm's time-limit backfill,
bf_interval 30 s, bf_max_job_test 500) with --config KNOB=VALUE changes. Prints the best and
median wall time of the simulation itself (in process, after loading). --reference plans with the
reference planner (`policies/backfill.py`) instead of the lazy one (`policies/lazy_backfill.py`).
--save writes every job's start time; --check compares with such a file and fails unless every
start is identical.

--compare runs both planners in turn (reference, lazy, reference, lazy, ... --repeat times each)
under the default config, every archetype of `multifactor` (`multifactor.ARCHETYPES`) and five
random configs of the knobs the live agent writes (seed 0, the others at their defaults), prints per config the best time of each and their ratio, and
fails unless every start is identical under every config.

--order also times, at every backfill cycle of one run and on that cycle's real queue, how the
cycle's job order (the first bf_max_job_test waiting jobs by priority, then submission) is built
now (one numpy sort of an int64 key per job) against how it was built before (a numpy lexsort of
the two keys; before that Python's sort with a key) and a copy into numpy of the start of the
policy's queue (a Python list of the same keys, kept in order), best of 5 each; checks that all
four agree, and prints the totals.
"""

from __future__ import annotations

import argparse
import math
import random
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

from autosched.cluster import ClusterSpec, parse_cluster  # noqa: E402
from autosched.export.live import live_subspace  # noqa: E402
from autosched.policies import get_policy  # noqa: E402
from autosched.policies.lazy_backfill import LazyBackfill  # noqa: E402
from autosched.policies.multifactor import ARCHETYPES, Multifactor  # noqa: E402
from autosched.sim import Simulator  # noqa: E402
from autosched.timeparse import parse_duration  # noqa: E402
from autosched.trace import load_trace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=2)
    ap.add_argument("--trace", help="any supported trace format instead of the Philly slice")
    ap.add_argument("--cluster", default="32x8", help="NODESxGPUS or a VC file")
    ap.add_argument("--skip", default="0", help="with --trace: leave out its first SKIP (e.g. 28d)")
    ap.add_argument("--span", help="with --trace: keep SPAN after --skip (e.g. 21d)")
    ap.add_argument("--keep-limits", action="store_true", help="the trace's own time limits, not 2 x run time")
    ap.add_argument("--reference", action="store_true", help="plan with the reference planner")
    ap.add_argument("--compare", action="store_true", help="both planners, 10 configs: times and identical starts")
    ap.add_argument("--order", action="store_true", help="time how each backfill cycle's job order is built")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--config", action="append", default=[], help="KNOB=VALUE (repeatable)")
    ap.add_argument("--save", help="write the start times (.npy)")
    ap.add_argument("--check", help="fail unless the start times equal this file's (.npy)")
    args = ap.parse_args()
    if args.trace:
        trace, _ = load_trace(args.trace)
        begin = trace.start + parse_duration(args.skip)
        trace = trace.window(begin, begin + parse_duration(args.span) if args.span else math.inf)
        what = Path(args.trace).name + (f" (skip {args.skip}, span {args.span})" if args.span else "")
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "slice.csv"
            make_slice(args.days, path)
            trace, _ = load_trace(path)
        what = f"{args.days}-day slice"
    if not args.keep_limits:
        trace = trace.replace(time_limit=np.ceil(2 * trace.duration / 60.0) * 60.0)
    elif trace.time_limit is None:
        raise SystemExit(f"{args.trace}: no time_limit column (draw one with `autosched trace limits`)")
    spec = parse_cluster(args.cluster)
    policy = get_policy("multifactor")
    config = policy.space.parse_assignments(args.config)
    if args.compare:
        compare(trace, spec, config, what, args.repeat)
        return
    Multifactor.reference_planner = args.reference
    times, sim = [], None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        sim = Simulator(trace, spec, policy(config)).run()
        times.append(time.perf_counter() - t0)
    assert sim is not None
    starts = sim.records().first_start
    planner = "reference" if args.reference else "lazy"
    print(f"{len(trace)} jobs, {what}, {args.cluster}, multifactor {sim.policies[0].backfill_kind}, {planner} planner: "
          f"best {min(times):.2f} s, median {statistics.median(times):.2f} s "
          f"(runs: {', '.join(f'{t:.2f}' for t in times)}); avg wait {np.mean(starts - trace.submit_time):.1f} s")
    if args.order:
        time_order(trace, spec, policy(config))
    if args.save:
        np.save(args.save, starts)
    if args.check:
        ref = np.load(args.check)
        same = np.array_equal(ref, starts)
        print(f"starts identical to {args.check}: {same} "
              f"({int(np.sum(ref != starts))} of {len(starts)} differ)")
        if not same:
            raise SystemExit(1)


def configs(base: dict) -> list[tuple[str, dict]]:
    """The default, every archetype, and five random configs of the live knobs (seed 0)."""
    space = get_policy("multifactor").space
    live = space.restrict(live_subspace("multifactor"))
    rng = random.Random(0)
    out = [("default", {}), *ARCHETYPES.items()]
    out += [(f"live #{k}", live.sample(rng)) for k in range(1, 6)]
    return [(name, space.validate({**base, **c})) for name, c in out]


def compare(trace, spec: ClusterSpec, base: dict, what: str, repeat: int) -> None:
    """Both planners in turn under each config: best times, their ratio, and identical starts."""
    policy = get_policy("multifactor")
    print(f"{len(trace)} jobs, {what}, {spec.describe()}: reference / lazy planner, best of {repeat} each "
          "(in turn: reference, lazy, ...)")
    differ = 0
    for name, config in configs(base):
        best = {True: math.inf, False: math.inf}
        starts = {}
        for _ in range(repeat):
            for reference in (True, False):
                Multifactor.reference_planner = reference
                t0 = time.perf_counter()
                sim = Simulator(trace, spec, policy(config)).run()
                best[reference] = min(best[reference], time.perf_counter() - t0)
                starts[reference] = sim.records().first_start
        Multifactor.reference_planner = False
        n = int(np.sum(starts[True] != starts[False]))
        differ += n
        print(f"  {name:17s} reference {best[True]:7.2f} s  lazy {best[False]:6.2f} s  "
              f"ratio {best[True] / best[False]:5.1f}x  differing starts {n} of {len(trace)}")
    if differ:
        raise SystemExit(1)


def time_order(trace, spec: ClusterSpec, policy) -> None:
    """Time both ways of building each backfill cycle's order on the run's real queues (the run
    itself is unchanged: the spy only reads the policy's state before the cycle plans)."""
    sim = Simulator(trace, spec, policy)
    pol = sim.policies[0]
    real = LazyBackfill.cycle
    waiting: list[int] = []
    spent = {"sort": 0.0, "queue": 0.0, "lexsort": 0.0, "key": 0.0}

    def best(f) -> float:
        out = math.inf
        for _ in range(5):
            t0 = time.perf_counter()
            f()
            out = min(out, time.perf_counter() - t0)
        return out

    def spy(self, part, order, *a, **kw):
        neg, m = pol.neg, pol.bf.max_job_test

        def key(k):
            return (neg[k], k)

        def lexsort():
            js = pol.waiting.array()
            return js[np.lexsort((js, neg[js]))][:m].tolist()

        def by_key():  # (the policy's own: one int64 key per job)
            js = pol.waiting.array()
            keys = pol._key_hi[js] + js
            keys.sort()
            return (keys[:m] & ((1 << pol._shift) - 1)).tolist()

        ways = {"sort": lambda: sorted(pol.waiting.array().tolist(), key=key)[:m],
                "queue": lambda: (np.fromiter(pol.queue[:m], np.int64) & ((1 << pol._shift) - 1)).tolist(),
                "lexsort": lexsort, "key": by_key}
        assert all(f() == order.tolist() for f in ways.values())
        waiting.append(len(pol.waiting))
        for name, f in ways.items():
            spent[name] += best(f)
        return real(self, part, order, *a, **kw)

    LazyBackfill.cycle = spy  # type: ignore[method-assign]
    try:
        sim.run()
    finally:
        LazyBackfill.cycle = real  # type: ignore[method-assign]
    w = np.asarray(waiting)
    print(f"{len(w)} backfill cycles, waiting jobs per cycle: median {np.median(w):.0f}, mean {w.mean():.0f}, "
          f"max {w.max()}; building the cycles' order: "
          + ", ".join(f"{name} {t:.3f} s ({t / len(w) * 1e6:.0f} us a cycle)" for name, t in spent.items()))

if __name__ == "__main__":
    main()
