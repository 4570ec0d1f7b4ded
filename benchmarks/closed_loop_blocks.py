"""The block designs of the closed loop (docs/closed-loop.md): the twin's replay of every block
from its real starting state, the blocks' lengths, and the windows worth running.

A block design runs two configs in turn on real clusters (`autosched.switchback`: the schedule
and the statistics). For every block of every cluster the analysis needs three figures of the
block's *measured* jobs (those submitted after its washout, before its end): what really
happened to them, and what the twin says would have happened under each config, replayed from
the block's real starting state (`replay_block`):

- every job that really started before the block is submitted at its real start time, on the
  node it really ran on, and runs its real run time: before the block the twin's cluster holds
  exactly the jobs the real one ran, where it ran them, so the block starts with the real running
  jobs on their nodes and with the fair-share usage they charged. A job is held to its node by a
  Slurm partition of that one node (`PIN`), as the simulator models partitions; without its
  node on record (runs before sacct's NodeList was exported) it goes wherever the simulator
  places it, and a node the twin packs otherwise can then delay the jobs after it;
- every job queued at the block's start is submitted then, with its real age (Slurm's age factor
  counts from its real submission);
- every later job is submitted when it really was;
- the config is the block's arm from the block's start to its end, and after it the configs
  that really followed, switched when they were.

`simulate_run` plays a whole cluster of the design in the twin (the jobs, or a jittered copy,
under the schedule's configs): `closed_loop.py --pick` scores a trace's windows with it.

A block run's figures (`BlockResult`, from `closed_loop.analyse_block_run`), replicate runs of one
experiment read together (`pool`), its tables (`render`), targets (`targets`) and plot (`draw`) are
here too: docs/closed-loop.md shows them.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import slurm_twin as tw  # noqa: E402

from autosched import switchback as sb  # noqa: E402
from autosched.associations import parse_associations  # noqa: E402
from autosched.cluster import ClusterSpec, SlurmClocks, SlurmPartition  # noqa: E402
from autosched.errors import InputError  # noqa: E402
from autosched.live.judge import arrival_jitter  # noqa: E402
from autosched.policies import get_policy  # noqa: E402
from autosched.sim import Simulator  # noqa: E402
from autosched.trace.table import Trace  # noqa: E402

NODES, GPUS_PER_NODE = tw.NODES, tw.GPUS_PER_NODE  # the test cluster
PLACEMENT = "first_fit"
PARTITION = "gpu"  # the testbed's default partition: every job of the window runs in it
PIN = "pin-"  # + a node number: the one-node partition a replayed job is held to
# the testbed's association tree (scripts/slurm-testbed.sh: `sacctmgr -P show assoc` of a fresh
# cluster), for replays of windows that have not run on a cluster yet
TESTBED_ASSOC = """Cluster|Account|User|ParentName|Share
testcluster|root|||1
testcluster|root|root||1
testcluster|chemistry||root|40
testcluster|chemistry|alice||1
testcluster|chemistry|bob||1
testcluster|chemistry|carol||1
testcluster|physics||root|60
testcluster|physics|alice||1
testcluster|physics|bob||1
testcluster|physics|carol||1
"""


def testbed_spec(clocks: SlurmClocks = SlurmClocks(), def_cpu_per_gpu: float = 0.0) -> ClusterSpec:
    """The test cluster as the twin models it: 4 nodes of 8 GPUs, its association tree, a job
    that asks for no CPUs given `def_cpu_per_gpu` per GPU (0: one, as without DefCpuPerGPU)."""
    assoc = parse_associations([ln.split("|") for ln in TESTBED_ASSOC.splitlines()], "testbed")
    return tw.testbed_cluster(def_cpu_per_gpu, associations=assoc, clocks=clocks)


def pinned(spec: ClusterSpec) -> ClusterSpec:
    """`spec` with the window's partition (every node, the default) and one partition per node,
    each of the same tier, to hold a replayed job to its real node."""
    every = tuple(range(spec.nodes))
    return replace(spec, slurm_partitions=(SlurmPartition(PARTITION, every),
                                           *(SlurmPartition(f"{PIN}{n}", (n,)) for n in every)))


def window_trace(jobs: Sequence[tw.Job]) -> Trace:
    """The window's jobs as the harness submits them (times: wall s from the window's start)."""
    order = sorted(range(len(jobs)), key=lambda k: jobs[k].submit)
    js = [jobs[k] for k in order]
    return Trace.from_columns({
        "job_id": np.arange(len(js)), "submit_time": [j.submit for j in js],
        "num_gpus": [j.gpus for j in js], "duration": [float(j.seconds) for j in js],
        "time_limit": [60.0 * j.limit_min for j in js], "user": [j.user for j in js],
        "account": [j.account for j in js], "name": [j.name for j in js]})


def reordered(trace: Trace, order: np.ndarray, **columns: np.ndarray) -> Trace:
    """`trace`'s rows in `order` with some columns replaced (the new submit times in order)."""
    cols = {c: a[order] for c, a in trace.columns().items()}
    cols.update(columns)
    return Trace.from_columns(cols, source=trace.source)


# ----------------------------------------------------------------------------- the blocks' lengths

MIN_BLOCKS = 12  # 6 pairs: 64 assignments, the smallest p-value 1/64 (a 95% interval needs < 1/20)


