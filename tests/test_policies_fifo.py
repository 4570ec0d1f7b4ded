"""fifo on tiny traces whose JCTs are worked out by hand (1x4 cluster unless said)."""

import pytest

from simkit import jct, run

PLACEMENTS = ("consolidate", "spread", "count")

# A (t=0, 3 GPUs, 100 s) runs at once and leaves 1 GPU free. B (t=0, 2 GPUs, 50 s) is the head
# and does not fit; C (1 GPU, 10 s) would.
JOBS = [(0, 3, 100), (0, 2, 50), (0, 1, 10)]


@pytest.mark.parametrize("placement", PLACEMENTS)  # one node: every placement is the same here
def test_strict_fifo_blocks_at_the_head(placement):
    sim = run(JOBS, "fifo", {"placement": placement})
    # A: 0-100. B and C wait behind B until A ends: B 100-150, C 100-110.
    assert jct(sim) == [100, 150, 110]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_backfill_lets_a_later_job_pass_the_head(placement):
    sim = run(JOBS, "fifo", {"placement": placement, "backfill": True, "reserve_after": 3600})
    # C backfills at 0 into the free GPU: 0-10. B still starts when A ends: 100-150.
    assert jct(sim) == [100, 150, 10]


@pytest.mark.parametrize("reserve_after, c_jct", [
    (5, 100),   # at t=10 the head B has waited 10 >= 5 s: reserved, C waits for A: 100-110 -> 100
    (20, 10),   # B has waited 10 < 20 s: C backfills at 10: 10-20 -> 10
])
def test_reserve_after_stops_backfill_once_the_head_has_waited(reserve_after, c_jct):
    jobs = [(0, 3, 100), (0, 2, 50), (10, 1, 10)]
    sim = run(jobs, "fifo", {"backfill": True, "reserve_after": reserve_after})
    assert jct(sim) == [100, 150, c_jct]


def test_reserve_after_zero_means_never_backfill():
    sim = run(JOBS, "fifo", {"backfill": True, "reserve_after": 0})
    assert jct(sim) == [100, 150, 110]  # as strict FIFO


def test_equal_submit_times_keep_trace_order():
    # Two 4-GPU jobs at t=0 on 4 GPUs: the first row goes first. 0-30, then 30-50.
    sim = run([(0, 4, 30), (0, 4, 20)], "fifo")
    assert jct(sim) == [30, 50]
