"""The property battery: what every policy must pass, built-in or a plugin's, with as many examples.

On small random traces and clusters (1 to 8 jobs; 1 to 3 nodes of 1, 2 or 4 GPUs, or two virtual
clusters; every placement), each check runs a policy class in the simulator and fails on the
first broken rule, shrunk to a small example by hypothesis:

- `check_invariants`: no GPU is double-booked (per node, and per partition under 'count'), every
  job completes exactly once, each job's run time is exactly its work (slowed when its GPUs span
  nodes) plus the restart overhead of every resumption, and the same inputs give the same run,
  also when one policy instance serves two runs (the engine binds clones);
- `check_reconfiguration`: the same across a mid-run reconfiguration;
- `check_work_conservation`: with 'count' placement and a config the policy names, no job waits
  while it fits in its partition's free GPUs;
- `check_non_clairvoyance` (non-oracle policies): changing a job's true duration changes nothing
  the policy decides before that job ends;
- `check_declaration`: the class declares a name, a summary and knobs with help, the placement
  knob among them, and its configs survive a JSON round trip.

A policy that breaks the engine's contract fails too: the engine raises SimulationError when a
policy starts or preempts a job outside ``schedule``, and a policy cannot write to what it is
handed (`JobInfo`'s tuples, ``part.running``).

A plugin's test suite calls `check_policy` on its class (hypothesis must be installed, e.g.
``pip install 'autosched[test]'``)::

    from autosched.policies.battery import check_policy

    def test_shortest_keeps_the_rules():
        check_policy(Shortest, greedy={"window": 1000})
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..cluster import PLACEMENTS, ClusterSpec
from ..sim.engine import DONE, Simulator
from ..space import Config, dump_config, parse_config_json
from ..trace.table import Trace
from .base import Policy

EXAMPLES = 80  # per check and per policy: what each built-in policy is given in tests/test_properties.py
HORIZON = 1e6  # s: the battery's traces end long before; a run still going then is stuck

# (rng) -> a config of the policy (its placement is then set by the battery); default: the
# space's own random sample. A policy whose knobs only matter at some values (a threshold near
# the traces' few hundred seconds) draws those, so that the battery exercises them.
ConfigDraw = Callable[[random.Random], Mapping[str, Any]]
Job = tuple[float, int, float]  # (submit, GPUs, duration)


@dataclass(frozen=True)
class Scenario:
    """One random case: a cluster, its jobs, optional user and VC labels, and a config."""

    cluster: ClusterSpec
    jobs: tuple[Job, ...]
    users: tuple[str, ...] | None
    vcs: tuple[str, ...] | None
    config: Config
    seed: int  # for what a check draws besides (a second config to switch to)


def tiny_trace(jobs: Sequence[Job], users: Sequence[str] | None = None,
               vcs: Sequence[str] | None = None) -> Trace:
    """A trace from ``(submit, gpus, duration)`` tuples in submission order (ids j0, j1, ...),
    with optional per-job user and VC labels: what the battery (and hand-worked tests) run."""
    cols: dict[str, Sequence[Any]] = {
        "job_id": [f"j{i}" for i in range(len(jobs))],
        "submit_time": [float(s) for s, _, _ in jobs],
        "num_gpus": [int(g) for _, g, _ in jobs],
        "duration": [float(d) for _, _, d in jobs],
    }
    if users is not None:
        cols["user"] = list(users)
    if vcs is not None:
        cols["vc"] = list(vcs)
    return Trace.from_columns(cols)


def draw_config(cls: type[Policy], configs: ConfigDraw | None, rng: random.Random, placement: str) -> Config:
    """A config of `cls` from `configs` (default: the space's sample), with `placement`."""
    knobs = dict(configs(rng)) if configs is not None else cls.space.sample(rng)
    knobs["placement"] = placement
    return cls.space.validate(knobs)


def scenarios(cls: type[Policy], configs: ConfigDraw | None = None,
              placements: Sequence[str] = PLACEMENTS) -> st.SearchStrategy[Scenario]:
    """Random small cases for `cls`: 1 to 8 jobs of 1 to 400 s (some not whole seconds)
    submitted in the first 300 s, on 1 to 3 nodes or on two VCs of 1 and 2 nodes."""

    @st.composite
    def build(draw: st.DrawFn) -> Scenario:
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
        jobs = tuple((float(s), g, d + 0.5 * h) for s, g, d, h in zip(submits, gpus, durs, halves))
        users = tuple(draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n))) if draw(st.booleans()) else None
        seed = draw(st.integers(0, 2**31))
        config = draw_config(cls, configs, random.Random(seed), draw(st.sampled_from(placements)))
        return Scenario(spec, jobs, users, tuple(vcs[:n]) if vcs else None, config, seed)

    return build()


