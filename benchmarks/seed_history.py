"""Memory and time of reading a large seed history (`autosched.live.history.read_seed`).

Writes a sacct export of ROWS jobs (one job row and one step row each) spread over DAYS days, of
which the last WINDOW days are read (the agent keeps two history windows of a seed), then reads
it in a fresh process and prints the file's size, the jobs kept, the time and the peak resident
memory above the interpreter's at start. The reader keeps only the rows of the window, so memory
follows the window, not the file.

    python benchmarks/seed_history.py --rows 1000000 --days 365 --window 14
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

HEADER = "JobID|Submit|Start|End|AllocTRES|ReqTRES|User|Account|Partition|State|JobName|NCPUS|Timelimit"
END = 1_796_300_000  # the seed's last submission (unix s)


def write(path: Path, rows: int, days: float) -> None:
    span = days * 86400.0
    with open(path, "w") as f:
        f.write(HEADER + "\n")
        for i in range(rows):
            t = int(END - span + span * i / rows)
            s, e = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)), time.strftime(
                "%Y-%m-%dT%H:%M:%S", time.gmtime(t + 600))
            tres = f"billing=4,cpu=1,gres/gpu={1 + i % 8},node=1"
            f.write(f"{i}|{s}|{s}|{e}|{tres}|{tres}|u{i % 50}|a{i % 5}|gpu|COMPLETED|job|1|01:00:00\n")
            f.write(f"{i}.batch|{s}|{s}|{e}|cpu=1,mem=1G|||a{i % 5}||COMPLETED|batch|1|\n")


def measure(path: Path, window_days: float) -> None:
    """(in a child process) read the seed and print the figures."""
    from autosched.live.history import read_seed

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    jobs = read_seed(path, END - 2 * window_days * 86400.0, END + 1)
    took = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{path.stat().st_size / 2**20:.0f} MiB file, {len(jobs):,} jobs kept, "
          f"{took:.1f} s, peak RSS +{(peak - base) / 1024:.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--days", type=float, default=365.0)
    ap.add_argument("--window", type=float, default=14.0, help="history window (days); two are read")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.measure:
        measure(a.measure, a.window)
        return
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "seed.txt"
        write(path, a.rows, a.days)
        for window in (a.window, a.days / 2):
            print(f"window {window:g} days: ", end="", flush=True)
            subprocess.run([sys.executable, __file__, "--measure", str(path), "--window", str(window)],
                           check=True)


if __name__ == "__main__":
    main()
