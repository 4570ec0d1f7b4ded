"""tiresias on tiny traces (1x4 cluster, restart overhead 40 s), JCTs worked out by hand.

On one node every placement gives the same result, so each case runs under all three.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.policies import get_policy
from autosched.policies.tiresias import Tiresias
from autosched.sim import Simulator
from reference_tiresias import ReferenceTiresias
from simkit import cluster, jct, make_trace, run

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
    # Tiresias's rule: a waiting job is promoted once its waits since its last promotion reach
    # 1 x the seconds it ran since then. Each run below lasts 100 s (400 GPU-s for A, 200 for B, C
    # per run, so B and C are demoted after two runs since their last promotion).
    # 100: A demoted, preempted (ran 100 s): due at 200. B, C start.
    # 200: A promoted (queue 0, first in submission order): B, C preempted (queue 0: not watched).
    # 300: A demoted again (40 s overhead + 60 s work, 140 left); ran 100 s since promotion,
    #      due at 400. B, C resume (140 left after this run's 60 s of work).
    # 400: A promoted; B, C demoted (400 GPU-s) and preempted; each ran 200 s and waited 100 s
    #      (200-300) since its start: due at 500. A: 80 left at 500.
    # 500: A demoted, preempted (due at 600); B, C promoted and resume (80 left at 600).
    # 600: A promoted, B, C preempted (queue 0). 700: A demoted (20 left), due at 800; B, C resume.
    # 800: A promoted; B, C demoted (20 left), due at 800 + 200 - 100 = 900. A: 800+40+20 = 860.
    # 860: B, C resume: 860 + 40 + 20 = 920 -> JCT 870.
    assert jct(sim) == [860, 870, 870]
    rec = sim.records()
    assert rec.preemptions.tolist() == [4, 4, 4]
    assert rec.run_time.tolist() == [300 + 4 * 40, 300 + 4 * 40, 300 + 4 * 40]


def test_starvation_with_a_threshold_below_the_restart_overhead_terminates():
    sim = Simulator(make_trace([(0, 4, 300), (10, 4, 300)]), cluster(1, 4),
                    get_policy("tiresias")({"queues": 2, "threshold": 100.0, "starvation": 1.0}))
    # A 4-GPU job leaves queue 0 after threshold/4 = 25 s of holding GPUs, less than the 40 s
    # restart overhead: were it promoted back without having done any work, the two jobs would
    # preempt each other forever. Bounded run: a regression must fail, not hang the suite.
    sim.run(until=100_000)
    assert sim.finished == 2


# ------------------------------------- the fast class equals the reference written from the definition

class CheckedTiresias(Tiresias):
    """The fast class, with its queue book's invariant checked after every decision."""

    def schedule(self, now: float) -> None:
        super().schedule(now)
        self.book.check()


def test_the_book_check_catches_a_broken_invariant():
    sim = Simulator(make_trace([(0, 1, 100), (0, 2, 100), (5, 1, 50)]), cluster(1, 2), CheckedTiresias())
    sim.run(until=10)
    book = sim.policies[0].book
    book.check()
    book.total[0] += 1  # a queue total that no longer matches its members
    with pytest.raises(AssertionError):
        book.check()


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_decisions_equal_the_reference_implementation(data):
    nodes, gpn = data.draw(st.sampled_from([(1, 4), (2, 4), (3, 2), (2, 8)]))
    n = data.draw(st.integers(1, 25))
    submits = sorted(data.draw(st.lists(st.integers(0, 400), min_size=n, max_size=n)))
    jobs = [(s, data.draw(st.sampled_from([g for g in (1, 1, 1, 2, 3, 4, 8) if g <= nodes * gpn])),
             data.draw(st.integers(1, 600))) for s in submits]
    cfg = {
        "queues": data.draw(st.integers(1, 4)),
        "threshold": data.draw(st.sampled_from([100.0, 300.0, 1000.0])),
        "threshold_growth": data.draw(st.sampled_from([1.5, 4.0])),
        "queue_order": data.draw(st.sampled_from(["submit", "running_first"])),
        "placement": data.draw(st.sampled_from(["consolidate", "spread", "count"])),
        "min_run": data.draw(st.sampled_from([0.0, 50.0])),
        "starvation": data.draw(st.sampled_from([0.0, 1.0])),
        "interval": data.draw(st.sampled_from([0.0, 0.0, 60.0])),
    }
    # and, in half the cases, a reconfiguration mid-run (queues re-filed, cuts rebuilt)
    switch = data.draw(st.one_of(st.none(), st.tuples(st.integers(0, 500), st.fixed_dictionaries({
        "queues": st.integers(1, 4), "queue_order": st.sampled_from(["submit", "running_first"]),
        "min_run": st.sampled_from([0.0, 50.0]), "starvation": st.sampled_from([0.0, 0.5, 1.0])}))))
    tr, spec = make_trace(jobs), cluster(nodes, gpn)

    def run(cls):
        sim = Simulator(tr, spec, cls(cfg), record_segments=True)
        if switch is not None:
            sim.run(until=switch[0])
            sim.reconfigure(dict(cfg, **switch[1]))
        return sim.run()

    assert run(CheckedTiresias).segments == run(ReferenceTiresias).segments


