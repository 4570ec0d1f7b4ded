"""sjf and srtf (ORACLE baselines) on tiny traces (1x4 cluster), JCTs worked out by hand."""

import pytest

from autosched.policies import get_policy
from autosched.sim import SimulationError
from simkit import jct, run

PLACEMENTS = ("consolidate", "spread", "count")  # one node: every placement is the same here


@pytest.mark.parametrize("name", ["sjf", "srtf"])
def test_oracles_say_so(name):
    cls = get_policy(name)
    assert cls.oracle is True
    assert "ORACLE" in cls.summary
    assert "placement" in cls.space


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_sjf_orders_by_true_duration(placement):
    jobs = [(0, 4, 100), (10, 2, 300), (20, 2, 200), (30, 4, 50)]
    sim = run(jobs, "sjf", {"placement": placement})
    # A: 0-100. Then by duration: D (50 s, 4 GPUs) 100-150; C (200 s) and B (300 s) at 150:
    # C 150-350, B 150-450.
    assert jct(sim) == [100, 440, 330, 120]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_sjf_blocks_at_the_head(placement):
    jobs = [(0, 3, 100), (10, 4, 10), (20, 1, 50)]
    sim = run(jobs, "sjf", {"placement": placement})
    # B (10 s) heads the queue but needs 4 GPUs; C (1 GPU) fits but may not pass it (Lucid).
    # B 100-110, C 110-160.
    assert jct(sim) == [100, 100, 140]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_srtf_preempts_for_shorter_remaining_work(placement):
    sim = run([(0, 4, 100), (30, 4, 20)], "srtf", {"placement": placement})
    # At 30 A has 70 s left > B's 20: B 30-50. A resumes at 50: 50 + 40 + 70 = 160.
    assert jct(sim) == [160, 20]
    rec = sim.records()
    assert rec.preemptions.tolist() == [1, 0]
    assert rec.run_time.tolist() == [30 + 40 + 70, 20]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_srtf_keeps_a_job_with_less_left(placement):
    sim = run([(0, 4, 100), (30, 4, 80)], "srtf", {"placement": placement})
    # At 30 A has 70 s left < 80: no preemption. A 0-100, B 100-180.
    assert jct(sim) == [100, 150]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_srtf_takes_jobs_greedily_by_count(placement):
    # A (4 GPUs, 100 s) runs; at 10 B (2 GPUs, 20 s) and C (2 GPUs, 500 s) arrive. Order by
    # remaining: B 20, A 90, C 500. B takes 2 GPUs, A (4) no longer fits: preempted; C (2) fits.
    # B 10-30, C 10-510. At 30 A (90 left, 4 GPUs) outranks C but only 2 GPUs are free... the
    # greedy pass takes A (quota 4) and preempts C (500 > 90). A: 30 + 40 + 90 = 160.
    # C resumes at 160 with 500 - 20 = 480 left: 160 + 40 + 480 = 680 -> JCT 670.
    sim = run([(0, 4, 100), (10, 2, 20), (10, 2, 500)], "srtf", {"placement": placement})
    assert jct(sim) == [160, 20, 670]


def test_non_oracle_policies_cannot_read_remaining_work():
    sim = run([(0, 1, 10)], "fifo")
    with pytest.raises(SimulationError, match="oracle"):
        sim.partitions[0].remaining(0, 0.0)
    assert sim.jobs.duration is None


def test_sjf_breaks_ties_by_submission():
    # B and C both take 50 s: B (submitted first) runs first after A.
    sim = run([(0, 4, 100), (10, 4, 50), (20, 4, 50)], "sjf")
    assert jct(sim) == [100, 140, 180]
