"""Slurm's backfill cycle on nodes, planning only what can decide a start: the planner
`multifactor` runs. `backfill.slurm_backfill` is the reference it is tested against, start for
start (tests/test_lazy_backfill.py; `benchmarks/slurm_backfill.py --check` on real traces).

A cycle changes the run only through the jobs it starts now; the reservations it makes exist
only to keep later jobs of the same cycle off the nodes of earlier ones (the next cycle plans
afresh). And a job can start now only if it fits, now, on the nodes that no reservation holds
from now to now + its limit: another reservation can only take such nodes away. So the cycle
walks the jobs in order and tests each first against the reservations made so far. A job that
fails cannot start whatever is reserved before it; it is set aside (deferred), as its reservation
is needed only if a later job might start. A job that passes may start, where the placement
rule puts it on the nodes the plan leaves it; reservations not yet made can change that only by
taking one of those nodes before now + its limit. So the deferred jobs before it are planned, in
order, up to the last one whose reservation might take such a node (`_Cycle._needed` says when
one cannot: too few GPUs freed there in time for its size, or the node already reserved for
every trial start that matters), each exactly as the reference plans it at its place in the
order (22.05's trial starts and cons_tres's will-run test, on the free GPUs and running jobs of
then), and then the job starts. Jobs still deferred when the cycle ends are never planned. The
cycle stops once no remaining job is small enough for the free GPUs.

On the 7-day Philly slice most jobs of a cycle are deferred and never planned (docs/benchmarks.md,
"Slurm's time-limit backfill"). What is planned is planned with the reference's rules, on
faster structures kept across cycles (the running jobs by planned end and per node, the nodes
with at least v GPUs free, and per node and v the running job whose end frees the v-th GPU): the
plan's slots as parallel lists searched by bisection, and the will-run test, for first fit and
best fit, from when each node has room instead of walking the running jobs. `placement=count`
(no nodes) goes to the reference, whose earliest-fit plan is cheap.
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
Key = tuple[float, float]  # a running job's sort key: (planned end, start order)
NOW: Key = (-math.inf, -1.0)  # before every running job's end
NEVER: Key = (math.inf, math.inf)  # after every running job's end
_UNKNOWN = (math.nan, ())  # (a will-run test not yet made)


class LazyBackfill:
    """The planner of one partition for a whole run: `cycle` is called at each backfill cycle,
    `started` and `ended` at each start and end of a job. Across cycles it keeps the running
    jobs sorted by planned end, per node the GPUs free and the running jobs on it (each with the
    GPUs it frees there), per count v the nodes with at least v GPUs free, and per node and v
    the running job whose end leaves v GPUs free on it (`table`, brought up to date when a
    cycle needs it), instead of sorting every running job at every cycle."""

    def __init__(self, gpus: np.ndarray, limit: np.ndarray):
        self.gpus, self.limit = gpus, limit  # every job's GPUs and time limit (s; inf: none)
        self._limits: list[float] = limit.tolist()  # (read one job at a time)
        self.no_cutoffs: list[float | None] = [None] * (int(gpus.max()) + 1 if len(gpus) else 1)
        # With no limit infinite (or NaN), now + lim < t holds for t = inf: `_Cycle._run_one`
        # tests that alone.
        self.finite = bool(np.isfinite(limit).all())
        self._rows: Running = []  # sorted: by end, then start order (as a stable sort)
        self._ends: list[float] = []  # their planned ends
        self._known: dict[int, Key] = {}  # running job -> its row's sort key
        self._on: list[list[tuple[float, int, int]]] = []  # per node: (end, order, GPUs), sorted
        self.free: list[int] = []  # per node: GPUs free (as the partition's)
        self.at_least: list[int] = []  # per count v (0 to gpn + 1): nodes with >= v free (bitmask)
        self._table: list[list[Key]] = []  # `table`, up to date but for the nodes in _stale
        self._stale: set[int] = set()
        self._seq = 0
        self._nodes: dict[int, list[int]] = {}  # node bitmask -> its nodes (remembered)
        self._lists: tuple[list[int], list[float]] | None = None  # the same, for the reference

    def cycle(self, part: Partition, order: np.ndarray, now: float, params: BackfillParams,
              start: Callable[[int, int], bool],
              denied: Callable[[int], int] | None = None) -> list[tuple[int, float]]:
        """`backfill.slurm_backfill` with the same starts, for the job numbers `order` (best
        first, a numpy array). Returns the (job, planned start) of the jobs it planned, which are
        the reference's for those jobs: the jobs whose reservations could change a start."""
        if part.placement == "count":
            if self._lists is None:
                self._lists = (self.gpus.tolist(), self._limits)
            return slurm_backfill(part, order.tolist(), *self._lists, now, params, start, denied)
        if part.pool.free_gpus == 0 or not len(order):
            return []
        self.sync(part)
        return _Cycle(self, part, now, params, start, order[:params.max_job_test], denied).run()

    def may_start(self, part: Partition, g: int) -> bool:
        """Whether a job of g GPUs fits now on the partition's nodes (as `_Cycle._fits` on all
        of them): if the smallest waiting job does not, a cycle starts nothing. Asked at most
        events, so it reads the nodes with at least v GPUs free that the planner keeps."""
        if part.placement in ("count", "spread"):
            return g <= part.pool.free_gpus
        self.sync(part)
        at_least, gpn = self.at_least, part.pool.gpn
        if g <= gpn:
            return bool(at_least[g])
        whole, rest = divmod(g, gpn)
        empty = at_least[gpn].bit_count()
        return empty >= whole and (not rest or empty > whole or at_least[rest].bit_count() > whole)

    def sync(self, part: Partition) -> None:
        """Build the state from the partition on first use (or if it has been missing starts
        or ends); afterwards `started` and `ended` keep it up to date."""
        if self._on and len(self._known) == len(part.running):
            return
        pool = part.pool
        self._rows, self._ends, self._known, self._seq = [], [], {}, 0
        self._on = [[] for _ in range(pool.nodes)]
        self.free = list(pool.free)
        self.at_least = [0] * (pool.gpn + 2)
        for n, f in enumerate(self.free):
            self.at_least[f] |= 1 << n
        for v in range(pool.gpn - 1, -1, -1):
            self.at_least[v] |= self.at_least[v + 1]
        self._table = []
        self._stale = set(range(pool.nodes))
        for r in part.running:
            self._add(r, math.floor(part.run_started(r)) + self._limits[r], part.allocation(r))

    def started(self, j: int, part: Partition) -> None:
        """Job j has just started on the partition (called by the policy at each start)."""
        if self._on:
            alloc = part.allocation(j)
            self._add(j, math.floor(part.run_started(j)) + self._limits[j], alloc)
            free, at_least = self.free, self.at_least
            for m, g in alloc:  # g fewer free on node m: it leaves the counts f - g + 1 to f
                f = free[m]
                free[m] = f - g
                for v in range(f - g + 1, f + 1):
                    at_least[v] ^= 1 << m

    def ended(self, j: int) -> None:
        """Running job j has ended (called by the policy at each end)."""
        key = self._known.pop(j, None)
        if key is not None:
            k = bisect.bisect_left(self._rows, key)
            row = self._rows.pop(k)
            del self._ends[k]
            free, at_least = self.free, self.at_least
            for m, g in row[2]:  # g more free on node m: it joins the counts f + 1 to f + g
                on = self._on[m]
                del on[bisect.bisect_left(on, key)]
                self._stale.add(m)
                f = free[m]
                free[m] = f + g
                for v in range(f + 1, f + g + 1):
                    at_least[v] ^= 1 << m

    def _add(self, j: int, end: float, alloc: Alloc) -> None:
        mask, seq = 0, self._seq
        for m, g in alloc:
            mask |= 1 << m
            bisect.insort(self._on[m], (end, seq, g))
            self._stale.add(m)
        self._seq += 1
        self._known[j] = (end, seq)
        k = bisect.bisect_right(self._ends, end)  # (its start order is the largest yet)
        self._rows.insert(k, (end, seq, alloc, mask))
        self._ends.insert(k, end)

    def running(self) -> Running:
        """The running jobs (planned end (Slurm's whole-second start + limit), start order,
        allocation, node bitmask), by end, then start order."""
        return self._rows

    def ends(self) -> list[float]:
        """The planned ends of `running`'s rows."""
        return self._ends

    def nodes(self, mask: int) -> list[int]:
        """The node numbers of a bitmask, in increasing order."""
        got = self._nodes.get(mask)
        if got is None:
            if len(self._nodes) > 4096:
                self._nodes.clear()
            got = self._nodes[mask] = []
            m = mask
            while m:
                bit = m & -m
                m ^= bit
                got.append(bit.bit_length() - 1)
        return got

    def freed_before(self, node: int, t: float) -> int:
        """GPUs the running jobs on the node free at their planned ends before t."""
        out = 0
        for end, _, g in self._on[node]:
            if end >= t:
                break
            out += g
        return out

    def order_of(self, j: int) -> int:
        """The start order of running job j's row."""
        return int(self._known[j][1])

    def table(self, free: list[int], gpn: int) -> list[list[Key]]:
        """Per count v (0 to gpn) and node, the sort key (planned end, start order) of the
        running job whose end leaves the node (now `free` GPUs free) v GPUs free (`NOW`: it has
        them; `NEVER`: no running job's end does). The list is the planner's, changed in place
        by the next call after a job starts or ends."""
        if not self._table:
            self._table = [[NOW] * len(free) for _ in range(gpn + 1)]
        for n in self._stale:
            self.column(self._table, n, free[n], gpn)
        self._stale.clear()
        return self._table

    def column(self, table: list[list[Key]], node: int, free: int, gpn: int,
               skip: frozenset[int] = frozenset()) -> None:
        """Write the node's column of `table` for `free` GPUs free and the running jobs on it
        but those in `skip` (start orders)."""
        for v in range(1, free + 1):
            table[v][node] = NOW
        have = free
        for end, seq, g in self._on[node]:
            if have >= gpn:
                break
            if seq in skip:
                continue
            key = (end, seq)
            for v in range(have + 1, min(have + g, gpn) + 1):
                table[v][node] = key
            have += g
        for v in range(have + 1, gpn + 1):
            table[v][node] = NEVER


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
        k = bisect.bisect_right(ends, start_res)
        while k < n:  # until `later` is found
            h = held[k]
            if k + 1 < n and part_mask & ~held[k + 1] & ~(avail & ~h):
                later = ends[k]
            if begins[k] > end_time:
                if later == 0 and k + 2 < n:
                    later = ends[k + 1]
                return avail, later
            avail &= ~h
            k += 1
            if later != 0:
                break
        # then only the nodes reserved in the slots that begin by end_time are taken away
        for h in held[k:bisect.bisect_right(begins, end_time, k)]:
            avail &= ~h
        return avail, later

    def overlaps(self, nodes: int, begin: float, end: float) -> bool:
        """Do the nodes meet a reservation within [begin, end) (``_test_resv_overlap``)?"""
        key = (nodes, begin, end)
        got = self._overlaps.get(key)
        if got is None:
            got = False
            for b, e, m in self.resv:
                if m & nodes and b < end and e > begin:  # (most reservations hold other nodes)
                    got = True
                    break
            self._overlaps[key] = got
        return got

    def held_from(self, node_bit: int, t: float) -> float:
        """The earliest begin of a slot that ends at t or later and is reserved on the node
        (inf if none)."""
        ends, held = self.ends, self.held
        for k in range(bisect.bisect_left(ends, t), len(ends)):
            if held[k] & node_bit:
                return self.begins[k]
        return math.inf


