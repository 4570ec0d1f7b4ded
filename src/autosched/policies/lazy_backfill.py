"""Slurm's backfill cycle on nodes, planning only what can decide a start: the planner
`multifactor` runs. `backfill.slurm_backfill` is the reference it is tested against, start for
start (tests/test_lazy_backfill.py; `benchmarks/slurm_backfill.py --check` on real traces).

A cycle changes the run only through the jobs it starts now; the reservations it makes exist
only to keep later jobs of the same cycle off the nodes of earlier ones (the next cycle plans
afresh). And a job can start now only if it fits, now, on the nodes that no reservation holds
from now to now + its limit: another reservation can only take such nodes away. So the cycle
walks the jobs in order and tests each first against the reservations made so far. A job that
fails cannot start whatever is reserved before it; it is set aside (deferred), as its reservation
is needed only if a later job might start. A job that passes may start: the deferred jobs before
it are planned first, in order, each exactly as the reference plans it (22.05's trial starts and
cons_tres's will-run test), and then the job itself. Jobs still deferred when the cycle ends are
never planned. The cycle stops once no remaining job is small enough for the free GPUs.

On the 7-day Philly slice most jobs of a cycle are deferred and never planned (docs/benchmarks.md,
"Slurm's time-limit backfill"). What is planned is planned with the reference's rules, on
faster structures: the plan's slots as parallel lists searched by bisection, and the will-run
test on Python lists, which for a job that fits in one node looks only at the nodes a batch
frees, and places jobs with NodePool's rules on lists (no pool is built). `placement=count` (no
nodes) goes to the reference, whose earliest-fit plan is cheap.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

import numpy as np

from ..sim.contract import Partition
from ..sim.placement import Alloc
from .backfill import _WILL_RUN_WINDOW, BackfillParams, slurm_backfill

Running = list[tuple[float, int, Alloc, int]]  # (planned end, start order, allocation, node bitmask)


class LazyBackfill:
    """The planner of one partition for a whole run: `cycle` is called at each backfill cycle.
    Between cycles it keeps the running jobs sorted by planned end, and brings that list up to
    date (jobs ended, jobs started) only when a cycle needs it, instead of sorting every running
    job at every cycle."""

    def __init__(self, gpus: np.ndarray, limit: np.ndarray):
        self.gpus, self.limit = gpus, limit  # every job's GPUs and time limit (s; inf: none)
        self._rows: Running = []  # sorted; after equal ends, in start order (as a stable sort)
        self._known: dict[int, tuple[float, int]] = {}  # running job -> its row's sort key
        self._seq = 0
        self._lists: tuple[list[int], list[float]] | None = None  # the same, for the reference

    def cycle(self, part: Partition, order: np.ndarray, now: float, params: BackfillParams,
              start: Callable[[int, int], bool],
              denied: Callable[[int], int] | None = None) -> list[tuple[int, float]]:
        """`backfill.slurm_backfill` with the same starts, for the job numbers `order` (best
        first, a numpy array). Returns the (job, planned start) of the jobs it planned, which are
        the reference's up to the last job started."""
        if part.placement == "count":
            if self._lists is None:
                self._lists = (self.gpus.tolist(), self.limit.tolist())
            return slurm_backfill(part, order.tolist(), *self._lists, now, params, start, denied)
        if part.pool.free_gpus == 0 or not len(order):
            return []
        return _Cycle(self, part, now, params, start).run(order[:params.max_job_test], denied)

    def running(self, part: Partition) -> Running:
        """The running jobs with their planned ends (Slurm's whole-second start + limit), by end
        (after equal ends, in start order)."""
        known, rows = self._known, self._rows
        if known.keys() != part.running.keys():
            for r in known.keys() - part.running.keys():
                del rows[bisect.bisect_left(rows, known.pop(r), key=lambda x: x[:2])]
            for r in part.running:
                if r not in known:
                    self.add(r, math.floor(part.run_started(r)) + float(self.limit[r]), part.allocation(r))
        return rows

    def add(self, j: int, end: float, alloc: Alloc) -> None:
        """Job j started (in this cycle, or since the last one), with this planned end."""
        mask = 0
        for m, _ in alloc:
            mask |= 1 << m
        key = (end, self._seq)
        self._seq += 1
        self._known[j] = key
        bisect.insort(self._rows, (end, key[1], alloc, mask), key=lambda x: x[:2])


