"""tiresias on tiny traces (1x4 cluster, restart overhead 40 s), JCTs worked out by hand.

On one node every placement gives the same result, so each case runs under all three.
"""

import pytest

from simkit import jct, run

PLACEMENTS = ("consolidate", "spread", "count")
TWO_QUEUES = {"queues": 2, "threshold": 400.0}

# A (t=0, 4 GPUs, 300 s) and B (t=50, 4 GPUs, 100 s).
DEMOTE_JOBS = [(0, 4, 300), (50, 4, 100)]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_demotion_at_the_threshold_and_restart_overhead(placement):
    sim = run(DEMOTE_JOBS, "tiresias", {**TWO_QUEUES, "placement": placement})
    # A holds 4 GPUs from 0: attained 400 GPU-s at t=100 -> queue 1. B (queue 0, waiting since
    # 50) preempts it: B 100-200. A resumes at 200, pays 40 s, runs its last 200 s: ends 440.
    assert jct(sim) == [440, 150]
    rec = sim.records()
    assert rec.preemptions.tolist() == [1, 0]
    assert rec.run_time.tolist() == [100 + 40 + 200, 100]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_below_the_threshold_nobody_is_preempted(placement):
    sim = run(DEMOTE_JOBS, "tiresias", {"queues": 2, "threshold": 1300.0, "placement": placement})
    # A reaches 1200 GPU-s when it ends at 300 < 1300: never demoted; FIFO within queue 0.
    assert jct(sim) == [300, 350]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_min_run_protects_a_fresh_job(placement):
    sim = run(DEMOTE_JOBS, "tiresias", {**TWO_QUEUES, "min_run": 150.0, "placement": placement})
    # A is demoted at 100 but ran only 100 < 150 s: kept until 150. B 150-250. A resumes at 250
    # with 150 s left: 250 + 40 + 150 = 440.
    assert jct(sim) == [440, 200]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_interval_decides_only_on_multiples_of_60(placement):
    sim = run(DEMOTE_JOBS, "tiresias", {**TWO_QUEUES, "interval": 60.0, "placement": placement})
    # Decisions at 0, 60, 120, ... A is demoted at 100 but seen at 120: B 120-220 (no overhead).
    # A (120 s done, 180 left) waits for the tick at 240: 240 + 40 + 180 = 460.
    assert jct(sim) == [460, 170]


# A (t=0, 4 GPUs, 300 s); B, C (t=50, 2 GPUs, 300 s each); threshold 400 GPU-s.
STARVE_JOBS = [(0, 4, 300), (50, 2, 300), (50, 2, 300)]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_without_starvation_promotion(placement):
    sim = run(STARVE_JOBS, "tiresias", {**TWO_QUEUES, "placement": placement})
    # 100: A demoted (200 s left), B and C start (demoted after 400/2 = 200 s, at 300).
    # 300: all in queue 1, submission order: A resumes 300 + 40 + 200 = 540; B, C (100 s left)
    # are preempted and resume at 540: 540 + 40 + 100 = 680 -> JCT 630.
    assert jct(sim) == [540, 630, 630]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_starvation_promotion(placement):
    sim = run(STARVE_JOBS, "tiresias", {**TWO_QUEUES, "starvation": 1.0, "placement": placement})
    # 100: A preempted after 100 s of run: promoted once it has waited 1 x 100 s, at 200.
    # 200: A back in queue 0 (attained forgiven), first in submission order: B, C preempted
    #      (100 s done each, still queue 0: not watched). A pays 40 s, demoted again at 300
    #      (400 GPU-s since promotion) with 200 - 60 = 140 s left.
    # 300: B, C resume (40 s overhead); attained 200 -> demoted at 400 with 300-100-60 = 140 left.
    # 400: queue 1 = A, B, C: A resumes 400 + 40 + 140 = 580. B, C resume at 580 + 40 + 140 = 760.
    assert jct(sim) == [580, 710, 710]
    rec = sim.records()
    assert rec.preemptions.tolist() == [2, 2, 2]
    assert rec.run_time.tolist() == [300 + 2 * 40, 300 + 2 * 40, 300 + 2 * 40]
