"""Quasi-shortest-service-first (Hu et al., Helios, SC '21), non-clairvoyant."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from ..sim.contract import JobInfo, Partition
from ..space import Bool, Categorical, ConfigSpace, Float, Int
from .base import PLACEMENT, Policy
from .srtf import PriorityQueue

_STATS: dict[str, Callable[[list[float]], float]] = {
    "mean": lambda xs: sum(xs) / len(xs),
    "median": statistics.median,
    "last": lambda xs: xs[-1],
}


class Qssf(Policy):
    """Priority = estimated duration x GPUs; smaller first (ties: fewer GPUs, then submission).

    The estimate is a statistic (``estimator``) of the run times of the last ``history`` jobs of
    the same user that finished in this partition before the job arrived; with none, of the same
    VC's; with none either, ``fallback``. Run times are observed when jobs finish (GPU-holding
    time, restart overheads included); the job's own duration is never read. A job's priority is
    fixed when it arrives, as Helios fixes it once assigned.

    Non-preemptive (default): jobs start in priority order and the queue stops at the first job
    that does not fit, as the Helios/Lucid ``qssf`` (``break`` at the first placement failure).
    ``preemptive``: at every arrival and completion all active jobs are ranked by priority and
    taken while their GPUs fit, preempting the rest (the greedy pass of ``srtf``).

    Differences from HeliosArtifact: its estimate blends a LightGBM model with a job-name match
    over the user's history (same GPU count preferred); we use the user's/VC's recent history
    only. It assigns priorities only once a queue forms (a burst into an empty queue is ordered
    by GPU count); we assign them at arrival.
    """

    name = "qssf"
    summary = "Helios QSSF: estimated duration x GPUs from finished jobs' history (non-clairvoyant)"
    preemptive = True  # it may preempt: with its `preemptive` knob on
    space = ConfigSpace([
        PLACEMENT,
        Categorical("estimator", "statistic of the user's (else VC's) finished run times",
                    choices=tuple(_STATS), default="mean"),
        Int("history", "how many most recent finished jobs of the user (or VC) the estimate uses",
            low=1, high=10000, default=1000, log=True),
        Float("fallback", "estimated duration of a job whose user and VC have no finished job yet",
              low=10.0, high=1e6, default=3600.0, log=True, unit="s"),
        Bool("preemptive", "preempt running jobs of worse priority (else wait for them to finish)",
             default=False),
    ])

    def configure(self) -> None:
        c = self.config
        self.stat = _STATS[c["estimator"]]
        self.history: int = c["history"]
        self.fallback: float = c["fallback"]
        self.preempting: bool = c["preemptive"]
        self._cache: dict[tuple[int, int], float] = {}  # (level, code) -> estimate

    def bind(self, part: Partition, jobs: JobInfo) -> None:
        super().bind(part, jobs)
        self.queue = PriorityQueue(part, jobs.gpus)
        self.key: dict[int, tuple[float, int, int]] = {}  # active job -> its queue entry
        # Observed run times of finished jobs, per user and per VC (level 0 and 1).
        self.done: tuple[dict[int, list[float]], dict[int, list[float]]] = ({}, {})

    def estimate(self, j: int) -> float:
        """Estimated duration of job j from jobs finished so far (never from j's own duration)."""
        for level, codes in enumerate((self.jobs.user, self.jobs.vc)):
            if codes is None:
                continue
            cached = self._cache.get((level, codes[j]))
            if cached is not None:
                return cached
            seen = self.done[level].get(codes[j])
            if seen:
                est = self._cache[(level, codes[j])] = self.stat(seen[-self.history:])
                return est
        return self.fallback

    def on_arrival(self, j: int, now: float) -> None:
        g = self.jobs.gpus[j]
        entry = self.key[j] = (self.estimate(j) * g, g, j)
        self.queue.add(entry, new=True)

    def on_finish(self, j: int, now: float) -> None:
        run = self.part.executed(j, now)
        for level, codes in enumerate((self.jobs.user, self.jobs.vc)):
            if codes is not None:
                self.done[level].setdefault(codes[j], []).append(run)
                self._cache.pop((level, codes[j]), None)
        del self.key[j]
        self.queue.finished(j)

    def schedule(self, now: float) -> None:
        queue, part = self.queue, self.part
        if self.preempting:
            queue.decide(self.key.__getitem__)
            return
        waiting = queue.waiting
        while waiting and part.free > 0 and queue.start(waiting[0]):
            pass
