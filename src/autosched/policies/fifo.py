"""First in, first out, with optional backfill."""

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Callable
from typing import Any

from ..sim.contract import JobInfo, Partition
from ..space import Bool, ConfigSpace, Float
from .backfill import priority_pass
from .base import PLACEMENT, Policy


class Fifo(Policy):
    """Jobs start in submission order. Without backfill the queue stops at the first job that does
    not fit (strict FIFO, as the Lucid/Helios and Tiresias simulators' ``fifo``). With backfill,
    later jobs may start while the head does not fit, until the head has waited ``reserve_after``
    seconds: then it is reserved and nothing may pass it. A job's submission is its first one
    (``JobInfo.origin``, for a trace with ages): a job re-submitted with its age keeps its place."""

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
        origin = jobs.origin
        # Rows are in submission order; with ages, a later row may have been submitted first.
        self.order: Callable[[int], Any] = _row if origin is None else lambda j: (origin[j], j)
        self.since = jobs.first_submit

    def on_arrival(self, j: int, now: float) -> None:
        g = self.jobs.gpus[j]
        q = self.by_size.get(g)
        if q is None:
            self.by_size[g] = q = deque()
        if self.jobs.origin is None:
            q.append(j)
        else:
            insort(q, j, key=self.order)

    def schedule(self, now: float) -> None:
        submit, backfill, reserve_after = self.since, self.backfill, self.reserve_after
        priority_pass(self.part, self.by_size, self.order, self.part.start, self._pop,
                      lambda top: backfill and now - submit[top] < reserve_after)

    def _pop(self, g: int) -> None:
        q = self.by_size[g]
        q.popleft()
        if not q:
            del self.by_size[g]


def _row(j: int) -> int:
    return j  # rows are in submission order
