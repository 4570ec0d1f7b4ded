"""The two ways a queue policy lets jobs pass a top job that does not fit.

`priority_pass` is the queue walk that `fifo` and `multifactor` share: start jobs in order; when
the top job does not fit, either stop (strict order: Slurm's main scheduler, ``sched/builtin``)
or let the first later job that fits start (the non-clairvoyant stand-in for backfill, used when
a trace has no time limits).

`slurm_backfill` is Slurm's ``sched/backfill`` planning with job time limits (22.05,
``src/plugins/sched/backfill/backfill.c``), for traces that have them: walk the pending jobs in
priority order; for each, find when and where it can start, given the planned ends of the
running jobs (start + time limit) and the reservations already made for higher-priority jobs; a
job that can start now starts now, any other gets a reservation on the nodes it would use, so
that no later job may delay it. On nodes, "when" is found as 22.05 finds it, not as the earliest
time that fits: the nodes free of reservations from a trial start to trial start + limit go to
cons_tres's will-run test, which takes running jobs away in batches (`_will_run`). What is
modelled and what is assumed is listed in docs/fidelity.md ("Against a real slurmctld").
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
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
        _, top, g = min((key(q[0]), q[0], g) for g, q in by_size.items())
        tries += 1
        if start(top):
            pop(g)
            if depth is not None and tries >= depth:
                return
            continue
        if not may_pass(top) or (depth is not None and tries >= depth):
            return
        heads = sorted((key(q[0]), q[0], g) for g, q in by_size.items())  # (the top is first)
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
                   denied: Callable[[int], int] | None = None) -> list[tuple[int, float]]:
    """One backfill cycle at `now` over pending jobs `order` (best first). ``start(j, exclude)``
    starts job j now outside the node bitmask `exclude` and says whether it could; ``denied(j)``,
    when given, is the node bitmask job j may not use (outside its Slurm partition).

    Returns the (job, planned start) of every job that got a reservation (for tests and reports).

    Assumptions (Slurm 22.05): a reservation holds whole nodes (``node_space`` keeps node bitmaps)
    from its start to start + limit, both rounded down to ``bf_resolution``; running jobs end in
    the plan at their whole-second start + limit. Under 'count' placement, which has no nodes,
    a reservation holds the job's GPUs instead and a job's start is the earliest time it fits
    (the model before the will-run test). A job that cannot start within ``bf_window`` gets no
    reservation. Only the first ``bf_max_job_test`` jobs are looked at.
    """
    if part.placement != "count":
        return _slurm_backfill_nodes(part, order, gpus, limit, now, params, start, denied)
    # 'count' has no nodes: the plan is in GPUs of the whole partition.
    free = part.pool.free_gpus
    # Planned releases of the running jobs: (end, GPUs).
    releases: list[tuple[float, int]] = [(part.run_started(r) + limit[r], gpus[r]) for r in part.running]
    horizon = now + params.window
    res = _Reservations(len(order[:params.max_job_test]))
    planned: list[tuple[int, float]] = []
    step = params.resolution
    times, frees = _profile(free, releases, now, horizon)
    for j in order[:params.max_job_test]:
        if free == 0:
            # Nothing can start now, and reservations only serve to decide what starts now
            # (the next cycle plans afresh): the rest of this cycle cannot change the run.
            break
        t = _earliest(gpus[j], limit[j], times, frees, res, horizon)
        if t is None:
            continue
        if t <= now and start(j, 0):
            free -= gpus[j]
            releases.append((now + limit[j], gpus[j]))
            times, frees = _profile(free, releases, now, horizon)
            continue
        begin = math.floor(max(t, now) / step) * step
        end = limit[j] + t
        end = math.floor(end / step) * step if math.isfinite(end) else math.inf
        res.add(begin, end, gpus[j])
        planned.append((j, t))
    return planned


# cons_tres's will-run test takes the running jobs away in batches: the first batch ends 30 s
# after the first end (aligned up to a multiple of 30 s), each later one twice as far
_WILL_RUN_WINDOW = 30


@dataclass(slots=True)
class _Slot:
    begin: float
    end: float
    held: int  # the nodes reserved in [begin, end), as a bitmask


class _Plan:
    """Backfill's node_space of one cycle (22.05's ``node_space_map_t``): consecutive slots
    [begin, end) with the nodes reserved in each (bitmask), from now rounded down to
    ``bf_resolution`` to now + ``bf_window`` rounded down; a reservation splits the slots at
    its start and end (``_add_reservation``)."""

    def __init__(self, begin: float, end: float):
        self.slots = [_Slot(begin, end, 0)]
        self.resv: list[tuple[float, float, int]] = []
        # Answers of `usable` and `overlaps` since the last reservation: the jobs of a queue
        # repeat the same few (nodes, start, limit) questions, and only `add` changes answers.
        self._usable: dict[tuple[int, float, float], tuple[int, float]] = {}
        self._overlaps: dict[tuple[int, float, float], bool] = {}

    def add(self, begin: float, end: float, nodes: int) -> None:
        self._usable.clear()
        self._overlaps.clear()
        self.resv.append((begin, end, nodes))
        for cut in (begin, end):
            for k, sl in enumerate(self.slots):
                if sl.begin < cut < sl.end:
                    self.slots[k:k + 1] = [_Slot(sl.begin, cut, sl.held), _Slot(cut, sl.end, sl.held)]
                    break
        for sl in self.slots:
            if sl.begin >= begin and sl.end <= end:
                sl.held |= nodes

    def overlaps(self, nodes: int, begin: float, end: float) -> bool:
        """Do the nodes meet a reservation within [begin, end) (``_test_resv_overlap``)?"""
        key = (nodes, begin, end)
        if key not in self._overlaps:
            self._overlaps[key] = any(b < end and e > begin and m & nodes for b, e, m in self.resv)
        return self._overlaps[key]

    def usable(self, part_mask: int, start_res: float, end_time: float) -> tuple[int, float]:
        """`_usable` over this plan's slots."""
        key = (part_mask, start_res, end_time)
        if key not in self._usable:
            self._usable[key] = _usable(self.slots, part_mask, start_res, end_time)
        return self._usable[key]