@dataclass(frozen=True)
class Lengths:
    """A block design's lengths (wall s) for a window's jobs, and why (`lengths`)."""

    blocks: int
    block: float
    washout: float
    half_release: float  # the jobs running at a switch release half their GPU-time in this long
    released: float  # the share of it released within the washout

    def why(self, scale: float) -> str:
        h = 3600.0 / scale
        if self.blocks == 1:
            return (f"one block, the whole window ({self.block:.0f} s, {self.block / h:.1f} trace h), nothing "
                    "left out: each cluster runs one config from the window's first job, on an empty cluster")
        return (f"{self.blocks} blocks of {self.block:.0f} s ({self.block / h:.1f} trace h), the first "
                f"{self.washout:.0f} s ({self.washout / h:.1f} trace h) of each left out: the jobs running "
                f"at a switch release half the GPU-time they hold in {self.half_release:.0f} s, and "
                f"{self.released:.0%} of it within the washout")


def release(jobs: Sequence[tw.Job], t: float) -> float:
    """The share of the GPU-time held at a random instant by the jobs then running that they
    release within `t` s: a job of run time d is met at a uniform point of its run, so it holds
    its GPUs for U(0, d) more; GPU-weighted, sum(g min(d, t)) / sum(g d)."""
    g = np.array([j.gpus for j in jobs], dtype=float)
    d = np.array([j.seconds for j in jobs], dtype=float)
    return float(g @ np.minimum(d, t) / (g @ d))


def lengths(jobs: Sequence[tw.Job], run: float, blocks: int = MIN_BLOCKS) -> Lengths:
    """The blocks of a run of `run` wall s over `jobs`: `blocks` of them (even; `MIN_BLOCKS`, the
    fewest that give a 95% interval, unless a short check asks for fewer), as long as the run
    allows, since a config's effect on the backlog builds up over a block and a short block
    measures less of it; the first half of each is its washout. `half_release` says how long the
    jobs running at a switch take to release half the GPU-time they hold (`release`): the washout
    is meant to exceed it, so that the backlog the other config left is mostly started before the
    block's measured jobs arrive. One block (a crossover by run) is the whole run, without a
    washout: the window starts on an empty cluster, and no other config came before it."""
    if not jobs:
        raise InputError("no job: a block design needs the window's jobs")
    if blocks != 1 and (blocks < 2 or blocks % 2):
        raise InputError(f"{blocks} blocks: a block design needs an even number (at least {MIN_BLOCKS} "
                         "for a 95% interval), or one for the whole window")
    lo, hi = 0.0, float(max(j.seconds for j in jobs))
    for _ in range(60):  # release() grows with t: bisect for one half
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if release(jobs, mid) < 0.5 else (lo, mid)
    block = run / blocks
    washout = 0.0 if blocks == 1 else block / 2
    return Lengths(blocks, block, washout, hi, release(jobs, washout))


# ----------------------------------------------------------------------------- the design's clock

@dataclass(frozen=True)
class Timeline:
    """A block design on the window's clock (wall s from its first instant): blocks of `block`
    s, the first `washout` s of each left out of the metric, the schedule's arms, and the whole
    config of each arm."""

    block: float
    washout: float
    schedule: sb.Schedule
    configs: tuple[dict[str, Any], dict[str, Any]]
    # arm 1's config block by block, when it changed during the run (an agent whose loop ran
    # through the window: `closed_loop.Plan.in_window`); empty: configs[1] throughout
    arm1: tuple[dict[str, Any], ...] = ()

    def bounds(self, k: int) -> tuple[float, float, float]:
        """Block k's start, the end of its washout, its end."""
        s = k * self.block
        return s, s + self.washout, s + self.block

    def arm_config(self, k: int, arm: int) -> dict[str, Any]:
        """The whole config of `arm` in block k."""
        return self.arm1[k] if arm == 1 and self.arm1 else self.configs[arm]

    def config(self, k: int, unit: int) -> dict[str, Any]:
        return self.arm_config(k, int(self.schedule.arms[k, unit]))

    def switches(self, unit: int) -> list[tuple[float, dict[str, Any]]]:
        """(time, config) of the unit's planned switches: one at each block's start."""
        return [(self.bounds(k)[0], self.config(k, unit)) for k in range(self.schedule.blocks)]


@dataclass(frozen=True)
class UnitRun:
    """One cluster's run of a block design: its jobs as they went (`tw.RealRun`, times from its
    `day0`), where the window's first instant is on that clock, and the configs really in force
    (time on the same clock, whole config), from the first."""

    real: tw.RealRun
    origin: float
    switches: list[tuple[float, dict[str, Any]]]
    nodes: np.ndarray  # each job's node (number from 0), -1 where not on record

    def config_at(self, t: float) -> dict[str, Any]:
        cfg = self.switches[0][1]
        for at, c in self.switches:
            if at <= t:
                cfg = c
        return cfg


def twin_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The whole config the twin schedules by for a cluster's `cfg` (its knobs, the rest at
    their defaults): two configs that differ only in knobs left out schedule alike."""
    return get_policy("multifactor").space.validate({**tw.knobs(dict(cfg)), "placement": PLACEMENT})


def same_config(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two cluster configs set every knob alike, a knob one leaves out at its default
    (a run records arm 1 whole, its baseline with the knobs it sets)."""
    space = get_policy("multifactor").space

    def value(c: Mapping[str, Any], k: str) -> Any:
        return c[k] if k in c else space[k].default if k in space else None

    return all(value(a, k) == value(b, k) for k in set(a) | set(b))


def simulate(trace: Trace, spec: ClusterSpec, switches: Sequence[tuple[float, Mapping[str, Any]]],
             segments: bool = False) -> Simulator:
    """`trace` replayed under the first config of `switches` and from each later time on under
    its config (`Simulator.reconfigure`, as slurmctld's reconfigure)."""
    policy = get_policy("multifactor")
    sim = Simulator(trace, spec, policy(twin_config(switches[0][1])), record_segments=segments)
    for t, cfg in switches[1:]:
        sim.run(until=t)
        sim.reconfigure(twin_config(cfg))
    return sim.run()


