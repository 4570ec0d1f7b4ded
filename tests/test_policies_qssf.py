"""qssf on tiny traces (1x4 cluster), JCTs and estimates worked out by hand."""

import pytest

from autosched.policies import get_policy
from autosched.sim import Simulator
from simkit import cluster, jct, make_trace, run

PLACEMENTS = ("consolidate", "spread", "count")  # one node: every placement is the same here
FALLBACK = {"fallback": 1000.0}


def test_qssf_is_not_an_oracle():
    cls = get_policy("qssf")
    assert cls.oracle is False
    assert set(cls.space.names) >= {"placement", "estimator", "history", "fallback", "preemptive"}


# A (u1, 100 s) finishes at 100, so u1's history is [100]. B (u2, 300 s) runs 100-400.
# C (u1, 500 s) is estimated from A: 100 s x 4 GPUs = 400. D (u2) and E (u3) have no finished
# job of their user (B still runs): fallback 1000 s x 4 = 4000. At 400: C (true 500 s) runs
# 400-900 first although it is the longest; then D 900-950, E 950-960.
HISTORY_JOBS = [(0, 4, 100), (10, 4, 300), (150, 4, 500), (160, 4, 50), (170, 4, 10)]
HISTORY_USERS = ["u1", "u2", "u1", "u2", "u3"]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_estimates_come_from_finished_jobs_only(placement):
    sim = run(HISTORY_JOBS, "qssf", {**FALLBACK, "placement": placement}, users=HISTORY_USERS)
    assert jct(sim) == [100, 390, 750, 790, 790]


def test_unfinished_durations_do_not_change_decisions():
    # D's true duration 50 -> 5000 changes nothing before D ends (an oracle would run D last).
    jobs = list(HISTORY_JOBS)
    jobs[3] = (160, 4, 5000)
    sim = run(jobs, "qssf", FALLBACK, users=HISTORY_USERS)
    assert jct(sim) == [100, 390, 750, 5740, 5740]  # D 900-5900, E 5900-5910


def test_estimate_statistics_over_recent_history():
    # u1 finishes 100, 200, 600 s jobs (one after another, 4 GPUs each); then ask.
    jobs = [(0, 4, 100), (0, 4, 200), (0, 4, 600), (2000, 1, 1)]
    users = ["u1", "u1", "u1", "u1"]
    expected = {
        ("mean", 1000): 300.0, ("median", 1000): 200.0, ("last", 1000): 600.0,
        ("mean", 2): 400.0, ("median", 2): 400.0, ("last", 1): 600.0, ("mean", 1): 600.0,
    }
    for (estimator, history), value in expected.items():
        pol = get_policy("qssf")({"estimator": estimator, "history": history})
        sim = Simulator(make_trace(jobs, users), cluster(), pol).run(until=1000)
        assert sim.policies[0].estimate(3) == pytest.approx(value), (estimator, history)


def test_fallback_goes_from_user_to_vc_to_the_knob():
    # A (u1, vc X, 100 s) finishes; then B (new user u2, vc X) uses vc X's history (100 s);
    # C (u3, vc Y) has neither: the fallback.
    jobs = [(0, 4, 100), (500, 1, 1), (500, 1, 1)]
    pol = get_policy("qssf")(FALLBACK)
    sim = Simulator(make_trace(jobs, ["u1", "u2", "u3"], ["X", "X", "Y"]), cluster(), pol)
    sim.run(until=200)
    q = sim.policies[0]
    assert q.estimate(1) == 100.0
    assert q.estimate(2) == 1000.0


def test_observed_run_time_includes_restart_overhead():
    # A (u1, 4 GPUs, 300 s) under preemptive qssf is preempted by B (u2, known-short user) and
    # pays 40 s: its observed run time, hence u1's history, is 340 s, not the trace's 300.
    jobs = [(0, 1, 10), (20, 4, 300), (30, 4, 10), (2000, 1, 1)]
    users = ["u2", "u1", "u2", "u1"]
    pol = get_policy("qssf")({**FALLBACK, "preemptive": True})
    sim = Simulator(make_trace(jobs, users), cluster(), pol, record_segments=True).run(until=1500)
    # u2's 10 s job finished at 10: B (est 10 x 4 = 40) beats A (fallback 4000): A 20-30,
    # B 30-40, A resumes 40 + 40 + 290 = 370.
    assert sim.records().end[1] == 370.0
    assert sim.policies[0].estimate(3) == 340.0


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("preemptive, expected", [
    # A (u1, 100 s) sets u1's estimate to 100 s. B (u2, fallback: 4000) starts at 110;
    # C (u1, 50 s, priority 400) arrives at 120.
    (True, [100, 1090, 50]),    # C preempts B: C 120-170; B 170 + 40 + 990 = 1200
    (False, [100, 1000, 1040]),  # C waits for B: B 110-1110, C 1110-1160
])
def test_preemptive_knob(placement, preemptive, expected):
    jobs = [(0, 4, 100), (110, 4, 1000), (120, 4, 50)]
    cfg = {**FALLBACK, "preemptive": preemptive, "placement": placement}
    sim = run(jobs, "qssf", cfg, users=["u1", "u2", "u1"])
    assert jct(sim) == expected


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_non_preemptive_qssf_blocks_at_the_head(placement):
    # Ties on priority go to fewer GPUs, then submission. A (3 GPUs) runs 0-100; B (4 GPUs,
    # fallback x 4 = 4000) and C (1 GPU, 4000 / 4 x 1 = 1000) wait: C's priority is better, it
    # fits the free GPU: C 10-20 (it is at the head). D (4 GPUs, 4000, t=30) and E (2 GPUs,
    # 2000, t=40): at 40 E heads but needs 2 GPUs with 1 free, so nothing passes it.
    jobs = [(0, 3, 100), (10, 4, 50), (10, 1, 10), (30, 4, 10), (40, 2, 10), (50, 1, 10)]
    sim = run(jobs, "qssf", {**FALLBACK, "placement": placement})
    # At 50 F (1 GPU, 1000) heads and fits: 50-60. At 100: E (2000) 100-110; B and D (4000,
    # 4 GPUs, B first) wait for E: B 110-160, D 160-170.
    assert jct(sim) == [100, 150, 10, 140, 70, 10]
