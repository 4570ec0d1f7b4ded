"""Invariants of every policy under every placement, on small random traces and clusters.

For each run: no GPU is double-booked (per node, and per partition under 'count'), every job
completes exactly once, each job's run time is exactly its work (slowed when its GPUs span
nodes) plus the restart overhead of every resumption, and the same inputs give the same run.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autosched.cluster import PLACEMENTS, ClusterSpec
from autosched.policies import POLICIES, get_policy
from autosched.sim import Simulator
from autosched.sim.engine import DONE
from simkit import make_trace

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WEEK = 7 * 86400.0


def relevant_config(name: str, rng: random.Random, placement: str) -> dict:
    """A random config whose knobs matter on traces of a few hundred seconds."""
    cfg = get_policy(name).space.sample(rng)
    cfg["placement"] = placement
    if name == "fifo":
        cfg["reserve_after"] = rng.choice([0.0, 30.0, WEEK])
    elif name == "tiresias":
        cfg.update(threshold=rng.choice([100.0, 300.0, 1000.0]), interval=rng.choice([0.0, 60.0]),
                   min_run=rng.choice([0.0, 50.0]), starvation=rng.choice([0.0, 0.5, 2.0]))
    elif name == "qssf":
        cfg.update(fallback=rng.choice([10.0, 100.0, 1000.0]), history=rng.choice([1, 3, 1000]))
    elif name == "multifactor":
        cfg.update(PriorityCalcPeriod=rng.choice([1, 2]), PriorityMaxAge=600.0,
                   PriorityDecayHalfLife=rng.choice([600.0, 3600.0]),
                   reserve_after=rng.choice([0.0, 30.0, WEEK]))
    return cfg


@st.composite
def scenarios(draw, policies=tuple(sorted(POLICIES)), placements=PLACEMENTS):
    gpn = draw(st.sampled_from([1, 2, 4]))
    slowdown = draw(st.sampled_from([1.0, 1.5]))
    if draw(st.booleans()):
        spec = ClusterSpec.uniform_nodes(draw(st.integers(1, 3)), gpn, spread_slowdown=slowdown)
        vcs, biggest = None, spec.gpus
    else:  # two virtual clusters of 1 and 2 nodes
        spec = ClusterSpec(gpn, (("X", 1), ("Y", 2)), False, spread_slowdown=slowdown)
        vcs, biggest = draw(st.lists(st.sampled_from("XY"), min_size=8, max_size=8)), gpn
    n = draw(st.integers(1, 8))
    submits = sorted(draw(st.lists(st.integers(0, 300), min_size=n, max_size=n)))
    gpus = draw(st.lists(st.integers(1, biggest), min_size=n, max_size=n))
    durs = draw(st.lists(st.integers(1, 400), min_size=n, max_size=n))
    halves = draw(st.lists(st.booleans(), min_size=n, max_size=n))  # some non-integer durations
    jobs = [(s, g, d + 0.5 * h) for s, g, d, h in zip(submits, gpus, durs, halves)]
    users = draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n)) if draw(st.booleans()) else None
    name = draw(st.sampled_from(policies))
    rng = random.Random(draw(st.integers(0, 2**31)))
    cfg = relevant_config(name, rng, draw(st.sampled_from(placements)))
    return spec, jobs, users, (vcs[:n] if vcs else None), name, cfg, rng


HORIZON = 1e6  # s: these traces end long before; a run still going then is stuck


def simulate(spec, jobs, users, vcs, name, cfg, switch=None) -> Simulator:
    sim = Simulator(make_trace(jobs, users, vcs), spec, get_policy(name)(cfg), record_segments=True)
    if switch is not None:
        t, cfg2 = switch
        sim.run(until=t)
        sim.reconfigure(cfg2)
    sim.run(until=HORIZON)  # bounded, so that a livelock fails the test instead of hanging it
    assert sim.finished == sim.n, f"{name} {cfg}: {sim.n - sim.finished} job(s) still unfinished at {HORIZON:g} s"
    return sim.run()


def check_invariants(sim: Simulator) -> None:
    rec, spec = sim.records(), sim.cluster
    n = len(rec.submit)
    # every job completes exactly once
    assert sim.finished == n and all(s == DONE for s in sim.state)
    assert np.isfinite(rec.end).all() and (rec.first_start >= rec.submit).all()
    segs = defaultdict(list)
    for j, b, e, alloc in sim.segments:
        segs[j].append((b, e, alloc))
    assert sorted(segs) == list(range(n))
    for j, runs in segs.items():
        runs.sort(key=lambda r: r[0])
        g = int(rec.gpus[j])
        assert len(runs) == rec.preemptions[j] + 1
        assert runs[0][0] == rec.first_start[j] and runs[-1][1] == rec.end[j]
        assert all(a[1] <= b[0] for a, b in zip(runs, runs[1:]))  # a job runs once at a time
        assert math.isclose(sum(e - b for b, e, _ in runs), rec.run_time[j], abs_tol=1e-6)
        # work: each run pays the restart overhead (none on the first), then progresses at the
        # speed of its placement; together exactly the job's duration
        work = 0.0
        for k, (b, e, alloc) in enumerate(runs):
            assert not alloc or sum(x for _, x in alloc) == g
            ovh = spec.overhead(g) if k else 0.0
            speed = 1.0 / spec.spread_slowdown if len(alloc) > 1 else 1.0
            work += max(0.0, e - b - ovh) * speed
        assert math.isclose(work, rec.duration[j], rel_tol=1e-9, abs_tol=1e-6), (j, runs)
        # the plain form when every run is on one node or every run spans nodes, and no run is
        # cut short inside its restart overhead
        spans = {len(alloc) > 1 for _, _, alloc in runs}
        if len(spans) == 1 and all(e - b >= spec.overhead(g) for b, e, _ in runs[1:]):
            slowdown = spec.spread_slowdown if spans.pop() else 1.0
            expected = rec.duration[j] * slowdown + spec.overhead(g) * rec.preemptions[j]
            assert math.isclose(rec.run_time[j], expected, rel_tol=1e-9, abs_tol=1e-6)
    # no GPU double-booked: sweep starts and ends (ends first at equal times)
    caps = spec.partition_gpus()
    events = sorted((e, 0, j, alloc) for j, b, e, alloc in sim.segments)
    events += [(b, 1, j, alloc) for j, b, e, alloc in sim.segments]
    events.sort(key=lambda x: (x[0], x[1]))
    node_use, part_use = defaultdict(int), defaultdict(int)
    for _, starting, j, alloc in events:
        sign = 1 if starting else -1
        p = int(rec.partition[j])
        part_use[p] += sign * int(rec.gpus[j])
        assert part_use[p] <= caps[p]
        for node, x in alloc:
            node_use[p, node] += sign * x
            assert node_use[p, node] <= spec.gpus_per_node


def same_run(a: Simulator, b: Simulator) -> bool:
    ra, rb = a.records(), b.records()
    return (a.segments == b.segments and np.array_equal(ra.end, rb.end)
            and np.array_equal(ra.first_start, rb.first_start)
            and np.array_equal(ra.preemptions, rb.preemptions))


@SETTINGS
@given(scenarios())
def test_invariants_and_reproducibility(case):
    spec, jobs, users, vcs, name, cfg, _ = case
    sim = simulate(spec, jobs, users, vcs, name, cfg)
    check_invariants(sim)
    assert same_run(sim, simulate(spec, jobs, users, vcs, name, cfg))


@SETTINGS
@given(scenarios(), st.floats(0, 600))
def test_invariants_hold_across_a_reconfiguration(case, at):
    spec, jobs, users, vcs, name, cfg, rng = case
    cfg2 = relevant_config(name, rng, rng.choice(PLACEMENTS))
    sim = simulate(spec, jobs, users, vcs, name, cfg, switch=(at, cfg2))
    check_invariants(sim)
    assert same_run(sim, simulate(spec, jobs, users, vcs, name, cfg, switch=(at, cfg2)))


# Policies that, with 'count' placement, never leave a job waiting while it fits in the free
# GPUs (all their decisions are greedy over GPU counts, and they decide at every event).
GREEDY = {
    "fifo": {"backfill": True, "reserve_after": WEEK},
    "srtf": {},
    "tiresias": {"interval": 0.0},
    "qssf": {"preemptive": True},
    "multifactor": {"backfill": True, "reserve_after": WEEK},
}


@SETTINGS
@given(scenarios(policies=tuple(GREEDY), placements=("count",)))
def test_work_conservation(case):
    spec, jobs, users, vcs, name, cfg, _ = case
    cfg.update(GREEDY[name])
    sim = simulate(spec, jobs, users, vcs, name, cfg)
    rec = sim.records()
    caps = spec.partition_gpus()
    times = sorted({t for _, b, e, _ in sim.segments for t in (b, e)} | set(rec.submit.tolist()))
    for t in times:
        running = {j for j, b, e, _ in sim.segments if b <= t < e}
        for p, cap in enumerate(caps):
            free = cap - sum(int(rec.gpus[j]) for j in running if rec.partition[j] == p)
            waiting = [j for j in range(len(rec.end)) if rec.partition[j] == p
                       and rec.submit[j] <= t < rec.end[j] and j not in running]
            assert all(rec.gpus[j] > free for j in waiting), (t, p, free, waiting)


NON_CLAIRVOYANT = tuple(name for name, cls in sorted(POLICIES.items()) if not cls.oracle)


@SETTINGS
@given(scenarios(policies=NON_CLAIRVOYANT), st.data())
def test_true_durations_do_not_change_decisions_before_the_job_ends(case, data):
    spec, jobs, users, vcs, name, cfg, _ = case
    x = data.draw(st.integers(0, len(jobs) - 1))
    other = list(jobs)
    s, g, d = jobs[x]
    other[x] = (s, g, data.draw(st.sampled_from([d * 2 + 1, d / 2 + 0.25])))
    a = simulate(spec, jobs, users, vcs, name, cfg)
    b = simulate(spec, other, users, vcs, name, cfg)
    tau = min(a.records().end[x], b.records().end[x])

    def before(sim):
        return sorted((j, s, e if e < tau else None, alloc) for j, s, e, alloc in sim.segments if s < tau)

    assert before(a) == before(b)
