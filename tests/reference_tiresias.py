"""Tiresias written from its definition, sharing nothing with the fast class but the knobs.

The fast `Tiresias` keeps remembered prefix cuts, a heap of timers, a queue book and skips
decisions that cannot change anything. This reference keeps one dict per quantity and, at every
wake-up, re-derives everything: which timers are due, every job's place in the priority order,
and the greedy walk "take each job in order while its GPUs fit". Tests run both on random cases
and require identical job segments, so a mistake in the fast class's bookkeeping cannot hide
behind a reference that shares it.

The definition (the docstring of `Tiresias`, and Tiresias's simulator for the timing):

- a job's queue is the number of thresholds its attained service since its last promotion has
  crossed; the crossing is looked at when it is due (a wake-up at the crossing time) and from
  then on measured afresh from the time it was looked at;
- a waiting job that ran since its last promotion is promoted to the top queue once its waits
  since then reach ``starvation`` times the time it ran since then (looked at when it is
  preempted, or re-filed); a promotion that falls due at the instant of the decision that made
  it fires at the partition's next event;
- a job that (re)started less than ``min_run`` ago is kept running and counts against the GPUs;
- with ``interval`` > 0, decisions happen only on multiples of it.
"""

from __future__ import annotations

import math

from autosched.policies.base import Policy
from autosched.policies.tiresias import Tiresias

_INF = math.inf


class ReferenceTiresias(Policy):
    name = "tiresias"
    summary = "reference implementation for tests"
    space = Tiresias.space
    preemptive = True

    def configure(self) -> None:
        c = self.config
        self.limits = [c["threshold"] * c["threshold_growth"] ** k for k in range(c["queues"] - 1)]
        self.interval = c["interval"]

    def on_reconfigure(self, config, now: float) -> None:
        super().on_reconfigure(config, now)
        self._refile(now)  # every active job re-filed as of now

    def bind(self, part, jobs) -> None:
        self.queue: dict[int, int] = {}  # active job -> queue
        self.base: dict[int, float] = {}  # attained service forgiven by promotions
        self.waited: dict[int, float] = {}  # waits since the last promotion that followed a run
        self.served_at: dict[int, float] = {}  # work done at the last promotion
        self.demote_at: dict[int, float] = {}  # running job -> when its crossing is looked at
        self.promote_at: dict[int, float] = {}  # waiting job -> when its promotion falls due
        self.protect_until: dict[int, float] = {}  # running job -> end of its min_run
        super().bind(part, jobs)

    # ------------------------------------------------------------------------------ events

    def on_arrival(self, j: int, now: float) -> None:
        self.queue[j], self.base[j], self.waited[j], self.served_at[j] = 0, 0.0, 0.0, 0.0

    def on_finish(self, j: int, now: float) -> None:
        for d in (self.queue, self.base, self.waited, self.served_at, self.demote_at,
                  self.promote_at, self.protect_until):
            d.pop(j, None)

    def schedule(self, now: float) -> None:
        part = self.part
        if self.interval > 0:
            tick = math.ceil(now / self.interval) * self.interval
            if now < tick:
                part.wake_at(tick)
                return
        self._fire(now)
        self._walk(now)
        if self.interval > 0:
            if self.queue:
                part.wake_at(now + self.interval)
            return
        due = [t for d in (self.demote_at, self.promote_at, self.protect_until) for t in d.values() if t > now]
        if due:
            part.wake_at(min(due))

    # ------------------------------------------------------------------------------ timing

    def _queue_for(self, attained: float) -> int:
        return sum(1 for limit in self.limits if attained >= limit - 1e-6)

    def _attained(self, j: int, t: float) -> float:
        return self.part.attained(j, t) - self.base[j]

    def _look_at_crossing(self, j: int, now: float) -> None:
        attained = self._attained(j, now)
        q = self.queue[j]
        if q < len(self.limits):
            self.demote_at[j] = now + max(self.limits[q] - attained, 0.0) / self.jobs.gpus[j]
        else:
            self.demote_at.pop(j, None)

    def _fire(self, now: float) -> None:
        part = self.part
        for j, t in sorted(self.protect_until.items()):
            if t <= now:
                del self.protect_until[j]
        for j, t in sorted(self.promote_at.items()):
            if t <= now:
                del self.promote_at[j]
                self.base[j] = part.attained(j, now)
                self.served_at[j] = part.served(j, now)
                self.waited[j] = 0.0
                self.queue[j] = 0
        for j, t in sorted(self.demote_at.items()):
            if t <= now:
                self.queue[j] = self._queue_for(self._attained(j, now))
                self._look_at_crossing(j, now)

    def _watch_starvation(self, j: int) -> None:
        part, starvation = self.part, self.config["starvation"]
        since = part.waiting_since(j)
        ran = self._attained(j, since) / self.jobs.gpus[j]
        if starvation > 0 and self.queue[j] > 0 and ran > 0 and part.served(j, since) > self.served_at[j]:
            self.promote_at[j] = since + max(0.0, starvation * ran - self.waited[j])

    def _refile(self, now: float) -> None:
        part, min_run = self.part, self.config["min_run"]
        self.demote_at.clear()
        self.promote_at.clear()
        self.protect_until.clear()
        for j in sorted(self.queue):
            self.queue[j] = self._queue_for(self._attained(j, now))
            if j in part.running:
                self._look_at_crossing(j, now)
                if min_run > 0:
                    self.protect_until[j] = part.run_started(j) + min_run
            else:
                self._watch_starvation(j)

    # ---------------------------------------------------------------------------- decision

    def _order(self) -> list[int]:
        """Active jobs in priority order: by queue, then submission (or running first)."""
        part = self.part
        running_first = self.config["queue_order"] == "running_first"
        return sorted(self.queue, key=lambda j: (self.queue[j], running_first and j not in part.running, j))

    def _walk(self, now: float) -> None:
        part, gpus = self.part, self.jobs.gpus
        kept = [j for j in self.protect_until if j in part.running]
        quota = part.capacity - sum(gpus[j] for j in kept)
        taken = set(kept)
        for j in self._order():
            if j not in taken and gpus[j] <= quota:
                taken.add(j)
                quota -= gpus[j]
        for j in [j for j in self._order() if j in part.running and j not in taken]:
            part.preempt(j)
            self.demote_at.pop(j, None)
            self._watch_starvation(j)
        failed = _INF  # placement failure is monotone in size within one decision
        for j in [j for j in self._order() if j in taken and j not in part.running]:
            if gpus[j] < failed and not self._start(j, now):
                failed = gpus[j]

    def _start(self, j: int, now: float) -> bool:
        part = self.part
        if not part.start(j):
            return False
        if self._attained(j, now) > 0:  # it ran since its last promotion: this wait counts
            self.waited[j] += now - part.waiting_since(j)
        self.promote_at.pop(j, None)
        self._look_at_crossing(j, now)
        if self.config["min_run"] > 0:
            self.protect_until[j] = now + self.config["min_run"]
        return True
