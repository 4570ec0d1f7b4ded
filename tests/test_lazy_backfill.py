"""The lazy backfill planner against the reference planner (`backfill.slurm_backfill`): the same
starts on random traces, and each of its parts against the reference's on random states."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autosched.cluster import ClusterSpec, SlurmPartition
from autosched.policies import backfill, get_policy, lazy_backfill
from autosched.policies.multifactor import Multifactor
from autosched.sim import Simulator
from simkit import make_trace

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def traces(draw):
    """Small traces with time limits on a few nodes, under random bf_* settings and priorities,
    with one to three Slurm partitions (overlapping, with tiers) or none."""
    n = draw(st.integers(1, 25))
    nodes, gpn = draw(st.integers(1, 5)), draw(st.sampled_from([1, 2, 4, 8]))
    submits = sorted(draw(st.lists(st.integers(0, 400), min_size=n, max_size=n)))
    gpus = draw(st.lists(st.integers(1, nodes * gpn), min_size=n, max_size=n))
    durs = draw(st.lists(st.integers(1, 600), min_size=n, max_size=n))
    # limits: some below the run time (ended at the limit), some none (inf), round values repeat
    limits = draw(st.lists(st.one_of(st.integers(1, 900), st.sampled_from([60, 300, 600]), st.just(math.nan)),
                           min_size=n, max_size=n))
    cfg = {"bf_interval": draw(st.sampled_from([1, 7, 30])),
           "bf_resolution": draw(st.sampled_from([1, 7, 60])),
           "bf_window": draw(st.sampled_from([1, 5, 1440])),
           "bf_max_job_test": draw(st.sampled_from([1, 3, 500])),
           "placement": draw(st.sampled_from(["consolidate", "first_fit", "spread", "count"])),
           "PriorityWeightAge": draw(st.sampled_from([0, 1000])), "PriorityMaxAge": 600.0,
           "PriorityWeightFairshare": draw(st.sampled_from([0, 10000])),
           "PriorityWeightJobSize": draw(st.sampled_from([0, 1000])),
           "PriorityFavorSmall": draw(st.booleans()), "PriorityCalcPeriod": 1}
    users = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=n, max_size=n))
    parts = ()
    names = None
    if draw(st.booleans()):
        k = draw(st.integers(1, 3))
        parts = tuple(SlurmPartition(f"p{i}", tuple(sorted(draw(st.sets(st.integers(0, nodes - 1), min_size=1)))),
                                     draw(st.integers(0, 2))) for i in range(k))
        names = draw(st.lists(st.sampled_from([p.name for p in parts]), min_size=n, max_size=n))
        # a job never needs more GPUs than its partition has
        size = {p.name: len(p.nodes) * gpn for p in parts}
        gpus = [min(g, size[p]) for g, p in zip(gpus, names)]
    return list(zip(submits, gpus, durs)), limits, cfg, nodes, gpn, users, parts, names


def simulate(case, reference: bool, monkeypatch) -> np.ndarray:
    jobs, limits, cfg, nodes, gpn, users, parts, names = case
    trace = make_trace(jobs, users).replace(time_limit=np.asarray(limits, dtype=float))
    if names is not None:
        trace = trace.replace(partition=np.asarray(names, dtype=object))
    spec = ClusterSpec.uniform_nodes(nodes, gpn, slurm_partitions=parts)
    monkeypatch.setattr(Multifactor, "reference_planner", reference)
    return Simulator(trace, spec, get_policy("multifactor")(cfg)).run().records().first_start


@SETTINGS
@given(traces())
def test_the_lazy_planner_starts_every_job_when_the_reference_does(case):
    with pytest.MonkeyPatch.context() as mp:
        lazy = simulate(case, False, mp)
        ref = simulate(case, True, mp)
    assert lazy.tolist() == ref.tolist()


@st.composite
def plans(draw):
    """A plan of random reservations on a few nodes, and questions to ask it."""
    nodes = draw(st.integers(1, 70))
    times = st.sampled_from([0.0, 30.0, 60.0, 90.0, 120.0, 150.0, 600.0, math.inf])
    begin = draw(st.sampled_from([0.0, 30.0]))
    adds = []
    for _ in range(draw(st.integers(0, 8))):
        b = draw(st.sampled_from([begin, 60.0, 90.0, 120.0, 300.0]))
        e = draw(st.sampled_from([b + 30.0, b + 60.0, 400.0, 900.0, math.inf]))
        adds.append((b, max(e, b + 30.0), draw(st.integers(1, (1 << nodes) - 1))))
    asks = [(draw(st.integers(1, (1 << nodes) - 1)), draw(times), draw(times)) for _ in range(6)]
    return begin, adds, asks


@settings(max_examples=200, deadline=None)
@given(plans())
def test_the_slots_answer_as_the_reference_plan(case):
    # after each reservation, the usable nodes and next trial start for several (partition,
    # start, end) questions, and the overlap test, as `backfill._Plan` answers them
    begin, adds, asks = case
    ref, new = backfill._Plan(begin, 1000.0), lazy_backfill._Slots(begin, 1000.0)
    for b, e, m in [(None, None, None), *adds]:
        if b is not None:
            ref.add(b, e, m)
            new.add(b, e, m)
        assert [(s.begin, s.end, s.held) for s in ref.slots] == list(zip(new.begins, new.ends, new.held))
        for mask, t0, t1 in asks:
            assert new.usable(mask, t0, t1) == backfill._usable(ref.slots, mask, t0, t1)
            assert new.overlaps(mask, t0, t1) == ref.overlaps(mask, t0, t1)


@st.composite
def node_states(draw):
    nodes = draw(st.integers(1, 70))
    gpn = draw(st.sampled_from([1, 2, 4, 8]))
    free = draw(st.lists(st.integers(0, gpn), min_size=nodes, max_size=nodes))
    placement = draw(st.sampled_from(["consolidate", "first_fit", "spread"]))
    return free, gpn, placement, draw(st.integers(1, nodes * gpn)), draw(st.integers(1, (1 << nodes) - 1))


@settings(max_examples=200, deadline=None)
@given(node_states())
def test_placement_on_a_list_is_the_node_pools(case):
    # the lists' placement (every rule, jobs of one node and of several) against the reference's
    free, gpn, placement, g, _ = case
    expected = backfill._place(np.array(free, dtype=np.int64), g, gpn, placement)
    assert lazy_backfill._place(free, range(len(free)), g, gpn, placement) == expected


@settings(max_examples=200, deadline=None)
@given(node_states())
def test_fits_says_whether_the_reference_placement_finds_room(case):
    free, gpn, placement, g, mask = case
    cur = np.array([f if mask >> n & 1 else 0 for n, f in enumerate(free)], dtype=np.int64)
    expected = backfill._place(cur, g, gpn, placement) is not None
    assert lazy_backfill._fits(free, mask & sum(1 << n for n, f in enumerate(free) if f), g, gpn, placement) == expected


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_will_run_test_answers_as_the_reference(data):
    # running jobs on random nodes with random planned ends (ties, ends before now, no end),
    # never more GPUs on a node than it has: the start and placement of the reference's
    # will-run test, for every placement rule
    nodes, gpn = data.draw(st.integers(1, 70)), data.draw(st.sampled_from([1, 2, 4, 8]))
    room = [gpn] * nodes
    rows = []
    for seq in range(data.draw(st.integers(0, 12))):
        on = sorted(n for n in data.draw(st.sets(st.integers(0, nodes - 1), min_size=1, max_size=3)) if room[n])
        if not on:
            continue
        alloc = tuple((m, data.draw(st.integers(1, room[m]))) for m in on)
        for m, g in alloc:
            room[m] -= g
        end = data.draw(st.sampled_from([5.0, 40.0, 60.0, 61.0, 95.0, 200.0, 1000.0, math.inf]))
        rows.append((end, seq, alloc, sum(1 << m for m in on)))
    rows.sort(key=lambda r: r[:2])
    free = [data.draw(st.integers(0, r)) for r in room]
    placement = data.draw(st.sampled_from(["consolidate", "first_fit", "spread"]))
    g, avail = data.draw(st.integers(1, nodes * gpn)), data.draw(st.integers(1, (1 << nodes) - 1))
    ref_rows = [(e, a, m) for e, _, a, m in rows]
    expected = backfill._will_run(g, avail, np.array(free, dtype=np.int64), ref_rows, 10.0, gpn, placement)
    assert lazy_backfill._will_run(g, avail, list(free), rows, 10.0, gpn, placement) == expected


# Two nodes of 4 GPUs, bf_resolution 1, cycles every 30 s. A (4 GPUs, limit 100) runs on n0 and
# A2 (2 GPUs, limit 1000) on n1 from 0. B (4 GPUs, limit 100), D (1 GPU, runs 50, limit L) and C
# (4 GPUs, limit 100) arrive at 10, 11, 12; the main scheduler stops at B. Cycle at 30, order B,
# D, C. The reference plans every job:
#  - B: the batch {A} frees n0 at 100: reservation n0 [100, 200);
#  - D: [30, 30 + L) meets no reservation on n1, which has 2 free GPUs: D starts at 30;
#  - C: 4 GPUs cannot fit in the 1 free GPU. From 30 only n1 is usable, where it fits only
#    after A2's end, after the next trial start 200; from 200 every node is usable, the batch
#    {D, A} frees n0 at 100: reservation n0 [200, 300) (with L = 50; L = 2000: D's end at
#    2030 makes room on n1, and the trial from 200 looks no further: 200 again).
# The lazy planner defers B (it does not fit now) and stops before C (no job left fits in the
# free GPUs). It plans B only if B's reservation could take D's node n1 before 30 + L: with
# L = 50, n1 frees no GPU before 81 and B needs 4 on a node (not planned); with L = 2000, A2's
# end at 1000 leaves n1 4 GPUs free before 2031 (planned, on n0 all the same).
# The starts are the same (C starts when B ends, at 200): A 0, A2 0, B 100, D 30, C 200.
PLANNED = {(True, 50.0): [(2, 100.0), (4, 200.0)], (False, 50.0): [],
           (True, 2000.0): [(2, 100.0), (4, 200.0)], (False, 2000.0): [(2, 100.0)]}


@pytest.mark.parametrize(("reference", "d_limit"), list(PLANNED))
def test_a_cycle_plans_only_the_jobs_whose_reservations_may_change_a_start(reference, d_limit, monkeypatch):
    trace = make_trace([(0, 4, 100), (0, 2, 1000), (10, 4, 100), (11, 1, 50), (12, 4, 100)]).replace(
        time_limit=np.array([100.0, 1000.0, 100.0, d_limit, 100.0]))
    cfg = {"bf_interval": 30, "bf_resolution": 1, "PriorityWeightAge": 0, "PriorityWeightFairshare": 0,
           "PriorityWeightJobSize": 0}
    monkeypatch.setattr(Multifactor, "reference_planner", reference)
    sim = Simulator(trace, ClusterSpec.uniform_nodes(2, 4), get_policy("multifactor")(cfg))
    pol = sim.policies[0]
    seen = {}
    real = pol._backfill

    def spy(now, limit):
        real(now, limit)
        seen[now] = list(pol.reservations)

    monkeypatch.setattr(pol, "_backfill", spy)
    sim.run()
    assert seen[30.0] == PLANNED[reference, d_limit]
    assert sim.records().first_start.tolist() == [0, 0, 100, 30, 200]



@st.composite
def queues(draw):
    """A burst of jobs on a few nodes under a backfill window of a few minutes and reservations
    of coarse slots: a long queue whose reservations push many trial starts past the window."""
    n = draw(st.integers(5, 30))
    nodes, gpn = draw(st.integers(1, 4)), draw(st.sampled_from([1, 2, 4]))
    submits = sorted(draw(st.lists(st.integers(0, 120), min_size=n, max_size=n)))
    gpus = draw(st.lists(st.integers(1, nodes * gpn), min_size=n, max_size=n))
    durs = draw(st.lists(st.integers(20, 900), min_size=n, max_size=n))
    limits = draw(st.lists(st.integers(30, 900), min_size=n, max_size=n))
    cfg = {"bf_interval": draw(st.sampled_from([1, 7, 30])), "bf_resolution": draw(st.sampled_from([7, 30, 60, 120])),
           "bf_window": draw(st.sampled_from([1, 2, 5, 10])), "bf_max_job_test": 500,
           "placement": draw(st.sampled_from(["consolidate", "first_fit", "spread"])),
           "PriorityWeightAge": 0, "PriorityWeightFairshare": 0, "PriorityWeightJobSize": 0}
    return list(zip(submits, gpus, durs)), limits, cfg, nodes, gpn, ["a"] * n, (), None


@SETTINGS
@given(queues())
def test_trials_pushed_past_a_short_window_plan_as_the_reference(case):
    # A short bf_window behind a burst: a set-aside job's trial start is often pushed past the
    # window by the reservations before it, where the planner stops trying (no trial from there
    # can start it or reserve for it); the starts stay the reference's.
    with pytest.MonkeyPatch.context() as mp:
        lazy = simulate(case, False, mp)
        ref = simulate(case, True, mp)
    assert lazy.tolist() == ref.tolist()