def _or(masks: Iterable[int]) -> int:
    out = 0
    for m in masks:
        out |= m
    return out


def _usable(slots: list[_Slot], part_mask: int, start_res: float,
            end_time: float) -> tuple[int, float]:
    """The nodes a job may plan on if it started at `start_res` and ran until `end_time`, and
    the next time worth trying (0: none), as 22.05's ``_attempt_backfill`` walks its map:
    every node reserved in any slot that meets [start_res, end_time] is out (even if the job
    will in fact start much later), and the later start is the end of the first slot after
    which a node so excluded comes free."""
    avail, later = part_mask, 0.0
    for k, sl in enumerate(slots):
        a, b, held = sl.begin, sl.end, sl.held
        has_next = k + 1 < len(slots)
        if b > start_res and has_next and later == 0:
            nxt = part_mask & ~slots[k + 1].held
            if nxt & ~(avail & ~held):
                later = b
        if b <= start_res:
            continue
        if a <= end_time:
            avail &= ~held
        else:
            if later == 0 and has_next and k + 2 < len(slots):
                later = slots[k + 1].end
            break
    return avail, later


def _will_run(g: int, avail: int, free: np.ndarray, running: list[tuple[float, Alloc, int]], now: float,
              gpn: int, placement: str) -> tuple[float, Alloc] | None:
    """When and where cons_tres's will-run test (22.05 ``_will_run_test``) starts a job of g
    GPUs on the nodes `avail` (bitmask): now if it fits, else it takes the running jobs away
    in order of their planned end, in batches, and tries after each batch; the start is the
    last end of the batch that made room. A job on none of the usable nodes is passed over
    without looking at the batch's window, so a batch goes on to the next usable job however
    late it ends: this is why a job can be planned minutes after the first end that would
    have made room for it."""
    use = _bits(avail, len(free))
    cur = np.where(use, free, 0)
    spot = _place(cur, g, gpn, placement)
    if spot is not None:
        return now, spot
    window, first_end = _WILL_RUN_WINDOW, 0.0
    k = 0
    while k < len(running):
        last = None
        nxt = None
        while k < len(running):
            end, alloc, on = running[k]
            if not math.isfinite(end):
                return None  # (sorted: the rest never end either) no start in any window
            k += 1
            if not on & avail:
                continue  # no usable node: skipped, and the window is not looked at
            if not first_end:
                first_end = end + (window - end % window)
            last = end
            for m, gg in alloc:
                if use[m]:  # (only on the usable nodes, as job_res_rm_job with the node map)
                    cur[m] += gg
            nxt = running[k][0] if k < len(running) else None
            if nxt is None or nxt > first_end + window:
                break
        if last is None:
            break
        while nxt is not None and math.isfinite(nxt) and nxt > first_end + window:
            window *= 2
        spot = _place(cur, g, gpn, placement)
        if spot is not None:
            return (last if last > now else now + 1.0), spot
    return None