class _Cycle:
    """One cycle's state: free GPUs per node, the running jobs (built when first needed), the
    plan, and the answers that stay true until a reservation or a start changes them.

    Jobs are known by their position in the cycle's order. The jobs started in the cycle divide
    it into epochs (epoch k: after the k-th start). A deferred job is planned, if ever, in the
    epoch it was deferred in, as the reference plans it at its place in the order: on the free
    GPUs and running jobs of then."""

    def __init__(self, planner: LazyBackfill, part: Partition, now: float, params: BackfillParams,
                 start: Callable[[int, int], bool], order: np.ndarray, denied: Callable[[int], int] | None):
        pool = part.pool
        self.planner, self.part, self.now, self.params, self.start_job = planner, part, now, params, start
        # the planner's free GPUs per node and nodes with at least v free, kept up to date by
        # the policy's calls at each start
        self.free, self.at_least = planner.free, planner.at_least
        self.gpn, self.placement = pool.gpn, part.placement
        self.free_total = pool.free_gpus
        self.everything = (1 << len(self.free)) - 1
        step = params.resolution
        self.plan = _Slots(math.floor(now / step) * step, math.floor((now + params.window) / step) * step)
        # The jobs' numbers, GPUs and limits as lists, made a chunk at a time as the walk gets
        # there (it stops once no job left is small enough for the free GPUs, most often long
        # before the end of the order): `stop` is where, from the smallest job from each
        # position on.
        self.order = order
        self.smallest = np.minimum.accumulate(planner.gpus[order[::-1]])[::-1]
        self.stop = int(self.smallest.searchsorted(self.free_total, "right"))
        self.jobs: list[int] = []
        self.sizes: list[int] = []
        self.lims: list[float] = []
        self.denied = denied
        self.planned: list[tuple[int, float]] = []
        self.started: list[tuple[int, Alloc]] = []  # in order
        self.started_at: list[int] = []  # their positions
        self._epochs: dict[int, tuple[list[int], Running, list[float]]] = {}  # per epoch: `_state`
        self._after: dict[int, tuple[frozenset[int], int]] = {}  # per epoch: `_later`
        self._tables: dict[int, list[list[Key]]] = {}  # per epoch: `_table`
        # Remembered answers: the will-run test per (epoch, GPUs, usable nodes); the usable nodes
        # from now per (partition, limit) until a reservation; `_cutoff` per GPUs (one partition)
        # or (partition, GPUs) until a reservation or a start; and the jobs (epoch, GPUs, limit,
        # partition) planned to neither start nor reserve, until a reservation.
        self.will_run: dict[tuple[int, int, int], tuple[float, Alloc] | None] = {}
        self.usable_now: dict[tuple[int, float], int] = {}
        self.cutoff: dict[object, float] = {}
        self.cut = list(planner.no_cutoffs)  # with one partition: `_cutoff` per GPUs (None: not known)
        self.nothing: set[tuple[int, int, float, int]] = set()
        self._spot_memo: tuple[int, int, int, float, int, list[tuple[int, int, float]]] | None = None
        # `_needed`'s last question (job, reservations, starts, epoch), deferred jobs and answer
        self._last_needed: tuple[tuple[int, int, int, int], int, int] | None = None

    def run(self) -> list[tuple[int, float]]:
        if self.denied is None and self.planner.finite:
            return self._run_one()
        now, cutoff, inf = self.now, self.cutoff, math.inf
        sizes, lims, one = self.sizes, self.lims, self.denied is None  # (`_more` extends the lists)
        deferred: list[int] = []
        i = have = 0
        stop = self.stop  # (only a start moves it)
        while i < stop:
            if i == have:
                self._more()
                have = len(sizes)
            g = sizes[i]
            key: object = g if one else (self.mask(i), g)
            t = cutoff.get(key)
            if t is None:
                t = cutoff[key] = self._cutoff(self.mask(i), g)
            if now + lims[i] < t or t == inf:
                if not self._try_start(i, deferred):
                    deferred.append(i)
                stop = self.stop
            else:
                deferred.append(i)
            i += 1
        return self.planned

    def _run_one(self) -> list[tuple[int, float]]:
        """`run` with one partition and every limit finite: the cutoff depends on the job's GPUs
        only, and the jobs up to the next that may start are deferred in one step."""
        now, cut, everything = self.now, self.cut, self.everything
        sizes, lims = self.sizes, self.lims  # (`_more` extends the lists)
        deferred: list[int] = []
        i = 0
        while i < self.stop:  # (only a start moves it)
            if i == len(sizes):
                self._more()
            a, end = i, min(len(sizes), self.stop)
            for i in range(a, end):
                t = cut[sizes[i]]
                if t is None:
                    g = sizes[i]
                    t = cut[g] = self._cutoff(everything, g)
                if now + lims[i] < t:
                    break
            else:
                i = end
            deferred.extend(range(a, i))
            if i < end:
                if not self._try_start(i, deferred):
                    deferred.append(i)
                i += 1
        return self.planned

    def _more(self) -> None:
        """The next chunk of the jobs' numbers, GPUs and limits (twice the last, up to `stop`)."""
        a = len(self.jobs)
        chunk = self.order[a:min(self.stop, max(2 * a, 64))]
        self.jobs += chunk.tolist()
        self.sizes += self.planner.gpus[chunk].tolist()
        self.lims += self.planner.limit[chunk].tolist()

    def mask(self, i: int) -> int:
        """The nodes the job at position i may use (its Slurm partition's)."""
        if self.denied is None:
            return self.everything
        return self.everything & ~self.denied(self.jobs[i])

    def epoch(self, i: int) -> int:
        """The epoch of the job at position i: the jobs started before it."""
        return bisect.bisect_left(self.started_at, i)

    def _try_start(self, i: int, deferred: list[int]) -> bool:
        """Start the job at position i, which fits now on the nodes the plan so far leaves it,
        if it does once the deferred jobs whose reservations could change that are planned
        (they leave `deferred`)."""
        g, lim, mask = self.sizes[i], self.lims[i], self.mask(i)
        while deferred:
            k = self._needed(deferred, i)
            if not k:
                break
            self._plan_job(deferred.pop(0))
            if self.denied is None:
                t = self.cut[g]
                if t is None:
                    t = self.cut[g] = self._cutoff(mask, g)
            else:
                t = self.cutoff.get((mask, g))
                if t is None:
                    t = self.cutoff[(mask, g)] = self._cutoff(mask, g)
            if not (self.now + lim < t or t == math.inf):
                return False
        # (placement cannot disagree with the plan, which follows the same rules)
        return self._start(i, self._usable_now(mask, lim))

    def _cutoff(self, part_mask: int, g: int) -> float:
        """The time from which the plan so far keeps g GPUs from fitting now: a job of g GPUs
        and limit lim fits now on the nodes the plan leaves it from now to now + lim (the first
        trial of `_plan_job`) if and only if now + lim < this time (inf: always, -inf: never).
        The plan's slots are looked at in order, each taking its reserved nodes away."""
        plan, now = self.plan, self.now
        begins, ends, held = plan.begins, plan.ends, plan.held
        k, n = bisect.bisect_right(ends, now), len(ends)
        avail = part_mask
        while k < n and begins[k] <= now:
            avail &= ~held[k]
            k += 1
        if g <= self.gpn and self.placement != "spread":  # (`_fits`: a node with g free)
            room = self.at_least[g]
            if not avail & room:
                return -math.inf
            for k in range(k, n):
                if avail & held[k]:
                    avail &= ~held[k]
                    if not avail & room:
                        return begins[k]
            return math.inf
        if not self._fits(avail, g):
            return -math.inf
        for k in range(k, n):
            if avail & held[k]:
                avail &= ~held[k]
                if not self._fits(avail, g):
                    return begins[k]
        return math.inf

    def _fits(self, nodes: int, g: int) -> bool:
        """Whether the placement rule finds room now for g GPUs on the bitmask `nodes` (as
        `_place`, without placing them)."""
        at_least, gpn = self.at_least, self.gpn
        if self.placement == "spread":
            return sum((nodes & at_least[v]).bit_count() for v in range(1, gpn + 1)) >= g
        if g <= gpn:
            return bool(nodes & at_least[g])
        whole, rest = divmod(g, gpn)
        empty = (nodes & at_least[gpn]).bit_count()
        return empty >= whole and (not rest or empty > whole or (nodes & at_least[rest]).bit_count() > whole)

    def _place_now(self, nodes: int, g: int) -> int:
        """The nodes (bitmask) the placement rule gives g GPUs now on the bitmask `nodes` (as
        `NodePool.place`); the job fits there."""
        at_least, gpn, placement = self.at_least, self.gpn, self.placement
        if placement == "spread":
            out, need, m = 0, g, nodes & at_least[1]
            while need > 0:
                bit = m & -m
                m ^= bit
                out |= bit
                need -= self.free[bit.bit_length() - 1]
            return out
        if g <= gpn:
            if placement == "first_fit":
                m = nodes & at_least[g]
                return m & -m
            return _best_fit(at_least, nodes, g, gpn)
        whole, rest = divmod(g, gpn)
        out, m = 0, nodes & at_least[gpn]
        for _ in range(whole):
            bit = m & -m
            m ^= bit
            out |= bit
        return out | _best_fit(at_least, nodes & ~out, rest, gpn) if rest else out

    def _usable_now(self, part_mask: int, lim: float) -> int:
        key = (part_mask, lim)
        avail = self.usable_now.get(key)
        if avail is None:
            avail = self.usable_now[key] = self.plan.usable(part_mask, self.now, self.now + lim)[0]
        return avail

    def piece(self, g: int) -> int:
        """The fewest GPUs a job of g GPUs takes on any one node it is placed on."""
        if self.placement == "spread":
            return 1
        if g <= self.gpn:
            return g
        return g % self.gpn or self.gpn

    def _needed(self, deferred: list[int], i: int) -> int:
        """How many of the deferred jobs (a prefix) must be planned before the job at position
        i starts as in the reference: up to the last one whose reservation might take, from
        before now + its limit, a node it is placed on now. (It goes where the placement rule
        puts it on the nodes the plan so far leaves usable; reservations yet to be made can
        only take nodes away from these, so if they take none of the nodes it gets, they
        change nothing.)

        A reservation taking node n from before now + lim, in the plan's slots of
        ``bf_resolution``, starts before Hs (now + lim rounded up to the next slot boundary),
        and a job gets a reservation only within ``bf_window``. A deferred job d cannot get
        one (`_plan_job`) when (a) n frees at most P GPUs by then and d needs more than P on
        any node it is placed on (the will-run test's start is the end of a running job at or
        after the one that makes room), or (b) a reservation already made holds n in a slot
        that ends at Hs or later and begins by now + d's limit: every trial start of d before
        Hs then sees n reserved. Reservations not yet made (deferred jobs before d) only take
        more nodes, and jobs started since the first deferred job only free fewer GPUs, so
        both tests hold in d's own epoch."""
        epoch = self.epoch(deferred[0])
        asked = (i, len(self.plan.resv), len(self.started), epoch)
        last = self._last_needed
        if last is not None and last[0] == asked and last[1] == len(deferred) + 1:
            # asked again after the first deferred job was planned with nothing reserved or
            # started, in the same epoch: the tests' inputs are those of the last call and the
            # same jobs are deferred but the first, so it is the last answer less one
            k = max(last[2] - 1, 0)
        else:
            k = self._needed_scan(deferred, i, epoch)
        self._last_needed = (asked, len(deferred), k)
        return k

    def _needed_scan(self, deferred: list[int], i: int, epoch: int) -> int:
        """`_needed`'s answer worked out (`epoch`: the first deferred job's)."""
        now, inf = self.now, math.inf
        nodes = self._spot_nodes(i)
        later = self.started[epoch:]
        if later:  # at most: free then (GPUs of jobs started since given back) + freed by then
            more = []
            for bit, frees, held in nodes:
                n = bit.bit_length() - 1
                for _, alloc in later:
                    for m, g_m in alloc:
                        if m == n:
                            frees += g_m
                more.append((bit, frees, held))
            nodes = more
        sizes, lims, denied, piece = self.sizes, self.lims, self.denied, self.piece
        if len(nodes) == 1 and denied is None and self.placement != "spread":
            # the common case, as below: a job of g <= gpn GPUs takes g on its node, a larger
            # one at least piece(g) = g % gpn or gpn
            _, frees, held = nodes[0]
            gpn = self.gpn
            if held == inf:
                for k in range(len(deferred) - 1, -1, -1):
                    g_d = sizes[deferred[k]]
                    if g_d <= frees or g_d > gpn and (g_d % gpn or gpn) <= frees:
                        return k + 1
                return 0
            for k in range(len(deferred) - 1, -1, -1):
                d = deferred[k]
                g_d = sizes[d]
                if (g_d <= frees or g_d > gpn and (g_d % gpn or gpn) <= frees) and now + lims[d] < held:
                    return k + 1
            return 0
        for k in range(len(deferred) - 1, -1, -1):
            d = deferred[k]
            for bit, frees, held in nodes:
                if ((held == inf or now + lims[d] < held) and piece(sizes[d]) <= frees
                        and (denied is None or self.mask(d) & bit)):
                    return k + 1
        return 0

    def _spot_nodes(self, i: int) -> list[tuple[int, int, float]]:
        """For `_needed`: the nodes the job at position i is placed on now, each with (node bit,
        GPUs free now and freed before (a)'s time, (b)'s slot begin). `_needed` asks again after
        each deferred job it plans, so the answer is kept for the job: a start changes it; a
        reservation on none of its nodes changes only (b)'s begins (the slots it splits), as
        taking other nodes from the usable ones leaves the placement rule's choice where it
        was (the lowest or fullest node that holds the job, the lowest empty nodes)."""
        resv, memo = self.plan.resv, self._spot_memo
        if memo is not None and memo[:2] == (i, len(self.started)):
            _, _, seen, hs, spot, nodes = memo
            if seen == len(resv):
                return nodes
            if not any(m & spot for _, _, m in resv[seen:]):
                nodes = [(bit, frees, self.plan.held_from(bit, hs)) for bit, frees, _ in nodes]
                self._spot_memo = (i, len(self.started), len(resv), hs, spot, nodes)
                return nodes
        g, lim, mask = self.sizes[i], self.lims[i], self.mask(i)
        now, step = self.now, self.params.resolution
        spot = left = self._place_now(self._usable_now(mask, lim), g)
        hs = (math.floor((now + lim) / step) + 1) * step if math.isfinite(lim) else math.inf
        by = min(hs, math.nextafter(now + self.params.window, math.inf))  # (a): ends before this
        nodes = []
        while left:
            bit = left & -left
            left ^= bit
            n = bit.bit_length() - 1
            # (b) holds for a limit lim_d with held <= now + lim_d, the reference's own test
            nodes.append((bit, self.free[n] + self.planner.freed_before(n, by), self.plan.held_from(bit, hs)))
        self._spot_memo = (i, len(self.started), len(resv), hs, spot, nodes)
        return nodes

    def _plan_job(self, i: int) -> None:
        """Plan the job at position i as `backfill._slurm_backfill_nodes` does, in its epoch:
        start it now (only in the current epoch), reserve nodes for it, or neither."""
        g, lim = self.sizes[i], self.lims[i]
        part_mask = self.everything if self.denied is None else self.mask(i)
        epoch = bisect.bisect_left(self.started_at, i)  # (`epoch`)
        key = (epoch, g, lim, part_mask)
        if key in self.nothing:
            return
        now, plan, step = self.now, self.plan, self.params.resolution
        usable, overlaps, will_run = plan.usable, plan.overlaps, self.will_run
        first = plan.begins[0]  # (the plan's begin: a cut never moves it)
        finite = math.isfinite(lim)
        # (the comparisons below are `max` of the reference's, written out: the same values)
        start_res = now
        horizon = now + self.params.window
        for _ in range(2 * len(plan.ends) + 4):  # each retry moves start_res on to a later slot
            if start_res > horizon:
                break  # every trial from here starts beyond the window: no start, no reservation
            avail, later = usable(part_mask, start_res, (start_res if start_res >= now else now) + lim)
            if avail:
                got = will_run.get((epoch, g, avail), _UNKNOWN)
                if got is _UNKNOWN:
                    got = self._will_run(epoch, g, avail)
            else:
                got = None
            if got is None:
                if later:
                    start_res = later
                    continue
                break
            t, spot = got
            if t < start_res:
                t = start_res
            if len(spot) == 1:
                spot_mask = 1 << spot[0][0]
            else:
                spot_mask = 0
                for m, _ in spot:
                    spot_mask |= 1 << m
            begin = math.floor(t / step) * step
            end = math.floor((t + lim) / step) * step if finite else math.inf
            if end < begin + step:
                end = begin + step  # a reservation holds at least one slot
            if t > now and overlaps(spot_mask, begin if begin >= first else first, end):
                start_res = t + (step if start_res == t else 0.0)
                continue
            if t <= now:
                if epoch == len(self.started) and self._start(i, avail):
                    return
                # placement disagreed with the plan (cannot happen with the same rules): reserve
            elif later and t > later:
                start_res = later
                continue
            if t > horizon:
                break  # too far ahead: no reservation
            plan.add(begin if begin >= first else first, end, spot_mask)
            self.planned.append((self.jobs[i], t))
            self.usable_now.clear()
            self.cutoff.clear()
            self.cut[:] = self.planner.no_cutoffs
            self.nothing.clear()
            return
        self.nothing.add(key)

    def _start(self, i: int, avail: int) -> bool:
        j = self.jobs[i]
        if not self.start_job(j, self.everything & ~avail):
            return False
        alloc = self.part.allocation(j)  # (the policy has told the planner: free GPUs are down)
        self.free_total -= self.sizes[i]
        self.stop = min(self.stop, int(self.smallest.searchsorted(self.free_total, "right")))
        self._epochs.pop(len(self.started), None)  # (its running jobs and table were the live ones)
        self._tables.pop(len(self.started), None)
        self.started.append((j, alloc))
        self.started_at.append(i)
        self.cutoff.clear()
        self.cut[:] = self.planner.no_cutoffs
        return True

    def running(self) -> Running:
        return self.planner.running()

    def _state(self, epoch: int) -> tuple[list[int], Running, list[float]]:
        """The free GPUs per node, the running jobs and their planned ends of an epoch (the
        current one's free GPUs and running jobs are live)."""
        got = self._epochs.get(epoch)
        if got is None:
            if epoch == len(self.started):
                free, rows, ends = self.free, self.running(), self.planner.ends()
            else:
                free = list(self.free)
                for _, alloc in self.started[epoch:]:
                    for m, g in alloc:
                        free[m] += g
                skip = self._later(epoch)[0]
                rows = [r for r in self.running() if r[1] not in skip]
                ends = [r[0] for r in rows]
            got = self._epochs[epoch] = (free, rows, ends)
        return got

    def _later(self, epoch: int) -> tuple[frozenset[int], int]:
        """The rows (start orders) and nodes (bitmask) of the jobs started after an epoch."""
        got = self._after.get(epoch)
        if got is None:
            nodes = 0
            for _, alloc in self.started[epoch:]:
                for m, _ in alloc:
                    nodes |= 1 << m
            got = (frozenset(self.planner.order_of(s) for s, _ in self.started[epoch:]), nodes)
            if epoch < len(self.started):  # (the current epoch's grows with the next start)
                self._after[epoch] = got
        return got

    def _table(self, epoch: int) -> list[list[Key]]:
        """`LazyBackfill.table` in an epoch."""
        got = self._tables.get(epoch)
        if got is None:
            got = self.planner.table(self.free, self.gpn)
            if epoch < len(self.started):  # a copy, with the nodes of the later starts as then
                got = [list(col) for col in got]
                skip, nodes = self._later(epoch)
                free = self._state(epoch)[0]
                while nodes:
                    bit = nodes & -nodes
                    nodes ^= bit
                    n = bit.bit_length() - 1
                    self.planner.column(got, n, free[n], self.gpn, skip)
            self._tables[epoch] = got
        return got

    def _will_run(self, epoch: int, g: int, avail: int) -> tuple[float, Alloc] | None:
        key = (epoch, g, avail)
        if key not in self.will_run:
            if self.placement == "spread":
                free, rows, _ = self._state(epoch)
                self.will_run[key] = _will_run(g, avail, free, rows, self.now, self.gpn, self.placement)
            else:
                self.will_run[key] = self._will_run_by_nodes(epoch, g, avail)
        return self.will_run[key]

    def _will_run_by_nodes(self, epoch: int, g: int, avail: int) -> tuple[float, Alloc] | None:
        """`_will_run` for first fit and best fit, from when each node has enough GPUs free
        (`_table`) instead of walking the running jobs: the first running job after whose end
        the job fits, then the batch that holds it (`_batch_end`), then where it goes then."""
        _, rows, ends = self._state(epoch)
        table, gpn = self._table(epoch), self.gpn
        nodes = self.planner.nodes(avail)
        if g <= gpn:
            fit = min(map(table[g].__getitem__, nodes))
        else:  # `whole` empty nodes, and (rest) one more with `rest` free
            whole, rest = divmod(g, gpn)
            if len(nodes) < whole + (rest > 0):
                return None
            fit = sorted(map(table[gpn].__getitem__, nodes))[whole - 1]
            if rest:
                fit = max(fit, sorted(map(table[rest].__getitem__, nodes))[whole])
        if fit == NOW:
            return self.now, _spot(table, nodes, g, gpn, self.placement, NOW)
        if fit[0] == math.inf:
            return None  # no end makes room, or the walk meets a job that never ends first
        u = _batch_end(rows, ends, avail, fit)
        if u < 0:
            return None
        last = ends[u]
        return (last if last > self.now else self.now + 1.0), _spot(table, nodes, g, gpn, self.placement,
                                                                    (last, rows[u][1]))


