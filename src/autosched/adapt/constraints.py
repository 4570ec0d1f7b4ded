"""The operator's policy as constraints on a decision: average JCT is not all an operator wants.

A candidate config is compared with the running one on the same samples (`scoring.ScoreSet`),
and refused when:

- an account's average wait grows by more than ``account_tolerance`` of what it waits under the
  running config, that tolerance scaled up by how far the account's usage is above its share
  (an account that takes more than its share may wait more: that is fair share's point), plus
  ``wait_slack`` s (waits of a few minutes are noise, not policy);
- a GPU-size class's (1, 2-4, 5-8, >8 GPUs) 95th-percentile wait grows by more than
  ``size_tolerance`` of the running one's, plus ``wait_slack``;
- the jobs already queued at the round wait longer, in all, by more than ``queue_tolerance`` of
  what they wait under the running config, plus ``wait_slack`` each: a change must not make the
  people already waiting pay for it (a switch to small first at a boundary, with ten multi-node
  jobs queued, left them a third longer in the queue on ITP cluster02 and made their week 8%
  worse than the default's, though it then halved the next week's average JCT). The added wait
  is judged as the guardrail judges a gain: its mean over the samples plus ``queue_k`` standard
  errors. The queued jobs pay in the futures where a burst of other jobs comes, and the mean
  alone hides them (on its 16 samples that switch cut their total wait by 8-20% on 13 and
  stretched it by 34%, 43% and 4.6 times on three: 12% longer on the mean; the real week
  brought the burst);
- a pinned knob moves (``pins``: the operator's; the search never moves them either);
- where fair share is configured (``fairshare_floor`` set), ``PriorityWeightFairshare`` falls
  below that fraction of the largest priority weight (or below the running config's own
  fraction, when that is lower already): fair share stays a real factor of the order.

An account or class counts when it has ``min_jobs`` judged jobs a sample on average; fewer make
its waits noise. `PolicyConstraints.check` is pure: the effects per account and per size class
(running against candidate, with the allowed growth) and the violations, for the evidence.

`PolicySearch` puts the same check inside a round's search (a `tune.TrialCheck`): each trial's
simulations on the tuning samples are reduced to `Score`s where they run, and checked against the
running config's on those samples; the search's sampler reads ``Check.excess`` as a constraint.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..cluster import ClusterSpec
from ..sim import JobRecords
from ..space import Config
from ..trace.table import Trace
from .errors import AdaptError
from .guardrail import mean_se
from .scoring import Score, ScoreSet, score_records

# Defaults (docs/adaptive.md, "The operator's policy"): an account may wait a quarter longer
# (more when it runs above its share), a size class's p95 wait may double, the queue at the round
# a quarter longer in all (its mean added wait plus one standard error), and ten minutes of wait
# (a job) are never a violation.
ACCOUNT_TOLERANCE = 0.25
SIZE_TOLERANCE = 1.0
QUEUE_TOLERANCE = 0.25
QUEUE_K = 1.0
WAIT_SLACK = 600.0
JOBS_COUNTED = 5.0  # judged jobs a sample an account or a size class needs to count
FAIRSHARE = "PriorityWeightFairshare"
# The default floor where the cluster configures fair share (an association tree): fair share's
# weight at least half the largest priority weight
FAIRSHARE_FLOOR = 0.5


@dataclass(frozen=True)
class Effect:
    """One account's or size class's wait under the running config and the candidate (s: the
    account's average, the class's p95, the queue's total), with the growth allowed and whether
    it holds. The queue's candidate figure is the running config's plus the added wait's bound
    (its mean plus ``queue_k`` standard errors), the figure the rule holds to."""

    kind: str  # "account", "size" or "queue"
    name: str
    jobs: float  # judged jobs a sample, on average
    running: float
    candidate: float
    allowed: float  # the candidate may wait up to running + allowed
    holds: bool

    @property
    def excess(self) -> float:
        """The candidate's wait past what it may reach, relative to that (<= 0: it holds); a
        limit of 0 (no slack, nothing waited) counts in seconds."""
        limit = self.running + self.allowed
        return (self.candidate - limit) / max(limit, 1.0)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "jobs": self.jobs, "running": self.running,
                "candidate": self.candidate, "allowed": self.allowed, "holds": self.holds}


@dataclass(frozen=True)
class Check:
    """What `PolicyConstraints.check` found: every effect and every violation (one line each)."""

    effects: tuple[Effect, ...]
    violations: tuple[str, ...]

    @property
    def holds(self) -> bool:
        return not self.violations

    @property
    def excess(self) -> float:
        """How far the candidate is from keeping the policy, as one number (<= 0 exactly when it
        holds; Optuna's constraint value): the largest relative excess of an effect's wait over
        the wait it may reach, (candidate - running - allowed) / (running + allowed), at least 1
        when a rule on the config itself (a pin, the fair-share floor) is broken; 0 when nothing
        is counted."""
        worst = max((e.excess for e in self.effects), default=0.0)
        rules = len(self.violations) - sum(not e.holds for e in self.effects)
        return max(worst, 1.0) if rules else worst


@dataclass(frozen=True)
class PolicyConstraints:
    """The constraints a decision respects (see the module doc); None turns one off.

    ``shares``: each account's share of the cluster (normalised here; empty: equal shares among
    the accounts that ran), as the twin knows them from the association tree."""

    account_tolerance: float | None = ACCOUNT_TOLERANCE
    size_tolerance: float | None = SIZE_TOLERANCE
    queue_tolerance: float | None = QUEUE_TOLERANCE
    queue_k: float = QUEUE_K
    wait_slack: float = WAIT_SLACK
    min_jobs: float = JOBS_COUNTED
    fairshare_floor: float | None = None
    pins: tuple[str, ...] = ()
    weights: tuple[str, ...] = ()  # the policy's priority weights (for the fair-share floor)
    shares: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("account_tolerance", "size_tolerance", "queue_tolerance", "queue_k", "fairshare_floor"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise AdaptError(f"{name.replace('_', ' ')} must be a number >= 0 (got {v})")
        if not (math.isfinite(self.wait_slack) and self.wait_slack >= 0 and self.min_jobs >= 0):
            raise AdaptError(f"wait slack and min jobs must be >= 0 (got {self.wait_slack}, {self.min_jobs})")

    def check(self, running: ScoreSet, candidate: ScoreSet, running_config: Mapping[str, Any],
              config: Mapping[str, Any]) -> Check:
        """The candidate `config` (scored `candidate`) against the running one (`running`), on
        the same samples."""
        effects: list[Effect] = []
        bad: list[str] = []
        if self.account_tolerance is not None:
            effects += self._accounts(running, candidate, self.account_tolerance)
        if self.size_tolerance is not None:
            effects += self._sizes(running, candidate, self.size_tolerance)
        if self.queue_tolerance is not None:
            effects += self._queue(running, candidate, self.queue_tolerance)
        for e in effects:
            if not e.holds:
                what = {"account": "average wait", "size": "p95 wait", "queue": "total wait"}[e.kind]
                unit, scale = ("h", 3600) if e.kind == "queue" else ("min", 60)
                bad.append(f"{e.kind} {e.name}: {what} {e.running / scale:.0f} -> {e.candidate / scale:.0f} {unit}, "
                           f"more than the {e.allowed / scale:.0f} {unit} allowed")
        return Check(tuple(effects), tuple(bad + self.config_violations(running_config, config)))

    def config_violations(self, running_config: Mapping[str, Any], config: Mapping[str, Any]) -> list[str]:
        """The rules on the config itself, whatever it does to the waits: the pins and the
        fair-share floor."""
        bad = [f"{k} is pinned at {running_config.get(k)!r}" for k in self.pins
               if k in config and config[k] != running_config.get(k)]
        floor = self.floor(running_config)
        if floor is not None and (frac := fairshare_fraction(config, self.weights)) is not None \
                and frac < floor - 1e-9:
            bad.append(f"{FAIRSHARE} {config[FAIRSHARE]} is {frac:.0%} of the largest priority weight, "
                       f"below the floor of {floor:.0%}")
        return bad

    def floor(self, running_config: Mapping[str, Any]) -> float | None:
        """The fair-share floor for this round: the configured one, or the running config's own
        fraction when that is lower (a change need not raise fair share to pass)."""
        if self.fairshare_floor is None or FAIRSHARE not in running_config:
            return None
        own = fairshare_fraction(running_config, self.weights)
        return self.fairshare_floor if own is None else min(self.fairshare_floor, own)

    def _accounts(self, running: ScoreSet, candidate: ScoreSet, tol: float) -> list[Effect]:
        r, c = running.mean_by("account_wait", "account_jobs"), candidate.mean_by("account_wait", "account_jobs")
        usage = running.mean_by("account_usage", "account_jobs")
        total = sum(u for u, _ in usage.values())
        counted = [a for a in r if a in c and r[a][1] >= self.min_jobs]
        shares = self._shares(list(usage))
        out = []
        for a in counted:
            above = (usage[a][0] / total) / shares[a] if total > 0 and shares.get(a) else 1.0
            allowed = r[a][0] * tol * max(1.0, above) + self.wait_slack
            out.append(Effect("account", a, r[a][1], r[a][0], c[a][0], allowed, c[a][0] - r[a][0] <= allowed))
        return out

    def _sizes(self, running: ScoreSet, candidate: ScoreSet, tol: float) -> list[Effect]:
        r, c = running.mean_by("size_p95_wait", "size_jobs"), candidate.mean_by("size_p95_wait", "size_jobs")
        out = []
        for k in r:
            if k in c and r[k][1] >= self.min_jobs:
                allowed = r[k][0] * tol + self.wait_slack
                out.append(Effect("size", k, r[k][1], r[k][0], c[k][0], allowed, c[k][0] - r[k][0] <= allowed))
        return out

    def _queue(self, running: ScoreSet, candidate: ScoreSet, tol: float) -> list[Effect]:
        """The jobs queued at the round (the same in every sample: only what comes after them
        differs): their total wait, the candidate's as the running config's mean plus the mean
        added wait and `queue_k` of its standard errors (paired over the samples)."""
        n = len(running)
        jobs = sum(s.queued_jobs for s in running.scores) / n
        if not jobs:
            return []
        r = [s.queued_wait for s in running.scores]
        mean, se = mean_se([c.queued_wait - w for c, w in zip(candidate.scores, r)])
        running_wait = sum(r) / n
        allowed = running_wait * tol + self.wait_slack * jobs
        bound = mean + self.queue_k * se
        return [Effect("queue", "at the round", jobs, running_wait, running_wait + bound, allowed, bound <= allowed)]

    def _shares(self, accounts: list[str]) -> dict[str, float]:
        given = {a: float(self.shares[a]) for a in accounts if a in self.shares}
        if not given:
            return {a: 1.0 / len(accounts) for a in accounts} if accounts else {}
        total = sum(self.shares.values())
        return {a: s / total for a, s in given.items()} if total > 0 else {}


def fairshare_fraction(config: Mapping[str, Any], weights: tuple[str, ...]) -> float | None:
    """``PriorityWeightFairshare`` over the largest of `weights` in `config` (None: no such knob,
    or every weight 0: no order to keep fair share in)."""
    if FAIRSHARE not in config:
        return None
    top = max((float(config[w]) for w in weights if w in config), default=0.0)
    return float(config[FAIRSHARE]) / top if top > 0 else None


@dataclass(frozen=True)
class PolicySearch:
    """The operator's policy inside a round's search (`autosched.tune.TrialCheck`): every trial
    checked, as the race checks a candidate, against the running config (`reference`) on the
    search's own samples. `reduce` runs where the trial's simulation ran (a worker) and keeps
    only the trial's `Score` (the jobs judged from `since`, the round's time); `value` is
    `Check.excess` of the trial's scores against the reference's. Picklable: it travels to the
    search's workers with its samples."""

    constraints: PolicyConstraints
    reference: Config
    cluster: ClusterSpec
    since: float
    metric: str

    def reduce(self, records: JobRecords, workload: Trace) -> Score:
        return score_records(records, workload, self.cluster, self.since, self.metric)

    def value(self, reference: Sequence[Any], trial: Sequence[Any], config: Mapping[str, Any]) -> float:
        return self.check(reference, trial, config).excess

    def check(self, reference: Sequence[Any], trial: Sequence[Any], config: Mapping[str, Any]) -> Check:
        """The trial's `Check` against the reference (both as `reduce` gave them, in sample order)."""
        return self.constraints.check(ScoreSet(tuple(reference)), ScoreSet(tuple(trial)), self.reference, config)