def _slurm_backfill_nodes(part: Partition, order: Sequence[int], gpus: Sequence[int],
                          limit: Sequence[float], now: float, params: BackfillParams,
                          start: Callable[[int, int], bool],
                          denied: Callable[[int], int] | None) -> list[tuple[int, float]]:
    """`slurm_backfill` on nodes, step by step as 22.05's ``_attempt_backfill`` with cons_tres's
    will-run test: for each job, the usable nodes are those no reservation holds from the trial
    start to the trial start + limit; the will-run test gives the start and nodes on them; a
    start beyond the next trial start, or nodes that meet a reservation from the start, send
    the job to the next trial start (``TRY_LATER``)."""
    pool = part.pool
    nodes, gpn = len(pool.free), pool.gpn
    free = np.array(pool.free, dtype=np.int64)
    step = params.resolution
    # Running jobs with their planned ends (Slurm's whole-second start + limit), by end.
    running: list[tuple[float, Alloc, int]] = sorted(
        ((math.floor(part.run_started(r)) + limit[r], alloc, _or(1 << m for m, _ in alloc))
         for r in part.running for alloc in (part.allocation(r),)), key=lambda x: x[0])
    plan = _Plan(math.floor(now / step) * step, math.floor((now + params.window) / step) * step)
    everything = (1 << nodes) - 1
    planned: list[tuple[int, float]] = []
    # The will-run test depends only on the GPUs asked, the usable nodes and the running jobs,
    # and a queue asks the same few sizes on the same node sets: remember its answers until a
    # job starts (the only change to the running jobs within a cycle).
    will_run: dict[tuple[int, int], tuple[float, Alloc] | None] = {}
    for j in order[:params.max_job_test]:
        if free.sum() == 0:
            # Nothing can start now, and reservations only serve to decide what starts now
            # (the next cycle plans afresh): the rest of this cycle cannot change the run.
            break
        part_mask = everything if denied is None else everything & ~denied(j)
        lim = limit[j]
        slots = plan.slots
        start_res = now
        for _ in range(2 * len(slots) + 4):  # each retry moves start_res on to a later slot
            avail, later = plan.usable(part_mask, start_res, max(start_res, now) + lim)
            got = None
            if avail:
                key = (gpus[j], avail)
                if key not in will_run:
                    will_run[key] = _will_run(gpus[j], avail, free, running, now, gpn, part.placement)
                got = will_run[key]
            if got is None:
                if later:
                    start_res = later
                    continue
                break
            t, spot = got
            t = max(t, start_res)
            spot_mask = _or(1 << m for m, _ in spot)
            begin = math.floor(t / step) * step
            end = math.floor((t + lim) / step) * step if math.isfinite(lim) else math.inf
            end = max(end, begin + step)  # a reservation holds at least one slot
            if t > now and plan.overlaps(spot_mask, max(begin, plan.slots[0].begin), end):
                start_res = t + (step if start_res == t else 0.0)
                continue
            if t <= now:
                if start(j, everything & ~avail):
                    alloc = part.allocation(j)
                    for m, g in alloc:
                        free[m] -= g
                    # kept sorted by end; after equal ends, as the stable sort it replaces did
                    bisect.insort(running, (math.floor(now) + lim, alloc, _or(1 << m for m, _ in alloc)),
                                  key=lambda x: x[0])
                    will_run.clear()
                    break
                # placement disagreed with the plan (cannot happen with the same rules): reserve
            elif later and t > later:
                start_res = later
                continue
            if t > now + params.window:
                break  # too far ahead: no reservation
            plan.add(max(begin, plan.slots[0].begin), end, spot_mask)
            planned.append((j, t))
            break
    return planned