class _Slots:
    """Backfill's node_space of one cycle (22.05's ``node_space_map_t``), as `backfill._Plan`:
    consecutive slots [begins[k], ends[k]) with the nodes reserved in each (bitmask), split at
    every reservation's start and end."""

    def __init__(self, begin: float, end: float):
        self.begins, self.ends, self.held = [begin], [end], [0]
        self.resv: list[tuple[float, float, int]] = []
        self._overlaps: dict[tuple[int, float, float], bool] = {}  # answers until the next `add`

    def add(self, begin: float, end: float, nodes: int) -> None:
        begins, ends, held = self.begins, self.ends, self.held
        self.resv.append((begin, end, nodes))
        self._overlaps.clear()
        for cut in (begin, end):
            k = bisect.bisect_right(begins, cut) - 1  # the one slot that may hold cut inside
            if k >= 0 and begins[k] < cut < ends[k]:
                begins.insert(k + 1, cut)
                ends.insert(k, cut)
                held.insert(k + 1, held[k])
        k = bisect.bisect_left(begins, begin)
        while k < len(ends) and ends[k] <= end:
            held[k] |= nodes
            k += 1

    def usable(self, part_mask: int, start_res: float, end_time: float) -> tuple[int, float]:
        """`backfill._usable` over these slots; slots that end by `start_res` play no part in
        it, so the walk starts after them."""
        begins, ends, held = self.begins, self.ends, self.held
        n = len(ends)
        avail, later = part_mask, 0.0
        for k in range(bisect.bisect_right(ends, start_res), n):
            h = held[k]
            if later == 0 and k + 1 < n and part_mask & ~held[k + 1] & ~(avail & ~h):
                later = ends[k]
            if begins[k] <= end_time:
                avail &= ~h
            else:
                if later == 0 and k + 2 < n:
                    later = ends[k + 1]
                break
        return avail, later

    def overlaps(self, nodes: int, begin: float, end: float) -> bool:
        """Do the nodes meet a reservation within [begin, end) (``_test_resv_overlap``)?"""
        key = (nodes, begin, end)
        got = self._overlaps.get(key)
        if got is None:
            got = self._overlaps[key] = any(b < end and e > begin and m & nodes for b, e, m in self.resv)
        return got


