"""The judge's counterfactual (live/judge.py) on tiny sacct histories, every figure worked out by
hand: one 8-GPU node, a job running at the change, one queued, two arriving after it, replayed
under an age-only config (first come, first served) and a small-jobs-first one; jobs that had not
finished by the period's end, censored; and properties on random histories."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.live.history import read_jobs
from autosched.live.judge import PeriodFigures, censored_figures, counterfactual, replay_trace
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


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(-300, 500), st.integers(0, 400), st.integers(1, 400),
                          st.sampled_from([1, 2, 4, 8]), st.integers(1, 8)), min_size=1, max_size=8))
def test_properties_on_random_histories(jobs):
    """The same config twice gives the same figures; every figure is censored at the period's end
    (no JCT beyond it, a wait no longer than the JCT); the judged jobs are the same three times."""
    rows = [job(f"j{i}", s, s + w, s + w + d, cpus=c, gpus=g) for i, (s, w, d, g, c) in enumerate(jobs)]
    h = history(*rows)
    cf = counterfactual(h, ONE_NODE, "multifactor", FIFO, FIFO, T, T + P, T + 2000)
    assert cf.old == cf.new
    judged = [(s, w) for s, w, *_ in jobs if s >= 0 and s < P or s < 0 and s + w >= 0]
    for f in (cf.realized, cf.old):
        assert f.jobs == len(judged) and f.finished <= f.jobs
        if f.jobs:
            longest = max(P - s for s, _ in judged)
            assert 0 <= f.avg_queue <= f.avg_jct <= longest + 1e-9
