"""A round when contention arrives (adapt/trigger.py): the queue against what the last round saw."""

from __future__ import annotations

import numpy as np
import pytest

from autosched.adapt import Settings, run_experiment
from autosched.adapt.controller import ControllerMemory
from autosched.adapt.errors import AdaptError
from autosched.adapt.observe import Observation
from autosched.adapt.trigger import ContentionTrigger, Queue
from autosched.cluster import ClusterSpec
from autosched.trace import Trace
from test_adapt_doubles import FakeTuner, fake_model_factory, synthetic_trace

DAY = 86400.0


def test_the_queue_counts_the_waiting_jobs_only():
    # R runs (8 GPUs); Q1 (2 GPUs, 1 h) and Q2 (1 GPU, 3 h) wait: 2 jobs, 2 + 3 = 5 GPU-hours
    backlog = Trace.from_columns({"job_id": ["R", "Q1", "Q2"], "submit_time": [0.0] * 3, "num_gpus": [8, 2, 1],
                                  "duration": [7200.0, 3600.0, 10800.0]})
    empty = backlog.take(np.array([], dtype=np.int64))
    obs = Observation(0.0, 0.0, empty, np.zeros(0, bool), np.zeros(0), backlog, 0, np.array([True, False, False]))
    assert Queue.of(obs) == Queue(2, 5.0)
    unknown = Observation(0.0, 0.0, empty, np.zeros(0, bool), np.zeros(0), backlog, 0)  # no `running`: all wait
    assert Queue.of(unknown) == Queue(3, 21.0)


def test_the_queue_weighs_each_job_at_its_size_classs_mean_run_time():
    # history: 30 finished 1-GPU jobs of 1 h and 30 of 3 h (mean 2 h), 2 finished 4-GPU jobs of
    # 10 h (too few for their class: the mean of all 62, (30 + 90 + 20) / 62 h), one unfinished
    # 1-GPU job of 100 h so far (not counted)
    dur = np.concatenate([np.full(30, 3600.0), np.full(30, 3 * 3600.0), np.full(2, 36000.0), [360000.0]])
    gpus = np.concatenate([np.ones(60, np.int64), [4, 4], [1]])
    n = len(dur)
    history = Trace.from_columns({"job_id": [f"h{i}" for i in range(n)], "submit_time": np.zeros(n),
                                  "num_gpus": gpus, "duration": dur})
    finished = np.arange(n) < n - 1
    # the backlog's durations are one imputed draw each, far from the means: they do not count
    backlog = Trace.from_columns({"job_id": ["Q1", "Q2", "Q3"], "submit_time": [0.0] * 3, "num_gpus": [1, 1, 2],
                                  "duration": [99999.0, 5.0, 1e6]})
    obs = Observation(0.0, 0.0, history, finished, np.zeros(n), backlog, 1, np.zeros(3, bool))
    # Q1, Q2: 1 GPU x 2 h each; Q3: 2 GPUs x 140/62 h
    assert Queue.of(obs).jobs == 3
    assert Queue.of(obs).gpu_hours == pytest.approx(2 + 2 + 2 * 140 / 62)
    # the same queue under another draw of its imputed durations weighs the same
    redrawn = Observation(0.0, 0.0, history, finished, np.zeros(n),
                          backlog.replace(duration=np.array([1.0, 7e5, 3.0])), 1, np.zeros(3, bool))
    assert Queue.of(redrawn) == Queue.of(obs)


def test_the_trigger_fires_when_the_jobs_doubled_and_the_queue_is_not_trivial():
    t = ContentionTrigger()  # jobs x2 over the larger of what was seen and 10; 2 hours of the cluster
    seen = Queue(5, 10.0)
    # on 16 GPUs: 2 x max(5, 10) = 20 jobs and 2 x 16 = 32 GPU-hours
    assert t.fires(Queue(20, 32.0), seen, 16) == "queue 20 jobs, 32 GPU-hours; the last round saw 5, 10"
    assert t.fires(Queue(19, 100.0), seen, 16) == ""  # jobs short
    assert t.fires(Queue(100, 31.9), seen, 16) == ""  # a queue of small jobs: under the floor
    assert t.fires(Queue(100, 100.0), None, 16) == ""  # no round yet
    # a big queue seen: its jobs must double again
    assert t.fires(Queue(100, 1000.0), Queue(60, 600.0), 16) == ""
    # a burst of many small jobs behind a few large ones: the jobs sixfold, the GPU-hours not
    # doubled; the new jobs are what a new order would rank
    assert t.fires(Queue(59, 1554.0), Queue(10, 1075.0), 88) != ""
    with pytest.raises(AdaptError, match="factor must be > 1"):
        ContentionTrigger(factor=1.0)


def _burst_trace() -> Trace:
    """A light trace on 1x8 over 6 days, and at day 2.5 a burst of 40 jobs of 4 GPUs x 2 h (320
    GPU-hours: 40 h of the whole cluster)."""
    base = synthetic_trace(days=6, per_day=30, seed=5)
    burst = Trace.from_columns({"job_id": [f"b{i}" for i in range(40)],
                                "submit_time": 2.5 * DAY + np.arange(40) * 60.0,
                                "num_gpus": np.full(40, 4), "duration": np.full(40, 7200.0)})
    cols = {c: np.concatenate([base.columns()[c], burst.columns()[c]]) for c in ("job_id", "submit_time",
                                                                                  "num_gpus", "duration")}
    return Trace.from_columns(cols)


@pytest.mark.parametrize("trigger", [True, False])
def test_a_burst_a_day_after_a_boundary_gets_its_round(trigger):
    s = Settings(period=2 * DAY, history=2 * DAY, first_decision=None, budget=2, samples=2,
                 validation_samples=2, max_validation_samples=2, trigger=trigger)
    res = run_experiment(_burst_trace(), ClusterSpec.uniform_nodes(1, 8), s, ["autosched"],
                         tuner_factory=FakeTuner, model_factory=fake_model_factory)
    rounds = [((d.time - res.boundaries[0]) / DAY, d.trigger.split(":")[0]) for d in res.strategies["autosched"].decisions]
    # rounds at the boundaries (days 2 and 4); checks on days 3 and 5: at day 3 the burst waits
    expected = [(2.0, "period"), (3.0, "contention"), (4.0, "period")] if trigger else [(2.0, "period"), (4.0, "period")]
    assert rounds == expected


def test_the_queue_seen_survives_the_controllers_memory():
    mem = ControllerMemory(policy="tiresias", rounds=1, winners=(), prior=(), reference=None, last_round=5.0,
                           queue={"jobs": 3, "gpu_hours": 1.5})
    back = ControllerMemory.from_json(mem.to_json())
    assert back == mem
    older = mem.to_json().replace(', "queue": {"gpu_hours": 1.5, "jobs": 3}', "")  # stored before the trigger
    assert '"queue"' not in older and ControllerMemory.from_json(older).queue is None