class _Cycle:
    """One cycle's state: free GPUs per node, the running jobs (built when first needed), the
    plan, and the answers that stay true until a reservation or a start changes them."""

    def __init__(self, planner: LazyBackfill, part: Partition, now: float, params: BackfillParams,
                 start: Callable[[int, int], bool]):
        pool = part.pool
        self.planner, self.part, self.now, self.params, self.start_job = planner, part, now, params, start
        self.gpus, self.limit = planner.gpus, planner.limit
        self.free = list(pool.free)
        self.gpn, self.placement = pool.gpn, part.placement
        self.free_total = pool.free_gpus
        self.has_free = sum(1 << n for n, f in enumerate(self.free) if f)  # nodes with a free GPU
        self.everything = (1 << len(self.free)) - 1
        step = params.resolution
        self.plan = _Slots(math.floor(now / step) * step, math.floor((now + params.window) / step) * step)
        self.planned: list[tuple[int, float]] = []
        self._running: Running | None = None  # the planner's, once a will-run test needs them
        # Remembered answers: the will-run test per (GPUs, usable nodes) until a start; the usable
        # nodes from now per (partition, limit) until a reservation; whether GPUs fit now on
        # nodes per (GPUs, usable nodes that have free GPUs) until a start; and the jobs (GPUs,
        # limit, partition) planned to neither start nor reserve, until anything changes.
        self.will_run: dict[tuple[int, int], tuple[float, Alloc] | None] = {}
        self.usable_now: dict[tuple[int, float], int] = {}
        self.fits_now: dict[tuple[int, int], bool] = {}
        self.nothing: set[tuple[int, float, int]] = set()

    def run(self, order: np.ndarray, denied: Callable[[int], int] | None) -> list[tuple[int, float]]:
        # the smallest job from each position on: once it exceeds the free GPUs, nothing can start
        sizes = self.gpus[order]
        smallest = np.minimum.accumulate(sizes[::-1])[::-1].tolist()
        jobs, sizes, lims = order.tolist(), sizes.tolist(), self.limit[order].tolist()
        everything = self.everything
        deferred: list[tuple[int, int]] = []
        for i, j in enumerate(jobs):
            if smallest[i] > self.free_total or self.free_total == 0:
                break
            part_mask = everything if denied is None else everything & ~denied(j)
            g, lim = int(sizes[i]), lims[i]
            if g > self.free_total or not self._may_start_now(g, lim, part_mask):
                deferred.append((j, part_mask))
                continue
            for d, d_mask in deferred:
                self._plan_job(d, d_mask)
            deferred = []
            self._plan_job(j, part_mask)
        return self.planned

    def _may_start_now(self, g: int, lim: float, part_mask: int) -> bool:
        """Whether g GPUs fit now on the nodes the plan so far leaves usable from now to now +
        lim (the first trial of `_plan_job`): if not, no further reservation can make them."""
        key = (part_mask, lim)
        avail = self.usable_now.get(key)
        if avail is None:
            avail = self.usable_now[key] = self.plan.usable(part_mask, self.now, self.now + lim)[0]
        fkey = (g, avail & self.has_free)
        fits = self.fits_now.get(fkey)
        if fits is None:
            fits = self.fits_now[fkey] = _fits(self.free, fkey[1], g, self.gpn, self.placement)
        return fits

    def _plan_job(self, j: int, part_mask: int) -> None:
        """Plan job j as `backfill._slurm_backfill_nodes` does: start it now, reserve nodes for
        it, or neither."""
        g, lim = int(self.gpus[j]), float(self.limit[j])
        key = (g, lim, part_mask)
        if key in self.nothing:
            return
        now, plan, step = self.now, self.plan, self.params.resolution
        start_res = now
        for _ in range(2 * len(plan.ends) + 4):  # each retry moves start_res on to a later slot
            avail, later = plan.usable(part_mask, start_res, max(start_res, now) + lim)
            got = self._will_run(g, avail) if avail else None
            if got is None:
                if later:
                    start_res = later
                    continue
                break
            t, spot = got
            t = max(t, start_res)
            spot_mask = 0
            for m, _ in spot:
                spot_mask |= 1 << m
            begin = math.floor(t / step) * step
            end = math.floor((t + lim) / step) * step if math.isfinite(lim) else math.inf
            end = max(end, begin + step)  # a reservation holds at least one slot
            first = plan.begins[0]
            if t > now and plan.overlaps(spot_mask, max(begin, first), end):
                start_res = t + (step if start_res == t else 0.0)
                continue
            if t <= now:
                if self._start(j, avail, lim):
                    return
                # placement disagreed with the plan (cannot happen with the same rules): reserve
            elif later and t > later:
                start_res = later
                continue
            if t > now + self.params.window:
                break  # too far ahead: no reservation
            plan.add(max(begin, first), end, spot_mask)
            self.planned.append((j, t))
            self.usable_now.clear()
            self.nothing.clear()
            return
        self.nothing.add(key)

    def _start(self, j: int, avail: int, lim: float) -> bool:
        if not self.start_job(j, self.everything & ~avail):
            return False
        alloc = self.part.allocation(j)
        for m, g in alloc:
            self.free[m] -= g
            if not self.free[m]:
                self.has_free &= ~(1 << m)
        self.free_total -= int(self.gpus[j])
        if self._running is not None:  # (else brought up to date when first needed)
            self.planner.add(j, math.floor(self.now) + lim, alloc)
        self.will_run.clear()
        self.fits_now.clear()
        self.nothing.clear()
        return True

    def running(self) -> Running:
        if self._running is None:
            self._running = self.planner.running(self.part)
        return self._running

    def _will_run(self, g: int, avail: int) -> tuple[float, Alloc] | None:
        key = (g, avail)
        if key not in self.will_run:
            self.will_run[key] = _will_run(g, avail, self.free, self.running(), self.now, self.gpn,
                                           self.placement)
        return self.will_run[key]


