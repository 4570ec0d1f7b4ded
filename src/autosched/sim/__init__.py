"""The trace-driven cluster simulator: engine, placement and metrics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..cluster import ClusterSpec
from ..errors import SimulationError
from ..trace.table import Trace
from .engine import JobRecords, Partition, Simulator
from .metrics import METRIC_HELP, Metrics, compute_metrics

if TYPE_CHECKING:
    from ..policies.base import Policy


@dataclass(frozen=True)
class SimResult:
    records: JobRecords
    metrics: Metrics


def simulate(trace: Trace, cluster: ClusterSpec, policy: "Policy",
             progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Run `policy` on `trace` (already fitted to `cluster`) to the end."""
    sim = Simulator(trace, cluster, policy, progress=progress).run()
    return result_of(sim)


def result_of(sim: Simulator) -> SimResult:
    rec = sim.records()
    codes = sim.jobs.vc if sim.jobs.vc is not None else sim.jobs.user  # the engine's integer labels
    groups = None if codes is None else np.asarray(codes)
    return SimResult(rec, compute_metrics(rec, sim.cluster.gpus, groups))


__all__ = ["Simulator", "Partition", "SimulationError", "JobRecords", "Metrics", "METRIC_HELP",
           "SimResult", "simulate", "compute_metrics", "result_of"]
