"""The trace-driven cluster simulator: engine, placement and metrics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..cluster import ClusterSpec
from ..errors import SimulationError
from ..trace.table import Trace
from .contract import JobInfo, Partition, PolicyHooks
from .engine import JobRecords, Simulator
from .metrics import METRIC_HELP, Metrics, compute_metrics


@dataclass(frozen=True)
class SimResult:
    records: JobRecords
    metrics: Metrics


def simulate(trace: Trace, cluster: ClusterSpec, policy: PolicyHooks,
             progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Run `policy` on `trace` (already fitted to `cluster`) to the end."""
    sim = Simulator(trace, cluster, policy, progress=progress).run()
    return result_of(sim)


def result_of(sim: Simulator[Any]) -> SimResult:
    rec = sim.records()
    codes = sim.jobs.vc if sim.jobs.vc is not None else sim.jobs.user  # the engine's integer labels
    groups = None if codes is None else np.asarray(codes)
    return SimResult(rec, compute_metrics(rec, sim.cluster.gpus, groups))


__all__ = ["Simulator", "Partition", "JobInfo", "PolicyHooks", "SimulationError", "JobRecords", "Metrics",
           "METRIC_HELP", "SimResult", "simulate", "compute_metrics", "result_of"]