def simulate_run(trace: Trace, spec: ClusterSpec, timeline: Timeline, unit: int, copy: int = 0,
                 seed: int = 0) -> UnitRun:
    """The twin playing cluster `unit` of the design: `trace` (the window's jobs), jittered copy
    `copy` (`arrival_jitter`: every arrival later by under 0.5 s), under the schedule's configs;
    recorded as a real run would be (submit times as submitted)."""
    submit = trace.submit_time + (arrival_jitter(seed, copy, len(trace)) if copy else 0.0)
    order = np.argsort(submit, kind="stable")
    jobs = reordered(trace, order, submit_time=submit[order])
    switches = timeline.switches(unit)
    sim = simulate(jobs, spec, switches, segments=True)
    rec = sim.records()
    nodes = np.full(len(jobs), -1)
    for j, _, _, alloc in sim.segments or ():
        nodes[j] = alloc[0][0]
    real = tw.RealRun(jobs, [], list(range(len(jobs))), jobs.submit_time, rec.first_start, rec.end,
                      0.0, None, False)
    return UnitRun(real, 0.0, switches, nodes)


# ----------------------------------------------------------------------------- a round's own period

def judged_at(submit: np.ndarray, start: np.ndarray, t: float, period: float) -> np.ndarray:
    """The jobs a round at `t` predicts for, as its samples hold them (`adapt.scoring`): those
    queued at `t` and those submitted in [t, t + period)."""
    return ((submit < t) & (start >= t)) | ((submit >= t) & (submit < t + period))


def round_gain(trace: Trace, spec: ClusterSpec, base: Mapping[str, Any], change: Mapping[str, Any], t: float,
               period: float) -> float:
    """The twin's gain in average JCT of switching from `base` to `change` at `t`, over the jobs
    the round at `t` predicted for (`judged_at`), each timed from `t` at the earliest: what the
    round's predicted gain forecasts. Both replays run alike until `t`, so they judge the same jobs."""
    old = simulate(trace, spec, [(0.0, base)]).records()
    new = simulate(trace, spec, [(0.0, base), (t, change)]).records()
    mine = judged_at(old.submit, old.first_start, t, period)
    if not mine.any():
        return math.nan
    since = np.maximum(old.submit[mine], t)
    return 1 - float(np.mean(new.end[mine] - since)) / float(np.mean(old.end[mine] - since))


# ----------------------------------------------------------------------------- one block's figures

@dataclass(frozen=True)
class Figures:
    """A block's measured jobs: how many, their average JCT and average wait (s)."""

    jobs: int
    avg_jct: float
    avg_wait: float

    def log(self, metric: str) -> float:
        return math.log(max(getattr(self, metric), 1e-3))


NO_JOBS = Figures(0, math.nan, math.nan)


def measured(real: tw.RealRun, t_m: float, t_e: float) -> np.ndarray:
    """Which jobs a block measures: submitted in [t_m, t_e) (times on the run's clock)."""
    return (real.submit >= t_m) & (real.submit < t_e)


def figures(submit: np.ndarray, start: np.ndarray, end: np.ndarray) -> Figures:
    if not len(submit):
        return NO_JOBS
    return Figures(len(submit), float(np.mean(end - submit)), float(np.mean(start - submit)))


def realized(run: UnitRun, t_m: float, t_e: float) -> Figures:
    """What really happened to the jobs submitted in [t_m, t_e) (window clock)."""
    r = run.real
    m = measured(r, run.origin + t_m, run.origin + t_e)
    return figures(r.submit[m], r.start[m], r.end[m])


def block_trace(run: UnitRun, t_s: float, copy: int = 0, seed: int = 0) -> tuple[Trace, np.ndarray]:
    """The jobs of `run` as the twin replays them from the real state at `t_s` (run's clock; see
    the module doc), jittered copy `copy` moving every arrival from `t_s` on later by under
    0.5 s; and each trace row's index in the run (whose trace and arrays are in submit order)."""
    r = run.real
    started = r.start < t_s
    arrive = np.where(started, r.start, np.maximum(r.submit, t_s))
    age = np.where(started, 0.0, arrive - r.submit)
    if copy:
        arrive = arrive + np.where(started, 0.0, arrival_jitter(seed, copy, len(r.submit)))
    order = np.lexsort((r.submit, arrive))
    part = np.where(started & (run.nodes >= 0), np.char.add(PIN, run.nodes.astype(str)), PARTITION)
    return reordered(r.trace, order, submit_time=arrive[order], age=age[order], partition=part[order]), order


def replay_block(run: UnitRun, spec: ClusterSpec, t_s: float, t_m: float, t_e: float,
                 config: Mapping[str, Any], copy: int = 0, seed: int = 0, last: bool = False) -> Figures:
    """The twin's figures of the jobs submitted in [t_m, t_e) (window clock) when the block
    [t_s, t_e) runs `config`, replayed from the block's real starting state (module doc). Jobs
    that arrive more than a block's length after the measured jobs really started are left out:
    they cannot have delayed them. After the `last` block no config followed: `config` stays in
    force until the jobs are done, as the block's own config stayed on the real cluster."""
    o = run.origin
    r = run.real
    m = measured(r, o + t_m, o + t_e)
    if not m.any():
        return NO_JOBS
    horizon = max(o + t_e, float(r.start[m].max())) + (t_e - t_s)
    trace, order = block_trace(run, o + t_s, copy, seed)
    keep = np.flatnonzero(trace.submit_time <= horizon)
    trace, order = trace.take(keep), order[keep]
    switches = [(0.0, run.config_at(o + t_s - 1e-6)), (o + t_s, config)]
    if not last:
        switches += [(o + t_e, run.config_at(o + t_e)), *[(t, c) for t, c in run.switches if o + t_e < t <= horizon]]
    rec = simulate(trace, pinned(spec), switches).records()
    sub = r.submit[order]
    m = (sub >= o + t_m) & (sub < o + t_e)
    return figures(sub[m], rec.first_start[m], rec.end[m])


