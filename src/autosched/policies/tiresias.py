"""Tiresias: discretised two-dimensional least-attained-service (Gu et al., NSDI '19)."""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from heapq import heappop, heappush
from itertools import chain, islice

from ..space import Categorical, ConfigSpace, Float, Int
from .base import PLACEMENT, Policy
from .prefix import SortedPrefix

QUEUE_ORDERS = ("submit", "running_first")


class Tiresias(Policy):
    """Jobs sit in priority queues by attained service (GPU-seconds held); a job moves down one
    queue each time its attained service crosses the next threshold. Within a queue, jobs are in
    submission order (``queue_order=submit``, as the Lucid simulator), or running jobs come first
    and then waiting ones, each in submission order (``running_first``: a waiting job never
    displaces a running job of its own queue, as the Tiresias simulator). At each decision, jobs
    are taken in that order while their GPUs fit in the partition's GPU count; running jobs that
    are not taken are preempted (a chosen job that placement cannot fit stays waiting).

    Defaults are those of the Tiresias simulator (3 queues at 3,250 and 7,200 GPU-s, decisions at
    every event, no starvation handling) except ``queue_order``, which defaults to Lucid's
    ``submit``; the Tiresias simulator's dlas-gpu is ``queue_order=running_first
    placement=count`` with no restart overhead. Lucid's baseline is queues=2, threshold=18000,
    interval=60, placement=consolidate. docs/fidelity.md compares both.
    """

    name = "tiresias"
    summary = "discretised 2D-LAS on attained GPU-seconds (preemptive, non-clairvoyant)"
    preemptive = True
    space = ConfigSpace([
        PLACEMENT,
        Int("queues", "number of priority queues", low=1, high=6, default=3),
        Float("threshold", "attained service at which a job leaves the top queue", low=100.0,
              high=1e6, default=3250.0, log=True, unit="GPU-s"),
        Float("threshold_growth", "ratio between successive queue thresholds", low=1.2, high=100.0,
              default=7200.0 / 3250.0, log=True),
        Float("starvation", "promote a waiting job to the top queue once its waiting since its last promotion "
              "reaches this many times its executed time since then (Tiresias's solve_starvation; 0 = off)",
              low=0.0, high=100.0, default=0.0),
        Float("min_run", "a job that (re)started less than this long ago is not preempted", low=0.0,
              high=7200.0, default=0.0, unit="s"),
        Float("interval", "decide only every this many seconds (0 = at every event; Lucid uses 60)",
              low=0.0, high=3600.0, default=0.0, unit="s"),
        Categorical("queue_order", "order within a queue: submit = submission order, so an older waiting "
                    "job preempts a younger running one (Lucid); running_first = running jobs keep their "
                    "GPUs against waiting jobs of the same queue (Tiresias)",
                    choices=QUEUE_ORDERS, default="submit"),
    ])

    def configure(self) -> None:
        c = self.config
        self.limits = [c["threshold"] * c["threshold_growth"] ** k for k in range(c["queues"] - 1)]
        self.interval = c["interval"]
        self.min_run = c["min_run"]
        self.starvation = c["starvation"]
        self.running_first = c["queue_order"] == "running_first"
        self._next_tick = -math.inf
        self._changed = True
        self._waking_for = None  # the first timer when the pending wake-up was asked for
        if hasattr(self, "queue_of"):  # reconfigured mid-run: re-file jobs under the new queues
            self._refile(self.part.sim.now)

    def bind(self, part, jobs) -> None:
        n = len(jobs.gpus)
        self.running_flag = [False] * n
        self.protected: set[int] = set()  # running jobs younger than min_run
        self.protected_flag = [False] * n
        # GPUs a job counts for in the prefix searches: its own, 0 while protected.
        self.weight = list(jobs.gpus)
        super().bind(part, jobs)
        self._new_queues(self.config["queues"])
        self.queue_of: dict[int, int] = {}
        self.base: dict[int, float] = {}  # attained service forgiven by starvation promotions
        # Seconds waited since the last promotion in finished waits that followed a run (as
        # Tiresias's last_pending_time; the current wait is counted by the promotion timer).
        self.waited: dict[int, float] = {}
        # Work done at the last promotion. A job is promoted again only after it has done more
        # work: otherwise a job demoted before its restart overhead is paid (threshold / GPUs
        # below the overhead) and promoted back would preempt and be preempted forever.
        self.served_at_promotion: dict[int, float] = {}
        self.demand = 0  # GPUs asked for by all active (waiting or running) jobs
        # Timers: (time, kind, job, stamp); a timer is stale once the job's run or wait it was
        # set for (identified by its start time) is over.
        self.timers: list[tuple[float, int, int, float]] = []

    def _new_queues(self, count: int) -> None:
        # Per queue: all its jobs in submission order, their total GPUs, and who runs or waits.
        # The totals let a decision take a whole queue at once when it fits.
        self.lists: list[list[int]] = [[] for _ in range(count)]
        self.qsum = [0] * count
        self.running_in: list[list[int]] = [[] for _ in range(count)]  # sorted
        self.waiting_in: list[list[int]] = [[] for _ in range(count)]  # sorted
        # The longest prefix of a queue that fits, kept between decisions. In submission order
        # it runs over all the queue's jobs; under running_first, where the order is running
        # then waiting jobs, over each of the two lists.
        self.prefix = [SortedPrefix(lst, self.weight) for lst in self.lists]
        self.run_prefix = [SortedPrefix(lst, self.weight) for lst in self.running_in]
        self.wait_prefix = [SortedPrefix(lst, self.weight) for lst in self.waiting_in]

    def _index(self, j: int, sign: int) -> None:
        """Add (sign 1) or take away (-1) job j in the prefix its current state puts it in.

        Every change of a job's queue, running or protected state is bracketed by the two."""
        q = self.queue_of[j]
        if not self.running_first:
            cut = self.prefix[q]
        else:
            cut = self.run_prefix[q] if self.running_flag[j] else self.wait_prefix[q]
        cut.changed(j, sign * self.weight[j])

    def _refile(self, now: float) -> None:
        part = self.part
        for j in self.protected:
            self.protected_flag[j] = False
            self.weight[j] = self.jobs.gpus[j]
        self.protected.clear()
        self._new_queues(self.config["queues"])
        self.timers = []
        for j in sorted(self.queue_of):
            attained = part.attained(j, now) - self.base[j]
            q = self._queue_for(attained)
            self.queue_of[j] = q
            self.lists[q].append(j)
            self.qsum[q] += self.jobs.gpus[j]
            (self.running_in if j in part.running else self.waiting_in)[q].append(j)
            self._index(j, 1)
            if j in part.running:
                self._set_demote_timer(j, now, attained)
                if self.min_run > 0:
                    self._protect(j)
            elif self.starvation > 0 and q > 0:
                self._watch_starvation(j)

    def _queue_for(self, attained: float) -> int:
        q = 0
        for limit in self.limits:
            if attained < limit - 1e-6:  # tolerance: a timer set for the crossing may land a hair early
                break
            q += 1
        return q

    def on_arrival(self, j: int, now: float) -> None:
        self.queue_of[j] = 0
        self.base[j] = 0.0
        self.served_at_promotion[j] = 0.0
        self.waited[j] = 0.0
        self.lists[0].append(j)  # arrivals come in submission order: the list stays sorted
        self.qsum[0] += self.jobs.gpus[j]
        self.waiting_in[0].append(j)
        self._index(j, 1)
        self.demand += self.jobs.gpus[j]
        self._changed = True

    def on_finish(self, j: int, now: float) -> None:
        self._unprotect(j)
        self._move(j, None)
        self.running_flag[j] = False
        del self.base[j]
        del self.served_at_promotion[j]
        del self.waited[j]
        self.demand -= self.jobs.gpus[j]

    def _move(self, j: int, q: int | None) -> None:
        """Move job j to queue q (None: it left the system)."""
        self._changed = True
        self._index(j, -1)
        old, g = self.queue_of[j], self.jobs.gpus[j]
        members = self.running_in if self.running_flag[j] else self.waiting_in
        lst, mine = self.lists[old], members[old]
        del lst[bisect_left(lst, j)]
        self.qsum[old] -= g
        del mine[bisect_left(mine, j)]
        if q is None:
            del self.queue_of[j]
        else:
            self.queue_of[j] = q
            insort(self.lists[q], j)
            self.qsum[q] += g
            insort(members[q], j)
            self._index(j, 1)

    def schedule(self, now: float) -> None:
        part = self.part
        if self.interval > 0:
            if now < self._next_tick:
                return  # a wake for the next tick is already pending
            tick = math.ceil(now / self.interval) * self.interval
            if now < tick:  # decisions happen on multiples of the interval only
                self._next_tick = tick
                part.wake_at(tick)
                return
            self._next_tick = tick + self.interval
        if self.timers and self.timers[0][0] <= now:
            self._fire_timers(now)
        if self._changed:
            # A decision depends only on the queues, the protected jobs and the free nodes, and
            # repeating it with none of them changed starts and stops nothing (its taken set is
            # taken again, and its failed starts fail again), so it is made only after a change.
            if self.demand <= part.capacity:
                self._start_all(now)  # everyone fits: nothing to preempt, no order to weigh
            else:
                self._decide(now)
            self._changed = False
        if self.interval > 0:
            if self.queue_of:
                part.wake_at(self._next_tick)
            else:  # no wake is pending: the next arrival must not wait for a tick nobody set
                self._next_tick = -math.inf
        elif self.timers and self.timers[0] is not self._waking_for:
            # Only when the first timer changed: dropping stale timers and asking for a wake-up
            # after every decision cost 3% of a simulation. (If that timer has gone stale since,
            # its wake-up finds nothing changed and decides nothing. A timer that fell due during
            # this decision cannot be woken for: it fires at the partition's next event, as the
            # Tiresias simulator checks starvation only when it schedules.)
            timers = self.timers
            while timers and not self._live(timers[0]):
                heappop(timers)
            if timers:
                self._waking_for = timers[0]
                part.wake_at(timers[0][0])

    def _live(self, timer: tuple[float, int, int, float]) -> bool:
        """Whether the run or wait this timer was set for is still going on."""
        _, kind, j, stamp = timer
        part = self.part
        if kind == _PROMOTE:
            return j in self.queue_of and j not in part.running and part.waiting_since(j) == stamp
        if kind == _DEMOTE:
            return j in part.running and part.run_started(j) == stamp
        return j in self.protected and part.run_started(j) == stamp

    def _fire_timers(self, now: float) -> None:
        part, timers = self.part, self.timers
        while timers and timers[0][0] <= now:
            timer = heappop(timers)
            if not self._live(timer):
                continue
            _, kind, j, _ = timer
            if kind == _PROMOTE:
                self.base[j] = part.attained(j, now)
                self.served_at_promotion[j] = part.served(j, now)
                self.waited[j] = 0.0
                self._move(j, 0)
            elif kind == _DEMOTE:
                attained = part.attained(j, now) - self.base[j]
                q = self._queue_for(attained)
                if q != self.queue_of[j]:
                    self._move(j, q)
                self._set_demote_timer(j, now, attained)
            else:
                self._unprotect(j)

    def _unprotect(self, j: int) -> None:
        if self.protected_flag[j]:
            self._changed = True
            self._index(j, -1)
            self.protected.discard(j)
            self.protected_flag[j] = False
            self.weight[j] = self.jobs.gpus[j]
            self._index(j, 1)

    def _start_in_order(self, jobs, now: float) -> None:
        """Start jobs in this order, skipping those placement cannot fit.

        Placement failure is monotone in size within one decision (no GPU is freed between
        starts): once g GPUs found no room, no job of g or more will, so it is not tried.
        """
        gpus = self.jobs.gpus
        smallest_failed = math.inf
        for j in jobs:
            if gpus[j] < smallest_failed and not self._start(j, now):
                smallest_failed = gpus[j]

    def _start(self, j: int, now: float) -> bool:
        part = self.part
        if not part.start(j):
            return False
        attained = part.attained(j, now) - self.base[j]
        if attained > 0:  # it ran since its last promotion: this wait counts
            self.waited[j] += now - part.waiting_since(j)
        q = self.queue_of[j]
        waiting = self.waiting_in[q]
        del waiting[bisect_left(waiting, j)]
        insort(self.running_in[q], j)
        self._set_running(j, True)
        self._set_demote_timer(j, now, attained)
        if self.min_run > 0:
            self._protect(j)
        return True

    def _preempt(self, j: int) -> None:
        self.part.preempt(j)
        q = self.queue_of[j]
        running = self.running_in[q]
        del running[bisect_left(running, j)]
        insort(self.waiting_in[q], j)
        self._set_running(j, False)

    def _set_running(self, j: int, running: bool) -> None:
        if self.running_first:  # the flag decides which of the queue's two cuts j counts in
            self._index(j, -1)
            self.running_flag[j] = running
            self._index(j, 1)
        else:
            self.running_flag[j] = running

    def _protect(self, j: int) -> None:
        """Keep running job j from preemption until it has run min_run seconds."""
        stamp = self.part.run_started(j)
        heappush(self.timers, (stamp + self.min_run, _PROTECTED, j, stamp))
        self._index(j, -1)
        self.protected.add(j)
        self.protected_flag[j] = True
        self.weight[j] = 0
        self._index(j, 1)

    def _set_demote_timer(self, j: int, now: float, attained: float) -> None:
        """Wake when running job j's attained service (now `attained`) reaches its queue's limit."""
        q = self.queue_of[j]
        if q < len(self.limits):
            t = now + max(self.limits[q] - attained, 0.0) / self.jobs.gpus[j]
            heappush(self.timers, (t, _DEMOTE, j, self.part.run_started(j)))

    def _start_all(self, now: float) -> None:
        self._start_in_order([j for queue in self.waiting_in for j in queue], now)

    def _decide(self, now: float) -> None:
        """Take jobs in priority order while their GPUs fit in the partition's GPU count.

        The same result as walking all jobs one by one, without the walk: a queue whose total
        fits is taken whole; in the first queue that does not fit, the longest prefix that fits
        is found by moving the queue's remembered cut; after it only jobs small enough for the
        remainder are looked at, and the running jobs of lower queues are preempted.
        """
        gpus, protected = self.jobs.gpus, self.protected_flag
        quota = self.part.capacity
        free = self.qsum  # per queue, the GPUs of its jobs that may be taken or left out
        if self.protected:  # protected (min_run) jobs are always kept
            free = list(free)
            for j in self.protected:
                free[self.queue_of[j]] -= gpus[j]
                quota -= gpus[j]
        start: list[int] = []
        preempt: list[int] = []
        left = None  # GPUs left after the first queue that does not fit whole
        for q, waiting in enumerate(self.waiting_in):
            if left is None:
                if free[q] <= quota:
                    quota -= free[q]
                    start.extend(waiting)
                    continue
                s, p, left = self._split(q, quota)
            elif left == 0:  # nothing more fits: this queue's running jobs stop
                s, p = (), self.running_in[q]
            else:
                s, p, left = self._fill(left, [], self.running_in[q], self._queue_order(q))
            start.extend(s)
            preempt.extend(p)
        for j in preempt:
            if protected[j]:
                continue
            self._preempt(j)
            if self.starvation > 0 and self.queue_of[j] > 0:
                self._watch_starvation(j)
        self._start_in_order(start, now)

    def _queue_order(self, q: int):
        """Queue q's jobs in priority order (an iterable)."""
        if self.running_first:
            return chain(self.running_in[q], self.waiting_in[q])
        return self.lists[q]

    def _split(self, q: int, quota: int) -> tuple[list[int], list[int], int]:
        """Greedy take-if-it-fits over queue q given `quota` GPUs: (to start, running jobs not
        taken, GPUs left).

        The longest prefix that fits comes from the queue's remembered cut (`SortedPrefix`); "in
        the prefix" is then "job index below the cut", a bisection in the sorted waiting and
        running lists.
        """
        waiting, running = self.waiting_in[q], self.running_in[q]
        if not self.running_first:
            cut = self.prefix[q]
            _, taken = cut.fit(quota)
            bound = cut.bound
            start, rest = waiting[:bisect_left(waiting, bound)], running[bisect_left(running, bound):]
            if quota == taken:
                return start, rest, 0
            lst = self.lists[q]
            return self._fill(quota - taken, start, rest, islice(lst, bisect_left(lst, bound), None))
        i, taken = self.run_prefix[q].fit(quota)
        if i == len(running):  # every running job stays; a prefix of the waiting ones joins
            k, more = self.wait_prefix[q].fit(quota - taken)
            return self._fill(quota - taken - more, waiting[:k], [], islice(waiting, k, None))
        return self._fill(quota - taken, [], running[i:], chain(islice(running, i, None), waiting))

    def _fill(self, left: int, start: list[int], rest: list[int], tail) -> tuple[list[int], list[int], int]:
        """After the prefix: take the jobs of `tail` (in order) that fit in what is `left`.

        `start` are the prefix's waiting jobs and `rest` the running jobs after it; returns
        (to start, running jobs not taken, GPUs left)."""
        gpus, protected = self.jobs.gpus, self.protected_flag
        picks: list[int] = []
        if left > 0:
            for j in tail:
                if gpus[j] <= left and not protected[j]:
                    picks.append(j)
                    left -= gpus[j]
                    if not left:
                        break
        if not picks:
            return start, rest, left
        running_flag = self.running_flag
        start = start + [j for j in picks if not running_flag[j]]  # ascending, as `start` is
        taken = set(picks)
        return start, [j for j in rest if j not in taken], left

    def _watch_starvation(self, j: int) -> None:
        """Promote waiting job j once its waits since its last promotion reach `starvation` times
        the seconds it ran since then (only a job that ran since then is ever promoted)."""
        part = self.part
        since = part.waiting_since(j)
        ran = (part.attained(j, since) - self.base[j]) / self.jobs.gpus[j]
        if ran > 0 and part.served(j, since) > self.served_at_promotion[j]:
            due = since + max(0.0, self.starvation * ran - self.waited[j])
            heappush(self.timers, (due, _PROMOTE, j, since))


_DEMOTE, _PROMOTE, _PROTECTED = 0, 1, 2


