"""A job's past before its submission (the trace's `attained` and `age` columns): read by the
engine and the policies, filled by `observe` and the live history for the backlog. Worked out by
hand on tiny traces (1 node; restart overhead 40 s)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.adapt import FutureSource, observe
from autosched.adapt.controller import round_workloads
from autosched.cluster import ClusterSpec
from autosched.policies import get_policy
from autosched.sim import Simulator
from autosched.trace.table import Trace, TraceError


def _trace(rows, attained=None, age=None) -> Trace:
    """rows: (submit, gpus, duration)."""
    cols = {"job_id": [f"j{i}" for i in range(len(rows))], "submit_time": [float(r[0]) for r in rows],
            "num_gpus": [r[1] for r in rows], "duration": [float(r[2]) for r in rows]}
    if attained is not None:
        cols["attained"] = attained
    if age is not None:
        cols["age"] = age
    return Trace.from_columns(cols)


def _run(tr: Trace, policy: str, config: dict | None = None, gpus: int = 4) -> Simulator:
    return Simulator(tr, ClusterSpec.uniform_nodes(1, gpus), get_policy(policy)(config or {})).run()


TWO_QUEUES = {"queues": 2, "threshold": 400.0}


def test_tiresias_a_job_with_prior_service_starts_in_its_lower_queue():
    jobs = [(0, 4, 100), (0, 4, 100)]
    # Both new: one queue, submission order: j0 0-100, j1 100-200.
    assert _run(_trace(jobs), "tiresias", TWO_QUEUES).records().jct.tolist() == [100, 200]
    # j0 already had 1000 GPU-s (>= 400): it sits in queue 1 from its arrival, j1 goes first.
    rec = _run(_trace(jobs, attained=[1000.0, 0.0]), "tiresias", TWO_QUEUES).records()
    assert rec.jct.tolist() == [200, 100]
    assert rec.run_time.tolist() == [100, 100]  # metrics count only this trace's run


def test_tiresias_prior_service_brings_the_demotion_forward():
    # j0 (4 GPUs, 300 s) had 200 GPU-s: it crosses 400 at t=50 (not 100), when j1 arrives and
    # preempts it: j1 50-150; j0 resumes at 150 with 250 s left and pays 40 s: ends 440.
    rec = _run(_trace([(0, 4, 300), (50, 4, 100)], attained=[200.0, 0.0]), "tiresias", TWO_QUEUES).records()
    assert rec.jct.tolist() == [440, 100]
    assert rec.preemptions.tolist() == [1, 0]


def test_tiresias_a_backlog_job_counts_its_past_toward_starvation():
    # 1 GPU, queues at 100 GPU-s, starvation 2. j0 arrives at 0 with 100 GPU-s done (queue 1)
    # and age 1000: it waited 900 s >= 2 x 100, so it is promoted at once and runs 0-50, before
    # j1 (queue 0, 50-60). Without its age its wait counts from 0: due at 200; j1 (10 s) first.
    cfg = {"queues": 2, "threshold": 100.0, "starvation": 2.0}
    jobs = [(0, 1, 50), (0, 1, 10)]
    rec = _run(_trace(jobs, attained=[100.0, 0.0], age=[1000.0, 0.0]), "tiresias", cfg, gpus=1).records()
    assert rec.first_start.tolist() == [0, 50]
    rec = _run(_trace(jobs, attained=[100.0, 0.0]), "tiresias", cfg, gpus=1).records()
    assert rec.first_start.tolist() == [10, 0]


def test_engine_attained_and_executed_include_the_prior_service():
    tr = _trace([(0, 2, 100)], attained=[60.0])
    sim = Simulator(tr, ClusterSpec.uniform_nodes(1, 4), get_policy("fifo")()).run(until=10)
    part = sim.partitions[0]
    assert part.executed(0, 10.0) == 30 + 10 and part.attained(0, 10.0) == 80


# j0 holds the one GPU 0-100; p (t=10) and q (t=20) wait. q existed 100 s before its row's submit
# time (submitted at -80): it goes before p. JCT stays end - submit_time of the row.
AGE_JOBS = [(0, 1, 100), (10, 1, 10), (20, 1, 10)]


@pytest.mark.parametrize("policy,config", [
    ("fifo", {}), ("fifo", {"backfill": True}),
    # the age factor alone: q's age is 100 s more than p's at every recalculation
    ("multifactor", {"PriorityWeightFairshare": 0, "PriorityWeightJobSize": 0, "PriorityMaxAge": 3600.0}),
])
def test_an_older_job_goes_first(policy, config):
    assert _run(_trace(AGE_JOBS), policy, config, gpus=1).records().first_start.tolist() == [0, 100, 110]
    rec = _run(_trace(AGE_JOBS, age=[0.0, 0.0, 100.0]), policy, config, gpus=1).records()
    assert rec.first_start.tolist() == [0, 110, 100]
    assert rec.jct.tolist() == [100, 110, 90]


def test_rows_submitted_together_are_in_order_of_first_submission():
    tr = _trace([(5, 1, 1), (5, 1, 1), (5, 1, 1)], age=[0.0, 30.0, 10.0])
    assert list(tr.job_id) == ["j1", "j2", "j0"]
    assert tr.age.tolist() == [30, 10, 0]


@pytest.mark.parametrize("col,value", [("attained", -1.0), ("age", float("nan")), ("age", float("inf"))])
def test_history_columns_must_be_seconds_at_least_zero(col, value):
    with pytest.raises(TraceError, match=rf"row 1, column '{col}'"):
        _trace([(0, 1, 1), (1, 1, 1)], **{col: [0.0, value]})
    with pytest.raises(TraceError, match=f"row 1, column '{col}': 'x' is not a number"):
        _trace([(0, 1, 1), (1, 1, 1)], **{col: ["0", "x"]})


JOBS = st.lists(st.tuples(st.integers(0, 300), st.sampled_from([1, 2, 4]), st.integers(1, 400)),
                min_size=1, max_size=12).map(lambda js: sorted(js, key=lambda j: j[0]))


@settings(max_examples=40, deadline=None)
@given(jobs=JOBS, policy=st.sampled_from([
    ("tiresias", {"queues": 3, "threshold": 300.0, "starvation": 1.5}),
    ("tiresias", {"queue_order": "running_first", "min_run": 50.0}),
    ("fifo", {"backfill": True, "reserve_after": 100.0}),
    ("multifactor", {}),
    ("qssf", {}),
]))
def test_zero_history_columns_change_nothing(jobs, policy):
    name, config = policy
    plain = _run(_trace(jobs), name, config, gpus=8).records()
    zeros = [0.0] * len(jobs)
    zero = _run(_trace(jobs, attained=zeros, age=zeros), name, config, gpus=8).records()
    for field in ("submit", "first_start", "end", "run_time", "preemptions"):
        assert np.array_equal(getattr(plain, field), getattr(zero, field)), field


def _observed(backlog_history: bool | None):
    # 2 GPUs, strict FIFO: j0 0-200, j1 (2 GPUs) from 200, j2 (1 GPU) waits behind it. At 300:
    # j1 has run 100 s on 2 GPUs (200 GPU-s) and was submitted 290 s ago; j2 never ran, age 280.
    tr = _trace([(0, 2, 200), (10, 2, 1000), (20, 1, 10), (400, 1, 5)])
    cl = ClusterSpec.uniform_nodes(1, 2)
    sim = Simulator(tr, cl, get_policy("fifo")()).run(until=300)
    flag = {} if backlog_history is None else dict(backlog_history=backlog_history)
    return observe(sim, 300, 0, **flag), cl, FutureSource(tr)


def test_observe_fills_the_backlog_history_by_default():
    obs, _, _ = _observed(False)
    assert list(obs.backlog.job_id) == ["j1", "j2"]
    assert obs.backlog.attained is None and obs.backlog.age is None
    obs, cl, src = _observed(None)
    assert list(obs.backlog.job_id) == ["j1", "j2"]
    assert obs.backlog.submit_time.tolist() == [300, 300]
    assert obs.backlog.attained.tolist() == [200, 0] and obs.backlog.age.tolist() == [290, 280]
    assert obs.running.tolist() == [True, False]
    # the evaluation workload keeps them; the period's new jobs have none (0)
    (w,) = round_workloads(src, obs, 1000.0, cl, seed=0)
    assert list(w.job_id) == ["j1", "j2", "j3"]
    assert w.attained.tolist() == [200, 0, 0] and w.age.tolist() == [290, 280, 0]


def test_live_observation_fills_the_backlog_history_by_default():
    from autosched.live.history import LiveJobs, observation
    from autosched.trace.report import LoadReport
    obj = lambda *v: np.array(v, dtype=object)  # noqa: E731
    # j1 (2 GPUs) runs since 1500, j2 is pending; at 4000: 2500 s x 2 GPUs, and ages 3000, 300.
    jobs = LiveJobs(job_id=obj("0", "1", "2"), submit=np.array([0.0, 1000.0, 3700.0]),
                    start=np.array([0.0, 1500.0, np.nan]), end=np.array([3500.0, np.nan, np.nan]),
                    gpus=np.array([1, 2, 1]), user=obj("u", "u", "u"), account=obj("a", "a", "a"),
                    partition=obj("p", "p", "p"), time_limit=np.full(3, np.nan), cpus=np.zeros(3),
                    finished=np.array([True, False, False]), duration=np.array([3500.0, 0.0, 0.0]),
                    report=LoadReport(source="test"))
    obs, _ = observation(jobs, now=4000.0, window=4000.0, backlog_history=False)
    assert obs.backlog.attained is None and obs.backlog.age is None
    obs, _ = observation(jobs, now=4000.0, window=4000.0)
    assert list(obs.backlog.job_id) == ["1", "2"]
    assert obs.backlog.attained.tolist() == [5000, 0] and obs.backlog.age.tolist() == [3000, 300]
    assert obs.running.tolist() == [True, False]  # job 1 runs, job 2 waits: row for row


def test_by_default_a_job_past_every_finished_one_keeps_work_and_its_past(monkeypatch):
    """Today's defaults at the `observe` level: a backlog job that has run longer than every
    finished job gets a Pareto tail (more than the 1 s the old rule left it) and carries what it
    ran and its age. j0 runs 0-10,000 on its own 1 GPU; j1-j5 finish after 100 s each."""
    import importlib

    observe_mod = importlib.import_module("autosched.adapt.observe")  # the package's `observe` is the function
    rows = [(0, 1, 10_000)] + [(10 * i, 1, 100) for i in range(1, 6)]
    sim = Simulator(_trace(rows), ClusterSpec.uniform_nodes(1, 8), get_policy("fifo")()).run(until=1000)
    obs = observe(sim, 1000, 0)
    assert list(obs.backlog.job_id) == ["j0"]
    assert obs.backlog.attained.tolist() == [1000] and obs.backlog.age.tolist() == [1000]
    left = float(obs.backlog.duration[0])
    assert 1.0 < left <= 1000 + observe_mod.TAIL_CAP  # total 1000 / U**(1/2), capped
    monkeypatch.setattr(observe_mod, "TAIL_ALPHA", None)  # the old rule: it ends at once
    assert observe(sim, 1000, 0).backlog.duration.tolist() == [1.0]
