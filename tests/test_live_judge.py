"""The judge's counterfactual (live/judge.py) on tiny sacct histories, every figure worked out by
hand: one 8-GPU node, a job running at the change, one queued, two arriving after it, replayed
under an age-only config (first come, first served) and a small-jobs-first one; jobs that had not
finished by the period's end, censored; jittered copies where two jobs' order flips; and
properties on random histories."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.live.history import read_jobs
from autosched.live.judge import (
    JITTER,
    JITTERS,
    Counterfactual,
    PeriodFigures,
    arrival_jitter,
    censored_figures,
    counterfactual,
    replay_trace,
)
from autosched.live.knobs import live_space
from autosched.live.twin import ClusterSetup
from live_helpers import HEADER, row

T = 1_800_000_000.0  # the change
P = 600.0  # the period: judged at T + 600
ONE_NODE = ClusterSetup((("n1", 8),)).cluster_spec()
SPACE = live_space("multifactor")
# every job below needs the whole node, so at most one runs at a time and backfill never starts one
FIFO = SPACE.full({"PriorityWeightAge": 1000, "PriorityWeightJobSize": 0})
SMALL_FIRST = SPACE.full({"PriorityWeightAge": 0, "PriorityWeightJobSize": 100000,
                          "PriorityFavorSmall": True})


def job(job_id, submit, start, end, cpus=1, gpus=8):
    """A sacct row of a job on `gpus` GPUs and `cpus` CPUs (times relative to T)."""
    return row(job_id, T + submit, None if start is None else T + start,
               None if end is None else T + end, gpus, cpus=cpus)


def history(*rows):
    # an old finished job, 600 s long: a job still running at the round is drawn at least that long
    return read_jobs("\n".join([HEADER, job("old", -2000, -2000, -1400), *rows]) + "\n")


# R runs from T - 100 to T + 100 (not judged: it holds the node through the change); Q (8 CPUs,
# the large job) is queued since T - 50; A and B (1 CPU each) arrive at T + 20 and T + 30. With the
# node busy until T + 100, the order after that is the config's:
#   first come, first served: Q 100-400, A 400-500, B 500-600: JCTs 450, 480, 570 -> 500;
#                             waits 150, 380, 470 -> 333.3
#   small first:              A 100-200, B 200-300, Q 300-600: JCTs 180, 270, 650 -> 366.7;
#                             waits 80, 170, 350 -> 200
RUNNING = job("R", -200, -100, 100)
FIFO_ROWS = (RUNNING, job("Q", -50, 100, 400, cpus=8), job("A", 20, 400, 500), job("B", 30, 500, 600))
SMALL_ROWS = (RUNNING, job("Q", -50, 300, 600, cpus=8), job("A", 20, 100, 200), job("B", 30, 200, 300))
FIFO_FIGURES = PeriodFigures(3, 3, 500.0, 1000 / 3)
SMALL_FIGURES = PeriodFigures(3, 3, 1100 / 3, 200.0)


def approx(f: PeriodFigures) -> PeriodFigures:
    return PeriodFigures(f.jobs, f.finished, pytest.approx(f.avg_jct), pytest.approx(f.avg_queue))


def test_censored_figures_by_hand():
    # submitted 0, 10, 20; the first ran 5-50, the second started at 60 and runs on, the third
    # never started: censored at 100, JCTs 50, 90, 80 and waits 5, 50, 80
    f = censored_figures(np.array([0.0, 10, 20]), np.array([5.0, 60, np.nan]),
                         np.array([50.0, np.nan, np.nan]), 100.0)
    assert f == PeriodFigures(3, 1, pytest.approx(220 / 3), pytest.approx(135 / 3))
    # an end or a start after the period's end counts as the end
    assert censored_figures(np.array([0.0]), np.array([120.0]), np.array([150.0]), 100.0) == \
        PeriodFigures(1, 0, 100.0, 100.0)
    assert censored_figures(np.zeros(0), np.zeros(0), np.zeros(0), 1.0).jobs == 0


def test_a_change_that_helps_by_hand():
    # the cluster ran small-first (the new config) and the twin replays it exactly
    cf = counterfactual(history(*SMALL_ROWS), ONE_NODE, "multifactor", FIFO, SMALL_FIRST, T, T + P, T + 700)
    assert cf.realized == approx(SMALL_FIGURES)
    assert cf.new == approx(SMALL_FIGURES)
    assert cf.old == approx(FIFO_FIGURES)
    assert (cf.running_at_change, cf.queued_at_change, cf.imputed) == (1, 1, 0)
    assert cf.period() == {"start": T, "end": T + P, "running_at_change": 1, "queued_at_change": 1,
                           "imputed": 0}


def test_a_change_that_hurts_by_hand():
    # the other way round: the change is to first come, first served, and the cluster ran it
    cf = counterfactual(history(*FIFO_ROWS), ONE_NODE, "multifactor", SMALL_FIRST, FIFO, T, T + P, T + 700)
    assert (cf.realized, cf.new, cf.old) == (approx(FIFO_FIGURES), approx(FIFO_FIGURES), approx(SMALL_FIGURES))


def test_the_twin_is_judged_against_what_really_happened():
    # the cluster ran first come, first served while the small-first config was live: the twin
    # under the new config (366.7 s) misses the realized 500 s
    cf = counterfactual(history(*FIFO_ROWS), ONE_NODE, "multifactor", FIFO, SMALL_FIRST, T, T + P, T + 700)
    assert cf.realized == approx(FIFO_FIGURES) and cf.new == approx(SMALL_FIGURES)


def test_unfinished_jobs_are_censored_at_the_period_end_in_every_figure():
    # Q has run since T + 300 and still runs at the round (T + 700): it counts 650 s (T - 50 to
    # T + 600). Its drawn duration is at least 600 s (the longest finished job, longer than the 400 s
    # it has run), so wherever the replay starts it, it runs past T + 600.
    #   small first (as it ran): A 180, B 270, Q 650 -> 366.7; waits 80, 170, 350 -> 200
    #   first come, first served: Q from 100 on, censored at 650; A and B wait to the end:
    #     JCTs 580, 570 -> (650 + 580 + 570) / 3 = 600; waits 150, 580, 570 -> 433.3
    rows = (RUNNING, job("Q", -50, 300, None, cpus=8), job("A", 20, 100, 200), job("B", 30, 200, 300))
    cf = counterfactual(history(*rows), ONE_NODE, "multifactor", FIFO, SMALL_FIRST, T, T + P, T + 700)
    assert cf.realized == PeriodFigures(3, 2, pytest.approx(1100 / 3), pytest.approx(200.0))
    assert cf.new == PeriodFigures(3, 2, pytest.approx(1100 / 3), pytest.approx(200.0))
    assert cf.old == PeriodFigures(3, 0, pytest.approx(600.0), pytest.approx(1300 / 3))
    assert cf.imputed == 1


def test_a_judge_that_waits_censors_later_and_judges_the_same_jobs():
    # The period is T to T + 250; C (the whole node, like Q) comes at T + 300, after it. Censored
    # at T + 250, none of Q, A, B had finished (Q ran 100-400). Waiting to T + 700 judges the same
    # three, now all finished, with C replayed beside them (after them in either order: in small
    # first C ties with Q on size and comes later): the figures of the by-hand cases above.
    rows = (*FIFO_ROWS, job("C", 300, 600, 650, cpus=8))
    h = history(*rows)
    short = counterfactual(h, ONE_NODE, "multifactor", SMALL_FIRST, FIFO, T, T + 250, T + 700)
    assert (short.end, short.realized.jobs, short.realized.finished) == (T + 250, 3, 0)
    late = counterfactual(h, ONE_NODE, "multifactor", SMALL_FIRST, FIFO, T, T + 250, T + 700, censor=T + 700)
    assert late.end == T + 700
    assert (late.realized, late.new, late.old) == (approx(FIFO_FIGURES), approx(FIFO_FIGURES), approx(SMALL_FIGURES))


def test_a_job_still_queued_at_the_period_end_counts_its_wait_so_far():
    # C (T + 400, 1 CPU, 300 s) had not started by T + 600 on the cluster; it ran later, so its
    # real duration is known (the round is at T + 1200). Under either config the node is busy
    # until T + 600 (B, or Q, which started at 300 before C arrived), so C starts at 600: it
    # counts 200 s of JCT, all waiting; Q, ending at 600 in the small-first replay, has finished.
    rows = (*FIFO_ROWS, job("C", 400, 600, 900))
    cf = counterfactual(history(*rows), ONE_NODE, "multifactor", SMALL_FIRST, FIFO, T, T + P, T + 1200)
    assert cf.realized == PeriodFigures(4, 3, pytest.approx((1500 + 200) / 4), pytest.approx((1000 + 200) / 4))
    assert cf.new == cf.realized
    assert cf.old == PeriodFigures(4, 3, pytest.approx((1100 + 200) / 4), pytest.approx((600 + 200) / 4))


def test_the_replay_starts_from_the_backlog_at_the_change():
    rp = replay_trace(history(*SMALL_ROWS), T, T + P, T + 700)
    rows = {j: k for k, j in enumerate(rp.trace.job_id.tolist())}
    assert set(rows) == {"R", "Q", "A", "B"}  # the job that ended before the change is left out
    submit = rp.trace.submit_time + rp.origin
    # R arrives at its real start, Q at the change with its age, A and B when they were submitted
    assert [submit[rows[j]] - T for j in "RQAB"] == [-100, 0, 20, 30]
    assert [rp.trace.age[rows[j]] for j in "RQAB"] == [100, 50, 0, 0]
    assert [rp.trace.duration[rows[j]] for j in "RQAB"] == [200, 300, 100, 100]
    assert [bool(rp.judged[rows[j]]) for j in "RQAB"] == [False, True, True, True]
    assert [rp.submit[rows[j]] - T for j in "QAB"] == [-50, 20, 30]
    assert rp.origin == math.floor((T - 100) / 86400) * 86400


# Jittered copies, on a period where order is all that matters: A (100 s, 8 CPUs: the large job)
# and B (10 s, 1 CPU) are both submitted at T + 20 to the 8-GPU node and each needs all of it.
# The cluster ran small first as slurmctld does: its loop ticks once a second, so B ran 21-31 and
# A 31-131. In the replay on the recorded times both arrive at T + 20, a tick, and the pass starts
# one at once; in a copy each arrives up to 0.5 s later and waits for the tick at T + 21, and the
# other starts when it ends:
#   small first (new), recorded:         B 20-30, A 30-130: JCTs 10, 110 -> 60; waits 0, 10 -> 5
#   small first, any copy:               B 21-31, A 31-131: JCTs 11, 111 -> 61; waits 1, 11 -> 6
#   first come, first served (old), recorded (a tie: A, listed first, goes first):
#                                        A 20-120, B 120-130: JCTs 100, 110 -> 105; waits 0, 100 -> 50
#   first come, first served, a copy where A arrives first: A 21-121, B 121-131 -> 106; 51
#   first come, first served, a copy where B arrives first: B 21-31, A 31-131 -> 61; 6
PAIR = (job("A", 20, 31, 131, cpus=8), job("B", 20, 21, 31))


def test_jittered_copies_where_the_order_flips_by_hand():
    # seed 0: A's and B's arrival jitters per copy; B arrives first in copies 1, 3 and 4
    u = [arrival_jitter(0, k, 2) for k in range(1, JITTERS + 1)]
    assert [bool(b < a) for a, b in u] == [True, False, True, True]
    assert all(0 <= x < JITTER for x in np.concatenate(u))
    cf = counterfactual(history(*PAIR), ONE_NODE, "multifactor", FIFO, SMALL_FIRST, T, T + P, T + 700, seed=0)
    assert (cf.realized, cf.old, cf.new) == (PeriodFigures(2, 2, 61.0, 6.0), PeriodFigures(2, 2, 105.0, 50.0),
                                             PeriodFigures(2, 2, 60.0, 5.0))
    small, a_first = PeriodFigures(2, 2, 61.0, 6.0), PeriodFigures(2, 2, 106.0, 51.0)
    assert cf.copies == ((small, small), (a_first, small), (small, small), (small, small))
    # gains (old - new) / old: 45/105 on the recorded times, 45/106 where A went first, else 0;
    # the recorded replay alone says +42.9%, the five say +17.0% on average
    gains = [45 / 105, 0.0, 45 / 106, 0.0, 0.0]
    assert cf.gains("avg_jct").tolist() == pytest.approx(gains)
    assert cf.gain_mean("avg_jct") == pytest.approx(sum(gains) / 5)
    assert cf.gain_sd("avg_jct") == pytest.approx(float(np.std(gains, ddof=1)))
    assert cf.gain_range("avg_jct") == (0.0, pytest.approx(45 / 105))
    # waits: (50 - 5) / 50 = 90% recorded, (51 - 6) / 51 where A went first
    assert cf.gains("avg_queue").tolist() == pytest.approx([0.9, 0.0, 45 / 51, 0.0, 0.0])
    # the twin under the new config against the realized 61 s: 1/61 recorded, exact in the copies
    assert cf.twin_error("avg_jct") == pytest.approx(1 / 61 / 5)
    # the same seed gives the same copies; another seed other ones
    again = counterfactual(history(*PAIR), ONE_NODE, "multifactor", FIFO, SMALL_FIRST, T, T + P, T + 700, seed=0)
    assert again == cf


def test_without_copies_the_counterfactual_is_the_recorded_replay_alone():
    cf = counterfactual(history(*PAIR), ONE_NODE, "multifactor", FIFO, SMALL_FIRST, T, T + P, T + 700,
                        seed=0, jitters=0)
    assert cf == Counterfactual(T, T + P, PeriodFigures(2, 2, 61.0, 6.0), PeriodFigures(2, 2, 105.0, 50.0),
                                PeriodFigures(2, 2, 60.0, 5.0), running_at_change=0, queued_at_change=0,
                                imputed=0)
    assert cf == replace(counterfactual(history(*PAIR), ONE_NODE, "multifactor", FIFO, SMALL_FIRST, T,
                                        T + P, T + 700, seed=0), copies=())
    assert cf.replays() == ((cf.old, cf.new),)
    assert (cf.gain_mean("avg_jct"), cf.gain_sd("avg_jct")) == (pytest.approx(45 / 105), None)
    assert cf.gain_range("avg_jct") == (pytest.approx(45 / 105),) * 2
    assert cf.twin_error("avg_jct") == pytest.approx(1 / 61)


def test_a_copy_moves_every_arrival_later_by_under_the_jitter_and_keeps_the_age():
    rec = replay_trace(history(*SMALL_ROWS), T, T + P, T + 700, seed=3)
    cp = replay_trace(history(*SMALL_ROWS), T, T + P, T + 700, seed=3, copy=2)
    order = {j: k for k, j in enumerate(cp.trace.job_id.tolist())}
    # R, Q, A and B are 30 s or more apart: the copy keeps their order
    assert rec.trace.job_id.tolist() == cp.trace.job_id.tolist()
    # (in the order the history lists them, which is theirs; to a microsecond: unix times)
    shift = cp.trace.submit_time - rec.trace.submit_time
    assert shift.tolist() == pytest.approx(arrival_jitter(3, 2, 4).tolist(), abs=1e-6)
    assert (cp.trace.age == rec.trace.age).all() and (cp.submit == rec.submit).all()
    assert [cp.trace.duration[order[j]] for j in "RQAB"] == [200, 300, 100, 100]


def test_a_copy_that_reorders_the_queue_keeps_each_jobs_own_age():
    # Q1 and Q2, queued since T - 50 and T - 40, both arrive at the change; in copy 1 of seed 1
    # Q2's jitter (0.25 s) is below Q1's (0.31 s), so Q2 comes first in the copy's trace. Each
    # keeps its own age (50 and 40 s) and real submission, and R stays the one not judged.
    rows = (RUNNING, job("Q1", -50, None, None), job("Q2", -40, None, None))
    u = arrival_jitter(1, 1, 3)
    assert u[2] < u[1]
    rp = replay_trace(history(*rows), T, T + P, T + 700, seed=1, copy=1)
    assert rp.trace.job_id.tolist() == ["R", "Q2", "Q1"]
    assert rp.trace.age.tolist() == [100, 40, 50]
    assert (rp.submit - T).tolist() == [-200, -40, -50]
    assert rp.judged.tolist() == [False, True, True]
    assert (rp.trace.submit_time + rp.origin - T).tolist() == pytest.approx([-100 + u[0], u[2], u[1]], abs=1e-6)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(-300, 500), st.integers(0, 400), st.integers(1, 400),
                          st.sampled_from([1, 2, 4, 8]), st.integers(1, 8)), min_size=1, max_size=8))
def test_properties_on_random_histories(jobs):
    """The same config twice gives the same figures, in every replay (a gain of 0, on the
    recorded times and on each jittered copy); every figure is censored at the period's end (no
    JCT beyond it, a wait no longer than the JCT); the judged jobs are the same in every account."""
    rows = [job(f"j{i}", s, s + w, s + w + d, cpus=c, gpus=g) for i, (s, w, d, g, c) in enumerate(jobs)]
    h = history(*rows)
    cf = counterfactual(h, ONE_NODE, "multifactor", FIFO, FIFO, T, T + P, T + 2000)
    assert len(cf.copies) == JITTERS and all(old == new for old, new in cf.replays())
    assert cf.gains("avg_jct").tolist() == [0.0] * (JITTERS + 1)
    judged = [(s, w) for s, w, *_ in jobs if s >= 0 and s < P or s < 0 and s + w >= 0]
    for f in (cf.realized, *(old for old, _ in cf.replays())):
        assert f.jobs == len(judged) and f.finished <= f.jobs
        if f.jobs:
            longest = max(P - s for s, _ in judged)
            assert 0 <= f.avg_queue <= f.avg_jct <= longest + 1e-9
