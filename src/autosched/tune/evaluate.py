"""Scoring one config: simulate it on every workload and combine the metrics.

An `Evaluator` is what an executor ships to its workers: the cluster, the workloads, the objective
and the simulator function. Every config sees the same workloads (common random numbers), so
configs are compared on equal footing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..cluster import ClusterSpec
from ..policies import Policy
from ..sim import JobRecords, Metrics, Simulator, result_of
from ..trace.table import Trace
from .config import TuneError
from .objective import Objective

# Intermediate quantities screening puts between knobs and the objective. All but fragmentation
# are Metrics fields; fragmentation comes from the simulator's run segments (see below).
INTERMEDIATES = ("avg_queue", "utilization", "preemptions", "fragmentation")

SimFn = Callable[[Trace, ClusterSpec, Policy], "tuple[Metrics, dict[str, float]]"]


class TrialCheck(Protocol):
    """A constraint a search computes from its trials' job records, beyond the objective's own
    (the adaptive loop's operator's policy: `autosched.adapt.constraints.PolicySearch`): every
    trial against one `reference` config of the searched policy, on the same workloads.

    `reduce` is called in the worker right after each simulation of a trial (once per workload,
    in workload order; it and what it returns are pickled to and from process workers), so that
    the check costs no simulation of its own. `value` is called in the tuner's process when a
    trial is told, with the reference's reductions and the trial's: how far the trial is from
    keeping the constraint (<= 0: it keeps it). The tuner gives it to Optuna's sampler as a
    constraint (`optuna.trial.Trial.set_constraint`) and keeps it as the trial's ``check``."""

    @property
    def reference(self) -> Mapping[str, Any]: ...

    def reduce(self, records: JobRecords, workload: Trace) -> Any: ...

    def value(self, reference: Sequence[Any], trial: Sequence[Any], config: Mapping[str, Any]) -> float: ...


def simulate_with_extras(trace: Trace, cluster: ClusterSpec, policy: Policy) -> tuple[Metrics, dict[str, float]]:
    """The real simulator; also measures fragmentation, which is not a Metrics field."""
    return _measured(Simulator(trace, cluster, policy, record_segments=True).run())


def _measured(sim: Simulator[Any]) -> tuple[Metrics, dict[str, float]]:
    """A finished run's metrics, and its fragmentation (not a Metrics field)."""
    return result_of(sim).metrics, {"fragmentation": fragmentation(sim)}


def fragmentation(sim: Simulator[Any]) -> float:
    """Share of the cluster's GPU-time that was idle while a job of the same partition waited.

    A scheduler that holds GPUs free while jobs queue (strict FIFO behind a big job, placement
    that cannot fit a job on scattered free GPUs, decision intervals) scores high; 0 means no GPU
    was ever idle while someone waited. Computed from run segments: a job waits from submission
    to its first run and between consecutive runs."""
    rec = sim.records()
    if len(rec.submit) == 0:
        return 0.0
    segs = sim.segments or []
    jobs = np.fromiter((s[0] for s in segs), dtype=np.int64, count=len(segs))
    starts = np.fromiter((s[1] for s in segs), dtype=np.float64, count=len(segs))
    ends = np.fromiter((s[2] for s in segs), dtype=np.float64, count=len(segs))
    order = np.lexsort((starts, jobs))
    jobs, starts, ends = jobs[order], starts[order], ends[order]
    first = np.ones(len(jobs), dtype=bool)
    first[1:] = jobs[1:] != jobs[:-1]
    # Waiting intervals: [submit, first start) and [previous end, next start).
    wait_from = np.where(first, rec.submit[jobs], np.roll(ends, 1))
    wait_to = starts
    gpus = rec.gpus[jobs]
    part = rec.partition[jobs]
    caps = sim.cluster.partition_gpus()
    idle = 0.0
    for p, cap in enumerate(caps):
        m = part == p
        if not m.any():
            continue
        # Events: +1 waiting / -1 waiting, +g busy / -g busy.
        t = np.concatenate([wait_from[m], wait_to[m], starts[m], ends[m]])
        dw = np.concatenate([np.ones(m.sum()), -np.ones(m.sum()), np.zeros(2 * m.sum())])
        db = np.concatenate([np.zeros(2 * m.sum()), gpus[m], -gpus[m]]).astype(np.float64)
        o = np.argsort(t, kind="stable")
        t, dw, db = t[o], dw[o], db[o]
        waiting = np.cumsum(dw)[:-1]
        busy = np.cumsum(db)[:-1]
        dt = np.diff(t)
        idle += float(np.sum(np.where(waiting > 0.5, (cap - busy) * dt, 0.0)))
    span = float(rec.end.max() - rec.submit.min())
    return idle / (sim.cluster.gpus * span) if span > 0 else 0.0


@dataclass(frozen=True)
class ConfigScore:
    """The score of one config on all workloads: the objective's value, each workload's metrics, the
    constraints' violations, the intermediates' means and, with a `TrialCheck`, its reduction
    of each workload's job records."""

    value: float
    metrics: tuple[Metrics, ...]
    violations: tuple[float, ...]
    intermediates: dict[str, float] = field(default_factory=dict)  # means over the workloads
    reduced: tuple[Any, ...] = ()  # `TrialCheck.reduce` per workload (empty without a check)


@dataclass
class Evaluator:
    """Everything a worker needs to score a config. Picklable (sent once per worker / Ray put)."""

    cluster: ClusterSpec
    workloads: tuple[Trace, ...]
    objective: Objective
    policies: Mapping[str, type[Policy]]
    simulator: SimFn | None = None
    check: TrialCheck | None = None  # reduces each simulation's job records (needs the real simulator)

    def __post_init__(self) -> None:
        if self.check is not None and self.simulator is not None:
            raise TuneError("a trial check reads the real simulator's job records: give no simulator function")

    def __call__(self, policy: str, config: Mapping[str, Any]) -> ConfigScore:
        cls = self.policies[policy]
        sim = self.simulator or simulate_with_extras
        metrics: list[Metrics] = []
        extras: list[dict[str, float]] = []
        reduced: list[Any] = []
        for trace in self.workloads:
            if self.check is None:
                m, x = sim(trace, self.cluster, cls(config))
            else:
                run = Simulator(trace, self.cluster, cls(config), record_segments=True).run()
                m, x = _measured(run)
                reduced.append(self.check.reduce(run.records(), trace))
            metrics.append(m)
            extras.append(x)
        value = self.objective.value(metrics)
        if math.isnan(value):
            raise TuneError(f"objective {self.objective.metric} is NaN")
        inter = {}
        for name in INTERMEDIATES:
            vals = [x[name] if name in x else getattr(m, name, None) for m, x in zip(metrics, extras)]
            known = [v for v in vals if v is not None]
            if len(known) == len(vals):
                inter[name] = float(np.mean(known))
        return ConfigScore(value, tuple(metrics), tuple(self.objective.violations(metrics)), inter, tuple(reduced))