def simulate(policy: Policy, case: Scenario, jobs: Sequence[Job] | None = None,
             switch: tuple[float, Mapping[str, Any]] | None = None) -> Simulator[Policy]:
    """Run `policy` on the case (or on `jobs` in its cluster) to the end with segments recorded;
    with `switch` = (t, config), reconfigure to `config` at t. Fails if a job is still unfinished
    at `HORIZON` (a livelock fails instead of hanging)."""
    sim = Simulator(tiny_trace(case.jobs if jobs is None else jobs, case.users, case.vcs), case.cluster,
                    policy, record_segments=True)
    if switch is not None:
        sim.run(until=switch[0])
        sim.reconfigure(switch[1])
    sim.run(until=HORIZON)
    assert sim.finished == sim.n, f"{policy!r}: {sim.n - sim.finished} job(s) still unfinished at {HORIZON:g} s"
    return sim.run()


Segment = tuple[int, float, float, tuple[tuple[int, int], ...]]  # (job, begin, end, allocation)


def segments(sim: Simulator[Policy]) -> list[Segment]:
    """The run's segments (the battery records them)."""
    assert sim.segments is not None, "run with record_segments=True"
    return sim.segments


def assert_invariants(sim: Simulator[Policy]) -> None:
    """Every job completed exactly once and did exactly its work; no GPU was double-booked."""
    rec, spec = sim.records(), sim.cluster
    n = len(rec.submit)
    assert sim.finished == n and all(s == DONE for s in sim.state)
    assert np.isfinite(rec.end).all() and (rec.first_start >= rec.submit).all()
    runs_of: defaultdict[int, list[tuple[float, float, tuple[tuple[int, int], ...]]]] = defaultdict(list)
    for j, b, e, alloc in segments(sim):
        runs_of[j].append((b, e, alloc))
    assert sorted(runs_of) == list(range(n))
    for j, runs in runs_of.items():
        runs.sort(key=lambda r: r[0])
        g = int(rec.gpus[j])
        assert len(runs) == rec.preemptions[j] + 1
        assert runs[0][0] == rec.first_start[j] and runs[-1][1] == rec.end[j]
        assert all(a[1] <= b[0] for a, b in zip(runs, runs[1:])), (j, runs)  # a job runs once at a time
        assert math.isclose(sum(e - b for b, e, _ in runs), rec.run_time[j], abs_tol=1e-6)
        # work: each run pays the restart overhead (none on the first), then progresses at the
        # speed of its placement; together exactly the job's duration
        work = 0.0
        for k, (b, e, alloc) in enumerate(runs):
            assert not alloc or sum(x for _, x in alloc) == g, (j, alloc)
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
    events = sorted([(e, 0, j, alloc) for j, _, e, alloc in segments(sim)]
                    + [(b, 1, j, alloc) for j, b, _, alloc in segments(sim)], key=lambda x: (x[0], x[1]))
    node_use: defaultdict[tuple[int, int], int] = defaultdict(int)
    part_use: defaultdict[int, int] = defaultdict(int)
    for _, starting, j, alloc in events:
        sign = 1 if starting else -1
        p = int(rec.partition[j])
        part_use[p] += sign * int(rec.gpus[j])
        assert part_use[p] <= caps[p], (p, part_use[p])
        for node, x in alloc:
            node_use[p, node] += sign * x
            assert node_use[p, node] <= spec.gpus_per_node, (p, node)


def same_run(a: Simulator[Policy], b: Simulator[Policy]) -> bool:
    """Whether two runs made the same decisions (segments, ends, first starts, preemptions)."""
    ra, rb = a.records(), b.records()
    return (segments(a) == segments(b) and ra.end.tolist() == rb.end.tolist()
            and ra.first_start.tolist() == rb.first_start.tolist()
            and ra.preemptions.tolist() == rb.preemptions.tolist())


def _settings(examples: int) -> settings:
    # One failure, shrunk (not a group of them): what a check raises is the broken rule's error.
    return settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    report_multiple_bugs=False)


def check_invariants(cls: type[Policy], configs: ConfigDraw | None = None, examples: int = EXAMPLES) -> None:
    """Invariants and reproducibility: one instance runs each case twice, with the same run."""

    @_settings(examples)
    @given(scenarios(cls, configs))
    def check(case: Scenario) -> None:
        policy = cls(case.config)
        first = simulate(policy, case)
        assert_invariants(first)
        assert same_run(first, simulate(policy, case)), f"{policy!r}: the same inputs gave another run"

    check()


def check_reconfiguration(cls: type[Policy], configs: ConfigDraw | None = None, examples: int = EXAMPLES) -> None:
    """The invariants and reproducibility across a switch to another config at a random time."""

    @_settings(examples)
    @given(scenarios(cls, configs), st.floats(0, 600))
    def check(case: Scenario, at: float) -> None:
        rng = random.Random(case.seed + 1)
        switch = (at, draw_config(cls, configs, rng, rng.choice(PLACEMENTS)))
        first = simulate(cls(case.config), case, switch=switch)
        assert_invariants(first)
        assert same_run(first, simulate(cls(case.config), case, switch=switch))

    check()