def _will_run(g: int, avail: int, free: list[int], running: Running, now: float, gpn: int,
              placement: str) -> tuple[float, Alloc] | None:
    """`backfill._will_run` on Python lists. After a batch, the job is placed only if a count
    that placement needs says it may fit: for a job that fits in one node (first fit or best
    fit), a node the batch freed that holds it (only those nodes are looked at); for a larger
    one, enough empty nodes (spread: enough free GPUs)."""
    cur = [f if avail >> n & 1 else 0 for n, f in enumerate(free)]
    one_node = g <= gpn and placement in ("first_fit", "consolidate")
    spot = _place(cur, range(len(cur)), g, gpn, placement)
    if spot is not None:
        return now, spot
    spread = placement == "spread"
    whole = g // gpn
    total = sum(cur)
    empty = sum(1 for f in cur if f == gpn)
    window, first_end = _WILL_RUN_WINDOW, 0.0
    k, n_run = 0, len(running)
    while k < n_run:
        last = None
        nxt = None
        touched: list[int] = []
        while k < n_run:
            end, _, alloc, on = running[k]
            if not math.isfinite(end):
                return None  # (sorted: the rest never end either) no start in any window
            k += 1
            if not on & avail:
                continue  # no usable node: skipped, and the window is not looked at
            if not first_end:
                first_end = end + (window - end % window)
            last = end
            for m, gg in alloc:
                if avail >> m & 1:  # (only on the usable nodes, as job_res_rm_job with the node map)
                    cur[m] += gg
                    total += gg
                    if cur[m] == gpn:
                        empty += 1
                    touched.append(m)
            nxt = running[k][0] if k < n_run else None
            if nxt is None or nxt > first_end + window:
                break
        if last is None:
            break
        while nxt is not None and math.isfinite(nxt) and nxt > first_end + window:
            window *= 2
        if one_node:
            spot = _place(cur, sorted(set(touched)), g, gpn, placement)
        elif total >= g and (spread or empty >= whole):
            spot = _place(cur, range(len(cur)), g, gpn, placement)
        else:
            continue
        if spot is not None:
            return (last if last > now else now + 1.0), spot
    return None


def _place(cur: list[int], nodes: Sequence[int], g: int, gpn: int, placement: str) -> Alloc | None:
    """`backfill._place` (NodePool's rules) on a list, looking at `nodes` only (in increasing
    order) for a job that fits in one node: the caller passes every node, or those whose free
    GPUs grew when none could hold the job before."""
    if g <= gpn and placement in ("first_fit", "consolidate"):
        best = -1
        for n in nodes:
            f = cur[n]
            if f >= g:
                if placement == "first_fit":
                    return ((n, g),)
                if best < 0 or f < cur[best]:
                    best = n
        return None if best < 0 else ((best, g),)
    if g > sum(cur):
        return None
    if placement == "spread":  # first fit in node order over the nodes with free GPUs
        pairs, need = [], g
        for n, f in enumerate(cur):
            if f:
                take = min(f, need)
                pairs.append((n, take))
                need -= take
                if not need:
                    break
        return tuple(pairs)
    # consolidate (first_fit alike): the lowest whole free nodes, the rest on one more node by best fit
    whole, rest = divmod(g, gpn)
    taken = [n for n, f in enumerate(cur) if f == gpn][:whole]
    if len(taken) < whole:
        return None
    alloc = tuple((n, gpn) for n in taken)
    if not rest:
        return alloc
    best = -1
    for n, f in enumerate(cur):
        if f >= rest and (best < 0 or f < cur[best]) and n not in taken:
            best = n
    return None if best < 0 else (*alloc, (best, rest))


def _fits(free: list[int], nodes: int, g: int, gpn: int, placement: str) -> bool:
    """Whether `_place` finds room for g GPUs on the bitmask `nodes` (free GPUs `free`), without
    placing them."""
    on = [n for n in range(len(free)) if nodes >> n & 1]
    if g > sum(free[n] for n in on):
        return False
    if placement == "spread":
        return True
    if g <= gpn:
        return any(free[n] >= g for n in on)
    whole, rest = divmod(g, gpn)
    empty = [n for n in on if free[n] == gpn]
    if len(empty) < whole:
        return False
    taken = set(empty[:whole])
    return rest == 0 or any(free[n] >= rest for n in on if n not in taken)
