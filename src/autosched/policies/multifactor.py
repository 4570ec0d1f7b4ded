"""Slurm's multifactor job priority (Fair Tree or classic fair share) with Slurm's backfill."""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ..cluster import SlurmClocks, SlurmPartition
from ..errors import SimulationError
from ..sim.contract import JobInfo, Partition
from ..space import Bool, Categorical, ConfigSpace, Float, Int
from .backfill import BackfillParams, priority_pass, slurm_backfill
from .base import PLACEMENT as BASE_PLACEMENT
from .base import Policy
from .fairshare import ShareTree
from .lazy_backfill import LazyBackfill

DAY = 86400.0
TIER = 2.0 ** 32  # above any priority (Slurm's are 32-bit): orders jobs by PriorityTier first
FAIR_TREE, CLASSIC = "FAIR_TREE", "NO_FAIR_TREE"
GPU_TRES, CPU_TRES = "PriorityWeightTRES.GRES/gpu", "PriorityWeightTRES.CPU"
GPU_BILL, CPU_BILL = "TRESBillingWeights.GRES/gpu", "TRESBillingWeights.CPU"
# The priority weights: Slurm orders jobs by their weighted sum, so by the weights' ratios (up
# to integer truncation). A search moves their direction and scale apart (ConfigSpace.weights):
# the scale is the largest weight, from 100 (coarse priorities: many ties, broken by submission)
# to 100000 (the knobs' maximum).
WEIGHTS = ("PriorityWeightAge", "PriorityWeightFairshare", "PriorityWeightJobSize", GPU_TRES, CPU_TRES)
_NONE = dict.fromkeys(WEIGHTS, 0)
# Configs a search tries first, and a round's portfolio compares: the orders operators reach
# for, and two backfill corners.
ARCHETYPES: dict[str, dict[str, Any]] = {
    "age only (FIFO)": {**_NONE, "PriorityWeightAge": 10000},
    "small first": {**_NONE, "PriorityWeightJobSize": 100000, "PriorityFavorSmall": True},
    # small first, but a job that has waited a day ranks with the smallest: the queue a switch
    # finds is not left behind the small jobs that come after it
    "small first, aged": {**_NONE, "PriorityWeightJobSize": 100000, "PriorityFavorSmall": True,
                          "PriorityWeightAge": 100000, "PriorityMaxAge": 86400.0},
    "GPU first": {**_NONE, GPU_TRES: 10000},
    "fair-share heavy": {**_NONE, "PriorityWeightFairshare": 10000, "PriorityWeightAge": 1000},
    # backfill-heavy corners of the bf_* knobs, the priority order kept: a window as long as the
    # longest limits a site allows (a week), as many jobs tested as a cycle can, coarser
    # reservations to match (slurm.conf(5)); and frequent, deeper cycles
    "deep backfill": {"backfill": True, "bf_window": 10080, "bf_max_job_test": 5000, "bf_resolution": 300},
    "frequent backfill": {"backfill": True, "bf_interval": 10, "bf_max_job_test": 1000},
}
# Slurm's select plugin takes the first nodes (in order) that hold a job: first_fit, beside the
# placements every policy has. Derived from the base knob, so its name and default stay one.
PLACEMENT = replace(BASE_PLACEMENT, choices=(*BASE_PLACEMENT.choices, "first_fit"),
                    help=BASE_PLACEMENT.help + "; first_fit: a job that fits in one node goes "
                    "on the lowest-numbered node that holds it (as Slurm's select plugin)")