def _spot(table: list[list[Key]], nodes: list[int], g: int, gpn: int, placement: str, key: Key) -> Alloc:
    """`_place` on the nodes (increasing) with the GPUs free after the running job with sort
    key `key` ends (`LazyBackfill.table`), for first fit and best fit; the job fits then."""
    if g <= gpn:
        col = table[g]
        if placement == "first_fit":
            return ((next(n for n in nodes if col[n] <= key), g),)
        best, fewest = -1, gpn + 1
        for n in nodes:
            if col[n] <= key:
                f = g
                while f < gpn and table[f + 1][n] <= key:
                    f += 1
                if f < fewest:
                    best, fewest = n, f
        return ((best, g),)
    whole, rest = divmod(g, gpn)
    full = table[gpn]
    taken = [n for n in nodes if full[n] <= key][:whole]
    alloc = tuple((n, gpn) for n in taken)
    if not rest:
        return alloc
    col, best, fewest = table[rest], -1, gpn + 1
    for n in nodes:
        if col[n] <= key and n not in taken:
            f = rest
            while f < gpn and table[f + 1][n] <= key:
                f += 1
            if f < fewest:
                best, fewest = n, f
    return (*alloc, (best, rest))


def _best_fit(at_least: list[int], nodes: int, g: int, gpn: int) -> int:
    """The node (bit) of `nodes` with the fewest free GPUs that holds g (NodePool's best fit:
    lowest number on ties), from the nodes with at least v free per v; 0 if none."""
    for v in range(g, gpn + 1):
        m = nodes & at_least[v] & ~at_least[v + 1]
        if m:
            return m & -m
    return 0


