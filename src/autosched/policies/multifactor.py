"""Slurm's multifactor job priority (classic fair share) with optional backfill."""

from __future__ import annotations

import math
from bisect import insort

import numpy as np

from ..space import Bool, ConfigSpace, Float, Int
from .base import PLACEMENT, Policy

DAY = 86400.0


class Multifactor(Policy):
    """Jobs wait in order of Slurm multifactor priority (highest first; ties: submission order)::

        priority = PriorityWeightAge       * min(age / PriorityMaxAge, 1)
                 + PriorityWeightFairshare * 2 ** (-usage_share / shares)
                 + PriorityWeightJobSize   * size

    *age* is the time since submission; *usage_share* is the account's GPU-seconds, each decayed
    continuously with half-life ``PriorityDecayHalfLife``, over all accounts' (Slurm's classic
    fair share, ``PriorityFlags=NO_FAIR_TREE``); every account has equal *shares* (1 / accounts
    seen so far); an account is the job's user, else its VC. *size* is GPUs / partition GPUs,
    or 1 minus that with ``PriorityFavorSmall``. As in Slurm, priorities of waiting jobs are
    recomputed every ``PriorityCalcPeriod`` (at its multiples) and stay fixed in between; a job
    arriving in between gets age 0 and the fair share of the last recalculation.

    Scheduling is ``fifo``'s in priority order: without ``backfill`` (Slurm's ``sched/builtin``)
    nothing passes a top job that does not fit; with it, later jobs that fit start while the
    top job has waited less than ``reserve_after``. Slurm's ``sched/backfill`` instead reserves
    using job time limits, which a trace does not have; this is its non-clairvoyant stand-in.
    Usage and accounts are tracked per partition (each VC is scheduled on its own).
    """

    name = "multifactor"
    summary = "Slurm multifactor priority (age, fair share, job size) with optional backfill"
    space = ConfigSpace([
        PLACEMENT,
        Int("PriorityWeightAge", "weight of the age factor", low=0, high=100000, default=1000),
        Float("PriorityMaxAge", "queue wait at which the age factor reaches 1", low=600.0,
              high=60 * DAY, default=7 * DAY, log=True, unit="s"),
        Int("PriorityWeightFairshare", "weight of the fair-share factor", low=0, high=100000,
            default=10000),
        Float("PriorityDecayHalfLife", "half-life of past usage in the fair-share factor",
              low=600.0, high=90 * DAY, default=7 * DAY, log=True, unit="s"),
        Int("PriorityWeightJobSize", "weight of the job-size factor", low=0, high=100000,
            default=1000),
        Bool("PriorityFavorSmall", "small jobs get the larger job-size factor (else large jobs)",
             default=False),
        Int("PriorityCalcPeriod", "minutes between priority recalculations (as in slurm.conf)",
            low=1, high=60, default=5, unit="min"),
        Bool("backfill", "let lower-priority jobs start while the top job does not fit "
             "(sched/backfill; off = sched/builtin)", default=True),
        Float("reserve_after", "once the top job has waited this long, nothing may pass it "
              "(0 = never backfill)", low=0.0, high=7 * DAY, default=6 * 3600.0, unit="s",
              condition=("backfill", (True,))),
    ])

    def configure(self) -> None:
        c = self.config
        self.w_age = c["PriorityWeightAge"]
        self.max_age = c["PriorityMaxAge"]
        self.w_fs = c["PriorityWeightFairshare"]
        self.half_life = c["PriorityDecayHalfLife"]
        self.w_size = c["PriorityWeightJobSize"]
        self.favor_small = c["PriorityFavorSmall"]
        self.period = 60.0 * c["PriorityCalcPeriod"]
        self.backfill = c["backfill"]
        self.reserve_after = c["reserve_after"]
        if getattr(self, "t0", None) is not None:  # reconfigured mid-run: recalculate now
            self._recalc(self.part.sim.now)

    def bind(self, part, jobs) -> None:
        codes = jobs.user if jobs.user is not None else jobs.vc
        self.account = codes if codes is not None else [0] * len(jobs.gpus)
        # Arrays for recomputing all waiting jobs' priorities at once.
        self._submit = np.asarray(jobs.submit, dtype=float)
        self._gpus = np.asarray(jobs.gpus, dtype=np.int64)
        self._account = np.asarray(self.account, dtype=np.int64)
        accounts = int(self._account.max()) + 1 if len(self._account) else 1
        self.fairshare = np.ones(accounts)  # per account, as of the last recalculation
        self.used = np.zeros(accounts)  # per account: decayed GPU-s as of t0
        self.known = np.zeros(accounts, dtype=bool)  # accounts that have submitted here
        self.t0: float | None = None  # time of the last recalculation
        # Usage not yet charged: GPUs per account of jobs running since before t0; jobs started
        # after t0 (job -> start); runs that ended (account, GPUs, from, to) after t0.
        self.held = np.zeros(accounts)
        self.fresh: dict[int, float] = {}
        self.spans: list[tuple[int, int, float, float]] = []
        # Waiting jobs by GPU count, best first (priority descending, then submission); their
        # priorities as last computed, negated so that ascending order is best first.
        self.by_size: dict[int, list[int]] = {}
        self.neg = np.zeros(len(jobs.gpus))
        self.waiting: dict[int, None] = {}
        super().bind(part, jobs)

    # ---------------------------------------------------------------------------- priority

    def priority(self, j: int, at: float) -> float:
        """Priority of waiting job j as computed at time `at` (a recalculation or its arrival)."""
        g = self.jobs.gpus[j]
        size = g / self.part.capacity
        if self.favor_small:
            size = 1.0 - size
        age = min((at - self.jobs.submit[j]) / self.max_age, 1.0)
        return self.w_age * age + self.w_fs * float(self.fairshare[self.account[j]]) + self.w_size * size

    def priorities(self, js: np.ndarray, at: float) -> np.ndarray:
        """`priority` of many waiting jobs at once."""
        size = self._gpus[js] / self.part.capacity
        if self.favor_small:
            size = 1.0 - size
        age = np.minimum((at - self._submit[js]) / self.max_age, 1.0)
        return self.w_age * age + self.w_fs * self.fairshare[self._account[js]] + self.w_size * size

    def _catch_up(self, now: float) -> None:
        if self.t0 is None:
            self.t0 = math.floor(now / self.period) * self.period
        elif now >= (math.floor(self.t0 / self.period) + 1) * self.period:
            self._recalc(math.floor(now / self.period) * self.period)

    def _recalc(self, t: float) -> None:
        """Charge usage up to t, recompute fair shares and every waiting job's priority."""
        self._charge(t)
        total = self.used.sum()
        self.fairshare[:] = 1.0
        if total > 0:  # equal shares: each known account's share is 1 / (accounts known)
            self.fairshare[:] = np.exp2(-self.known.sum() * self.used / total)
        if not self.waiting:
            return
        js = np.fromiter(self.waiting, dtype=np.int64, count=len(self.waiting))
        neg = self.neg[js] = -self.priorities(js, t)
        g = self._gpus[js]
        order = np.lexsort((js, neg, g))  # by size, then best first
        g, jobs = g[order], js[order].tolist()
        cuts = [0, *(np.flatnonzero(np.diff(g)) + 1).tolist(), len(g)]
        self.by_size = {int(g[a]): jobs[a:b] for a, b in zip(cuts, cuts[1:])}

    def _charge(self, t: float) -> None:
        """Bring usage from t0 to t: decay it, and add the GPU-seconds run in (t0, t], each
        decayed continuously to t (so the result does not depend on how often this runs)."""
        t0, h = self.t0, self.half_life
        decay = 2.0 ** (-(t - t0) / h)
        scale = h / math.log(2.0)
        self.used *= decay
        self.used += self.held * (scale * (1.0 - decay))  # jobs running through (t0, t]
        account, gpus = self.account, self.jobs.gpus
        for j, b in list(self.fresh.items()):
            if b < t:  # started in (t0, t): charged from its start, then held like the others
                self.used[account[j]] += gpus[j] * scale * (1.0 - 2.0 ** (-(t - b) / h))
                self.held[account[j]] += gpus[j]
                del self.fresh[j]
        spans = []
        for a, g, b, e in self.spans:
            if b < t:
                self.used[a] += g * scale * (2.0 ** (-(t - min(e, t)) / h) - 2.0 ** (-(t - b) / h))
            if e > t:
                spans.append((a, g, max(b, t), e))
        self.spans = spans
        self.t0 = t

    # ------------------------------------------------------------------------------ events

    def on_arrival(self, j: int, now: float) -> None:
        self._catch_up(now)
        self.known[self.account[j]] = True
        g = self.jobs.gpus[j]
        self.neg[j] = -self.priority(j, now)
        self.waiting[j] = None
        same = self.by_size.get(g)
        if same is None:
            self.by_size[g] = [j]
        else:
            neg = self.neg
            insort(same, j, key=lambda k: (neg[k], k))

    def on_finish(self, j: int, now: float) -> None:
        a, g = self.account[j], self.jobs.gpus[j]
        b = self.fresh.pop(j, None)
        if b is None:  # it was held since t0
            self.held[a] -= g
            b = self.t0
        if b < now:
            self.spans.append((a, g, b, now))

    def _start(self, j: int, now: float) -> bool:
        if self.part.start(j):
            self.fresh[j] = now
            return True
        return False

    def schedule(self, now: float) -> None:
        if not self.by_size:
            return  # nothing waits; usage is charged lazily (continuous decay allows it)
        self._catch_up(now)  # (may rebuild self.by_size)
        part, by_size = self.part, self.by_size
        while by_size and part.free > 0:
            neg = self.neg
            heads = sorted((neg[same[0]], same[0], g) for g, same in by_size.items())
            _, top, g = heads[0]
            if self._start(top, now):
                self._pop(g)
                continue
            if not self.backfill or now - self.jobs.submit[top] >= self.reserve_after:
                break
            for _, j, g in heads[1:]:
                if g <= part.free and self._start(j, now):
                    self._pop(g)
                    break
            else:
                break
        if by_size and 0 < part.free and min(by_size) <= part.free:
            # the order may change at the next recalculation and let a job that fits start
            part.wake_at((math.floor(now / self.period) + 1) * self.period)

    def _pop(self, g: int) -> None:
        same = self.by_size[g]
        del self.waiting[same[0]]
        del same[0]
        if not same:
            del self.by_size[g]
