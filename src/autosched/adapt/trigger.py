"""A round when contention arrives: a cheap check of the queue itself between rounds.

What a config change can gain is made while jobs queue: the order it gives them. A round at a
period boundary sees the queue of that moment; a burst that lands a day later finds the running
config in place for the rest of the period, and by the next boundary the queue, and the gain,
are gone (on ITP cluster02 small first was worth 30% of the average JCT on the day of a burst
and nothing a week later). The workload model's samples need no change to see it: once the
burst is in the backlog, every sample starts with it.

So at each check between rounds (daily in `autosched run`, every poll in `agent run`) the queue
is measured (`Queue.of`: the jobs waiting, not running, and the GPU-hours they hold, each job at
the mean run time of the finished jobs of its GPU-size class) and compared with the queue the
last round saw. A round runs when the waiting jobs grew `factor` times over the larger of that
count and `min_jobs`, and the queue holds at least `factor` times `floor_hours` hours of the
whole cluster's GPUs: a queue that merely wobbles, or a queue of a few short jobs, does not cost
a round. Pure: no simulation, a few array sums.

The jobs' count is what must grow, not the GPU-hours: a burst of small jobs behind a few large
ones queued at the last round (ITP cluster02's day 8: 10 multi-node jobs, then 59 jobs) is what
a new order ranks, though it hardly doubles the GPU-hours. And the GPU-hours are an expectation,
not the backlog's imputed durations: those are one random draw per job from a heavy-tailed
estimate, so the same ten queued jobs held 200 GPU-hours on one seed and 2,426 on another, and a
trigger on them fired or not on the draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import AdaptError
from .observe import MIN_EVENTS, Observation, gpu_class


@dataclass(frozen=True)
class Queue:
    """The jobs waiting at a moment (queued, not running) and their GPU-hours."""

    jobs: int
    gpu_hours: float

    @classmethod
    def of(cls, obs: Observation) -> "Queue":
        """The queue in `obs`'s backlog (every backlog job when it does not say which run), each
        job's hours `expected_duration`."""
        b = obs.backlog
        waiting = np.ones(len(b), dtype=bool) if obs.running is None else ~obs.running
        gpus = b.num_gpus[waiting]
        hours = expected_duration(obs, gpus, b.duration[waiting]) / 3600.0
        return cls(int(waiting.sum()), float((gpus * hours).sum()))

    def to_dict(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "gpu_hours": self.gpu_hours}

    @classmethod
    def from_dict(cls, d: Any) -> "Queue":
        return cls(int(d["jobs"]), float(d["gpu_hours"]))


def expected_duration(obs: Observation, gpus: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Per job of `gpus` GPUs, the mean duration of the history's finished jobs of its GPU-size
    class (of all finished jobs where the class has fewer than `MIN_EVENTS`; `fallback`, the
    imputed durations, where none has finished): the same queue always weighs the same."""
    done = obs.finished.astype(bool)
    if not done.any():
        return np.asarray(fallback, dtype=np.float64)
    durations = obs.history.duration[done]
    classes = gpu_class(obs.history.num_gpus[done])
    mine = gpu_class(gpus)
    out = np.full(len(gpus), float(durations.mean()))
    for c in np.unique(mine):
        ours = classes == c
        if np.count_nonzero(ours) >= MIN_EVENTS:
            out[mine == c] = durations[ours].mean()
    return out


@dataclass(frozen=True)
class ContentionTrigger:
    """When a queue is contention the last round did not see (see the module doc)."""

    factor: float = 2.0
    min_jobs: int = 10
    floor_hours: float = 1.0

    def __post_init__(self) -> None:
        if not (self.factor > 1 and self.min_jobs >= 0 and math.isfinite(self.floor_hours) and self.floor_hours >= 0):
            raise AdaptError(f"contention trigger: factor must be > 1, floors >= 0 (got {self.factor}, "
                             f"{self.min_jobs}, {self.floor_hours})")

    def fires(self, now: Queue, seen: Queue | None, cluster_gpus: int) -> str:
        """Why a round runs now ("": it does not); `seen` is the queue the last round saw (None:
        no round yet, nothing to compare with)."""
        if seen is None:
            return ""
        jobs = self.factor * max(seen.jobs, self.min_jobs)
        hours = self.factor * self.floor_hours * cluster_gpus
        if now.jobs >= jobs and now.gpu_hours >= hours:
            return (f"queue {now.jobs} jobs, {now.gpu_hours:,.0f} GPU-hours; the last round saw {seen.jobs}, "
                    f"{seen.gpu_hours:,.0f}")
        return ""
