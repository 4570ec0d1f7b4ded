"""`round_workloads`: what a controller's round evaluates configs on (backlog first, fitted to the cluster)."""

from __future__ import annotations

import numpy as np

from autosched.adapt import Controller, FutureSource, LoopConfig, ModelSource, observe
from autosched.adapt.controller import round_workloads
from autosched.cluster import ClusterSpec
from autosched.policies import get_policy
from autosched.sim import Simulator
from autosched.trace import Trace
from test_adapt_doubles import DAY, synthetic_trace


def _trace(rows) -> Trace:
    submit, dur, gpus = zip(*rows)
    return Trace.from_columns({"job_id": [f"j{i}" for i in range(len(rows))], "submit_time": submit,
                               "num_gpus": gpus, "duration": dur})


def _observed():
    # One GPU, FIFO: j0 runs 0-200, j1 200-250, j2 from 250 (1000 s), j3 queued; at 300 the
    # backlog is j2 (running, 150 s left: submitted a minute before 300, it runs on) and j3
    # (imputed, queued at 300).
    past = [(0, 200, 1), (10, 50, 1), (20, 1000, 1), (30, 10, 1)]
    cl = ClusterSpec.uniform_nodes(1, 1)
    sim = Simulator(_trace(past), cl, get_policy("fifo")()).run(until=300)
    # the future: j4 at 400 (5 s), j5 at 500 needing 2 GPUs (the cluster has 1), j6 at 2000
    future = _trace([*past, (400, 5, 1), (500, 7, 2), (2000, 3, 1)])
    return observe(sim, 300, 0), cl, FutureSource(future)


def test_backlog_first_then_the_period_fitted_to_the_cluster():
    obs, cl, src = _observed()
    (w,) = round_workloads(src, obs, 1000.0, cl, seed=0)
    assert list(w.job_id) == ["j2", "j3", "j4"]  # j5 cannot run on 1 GPU, j6 is after the period
    assert w.submit_time.tolist() == [240, 300, 400]
    assert w.duration.tolist() == [150, obs.backlog.duration[1], 5]


def test_without_backlog_and_empty_workloads_left_out():
    obs, cl, src = _observed()
    (w,) = round_workloads(src, obs, 1000.0, cl, seed=0, carry_backlog=False)
    assert list(w.job_id) == ["j4"]
    assert round_workloads(src, obs, 50.0, cl, seed=0, carry_backlog=False) == []  # no job in [300, 350)
    assert [list(w.job_id) for w in round_workloads(src, obs, 50.0, cl, seed=0)] == [["j2", "j3"]]
    assert round_workloads(src, obs, 1000.0, cl, seed=0, fresh=True) == []  # a deterministic source


def test_the_controller_evaluates_on_exactly_these_workloads():
    tr = synthetic_trace(days=4, per_day=200)
    cl = ClusterSpec.uniform_nodes(1, 4)
    sim = Simulator(tr, cl, get_policy("tiresias")()).run(until=2 * DAY)
    obs = observe(sim, 2 * DAY, 0)
    assert len(obs.backlog) > 0
    src = ModelSource("stat", samples=2, validation_samples=2)
    ctrl = Controller(LoopConfig(period=DAY), cl, src)
    for fresh in (False, True):
        ours = round_workloads(src, obs, DAY, cl, seed=7, fresh=fresh)
        theirs = ctrl._workloads(obs, 7, fresh=fresh)
        assert len(ours) == len(theirs) == 2
        for a, b in zip(ours, theirs):
            assert (a.submit_time <= 2 * DAY).sum() >= len(obs.backlog)  # (the running ones a minute before)
            for c, col in a.columns().items():
                assert np.array_equal(col, b.columns()[c])
