"""Tiresias: discretised two-dimensional least-attained-service (Gu et al., NSDI '19)."""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from heapq import heappop, heappush
from itertools import chain, islice
from typing import Any, TypeAlias

from ..sim.contract import JobInfo, Partition
from ..space import Categorical, ConfigSpace, Float, Int
from .base import PLACEMENT, Policy
from .prefix import SortedPrefix

QUEUE_ORDERS = ("submit", "running_first")

# (time, kind, job, stamp): kind is _DEMOTE, _PROMOTE or _PROTECTED; stamp is the start time of
# the run or wait the timer was set for (a timer is stale once that run or wait is over).
Timer: TypeAlias = tuple[float, int, int, float]


class QueueBook:
    """Tiresias's per-queue bookkeeping: the queue of every active job, who runs and who waits in
    each queue, each queue's GPU total, and the remembered prefix cuts the decisions walk.

    The invariant, which `check` verifies and every method keeps, for each queue q:

    - ``members[q]`` is sorted and is the disjoint union of ``running[q]`` and ``waiting[q]``
      (both sorted); ``queue_of[j] == q`` exactly for its members; ``running_flag[j]`` says which
      of the two lists j is in;
    - ``total[q]`` is the GPUs of its members;
    - each cut (``prefix[q]`` over ``members[q]``; ``run_prefix[q]`` / ``wait_prefix[q]`` over
      ``running[q]`` / ``waiting[q]``) holds the summed ``weight`` of its members below its bound.

    Which cut a job counts in: ``prefix`` in submission order; under ``running_first`` (running
    jobs first, then waiting ones) ``run_prefix`` or ``wait_prefix`` by its running flag.
    ``weight`` (shared with the policy) is a job's GPUs, or 0 while it is protected by min_run.
    """

    __slots__ = ("gpus", "weight", "running_flag", "running_first", "queue_of", "members", "total",
                 "running", "waiting", "prefix", "run_prefix", "wait_prefix")

    def __init__(self, count: int, gpus: Sequence[int], weight: list[int], running_flag: list[bool],
                 running_first: bool):
        self.gpus, self.weight, self.running_flag = gpus, weight, running_flag
        self.running_first = running_first
        self.queue_of: dict[int, int] = {}
        self.members: list[list[int]] = [[] for _ in range(count)]
        self.total = [0] * count
        self.running: list[list[int]] = [[] for _ in range(count)]
        self.waiting: list[list[int]] = [[] for _ in range(count)]
        self.prefix = [SortedPrefix(lst, weight) for lst in self.members]
        self.run_prefix = [SortedPrefix(lst, weight) for lst in self.running]
        self.wait_prefix = [SortedPrefix(lst, weight) for lst in self.waiting]

    def _count(self, j: int, sign: int) -> None:
        """Add (sign 1) or take away (-1) job j's weight in the cut its state puts it in."""
        q = self.queue_of[j]
        if not self.running_first:
            cut = self.prefix[q]
        else:
            cut = self.run_prefix[q] if self.running_flag[j] else self.wait_prefix[q]
        cut.changed(j, sign * self.weight[j])

    def add(self, j: int, q: int) -> None:
        """Job j joins queue q, running or waiting as its flag says."""
        self.queue_of[j] = q
        insort(self.members[q], j)
        self.total[q] += self.gpus[j]
        insort((self.running if self.running_flag[j] else self.waiting)[q], j)
        self._count(j, 1)

    def remove(self, j: int) -> None:
        """Job j leaves its queue (it finished, or is about to join another)."""
        self._count(j, -1)
        q = self.queue_of.pop(j)
        lst, mine = self.members[q], (self.running if self.running_flag[j] else self.waiting)[q]
        del lst[bisect_left(lst, j)]
        del mine[bisect_left(mine, j)]
        self.total[q] -= self.gpus[j]

    def move(self, j: int, q: int) -> None:
        self.remove(j)
        self.add(j, q)

    def set_running(self, j: int, running: bool) -> None:
        """Job j started (True) or was preempted (False): it changes lists within its queue."""
        q = self.queue_of[j]
        self._count(j, -1)
        old, new = (self.waiting, self.running) if running else (self.running, self.waiting)
        del old[q][bisect_left(old[q], j)]
        insort(new[q], j)
        self.running_flag[j] = running
        self._count(j, 1)

    def set_weight(self, j: int, weight: int) -> None:
        self._count(j, -1)
        self.weight[j] = weight
        self._count(j, 1)

    def check(self) -> None:
        """Raise AssertionError unless the invariant in the class docstring holds."""
        seen: dict[int, int] = {}
        for q, lst in enumerate(self.members):
            assert lst == sorted(lst) and self.running[q] == sorted(self.running[q]), q
            assert self.waiting[q] == sorted(self.waiting[q]), q
            assert lst == sorted(self.running[q] + self.waiting[q]), q
            assert all(self.running_flag[j] for j in self.running[q]), q
            assert not any(self.running_flag[j] for j in self.waiting[q]), q
            assert self.total[q] == sum(self.gpus[j] for j in lst), q
            seen.update((j, q) for j in lst)
            cuts = [self.prefix[q]] if not self.running_first else [self.run_prefix[q], self.wait_prefix[q]]
            for cut in cuts:
                assert cut.inside == sum(self.weight[j] for j in cut.members if j < cut.bound), q
        assert seen == self.queue_of


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
        self._waking_for: Timer | None = None  # the first timer when the pending wake-up was asked for

    def on_reconfigure(self, config: Mapping[str, Any], now: float) -> None:
        """Take a new config mid-run, then re-file every active job under the new queues (and
        set its timers and min_run protection afresh) as of `now`."""
        super().on_reconfigure(config, now)
        self._refile(now)

    def bind(self, part: Partition, jobs: JobInfo) -> None:
        n = len(jobs.gpus)
        self.running_flag = [False] * n
        self.protected: set[int] = set()  # running jobs younger than min_run
        self.protected_flag = [False] * n
        # GPUs a job counts for in the prefix searches: its own, 0 while protected.
        self.weight = list(jobs.gpus)
        super().bind(part, jobs)
        self.book = self._new_book()
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
        self.timers: list[Timer] = []

    def _new_book(self) -> QueueBook:
        return QueueBook(self.config["queues"], self.jobs.gpus, self.weight, self.running_flag,
                         self.running_first)

    def _refile(self, now: float) -> None:
        part, old = self.part, self.book
        for j in self.protected:
            self.protected_flag[j] = False
            self.weight[j] = self.jobs.gpus[j]
        self.protected.clear()
        self.book = book = self._new_book()
        self.timers = []
        for j in sorted(old.queue_of):
            attained = part.attained(j, now) - self.base[j]
            q = self._queue_for(attained)
            book.add(j, q)
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
        self.base[j] = 0.0
        self.served_at_promotion[j] = 0.0
        self.waited[j] = 0.0
        attained = self.part.attained(j, now)
        q = self._queue_for(attained)
        self.book.add(j, q)
        self.demand += self.jobs.gpus[j]
        self._changed = True
        if attained > 0:
            # It ran before its submission (the trace's ``attained``, e.g. a backlog job
            # re-submitted by the adaptive loop): it starts in the queue that service puts it
            # in, and, as no promotion is known, its past counts toward starvation: all it ran,
            # and all it waited (its age minus its run time; its first wait counts too, which
            # Tiresias would not count: the trace does not say how long that was).
            self.served_at_promotion[j] = -math.inf  # it did work since: before it arrived
            origin = self.jobs.origin
            if origin is not None:
                self.waited[j] = max(0.0, now - origin[j] - self.part.executed(j, now))
            if self.starvation > 0 and q > 0:
                self._watch_starvation(j)

    def on_finish(self, j: int, now: float) -> None:
        self._unprotect(j)
        self.book.remove(j)
        self._changed = True
        self.running_flag[j] = False
        del self.base[j]
        del self.served_at_promotion[j]
        del self.waited[j]
        self.demand -= self.jobs.gpus[j]

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
            if self.book.queue_of:
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
                first = timers[0]
                self._waking_for = first
                if first[0] <= now:  # (rare) it fires at the next event; the next live timer is one
                    later = min((t for t in timers if t[0] > now and self._live(t)), default=None)
                    if later is not None:
                        part.wake_at(later[0])
                else:
                    part.wake_at(first[0])

    def _live(self, timer: Timer) -> bool:
        """Whether the run or wait this timer was set for is still going on."""
        _, kind, j, stamp = timer
        part = self.part
        if kind == _PROMOTE:
            return j in self.book.queue_of and j not in part.running and part.waiting_since(j) == stamp
        if kind == _DEMOTE:
            return j in part.running and part.run_started(j) == stamp
        return j in self.protected and part.run_started(j) == stamp

    def _fire_timers(self, now: float) -> None:
        part, timers, book = self.part, self.timers, self.book
        while timers and timers[0][0] <= now:
            timer = heappop(timers)
            if not self._live(timer):
                continue
            _, kind, j, _ = timer
            if kind == _PROMOTE:
                self.base[j] = part.attained(j, now)
                self.served_at_promotion[j] = part.served(j, now)
                self.waited[j] = 0.0
                book.move(j, 0)
                self._changed = True
            elif kind == _DEMOTE:
                attained = part.attained(j, now) - self.base[j]
                q = self._queue_for(attained)
                if q != book.queue_of[j]:
                    book.move(j, q)
                    self._changed = True
                self._set_demote_timer(j, now, attained)
            else:
                self._unprotect(j)

    def _unprotect(self, j: int) -> None:
        if self.protected_flag[j]:
            self._changed = True
            self.protected.discard(j)
            self.protected_flag[j] = False
            self.book.set_weight(j, self.jobs.gpus[j])

    def _start_in_order(self, jobs: Iterable[int], now: float) -> None:
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
        self.book.set_running(j, True)
        self._set_demote_timer(j, now, attained)
        if self.min_run > 0:
            self._protect(j)
        return True

    def _preempt(self, j: int) -> None:
        self.part.preempt(j)
        self.book.set_running(j, False)

    def _protect(self, j: int) -> None:
        """Keep running job j from preemption until it has run min_run seconds."""
        stamp = self.part.run_started(j)
        heappush(self.timers, (stamp + self.min_run, _PROTECTED, j, stamp))
        self.protected.add(j)
        self.protected_flag[j] = True
        self.book.set_weight(j, 0)

    def _set_demote_timer(self, j: int, now: float, attained: float) -> None:
        """Wake when running job j's attained service (now `attained`) reaches its queue's limit."""
        q = self.book.queue_of[j]
        if q < len(self.limits):
            t = now + max(self.limits[q] - attained, 0.0) / self.jobs.gpus[j]
            heappush(self.timers, (t, _DEMOTE, j, self.part.run_started(j)))

    def _start_all(self, now: float) -> None:
        self._start_in_order([j for queue in self.book.waiting for j in queue], now)

    def _decide(self, now: float) -> None:
        """Take jobs in priority order while their GPUs fit in the partition's GPU count.

        The same result as walking all jobs one by one, without the walk: a queue whose total
        fits is taken whole; in the first queue that does not fit, the longest prefix that fits
        is found by moving the queue's remembered cut; after it only jobs small enough for the
        remainder are looked at, and the running jobs of lower queues are preempted.
        """
        book, gpus, protected = self.book, self.jobs.gpus, self.protected_flag
        quota = self.part.capacity
        free = book.total  # per queue, the GPUs of its jobs that may be taken or left out
        if self.protected:  # protected (min_run) jobs are always kept
            free = list(free)
            for j in self.protected:
                free[book.queue_of[j]] -= gpus[j]
                quota -= gpus[j]
        start: list[int] = []
        preempt: list[int] = []
        left = None  # GPUs left after the first queue that does not fit whole
        s: Sequence[int]
        p: Sequence[int]
        for q, waiting in enumerate(book.waiting):
            if left is None:
                if free[q] <= quota:
                    quota -= free[q]
                    start.extend(waiting)
                    continue
                s, p, left = self._split(q, quota)
            elif left == 0:  # nothing more fits: this queue's running jobs stop
                s, p = (), book.running[q]
            else:
                s, p, left = self._fill(left, [], book.running[q], self._queue_order(q))
            start.extend(s)
            preempt.extend(p)
        for j in preempt:
            if protected[j]:
                continue
            self._preempt(j)
            if self.starvation > 0 and book.queue_of[j] > 0:
                self._watch_starvation(j)
        self._start_in_order(start, now)

    def _queue_order(self, q: int) -> Iterable[int]:
        """Queue q's jobs in priority order (an iterable)."""
        book = self.book
        if self.running_first:
            return chain(book.running[q], book.waiting[q])
        return book.members[q]

    def _split(self, q: int, quota: int) -> tuple[list[int], list[int], int]:
        """Greedy take-if-it-fits over queue q given `quota` GPUs: (to start, running jobs not
        taken, GPUs left).

        The longest prefix that fits comes from the queue's remembered cut (`SortedPrefix`); "in
        the prefix" is then "job index below the cut", a bisection in the sorted waiting and
        running lists.
        """
        book = self.book
        waiting, running = book.waiting[q], book.running[q]
        if not self.running_first:
            cut = book.prefix[q]
            _, taken = cut.fit(quota)
            bound = cut.bound
            start, rest = waiting[:bisect_left(waiting, bound)], running[bisect_left(running, bound):]
            if quota == taken:
                return start, rest, 0
            lst = book.members[q]
            return self._fill(quota - taken, start, rest, islice(lst, bisect_left(lst, bound), None))
        i, taken = book.run_prefix[q].fit(quota)
        if i == len(running):  # every running job stays; a prefix of the waiting ones joins
            k, more = book.wait_prefix[q].fit(quota - taken)
            return self._fill(quota - taken - more, waiting[:k], [], islice(waiting, k, None))
        return self._fill(quota - taken, [], running[i:], chain(islice(running, i, None), waiting))

    def _fill(self, left: int, start: list[int], rest: list[int], tail: Iterable[int]) -> tuple[list[int], list[int], int]:
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