class Multifactor(Policy):
    """Jobs wait in order of Slurm 22.05's multifactor priority (highest first; ties: submission
    order), an integer as in Slurm (the weighted sum, truncated)::

        priority = PriorityWeightAge       * min(age / PriorityMaxAge, 1)
                 + PriorityWeightFairshare * fair-share factor
                 + PriorityWeightJobSize   * job-size factor
                 + sum over TRES t of PriorityWeightTRES[t] * (job's t / partition's t)

    *age* is the time since submission (the first one, ``JobInfo.origin``: a job re-submitted
    with its age keeps it). The *job-size factor* is Slurm's: the mean of the job's
    share of the partition's nodes and of its CPUs (``PriorityFavorSmall``: of what it leaves
    free). A job needs ceil(GPUs / GPUs per node) nodes; its CPUs are the trace's ``num_cpus``,
    else the cluster's CPUs per GPU times its GPUs (``ClusterSpec.job_cpus``: DefCpuPerGPU, or the
    node shape's; with ``DefCpuPerGPU=0`` one per node, sbatch's one task of one CPU); a node has
    ``ClusterSpec.cpus_per_node`` CPUs (as many as GPUs unless the spec says). GPU demand enters through
    ``PriorityWeightTRES.GRES/gpu`` (job GPUs / partition GPUs), as in ``PriorityWeightTRES=
    GRES/gpu=N``; ``PriorityWeightTRES.CPU`` weighs the CPUs the job asked for
    (``ClusterSpec.asked_cpus``: the trace's ``num_cpus``; else, where the cluster sets
    DefCpuPerGPU, one per node, as a waiting job's TRES are its request and DefCpuPerGPU adds
    CPUs only when it starts; else, under the node shape's rule, the CPUs it is given).

    *Fair share* is over the cluster's configured association tree (``ClusterSpec.associations``,
    from ``sacctmgr``: every association counts, as in slurmctld), else over root -> account ->
    user built from the trace with equal shares at each level (Slurm's default ``fairshare=1``;
    only associations that have submitted count): the account is the trace's ``account``, else
    its ``vc``; the user is its ``user`` (without users each account is one leaf). Usage is
    billing-weighted run time (``TRESBillingWeights``: CPU and GPU weights times the job's CPUs
    and GPUs), decayed with half-life ``PriorityDecayHalfLife``. ``PriorityFlags=FAIR_TREE``
    (Slurm's default since 19.05) ranks users depth-first by level fair share (shares / usage at
    each level) and gives rank / users; ``NO_FAIR_TREE`` is the classic factor 2^(-effective
    usage / normalised shares) (see `fairshare`). Priorities of waiting jobs are recomputed every
    ``PriorityCalcPeriod`` (on the decay thread's clock, ``SlurmClocks.decay``) and stay fixed in
    between; a job arriving in between gets its age then (0 for a new job) and the fair share of the last recalculation.

    Scheduling: when the trace has time limits, Slurm 22.05's way. The main scheduler runs from
    slurmctld's background loop (a tick about once a second, ``SlurmClocks.tick``): after an
    event (a submission, a job's end) at the first tick at least ``batch_sched_delay`` whole
    seconds after its last pass, and after a recalculation at the next ``sched_interval``; it
    tries jobs in order (``PriorityTier`` of the job's Slurm partition, then priority, then
    submission) and stops at the first that does not fit (with several Slurm partitions, that
    job's partition leaves the pass and the others go on). With ``backfill`` the backfill
    scheduler runs every ``bf_interval`` seconds on its own clock and plans with time limits
    (see `slurm_backfill`). With ``ClusterSpec.slurm_partitions`` a job runs only on its
    partition's nodes. Without time limits Slurm's backfill cannot be modelled, and a
    non-clairvoyant stand-in runs at every event: later jobs that fit start while the top job
    has waited less than ``reserve_after``. ``backfill_kind`` says which one ran. Usage and
    accounts are tracked per engine partition (each VC is scheduled on its own). A Slurm
    partition that gives its own ``billing_weights`` (``SlurmPartition``) bills its jobs by them
    instead of by the ``TRESBillingWeights.*`` knobs, as Slurm bills each job by its partition's
    weights.
    """

    name = "multifactor"
    # Backfill plans with `LazyBackfill`; the reference planner (`slurm_backfill`, the same
    # starts, slower) when this is True: for the tests and benchmarks that compare them.
    reference_planner = False
    summary = "Slurm multifactor priority (age, Fair Tree/classic fair share, job size, TRES) with backfill"
    space = ConfigSpace([
        PLACEMENT,
        Int("PriorityWeightAge", "weight of the age factor", low=0, high=100000, default=1000),
        Float("PriorityMaxAge", "queue wait at which the age factor reaches 1", low=600.0,
              high=60 * DAY, default=7 * DAY, log=True, unit="s"),
        Int("PriorityWeightFairshare", "weight of the fair-share factor", low=0, high=100000,
            default=10000),
        Float("PriorityDecayHalfLife", "half-life of past usage in the fair-share factor",
              low=600.0, high=90 * DAY, default=7 * DAY, log=True, unit="s"),
        Categorical("PriorityFlags", "FAIR_TREE: Slurm's Fair Tree (its default); NO_FAIR_TREE: "
                    "the classic fair-share factor", choices=(FAIR_TREE, CLASSIC), default=FAIR_TREE),
        Int("PriorityWeightJobSize", "weight of the job-size factor (nodes and CPUs, as Slurm)",
            low=0, high=100000, default=1000),
        Bool("PriorityFavorSmall", "small jobs get the larger job-size factor (else large jobs)",
             default=False),
        Int(GPU_TRES, "weight of the job's share of the partition's GPUs (PriorityWeightTRES)",
            low=0, high=100000, default=0),
        Int(CPU_TRES, "weight of the job's share of the partition's CPUs (PriorityWeightTRES)",
            low=0, high=100000, default=0),
        Float(GPU_BILL, "fair-share usage per GPU-second (the partition's TRESBillingWeights)",
              low=0.0, high=100.0, default=1.0),
        Float(CPU_BILL, "fair-share usage per CPU-second (the partition's TRESBillingWeights)",
              low=0.0, high=100.0, default=0.0),
        Int("PriorityCalcPeriod", "minutes between priority recalculations (as in slurm.conf)",
            low=1, high=60, default=5, unit="min"),
        Bool("backfill", "let lower-priority jobs start while the top job does not fit "
             "(sched/backfill; off = sched/builtin)", default=True),
        Float("reserve_after", "without time limits in the trace: once the top job has waited this "
              "long, nothing may pass it (0 = never backfill)", low=0.0, high=7 * DAY,
              default=6 * 3600.0, unit="s", condition=("backfill", (True,))),
        # unit "sec": plain seconds in SchedulerParameters; "s" would mean a Slurm time string
        # (D-HH:MM:SS) to the live layer's converter
        # The bf_ knobs accept Slurm's whole ranges; a search covers what operators use around
        # Slurm's defaults (slurm.conf(5), 22.05): bf_interval 30 s (a cycle every few seconds
        # to a few minutes); bf_window 1 day, and "at least as long as the highest allowed time
        # limit" (up to a week); bf_max_job_test 500, smaller "in the case of large clusters";
        # bf_resolution 60 s, larger with a larger window.
        Int("bf_interval", "seconds between backfill cycles", low=1, high=10800, default=30,
            unit="sec", condition=("backfill", (True,)), search=(10, 300)),
        Int("bf_window", "how far ahead backfill plans", low=1, high=43200, default=1440,
            unit="min", condition=("backfill", (True,)), search=(1440, 10080)),
        Int("bf_max_job_test", "pending jobs a backfill cycle looks at", low=1, high=1000000,
            default=500, log=True, condition=("backfill", (True,)), search=(100, 5000)),
        Int("bf_resolution", "time resolution of backfill reservations", low=1, high=3600,
            default=60, unit="sec", condition=("backfill", (True,)), search=(30, 600)),
        Bool("bf_continue", "resume a backfill cycle after yielding its locks (no effect here: "
             "a simulated cycle takes no time)", default=False, condition=("backfill", (True,))),
        Int("sched_interval", "seconds between full passes of the main scheduler", low=1,
            high=3600, default=60, unit="sec"),
        Int("default_queue_depth", "jobs the main scheduler tries per pass", low=1, high=100000,
            default=100, log=True),
        Int("batch_sched_delay", "seconds the main scheduler waits after its last pass before "
            "an event (a submission, a job's end) runs it again", low=0, high=3600, default=3,
            unit="sec"),
    ], weights=WEIGHTS, weight_scale=(100.0, 100000.0), archetypes=ARCHETYPES,
        secondary=("bf_interval", "bf_window", "bf_max_job_test", "bf_resolution", "bf_continue"))

    def configure(self) -> None:
        self._configure_priority()
        self._configure_usage()

    def on_reconfigure(self, config: Mapping[str, Any], now: float) -> None:
        """Take a new config mid-run. Usage up to `now` is charged at the old billing weights and
        every waiting job's priority recalculated now (once priorities have been calculated at
        all), between the new priority settings and the new billing weights."""
        self._take_config(config)
        self._configure_priority()
        if self.t0 is not None:
            self._recalc(now)
        self._configure_usage()

    def _configure_priority(self) -> None:
        c = self.config
        self.w_age: float = c["PriorityWeightAge"]
        self.max_age: float = c["PriorityMaxAge"]
        self.w_fs: float = c["PriorityWeightFairshare"]
        self.half_life: float = c["PriorityDecayHalfLife"]
        self.fair_tree = c["PriorityFlags"] == FAIR_TREE
        self.period = 60.0 * float(c["PriorityCalcPeriod"])
        self._quiet_until = -math.inf  # (`_catch_up`: the period or the clocks may have changed)
        self._stuck: int | None = None  # (the placement rule may have changed)
        # `_main_due`'s first tick batch_sched_delay after the last pass (-inf: none), and the
        # last pass it was worked out for (NaN: none; batch_sched_delay may have changed)
        self._delayed = -math.inf
        self._delay_from = math.nan
        self.backfill: bool = c["backfill"]
        self.reserve_after: float = c["reserve_after"]
        self.bf_interval = float(c["bf_interval"])
        self.bf = BackfillParams(60.0 * c["bf_window"], c["bf_max_job_test"], float(c["bf_resolution"]))
        self.sched_interval = float(c["sched_interval"])
        self.batch_delay = float(c["batch_sched_delay"])
        self.depth: int = c["default_queue_depth"]
        self.clocks = self.part.cluster.clocks
        # The parts of a job's priority that do not change while it waits (size and TRES), as
        # shares of its partition's nodes, CPUs and GPUs.
        nodes = self._part_nodes
        gpus_total = nodes * self.part.pool.gpn
        cpus_total = nodes * self.part.cluster.cpus_per_node
        size = (self._nodes / nodes + self._cpus / cpus_total) / 2.0
        if c["PriorityFavorSmall"]:
            size = ((nodes - self._nodes) / nodes + (cpus_total - self._cpus) / cpus_total) / 2.0
        self.static: npt.NDArray[np.float64] = (c["PriorityWeightJobSize"] * np.clip(size, 0.0, 1.0)
                       + c[GPU_TRES] * self._gpus / gpus_total + c[CPU_TRES] * self._asked_cpus / cpus_total)
        self._static_list: list[float] = self.static.tolist()  # (`priority` reads one at a time)

    def _configure_usage(self) -> None:
        c, part = self.config, self.part
        # a Slurm partition's own TRESBillingWeights, where the cluster gives them, else the knobs
        gpu_w = np.where(np.isnan(self._bill_gpu), c[GPU_BILL], self._bill_gpu)
        cpu_w = np.where(np.isnan(self._bill_cpu), c[CPU_BILL], self._bill_cpu)
        self.bill: npt.NDArray[np.float64] = gpu_w * self._gpus + cpu_w * self._cpus
        self._bill_list: list[float] = self.bill.tolist()
        self.held[:] = 0.0
        for j in part.running:
            if j not in self.fresh:
                self.held[self.leaf[j]] += self.bill[j]
        if self.jobs.time_limit is None:
            self.backfill_kind = "reserve_after stand-in (the trace has no time limits)" if self.backfill else "none"
        else:
            self.backfill_kind = "Slurm time-limit backfill" if self.backfill else "none (sched/builtin)"

    def bind(self, part: Partition, jobs: JobInfo) -> None:
        n = len(jobs.gpus)
        gpn = part.pool.gpn
        assocs = part.cluster.associations
        if assocs:
            self.tree = ShareTree.from_associations(assocs)
            self.leaf: npt.NDArray[np.int64] = _leaves_in(self.tree, jobs)
            leaves = self.tree.leaves
        else:
            acct = jobs.account if jobs.account is not None else jobs.vc if jobs.vc is not None else [0] * n
            user = jobs.user if jobs.user is not None else [-1] * n
            # Associations (leaves of the tree): (account, user) pairs, numbered in sorted order.
            pairs = sorted(set(zip(acct, user)))
            index = {p: i for i, p in enumerate(pairs)}
            self.leaf = np.fromiter((index[p] for p in zip(acct, user)), dtype=np.int64, count=n)
            self.tree = ShareTree.from_pairs(pairs)
            leaves = max(1, len(pairs))
        # Slurm partitions: per job, the bitmask of its partition's nodes and of the others, its
        # PriorityTier, and its partition's node count (one partition: all nodes, tier 0).
        self._mask: list[int] | None = None
        self._excl: list[int] | None = None
        self._tier: npt.NDArray[np.float64] = np.zeros(n)
        self._part_nodes: npt.NDArray[np.float64] = np.full(n, float(max(1, len(part.pool.free))))
        # per job, its partition's billing weight per GPU and per CPU (NaN: the policy's knobs)
        self._bill_gpu: npt.NDArray[np.float64] = np.full(n, np.nan)
        self._bill_cpu: npt.NDArray[np.float64] = np.full(n, np.nan)
        if part.cluster.slurm_partitions:
            parts = part.cluster.slurm_partitions
            pidx = _partitions_of(parts, jobs)
            masks = [sum(1 << k for k in p.nodes) for p in parts]
            everything = (1 << len(part.pool.free)) - 1
            self._mask = [masks[p] for p in pidx]
            self._excl = [everything & ~m for m in self._mask]
            self._tier = np.asarray([float(parts[p].priority_tier) for p in pidx])
            self._part_nodes = np.asarray([float(len(parts[p].nodes)) for p in pidx])
            billed = [bool(parts[p].billing_weights) for p in pidx]
            self._bill_gpu = np.asarray([parts[p].billing_weight("GRES/gpu") if b else np.nan
                                         for p, b in zip(pidx, billed)], dtype=float)
            self._bill_cpu = np.asarray([parts[p].billing_weight("CPU") if b else np.nan
                                         for p, b in zip(pidx, billed)], dtype=float)
        # Age counts from the first submission (a job re-submitted with its age keeps it).
        self._submit: npt.NDArray[np.float64] = np.asarray(jobs.first_submit, dtype=float)
        self._submit_list: list[float] = self._submit.tolist()
        self._tier_list: list[float] = self._tier.tolist()
        self._leaf_list: list[int] = self.leaf.tolist()
        self._gpus: npt.NDArray[np.float64] = np.asarray(jobs.gpus, dtype=float)
        self._gpus_16 = not n or float(self._gpus.max()) < 2 ** 15
        self._planner = None if jobs.time_limit is None else LazyBackfill(
            np.asarray(jobs.gpus, dtype=np.int64), np.asarray(jobs.time_limit, dtype=float))
        self._nodes: npt.NDArray[np.float64] = np.ceil(self._gpus / gpn)
        known = None if jobs.cpus is None else np.asarray(jobs.cpus, dtype=float)
        self._cpus: npt.NDArray[np.float64] = part.cluster.job_cpus(self._gpus, known)
        # Slurm's TRES factor weighs what a waiting job asked for (ClusterSpec.asked_cpus), its
        # job-size factor and its billing what it is given
        self._asked_cpus: npt.NDArray[np.float64] = part.cluster.asked_cpus(self._gpus, known)
        self.fairshare: npt.NDArray[np.float64] = np.ones(leaves)  # per association, as of the last recalculation
        self.used: npt.NDArray[np.float64] = np.zeros(leaves)  # per association: decayed billing-seconds as of t0
        self.known: npt.NDArray[np.bool_] = np.zeros(leaves, dtype=bool)  # associations that have submitted here
        self.t0: float | None = None  # time of the last recalculation
        # Usage not yet charged: billing per association of jobs running since before t0; jobs
        # started after t0 (job -> start); runs that ended (association, billing, from, to).
        self.held: npt.NDArray[np.float64] = np.zeros(leaves)
        self.fresh: dict[int, float] = {}
        self.spans: list[tuple[int, float, float, float]] = []
        # The waiting jobs in order, best first (priority descending, then submission): with
        # time limits (Slurm's schedulers), one list of the jobs' keys (`queue`: (negated
        # priority << shift) + job number, Python ints, so any priority fits); without, a list
        # per GPU count (`by_size`), as the stand-in looks at the best job of each size. The
        # priorities as last computed, negated so that ascending order is best first.
        self.queue: list[int] = []
        # The same keys as an array, as last sorted (by a cycle or a recalculation) while no job
        # has arrived since (None: one has), and whether a job has left it since (a cycle then
        # drops it instead of sorting again).
        self._sorted: npt.NDArray[np.int64] | None = None
        self._gone = False
        self.by_size: dict[int, list[int]] = {}
        self._sizes: dict[int, int] = {}  # GPU count -> waiting jobs of that size
        self._smallest = 0  # the smallest GPU count waiting (while any job waits)
        self.neg: npt.NDArray[np.float64] = np.zeros(n)
        # The same order as one int64 key per job, (negated priority << shift) + job number,
        # which a backfill cycle sorts in a third less time than lexsort takes the two keys
        # (priorities are whole numbers: floor() plus TIER x tier); `_by_key` turns false for
        # the run if a priority ever gets too large for the key to hold it exactly.
        self._shift = max(1, n.bit_length())
        self._key_hi: npt.NDArray[np.int64] = np.zeros(n, dtype=np.int64)
        self._key_max = float(2 ** (62 - self._shift))
        self._by_key = True
        self.waiting = WaitingJobs(n)
        self._dirty = True  # something changed since the last backfill cycle (Slurm's _more_work)
        # An event asked for the main scheduler (Slurm's job_sched_cnt) since its last pass, and
        # when that pass ran (Slurm's last_sched_time).
        self._queued = False
        self._last_sched = -math.inf
        self._full_due = math.inf
        # With one Slurm partition, the key of the job the last main pass stopped at (it did
        # not fit) while no GPU has been freed since and no recalculation made (None: not so):
        # while it is still the top job, a pass would stop there again (fewer free GPUs hold no
        # job that more did not: the placement rules look only at free GPUs), so it is skipped.
        self._stuck = None
        self.reservations: list[tuple[int, float]] = []  # (job, planned start) of the last cycle
        super().bind(part, jobs)

    # ---------------------------------------------------------------------------- priority

    def priority(self, j: int, at: float) -> float:
        """Priority of waiting job j as computed at time `at` (a recalculation or its arrival),
        plus TIER x its partition's PriorityTier: Slurm orders jobs by tier, then priority."""
        # (from lists, not numpy scalars: the same float operations, a few times faster)
        age: float = min((at - self._submit_list[j]) / self.max_age, 1.0)
        return math.floor(self.w_age * age + self.w_fs * float(self.fairshare[self._leaf_list[j]])
                          + self._static_list[j]) + TIER * self._tier_list[j]

    def priorities(self, js: npt.NDArray[np.int64], at: float) -> npt.NDArray[np.float64]:
        """`priority` of many waiting jobs at once."""
        age = np.minimum((at - self._submit[js]) / self.max_age, 1.0)
        return (np.floor(self.w_age * age + self.w_fs * self.fairshare[self.leaf[js]] + self.static[js])
                + TIER * self._tier[js])

    def _catch_up(self, now: float) -> None:
        if now < self._quiet_until:
            return
        anchor, period = self.clocks.decay, self.period
        last = SlurmClocks.last(anchor, period, now)
        if self.t0 is None:
            self.t0 = last
        elif last > self.t0:
            self._recalc(last)
        # Until the next grid time less a margin no rounding reaches, `last` stays at or before
        # t0 (this runs at every event; the test costs less than the clock arithmetic): here
        # t0 >= SlurmClocks.last(t0) = anchor + k periods (t0 is `last` of a time at or after
        # it, or at or before `last` of now >= t0), and for x below k + 1 - 1e-5,
        # floor(x + 1e-6) <= k.
        k = math.floor((self.t0 - anchor) / period + 1e-6)
        self._quiet_until = anchor + (k + 1 - 1e-5) * period
        # So until then `_next_recalc` is anchor + (k + 1) periods (floor(x + 1e-6) is k from t0
        # to then), and the main scheduler's first periodic pass after it, which `schedule` asks
        # for at most events, is worked out once.
        self._full_next = SlurmClocks.next(self.clocks.tick, self.clocks.tick_period, SlurmClocks.next(
            0.0, self.sched_interval, anchor + k * period + period))

    def _next_recalc(self, now: float) -> float:
        return SlurmClocks.last(self.clocks.decay, self.period, now) + self.period

    def _recalc(self, t: float) -> None:
        """Charge usage up to t, recompute fair shares and every waiting job's priority."""
        self._charge(t)
        self._dirty = True
        self._stuck = None
        if self.fair_tree:
            self.fairshare[:] = self.tree.fair_tree(self.used, self.known)
        else:
            self.fairshare[:] = self.tree.classic(self.used, self.known)
        if not self.waiting:
            return
        js = self.waiting.array()
        neg = self.neg[js] = -self.priorities(js, t)
        self._by_key = self._by_key and float(np.abs(neg).max()) < self._key_max
        if self._by_key:
            hi = self._key_hi[js] = neg.astype(np.int64) << self._shift
            keys = hi + js
            keys.sort()  # (best first)
            if self.jobs.time_limit is not None:
                self.queue = keys.tolist()
                self._sorted, self._gone = keys, False
                return
            best = keys & ((1 << self._shift) - 1)  # then stably by size (int16: a radix sort)
            g = self._gpus[best].astype(np.int16 if self._gpus_16 else np.int64)
            order = np.argsort(g, kind="stable")
            g, jobs = g[order], best[order].tolist()
        else:
            if self.jobs.time_limit is not None:
                self._sorted = None
                best = js[np.lexsort((js, neg))].tolist()
                self.queue = [(int(self.neg[j]) << self._shift) + j for j in best]
                return
            g = self._gpus[js].astype(np.int64)
            order = np.lexsort((js, neg, g))  # by size, then best first
            g, jobs = g[order], js[order].tolist()
        # (at every recalculation with jobs waiting: a comparison of neighbours costs a third of
        # np.diff on a short queue, and one size needs no cut)
        if g[0] == g[-1]:
            self.by_size = {int(g[0]): jobs}
            return
        cuts = [0, *((g[1:] != g[:-1]).nonzero()[0] + 1).tolist(), len(g)]
        self.by_size = {int(g[a]): jobs[a:b] for a, b in zip(cuts, cuts[1:])}

    def _charge(self, t: float) -> None:
        """Bring usage from t0 to t: decay it, and add the billing-seconds run in (t0, t], each
        decayed continuously to t (so the result does not depend on how often this runs)."""
        t0, h = self.t0, self.half_life
        assert t0 is not None  # only called once t0 is set (for mypy; not in a loop)
        decay = 2.0 ** (-(t - t0) / h)
        scale = h / math.log(2.0)
        self.t0 = t
        # (on lists, as a few associations are: the same float operations as on arrays)
        ran = scale * (1.0 - decay)  # jobs running through (t0, t]
        held = self.held.tolist()
        used = [u * decay + w * ran for u, w in zip(self.used.tolist(), held)]
        if not self.fresh and not self.spans:
            self.used[:] = used
            return
        leaf, bill = self._leaf_list, self._bill_list
        for j, b in list(self.fresh.items()):
            if b < t:  # started in (t0, t): charged from its start, then held like the others
                used[leaf[j]] += bill[j] * scale * (1.0 - 2.0 ** (-(t - b) / h))
                held[leaf[j]] += bill[j]
                del self.fresh[j]
        spans = []
        for a, w, b, e in self.spans:
            if b < t:
                used[a] += w * scale * (2.0 ** (-(t - min(e, t)) / h) - 2.0 ** (-(t - b) / h))
            if e > t:
                spans.append((a, w, max(b, t), e))
        self.spans = spans
        self.used[:] = used
        self.held[:] = held

    # ------------------------------------------------------------------------------ events

    def on_arrival(self, j: int, now: float) -> None:
        if now >= self._quiet_until:
            self._catch_up(now)
        self.known[self._leaf_list[j]] = True
        self._dirty = self._queued = True
        g = self.jobs.gpus[j]
        neg_j = self.neg[j] = -self.priority(j, now)
        if self._by_key:
            if abs(neg_j) < self._key_max:
                self._key_hi[j] = int(neg_j) << self._shift
            else:
                self._by_key = False
        self.waiting.add(j)
        n_g = self._sizes.get(g, 0)
        self._sizes[g] = n_g + 1
        if not n_g and (len(self._sizes) == 1 or g < self._smallest):
            self._smallest = g
        if self.jobs.time_limit is not None:
            self._sorted = None
            key = (int(neg_j) << self._shift) + j
            queue = self.queue
            if not queue or key > queue[-1]:
                queue.append(key)  # (often: a new job has waited least)
            else:
                insort(queue, key)
            return
        same = self.by_size.get(g)
        if same is None:
            self.by_size[g] = [j]
        elif (neg_j, j) > (self.neg[same[-1]], same[-1]):
            same.append(j)  # (most often: a new job has waited least)
        else:
            neg = self.neg
            insort(same, j, key=lambda k: (neg[k], k))

    def on_finish(self, j: int, now: float) -> None:
        self._dirty = self._queued = True
        self._stuck = None
        a, w = self._leaf_list[j], self._bill_list[j]
        b = self.fresh.pop(j, None)
        if b is None:  # it was held since t0
            self.held[a] -= w
            b = self.t0
            assert b is not None  # a job that ran before t0 implies t0 is set (for mypy)
        if b < now:
            self.spans.append((a, w, b, now))
        if self._planner is not None:
            self._planner.ended(j)

    def _start(self, j: int, now: float, exclude: int = 0) -> bool:
        if self._excl is not None:
            exclude |= self._excl[j]
        if self.part.start(j, exclude):
            self.fresh[j] = now
            self._dirty = True
            if self._planner is not None:
                self._planner.started(j, self.part)
            return True
        return False

    def schedule(self, now: float) -> None:
        if not self.waiting:
            # Nothing waits; usage is charged lazily (continuous decay allows it). Slurm's main
            # scheduler still runs for a queued event (its pass then starts nothing), and its
            # time is the one batch_sched_delay counts from.
            if self.jobs.time_limit is not None:
                main = self._main_due(now)
                if not self._consume_main(now, main) and main is not None:
                    self.part.wake_at(main)
            return
        if now >= self._quiet_until:
            self._catch_up(now)  # (may rebuild the queue)
        part = self.part
        if self.jobs.time_limit is None:
            best = self.neg.__getitem__  # a job's key: its negated priority

            def start(j: int) -> bool:
                return self._start(j, now)

            submit, backfill, reserve_after = self._submit, self.backfill, self.reserve_after
            priority_pass(part, self.by_size, best, start, self._pop,
                          lambda top: backfill and now - submit[top] < reserve_after)
            if self.waiting and 0 < part.free and self._smallest <= part.free:
                # the order may change at the next recalculation and let a job that fits start
                part.wake_at(self._next_recalc(now))
            return
        # Slurm: the main scheduler in strict priority order, from slurmctld's background loop
        # (once a second): after an event, at the first tick at least batch_sched_delay whole
        # seconds after its last pass; and a full pass (no depth limit) every sched_interval,
        # which matters only after a recalculation reorders the queue.
        wakes = []
        main = self._main_due(now)
        if self._consume_main(now, main):
            self._main_pass(now, self.depth)
            main = None  # (the request is taken: `_main_due` is None until an event queues one)
        elif now >= self._full_due - 1e-6 and self._full_due > self._last_sched:
            self._last_sched = now
            self._main_pass(now, None)
            main = self._main_due(now)
        if main is not None and self.waiting:
            wakes.append(main)
        bf_due = None
        if self.backfill and self.waiting:
            iv = self.bf_interval
            due = SlurmClocks.next(self.clocks.backfill, iv, now)
            if abs(due - now) < 1e-6 and self._dirty:
                self._backfill(now, self.jobs.time_limit)
                due += iv
            if self._dirty and self.waiting:
                bf_due = due
        self._full_due = math.inf
        free = part.free
        if self.waiting and 0 < free and self._smallest <= free:
            # after the next recalculation, the main scheduler's periodic pass may start one
            self._full_due = self._full_next
            wakes.append(self._full_due)
        if bf_due is not None and bf_due < self._quiet_until and self._nothing_fits():
            # No waiting job fits on the free GPUs, so the cycle at bf_due would start nothing,
            # and the call then would ask for the wake-ups this one asks for (or none) and make
            # no recalculation; until an event sets _dirty again, no later cycle would start a
            # job either. So it is not woken for: the wake-up the call then would ask for is
            # asked for now (with none, the pending request is dropped, as that call's would
            # have been consumed). With a recalculation due by bf_due it is woken for, as the
            # decayed usage (a float sum) depends on the times it is brought up to.
            self._dirty = False
            self.reservations = []
            if not wakes:
                part.cancel_wake()
        elif bf_due is not None:
            wakes.append(bf_due)
        if wakes:
            part.wake_at(min(wakes))

    def _main_pass(self, now: float, depth: int | None) -> None:
        """Slurm's main scheduler: jobs in order (tier, priority), at most `depth` tried. With
        one partition it stops at the first job that does not fit. With several, as 22.05's
        _schedule: a job that does not fit takes its partition's nodes out of the pass (no later
        job may use them) and the jobs of that partition are skipped; the others go on."""
        queue, low = self.queue, (1 << self._shift) - 1
        if self._mask is None:  # (`priority_pass` with no job let past)
            part, tries, gpus = self.part, 0, self.jobs.gpus
            # (whether the top job fits is asked of the planner's free GPUs per node first: a
            # pass that stops there, most of them, then tries no placement)
            fits = self._planner.may_start if self._planner is not None else None
            while queue and queue[0] != self._stuck and part.free > 0:
                top = queue[0]
                tries += 1
                j = top & low
                if fits is not None and not fits(part, gpus[j]) or not self._start(j, now):
                    self._stuck = top
                    return
                self._take(j)
                if depth is not None and tries >= depth:
                    return
            return
        mask = self._mask
        blocked = tries = 0
        everything = (1 << len(self.part.pool.free)) - 1
        # A pass that stops early (depth, or every node taken out) looks at few jobs. The queue
        # is iterated, so started jobs leave it after the pass.
        started = []
        for key in queue:
            if depth is not None and tries >= depth or blocked == everything:
                break
            j = key & low
            if not mask[j] & ~blocked:  # its partition failed (or all its nodes are taken out)
                continue
            tries += 1
            if self._start(j, now, blocked):
                started.append(j)
            else:
                blocked |= mask[j]
        for j in started:
            self._take(j)

    def _take(self, j: int) -> None:
        """Remove started job j from the queue (with time limits)."""
        queue = self.queue
        key = (int(self.neg[j]) << self._shift) + j
        if queue[0] == key:
            del queue[0]
        else:
            del queue[bisect_left(queue, key)]
        self._gone = True
        self._left(j, self.jobs.gpus[j])

    def _left(self, j: int, g: int) -> None:
        """Job j of g GPUs, taken out of the order, no longer waits."""
        self.waiting.remove(j)
        n_g = self._sizes[g] - 1
        if n_g:
            self._sizes[g] = n_g
        else:
            del self._sizes[g]
            if g == self._smallest and self._sizes:
                self._smallest = min(self._sizes)

    def _consume_main(self, now: float, main: float | None) -> bool:
        """Whether the main scheduler runs at `now` for a queued event (`main`: `_main_due(now)`);
        if so the request is taken and `now` becomes its last pass (Slurm clears job_sched_cnt
        and sets last_sched_time), whether or not anything waits."""
        if main is None or now < main - 1e-6:
            return False
        self._queued = False
        self._last_sched = now
        return True

    def _main_due(self, now: float) -> float | None:
        """When the main scheduler runs for the pending request, if any, asked at `now`: the
        first tick at least batch_sched_delay whole seconds (Slurm compares time_t) after its
        last pass."""
        if not self._queued:
            return None
        tick, period = self.clocks.tick, self.clocks.tick_period
        if self._last_sched != self._delay_from:
            # (the same until the next pass: asked for at every decision in between)
            self._delay_from = last = self._last_sched
            self._delayed = (SlurmClocks.next(tick, period, math.floor(last) + self.batch_delay)
                             if self.batch_delay > 0 and last > -math.inf else -math.inf)
        return max(SlurmClocks.next(tick, period, now), self._delayed)

    def _backfill(self, now: float, limit: Sequence[float]) -> None:
        """One cycle of Slurm's backfill scheduler at `now`."""
        self._dirty = False
        if self._nothing_fits():
            self.reservations = []
            return
        order = self._cycle_order()

        def start(j: int, exclude: int) -> bool:
            if not self._start(j, now, exclude):
                return False
            self._take(j)
            return True

        denied = None if self._excl is None else self._excl.__getitem__
        if self.reference_planner:
            self.reservations = slurm_backfill(self.part, order.tolist(), self.jobs.gpus, limit,
                                               now, self.bf, start, denied)
        else:
            assert self._planner is not None  # (a trace with time limits: for mypy)
            self.reservations = self._planner.cycle(self.part, order, now, self.bf, start, denied)

    def _cycle_order(self) -> npt.NDArray[np.int64]:
        """The first bf_max_job_test waiting jobs by (priority, submission), for a cycle: one sort
        of their int64 keys, or the last sort's with the jobs that left since dropped if none
        has arrived since (a lexsort of the two, should a priority outgrow the key). Per cycle on
        real queues (benchmarks/slurm_backfill.py --order) the lexsort costs a fifth of a sort
        with a Python key on queues of ~1,000 jobs and less on short ones; copying the kept
        queue's Python ints into numpy costs about as much as the sort."""
        js = self.waiting.array()
        if not self._by_key:
            return js[np.lexsort((js, self.neg[js]))][:self.bf.max_job_test]
        low = (1 << self._shift) - 1
        keys = self._sorted
        if keys is None:
            keys = self._key_hi[js] + js
            keys.sort()  # (the keys are unique: any sort gives the order)
        elif self._gone:
            keys = keys[self.waiting.waits[keys & low]]
        self._sorted, self._gone = keys, False
        return keys[:self.bf.max_job_test] & low

    def _nothing_fits(self) -> bool:
        """Whether no waiting job fits on the free GPUs, so that a backfill cycle now cannot
        start one (a planner would only make reservations, which the next cycle makes afresh);
        the lazy planner's shortcut (the reference planner runs every cycle)."""
        planner = self._planner
        assert planner is not None  # (a trace with time limits: for mypy)
        return not self.reference_planner and not planner.may_start(self.part, self._smallest)

    def _pop(self, g: int) -> None:
        """Remove the first waiting job of g GPUs, started (without time limits)."""
        same = self.by_size[g]
        j = same.pop(0)
        if not same:
            del self.by_size[g]
        self._left(j, g)


