"""Summary metrics of a simulated run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

from .engine import JobRecords

SLOWDOWN_BOUND = 10.0  # s: bounded slowdown counts jobs shorter than this as this long


@dataclass(frozen=True)
class Metrics:
    """Times in seconds. ``fairness`` is Jain's index of mean bounded slowdown across groups
    (VCs, else users; 1.0 = all groups equally slowed; 1.0 with fewer than two groups)."""

    jobs: int
    avg_jct: float
    median_jct: float
    p95_jct: float
    p99_jct: float
    avg_queue: float
    p99_queue: float
    avg_slowdown: float
    makespan: float
    utilization: float
    preemptions: int
    fairness: float

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


# What each metric means and whether less is better; read by the tuner's objective parser and
# the reports, so it is said once, here.
METRIC_HELP: dict[str, tuple[str, bool]] = {
    "jobs": ("jobs simulated", False),
    "avg_jct": ("average job completion time (s)", True),
    "median_jct": ("median job completion time (s)", True),
    "p95_jct": ("95th-percentile job completion time (s)", True),
    "p99_jct": ("99th-percentile job completion time (s)", True),
    "avg_queue": ("average time waiting for GPUs (s)", True),
    "p99_queue": ("99th-percentile time waiting for GPUs (s)", True),
    "avg_slowdown": (f"average bounded slowdown (JCT / max(duration, {SLOWDOWN_BOUND:g} s))", True),
    "makespan": ("first submission to last completion (s)", True),
    "utilization": ("busy GPU-seconds / (cluster GPUs x makespan)", False),
    "preemptions": ("jobs stopped by the scheduler", True),
    "fairness": ("Jain's index of mean slowdown across VCs or users (1 = fair)", False),
}


def compute_metrics(rec: JobRecords, capacity: int, groups: np.ndarray | None = None) -> Metrics:
    """Metrics of a finished run. `groups` (one label per job) is used for fairness."""
    n = len(rec.submit)
    if n == 0:
        return Metrics(jobs=0, avg_jct=0.0, median_jct=0.0, p95_jct=0.0, p99_jct=0.0, avg_queue=0.0,
                       p99_queue=0.0, avg_slowdown=0.0, makespan=0.0, utilization=0.0, preemptions=0,
                       fairness=1.0)
    jct = rec.jct
    queue = rec.queue
    slowdown = np.maximum(1.0, jct / np.maximum(rec.duration, SLOWDOWN_BOUND))
    makespan = float(rec.end.max() - rec.submit.min())
    busy = float(np.dot(rec.run_time, rec.gpus))
    p50, p95, p99 = np.percentile(jct, [50, 95, 99])
    return Metrics(
        jobs=n,
        avg_jct=float(jct.mean()),
        median_jct=float(p50),
        p95_jct=float(p95),
        p99_jct=float(p99),
        avg_queue=float(queue.mean()),
        p99_queue=float(np.percentile(queue, 99)),
        avg_slowdown=float(slowdown.mean()),
        makespan=makespan,
        utilization=busy / (capacity * makespan) if makespan > 0 else 0.0,
        preemptions=int(rec.preemptions.sum()),
        fairness=jain_index(slowdown, groups),
    )


def jain_index(values: np.ndarray, groups: np.ndarray | None) -> float:
    if groups is None:
        return 1.0
    _, inverse = np.unique(groups, return_inverse=True)
    means = np.bincount(inverse, weights=values) / np.bincount(inverse)
    if len(means) < 2:
        return 1.0
    return float(means.sum() ** 2 / (len(means) * np.square(means).sum()))
