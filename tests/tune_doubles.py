"""Test doubles for the tuner: a policy whose objective is a known function of two of its six
knobs, and fake simulators (known, failing, slow, dying). Imported by test_tune*.py and by the
subprocess of the resume test."""

from __future__ import annotations

import gc
import hashlib
import os
import time

from autosched.cluster import ClusterSpec
from autosched.policies.base import Policy
from autosched.sim import Metrics
from autosched.space import Bool, Categorical, ConfigSpace, Float, Int
from autosched.trace.table import Trace

CLUSTER = ClusterSpec.uniform_nodes(1, 8)
TRACE = Trace.from_columns({"job_id": ["j0", "j1"], "submit_time": [0.0, 1.0], "num_gpus": [1, 2],
                            "duration": [10.0, 20.0]}, source="double")
RELEVANT = {"a", "c"}


class Knobby(Policy):
    name = "knobby"
    summary = "test double: avg_jct = 100 + 1000 a + 200 c; b, d, e, f do nothing"
    space = ConfigSpace([
        Float("a", "matters (through avg_queue)", low=0.0, high=1.0, default=0.5),
        Float("b", "does nothing", low=1.0, high=100.0, default=10.0, log=True),
        Int("c", "matters (through preemptions)", low=0, high=10, default=5),
        Bool("d", "does nothing", default=False),
        Categorical("e", "does nothing", choices=("x", "y", "z"), default="x"),
        Float("f", "does nothing", low=0.0, high=1.0, default=0.5),
    ])


def metrics_of(config) -> Metrics:
    queue = 1000.0 * config["a"]
    preemptions = 10 * config["c"]
    jct = 100.0 + queue + 20.0 * preemptions
    return Metrics(jobs=2, avg_jct=jct, median_jct=jct, p95_jct=jct, p99_jct=jct, avg_queue=queue,
                   p99_queue=queue, avg_slowdown=1.0, makespan=1000.0, utilization=0.5,
                   preemptions=preemptions, fairness=1.0)


def known_sim(trace, cluster, policy):
    return metrics_of(policy.config), {}


def failing_sim(trace, cluster, policy):
    if policy.config["d"]:
        raise RuntimeError("boom: d is on")
    return known_sim(trace, cluster, policy)


def slow_sim(trace, cluster, policy):
    time.sleep(0.15)
    return known_sim(trace, cluster, policy)


def slower_sim(trace, cluster, policy):
    """Slow enough that a test polling the study from a loaded machine sees the run early on."""
    time.sleep(0.5)
    return known_sim(trace, cluster, policy)


def sleepy_sim(trace, cluster, policy):
    if policy.config["a"] > 0.5:
        time.sleep(60)
    return known_sim(trace, cluster, policy)


def dies_once_sim(trace, cluster, policy):
    """The first attempt of each config kills its worker; the retry succeeds."""
    key = hashlib.sha1(repr(sorted(policy.config.items())).encode()).hexdigest()
    marker = os.path.join(os.environ["AUTOSCHED_TEST_MARKERS"], key)
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(3)
    return known_sim(trace, cluster, policy)


def frozen_parent_sim(trace, cluster, policy):
    """Fails unless the worker's inherited objects are frozen out of its garbage collector."""
    if gc.get_freeze_count() == 0:
        raise RuntimeError("the parent's objects are not frozen in the worker")
    return known_sim(trace, cluster, policy)


def always_dies_sim(trace, cluster, policy):
    os._exit(3)


def hanging_sim(trace, cluster, policy):
    """Leaves its worker's PID in $AUTOSCHED_TEST_MARKERS, then hangs (a trial that runs long)."""
    open(os.path.join(os.environ["AUTOSCHED_TEST_MARKERS"], str(os.getpid())), "w").close()
    time.sleep(600)
    return known_sim(trace, cluster, policy)