# ----------------------------------------------------------------------------- every block of a run

@dataclass(frozen=True)
class BlockRow:
    """One block of one cluster: its arm, what its measured jobs really did, the twin's replay of
    them under each arm (`replay_block`), and under the arm in force on jittered copies."""

    block: int
    unit: int
    arm: int
    realized: Figures
    twin: tuple[Figures, Figures]
    jittered: tuple[Figures, ...] = ()


def block_rows(runs: Sequence[UnitRun], spec: ClusterSpec | Sequence[ClusterSpec], timeline: Timeline,
               jitters: int = 0, seed: int = 0, memo: dict[tuple[Any, ...], Figures] | None = None) -> list[BlockRow]:
    """Every block of every cluster (`runs[u]` is cluster u's, its twin `spec[u]`, or one spec for
    all), block by block. A replay is computed once for the configs that schedule alike: both
    arms of an A/A block share it, and `memo` (for these runs and specs only; keyed by the
    block's bounds) carries the replays into another call, as an A/A run's archetypes reuse
    their baseline's."""
    specs = [spec] * len(runs) if isinstance(spec, ClusterSpec) else list(spec)
    memo = {} if memo is None else memo
    rows = []
    for k in range(timeline.schedule.blocks):
        s, m, e = timeline.bounds(k)
        last = k == timeline.schedule.blocks - 1
        for u, (run, spec_u) in enumerate(zip(runs, specs)):

            def replay(config: Mapping[str, Any], copy: int = 0) -> Figures:
                key = (s, m, e, last, u, copy, seed if copy else 0, tuple(sorted(twin_config(config).items())))
                if key not in memo:
                    memo[key] = replay_block(run, spec_u, s, m, e, config, copy=copy, seed=seed, last=last)
                return memo[key]

            arm = int(timeline.schedule.arms[k, u])
            twin = (replay(timeline.arm_config(k, 0)), replay(timeline.arm_config(k, 1)))
            jit = tuple(replay(timeline.arm_config(k, arm), c) for c in range(1, jitters + 1))
            rows.append(BlockRow(k, u, arm, realized(run, m, e), twin, jit))
    return rows


def blocks_of(rows: Sequence[BlockRow], sched: sb.Schedule, metric: str) -> sb.Blocks:
    """The statistics' view of `rows` (in `block_rows`' order) on one metric (avg_jct, avg_wait)."""
    return sb.Blocks.of(sched, [r.realized.jobs for r in rows], [getattr(r.realized, metric) for r in rows],
                        [[getattr(f, metric) for f in r.twin] for r in rows])


def twin_block_gain(rows: Sequence[BlockRow], metric: str = "avg_jct") -> float:
    """The twin's gain of arm 1 in the design's blocks: its job-weighted mean of the measured jobs
    under arm 1 against arm 0, replayed from each block's real starting state (positive: arm 1
    lower)."""
    n = np.array([r.realized.jobs for r in rows], dtype=float)
    p = np.array([[getattr(f, metric) if f.jobs else 0.0 for f in r.twin] for r in rows])
    return 1 - float(n @ p[:, 1]) / float(n @ p[:, 0]) if n.sum() else math.nan


def twin_aa(rows: Sequence[BlockRow], sched: sb.Schedule, metric: str) -> list[sb.Effect]:
    """The noise floor in the twin: for each jittered copy, the design's estimate when the
    "realized" figures are the twin's replay of that copy under the arm in force and both arms'
    predictions are the unjittered replay under it (no effect, only the chaos of a replay)."""
    out = []
    for c in range(len(rows[0].jittered) if rows else 0):
        same = [[getattr(r.twin[r.arm], metric)] * 2 for r in rows]
        b = sb.Blocks.of(sched, [r.realized.jobs for r in rows],
                         [getattr(r.jittered[c], metric) for r in rows], same)
        out.append(sb.effect(b))
    return out


# ----------------------------------------------------------------------------- a block run's figures

METRICS = ("avg_jct", "avg_wait")
JITTERS = 4  # jittered copies of every block's replay: the twin's noise floor
# the estimates reported, (estimator, family of the interval); `primary` says which the targets read
ESTIMATES: tuple[tuple[sb.Estimator, sb.Shape], ...] = (("twin", "twin"), ("twin", "constant"), ("plain", "constant"))


def primary(design: str) -> tuple[sb.Estimator, sb.Shape]:
    """The estimate the targets read. A switchback's arms run different blocks, whose workloads
    differ by two orders of magnitude: the twin takes that out. A crossover runs both arms in
    every block on the same jobs, so their plain means are already paired, and the twin's replay
    of each cluster only adds its own error (the crossover A/A: a half-width of 7.8% plain, 10.4%
    with the twin)."""
    return ESTIMATES[2] if design in sb.CROSSOVERS else ESTIMATES[0]
MIN_APART = 0.5  # the share of a run's blocks whose arms must differ for the targets to judge it


@dataclass(frozen=True)
class Accounted:
    """One cluster's sacct against what was submitted."""

    submitted: int
    recorded: int
    completed: int


