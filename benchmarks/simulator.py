"""Time the `autosched simulate` CLI end to end (process start-up included) per policy.

    .venv/bin/python benchmarks/simulator.py [--repeat 3] [--policies fifo,tiresias,...] [--full]

Slices are made from ../shared/traces/philly/philly_jobs_sia.csv by the rule of
shared/traces/philly/slices (all VCs, submitted in [2017-10-02, +N days), duration <= 2 days)
and run on 32x8 GPUs; --full also runs the whole Philly trace with its VCs
(philly_vc_nodes.csv). Prints the best and median wall time, jobs/s (at the best) and peak RSS
(of the child process).

The children run with bytecode caching on, as after a normal install (pip compiles the package;
an editable install writes __pycache__ on first import): PYTHONDONTWRITEBYTECODE is removed from
their environment and one untimed run compiles the modules first.
"""

from __future__ import annotations

import argparse
import calendar
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces" / "philly"
CLI = [str(Path(sys.executable).with_name("autosched")), "simulate"]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def make_slice(days: int, out: Path) -> int:
    sys.path.insert(0, str(REPO / "src"))
    from autosched.trace import load_trace, write_trace

    trace, _ = load_trace(SHARED / "philly_jobs_sia.csv")
    origin = calendar.timegm(datetime(2017, 9, 4).timetuple())
    start = calendar.timegm(datetime(2017, 10, 2).timetuple()) - origin
    keep = ((trace.submit_time >= start) & (trace.submit_time < start + days * 86400)
            & (trace.duration <= 2 * 86400))
    sliced = trace.take(keep)
    write_trace(sliced.shifted(-sliced.start), out)
    return len(sliced)


def run_once(args: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one CLI run in a fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(CLI + args + ["--json"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    _, status, rusage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(args)}: {proc.stderr.read().decode()}")
    return wall, rusage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--policies", default="fifo,tiresias,sjf,srtf,qssf,multifactor")
    ap.add_argument("--days", default="2,7")
    ap.add_argument("--full", action="store_true", help="also the full Philly trace with its VCs")
    a = ap.parse_args()
    from autosched.policies import POLICIES

    policies = [p for p in a.policies.split(",") if p in POLICIES]
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for d in map(int, a.days.split(",")):
            path = Path(tmp) / f"philly_{d}d.csv"
            n = make_slice(d, path)
            cases.append((f"philly {d}d slice, 32x8", n, [str(path), "--cluster", "32x8"]))
        if a.full:
            cases.append(("philly full, 11 VCs", 82247,
                          [str(SHARED / "philly_jobs_sia.csv"), "--cluster", str(SHARED / "philly_vc_nodes.csv")]))
        run_once(cases[0][2] + ["--policy", policies[0]])  # compiles the modules (untimed)
        print(f"{'workload':28} {'policy':12} {'jobs':>7} {'best s':>7} {'median s':>8} {'jobs/s':>9} {'peak MiB':>9}")
        for label, n, args in cases:
            for p in policies:
                runs = [run_once(args + ["--policy", p]) for _ in range(a.repeat)]
                wall = min(r[0] for r in runs)
                median = statistics.median(r[0] for r in runs)
                rss = max(r[1] for r in runs)
                print(f"{label:28} {p:12} {n:7,} {wall:7.2f} {median:8.2f} {n / wall:9,.0f} {rss:9.0f}", flush=True)


if __name__ == "__main__":
    main()
