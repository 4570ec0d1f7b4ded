"""The two ways a queue policy lets jobs pass a top job that does not fit.

`priority_pass` is the queue walk that `fifo` and `multifactor` share: start jobs in order; when
the top job does not fit, either stop (strict order: Slurm's main scheduler, ``sched/builtin``)
or let the first later job that fits start (the non-clairvoyant stand-in for backfill, used when
a trace has no time limits).

`slurm_backfill` is Slurm's ``sched/backfill`` planning with job time limits (22.05,
``src/plugins/sched/backfill/backfill.c``), for traces that have them: walk the pending jobs in
priority order; for each, find the earliest time at which it fits, given the planned ends of the
running jobs (start + time limit) and the reservations already made for higher-priority jobs; a
job whose earliest time is now starts now, any other gets a reservation on the nodes it would
use, so that no later job may delay it. What is modelled and what is assumed is listed in
docs/fidelity.md ("Against a real slurmctld").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..sim.contract import Partition
from ..sim.placement import Alloc, NodePool


def priority_pass(part: Partition, by_size: Mapping[int, Sequence[int]],
                  key: Callable[[int], object], start: Callable[[int], bool],
                  pop: Callable[[int], None], may_pass: Callable[[int], bool],
                  depth: int | None = None) -> None:
    """Start waiting jobs best first (by `key` of the head of each size's queue; each queue in
    `by_size` is already best first). When the top job does not fit, stop unless
    ``may_pass(top)``; then start the best later job that fits and look again. `depth` bounds
    how many jobs are tried (Slurm's ``default_queue_depth``)."""
    tries = 0
    while by_size and part.free > 0:
        heads = sorted((key(q[0]), q[0], g) for g, q in by_size.items())
        _, top, g = heads[0]
        tries += 1
        if start(top):
            pop(g)
            if depth is not None and tries >= depth:
                return
            continue
        if not may_pass(top) or (depth is not None and tries >= depth):
            return
        for _, j, g in heads[1:]:
            if g <= part.free and start(j):
                pop(g)
                break
        else:
            return


@dataclass(frozen=True)
class BackfillParams:
    """Slurm's ``bf_*`` SchedulerParameters in seconds (``bf_window`` is given in minutes in
    slurm.conf) and the job-test limit."""

    window: float
    max_job_test: int
    resolution: float


def slurm_backfill(part: Partition, order: Sequence[int], gpus: Sequence[int], limit: Sequence[float],
                   now: float, params: BackfillParams,
                   start: Callable[[int, int], bool],
                   deny: Callable[[int], np.ndarray] | None = None) -> list[tuple[int, float]]:
    """One backfill cycle at `now` over pending jobs `order` (best first). ``start(j, exclude)``
    starts job j now outside the node bitmask `exclude` and says whether it could; ``deny(j)``,
    when given, marks the nodes job j may not use (outside its Slurm partition).

    Returns the (job, planned start) of every job that got a reservation (for tests and reports).

    Assumptions (Slurm 22.05): a reservation holds whole nodes (``node_space`` keeps node bitmaps)
    from its start to start + limit, both rounded down to ``bf_resolution``; under 'count'
    placement, which has no nodes, it holds the job's GPUs instead. A job that cannot start
    within ``bf_window`` gets no reservation. Only the first ``bf_max_job_test`` jobs are looked at.
    """
    pool = part.pool
    count = part.placement == "count"
    nodes = 1 if count else len(pool.free)
    gpn = pool.capacity if count else pool.gpn
    free = np.array([pool.free_gpus] if count else pool.free, dtype=np.int64)
    # Planned releases of the running jobs: (end, node, GPUs).
    releases: list[tuple[float, int, int]] = []
    for r in part.running:
        end = part.run_started(r) + limit[r]
        if count:
            releases.append((end, 0, gpus[r]))
        else:
            releases.extend((end, n, g) for n, g in part.allocation(r))
    horizon = now + params.window
    res = _Reservations(len(order[:params.max_job_test]), nodes)
    planned: list[tuple[int, float]] = []
    step = params.resolution
    times, frees = _profile(free, releases, now, horizon)
    for j in order[:params.max_job_test]:
        if free.sum() == 0:
            # Nothing can start now, and reservations only serve to decide what starts now
            # (the next cycle plans afresh): the rest of this cycle cannot change the run.
            break
        when = _earliest(gpus[j], limit[j], times, frees, res, horizon, gpn, part.placement,
                         None if deny is None or count else deny(j))
        if when is None:
            continue
        t, spot = when
        if t <= now:
            held = res.held(now, now + limit[j])
            exclude = 0 if count else _mask(held > 0)
            if start(j, exclude):
                if count:
                    free[0] -= gpus[j]
                    releases.append((now + limit[j], 0, gpus[j]))
                else:
                    alloc = part.allocation(j)
                    for n, g in alloc:
                        free[n] -= g
                    releases.extend((now + limit[j], n, g) for n, g in alloc)
                times, frees = _profile(free, releases, now, horizon)
                continue
            # placement disagreed with the plan (cannot happen with the same rules): reserve
        hold = np.zeros(nodes, dtype=np.int64)
        for n, g in spot:
            hold[n] = g if count else gpn  # whole nodes, as Slurm's node_space
        begin = math.floor(max(t, now) / step) * step
        end = limit[j] + t
        end = math.floor(end / step) * step if math.isfinite(end) else math.inf
        res.add(begin, end, hold)
        planned.append((j, t))
    return planned


class _Reservations:
    """The reservations of one backfill cycle as arrays (begin, end, GPUs held per node), so
    that the GPUs they hold over a time window are found for many windows at once."""

    def __init__(self, capacity: int, nodes: int):
        self.n = 0
        self.begin = np.empty(capacity)
        self.end = np.empty(capacity)
        self.hold = np.empty((capacity, nodes))  # float: the product below then runs in BLAS

    def add(self, begin: float, end: float, hold: np.ndarray) -> None:
        k = self.n
        self.begin[k], self.end[k], self.hold[k] = begin, end, hold
        self.n += 1

    def held(self, a: float, b: float) -> np.ndarray:
        """GPUs per node held by reservations that overlap [a, b)."""
        k = self.n
        over = (self.begin[:k] < b) & (self.end[:k] > a)
        out: np.ndarray = self.hold[:k][over].sum(axis=0).astype(np.int64)
        return out

    def held_many(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """`held` for the windows [a[i], b[i]) at once (rows)."""
        k = self.n
        over = (self.begin[None, :k] < b[:, None]) & (self.end[None, :k] > a[:, None])
        return (over.astype(np.float64) @ self.hold[:k]).astype(np.int64)  # (exact: small counts)


def _profile(free: np.ndarray, releases: list[tuple[float, int, int]], now: float,
             horizon: float) -> tuple[list[float], list[np.ndarray]]:
    """Free GPUs per node from now on, as a step function: (times, free vector from each)."""
    times, frees = [now], [free.copy()]
    cur = free.copy()
    for end, n, g in sorted(releases):
        if end > horizon or not math.isfinite(end):
            break
        cur = cur.copy()
        cur[n] += g
        if end <= times[-1]:
            frees[-1] = cur
        else:
            times.append(end)
            frees.append(cur)
    return times, frees


def _earliest(g: int, lim: float, times: list[float], frees: list[np.ndarray], res: _Reservations,
              horizon: float, gpn: int, placement: str,
              denied: np.ndarray | None = None) -> tuple[float, Alloc] | None:
    """Earliest time within the window at which a job of g GPUs fits for its whole limit, and
    where placement would put it then; None if there is none.

    The candidate times are the profile's steps and the reservations' ends; they are tried in
    order, a few at a time (most jobs fit at one of the first), each batch with arrays: free GPUs
    at the time, less what the reservations overlapping [t, t + limit) hold."""
    t_steps = np.asarray(times)
    ends = res.end[:res.n]
    cand = np.unique(np.concatenate([t_steps, ends[(ends > t_steps[0]) & (ends <= horizon)]]))
    step_of = np.searchsorted(t_steps, cand, side="right") - 1
    free_all = np.asarray(frees)
    lo, size = 0, 8
    while lo < len(cand):
        c = cand[lo:lo + size]
        free = free_all[step_of[lo:lo + size]]
        if denied is not None:
            free = np.where(denied, 0, free)
        rows = np.flatnonzero(free.sum(axis=1) >= g)
        if len(rows):
            c, free = c[rows], free[rows]
            usable = np.maximum(free - res.held_many(c, c + lim), 0) if res.n else free
            for i in np.flatnonzero(usable.sum(axis=1) >= g).tolist():
                spot = _place(usable[i], g, gpn, placement)
                if spot is not None:
                    return float(c[i]), spot
        lo += size
        size *= 4
    return None


def _place(free: np.ndarray, g: int, gpn: int, placement: str) -> Alloc | None:
    """Where the partition's placement rule would put g GPUs given free GPUs per node."""
    if placement == "count":
        return ((0, g),) if free[0] >= g else None
    if g <= gpn and placement in ("first_fit", "consolidate"):  # one node: no pool needed
        fits = np.flatnonzero(free >= g)
        if not len(fits):
            return None
        # first fit: the lowest node; best fit: the fewest free GPUs, then the lowest node
        n = fits[0] if placement == "first_fit" else fits[np.argmin(free[fits])]
        return ((int(n), g),)
    pool = NodePool(len(free), gpn)
    for n, f in enumerate(free.tolist()):
        if f != gpn:
            pool._set(n, f)
    pool.free_gpus = int(free.sum())
    return pool.place(g, placement)


def _mask(nodes: np.ndarray) -> int:
    m = 0
    for n in np.flatnonzero(nodes).tolist():
        m |= 1 << n
    return m