@dataclass
class BlockResult:
    """Every figure of one block-design run (closed_loop.analyse_block_run)."""

    name: str
    plan: dict[str, Any]
    jobs: int
    offered_load: float
    lengths: Lengths
    schedule: sb.Schedule
    accounted: dict[str, Accounted]  # by cluster label
    rows: list[BlockRow]
    effects: dict[str, dict[tuple[sb.Estimator, sb.Shape], sb.Effect]]  # metric -> (estimator, family) -> effect
    twin_block_gain: dict[str, float]  # metric -> the twin's gain in the blocks
    twin_window_gain: float  # the twin: the whole window under arm 1 against arm 0 (avg JCT)
    twin_aa: list[sb.Effect]  # the estimate on each jittered copy with no effect (avg JCT)
    tau: dict[str, float]  # the twin replaying each cluster's whole run: Kendall's tau of starts
    decision: dict[str, Any] | None  # the agent's (closed_loop.Decision as a dict); None: A/A
    wall_run: float | None
    wall_total: float | None
    configs: tuple[dict[str, Any], dict[str, Any]] = ({}, {})  # arm 0's and arm 1's, whole
    # an A/A run: each archetype's gain in the blocks (average JCT) as the twin replays them from
    # the run's real block states, against the baseline: the effect a run of it could see here
    archetypes: dict[str, float] = field(default_factory=dict)
    # arm 1's config block by block when the agent's loop changed it during the run
    # (`Timeline.arm1`); empty: configs[1] in every block
    arm1: tuple[dict[str, Any], ...] = ()
    # the agent's loop's changes through the window in words, in order, when it made more than
    # one or went back (closed_loop.agent_moves); "": the decision says it all
    moves: str = ""
    # the twin's gain of the agent's change over the period its round predicted (`round_gain`,
    # on the real submissions of the cluster that ran the baseline first, switched when the round
    # applied it); None: no change
    round_twin_gain: float | None = None

    @property
    def apart(self) -> int:
        """The blocks whose two arms are different configs (`same_config`)."""
        if not self.arm1:
            return 0 if same_config(self.configs[0], self.configs[1]) else self.schedule.blocks
        return sum(not same_config(c, self.configs[0]) for c in self.arm1)

    @property
    def aa(self) -> bool:
        return bool(self.plan.get("aa"))

    @property
    def control(self) -> str:
        """What arm 1 runs in a control run, an archetype or KNOB=VALUE pairs over the baseline
        ("": the agent's config, or an A/A run)."""
        return str(self.plan.get("control") or "")

    @property
    def changed(self) -> bool:
        return self.decision is not None and self.decision.get("revision") is not None

    def main(self, metric: str = "avg_jct") -> sb.Effect:
        """The effect the targets read (`primary`)."""
        return self.effects[metric][primary(str(self.plan.get("design", "")))]


def analyse_rows(rows: Sequence[BlockRow], sched: sb.Schedule) -> tuple[
        dict[str, dict[tuple[sb.Estimator, sb.Shape], sb.Effect]], dict[str, float], list[sb.Effect]]:
    """The effects of every estimate and metric, the twin's gain in the blocks, and the twin's
    A/A estimates on the jittered copies."""
    effects = {m: {(how, shape): sb.effect(blocks_of(rows, sched, m), how, shape)
                   for how, shape in ESTIMATES} for m in METRICS}
    gains = {m: twin_block_gain(rows, m) for m in METRICS}
    return effects, gains, twin_aa(rows, sched, "avg_jct")


def pct(x: float | None) -> str:
    """A gain in a table: signed percent; — for none, ±∞ for an unbounded interval's end."""
    if x is None or not math.isfinite(x):
        return "—" if x is None or math.isnan(x) else ("+∞" if x > 0 else "−∞")
    return f"{x:+.1%}"


def pval(p: float) -> str:
    """A p-value in a table: two decimals, or two significant digits below 0.01 (4,096
    assignments reach 0.0005)."""
    return f"{p:.2f}" if p >= 0.01 else f"{p:.2g}"


def gain_ci(e: sb.Effect) -> str:
    g, lo, hi = e.gain()
    return f"{pct(g)} [{pct(lo)}, {pct(hi)}]"


@dataclass(frozen=True)
class Unchanged:
    """A block run that ended after the agent's round because it changed nothing (both arms would
    have been the baseline): its window and the round's account."""

    name: str
    plan: dict[str, Any]
    jobs: int
    offered_load: float
    history_jobs: int  # the jobs of the seed history the agent read
    why: str  # the round's reason
    best: str  # the portfolio's candidate that gained most on the samples, its standing in words


def render_unchanged(runs: Sequence[Unchanged]) -> list[str]:
    """The table of the windows where the agent changed nothing."""
    out = ["", "**Windows where the agent changed nothing** (the run ends after its round: both arms "
           "would be the baseline). The best candidate: of the round's portfolio, the one with the largest "
           "gain in average JCT over the running config on the workload model's samples, ± its standard "
           "error, and why it left the race (none: it led and the guardrail kept the running config):", "",
           "| run | trace | window (trace days) | jobs | offered load | history the agent read (jobs) | "
           "the agent's round | the best candidate |", "|---|---|---|---|---|---|---|---|"]
    for u in runs:
        p = u.plan
        out.append(f"| {u.name} | {Path(str(p.get('trace', ''))).name} | {p['start_day']:g}-"
                   f"{p['start_day'] + p['days']:g} | {u.jobs} | {u.offered_load:.2f} | {u.history_jobs} | "
                   f"no change: {u.why} | {u.best} |")
    return out


