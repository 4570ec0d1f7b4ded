"""How far a burst of arrivals carries into the next day, on the traces of docs/results.md: the
evidence behind the agent's ``--persistence`` (`autosched.workload.level.recent_level`).

Every 3 hours from the fifth day on, three arrival rates: over the 4 days before (the history a
round fits its model on), over the last 6 hours (`level.RECENT`), and over the next day (what a
round predicts). The slope of ``log(next / history)`` on ``log(recent / history)`` says how much
of the last hours' level the next day keeps: 0, none (the history's level is the best forecast);
1, all of it. One job is added to each count, as `recent_level` does.

    PYTHONPATH=src python benchmarks/arrival_persistence.py
"""

from __future__ import annotations

import numpy as np
from weekly_load import RUNS, load_inputs

from autosched.workload.level import RECENT

DAY, STEP, HISTORY = 86400.0, 3 * 3600.0, 4 * 86400.0


def points(submit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log recent/history, log next/history) at every `STEP` with a full history and next day."""
    s = np.sort(submit)
    xs, ys = [], []
    for t in np.arange(s[0] + HISTORY, s[-1] - DAY, STEP):
        def rate(a: float, b: float) -> float:
            return (np.count_nonzero((s >= a) & (s < b)) + 1.0) / (b - a)
        hist = rate(t - HISTORY, t)
        xs.append(np.log(rate(t - RECENT, t) / hist))
        ys.append(np.log(rate(t, t + DAY) / hist))
    return np.array(xs), np.array(ys)


def main() -> None:
    print(f"| trace | points | slope | corr | next day / history where the last {RECENT / 3600:g} h ran at 2x or more |")
    print("|---|---|---|---|---|")
    every_x, every_y = [], []
    for name, (path, cluster, skip) in RUNS.items():
        tr, _, _ = load_inputs(path, cluster, quiet=True)
        x, y = points(tr.submit_time[tr.submit_time >= tr.start + skip * DAY])
        every_x.append(x)
        every_y.append(y)
        print(row(name, x, y))
    print(row("**all, pooled**", np.concatenate(every_x), np.concatenate(every_y)))


def row(name: str, x: np.ndarray, y: np.ndarray) -> str:
    slope = np.polyfit(x, y, 1)[0]
    busy = x >= np.log(2)
    after = f"{np.exp(y[busy].mean()):.2f} (last hours {np.exp(x[busy].mean()):.1f}x, {busy.sum()} points)" if busy.any() else "—"
    return f"| {name} | {len(x)} | {slope:.2f} | {np.corrcoef(x, y)[0, 1]:.2f} | {after} |"


if __name__ == "__main__":
    main()
