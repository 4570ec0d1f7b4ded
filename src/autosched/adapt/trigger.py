"""A round when contention arrives: a cheap check of the queue itself between rounds.

What a config change can gain is made while jobs queue: the order it gives them. A round at a
period boundary sees the queue of that moment; a burst that lands a day later finds the running
config in place for the rest of the period, and by the next boundary the queue, and the gain,
are gone (on ITP cluster02 small first was worth 30% of the average JCT on the day of a burst
and nothing a week later). The workload model's samples need no change to see it: once the
burst is in the backlog, every sample starts with it.

So at each check between rounds (daily in `autosched run`, every poll in `agent run`) the queue
is measured (`Queue.of`: the jobs waiting, not running, and the GPU-hours they hold, as imputed)
and compared with the queue the last round saw. A round runs when both grew `factor` times over
the larger of that queue and a floor (`min_jobs`; `floor_hours` hours of the whole cluster's
GPUs): a queue that merely wobbles, or a small one that doubles, does not cost a round. Pure: no
simulation, a few array sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import AdaptError
from .observe import Observation


@dataclass(frozen=True)
class Queue:
    """The jobs waiting at a moment (queued, not running) and their GPU-hours."""

    jobs: int
    gpu_hours: float

    @classmethod
    def of(cls, obs: Observation) -> "Queue":
        """The queue in `obs`'s backlog (every backlog job when it does not say which run)."""
        b = obs.backlog
        waiting = np.ones(len(b), dtype=bool) if obs.running is None else ~obs.running
        return cls(int(waiting.sum()), float((b.num_gpus[waiting] * b.duration[waiting]).sum()) / 3600.0)

    def to_dict(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "gpu_hours": self.gpu_hours}

    @classmethod
    def from_dict(cls, d: Any) -> "Queue":
        return cls(int(d["jobs"]), float(d["gpu_hours"]))


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
        hours = self.factor * max(seen.gpu_hours, self.floor_hours * cluster_gpus)
        if now.jobs >= jobs and now.gpu_hours >= hours:
            return (f"queue {now.jobs} jobs, {now.gpu_hours:,.0f} GPU-hours; the last round saw {seen.jobs}, "
                    f"{seen.gpu_hours:,.0f}")
        return ""