def _leaves_in(tree: ShareTree, jobs: JobInfo) -> npt.NDArray[np.int64]:
    """Each job's leaf in a configured association tree, by its account (else VC) and user."""
    col = "account" if jobs.account is not None else "vc"
    acct = jobs.account if jobs.account is not None else jobs.vc
    if acct is None or jobs.user is None:
        raise SimulationError("a configured association tree needs the trace's users and accounts "
                              "(columns 'user' and 'account' or 'vc')")
    acct_names, user_names = jobs.labels[col], jobs.labels["user"]
    out = np.empty(len(acct), dtype=np.int64)
    for i, (a, u) in enumerate(zip(acct, jobs.user)):
        key = (acct_names[a], user_names[u])
        k = tree.node_of.get(key)
        if k is None:
            raise SimulationError(f"job in row {i} of the trace: association {key[0]}/{key[1]} is not in "
                                  "the cluster's association tree (Slurm would reject the job)")
        out[i] = tree.leaf[k]
    return out


def _partitions_of(parts: tuple[SlurmPartition, ...], jobs: JobInfo) -> list[int]:
    """Each job's Slurm partition (index into `parts`) by the trace's ``partition`` label; a job
    without one goes to the first partition (as Slurm's Default=YES partition)."""
    index = {p.name: i for i, p in enumerate(parts)}
    if jobs.partition is None:
        return [0] * len(jobs.gpus)
    names = jobs.labels["partition"]
    out = []
    for i, code in enumerate(jobs.partition):
        name = names[code]
        k = index.get(name, 0 if not name else None)
        if k is None:
            raise SimulationError(f"job in row {i} of the trace: partition {name!r} is not one of the "
                                  f"cluster's Slurm partitions ({', '.join(index)})")
        out.append(k)
    return out


class WaitingJobs(dict[int, int]):
    """The waiting jobs of a run (job numbers below n): a set whose members are also the first
    entries of an array, in no particular order, so that each backfill cycle and priority
    recalculation takes them as they are instead of copying a Python collection into numpy
    (their order is then sorted out by priority and job number, which are unique). As a dict,
    each job to its index in the array: the scheduler asks whether any job waits at every
    event, and a dict answers that (and `len`, and `in`) without a Python call."""

    def __init__(self, n: int):
        super().__init__()
        self._array = np.empty(n, dtype=np.int64)
        self.waits = np.zeros(n, dtype=bool)  # per job: whether it waits

    def add(self, j: int) -> None:
        if j in self:
            return
        k = len(self)
        self._array[k] = j
        self[j] = k
        self.waits[j] = True

    def remove(self, j: int) -> None:
        """Take job j out: the last entry moves to its place."""
        k = self.pop(j)
        self.waits[j] = False
        last = len(self)
        if k != last:
            moved = int(self._array[last])
            self._array[k] = moved
            self[moved] = k

    def array(self) -> npt.NDArray[np.int64]:
        """The waiting jobs (a view, valid until the next add or remove)."""
        return self._array[:len(self)]
