"""The round's framing as Slurm has it: a job running at the round keeps running in every
evaluation workload, and only the queued and new jobs follow the config under test."""

from __future__ import annotations

import numpy as np
import pytest

from autosched.adapt.controller import round_workloads
from autosched.adapt.observe import RUNNING_LEAD, Observation, carried_over, observe
from autosched.adapt.sources import ReplaySource
from autosched.cluster import ClusterSpec
from autosched.policies import get_policy
from autosched.sim import Simulator
from autosched.trace import Trace

NOW = 1000.0
SMALL_FIRST = {"PriorityWeightAge": 0, "PriorityWeightFairshare": 0, "PriorityWeightJobSize": 100000,
               "PriorityFavorSmall": True, "backfill": False, "PriorityCalcPeriod": 1}


def _backlog_obs() -> Observation:
    """At t=1000 on 2x8: R (16 GPUs) runs with 900 s left; Q (1 GPU, 100 s) is queued."""
    backlog = Trace.from_columns({"job_id": ["R", "Q"], "submit_time": [NOW, NOW], "num_gpus": [16, 1],
                                  "duration": [900.0, 100.0]})
    empty = backlog.take(np.array([], dtype=np.int64))
    return Observation(NOW, 0.0, empty, np.zeros(0, bool), np.zeros(0), backlog, 0, np.array([True, False]))


@pytest.mark.parametrize("frame, r_start, q_start", [
    # framed: R is submitted at 940, alone, and starts at Slurm's first pass (940); Q, small first
    # but with no room, waits for R's end at 940 + 900 = 1840
    (True, NOW - RUNNING_LEAD, 1840.0),
    # re-queued: R and Q both wait at 1000; small first starts Q at once, and R (16 GPUs, no
    # room beside Q) is held back until Q ends at 1100: what no real Slurm would do to R
    (False, 1100.0, NOW),
])
def test_a_running_job_is_never_held_back_by_a_new_order(frame, r_start, q_start):
    work = carried_over(_backlog_obs(), frame_running=frame)
    rows = {j: i for i, j in enumerate(work.job_id.tolist())}
    sim = Simulator(work, ClusterSpec.uniform_nodes(2, 8), get_policy("multifactor")(SMALL_FIRST)).run()
    start = sim.records().first_start
    assert (start[rows["R"]], start[rows["Q"]]) == (r_start, q_start)


def test_observe_marks_the_running_jobs_and_what_is_left_of_their_limit():
    # 1x8: C and D (1 GPU each) run 0-5; A (8 GPUs, limit 5000 s) starts when it comes, at 10;
    # B (4 GPUs) queues behind it. Observed at 1000: A has run 990 s, 4010 s of its limit left;
    # B is queued with its whole limit.
    tr = Trace.from_columns({"job_id": ["C", "D", "A", "B"], "submit_time": [0.0, 0.0, 10.0, 20.0],
                             "num_gpus": [1, 1, 8, 4], "duration": [5.0, 5.0, 3000.0, 50.0],
                             "time_limit": [60.0, 60.0, 5000.0, 600.0]})
    sim = Simulator(tr, ClusterSpec.uniform_nodes(1, 8), get_policy("fifo")({}))
    sim.run(until=1000.0)
    obs = observe(sim, 1000.0, 0.0)
    by_id = dict(zip(obs.backlog.job_id.tolist(), zip(obs.running.tolist(), obs.backlog.time_limit.tolist())))
    assert by_id == {"A": (True, 4010.0), "B": (False, 600.0)}
    framed = carried_over(obs)
    assert dict(zip(framed.job_id.tolist(), framed.submit_time.tolist())) == {"A": 940.0, "B": 1000.0}


def test_round_workloads_frame_the_running_jobs_unless_told_not_to():
    obs = _backlog_obs()
    history = Trace.from_columns({"job_id": ["h"], "submit_time": [500.0], "num_gpus": [1], "duration": [10.0]})
    obs = Observation(NOW, 0.0, history, np.ones(1, bool), np.array([510.0]), obs.backlog, 0, obs.running)
    cluster = ClusterSpec.uniform_nodes(2, 8)
    framed, = round_workloads(ReplaySource(), obs, 600.0, cluster, 0)
    queued, = round_workloads(ReplaySource(), obs, 600.0, cluster, 0, frame_running=False)
    # the last 600 s ([400, 1000)) replayed from now: h at 500 comes at 1100
    assert sorted(zip(framed.job_id.tolist(), framed.submit_time.tolist())) == [
        ("Q", NOW), ("R", NOW - RUNNING_LEAD), ("h", 1100.0)]
    assert sorted(queued.submit_time.tolist()) == [NOW, NOW, 1100.0]
