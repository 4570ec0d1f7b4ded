"""Weekly offered load (GPU-hours submitted / cluster GPU-hours) of the traces and clusters of
docs/results.md, and the spread of week-over-week load ratios: how far the coming week's level
can be from last week's, whatever a forecaster does.

    PYTHONPATH=src python benchmarks/weekly_load.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from autosched.cli.common import load_inputs
from autosched.data import sample_path

DAY, WEEK = 86400.0, 7 * 86400.0
TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
ITP = TRACES / "microsoft-itp-elasticflow"
# name -> (trace, cluster, days skipped before week 0): the runs of docs/results.md
RUNS = {
    "ITP cluster02, 11x8": (ITP / "cluster02.csv", "11x8", 0),
    "ITP cluster04, 88x8": (ITP / "cluster04.csv", "88x8", 0),
    "ITP cluster06, 15x8": (ITP / "cluster06.csv", "15x8", 0),
    "ITP cluster07, 40x8": (ITP / "cluster07.csv", "40x8", 0),
    "Philly (from Oct 2), 72x8": (TRACES / "philly" / "philly_jobs_sia.csv", "72x8", 28),
    "Bundled sample, 32x8": (sample_path(), "32x8", 0),
}


def weekly_loads(path: Path, cluster: str, skip_days: float, weeks: int = 5) -> list[float]:
    tr, cl, _ = load_inputs(path, cluster, quiet=True)
    t0 = tr.start + skip_days * DAY
    out = []
    for w in range(weeks):
        if t0 + w * WEEK >= tr.end:
            break
        x = tr.window(t0 + w * WEEK, t0 + (w + 1) * WEEK)
        out.append(float(np.sum(x.duration * x.num_gpus)) / (cl.gpus * WEEK))
    return out


def main() -> None:
    print("| trace | " + " | ".join(f"week {w}" for w in range(5)) + " |")
    print("|---|" + "---|" * 5)
    ratios = []
    for name, (path, cluster, skip) in RUNS.items():
        loads = weekly_loads(path, cluster, skip)
        ratios.extend(np.diff(np.log(loads)))
        print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in loads) + " |" * (6 - len(loads)))
    r = np.asarray(ratios)
    print(f"\n{len(r)} pairs of consecutive weeks: sd of log(load ratio) {r.std(ddof=1):.2f}; "
          f"{int(np.sum(np.abs(r) > np.log(1.1)))} differ by more than 10%")


if __name__ == "__main__":
    main()
