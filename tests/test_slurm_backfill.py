"""multifactor as Slurm 22.05 when the trace has time limits: time-limit backfill, the main
scheduler, jobs ended at their limit; and the Fair Tree and classic fair-share factors. Expected
times and factors are worked out by hand in the comments."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autosched.cluster import ClusterSpec, SlurmClocks
from autosched.policies import get_policy
from autosched.policies.backfill import _place
from autosched.policies.fairshare import ShareTree
from autosched.sim import Simulator
from autosched.sim.placement import NodePool
from simkit import make_trace, starts

# Every priority 0 at arrival and no factor that grows: ties go by submission, so the queue
# order is the submission order and only the scheduling is under test.
FLAT = {"PriorityWeightAge": 0, "PriorityWeightFairshare": 0, "PriorityWeightJobSize": 0,
        "PriorityCalcPeriod": 1, "backfill": True}


def run(jobs, limits, config, nodes=1, gpn=4, users=None):
    trace = make_trace(jobs, users).replace(time_limit=np.asarray(limits, dtype=float))
    spec = ClusterSpec.uniform_nodes(nodes, gpn)
    return Simulator(trace, spec, get_policy("multifactor")({**FLAT, **config}),
                     record_segments=True).run()


# One node of 4 GPUs. A (2 GPUs, 100 s, limit 100) starts at 0 (main scheduler). B (4 GPUs,
# t=10, limit 60) is the top waiting job: its reservation is the whole node over [100, 160)
# (A's planned end). C (1 GPU, t=20, runs 30, limit 40) and D (1 GPU, t=20, runs 10, limit 80):
#  - at 20 (C, D arrive) the main scheduler stops at B, which does not fit: nothing starts;
#  - backfill cycle at 30 (bf_interval 30): C's [30, 70) ends before B's reservation: C starts
#    at 30. D's [30, 110) overlaps it: D gets a reservation after B;
#  - 60: C ends; cycle at 90: D's [90, 170) still overlaps B's reservation: it waits;
#  - 100: A ends, the main scheduler starts B (ends 150); cycle at 120: nothing free;
#  - 150: B ends, the main scheduler starts D.
JOBS = [(0, 2, 100), (10, 4, 50), (20, 1, 30), (20, 1, 10)]
LIMITS = [100, 60, 40, 80]


def test_time_limit_backfill_by_hand():
    sim = run(JOBS, LIMITS, {"bf_interval": 30, "bf_resolution": 1})
    assert starts(sim) == [0, 100, 30, 150]
    assert sim.policies[0].backfill_kind == "Slurm time-limit backfill"


def test_backfill_cycles_every_bf_interval():
    # The same with cycles at multiples of 7: C starts at the cycle at 21.
    sim = run(JOBS, LIMITS, {"bf_interval": 7, "bf_resolution": 1})
    assert starts(sim) == [0, 100, 21, 150]


def test_bf_resolution_rounds_reservations_down():
    # bf_resolution 60: B's reservation starts at floor(100 / 60) * 60 = 60, so C's [30, 70)
    # overlaps it and C cannot pass; C and D start when B ends at 150.
    sim = run(JOBS, LIMITS, {"bf_interval": 30, "bf_resolution": 60})
    assert starts(sim) == [0, 100, 150, 150]


def test_sched_builtin_never_passes_the_top_job():
    sim = run(JOBS, LIMITS, {"backfill": False})
    assert starts(sim) == [0, 100, 150, 150]
    assert sim.policies[0].backfill_kind == "none (sched/builtin)"


def test_without_limits_the_stand_in_runs():
    sim = Simulator(make_trace(JOBS), ClusterSpec.uniform_nodes(1, 4),
                    get_policy("multifactor")(FLAT)).run()
    # reserve_after (6 h) lets C and D pass B at once, when they arrive
    assert starts(sim) == [0, 100, 20, 20]
    assert sim.policies[0].backfill_kind.startswith("reserve_after stand-in")


def test_bf_window_limits_how_far_reservations_reach():
    # bf_window 1 minute: B's start (100) is beyond 30 + 60, so B gets no reservation and D, whose
    # [30, 110) no longer collides with anything, starts at 30 too.
    sim = run(JOBS, LIMITS, {"bf_interval": 30, "bf_resolution": 1, "bf_window": 1})
    assert starts(sim) == [0, 100, 30, 30]


def test_bf_max_job_test_limits_the_jobs_looked_at():
    # Only B and C are looked at: D waits for the main scheduler after B (it starts at 150).
    # With 1 job tested, only B is looked at and C waits too.
    assert starts(run(JOBS, LIMITS, {"bf_interval": 30, "bf_resolution": 1, "bf_max_job_test": 2})) \
        == [0, 100, 30, 150]
    assert starts(run(JOBS, LIMITS, {"bf_interval": 30, "bf_resolution": 1, "bf_max_job_test": 1})) \
        == [0, 100, 150, 150]


def test_reservations_hold_whole_nodes():
    # Two nodes of 4 GPUs. A (4 GPUs, limit 100) fills node 0, A2 (2 GPUs, limit 1000) half of
    # node 1. B (4 GPUs, t=10) is the top job: its reservation is node 0 (free at A's end, 100)
    # over [100, 200). C (2 GPUs, t=10, limit 500) fits on node 1 now and holds no reserved node:
    # it starts at the cycle at 30 although it runs past 100.
    jobs = [(0, 4, 100), (0, 2, 1000), (10, 4, 100), (10, 2, 500)]
    sim = run(jobs, [100, 1000, 100, 500], {"bf_interval": 30, "bf_resolution": 1}, nodes=2)
    assert starts(sim) == [0, 0, 100, 30]


@pytest.mark.parametrize("placement, c_node", [("consolidate", 1), ("first_fit", 0)])
def test_first_fit_takes_the_lowest_node_that_holds_the_job(placement, c_node):
    # Two nodes of 4 GPUs: A (2) goes to node 0, B (3) to node 1 (node 0 has only 2 left).
    # C (1 GPU): best fit is node 1 (1 free, the fullest that holds it); first fit is node 0.
    jobs = [(0, 2, 100), (0, 3, 100), (0, 1, 100)]
    sim = run(jobs, [200, 200, 200], {"placement": placement}, nodes=2)
    node = {j: alloc[0][0] for j, _, _, alloc in sim.segments}
    assert [node[0], node[1], node[2]] == [0, 1, c_node]


def test_a_job_is_ended_at_its_time_limit():
    sim = run([(0, 1, 200), (0, 1, 50)], [120, 100], {})
    rec = sim.records()
    assert rec.end.tolist() == [120, 50]
    assert rec.killed.tolist() == [True, False]
    assert rec.run_time.tolist() == [120, 50]


# ------------------------------------------------------------------------------ fair share

# Tree root -> P (users a, b), C (user c); usage a 30, b 10, c 60; equal shares.
USED = np.array([30.0, 10.0, 60.0])
TREE = ShareTree.from_pairs([(0, 0), (0, 1), (1, 2)])
ALL = np.ones(3, dtype=bool)


def fair_tree(used, known=ALL):
    return TREE.fair_tree(used, known)


def classic_fairshare(used, known=ALL):
    return TREE.classic(used, known)


def test_fair_tree_by_hand():
    # Accounts: P = 0.5 / 0.4 = 1.25, C = 0.5 / 0.6 = 0.83: P first. In P: a = 0.5 / 0.75 = 0.67,
    # b = 0.5 / 0.25 = 2: b, a, then c. Ranks 3, 2, 1 of 3 users.
    assert fair_tree(USED).tolist() == [2 / 3, 1.0, 1 / 3]


def test_fair_tree_tied_accounts_are_visited_in_turn():
    # a 10, b 0 in P; c 10 in C: accounts tie (0.5 / 0.5 = 1 each). Slurm 22.05 does not merge
    # them (its _count_tied_accounts stops at the first account), it visits P then C (tree
    # order): b (no usage: infinite) rank 3, a (0.5 / 1) rank 2; C is tied with P, so its first
    # user c keeps rank 2. (Merged, c would come between b and a: 1/3, 1, 2/3.)
    assert fair_tree(np.array([10.0, 0.0, 10.0])).tolist() == [2 / 3, 1.0, 2 / 3]


def test_fair_tree_tied_users_share_a_rank():
    # a 10, b 10, c 40: P = 0.5 / (20/60) = 1.5 before C = 0.75; a and b tie (1 each): both
    # rank 3; c gets rank 1 (the rank counts every user visited).
    assert fair_tree(np.array([10.0, 10.0, 40.0])).tolist() == [1.0, 1.0, 1 / 3]


def test_classic_fair_share_by_hand():
    # UE(P) = 0.4 + (1 - 0.4) / 2 = 0.7; a: 0.3 + (0.7 - 0.3) / 2 = 0.5 over S = 1/4 -> 2^-2;
    # b: 0.1 + 0.3 = 0.4 -> 2^-1.6; UE(C) = 0.6 + 0.4 / 2 = 0.8, c: 0.6 + 0.2 = 0.8 over 1/2.
    assert classic_fairshare(USED) == pytest.approx([0.25, 2 ** -1.6, 2 ** -1.6], rel=1e-12)


def test_no_usage_gives_everyone_one():
    assert fair_tree(np.zeros(3)).tolist() == [1.0, 1.0, 1.0]
    assert classic_fairshare(np.zeros(3)).tolist() == [1.0, 1.0, 1.0]


def test_only_associations_that_submitted_count_in_the_trace_tree():
    # c has not submitted: P alone under root, a 30 / b 10 -> b rank 2, a rank 1 of 2 users.
    assert fair_tree(np.array([30.0, 10.0, 0.0]), np.array([True, True, False])).tolist() == [0.5, 1.0, 1.0]


def test_fair_tree_with_one_user_per_account():
    # Accounts 0-3 with one user each (a trace without users), usage 10, 0, 10, 30 of 50:
    # S = 1/4; levels 1.25, infinite, 1.25, 0.42: account 1 rank 4, 0 rank 3, 2 tied with 0
    # keeps rank 3, 3 gets rank 1. The flat tree takes the path without the walk; both agree.
    tree = ShareTree.from_pairs([(0, -1), (1, -1), (2, -1), (3, -1)])
    used, known = np.array([10.0, 0.0, 10.0, 30.0]), np.ones(4, dtype=bool)
    assert tree._flat and not TREE._flat
    assert tree.fair_tree(used, known).tolist() == [0.75, 1.0, 0.75, 0.25]
    assert tree._walk_fair_tree(used, known).tolist() == [0.75, 1.0, 0.75, 0.25]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_fair_tree_on_a_flat_tree_is_the_walks(data):
    # Ties, zero usage, tiny and huge values, float sums that round, and usage a hair below
    # zero (held billing after many subtractions): the array path must give the walk's floats.
    n = data.draw(st.integers(1, 12))
    users = data.draw(st.sampled_from([[-1] * n, list(range(n))]))
    tree = ShareTree.from_pairs(list(zip(range(n), users)))
    values = st.sampled_from([0.0, 0.1, 0.2, 0.30000000000000004, 1.0, 2.0, 3.0, 1e-300, 5e-324, 1e300, -1e-13])
    used = np.array(data.draw(st.lists(values, min_size=n, max_size=n)))
    known = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    assert tree._flat
    walk = tree._walk_fair_tree(used, known).tolist()
    assert tree._flat_fair_tree(used, known).tolist() == walk  # (on lists: a few leaves)
    assert tree._array_flat_fair_tree(used, known).tolist() == walk



def test_classic_fair_share_with_one_user_per_account():
    # Accounts 0-3 with one user each, usage 10, 0, 10, 30 of 50, account 2's user not yet
    # submitted: 3 count, S = 1/3 each. UA 0.2, 0, 0.6; UE = UA + (1 - UA) / 3: 0.4667, 0.3333,
    # 0.7333; factor 2^(-3 UE): 2^-1.4, 2^-1, 2^-2.2; account 2 gets 1. The flat path and the
    # walk agree to the bit.
    tree = ShareTree.from_pairs([(0, -1), (1, -1), (2, -1), (3, -1)])
    used, known = np.array([10.0, 0.0, 10.0, 30.0]), np.array([True, True, False, True])
    assert tree._flat
    assert tree.classic(used, known) == pytest.approx([2 ** -1.4, 0.5, 1.0, 2 ** -2.2], rel=1e-12)
    assert tree._flat_classic(used, known).tolist() == tree._walk_classic(used, known).tolist()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_classic_fair_share_on_a_flat_tree_is_the_walks(data):
    # As for Fair Tree: ties, zero usage, subnormal and huge values, float sums that round and
    # usage a hair below zero; every bit of the walk's floats.
    n = data.draw(st.integers(1, 12))
    users = data.draw(st.sampled_from([[-1] * n, list(range(n))]))
    tree = ShareTree.from_pairs(list(zip(range(n), users)))
    values = st.sampled_from([0.0, -0.0, 0.1, 0.2, 0.30000000000000004, 1.0, 2.0, 3.0, 1e-300, 5e-324, 1e300,
                              -1e-13])
    used = np.array(data.draw(st.lists(values, min_size=n, max_size=n)))
    known = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    assert tree._flat
    assert tree._flat_classic(used, known).tolist() == tree._walk_classic(used, known).tolist()


def test_fair_tree_orders_jobs_in_the_simulator():
    # Accounts from the trace: u1 and u2 in "p", u3 in "c". A (u1, 4 GPUs, 0-600) runs; at 600
    # (a recalculation) p has all the usage: c (level infinite) comes first, then in p u2 (no
    # usage) before u1. Waiting: B (u1, t=10), C (u2, t=20), D (u3, t=30), each 4 GPUs 100 s:
    # D 600-700, C 700-800, B 800-900.
    jobs = [(0, 4, 600), (10, 4, 100), (20, 4, 100), (30, 4, 100)]
    trace = make_trace(jobs, ["u1", "u1", "u2", "u3"]).replace(account=np.array(["p", "p", "p", "c"], dtype=object))
    cfg = {**FLAT, "PriorityWeightFairshare": 10000, "backfill": False}
    sim = Simulator(trace, ClusterSpec.uniform_nodes(1, 4), get_policy("multifactor")(cfg)).run()
    assert starts(sim) == [0, 800, 700, 600]


# ---------------------------------------------------------------------------- properties

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def limited(draw):
    n = draw(st.integers(1, 10))
    nodes, gpn = draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 4]))
    submits = sorted(draw(st.lists(st.integers(0, 200), min_size=n, max_size=n)))
    gpus = draw(st.lists(st.integers(1, nodes * gpn), min_size=n, max_size=n))
    durs = draw(st.lists(st.integers(1, 300), min_size=n, max_size=n))
    limits = draw(st.lists(st.one_of(st.integers(1, 400), st.just(math.nan)), min_size=n, max_size=n))
    cfg = {"bf_interval": draw(st.sampled_from([1, 7, 30])), "bf_resolution": draw(st.sampled_from([1, 60])),
           "backfill": draw(st.booleans()), "placement": draw(st.sampled_from(["consolidate", "spread", "count"])),
           "PriorityWeightAge": draw(st.sampled_from([0, 1000])), "PriorityMaxAge": 600.0,
           "PriorityWeightFairshare": draw(st.sampled_from([0, 10000])),
           "PriorityFlags": draw(st.sampled_from(["FAIR_TREE", "NO_FAIR_TREE"]))}
    users = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=n, max_size=n))
    return list(zip(submits, gpus, durs)), limits, cfg, nodes, gpn, users


@SETTINGS
@given(limited())
def test_every_job_ends_by_its_limit_and_no_gpu_is_double_booked(case):
    jobs, limits, cfg, nodes, gpn, users = case
    sim = run(jobs, limits, cfg, nodes=nodes, gpn=gpn, users=users)
    rec = sim.records()
    lim = np.where(np.isnan(limits), np.inf, limits)
    dur = np.array([d for _, _, d in jobs], dtype=float)
    assert np.all(np.isfinite(rec.end))
    assert np.allclose(rec.run_time, np.minimum(dur, lim))
    assert rec.killed.tolist() == (dur > lim).tolist()
    # GPUs in use never exceed the cluster, at every start
    for t in rec.first_start:
        busy = sum(g for (s, g, _), b, e in zip(jobs, rec.first_start, rec.end) if b <= t < e)
        assert busy <= nodes * gpn


@SETTINGS
@given(limited())
def test_sched_builtin_starts_jobs_in_priority_order(case):
    # With every priority equal, the queue is the submission order, and without backfill no job
    # starts before an earlier one.
    jobs, limits, cfg, nodes, gpn, users = case
    sim = run(jobs, limits, {**cfg, "backfill": False, "PriorityWeightAge": 0,
                             "PriorityWeightFairshare": 0}, nodes=nodes, gpn=gpn, users=users)
    first = sim.records().first_start
    assert np.all(np.diff(first) >= 0)



@SETTINGS
@given(limited(), st.sampled_from([1, 2, 500]))
def test_a_backfill_cycle_looks_at_the_waiting_jobs_in_priority_order(case, max_job_test):
    # The cycle orders the waiting jobs with one lexsort (not a Python sort): at every
    # cycle they must be the first bf_max_job_test of all waiting jobs by (priority, submission).
    from unittest.mock import patch

    from autosched.policies.lazy_backfill import LazyBackfill

    jobs, limits, cfg, nodes, gpn, users = case
    trace = make_trace(jobs, users).replace(time_limit=np.asarray(limits, dtype=float))
    sim = Simulator(trace, ClusterSpec.uniform_nodes(nodes, gpn), get_policy("multifactor")(
        {**FLAT, **cfg, "backfill": True, "bf_max_job_test": max_job_test}))
    pol = sim.policies[0]
    seen = []
    real = LazyBackfill.cycle

    def spy(self, part, order, *args, **kw):
        neg = pol.neg
        seen.append((order.tolist(), sorted(pol.waiting.array().tolist(), key=lambda k: (neg[k], k))[:max_job_test]))
        return real(self, part, order, *args, **kw)

    with patch.object(LazyBackfill, "cycle", spy):
        sim.run()
    for got, want in seen:
        assert got == want


# ------------------------------------------------------------------------------------- CLI

def test_simulate_says_which_backfill_ran_and_what_hit_its_limit(tmp_path):
    import csv
    import json

    from typer.testing import CliRunner

    from autosched.cli import app

    runner = CliRunner()
    f = tmp_path / "limits.csv"
    # the JOBS above, plus E (1 GPU, runs 500 s, limit 100): ended at its limit
    f.write_text("job_id,submit_time,num_gpus,duration,time_limit\n"
                 "a,0,2,100,100\nb,10,4,50,60\nc,20,1,30,40\nd,20,1,10,80\ne,30,1,500,100\n")
    out = tmp_path / "jobs.csv"
    r = runner.invoke(app, ["simulate", str(f), "-c", "1x4", "-p", "multifactor", "--json",
                            "--jobs-out", str(out)])
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)
    assert m["backfill"] == "Slurm time-limit backfill" and m["killed_at_limit"] == 1
    rows = list(csv.DictReader(open(out)))
    assert [row["killed_at_limit"] for row in rows] == ["False", "False", "False", "False", "True"]
    no_limits = tmp_path / "plain.csv"
    no_limits.write_text("job_id,submit_time,num_gpus,duration\na,0,2,100\n")
    m = json.loads(runner.invoke(app, ["simulate", str(no_limits), "-c", "1x4", "-p", "multifactor",
                                       "--json"]).stdout)
    assert m["backfill"].startswith("reserve_after stand-in") and "killed_at_limit" not in m


# ------------------------------------------------------------------- slurmctld's clocks

def clocked(jobs, limits, config, clocks, nodes=1, gpn=4):
    trace = make_trace(jobs).replace(time_limit=np.asarray(limits, dtype=float))
    spec = ClusterSpec.uniform_nodes(nodes, gpn, clocks=clocks)
    return Simulator(trace, spec, get_policy("multifactor")({**FLAT, **config})).run()


@pytest.mark.parametrize("delay, expected", [
    # 3 s (Slurm's default): the pass for j1 (t=1) waits until 3 whole seconds after the pass at
    # 0; the one for j2 (t=4) until 3 after that one: 6.
    (3, [0, 3, 6]),
    # 0: every event runs the main scheduler at the next tick of the 1-s loop (here, at once).
    (0, [0, 1, 4]),
])
def test_batch_sched_delay_spaces_event_driven_passes(delay, expected):
    sim = clocked([(0, 1, 100), (1, 1, 100), (4, 1, 100)], [200] * 3,
                  {"backfill": False, "batch_sched_delay": delay}, SlurmClocks())
    assert starts(sim) == expected


def test_the_main_scheduler_runs_on_its_loops_ticks():
    # Ticks at 0.4 + k: j0 (t=0) starts at 0.4; j1 (t=1) at the first tick at least 3 whole
    # seconds after floor(0.4) = 0: 3.4.
    sim = clocked([(0, 1, 100), (1, 1, 100)], [200] * 2, {"backfill": False}, SlurmClocks(tick=0.4))
    assert starts(sim) == pytest.approx([0.4, 3.4])


def test_backfill_cycles_keep_their_own_clock():
    # The hand-worked case above with cycles at 3 + 7k: C (t=20) starts at the cycle at 24.
    sim = clocked(JOBS, LIMITS, {"bf_interval": 7, "bf_resolution": 1}, SlurmClocks(backfill=3.0))
    assert starts(sim) == [0, 100, 24, 150]


def test_priorities_are_recalculated_on_the_decay_threads_clock():
    # PriorityCalcPeriod 1 min from 30 (passes at 30, 90, 150, 210): the first arrival (t=100)
    # finds the last pass at 90; the second (t=200) brings the recalculation at 150.
    sim = clocked([(100, 1, 10), (200, 1, 10)], [60, 60], {}, SlurmClocks(decay=30.0))
    assert sim.policies[0].t0 == 150.0


# cons_tres's will-run test (22.05 `_will_run_test`) takes running jobs away in batches, and a
# job on none of the usable nodes is passed over without looking at the batch's window: the
# batch goes on to the next usable job however late it ends. Three nodes of 4 GPUs, first fit,
# bf_resolution 1, cycles every 10 s. At 0 the main scheduler starts S (4 GPUs, limit 62) on
# n0, U1 (3 GPUs, limit 60) on n1 and U2 (4 GPUs, limit 600) on n2; n1 keeps 1 GPU free. E, F
# (4 GPUs, limits 300 and 100) and H (1 GPU, limit 100) arrive at 1, 2, 3; the main scheduler
# stops at E. Backfill cycle at 10 (running jobs by planned end: U1 60, S 62, U2 600):
#  - E, all nodes usable: U1 is the first usable job, the batch window ends at 60 rounded up
#    to the next 30 s + 30 = 120; S (62) is within it, U2 (600) is not: batch {U1, S}, E fits
#    on n0 (first fit) at 62 (the batch's last end): reservation n0 [62, 362);
#  - F from 10: n0 is reserved within [10, 110), so F may use n1, n2. U1 (n1) is the first
#    usable job (F now fits on n1), the next job S is within the window, S is passed over
#    (n0), and U2 (n2) is taken away too, with no window check: F's start is 600, after the
#    next trial start 362 (where n0 comes free): from 362 every node is usable, the batch
#    {U1, S} makes room on n0 at 62, so F is reserved on n0 [362, 462);
#  - H from 10: n0 is reserved within [10, 110), n1 has 1 GPU free: H starts at 10 on n1.
# (Planning F at the first end that makes room, 60 on n1, as the simulator did before, kept H
# off n1 until E ended at 70.) Then U1 ends at 60: the main scheduler starts E on n1 at 60; S
# ends at 62: F starts on n0 at the next pass, 63 (batch_sched_delay 3 s after the pass at 60).
WILL_RUN_JOBS = [(0, 4, 62), (0, 3, 60), (0, 4, 600), (1, 4, 10), (2, 4, 10), (3, 1, 5)]
WILL_RUN_LIMITS = [62, 60, 600, 300, 100, 100]


def test_will_run_batches_pass_over_unusable_jobs():
    sim = run(WILL_RUN_JOBS, WILL_RUN_LIMITS, {"bf_interval": 10, "bf_resolution": 1,
                                               "placement": "first_fit"}, nodes=3)
    assert starts(sim) == [0, 0, 0, 60, 63, 10]


def test_will_run_batch_by_hand():
    from autosched.policies.backfill import _will_run

    # Free GPUs 0/1/0 on n0..n2; running (end, allocation, node mask) by end. Usable n1, n2 (0b110).
    free = np.array([0, 1, 0])
    running = [(60.0, ((1, 3),), 0b010), (62.0, ((0, 4),), 0b001), (600.0, ((2, 4),), 0b100)]
    # 4 GPUs: the batch {U1 (n1), S passed over, U2 (n2)} ends at 600; first fit picks n1
    assert _will_run(4, 0b110, free, running, 10.0, 4, "first_fit") == (600.0, ((1, 4),))
    # 1 GPU fits now on n1
    assert _will_run(1, 0b110, free, running, 10.0, 4, "first_fit") == (10.0, ((1, 1),))
    # all nodes usable: batch {U1, S} (U2 at 600 is beyond 90 + 30): n0 at 62
    assert _will_run(4, 0b111, free, running, 10.0, 4, "first_fit") == (62.0, ((0, 4),))
    # only n2 usable: U1 and S passed over, U2 alone: 600; no usable running job: never
    assert _will_run(4, 0b100, free, running, 10.0, 4, "first_fit") == (600.0, ((2, 4),))
    assert _will_run(4, 0b100, free, running[:2], 10.0, 4, "first_fit") is None


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_planners_one_node_placement_is_the_node_pools(data):
    # The backfill planner places a job that fits in one node on an array of free GPUs instead
    # of a NodePool (for speed); on any node state it must pick what the pool would. Up to 70
    # nodes: beyond 63 the pool's bitmasks are no longer machine words.
    gpn = data.draw(st.sampled_from([1, 2, 4, 8]))
    free = np.array(data.draw(st.lists(st.integers(0, gpn), min_size=1, max_size=70)), dtype=np.int64)
    g = data.draw(st.integers(1, gpn))
    placement = data.draw(st.sampled_from(["first_fit", "consolidate"]))
    assert _place(free, g, gpn, placement) == NodePool.from_free(free.tolist(), gpn).place(g, placement)

