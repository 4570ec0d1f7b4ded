"""Helpers for tests that run the simulator on tiny hand-made traces."""

from __future__ import annotations

import numpy as np

from autosched.cluster import ClusterSpec
from autosched.policies import get_policy
from autosched.policies.battery import tiny_trace
from autosched.sim import Simulator

make_trace = tiny_trace  # `jobs`: (submit, gpus, duration) tuples, in submission order; ids j0, j1, ...


def cluster(nodes: int = 1, gpn: int = 4, **kw) -> ClusterSpec:
    return ClusterSpec.uniform_nodes(nodes, gpn, **kw)


def run(jobs, policy: str, config: dict | None = None, *, nodes: int = 1, gpn: int = 4,
        users=None, vcs=None, spec: ClusterSpec | None = None, **cluster_kw) -> Simulator:
    """Simulate to the end with segments recorded; returns the simulator."""
    tr = make_trace(jobs, users, vcs)
    cl = spec or cluster(nodes, gpn, **cluster_kw)
    return Simulator(tr, cl, get_policy(policy)(config or {}), record_segments=True).run()


def jct(sim: Simulator) -> list[float]:
    return np.round(sim.records().jct, 9).tolist()


def starts(sim: Simulator) -> list[float]:
    return np.round(sim.records().first_start, 9).tolist()
