"""What each strategy of `autosched run` costs, one after another in one process as the CLI runs
them: wall seconds, CPU seconds (this process and its trial workers), the workers' minor page
faults and this process's resident memory after each strategy.

The page faults are what showed that forked trial workers copied the parent's pages when their
garbage collector walked the objects they inherited (docs/history.md, "the main job's time");
`--no-freeze` turns the workers' `gc.freeze()` off to show the difference:

    PYTHONPATH=src python benchmarks/strategy_cost.py --strategies autosched,last_period,oracle_static \\
        --oracle-budget 48 [--no-freeze]

Bundled sample on 32x8, the README's settings otherwise (2 workers); the oracles' searches are
not cached (a fresh temporary directory), so each run pays for them.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import tempfile
import time
from pathlib import Path

from autosched.adapt import run_experiment
from autosched.adapt.experiment import STRATEGIES, Settings
from autosched.cli.common import default_trace_and_cluster, load_inputs
from autosched.tune import ExecutionConfig


def rss_mb() -> float:
    """This process's resident memory (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strategies", default="autosched,last_period,oracle_static")
    ap.add_argument("--oracle-budget", type=int, default=48, help="trials of each oracle search")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-freeze", action="store_true", help="workers do not freeze what they inherit")
    args = ap.parse_args()
    names = args.strategies.split(",")
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        sys.exit(f"unknown strategies {unknown}; known: {', '.join(STRATEGIES)}")
    if args.no_freeze:
        gc.freeze = lambda: None  # type: ignore[assignment]  # only the workers call it
    path, cluster = default_trace_and_cluster(None, None)
    trace, spec, _ = load_inputs(path, cluster, quiet=True)
    settings = Settings(oracle_budget=args.oracle_budget, execution=ExecutionConfig(workers=args.workers))
    print(f"{len(trace):,} jobs, workers {args.workers}, oracle budget {args.oracle_budget}, "
          f"freeze {'off' if args.no_freeze else 'on'}; start: {rss_mb():.0f} MB resident")
    print(f"{'strategy':14} {'wall s':>7} {'CPU s':>7} {'workers sys s':>13} {'worker faults':>14} {'resident MB':>12}")
    with tempfile.TemporaryDirectory() as cache:
        for name in names:
            s0, c0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            run_experiment(trace, spec, settings, [name], cache=Path(cache))
            wall = time.perf_counter() - t0
            s1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = sum(getattr(b, f) - getattr(a, f) for a, b in ((s0, s1), (c0, c1)) for f in ("ru_utime", "ru_stime"))
            print(f"{name:14} {wall:7.1f} {cpu:7.1f} {c1.ru_stime - c0.ru_stime:13.1f} "
                  f"{c1.ru_minflt - c0.ru_minflt:14,} {rss_mb():12.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