def _batch_end(rows: Running, ends: list[float], avail: int, fit: Key) -> int:
    """The last running job of the will-run test's batch that holds the job with sort key
    `fit` (as `_will_run` takes them away: a batch ends after a job on a usable node when the
    next job's end is beyond the batch's window, whose length doubles batch after batch), or
    -1 if the test never gets there (it meets a job that never ends first)."""
    n = len(rows)
    finite = bisect.bisect_left(ends, math.inf)  # the jobs from here never end
    at = bisect.bisect_left(ends, fit[0])
    while rows[at][1] != fit[1]:
        at += 1
    window, first_end = float(_WILL_RUN_WINDOW), 0.0
    k = 0
    while True:
        while k < finite and not rows[k][3] & avail:
            k += 1
        if k >= finite:
            return -1
        if not first_end:
            first_end = ends[k] + (window - ends[k] % window)
        # the batch ends at the first job on a usable node followed by an end beyond the window
        u = max(k, bisect.bisect_right(ends, first_end + window) - 1)
        while u < finite and not rows[u][3] & avail:
            u += 1
        if u >= finite:
            if finite < n:
                return -1
            u = n - 1  # no such job: the batch takes the rest, up to the last usable one
            while not rows[u][3] & avail:
                u -= 1
        if u >= at:
            return u
        k = u + 1
        if k >= n:
            return -1
        while math.isfinite(ends[k]) and ends[k] > first_end + window:
            window *= 2


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
