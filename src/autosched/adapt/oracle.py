"""The oracle that keeps to the operator's policy: oracle_static, restricted to the configs that
hold the policy against the default in every period of the real trace.

oracle_static is the best fixed config in hindsight, whatever it does to some accounts or GPU-size
classes. Where the gain over the default comes from making a class wait much longer (small first
on a trace whose 2-4 GPU jobs then wait three times as long), a loop held to the operator's policy
cannot reach it, and its share of that gain says little. ``oracle_static_policy`` is the bound such
a loop is measured against: of the configs the oracle's search tried, the policy's archetypes
(`ConfigSpace.archetypes`, laid over the start config as the portfolio lays them) and the start
config itself, the best on the objective whose every period (the jobs submitted in it) keeps to
`PolicyConstraints` against the start config's same period. The check is the decision core's
(`PolicyConstraints.check`), with one period's jobs in place of a round's samples.

`PolicyOracleTuner` is a `RoundTuner` (its `tune` gives the pick as ``best_config``), so the
experiment's disk cache (`cache.cached_factory`) stores the pick like any oracle search's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cluster import ClusterSpec
from ..policies import Policy
from ..sim import JobRecords, Metrics, Simulator
from ..space import Config, ConfigSpace
from ..trace.table import Trace
from ..tune import Objective
from .constraints import PolicyConstraints
from .controller import RoundTuner
from .portfolio import candidates
from .scoring import Score, ScoreSet, score_records

if TYPE_CHECKING:
    from ..tune import TrialCheck


def period_scores(rec: JobRecords, trace: Trace, cluster: ClusterSpec, bounds: Sequence[float],
                  metric: str = "avg_jct") -> list[Score | None]:
    """Per period (``bounds``: their starts, then the last end), the `Score` of the jobs
    submitted in it (they may finish after it ends); None for a period with no job."""
    out: list[Score | None] = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        idx = np.flatnonzero((rec.submit >= a) & (rec.submit < b))
        sub = JobRecords(*(getattr(rec, f)[idx] for f in JobRecords.__dataclass_fields__))
        out.append(score_records(sub, trace.take(idx), cluster, -math.inf, metric) if len(idx) else None)
    return out


def period_breaks(constraints: PolicyConstraints, base: Sequence[Score | None],
                  other: Sequence[Score | None]) -> list[tuple[str, ...]]:
    """The operator's policy period by period: what `other`'s period scores break against
    `base`'s (the default's), each period one sample of `PolicyConstraints.check` (a period
    without jobs on either side breaks nothing)."""
    return [() if b is None or o is None else constraints.check(ScoreSet((b,)), ScoreSet((o,)), {}, {}).violations
            for b, o in zip(base, other)]


def period_violations(constraints: PolicyConstraints, base: Sequence[Score | None],
                      other: Sequence[Score | None], base_config: Mapping[str, Any],
                      config: Mapping[str, Any]) -> list[str]:
    """`period_breaks`, each prefixed with its period, and the config's own rules (pins, the
    fair-share floor) against `base_config`: all that keeps a fixed config from the policy."""
    out = [f"period {i}: {v}" for i, bad in enumerate(period_breaks(constraints, base, other)) for v in bad]
    return out + constraints.config_violations(base_config, config)


@dataclass
class PolicyOracleOutcome:
    """What `PolicyOracleTuner.tune` gives (a `TuningOutcome`): the pick as ``best_config``, and
    in ``cost`` the search's cost with how many configs were replayed and refused."""

    best_config: Config
    cost: dict[str, float]
    graph: list[tuple[str, str, bool]] = field(default_factory=list)
    screened_knobs: dict[str, Any] = field(default_factory=dict)
    trials: list = field(default_factory=list)


class PolicyOracleTuner:
    """A `RoundTuner` over one workload, the whole real trace: `inner`'s search, then the configs
    it tried, the archetypes and `start` ranked by the objective (lower first when it is
    minimised) and replayed in that order until one keeps to `constraints` against `start` in
    every period of `bounds`. `start` holds against itself, so the walk ends there at the latest."""

    def __init__(self, inner: RoundTuner, policy: type[Policy], space: ConfigSpace, cluster: ClusterSpec,
                 objective: Objective, constraints: PolicyConstraints, bounds: Sequence[float], start: Config):
        self.inner, self.policy, self.space, self.cluster = inner, policy, space, cluster
        self.objective, self.constraints, self.bounds, self.start = objective, constraints, list(bounds), start

    def tune(self, workloads: Sequence[Trace], warm_start: Sequence[Mapping[str, Any]] | None = None,
             progress: Callable[[int, int], None] | None = None,
             prior: Sequence[Sequence[Any]] | None = None, check: TrialCheck | None = None) -> PolicyOracleOutcome:
        # (a check would hold the search to the policy on the whole trace at once; the pick is
        # checked period by period below, so the search is left free)
        (trace,) = workloads
        res = self.inner.tune(workloads, warm_start, progress)
        sign = 1.0 if self.objective.minimize else -1.0
        scored: dict[str, tuple[float, Config, list[Score | None] | None]] = {}
        for t in res.trials:  # the search's own values: no replay needed to rank them
            if t.state == "complete" and t.metrics:
                scored.setdefault(_key(t.config), (sign * float(getattr(t.metrics[0], self.objective.metric)),
                                                   self.space.validate(t.config), None))
        base = self._replay(trace, self.start)
        for c in candidates(self.space, self.start, [], None, rules=self.constraints):  # the start, the archetypes
            periods = base if c.config == self.start else self._replay(trace, c.config)
            scored[_key(c.config)] = (sign * self._value(periods, trace, c.config), c.config, periods)
        refused = replayed = 0
        pick = self.start
        for _, config, known in sorted(scored.values(), key=lambda v: v[0]):
            if config == self.start:
                break
            periods = known if known is not None else self._replay(trace, config)
            replayed += known is None
            if not period_violations(self.constraints, base, periods, self.start, config):
                pick = config
                break
            refused += 1
        cost = {**{k: float(v) for k, v in res.cost.items()}, "policy_replays": float(replayed),
                "policy_refused": float(refused)}
        return PolicyOracleOutcome(pick, cost, list(res.graph), dict(res.screened_knobs))

    def evaluate(self, policy_name: str, config: Mapping[str, Any],
                 workloads: Sequence[Trace]) -> tuple[float, list[Metrics]]:
        return self.inner.evaluate(policy_name, config, workloads)

    def _replay(self, trace: Trace, config: Config) -> list[Score | None]:
        rec = Simulator(trace, self.cluster, self.policy(config)).run().records()
        return period_scores(rec, trace, self.cluster, self.bounds, self.objective.metric)

    def _value(self, periods: list[Score | None], trace: Trace, config: Config) -> float:
        """The objective over the whole trace, from the periods' scores when it is a mean over
        jobs (avg_*), else simulated again by the inner tuner."""
        if self.objective.metric.startswith("avg_"):
            jobs = sum(p.jobs for p in periods if p is not None)
            return sum(p.value * p.jobs for p in periods if p is not None) / max(jobs, 1)
        return self.inner.evaluate(self.policy.name, config, [trace])[0]


def _key(config: Mapping[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in config.items()))