def check_work_conservation(cls: type[Policy], greedy: Mapping[str, Any], configs: ConfigDraw | None = None,
                            examples: int = EXAMPLES) -> None:
    """With 'count' placement and the knobs in `greedy` (under which the policy promises to
    decide greedily at every event), no job waits while it fits in its partition's free GPUs."""

    @_settings(examples)
    @given(scenarios(cls, configs, placements=("count",)))
    def check(case: Scenario) -> None:
        sim = simulate(cls({**case.config, **greedy}), case)
        rec, caps, segs = sim.records(), sim.cluster.partition_gpus(), segments(sim)
        times = sorted({t for _, b, e, _ in segs for t in (b, e)} | set(rec.submit.tolist()))
        for t in times:
            running = {j for j, b, e, _ in segs if b <= t < e}
            for p, cap in enumerate(caps):
                free = cap - sum(int(rec.gpus[j]) for j in running if rec.partition[j] == p)
                waiting = [j for j in range(len(rec.end)) if rec.partition[j] == p
                           and rec.submit[j] <= t < rec.end[j] and j not in running]
                assert all(rec.gpus[j] > free for j in waiting), (t, p, free, waiting)

    check()


def check_non_clairvoyance(cls: type[Policy], configs: ConfigDraw | None = None, examples: int = EXAMPLES) -> None:
    """A non-oracle policy's decisions before a job ends do not depend on its true duration."""
    if cls.oracle:
        raise ValueError(f"{cls.name} is an oracle: it reads true durations by declaration")

    @_settings(examples)
    @given(scenarios(cls, configs), st.data())
    def check(case: Scenario, data: st.DataObject) -> None:
        x = data.draw(st.integers(0, len(case.jobs) - 1))
        other = list(case.jobs)
        s, g, d = other[x]
        other[x] = (s, g, data.draw(st.sampled_from([d * 2 + 1, d / 2 + 0.25])))
        a = simulate(cls(case.config), case)
        b = simulate(cls(case.config), case, jobs=other)
        tau = min(a.records().end[x], b.records().end[x])

        def before(sim: Simulator[Policy]) -> list[tuple[int, float, float | None, tuple[tuple[int, int], ...]]]:
            return sorted((j, s, e if e < tau else None, alloc) for j, s, e, alloc in segments(sim) if s < tau)

        assert before(a) == before(b)

    check()


def check_declaration(cls: type[Policy], seed: int = 0) -> None:
    """The class declares what the CLI, the tuner and the reports read: a name, a summary, the
    placement knob, help on every knob; its default and a sampled config validate and survive
    the config file's JSON round trip."""
    assert isinstance(cls.name, str) and cls.name, "a policy declares a non-empty `name`"
    assert isinstance(cls.summary, str) and cls.summary, f"{cls.name}: declare a one-line `summary`"
    knobs = {k.name: k for k in cls.space}
    assert "placement" in knobs, f"{cls.name}: every policy has the placement knob (policies.PLACEMENT)"
    assert not [k for k in knobs.values() if not k.help], f"{cls.name}: every knob says what it does (`help`)"
    for config in (cls.space.default(), cls.space.sample(random.Random(seed))):
        assert cls.space.validate(config) == config
        name, knobs_back = parse_config_json(dump_config(cls.name, config), f"{cls.name}.json")
        assert name == cls.name and cls.space.validate(knobs_back) == config


def check_policy(cls: type[Policy], *, configs: ConfigDraw | None = None,
                 greedy: Mapping[str, Any] | None = None, examples: int = EXAMPLES) -> None:
    """Every check of the battery on `cls`, `examples` random cases each (as each built-in
    policy gets): the declaration, the invariants, a reconfiguration, non-clairvoyance (unless
    the policy is an oracle) and, when `greedy` names the knobs under which the policy is work
    conserving, work conservation. Raises on the first broken rule (AssertionError, or the
    engine's SimulationError for a broken contract)."""
    check_declaration(cls)
    check_invariants(cls, configs, examples)
    check_reconfiguration(cls, configs, examples)
    if not cls.oracle:
        check_non_clairvoyance(cls, configs, examples)
    if greedy is not None:
        check_work_conservation(cls, greedy, configs, examples)


__all__ = ["EXAMPLES", "ConfigDraw", "Scenario", "tiny_trace", "scenarios", "simulate", "assert_invariants",
           "same_run", "check_invariants", "check_reconfiguration", "check_work_conservation",
           "check_non_clairvoyance", "check_declaration", "check_policy"]