def render(results: Sequence[BlockResult], unchanged: Sequence[Unchanged] = ()) -> str:
    """The markdown of docs/closed-loop.md's section on the block designs."""
    out = ["| run | design | window (trace days) | jobs | offered load | blocks × length (washout), wall s | "
           "in sacct | the agent's change | predicted | the twin's gain: blocks (window) | "
           "realized gain, avg JCT [95% CI] | avg wait [95% CI] | p (no effect) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        p, lens = r.plan, r.lengths
        sacct = ", ".join(f"{a.recorded}/{a.submitted}" for a in r.accounted.values())
        if r.aa:
            change, pred = "A/A: none (both arms the baseline)", "—"
        elif r.control:
            change, pred = f"control: {r.control} (no agent)", "—"
        elif not r.changed:
            change, pred = f"none: {r.decision['why'] if r.decision else ''}", "—"
        elif r.moves:
            change, pred = r.moves, "(as said)"
        else:
            d = r.decision or {}
            change = diff_words(d["diff"])
            pred = pct(d.get("predicted_gain")) + (f" ± {d['spread']:.1%}" if d.get("spread") is not None else "")
        e = r.main()
        out.append(f"| {r.name} | {p['design']} | {p['start_day']:g}-{p['start_day'] + p['days']:g} | {r.jobs} | "
                   f"{r.offered_load:.2f} | {lens.blocks} × {lens.block:.0f} ({lens.washout:.0f}) | {sacct} | "
                   f"{change} | {pred} | {pct(r.twin_block_gain['avg_jct'])} ({pct(r.twin_window_gain)}) | "
                   f"{gain_ci(e)} | {gain_ci(r.main('avg_wait'))} | {pval(e.p_value)} |")
    if unchanged:
        out += render_unchanged(unchanged)
    pooled = [x for x in pool(results) if len(x.runs) > 1]
    if pooled:
        out += ["", "**Replicate runs read together** (the same window, design and configs; every run's units, "
                "each run's draw apart; a unit is what the test flips: a pair of blocks, a block of a crossover "
                "by block, a run of a crossover by run):", "",
                "| runs | units | realized gain, avg JCT [95% CI] | avg wait [95% CI] | p (no effect) | units for ±5% |",
                "|---|---|---|---|---|---|"]
        for x in pooled:
            e = x.main()
            out.append(f"| {x.name} | {e.pairs} | {gain_ci(e)} | {gain_ci(x.main('avg_wait'))} | "
                       f"{pval(e.p_value)} | {e.pairs_for(0.05)} |")
    out += ["", "**The estimators compared** (average JCT; gain [95% CI]): the twin as a control variate "
            "with the interval shaped by the twin's per-block effects (the one above for a switchback), the "
            "same with a constant effect in every block, and the arms' plain job-weighted means without the "
            "twin (the one above for a crossover, whose blocks hold both arms on the same jobs); and "
            "the twin's own A/A: the estimate on each of the jittered copies of the blocks' replays, where "
            "there is no effect but the chaos of a replay.", "",
            "| run | twin, twin-shaped | twin, constant | plain | the twin's A/A (jittered copies) | "
            "half-width: twin-shaped / plain | units for ±5% |", "|---|---|---|---|---|---|---|"]
    for r in results:
        ef = r.effects["avg_jct"]
        aa = ", ".join(pct(a.gain()[0]) for a in r.twin_aa)
        hw = [ef[k].gain() for k in (ESTIMATES[0], ESTIMATES[2])]
        half = " / ".join(f"{(g[2] - g[1]) / 2:.1%}" if math.isfinite(g[2] - g[1]) else "∞" for g in hw)
        out.append(f"| {r.name} | {gain_ci(ef[ESTIMATES[0]])} | {gain_ci(ef[ESTIMATES[1]])} | "
                   f"{gain_ci(ef[ESTIMATES[2]])} | {aa} | {half} | {r.main().pairs_for(0.05)} |")
    seen = [r for r in results if r.archetypes]
    if seen:
        names = list(seen[0].archetypes)
        out += ["", "**What an archetype could show in these blocks**: its gain in average JCT over the "
                "baseline, the twin replaying each block of the A/A run from the run's real block states "
                "under it (as the analysis replays a run's other arm):", "",
                "| run | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        out += [f"| {r.name} | " + " | ".join(pct(r.archetypes.get(n)) for n in names) + " |" for r in seen]
    out += ["", "**Every block** (wall s; the twin replays the block's measured jobs from its real starting "
            "state under each arm, and under the arm in force on 4 jittered copies: their range):", "",
            "| run | block | cluster | arm | jobs | avg JCT real | twin, baseline | twin, other arm | "
            "jittered range | avg wait real | twin, baseline | twin, other arm |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for row in r.rows:
            f, t0, t1 = row.realized, row.twin[0], row.twin[1]
            jit = [j.avg_jct for j in row.jittered if j.jobs]
            rng = f"{min(jit):.1f}-{max(jit):.1f}" if jit else "—"
            out.append(f"| {r.name} | {row.block} | {'AB'[row.unit]} | {row.arm} | {f.jobs} | {_s(f.avg_jct)} | "
                       f"{_s(t0.avg_jct)} | {_s(t1.avg_jct)} | {rng} | {_s(f.avg_wait)} | {_s(t0.avg_wait)} | "
                       f"{_s(t1.avg_wait)} |")
    out += ["", "**Targets:**", ""] + [f"- {t}" for t in targets(results, unchanged)]
    return "\n".join(out) + "\n"


def _s(x: float) -> str:
    return "—" if not math.isfinite(x) else f"{x:.1f}"


def fmt(v: Any) -> str:
    """A config value in a table: floats to 4 significant digits."""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def diff_words(diff: Mapping[str, Sequence[Any]]) -> str:
    """A revision's diff (knob -> (old, new)) in a table: "knob old → new, ...", by knob name."""
    return ", ".join(f"{k} {fmt(v[0])} → {fmt(v[1])}" for k, v in sorted(diff.items()))


# what makes runs replicates of one experiment: the same window, thinning, scale, design and arms
POOL_KEYS = ("trace", "start_day", "days", "load", "seed", "scale", "cap", "design", "blocks", "aa",
             "def_cpu_per_gpu")
POOL_DEFAULTS = {"def_cpu_per_gpu": 0}  # what a run recorded before the key existed ran with


@dataclass
class Experiment:
    """One or more runs of the same window with the same two configs (`pool`): their pairs of
    blocks taken together, each run's randomisation drawn apart."""

    runs: list[BlockResult]

    @property
    def name(self) -> str:
        return " + ".join(r.name for r in self.runs)

    @property
    def first(self) -> BlockResult:
        return self.runs[0]

    @property
    def judged(self) -> bool:
        """Whether the arms differ in at least half the blocks (`MIN_APART`): where they do not,
        the interval rests mostly on blocks that ran one config twice, and says nothing of the
        config (a run whose agent changed the config late in its window)."""
        return sum(r.apart for r in self.runs) >= MIN_APART * sum(r.schedule.blocks for r in self.runs)

    def blocks(self, metric: str) -> sb.Blocks:
        parts, offset = [], 0
        for r in self.runs:
            b = blocks_of(r.rows, r.schedule, metric)
            parts.append(sb.Blocks(b.arm, b.pair + offset, b.jobs, b.realized, b.twin))
            offset += b.pairs
        return sb.Blocks(*(np.concatenate([getattr(b, f) for b in parts])
                           for f in ("arm", "pair", "jobs", "realized", "twin")))

    def main(self, metric: str = "avg_jct") -> sb.Effect:
        """The effect the targets read (as `BlockResult.main`), over every run's pairs."""
        if len(self.runs) == 1:
            return self.first.main(metric)
        how, shape = primary(str(self.first.plan.get("design", "")))
        return sb.effect(self.blocks(metric), how, shape)


def pool(results: Sequence[BlockResult]) -> list[Experiment]:
    """The runs grouped into experiments (`POOL_KEYS` and both configs alike), in order."""
    groups: dict[str, Experiment] = {}
    for r in results:
        key = json.dumps([str(Path(r.plan.get("trace", "")).name)] + [r.plan.get(k, POOL_DEFAULTS.get(k)) for k in POOL_KEYS[1:]]
                         + [r.configs[0], r.configs[1], list(r.arm1)], sort_keys=True, default=str)
        groups.setdefault(key, Experiment([])).runs.append(r)
    return list(groups.values())


def window_of(r: BlockResult) -> tuple[Any, ...]:
    """The window a run replayed: its trace (by file name), days, load and thinning seed."""
    p = r.plan
    return (Path(str(p.get("trace", ""))).name, p.get("start_day"), p.get("days"), p.get("load"), p.get("seed"))


def targets(results: Sequence[BlockResult], unchanged: Sequence[Unchanged] = ()) -> list[str]:
    """The block designs' targets, met or not, in words; replicate runs read together, and the
    windows where the agent changed nothing named."""
    lines = []
    lost = [f"{r.name} {label}: {a.submitted - a.recorded}" for r in results
            for label, a in r.accounted.items() if a.recorded < a.submitted]
    lines.append("no job lost: " + ("met (every submitted job is in sacct)" if not lost else "NOT met: " + ", ".join(lost)))
    experiments = pool(results)
    aa = [x for x in experiments if x.first.aa]
    if not aa:
        lines.append("A/A: no A/A run yet")
    for x in aa:
        e = x.main()
        g, lo, hi = e.gain()
        lines.append(f"A/A ({x.name}): the 95% CI of the gain in average JCT [{pct(lo)}, {pct(hi)}] "
                     + ("contains 0 — met" if lo <= 0 <= hi else "excludes 0 — NOT met")
                     + f"; its half-width, the design's resolution on this machine: {(hi - lo) / 2:.1%}")
    for x in (x for x in experiments if x.first.control):
        e = x.main()
        g, lo, hi = e.gain()
        # the twin-shaped interval can exclude 0 where no effect at all is not rejected: both said
        lines.append(f"control ({x.name}, {x.first.control}; the twin's gain in the blocks "
                     f"{pct(x.first.twin_block_gain['avg_jct'])}): {pct(g)} [{pct(lo)}, {pct(hi)}], "
                     + ("the CI excludes 0" if lo > 0 or hi < 0 else "the CI contains 0")
                     + f"; no effect in any block: p {pval(e.p_value)}")
    agent = [x for x in experiments if not x.first.aa and not x.first.control]
    runs = [x for x in agent if x.judged]
    few = [f"{x.name} ({sum(r.apart for r in x.runs)} of {sum(r.schedule.blocks for r in x.runs)})"
           for x in agent if not x.judged]
    better = [x for x in runs if x.main().gain()[1] > 0]
    worse = [x.name for x in runs if x.main().gain()[2] < 0]
    windows = {window_of(x.first) for x in better}  # two designs on one window are one window
    lines.append(f"the agent's config: the CI excludes 0 on the side of improvement on {len(windows)} window(s)"
                 + (f" ({', '.join(x.name for x in better)})" if better else "") + ", on the side of harm on "
                 + (", ".join(worse) if worse else "none")
                 + (f"; no change on {', '.join(u.name for u in unchanged)}" if unchanged else "")
                 + (f"; too few blocks with the arms apart to judge: {', '.join(few)}" if few else "")
                 + (" — met" if len(windows) >= 2 and not worse else " — not met"))
    far = []
    for x in runs:
        if not x.first.changed:
            continue
        pred = (x.first.decision or {}).get("predicted_gain")
        real = x.main().gain()[0]
        if pred is None or not (real > 0 and pred > 0 and 0.5 <= pred / real <= 2):
            at_round = [r.round_twin_gain for r in x.runs if r.round_twin_gain is not None]
            over = (f"; the twin over the period the round predicted {pct(float(np.mean(at_round)))}"
                    if at_round else "")
            far.append(f"{x.name} (predicted {pct(pred)}, realized {pct(real)}{over})")
    changed = [x for x in runs if x.first.changed]
    lines.append("prediction within a factor of 2 of the realized gain on each window with a change: "
                 + ("met" if changed and not far else "not met on " + ", ".join(far) if far else
                    "no window with a change the design can judge yet" if any(x.first.changed for x in agent)
                    else "no window with a change yet"))
    return lines


def by_run(x: "Experiment") -> bool:
    """Whether an experiment's runs are a crossover by run (each run one unit)."""
    return x.first.schedule.design == "crossover-by-run"


def run_gains(x: "Experiment") -> tuple[np.ndarray, np.ndarray]:
    """Each run of a crossover by run: its realized gain in average JCT (arm 1's cluster against
    arm 0's, on the same jobs) and the twin's (both configs replayed over the window from the
    baseline cluster's submissions; the twin can tip the other way from the other cluster's)."""
    real, twin = [], []
    for r in x.runs:
        rows = {row.arm: row for row in r.rows}
        real.append(1 - rows[1].realized.avg_jct / rows[0].realized.avg_jct)
        twin.append(1 - rows[0].twin[1].avg_jct / rows[0].twin[0].avg_jct)
    return np.array(real), np.array(twin)


def draw(results: Sequence[BlockResult], path: Path) -> None:
    """One panel per run of a block design: each pair's estimate (gain in average JCT) with the
    range its jittered copies give, the twin's prediction for the pair, and the run's estimate
    with its 95% CI. The runs of a crossover by run share one panel: each run's gain, the twin's,
    and their pooled estimate with its CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[BlockResult | Experiment] = [r for r in results if r.schedule.design != "crossover-by-run"]
    panels += [x for x in pool(results) if by_run(x)]
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 2.3 * len(panels)), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        if isinstance(panel, Experiment):
            _draw_runs(ax, panel)
        else:
            _draw_blocks(ax, panel)
    axes[-1, 0].set_xlabel("pair of blocks (a block in a crossover by block; a run in a crossover by run)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)


def _band(ax, e: sb.Effect, points: Sequence[float], label: str) -> tuple[float, float, float]:
    """The estimate and its 95% CI drawn across the panel, the y-range fitted to the points."""
    g, lo, hi = e.gain()
    ax.axhspan(max(lo, -1), min(hi, 1), color="tab:orange", alpha=0.2, label=label)
    ax.axhline(g, color="tab:orange")
    ax.axhline(0, color="black", lw=0.6)
    seen = [abs(v) for v in (*points, g, lo, hi) if math.isfinite(v)]
    lim = min(1.0, max(0.2, 1.6 * max(seen, default=0.2)))
    ax.set_ylim(-lim, lim)  # a jittered range beyond it is cut at the frame
    ax.set_ylabel("gain, avg JCT")
    return g, lo, hi


def _draw_runs(ax, x: "Experiment") -> None:
    real, twin = run_gains(x)
    k = np.arange(len(real))
    ax.plot(k, real, "o", color="tab:blue", label="run: realized")
    ax.plot(k, twin, "x", color="tab:gray", label="run: the twin")
    r = x.first
    g, lo, hi = _band(ax, x.main(), [*real, *twin], f"{len(x.runs)} runs: 95% CI")
    ax.set_title(f"{r.name} and its {len(x.runs) - 1} replicates: crossover by run, "
                 f"{'A/A' if r.aa else f'control: {r.control}' if r.control else 'the agent vs the baseline'}, "
                 f"gain {pct(g)} [{pct(lo)}, {pct(hi)}]", fontsize=9)
    ax.set_xticks(k, [str(i) for i in k])
    ax.legend(fontsize=7, loc="upper left", ncol=3, framealpha=0.6)


def _draw_blocks(ax, r: BlockResult) -> None:
    b = blocks_of(r.rows, r.schedule, "avg_jct")
    est = 1 - np.exp(sb.pair_effects(b))
    twin = 1 - np.exp(sb.pair_effects(sb.Blocks(b.arm, b.pair, b.jobs, np.where(b.jobs > 0, b.twin[np.arange(len(b.arm)), b.arm], 0.0), b.twin)))
    spans = []
    for c in range(len(r.rows[0].jittered) if r.rows else 0):
        jb = sb.Blocks(b.arm, b.pair, b.jobs, np.array([row.jittered[c].avg_jct if row.realized.jobs else 0.0
                                                        for row in r.rows]), b.twin)
        spans.append(1 - np.exp(sb.pair_effects(jb)) - twin)
    k = np.arange(len(est))
    if spans:
        dev = np.array(spans)
        ax.errorbar(k, est, yerr=[np.maximum(0, -np.nanmin(dev, axis=0)), np.maximum(0, np.nanmax(dev, axis=0))],
                    fmt="o", color="tab:blue", capsize=3, label="pair: realized (jittered range)")
    else:
        ax.plot(k, est, "o", color="tab:blue", label="pair: realized")
    ax.plot(k, twin, "x", color="tab:gray", label="pair: the twin")
    g, lo, hi = _band(ax, r.main(), [*est, *twin], "run: 95% CI")
    ax.set_title(f"{r.name}: {r.plan['design']}, {'A/A' if r.aa else f'control: {r.control}' if r.control else 'the agent vs the baseline'}, "
                 f"gain {pct(g)} [{pct(lo)}, {pct(hi)}]", fontsize=9)
    ax.set_xticks(k)
    ax.legend(fontsize=7, loc="upper left", ncol=3, framealpha=0.6)
