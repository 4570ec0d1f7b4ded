"""First in, first out, with optional backfill."""

from __future__ import annotations

from collections import deque

from ..sim.contract import JobInfo, Partition
from ..space import Bool, ConfigSpace, Float
from .backfill import priority_pass
from .base import PLACEMENT, Policy


class Fifo(Policy):
    """Jobs start in submission order. Without backfill the queue stops at the first job that does
    not fit (strict FIFO, as the Lucid/Helios and Tiresias simulators' ``fifo``). With backfill,
    later jobs may start while the head does not fit, until the head has waited ``reserve_after``
    seconds: then it is reserved and nothing may pass it."""

    name = "fifo"
    summary = "first in, first out; optional backfill with a starvation guard"
    space = ConfigSpace([
        PLACEMENT,
        Bool("backfill", "let later jobs start while the head of the queue does not fit", default=False),
        Float("reserve_after", "once the head has waited this long, nothing may pass it (0 = never backfill)",
              low=0.0, high=7 * 86400.0, default=6 * 3600.0, unit="s", condition=("backfill", (True,))),
    ])

    def configure(self) -> None:
        self.backfill = self.config["backfill"]
        self.reserve_after = self.config["reserve_after"]

    def bind(self, part: Partition, jobs: JobInfo) -> None:
        # One FIFO per GPU count: jobs of equal size fit or not alike, so backfill only ever needs
        # to look at the oldest job of each size.
        self.by_size: dict[int, deque[int]] = {}
        super().bind(part, jobs)

    def on_arrival(self, j: int, now: float) -> None:
        g = self.jobs.gpus[j]
        q = self.by_size.get(g)
        if q is None:
            self.by_size[g] = q = deque()
        q.append(j)

    def schedule(self, now: float) -> None:
        submit, backfill, reserve_after = self.jobs.submit, self.backfill, self.reserve_after
        priority_pass(self.part, self.by_size, _oldest_first, self.part.start, self._pop,
                      lambda top: backfill and now - submit[top] < reserve_after)

    def _pop(self, g: int) -> None:
        q = self.by_size[g]
        q.popleft()
        if not q:
            del self.by_size[g]


def _oldest_first(j: int) -> int:
    return j  # rows are in submission order