def test_a_promotion_that_falls_due_as_its_job_is_preempted_fires_at_the_next_event():
    """A (t=0) and B (t=20), one GPU each, 2,000 s, and C (t=400, 10 s); 1x1 GPU, no restart
    overhead, 2 queues at 100 GPU-s, starvation off. A runs 0-100 (then demoted), B 100-200
    (demoted; A is older), A 200-320. At 320 the operator sets starvation=0.25. B (ran 100 s,
    waited 120 s since) is promoted at once and preempts A. A (ran 220 s, waited 100 s) qualifies
    the moment it is preempted; like the Tiresias simulator, which checks starvation only when
    it schedules, it is promoted at the next event: C's arrival at 400. Being the oldest of the
    top queue, A then runs again. (This used to hang on whether a stale timer happened to wake
    the partition in between.)"""
    cfg = {"queues": 2, "threshold": 100.0, "starvation": 0.0}
    sim = Simulator(make_trace([(0, 1, 2000), (20, 1, 2000), (400, 1, 10)]),
                    cluster(1, 1, restart_overhead=(0.0, 0.0)), get_policy("tiresias")(cfg), record_segments=True)
    sim.run(until=320)
    sim.reconfigure(dict(cfg, starvation=0.25))
    sim.run()
    first = sorted(sim.segments, key=lambda s: (s[1], s[0]))[:5]
    assert [(j, b, e) for j, b, e, _ in first][:4] == [
        (0, 0.0, 100.0), (1, 100.0, 200.0), (0, 200.0, 320.0), (1, 320.0, 400.0)]
    assert first[4][:2] == (0, 400.0)


def test_a_promotion_due_at_its_decision_does_not_hide_a_later_demotion():
    """Found by the reference implementation. 1x4 GPUs, 40 s restart overhead, 2 queues at 100
    GPU-s, starvation 1. Job 7 (4 GPUs) has attained exactly 100 GPU-s at 99 s and is demoted and
    preempted by job 8 (1 GPU, 23 s run before, 38 s of work left). Job 7 ran 25 s and has waited
    25 s since its last promotion: its promotion falls due at 99 s, the instant of the decision
    that preempts it, so it fires at the partition's next event. That event is job 8's crossing
    of 100 GPU-s at 99 + (100 - 23) = 176 s (job 8 would finish at 99 + 40 + 38 = 177 s): job 7 is
    promoted, job 8 demoted, and job 7 (older, same top queue) takes the GPUs at 176 s. The fast
    class used to ask for a wake-up at the promotion's own time (refused: not in the future) and
    none for the demotion, so both waited until job 8 finished at 177 s."""
    jobs = [(0, 4, 26), (0, 1, 1), (0, 1, 1), (0, 1, 1), (0, 1, 24), (0, 1, 1), (0, 1, 1), (0, 4, 2), (0, 1, 61)]
    cfg = dict(queues=2, threshold=100.0, threshold_growth=1.5, starvation=1.0)
    sim = Simulator(make_trace(jobs), cluster(1, 4), get_policy("tiresias")(cfg), record_segments=True).run()
    segs = [(j, b, e) for j, b, e, _ in sim.segments]
    assert (7, 75.0, 99.0) in segs and (8, 99.0, 176.0) in segs and (7, 176.0, 201.0) in segs