class _Reservations:
    """The reservations of one 'count' backfill cycle as arrays (begin, end, GPUs held), so that
    the GPUs they hold over a time window are found for many windows at once."""

    def __init__(self, capacity: int):
        self.n = 0
        self.begin = np.empty(capacity)
        self.end = np.empty(capacity)
        self.hold = np.empty(capacity)  # float: the product below then runs in BLAS

    def add(self, begin: float, end: float, hold: int) -> None:
        k = self.n
        self.begin[k], self.end[k], self.hold[k] = begin, end, hold
        self.n += 1

    def held_many(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """GPUs held by the reservations that overlap [a[i], b[i]), for every i at once."""
        k = self.n
        over = (self.begin[None, :k] < b[:, None]) & (self.end[None, :k] > a[:, None])
        return (over.astype(np.float64) @ self.hold[:k]).astype(np.int64)  # (exact: small counts)


def _profile(free: int, releases: list[tuple[float, int]], now: float,
             horizon: float) -> tuple[list[float], list[int]]:
    """Free GPUs from now on, as a step function: (times, free GPUs from each)."""
    times, frees = [now], [free]
    cur = free
    for end, g in sorted(releases):
        if end > horizon or not math.isfinite(end):
            break
        cur += g
        if end <= times[-1]:
            frees[-1] = cur
        else:
            times.append(end)
            frees.append(cur)
    return times, frees


def _earliest(g: int, lim: float, times: list[float], frees: list[int], res: _Reservations,
              horizon: float) -> float | None:
    """Earliest time within the window at which a job of g GPUs fits for its whole limit; None
    if there is none.

    The candidate times are the profile's steps and the reservations' ends; they are tried in
    order, a few at a time (most jobs fit at one of the first), each batch with arrays: free GPUs
    at the time, less what the reservations overlapping [t, t + limit) hold."""
    t_steps = np.asarray(times)
    ends = res.end[:res.n]
    cand = np.unique(np.concatenate([t_steps, ends[(ends > t_steps[0]) & (ends <= horizon)]]))
    step_of = np.searchsorted(t_steps, cand, side="right") - 1
    free_all = np.asarray(frees, dtype=np.int64)
    lo, size = 0, 8
    while lo < len(cand):
        c = cand[lo:lo + size]
        free = free_all[step_of[lo:lo + size]]
        rows = np.flatnonzero(free >= g)
        if len(rows):
            c, free = c[rows], free[rows]
            usable = np.maximum(free - res.held_many(c, c + lim), 0) if res.n else free
            fits = np.flatnonzero(usable >= g)
            if len(fits):
                return float(c[fits[0]])
        lo += size
        size *= 4
    return None


def _place(free: np.ndarray, g: int, gpn: int, placement: str) -> Alloc | None:
    """Where the partition's placement rule would put g GPUs given free GPUs per node."""
    if g <= gpn and placement in ("first_fit", "consolidate"):  # one node: no pool needed
        # NodePool's one-node rules on an array, as building a pool per try costs more than
        # the planning (tests/test_slurm_backfill.py checks that both agree on random states).
        fits = np.flatnonzero(free >= g)
        if not len(fits):
            return None
        # first fit: the lowest node; best fit: the fewest free GPUs, then the lowest node
        n = fits[0] if placement == "first_fit" else fits[np.argmin(free[fits])]
        return ((int(n), g),)
    return NodePool.from_free(free.tolist(), gpn).place(g, placement)


def _bits(mask: int, n: int) -> np.ndarray:
    """The node bitmask as a boolean array of n nodes."""
    return (mask >> np.arange(n)) & 1 == 1 if n < 63 else np.array([(mask >> k) & 1 for k in range(n)], dtype=bool)
