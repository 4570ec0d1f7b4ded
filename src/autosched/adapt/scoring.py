"""A config on a round's workload, as a decision reads it: the objective over the jobs the config
decides for, and the waits the operator's policy protects (per account, per GPU-size class).

A round's workload starts with the jobs the cluster carries over; those running at the round
(submitted before it: `observe.carried_over`) run as they would under any config, so they are
simulated (they hold their GPUs) but not judged, as the live judge does. `score` simulates one
config on one workload and reduces the job records to a `Score`; `ScoreSet` holds a config's
scores over a round's samples, in sample order, so that two configs' sets compare paired.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..cluster import ClusterSpec
from ..policies import Policy
from ..sim import JobRecords, Simulator, compute_metrics
from ..trace.table import Trace
from .drift import GPU_CLASS_NAMES
from .observe import gpu_class


@dataclass(frozen=True)
class Score:
    """One config on one workload. ``value``: the objective (a `Metrics` field) over the judged
    jobs. Per account (the trace's ``account``, else its ``vc``; none without either) and per
    GPU-size class (1, 2-4, 5-8, >8 GPUs): the judged jobs' count and their queueing waits (s),
    the account's average and the class's 95th percentile, and each account's GPU-seconds run
    (its usage, against its share). And the jobs already queued at the round: their total wait."""

    value: float
    jobs: int
    account_jobs: Mapping[str, int]
    account_wait: Mapping[str, float]
    account_usage: Mapping[str, float]
    size_jobs: Mapping[str, int]
    size_p95_wait: Mapping[str, float]
    # the jobs queued at the round (submitted at `since` itself: the backlog that waits): how
    # many, and the waits they add up to (s)
    queued_jobs: int = 0
    queued_wait: float = 0.0


def score(policy: type[Policy], config: Mapping[str, Any], workload: Trace, cluster: ClusterSpec,
          since: float, metric: str) -> Score:
    """Simulate `config` of `policy` on `workload` (fitted to `cluster`) and score the jobs
    submitted at or after `since` (the round's time: earlier rows ran at it)."""
    sim = Simulator(workload, cluster, policy(config)).run()
    return score_records(sim.records(), workload, cluster, since, metric)


def score_records(rec: JobRecords, workload: Trace, cluster: ClusterSpec, since: float,
                  metric: str) -> Score:
    """`score`'s reduction of a finished run's records (pure)."""
    judged = rec.submit >= since
    groups = workload.account if workload.account is not None else workload.vc
    sub = JobRecords(*(getattr(rec, f)[judged] for f in JobRecords.__dataclass_fields__))
    metrics = compute_metrics(sub, cluster.gpus, None if groups is None else groups[judged])
    wait = sub.queue
    out_acct: dict[str, list[float]] = {}
    usage: dict[str, float] = {}
    if groups is not None:
        names = np.asarray(groups, dtype=str)[judged]
        run = sub.run_time * sub.gpus
        for a in np.unique(names).tolist():
            mine = names == a
            out_acct[a] = [int(mine.sum()), float(wait[mine].mean())]
            usage[a] = float(run[mine].sum())
    cls = gpu_class(sub.gpus)
    size_jobs, size_p95 = {}, {}
    for k, name in enumerate(GPU_CLASS_NAMES):
        mine = cls == k
        if mine.any():
            size_jobs[name] = int(mine.sum())
            size_p95[name] = float(np.percentile(wait[mine], 95))
    queued = sub.submit == since
    return Score(value=float(getattr(metrics, metric)), jobs=int(judged.sum()),
                 account_jobs={a: int(v[0]) for a, v in out_acct.items()},
                 account_wait={a: float(v[1]) for a, v in out_acct.items()}, account_usage=usage,
                 size_jobs=size_jobs, size_p95_wait=size_p95, queued_jobs=int(queued.sum()),
                 queued_wait=float(wait[queued].sum()))


@dataclass(frozen=True)
class ScoreSet:
    """A config's scores on a round's samples, in sample order."""

    scores: tuple[Score, ...]

    @property
    def values(self) -> list[float]:
        return [s.value for s in self.scores]

    def __len__(self) -> int:
        return len(self.scores)

    def extended(self, more: Sequence[Score]) -> "ScoreSet":
        return ScoreSet((*self.scores, *more))

    def mean_by(self, field: str, jobs_field: str) -> dict[str, tuple[float, float]]:
        """Per key of the mapping `field` (account or size class): (mean over the samples that
        have the key, mean job count per sample over all samples)."""
        keys = sorted({k for s in self.scores for k in getattr(s, field)})
        n = len(self.scores)
        out = {}
        for k in keys:
            vals = [getattr(s, field)[k] for s in self.scores if k in getattr(s, field)]
            jobs = sum(getattr(s, jobs_field).get(k, 0) for s in self.scores)
            out[k] = (float(np.mean(vals)), jobs / n)
        return out
