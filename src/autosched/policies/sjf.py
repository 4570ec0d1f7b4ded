"""Shortest job first: an ORACLE baseline that reads every job's true duration."""

from __future__ import annotations

from heapq import heappop, heappush

from ..errors import SimulationError
from ..sim.contract import JobInfo, Partition
from ..space import ConfigSpace
from .base import PLACEMENT, Policy


class Sjf(Policy):
    """ORACLE (reads true durations, which no real scheduler knows). Non-preemptive: waiting jobs
    are taken in order of true duration (ties: submission order) and the queue stops at the first
    job that does not fit, as the Lucid/Helios simulators' ``sjf`` (they ``break`` at the first
    placement failure; no backfill)."""

    name = "sjf"
    summary = "ORACLE: shortest true duration first, non-preemptive, blocking at the head"
    oracle = True
    space = ConfigSpace([PLACEMENT])

    def bind(self, part: Partition, jobs: JobInfo) -> None:
        if jobs.duration is None:
            raise SimulationError("sjf reads true durations: the engine must give them to an oracle policy")
        self.duration: tuple[float, ...] = jobs.duration
        self.queue: list[tuple[float, int]] = []  # (true duration, job): a heap
        super().bind(part, jobs)

    def on_arrival(self, j: int, now: float) -> None:
        heappush(self.queue, (self.duration[j], j))

    def schedule(self, now: float) -> None:
        queue, part = self.queue, self.part
        while queue and part.free > 0 and part.start(queue[0][1]):
            heappop(queue)
