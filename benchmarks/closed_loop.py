"""The closed loop on real Slurm: one trace window replayed through `sbatch` on two test clusters
side by side, one at the baseline config, the other tuned live by `autosched agent run --auto`.

Cluster A keeps the baseline; cluster B starts from it and runs the agent (period one compressed
day, its history seeded with the window before, simulated under the baseline and written as sacct
text). Both receive the same jobs at the same wall-clock times: each job at its compressed arrival
time, with its GPUs, its time limit, its user and account, running `sleep` for its compressed
duration. An A/A run (`--aa`) runs both at the baseline: the noise floor of two real clusters.

Time is compressed by --scale (trace seconds per wall second; 120: 1 trace minute -> 0.5 s), and
every time constant of the baseline with it (docs/closed-loop.md says what that distorts). The
jobs come from a canonical trace (default: the bundled Philly sample); the window is thinned at
random (seeded) so that its offered load on the 32 GPUs is --load.

    # one run (two clusters of its own, stopped after; about 40 min at the defaults):
    PYTHONPATH=src nice -n 5 python benchmarks/closed_loop.py --run w1
    PYTHONPATH=src nice -n 5 python benchmarks/closed_loop.py --run aa      # the A/A run
    # every table and the plot again, from the committed files only (docs/closed-loop.md):
    PYTHONPATH=src python benchmarks/closed_loop.py --analyse [--check]

A run writes benchmarks/results/closed_loop/RUN/: run.json (what was replayed, the offered load,
wall times), jobs.csv (what was submitted), sacct-A.txt and sacct-B.txt (each cluster's sacct),
times-A.json and times-B.json (submit, start and end to the ms from slurmctld's log), assoc.txt,
seed.sacct (the agent's seed history), agent-status.json and agent-store.json (the agent's
revisions: `autosched agent status --json` and its revision store, table by table) and agent.log.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

import closed_loop_blocks as cb  # noqa: E402
import slurm_twin as tw  # noqa: E402

from autosched import switchback as sb  # noqa: E402
from autosched.cluster import ClusterSpec  # noqa: E402
from autosched.errors import AutoschedError, InputError  # noqa: E402
from autosched.export.slurm import slurm_conf_lines  # noqa: E402
from autosched.live.records import Evidence  # noqa: E402
from autosched.policies import get_policy  # noqa: E402
from autosched.sim import Simulator  # noqa: E402
from autosched.space import ConfigError, Float, Int  # noqa: E402
from autosched.trace.io import load_trace  # noqa: E402
from autosched.trace.limits import add_time_limits  # noqa: E402
from autosched.trace.parsing import wallclock_seconds  # noqa: E402
from autosched.trace.table import Trace  # noqa: E402
from autosched.workload import MODELS  # noqa: E402
from autosched.workload.level import check_persistence  # noqa: E402

DAY = 86400.0
NODES, GPUS_PER_NODE = tw.NODES, tw.GPUS_PER_NODE  # the test cluster
GPUS = NODES * GPUS_PER_NODE
SAMPLE = REPO / "src" / "autosched" / "data" / "philly_2017-10-02_28d.csv.gz"
# the real traces beside the checkout (README, "Tests on the real traces"), or where AUTOSCHED_TRACES says
TRACES = Path(os.environ.get("AUTOSCHED_TRACES") or REPO.parent / "shared" / "traces")
ITP02 = TRACES / "microsoft-itp-elasticflow" / "cluster02.csv"
RESULTS = REPO / "benchmarks" / "results" / "closed_loop"
DOC = REPO / "docs" / "closed-loop.md"
PLOT = REPO / "docs" / "img" / "closed-loop-wait.png"
SCRIPT = REPO / "scripts" / "slurm-testbed.sh"
TAG, SEED_TAG = "cl", "cls"  # job names: cl-0000 (the window), cls-0000 (the seed history)
SEED_JOB_ID = 1_000_000  # seed jobs' ids: far above the fresh clusters' own (they start at 1)
# what the exports hold: the columns the agent reads from sacct (the seed history has them too)
SACCT_FIELDS = ("JobID", "JobName", "User", "Account", "Partition", "Submit", "Start", "End",
                "State", "Timelimit", "AllocTRES", "ReqTRES", "NCPUS")
PLACEMENT = "first_fit"  # Slurm's select plugin, as the twin models it (docs/fidelity.md)
# Configs at the corners of the live space, replayed by the twin on the baseline cluster's own jobs:
# how much the priority weights could move the average JCT here (every other knob as the baseline)
_NO_WEIGHTS = {"PriorityWeightAge": 0, "PriorityWeightFairshare": 0, "PriorityWeightJobSize": 0,
               "PriorityWeightTRES.CPU": 0, "PriorityWeightTRES.GRES/gpu": 0}
ARCHETYPES = {
    "age only": {**_NO_WEIGHTS, "PriorityWeightAge": 1000},
    "small first": {**_NO_WEIGHTS, "PriorityWeightJobSize": 100000, "PriorityFavorSmall": True},
    "GPU first": {**_NO_WEIGHTS, "PriorityWeightAge": 1000, "PriorityWeightTRES.GRES/gpu": 100000},
    "fair-share heavy": {**_NO_WEIGHTS, "PriorityWeightAge": 1000, "PriorityWeightFairshare": 100000},
}


# ----------------------------------------------------------------------------- what a run replays

@dataclass(frozen=True)
class Plan:
    """One run: the window, its thinning, the time scale and the agent's settings."""

    name: str
    trace: str = str(SAMPLE)
    start_day: float = 3.0  # the window's first instant, in days of the trace's own clock
    days: float = 2.5  # the window replayed on both clusters
    before_days: float = 2.0  # the window before: the agent's seed history
    load: float = 0.85  # offered load on the 32 GPUs the thinning aims at
    seed: int = 0  # of the thinning (and of the agent)
    scale: float = 120.0  # trace seconds per wall second
    cap: float = 12 * 3600.0  # longest trace run time kept (s); longer jobs are cut to it
    dmin: int = 1  # shortest sleep (wall s)
    aa: bool = False  # both clusters at the baseline (no agent)
    budget: int = 20  # the agent's tuning trials per round
    samples: int = 3
    validation_samples: int = 8
    min_jobs: int = 50
    history_days: float = 2.0  # the agent's history, in compressed days
    # The agent's workload model. `stat` groups a VC's submissions at most 60 s apart into one
    # batch and fits hourly counts: under compression a trace minute is half a second, so its
    # batches and hours are the wrong size (docs/closed-loop.md); `replay` has no time constants.
    model: str = "stat"
    # The agent's model on the jobs' own clock (`agent init --time-scale` = scale): its bursts and
    # hours are trace seconds and hours again (ModelSource); off in the committed windows.
    model_trace_time: bool = False
    # The design (docs/closed-loop.md): "side-by-side" (cluster A the baseline, cluster B the
    # agent throughout), or a block design of autosched.switchback, "switchback" (one cluster) or
    # "crossover" (two), in which the agent makes one decision on the seed history before the
    # window and the harness runs its config and the baseline in turn, in randomised blocks.
    design: str = "side-by-side"
    blocks: int = cb.MIN_BLOCKS  # each as long as the run allows (closed_loop_blocks.lengths)
    design_seed: int = 0  # the block order's
    max_step: float = 0.25  # the agent's largest move per round, as a fraction of a knob's range
    # a replicate: arm 1 is the config the agent chose in this run (a name in the same --out), no
    # agent round of its own; its pairs and the first run's are read together (closed_loop_blocks.pool)
    decision_from: str = ""
    # the blocks run even when the agent changed nothing (both arms the baseline): the "ci" plan,
    # which checks the harness, not a gain; a measuring run ends after such a round (`measures`)
    run_unchanged: bool = False
    # a control: arm 1 is this archetype (ARCHETYPES) or these knobs ("KNOB=VALUE,...") over the
    # baseline, with no agent round (`control_config`); does the design see an effect the twin
    # says is there?
    control: str = ""
    # the agent's loop runs through the window as in production (`agent run`, its rounds each
    # period and at a burst: closed_loop_screen.shadow), on the cluster's jobs and clock with its
    # applies kept apart; arm 1 of each block is the config it runs at the block's start
    in_window: bool = False
    # The CPUs a job that asks for none gets per GPU: the test clusters' DefCpuPerGPU
    # (TESTBED_DEF_CPU_PER_GPU), as a site sets it, so that Slurm's job-size factor tells a 1-GPU
    # job from an 8-GPU one, as the replays of docs/results.md size them; 0: unset, one CPU a job
    # (the runs before it)
    def_cpu_per_gpu: int = 0
    # the agent's samples follow the last hours' load to this power (`agent init --persistence`);
    # 0: the history's level (the runs before it)
    persistence: float = 0.0

    @property
    def day(self) -> float:
        """One trace day in wall seconds: the agent's period."""
        return DAY / self.scale


# The runs of docs/closed-loop.md. Side by side: three windows of the bundled Philly sample and
# one A/A run on the first one's jobs, the sample's 2.5-day windows whose half-days vary least in
# load (busiest over quietest: 2.1, 2.1 and 1.6), so that each of the agent's days has jobs to
# queue. Block designs: the windows `--pick` picks (a load of 0.8-1.0, at least 10% to gain by
# an archetype in the blocks), the agent deciding with --max-step 1; and their A/A runs. "ci" is
# the short run of tests/test_closed_loop.py: a crossover of 4 blocks, about 80 jobs.
BLOCKS = dict(design="switchback", max_step=1.0, model_trace_time=True)
PLANS = {
    "w1": Plan("w1", start_day=9.0),
    "w2": Plan("w2", start_day=18.0),
    "w3": Plan("w3", start_day=21.0),
    "aa": Plan("aa", start_day=9.0, aa=True),
    "ci": Plan("ci", start_day=1.0, days=1.0, before_days=1.0, load=0.3, scale=1440.0,
               cap=6 * 3600.0, budget=3, samples=1, validation_samples=2, min_jobs=20,
               history_days=2.0, model_trace_time=True, design="crossover", blocks=4, max_step=1.0,
               run_unchanged=True),
    # the same with the agent's loop through the window (its rounds each period and at a burst),
    # on clusters that size a job by DefCpuPerGPU
    "ci-loop": Plan("ci-loop", start_day=1.0, days=1.0, before_days=1.0, load=0.3, scale=1440.0,
                    cap=6 * 3600.0, budget=3, samples=1, validation_samples=2, min_jobs=20,
                    history_days=2.0, model_trace_time=True, design="crossover", blocks=4, max_step=1.0,
                    in_window=True, def_cpu_per_gpu=1),
    "sb-aa": Plan("sb-aa", start_day=18.0, aa=True, **BLOCKS),
    "sb-s18": Plan("sb-s18", start_day=18.0, **BLOCKS),
    # ITP cluster02 is sparse: the two days before day 21 hold 80 jobs once thinned, 47 of them
    # finished by the window's start, under the agent's 50; the four days before hold 383
    "sb-itp21": Plan("sb-itp21", trace=str(ITP02), start_day=21.0, before_days=4.0, history_days=4.0, **BLOCKS),
}


def baseline(scale: float) -> dict[str, Any]:
    """The baseline config: the testbed's slurm.conf (scripts/slurm/slurm.conf.in) with its time
    constants divided by `scale` (kept within each knob's range: bf_interval and bf_resolution
    cannot go below 1 s, PriorityMaxAge and PriorityDecayHalfLife below 10 min)."""
    space = get_policy("multifactor").space

    def scaled(name: str, value: float) -> float:
        k = space[name]
        assert isinstance(k, (Int, Float)), name
        v = min(max(value / scale, float(k.low)), float(k.high))
        return max(1, round(v)) if isinstance(k, Int) else v

    return {"PriorityWeightAge": 1000, "PriorityMaxAge": scaled("PriorityMaxAge", 7 * DAY),
            "PriorityWeightFairshare": 10000,
            "PriorityDecayHalfLife": scaled("PriorityDecayHalfLife", DAY),
            "PriorityWeightJobSize": 1000, "PriorityFavorSmall": False,
            "PriorityWeightTRES.CPU": 1000, "PriorityWeightTRES.GRES/gpu": 2000,
            "TRESBillingWeights.CPU": 1.0, "TRESBillingWeights.GRES/gpu": 4.0,
            "PriorityCalcPeriod": 1, "backfill": True,
            "bf_interval": scaled("bf_interval", 30), "bf_resolution": scaled("bf_resolution", 60),
            # bf_window is in minutes: 1440 (one day) -> one compressed day
            "bf_window": scaled("bf_window", 1440)}


def control_config(control: str, base: Mapping[str, Any]) -> dict[str, Any]:
    """Arm 1 of a control run: a multifactor archetype (ARCHETYPES), or ``KNOB=VALUE`` pairs
    separated by commas, over `base`; InputError naming --control for anything else."""
    if control in ARCHETYPES:
        return {**base, **ARCHETYPES[control]}
    items = [i for i in control.split(",") if i.strip()]
    if not items:
        raise InputError(f"--control {control!r}: name an archetype or give KNOB=VALUE pairs")
    names = [i.partition("=")[0].strip() for i in items]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise InputError(f"--control {control!r}: {', '.join(twice)} given more than once")
    try:
        valid = get_policy("multifactor").space.parse_assignments(items, base)
    except ConfigError as e:
        raise InputError(f"--control {control!r}: neither an archetype ({', '.join(sorted(ARCHETYPES))}) nor "
                         f"KNOB=VALUE pairs: {e}") from None
    return {**base, **{n: valid[n] for n in names}}


def time_limit_min(limit: float, secs: int, scale: float) -> int:
    """A job's time limit in whole minutes (Slurm's unit) for a sleep of `secs` wall seconds:
    its limit (`limit`, trace s) compressed, never below the run and 5 s of slack."""
    return max(1, math.ceil(limit / scale / 60.0), math.ceil((secs + 5) / 60.0))


def trace_limits(trace: Trace) -> np.ndarray:
    """Every job's time limit (trace s): the trace's own, and for a job without one the limit
    `autosched trace limits TRACE` writes (Tsafrir, Etsion & Feitelson's model, seed 0), so the
    harness, `autosched run` and the twin replay the same limits."""
    return add_time_limits(trace, seed=0)[0].time_limit


@dataclass(frozen=True)
class Selection:
    """The jobs of a run: the window's, the window before's, and the thinning behind them."""

    jobs: list[tw.Job]  # submit: wall s after the window's start
    before: list[tw.Job]  # submit < 0
    fraction: float  # share of the window's jobs kept
    full_load: float  # the window's offered load before thinning (run times cut to the cap)
    offered_load: float  # what the clusters receive: GPU x sleep over 32 GPUs x the window


def associations(trace: Trace, rows: np.ndarray) -> list[tuple[str, str]]:
    """The testbed's (user, account) of each row: the trace's users and accounts, each in order of
    first appearance, mapped onto the test users and accounts; without them, its VCs (slurm_twin's
    rule); without either, alice/physics."""
    if trace.user is not None and trace.account is not None:
        users = {u: tw.USERS[i % len(tw.USERS)] for i, u in enumerate(dict.fromkeys(trace.user[rows]))}
        accounts = {a: tw.ACCOUNTS[i % len(tw.ACCOUNTS)]
                    for i, a in enumerate(dict.fromkeys(trace.account[rows]))}
        return [(users[u], accounts[a]) for u, a in zip(trace.user[rows], trace.account[rows])]
    if trace.vc is not None:
        by_vc = tw.testbed_associations(str(v) for v in trace.vc[rows])
        return [by_vc[str(v)] for v in trace.vc[rows]]
    return [(tw.USERS[0], tw.ACCOUNTS[0])] * len(rows)


def select(trace: Trace, plan: Plan) -> Selection:
    """Thin the window (and the window before, with the same draw) to the plan's load."""
    w0 = plan.start_day * DAY
    w1 = w0 + plan.days * DAY
    b0 = w0 - plan.before_days * DAY
    s, d, g = trace.submit_time, np.minimum(trace.duration, plan.cap), trace.num_gpus
    fits = g <= GPUS_PER_NODE  # a job of more than one node's GPUs is left out
    in_window = fits & (s >= w0) & (s < w1)
    full = float((g[in_window] * d[in_window]).sum()) / (GPUS * plan.days * DAY)
    if full <= 0:
        raise InputError(f"{plan.trace}: no job of at most {GPUS_PER_NODE} GPUs in days "
                         f"{plan.start_day:g}-{plan.start_day + plan.days:g}")
    fraction = min(1.0, plan.load / full)
    # one draw per row of the whole trace: a job's fate does not depend on the window
    keep = np.random.default_rng(plan.seed).random(len(trace)) < fraction
    rows = np.flatnonzero(fits & keep & (s >= b0) & (s < w1))
    assoc = associations(trace, rows)
    limits = trace_limits(trace)
    jobs: list[tw.Job] = []
    before: list[tw.Job] = []
    for (user, account), r in zip(assoc, rows):
        secs = int(max(plan.dmin, round(float(d[r]) / plan.scale)))
        limit = time_limit_min(float(limits[r]), secs, plan.scale)
        # floored to the 10 ms the harness submits at, so a job of the window before stays
        # before it (rounding put one submitted 0.001 s early at the window's start)
        submit = math.floor((float(s[r]) - w0) / plan.scale * 100) / 100
        into = jobs if s[r] >= w0 else before
        tag = TAG if s[r] >= w0 else SEED_TAG
        into.append(tw.Job(f"{tag}-{len(into):04d}", submit, int(g[r]), secs, limit, user, account))
    offered = sum(j.gpus * j.seconds for j in jobs) / (GPUS * plan.days * plan.day)
    return Selection(jobs, before, fraction, full, offered)


# ----------------------------------------------------------------------------- windows worth a run

PICK_LOAD = (0.8, 1.0)  # offered load of the test GPUs a picked window has
PICK_GAIN = 0.10  # ... what the archetypes' best leaves to gain over the window, in the twin
# ... and the share of that gain the blocks show: a block starts from the backlog the other config
# left, and on most windows its effect is not the window's (even in sign: docs/closed-loop.md)
PICK_SEEN = 0.5


@dataclass(frozen=True)
class WindowScore:
    """What the twin saw of one window: its jobs, offered load, lengths, and each archetype's gain
    on the baseline (average JCT, positive = shorter) over the whole window run under it
    throughout, and in the design's blocks."""

    start_day: float
    jobs: int
    offered_load: float
    lengths: cb.Lengths
    block_gain: dict[str, float]
    window_gain: dict[str, float]

    @property
    def best(self) -> str:
        """The archetype with the largest gain over the window."""
        return max(self.window_gain, key=lambda a: self.window_gain[a])

    @property
    def picked(self) -> bool:
        w, b = self.window_gain[self.best], self.block_gain[self.best]
        return (PICK_LOAD[0] <= round(self.offered_load, 2) <= PICK_LOAD[1] and w >= PICK_GAIN
                and b >= PICK_SEEN * w)


def score_window(trace: Trace, plan: Plan) -> WindowScore:
    """Replay a window's jobs in the twin (the test cluster, first_fit) under the plan's block
    design, the baseline against each archetype: the pseudo-real run of the design (each block
    under its arm), then every block from that run's state under each (`closed_loop_blocks`)."""
    sel = select(trace, plan)
    base = baseline(plan.scale)
    lens = cb.lengths(sel.jobs, plan.days * plan.day, plan.blocks)
    jobs = cb.window_trace(sel.jobs)
    spec = cb.testbed_spec(def_cpu_per_gpu=plan.def_cpu_per_gpu)
    sched = sb.schedule("switchback", lens.blocks, plan.design_seed)
    whole = float(cb.simulate(jobs, spec, [(0.0, base)]).records().jct.mean())
    blocks, window = {}, {}
    for name, arch in ARCHETYPES.items():
        cfg = {**base, **arch}
        tl = cb.Timeline(lens.block, lens.washout, sched, (base, cfg))
        blocks[name] = cb.twin_block_gain(cb.block_rows([cb.simulate_run(jobs, spec, tl, 0)], spec, tl))
        window[name] = 1 - float(cb.simulate(jobs, spec, [(0.0, cfg)]).records().jct.mean()) / whole
    return WindowScore(plan.start_day, len(sel.jobs), sel.offered_load, lens, blocks, window)


def pick(trace: Trace, plan: Plan, step: float = 1.0, log=print) -> list[WindowScore]:
    """Every window of the plan's length starting on a multiple of `step` days (with the window
    before it in the trace), scored (`score_window`); prints each as it goes."""
    first = math.ceil((float(trace.submit_time.min()) / DAY + plan.before_days) / step) * step
    last = float(trace.submit_time.max()) / DAY - plan.days
    out = []
    for day in np.arange(first, last + 1e-9, step):
        try:
            ws = score_window(trace, replace(plan, start_day=float(day)))
        except InputError as e:
            log(f"day {day:g}: {e}")
            continue
        out.append(ws)
        log(pick_row(ws))
    return out


def pick_header() -> str:
    names = " | ".join(ARCHETYPES)
    return (f"| start day | jobs | offered load | blocks x block (wall s) | washout | {names} | picked |\n"
            f"|---|---|---|---|---|{'---|' * len(ARCHETYPES)}---|")


def pick_row(ws: WindowScore) -> str:
    cells = " | ".join(f"{ws.block_gain[a]:+.1%} ({ws.window_gain[a]:+.1%})" for a in ARCHETYPES)
    return (f"| {ws.start_day:g} | {ws.jobs} | {ws.offered_load:.2f} | {ws.lengths.blocks} x "
            f"{ws.lengths.block:.0f} | {ws.lengths.washout:.0f} | {cells} | "
            f"{'**' + ws.best + '**' if ws.picked else ''} |")


# ----------------------------------------------------------------------------- sacct text

def stamp(t: float) -> str:
    """A unix time as sacct prints it (UTC: the harness runs every Slurm client with TZ=UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


def slurm_minutes(m: int) -> str:
    """Minutes as sacct prints a Timelimit: HH:MM:SS, or D-HH:MM:SS from a day on."""
    d, rest = divmod(m, 1440)
    return (f"{d}-" if d else "") + f"{rest // 60:02d}:{rest % 60:02d}:00"


def seed_history(before: Sequence[tw.Job], t0: float, config: dict, assoc_path: Path | None,
                 def_cpu_per_gpu: int = 0) -> str:
    """The window before as the baseline cluster would have run it (the twin, first_fit), written
    as sacct text with absolute times before `t0` (the window's first instant): the jobs that
    ended by then, COMPLETED, with ids from SEED_JOB_ID; each job's CPUs as a cluster with
    DefCpuPerGPU `def_cpu_per_gpu` gives them (`sacct_row`)."""
    header = "|".join(SACCT_FIELDS)
    if not before:
        return header + "\n"
    first = min(j.submit for j in before)
    trace = Trace.from_columns({
        "job_id": np.arange(len(before)), "submit_time": [j.submit - first for j in before],
        "num_gpus": [j.gpus for j in before], "duration": [float(j.seconds) for j in before],
        "time_limit": [60.0 * j.limit_min for j in before], "user": [j.user for j in before],
        "account": [j.account for j in before], "name": [j.name for j in before]})
    spec = tw.testbed_cluster(def_cpu_per_gpu)
    if assoc_path is not None:
        from autosched.associations import read_associations

        spec = replace(spec, associations=read_associations(assoc_path))
    rec = Simulator(trace, spec, get_policy("multifactor")({**tw.knobs(config), "placement": PLACEMENT})).run().records()
    by_name = {j.name: j for j in before}
    names = trace.name
    assert names is not None
    lines = [header]
    for k in range(len(trace)):
        end = t0 + first + float(rec.end[k])
        if end >= t0:
            continue  # still running or queued when the window begins: not on the cluster
        lines.append(sacct_row(SEED_JOB_ID + k, by_name[str(names[k])], t0 + first + float(rec.submit[k]),
                               t0 + first + float(rec.first_start[k]), end, def_cpu_per_gpu))
    return "\n".join(lines) + "\n"


def sacct_row(job_id: int, j: tw.Job, submit: float, start: float | None, end: float | None,
              def_cpu_per_gpu: int = 0) -> str:
    """A job's row as the test cluster's sacct prints it (unix times; None: not yet): PENDING
    without a start (its TRES requested, none allocated), RUNNING without an end, else COMPLETED.
    The job asks for GPUs alone (ReqTRES: one CPU); once it starts it has `def_cpu_per_gpu` CPUs
    per GPU (the cluster's DefCpuPerGPU; one when that is 0) and DefMemPerCPU's 512 MB each
    (AllocTRES, NCPUS), as the test cluster's sacct shows them; billing is the gpu partition's
    (CPU 1, GPU 4)."""
    def tres(cpus: int) -> str:
        mem = 512 * cpus
        return (f"billing={4 * j.gpus + cpus},cpu={cpus},gres/gpu={j.gpus},"
                f"mem={f'{mem // 1024}G' if mem % 1024 == 0 else f'{mem}M'},node=1")

    cpus = 1 if start is None else max(1, j.gpus * def_cpu_per_gpu)
    state = "PENDING" if start is None else "RUNNING" if end is None else "COMPLETED"
    row = {"JobID": str(job_id), "JobName": j.name, "User": j.user, "Account": j.account,
           "Partition": "gpu", "Submit": stamp(submit), "Start": "Unknown" if start is None else stamp(start),
           "End": "Unknown" if end is None else stamp(end), "State": state,
           "Timelimit": slurm_minutes(j.limit_min), "AllocTRES": "" if start is None else tres(cpus),
           "ReqTRES": tres(1), "NCPUS": str(cpus)}
    return "|".join(row[f] for f in SACCT_FIELDS)


def read_sacct(path: Path) -> list[dict[str, str]]:
    """The rows of an sacct export (`--parsable2`: `|`-separated, with a header)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="|"))


# ----------------------------------------------------------------------------- the two clusters

@dataclass
class Testbed:
    """One cluster of scripts/slurm-testbed.sh: its root, port base and client environment."""

    label: str  # A or B
    root: Path
    port_base: int
    def_cpu_per_gpu: int = 0  # its DefCpuPerGPU (Plan.def_cpu_per_gpu); 0: unset

    @property
    def env(self) -> dict[str, str]:
        return dict(os.environ, SLURM_CONF=str(self.root / "etc" / "slurm.conf"), TZ="UTC",
                    SLURM_TIME_FORMAT="standard", TESTBED_ROOT=str(self.root),
                    TESTBED_PORT_BASE=str(self.port_base),
                    TESTBED_DEF_CPU_PER_GPU=str(self.def_cpu_per_gpu or ""))

    @property
    def include(self) -> Path:
        return self.root / "etc" / "autosched.conf"

    def script(self, *args: str, timeout: float = 300) -> subprocess.Popen[str]:
        return subprocess.Popen(["bash", str(SCRIPT), *args], env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def cluster(self) -> tw.Cluster:
        return tw.Cluster(self.env, self.include)


def start_all(beds: Sequence[Testbed]) -> None:
    """Start the clusters at once (`start --fresh`); stop them all if one fails."""
    procs = [b.script("start", "--fresh") for b in beds]
    failed = []
    for b, p in zip(beds, procs):
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            failed.append(f"cluster {b.label} ({b.root}):\n{out.strip()}")
    if failed:
        stop_all(beds)
        raise RuntimeError("a test cluster did not start:\n" + "\n".join(failed))


def stop_all(beds: Sequence[Testbed]) -> None:
    """`slurm-testbed.sh stop` for each cluster (every daemon by its PID file)."""
    procs = [b.script("stop") for b in beds if b.root.exists()]
    for p in procs:
        p.communicate(timeout=600)


def export_sacct(bed: Testbed, since: float, out: Path) -> None:
    """The cluster's jobs since `since`, one row per job (no steps), with the node each ran on."""
    text = bed.cluster().run("sacct", "-a", "-X", "--parsable2", "-S", stamp(since - 60),
                             "--format=" + ",".join((*SACCT_FIELDS, "NodeList")), timeout=120)
    out.write_text(text)


def save_times(bed: Testbed, out: Path) -> None:
    """Submit, start and end of every job, and the controller's thread clocks, to the ms from
    slurmctld's log (`slurm_twin.log_times`)."""
    lt = tw.log_times(bed.root / "log" / "slurmctld.log")
    out.write_text(json.dumps({k: {str(j): round(t, 3) for j, t in v.items()} for k, v in lt.items()}))


def load_times(path: Path) -> dict[str, dict[int, float]] | None:
    if not path.exists():
        return None
    return {k: {int(j): t for j, t in v.items()} for k, v in json.loads(path.read_text()).items()}


# ----------------------------------------------------------------------------- the agent (its CLI only)

def autosched(*args: str) -> list[str]:
    """The command line of `autosched ARGS` with this checkout's package."""
    return [sys.executable, "-c", "from autosched.cli import main; main()", *args]


def agent_env(bed: Testbed) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return dict(bed.env, PYTHONPATH=str(REPO / "src") + (os.pathsep + path if path else ""))


def agent_options(plan: Plan, seed: Path) -> list[str]:
    """`agent init`'s options of a run but the connector's: auto mode, the plan's settings."""
    return ["--auto", "--period", f"{plan.day:g}",
            "--history", f"{plan.history_days * plan.day:g}", "--min-jobs", str(plan.min_jobs),
            "--budget", str(plan.budget), "--samples", str(plan.samples),
            "--validation-samples", str(plan.validation_samples), "--model", plan.model,
            "--seed-history", str(seed), "--fix", f"placement={PLACEMENT}",
            "--time-scale", f"{plan.scale if plan.model_trace_time else 1:g}",
            "--max-step", f"{plan.max_step:g}", "--persistence", f"{plan.persistence:g}"]


def agent_init(bed: Testbed, state: Path, plan: Plan, seed: Path) -> None:
    env = agent_env(bed)
    cmd = autosched("agent", "init", "--state", str(state), "--slurm-conf", env["SLURM_CONF"],
                    "--include", str(bed.include), *agent_options(plan, seed))
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"`autosched agent init` exited {res.returncode}: {res.stderr.strip()}")


def export_agent(bed: Testbed, state: Path, outdir: Path) -> None:
    """The agent's revisions: `agent status --json` and its store, every table as JSON rows; and
    its settings as `agent init` saved them."""
    env = agent_env(bed)
    res = subprocess.run(autosched("agent", "status", "--state", str(state), "--json",
                                   "--history", "100000"),
                         env=env, capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"`autosched agent status` exited {res.returncode}: {res.stderr.strip()}")
    (outdir / "agent-status.json").write_text(json.dumps(json.loads(res.stdout), indent=1) + "\n")
    (outdir / "agent-store.json").write_text(json.dumps(dump_store(state), indent=1) + "\n")
    shutil.copyfile(state / "settings.json", outdir / "agent-settings.json")


def dump_store(state: Path) -> dict[str, Any]:
    """Every SQLite file of the state directory, table by table, rows as objects."""
    out: dict[str, Any] = {}
    for db in sorted(state.glob("*.sqlite*")) + sorted(state.glob("*.db")):
        if db.suffix in (".sqlite-wal", ".sqlite-shm"):
            continue
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        con.row_factory = sqlite3.Row
        try:
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            out[db.name] = {n: [dict(r) for r in con.execute(f'SELECT * FROM "{n}"')] for n in names}
        finally:
            con.close()
    return out


# ----------------------------------------------------------------------------- one run

def write_jobs(jobs: Sequence[tw.Job], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "submit", "gpus", "seconds", "limit_min", "user", "account"])
        for j in jobs:
            w.writerow([j.name, j.submit, j.gpus, j.seconds, j.limit_min, j.user, j.account])


def read_jobs(path: Path) -> list[tw.Job]:
    with open(path, newline="") as f:
        return [tw.Job(r["name"], float(r["submit"]), int(r["gpus"]), int(r["seconds"]),
                       int(r["limit_min"]), r["user"], r["account"]) for r in csv.DictReader(f)]


@contextmanager
def recording(info: dict[str, Any], outdir: Path, t_begin: float) -> Iterator[None]:
    """Write the run's record (run.json) however the body ends: with `failed` (the error, or
    that it stopped early) unless it ran to its end."""
    info["failed"] = "stopped before the last job was recorded"
    try:
        yield
        del info["failed"]
    except BaseException as e:
        info["failed"] = f"{type(e).__name__}: {e}"
        raise
    finally:
        info["wall_total"] = time.time() - t_begin
        (outdir / "run.json").write_text(json.dumps(info, indent=1) + "\n")


def export_clusters(beds: Sequence[Testbed], t0: float, outdir: Path) -> None:
    """Each cluster's sacct and slurmctld's times, once every job has left its queue."""
    time.sleep(3.0)  # slurmdbd records the last ends
    for b in beds:
        export_sacct(b, t0, outdir / f"sacct-{b.label}.txt")
        save_times(b, outdir / f"times-{b.label}.json")


def run(plan: Plan, outdir: Path, roots: tuple[Path, Path], port_bases: tuple[int, int],
        lead: float = 10.0, log=print, trace: Trace | None = None) -> dict[str, Any]:
    """Replay the plan on two fresh clusters (started here, stopped before returning) and write
    the run's files to `outdir`; returns run.json's content. A run that fails leaves its
    run.json with `failed` (the error), which the analysis refuses."""
    t_begin = time.time()
    if trace is None:
        trace, _ = load_trace(Path(plan.trace))
    sel = select(trace, plan)
    log(f"{plan.name}: {len(sel.jobs)} jobs in {plan.days:g} days from day {plan.start_day:g} "
        f"(thinned to {sel.fraction:.3f}: offered load {sel.full_load:.2f} -> "
        f"{sel.offered_load:.2f} of {GPUS} GPUs), {len(sel.before)} before; 1 trace day = "
        f"{plan.day:g} s")
    outdir.mkdir(parents=True, exist_ok=True)
    write_jobs(sel.jobs, outdir / "jobs.csv")
    config = baseline(plan.scale)
    beds = [Testbed(label, root, base, plan.def_cpu_per_gpu) for label, root, base in zip("AB", roots, port_bases)]
    info: dict[str, Any] = {"plan": asdict(plan), "baseline": config, "jobs": len(sel.jobs),
                            "seed_jobs": len(sel.before), "fraction": sel.fraction,
                            "full_load": sel.full_load, "offered_load": sel.offered_load}
    return recorded_run(plan, info, outdir, t_begin, beds, log,
                        lambda state: run_side_by_side(plan, sel, beds, state, outdir, info, lead, log))


def recorded_run(plan: Plan, info: dict[str, Any], outdir: Path, t_begin: float, beds: Sequence[Testbed], log,
                 body: Callable[[Path], None]) -> dict[str, Any]:
    """Run `body` on a fresh agent state directory, recorded into `info` (and `outdir`), every
    test cluster in `beds` stopped and the state removed after, whatever happens."""
    state = Path(tempfile.mkdtemp(prefix="cl-agent-"))
    with recording(info, outdir, t_begin):
        try:
            body(state)
        finally:
            stop_all(beds)
            shutil.rmtree(state, ignore_errors=True)  # what matters of it is exported
    log(f"{plan.name}: " + (f"run {info['wall_run']:.0f} s, " if "wall_run" in info else "")
        + f"all in {info['wall_total']:.0f} s")
    return info


def run_side_by_side(plan: Plan, sel: Selection, beds: Sequence[Testbed], state: Path, outdir: Path,
                     info: dict[str, Any], lead: float, log) -> None:
    """The side-by-side run on started clusters: A at the baseline, B with `agent run`."""
    t_begin = time.time()
    config = info["baseline"]
    agent: subprocess.Popen[bytes] | None = None
    try:
        start_all(beds)
        info["wall_start_clusters"] = time.time() - t_begin
        clusters = [b.cluster() for b in beds]
        for cl in clusters:
            cl.configure(config)
        (outdir / "assoc.txt").write_text(clusters[1].run(
            "sacctmgr", "-P", "show", "assoc", "format=Cluster,Account,User,ParentName,Share"))
        t0 = time.time() + lead
        if not plan.aa:
            (outdir / "seed.sacct").write_text(seed_history(sel.before, t0, config, outdir / "assoc.txt",
                                                            plan.def_cpu_per_gpu))
            agent_init(beds[1], state, plan, outdir / "seed.sacct")
            delay = t0 - time.time()
            if delay > 0:
                time.sleep(delay)
            env = agent_env(beds[1])
            with open(outdir / "agent.log", "wb") as f:
                agent = subprocess.Popen(autosched("agent", "run", "--state", str(state)),
                                         env=env, stdout=f, stderr=subprocess.STDOUT)
        info["t0"] = t0
        errors: list[str] = []

        def submit(cl: tw.Cluster, label: str) -> None:
            try:
                cl.submit(sel.jobs, t0)
            except Exception as e:  # noqa: BLE001 - reported below: the run's jobs are incomplete
                errors.append(f"cluster {label}: {e}")

        threads = [threading.Thread(target=submit, args=(cl, b.label)) for cl, b in zip(clusters, beds)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        info["wall_submitted"] = time.time() - t0
        log(f"{plan.name}: submitted in {info['wall_submitted']:.0f} s"
            + (f"; errors: {errors}" if errors else ""))
        names = {j.name for j in sel.jobs}
        drain = 4 * plan.day + plan.cap / plan.scale
        for cl in clusters:
            cl.wait_done(names, timeout=drain)
        info["wall_run"] = time.time() - t0
        info["submit_errors"] = errors
        if agent is not None:
            stop_agent(agent)
            agent = None
            export_agent(beds[1], state, outdir)
        export_clusters(beds, t0, outdir)
    finally:
        if agent is not None:
            stop_agent(agent)


def apply_config(bed: Testbed, config: Mapping[str, Any]) -> float:
    """Write `config` to the cluster's include file and reconfigure (fair-share usage kept, unlike
    `slurm_twin.Cluster.configure`); returns when the reconfigure returned (unix s)."""
    lines = [ln for ln in slurm_conf_lines(tw.knobs(dict(config))) if not ln.startswith("#")]
    lines.append("DebugFlags=Backfill")  # the log then shows each backfill cycle (the twin's clock)
    bed.include.write_text("# written by benchmarks/closed_loop.py\n" + "\n".join(lines) + "\n")
    bed.cluster().run("scontrol", "reconfigure")
    return time.time()


@dataclass(frozen=True)
class Decision:
    """The agent's one round before a block design's window: the config it left running (whole)
    and what it recorded of the change (empty when it changed nothing)."""

    config: dict[str, Any]
    revision: int | None  # the applied revision (None: the baseline still runs)
    diff: dict[str, Any]
    predicted_gain: float | None
    spread: float | None
    why: str  # the round's own account (`agent status`: last_round)


def agent_decision(bed: Testbed, state: Path, plan: Plan, seed: Path, outdir: Path,
                   base: Mapping[str, Any]) -> Decision:
    """`agent init --auto` on the cluster with the seed history, then one round (`agent step`):
    what it decided, with its revisions exported (`export_agent`) and the round's JSON saved."""
    agent_init(bed, state, plan, seed)
    env = agent_env(bed)
    res = subprocess.run(autosched("agent", "step", "--state", str(state), "--json"), env=env,
                         capture_output=True, text=True, timeout=3600)
    (outdir / "agent-step.json").write_text(res.stdout)
    (outdir / "agent.log").write_text(res.stderr)
    if res.returncode != 0:
        raise RuntimeError(f"`autosched agent step` exited {res.returncode}: {res.stderr.strip()[-2000:]}")
    export_agent(bed, state, outdir)
    status = json.loads((outdir / "agent-status.json").read_text())
    return decision_of(status, base)


def measures(plan: Plan, dec: Decision) -> bool:
    """Whether a block run goes on after the agent's round: when the agent changed the config
    (or the plan runs its blocks anyway). Without a change both arms are the baseline, and 35
    minutes of blocks would measure an A/A run the design has measured already."""
    return dec.revision is not None or plan.run_unchanged


def decision_of(status: Mapping[str, Any], base: Mapping[str, Any]) -> Decision:
    """The decision an `agent status --json` records after one round: the running revision's
    config over the baseline; a change if that revision is not the baseline's."""
    running = status.get("running") or {}
    config = {**base, **(running.get("config") or {})}
    why = str((status.get("last_round") or {}).get("why") or "")
    rev = next((r for r in status.get("history") or [] if r.get("id") == running.get("id")), None)
    if rev is None or rev.get("trigger") == "baseline" or rev.get("parent") is None:
        return Decision(config, None, {}, None, None, why)
    return revision_decision(rev, config, why)


def revision_decision(rev: Mapping[str, Any], config: dict[str, Any], why: str) -> Decision:
    """The decision a revision of `agent status --json` records, with its whole `config`."""
    ev = rev.get("evidence") or {}
    return Decision(config, int(rev["id"]), dict(rev.get("diff") or {}), ev.get("predicted_gain"),
                    ev.get("spread"), why)


def loop_decision(status: Mapping[str, Any], base: Mapping[str, Any]) -> Decision:
    """The decision of an agent's loop through the window (`Plan.in_window`): the last change the
    agent itself made and applied, whatever came after it. A rollback its judge made later goes
    back to the baseline, so the running revision (`decision_of`) would record the rollback as
    the decision, and the change it measured would be lost; without a change, `decision_of`."""
    changes = [r for r in status.get("history") or [] if r.get("kind") not in ("baseline", "rollback", "adopted")
               and r.get("parent") is not None and r.get("applied_at") is not None]
    if not changes:
        return decision_of(status, base)
    rev = max(changes, key=lambda r: int(r["id"]))
    why = str((status.get("last_round") or {}).get("why") or "")
    return revision_decision(rev, {**base, **(rev.get("config") or {})}, why)


def commit() -> str:
    """The checkout's commit (with "+changes" if the tree differs from it): the code of a run."""
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True, timeout=60).stdout.strip()
    head = git("rev-parse", "--short", "HEAD")
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "") if head else "unknown"


def run_blocks(plan: Plan, outdir: Path, roots: tuple[Path, Path], port_bases: tuple[int, int],
               trace: Trace, lead: float = 10.0, log=print) -> dict[str, Any]:
    """A block design (switchback on cluster A, or crossover on A and B): the agent's decision
    on the seed history (none in an A/A run), then the window's jobs with the baseline and that
    config in turn, as the seeded schedule says; the run's files to `outdir` (module doc).
    The clusters are started here and stopped before it returns."""
    t_begin = time.time()
    sel = select(trace, plan)
    lens = cb.lengths(sel.jobs, plan.days * plan.day, plan.blocks)
    sched = sb.schedule(plan.design, lens.blocks, plan.design_seed)
    log(f"{plan.name}: {len(sel.jobs)} jobs in {plan.days:g} days from day {plan.start_day:g} "
        f"(offered load {sel.offered_load:.2f}); {plan.design}, {lens.why(plan.scale)}; arms "
        f"{''.join(str(a) for a in sched.arms[:, 0])} (seed {plan.design_seed})")
    outdir.mkdir(parents=True, exist_ok=True)
    write_jobs(sel.jobs, outdir / "jobs.csv")
    base = baseline(plan.scale)
    beds = [Testbed(label, root, port, plan.def_cpu_per_gpu)
            for label, root, port in zip("AB", roots, port_bases)][:sched.units]
    info: dict[str, Any] = {"plan": asdict(plan), "baseline": base, "jobs": len(sel.jobs),
                            "seed_jobs": len(sel.before), "fraction": sel.fraction,
                            "full_load": sel.full_load, "offered_load": sel.offered_load,
                            "lengths": asdict(lens), "schedule": sched.to_dict(), "commit": commit()}
    return recorded_run(plan, info, outdir, t_begin, beds, log,
                        lambda state: run_schedule(plan, sel, lens, sched, beds, state, outdir, info, lead, log))


def run_schedule(plan: Plan, sel: Selection, lens: cb.Lengths, sched: sb.Schedule, beds: Sequence[Testbed],
                 state: Path, outdir: Path, info: dict[str, Any], lead: float, log) -> None:
    """A block design on its clusters: start them, the agent's round, then the jobs with the
    configs switched block by block; the files to `outdir`, the record to `info`."""
    t_begin = time.time()
    base = info["baseline"]
    start_all(beds)
    info["wall_start_clusters"] = time.time() - t_begin
    for b in beds:
        b.cluster().configure(base)
    (outdir / "assoc.txt").write_text(beds[0].cluster().run(
        "sacctmgr", "-P", "show", "assoc", "format=Cluster,Account,User,ParentName,Share"))
    treat = dict(base)
    if plan.decision_from:
        info["decision"] = dict(run_info(outdir.parent / plan.decision_from)["decision"],
                                decision_from=plan.decision_from)
        treat = dict(info["decision"]["config"])
    elif plan.control:
        treat = control_config(plan.control, base)
    elif plan.in_window:
        loop, arm1 = start_loop(beds[0], state, plan, sel, outdir, base, lead, info, log)
    elif not plan.aa:
        t_seed = time.time() + lead
        (outdir / "seed.sacct").write_text(seed_history(sel.before, t_seed, base, outdir / "assoc.txt",
                                                        plan.def_cpu_per_gpu))
        time.sleep(max(0.0, t_seed - time.time()))
        t = time.time()
        dec = agent_decision(beds[0], state, plan, outdir / "seed.sacct", outdir, base)
        info["wall_agent"] = time.time() - t
        info["decision"] = asdict(dec)
        treat = dec.config
        log(f"{plan.name}: the agent's round ({info['wall_agent']:.0f} s): "
            + (f"revision {dec.revision}, {dec.diff}, predicted {dec.predicted_gain}" if dec.revision
               else f"no change ({dec.why})"))
        if not measures(plan, dec):
            info.update(configs=[dict(base), dict(base)], unchanged=True, t0=None)  # no window played
            log(f"{plan.name}: both arms would be the baseline: nothing to measure, the run ends here")
            return
    if not plan.in_window:
        loop, arm1 = None, lambda: dict(treat)
    configs = (base, treat)
    info["configs"] = [dict(c) for c in configs]
    t0 = time.time() + lead
    info["t0"] = t0
    switches: list[dict[str, Any]] = []
    errors: list[str] = []
    by_block: list[dict[str, Any]] = []  # arm 1's config at each block's start

    def switch() -> None:
        for k in range(sched.blocks):
            time.sleep(max(0.0, t0 + k * lens.block - time.time()))
            by_block.append(arm1())
            for u, b in enumerate(beds):
                arm = int(sched.arms[k, u])
                cfg = by_block[-1] if arm else base
                try:
                    switches.append({"block": k, "unit": u, "arm": arm, "at": apply_config(b, cfg), "config": cfg})
                except Exception as e:  # noqa: BLE001 - recorded: the run fails below
                    errors.append(f"switch to block {k} on cluster {b.label}: {e}")

    def submit(b: Testbed) -> None:
        try:
            b.cluster().submit(sel.jobs, t0)
        except Exception as e:  # noqa: BLE001 - reported below: the run's jobs are incomplete
            errors.append(f"cluster {b.label}: {e}")

    threads = [threading.Thread(target=switch)] + [threading.Thread(target=submit, args=(b,)) for b in beds]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    info["wall_submitted"] = time.time() - t0
    info["switches"] = switches
    info["arm1"] = by_block
    info["submit_errors"] = errors
    log(f"{plan.name}: submitted in {info['wall_submitted']:.0f} s" + (f"; errors: {errors}" if errors else ""))
    if errors:
        raise RuntimeError("; ".join(errors))
    names = {j.name for j in sel.jobs}
    for b in beds:
        b.cluster().wait_done(names, timeout=4 * plan.day + plan.cap / plan.scale)
    info["wall_run"] = time.time() - t0
    if loop is not None:
        end_loop(loop, beds[0], state, outdir, base, info)
    export_clusters(beds, t0, outdir)


def start_loop(bed: Testbed, state: Path, plan: Plan, sel: Selection, outdir: Path, base: dict[str, Any],
               lead: float, info: dict[str, Any], log) -> tuple[subprocess.Popen[bytes], Callable[[], dict[str, Any]]]:
    """The agent's loop through the window (`Plan.in_window`): `agent init --fake` on a fake
    holding the cluster's live settings and setup, the seed history, then the loop
    (closed_loop_screen.py --shadow) from the window's start; returns once its first round is
    recorded, with the process and what gives arm 1's config (the agent's running one)."""
    from autosched.live.agent import make_connector
    from autosched.live.errors import LiveError
    from autosched.live.fake import FakeConnector
    from autosched.live.store import RevisionStore

    env = agent_env(bed)
    slurm = make_connector({"kind": "slurm", "slurm_conf": env["SLURM_CONF"], "include": str(bed.include),
                            "timeout": 30.0})
    fake = state / "settings-fake"  # (removed with the state)
    FakeConnector.create(fake, base=slurm.live_values(), setup=slurm.setup())
    t_seed = time.time() + lead
    seed = outdir / "seed.sacct"
    seed.write_text(seed_history(sel.before, t_seed, base, outdir / "assoc.txt", plan.def_cpu_per_gpu))
    res = subprocess.run(autosched("agent", "init", "--state", str(state), "--fake", str(fake),
                                   *agent_options(plan, seed)), env=env, capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"`autosched agent init` exited {res.returncode}: {res.stderr.strip()}")
    time.sleep(max(0.0, t_seed - time.time()))
    log_file = open(outdir / "agent.log", "wb")
    loop = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "closed_loop_screen.py"), "--shadow",
                             str(state), str(fake), env["SLURM_CONF"], str(bed.include)],
                            env=env, stdout=log_file, stderr=subprocess.STDOUT)
    log_file.close()
    store = RevisionStore(state)
    while store.last_round() is None:
        if loop.poll() is not None:
            raise RuntimeError(f"the agent's loop exited {loop.returncode} before its first round "
                               f"(see {outdir / 'agent.log'})")
        time.sleep(0.5)
    info["wall_agent"] = time.time() - t_seed
    round0 = store.last_round()
    log(f"{plan.name}: the agent's loop runs; its first round ({info['wall_agent']:.0f} s): "
        f"{round0.action if round0 else ''} ({round0.why if round0 else ''})")

    last = [dict(base)]

    def arm1() -> dict[str, Any]:  # (as `decision_of` reads the running revision)
        try:
            rev = store.running()
        except LiveError as e:  # the store busy past its timeout: the config read last, said
            log(f"{plan.name}: the agent's store: {e}; arm 1 keeps the config read last")
            return last[0]
        last[0] = {**base, **(dict(rev.config) if rev is not None else {})}
        return last[0]

    return loop, arm1


def end_loop(loop: subprocess.Popen[bytes], bed: Testbed, state: Path, outdir: Path, base: dict[str, Any],
             info: dict[str, Any]) -> None:
    """Stop the agent's loop (SIGTERM; the round under way finishes), export its store, and record
    its last change as the run's decision (`loop_decision`)."""
    stop_agent(loop)
    export_agent(bed, state, outdir)
    status = json.loads((outdir / "agent-status.json").read_text())
    dec = loop_decision(status, base)
    info["decision"] = asdict(dec)
    info["configs"] = [dict(base), dict(dec.config)]


def stop_agent(p: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the agent's process (by its PID), SIGKILL after 60 s."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=30)


# ----------------------------------------------------------------------------- analysis

@dataclass
class Realized:
    """One cluster's run as its sacct recorded it (wall seconds)."""

    submitted: int
    recorded: int  # of those, in sacct
    completed: int  # of those, COMPLETED
    avg_jct: float
    avg_wait: float
    p95_wait: float
    wait_by_account: dict[str, float]


@dataclass
class Twin:
    """The twin's replay of one cluster's own sacct under the configs in force."""

    tau: float
    avg_wait_sim: float
    avg_wait_real: float

    @property
    def wait_error(self) -> float:
        return self.avg_wait_sim / self.avg_wait_real - 1 if self.avg_wait_real else math.nan


@dataclass
class Change:
    """One config the agent applied during the run."""

    revision: int
    at: float  # wall s after the window's first instant
    diff: dict[str, list[Any]]
    predicted_gain: float | None
    spread: float | None
    agent_verdict: str  # the agent's own judgement of the period after, as it recorded it
    twin_gain: float | None = None  # the twin: this change against none, over the period after
    gain_vs_a: float | None = None  # real: B against A on the jobs submitted in that period


@dataclass
class RunResult:
    name: str
    plan: dict[str, Any]
    offered_load: float
    fraction: float
    jobs: int
    wall_run: float | None
    wall_total: float | None
    clusters: dict[str, Realized]
    twins: dict[str, Twin]
    changes: list[Change] = field(default_factory=list)
    # the twin's average JCT of A's jobs under each archetype, against its baseline replay
    archetypes: dict[str, float] = field(default_factory=dict)
    wait_series: dict[str, list[list[float]]] = field(default_factory=dict)  # [submit, wait] by cluster

    @property
    def gain(self) -> float:
        """B's realized average JCT against A's (0.05: 5% shorter)."""
        a, b = self.clusters["A"].avg_jct, self.clusters["B"].avg_jct
        return (a - b) / a


def realized(rows: list[dict[str, str]], names: set[str]) -> tuple[Realized, dict[str, tuple[float, float, float]]]:
    """Metrics of the run's jobs in one sacct export, and each job's (submit, start, end)."""
    times: dict[str, tuple[float, float, float]] = {}
    completed = 0
    accounts: dict[str, list[float]] = {}
    for r in rows:
        if r["JobName"] not in names:
            continue
        completed += r["State"].startswith("COMPLETED")
        s, st, e = (wallclock_seconds(r[k]) for k in ("Submit", "Start", "End"))
        if s is None or st is None or e is None:
            continue
        times[r["JobName"]] = (float(s), float(st), float(e))
        accounts.setdefault(r["Account"], []).append(float(st - s))
    wait = np.array([t[1] - t[0] for t in times.values()])
    jct = np.array([t[2] - t[0] for t in times.values()])
    recorded = len({r["JobName"] for r in rows} & names)
    return Realized(len(names), recorded, completed, float(jct.mean()), float(wait.mean()),
                    float(np.percentile(wait, 95)), {a: float(np.mean(w)) for a, w in sorted(accounts.items())}), times


def applied_changes(status: dict[str, Any], t0: float) -> list[Change]:
    """The configs the agent applied (the baseline it found is not a change), oldest first: from
    `agent status --json`'s revisions, each applied at its last "applied" event."""
    out = []
    for rev in status.get("history") or []:
        times = [e["time"] for e in rev.get("events", []) if e.get("state") == "applied"]
        if not times or rev.get("trigger") == "baseline" or rev.get("parent") is None:
            continue
        ev = rev.get("evidence") or {}
        outcome = rev.get("outcome") or {}
        out.append(Change(int(rev["id"]), float(times[-1]) - t0, dict(rev.get("diff") or {}),
                          ev.get("predicted_gain"), ev.get("spread"),
                          str(outcome.get("verdict") or "not judged")))
    return sorted(out, key=lambda c: c.at)


def configs_in_force(status: dict[str, Any], base: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Each applied revision's whole config: the baseline with the revision's managed values."""
    return {int(r["id"]): {**base, **(r.get("config") or {})} for r in status.get("history") or []}


RUN_KEYS = ("plan", "baseline", "t0", "fraction", "offered_load")  # what the analysis reads of run.json


def run_info(outdir: Path) -> dict[str, Any]:
    """A finished run's run.json; InputError for a failed or unfinished run, or a file that is
    not a run's."""
    path = outdir / "run.json"
    try:
        info = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON ({e})") from None
    if not isinstance(info, dict):
        raise InputError(f"{path}: not a run's record (a JSON object)")
    if "failed" in info:
        raise InputError(f"{path}: the run failed ({info['failed']}); remove {outdir} or run it again")
    missing = [k for k in RUN_KEYS if k not in info]
    if missing:
        raise InputError(f"{path}: no {', '.join(repr(k) for k in missing)}: the run did not finish; "
                         f"remove {outdir} or run it again")
    return info


def analyse_run(outdir: Path) -> RunResult:
    """Every figure of one run from its files."""
    info = run_info(outdir)
    plan = Plan(**info["plan"])
    base = info["baseline"]
    jobs = read_jobs(outdir / "jobs.csv")
    names = {j.name for j in jobs}
    t0 = float(info["t0"])
    status_path = outdir / "agent-status.json"
    status = json.loads(status_path.read_text()) if status_path.exists() else {}
    changes = applied_changes(status, t0)
    full = configs_in_force(status, base)
    clusters, twins, series, job_times = {}, {}, {}, {}
    archetypes: dict[str, float] = {}
    for label in "AB":
        rows = read_sacct(outdir / f"sacct-{label}.txt")
        clusters[label], job_times[label] = realized(rows, names)
        series[label] = sorted([round(s - t0, 2), round(st - s, 2)] for s, st, _ in job_times[label].values())
        cl_changes = [] if label == "A" else changes
        real = tw.read_run(outdir / f"sacct-{label}.txt", TAG, load_times(outdir / f"times-{label}.json"))
        spec = tw.twin_spec(real, base, outdir / "assoc.txt", def_cpu_per_gpu=plan.def_cpu_per_gpu)
        moves = [(t0 + c.at - real.day0, full[c.revision]) for c in cl_changes]
        got = tw.agreement(real, tw.simulate(real, spec, base, PLACEMENT, moves), base["bf_interval"])
        twins[label] = Twin(got["tau"], got["avg_wait_sim"], got["avg_wait_real"])
        if label == "A":
            archetypes = {n: float(tw.simulate(real, spec, {**base, **a}, PLACEMENT).records().jct.mean())
                          / got["avg_jct_sim"] - 1 for n, a in ARCHETYPES.items()}
        if label == "B":
            for k, c in enumerate(changes):
                c.twin_gain = counterfactual(real, spec, base, moves, k, plan.day)
                c.gain_vs_a = period_gain(job_times["A"], job_times["B"], t0 + c.at, plan.day)
    return RunResult(outdir.name, info["plan"], info["offered_load"], info["fraction"], len(jobs),
                     info.get("wall_run"), info.get("wall_total"), clusters, twins, changes,
                     archetypes, series)


def counterfactual(real: tw.RealRun, spec: ClusterSpec, base: dict, moves: list[tuple[float, dict]],
                   k: int, period: float) -> float | None:
    """The twin's gain of change `k` over the period after it: the cluster's own jobs replayed
    with changes 0..k and with 0..k-1 only, average JCT of the jobs submitted in that period."""
    t = moves[k][0]
    pick = (real.submit >= t) & (real.submit < t + period)
    if not pick.any():
        return None
    jct = [float(tw.simulate(real, spec, base, PLACEMENT, moves[:n]).records().jct[pick].mean())
           for n in (k, k + 1)]
    return (jct[0] - jct[1]) / jct[0]


def period_gain(a: dict[str, tuple[float, float, float]], b: dict[str, tuple[float, float, float]],
                t: float, period: float) -> float | None:
    """B against A, average JCT of the jobs submitted on B in [t, t + period) (on both)."""
    names = [n for n, (s, _, _) in b.items() if t <= s < t + period and n in a]
    if not names:
        return None
    ja = np.mean([a[n][2] - a[n][0] for n in names])
    jb = np.mean([b[n][2] - b[n][0] for n in names])
    return float((ja - jb) / ja)


# ----------------------------------------------------------------------------- tables and plot

def render_tables(results: Sequence[RunResult]) -> str:
    """The markdown of docs/closed-loop.md's generated section."""
    out = []
    out.append("| run | window (trace days) | jobs | thinned to | offered load | run (wall) | "
               "cluster | in sacct | avg JCT (s) | avg wait (s) | p95 wait (s) | wait by account (s) |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        p = r.plan
        for label, c in r.clusters.items():
            who = "A (baseline)" if label == "A" else ("B (baseline)" if p["aa"] else "B (agent)")
            head = (f"{r.name} | {p['start_day']:g}-{p['start_day'] + p['days']:g} | {r.jobs} | "
                    f"{r.fraction:.3f} | {r.offered_load:.2f} | "
                    f"{(r.wall_run or 0) / 60:.0f} min" if label == "A" else " | | | | | ")
            acc = ", ".join(f"{a} {w:.1f}" for a, w in c.wait_by_account.items())
            out.append(f"| {head} | {who} | {c.recorded}/{c.submitted} ({c.completed} completed) | "
                       f"{c.avg_jct:.1f} | {c.avg_wait:.1f} | {c.p95_wait:.1f} | {acc} |")
    out.append("")
    out.append("**Gain** (B's average JCT against A's) and the twin (each cluster's own sacct "
               "replayed under the configs in force, changed when they were):")
    out.append("")
    out.append("| run | B vs A avg JCT | twin τ A / B | twin avg wait A: sim vs real | "
               "twin avg wait B: sim vs real |")
    out.append("|---|---|---|---|---|")
    for r in results:
        ta, tb = r.twins["A"], r.twins["B"]
        out.append(f"| {r.name} | {cb.pct(r.gain)} | {ta.tau:.3f} / {tb.tau:.3f} | "
                   f"{ta.avg_wait_sim:.1f} vs {ta.avg_wait_real:.1f} ({cb.pct(ta.wait_error)}) | "
                   f"{tb.avg_wait_sim:.1f} vs {tb.avg_wait_real:.1f} ({cb.pct(tb.wait_error)}) |")
    out.append("")
    out.append("**What the priority weights could do here:** the twin's average JCT of cluster A's "
               "own jobs under configs at the corners of the live space, against the twin's replay "
               "under the baseline (negative = shorter; the other knobs as the baseline):")
    out.append("")
    out.append("| run | " + " | ".join(ARCHETYPES) + " |")
    out.append("|---|" + "---|" * len(ARCHETYPES))
    for r in results:
        out.append(f"| {r.name} | " + " | ".join(cb.pct(r.archetypes.get(n)) for n in ARCHETYPES) + " |")
    out.append("")
    out.append("**The agent's changes** (time in compressed days after the window began; gains on "
               "average JCT, positive = better; the twin's gain replays B's own jobs with and without "
               "the change, and B vs A compares the jobs submitted in the day after it):")
    out.append("")
    out.append("| run | revision | at (day) | what changed | predicted gain ± spread | "
               "agent's verdict | twin's gain | B vs A that day |")
    out.append("|---|---|---|---|---|---|---|---|")
    any_change = False
    for r in results:
        day = DAY / r.plan["scale"]
        for ch in r.changes:
            any_change = True
            what = cb.diff_words(ch.diff)
            pred = "—" if ch.predicted_gain is None else (
                f"{ch.predicted_gain:+.1%} ± {ch.spread:.1%}" if ch.spread is not None else cb.pct(ch.predicted_gain))
            out.append(f"| {r.name} | {ch.revision} | {ch.at / day:.2f} | {what} | {pred} | "
                       f"{ch.agent_verdict} | {cb.pct(ch.twin_gain)} | {cb.pct(ch.gain_vs_a)} |")
    if not any_change:
        out.append("| — | | | the agent applied no change | | | | |")
    out.append("")
    out.append("**Targets:**")
    out.append("")
    out += [f"- {line}" for line in targets(results)]
    return "\n".join(out) + "\n"


def targets(results: Sequence[RunResult]) -> list[str]:
    """Each target of docs/closed-loop.md, met or not, in words."""
    lines = []
    lost = [f"{r.name} {label}: {c.submitted - c.recorded}" for r in results
            for label, c in r.clusters.items() if c.recorded < c.submitted]
    lines.append("no job lost: " + ("met (every submitted job is in sacct on both clusters)"
                                    if not lost else "NOT met: " + ", ".join(lost)))
    aa = [r for r in results if r.plan["aa"]]
    ab = [r for r in results if not r.plan["aa"]]
    if not aa:
        lines.append("gain over the baseline: no A/A run yet, so no noise floor to judge it by")
    else:
        gap = abs(aa[0].gain)
        models = sorted({agent_model(r.plan) for r in ab}, key=lambda m: (m != "`stat` model", m)) or ["`stat` model"]
        for model in models:  # the agent's model changes what it does: each is judged on its own windows
            lines.append(gain_target([r for r in ab if agent_model(r.plan) == model], gap, model))
    bad = [f"{r.name} {label} (τ {t.tau:.3f}, wait {cb.pct(t.wait_error)})" for r in results
           for label, t in r.twins.items() if not (t.tau >= 0.9 and abs(t.wait_error) <= 0.10)]
    lines.append("twin accuracy (avg wait within 10%, τ ≥ 0.9): "
                 + ("met on every cluster" if not bad else "not met on " + ", ".join(bad)))
    return lines


def agent_model(plan: Mapping[str, Any]) -> str:
    """The agent's workload model in a run's plan, as the gain target names it (`replay` has no
    clock of its own: it replays the last period as it was)."""
    model = plan.get("model", "stat")
    return f"`{model}` model" + (" on trace time" if plan.get("model_trace_time") and model != "replay" else "")


def gain_target(ab: Sequence[RunResult], gap: float, model: str) -> str:
    """The gain target over the windows run with the agent on one workload model (`agent_model`).
    A win is B's average JCT over the whole window more than twice the A/A gap below A's on a
    window where the agent made a change; it does not say the lead came after the change (the
    changes table does). A window where the agent changed nothing is one more A/A run: B's lead
    there is not a win. The gap has two decimals so that the threshold reads as twice it."""
    wins = [r.name for r in ab if r.gain > 2 * gap and r.changes]
    unchanged = [f"{r.name} ({r.gain:+.1%})" for r in ab if not r.changes]
    losses = [r.name for r in ab if r.gain < -gap]
    met = len(wins) >= min(2, len(ab)) and not losses and len(ab) >= 3
    return (f"gain over the baseline (A/A gap {gap:.2%}), the agent on the {model}: B beats A over the whole "
            f"window by more than {2 * gap:.2%} (twice the gap), with a change made, on {len(wins)} of "
            f"{len(ab)} window(s)"
            + (f" ({', '.join(wins)})" if wins else "")
            + (f"; no change on {', '.join(unchanged)}" if unchanged else "")
            + (f"; worse than A by more than the gap on {', '.join(losses)}" if losses else "")
            + (" — met" if met else " — not met" if len(ab) >= 3 else f" — {3 - len(ab)} of the 3 windows not run yet"))


def draw(results: Sequence[RunResult], path: Path) -> None:
    """Realized wait over time on both clusters, one panel per run, the agent's changes marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(8, 2.4 * len(results)), squeeze=False)
    for ax, r in zip(axes[:, 0], results):
        day = DAY / r.plan["scale"]
        for label, color in (("A", "tab:gray"), ("B", "tab:blue")):
            pts = np.array(r.wait_series[label])
            bins = np.arange(0, r.plan["days"] + 1 / 8, 1 / 8)  # 3 trace hours a bin
            x = pts[:, 0] / day
            idx = np.digitize(x, bins) - 1
            mean = [pts[idx == b, 1].mean() if (idx == b).any() else np.nan for b in range(len(bins) - 1)]
            who = "baseline" if label == "A" or r.plan["aa"] else "agent"
            ax.step(bins[:-1], mean, where="post", color=color, label=f"{label} ({who})")
        for c in r.changes:
            ax.axvline(c.at / day, color="tab:red", ls="--", lw=1)
            ax.text(c.at / day, ax.get_ylim()[1] * 0.92, f" r{c.revision}", color="tab:red", fontsize=8)
        ax.set_title(f"{r.name}: trace days {r.plan['start_day']:g}-{r.plan['start_day'] + r.plan['days']:g}, "
                     f"load {r.offered_load:.2f}", fontsize=9)
        ax.set_ylabel("avg wait (wall s)")
        ax.legend(fontsize=8, loc="upper left")
    axes[-1, 0].set_xlabel("submitted (compressed days after the window began)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)


BEGIN, END = "<!-- closed-loop: BEGIN -->", "<!-- closed-loop: END -->"
BLOCKS_BEGIN, BLOCKS_END = "<!-- closed-loop-blocks: BEGIN -->", "<!-- closed-loop-blocks: END -->"
BLOCKS_PLOT = REPO / "docs" / "img" / "closed-loop-blocks.png"


def render_doc(doc: str, tables: str, begin: str = BEGIN, end: str = END) -> str:
    """`doc` with its generated section (between `begin` and `end`) replaced by `tables`."""
    i, j = doc.index(begin) + len(begin), doc.index(end)
    return doc[:i] + "\n" + tables + doc[j:]


def run_dirs(root: Path) -> list[Path]:
    """The committed runs, in the order of PLANS (others after, by name)."""
    dirs = [d for d in root.iterdir() if (d / "run.json").exists()] if root.exists() else []
    order = list(PLANS)
    return sorted(dirs, key=lambda d: (order.index(d.name) if d.name in order else len(order), d.name))


def is_block_run(outdir: Path) -> bool:
    return run_info(outdir)["plan"].get("design", "side-by-side") != "side-by-side"


def analyse(root: Path, check: bool, plot: bool = True) -> int:
    """Every table from the runs in `root` into docs/closed-loop.md's sections (with `check`:
    exit 1 if one is not current) and the plots. InputError, the doc untouched, if `root` holds
    no run."""
    if not root.is_dir():
        raise InputError(f"--out {root}: no such directory")
    dirs = run_dirs(root)
    if not dirs:
        raise InputError(f"--out {root}: no run in it (a run is a directory with a run.json)")
    unchanged = [unchanged_run(d) for d in dirs if is_block_run(d) and run_info(d).get("unchanged")]
    # by trace (the bundled sample first) and window, not by name (sb-s10 before sb-s3)
    unchanged.sort(key=lambda u: (Path(str(u.plan.get("trace", ""))).name != SAMPLE.name,
                                  str(u.plan.get("trace", "")), float(u.plan["start_day"])))
    blocks = [analyse_block_run(d) for d in dirs if is_block_run(d) and not run_info(d).get("unchanged")]
    sides = [analyse_run(d) for d in dirs if not is_block_run(d)]
    tables = render_tables(sides) if sides else "No side-by-side run is committed.\n"
    block_tables = cb.render(blocks, unchanged) if blocks or unchanged else "No block-design run is committed yet.\n"
    print(block_tables)
    print(tables)
    doc = DOC.read_text()
    new = render_doc(render_doc(doc, tables), block_tables, BLOCKS_BEGIN, BLOCKS_END)
    if check:
        if new != doc:
            print(f"{DOC} is not current: run benchmarks/closed_loop.py --analyse", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    if plot and sides:
        draw(sides, PLOT)
    if plot and blocks:
        cb.draw(blocks, BLOCKS_PLOT)
    return 0


# ----------------------------------------------------------------------------- a block run's analysis

def node_of(name: str) -> int:
    """A test node's number from 0 (sacct's NodeList of a one-node job: n1 -> 0); -1 otherwise."""
    m = re.fullmatch(r"n(\d+)", name.strip())
    return int(m.group(1)) - 1 if m else -1


def unit_run(outdir: Path, label: str, info: Mapping[str, Any], unit: int) -> tuple[cb.UnitRun, ClusterSpec]:
    """Cluster `label`'s run of a block design as its files recorded it, and its twin."""
    real = tw.read_run(outdir / f"sacct-{label}.txt", TAG, load_times(outdir / f"times-{label}.json"))
    base = info["baseline"]
    configs = info["configs"]
    by_id = {r["JobID"]: r.get("NodeList", "") for r in real.rows}
    nodes = np.array([node_of(by_id.get(str(j), "")) for j in real.ids])
    switches: list[tuple[float, dict[str, Any]]] = [(-math.inf, dict(base))]
    switches += [(float(sw["at"]) - real.day0, dict(sw.get("config") or configs[sw["arm"]]))
                 for sw in sorted(info["switches"], key=lambda sw: sw["at"]) if sw["unit"] == unit]
    spec = tw.twin_spec(real, base, outdir / "assoc.txt",
                        def_cpu_per_gpu=int(info["plan"].get("def_cpu_per_gpu", 0)))
    return cb.UnitRun(real, float(info["t0"]) - real.day0, switches, nodes), spec


def unchanged_run(outdir: Path) -> cb.Unchanged:
    """A block run that ended after its round because the agent changed nothing: the window and
    the round's account (`agent-step.json`: why, and the candidate of its portfolio that gained
    most on the samples, with why it was not applied)."""
    info = run_info(outdir)
    try:
        step = json.loads((outdir / "agent-step.json").read_text())
        why, ev = str(step["why"]), Evidence.from_dict(step.get("evidence"))
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise InputError(f"{outdir / 'agent-step.json'}: not the round's JSON ({e})") from None
    return cb.Unchanged(outdir.name, info["plan"], int(info["jobs"]), float(info["offered_load"]),
                        int(step.get("history_jobs") or 0), why, best_candidate(ev))


def best_candidate(ev: Evidence) -> str:
    """Of a round's portfolio, the candidate with the largest gain on the samples, in the
    evidence's words (its gain ± s.e., and why it left the race); "—" when none was scored."""
    scored = [r for r in ev.portfolio or [] if isinstance(r, Mapping) and isinstance(r.get("gain"), (int, float))]
    best = max(scored, key=lambda r: r["gain"], default=None)  # the first of equals: the one the others copy
    return replace(ev, portfolio=[best]).portfolio_lines()[0] if best else "—"


def analyse_block_run(outdir: Path, jitters: int = cb.JITTERS) -> cb.BlockResult:
    """Every figure of one block-design run from its files."""
    info = run_info(outdir)
    for key in ("schedule", "lengths", "configs", "switches"):
        if key not in info:
            raise InputError(f"{outdir / 'run.json'}: no {key!r}: not a block design's run")
    plan = info["plan"]
    sched = sb.Schedule.from_dict(info["schedule"])
    lens = cb.Lengths(**info["lengths"])
    names = {j.name for j in read_jobs(outdir / "jobs.csv")}
    labels = "AB"[:sched.units]
    runs, specs, accounted, tau = [], [], {}, {}
    for u, label in enumerate(labels):
        run_u, spec = unit_run(outdir, label, info, u)
        runs.append(run_u)
        specs.append(spec)
        rows = read_sacct(outdir / f"sacct-{label}.txt")
        mine = [r for r in rows if r["JobName"] in names]
        accounted[label] = cb.Accounted(len(names), len({r["JobName"] for r in mine}),
                                        sum(r["State"].startswith("COMPLETED") for r in mine))
        whole = cb.simulate(run_u.real.trace, spec, [(t if math.isfinite(t) else 0.0, c) for t, c in run_u.switches])
        tau[label] = tw.agreement(run_u.real, whole, info["baseline"]["bf_interval"])["tau"]
    configs = (dict(info["configs"][0]), dict(info["configs"][1]))
    arm1 = tuple(dict(c) for c in info.get("arm1") or ())
    ran = [c for c in arm1 if not cb.same_config(c, configs[0])]
    if ran and cb.same_config(configs[1], configs[0]):
        # a run recorded before `loop_decision` (sb-itp07-28): its loop changed the config and its
        # judge rolled it back, and the rollback was recorded as the decision; the change is the
        # config arm 1 last ran apart from the baseline
        configs = (configs[0], ran[-1])
    tl = cb.Timeline(lens.block, lens.washout, sched, configs, arm1)
    memo: dict[tuple[Any, ...], cb.Figures] = {}
    rows = cb.block_rows(runs, specs, tl, jitters=jitters, seed=int(plan.get("seed", 0)), memo=memo)
    effects, gains, aa = cb.analyse_rows(rows, sched)
    jobs = runs[0].real.trace
    window = 1 - (float(cb.simulate(jobs, specs[0], [(0.0, configs[1])]).records().jct.mean())
                  / float(cb.simulate(jobs, specs[0], [(0.0, configs[0])]).records().jct.mean()))
    archetypes = {}
    if plan.get("aa"):
        for name, arch in ARCHETYPES.items():
            other = cb.Timeline(lens.block, lens.washout, sched, (configs[0], {**configs[0], **arch}))
            archetypes[name] = cb.twin_block_gain(cb.block_rows(runs, specs, other, memo=memo))
    at_round = None
    if info.get("decision") and info["decision"].get("revision") is not None:
        u = int(np.argmin(sched.arms[0]))  # the cluster that ran the baseline first: its submissions
        at_round = cb.round_gain(runs[u].real.trace, specs[u], configs[0], configs[1],
                                 runs[u].origin + round_time(outdir, info), Plan(**plan).day)
    return cb.BlockResult(outdir.name, plan, len(names), float(info["offered_load"]), lens, sched, accounted,
                          rows, effects, gains, window, aa, tau, info.get("decision"), info.get("wall_run"),
                          info.get("wall_total"), configs, archetypes, tl.arm1,
                          agent_moves(outdir, float(info["t0"]), Plan(**plan).day) if plan.get("in_window") else "",
                          at_round)


def round_time(outdir: Path, info: Mapping[str, Any]) -> float:
    """When the round that made a run's decision applied it, in wall s from the window's start:
    the agent's loop through the window records it (its revision's `applied_at`; a replicate
    reads its source run's); a round before the window, 0."""
    dec = info["decision"]
    source = outdir.parent / dec["decision_from"] if dec.get("decision_from") else outdir
    src = run_info(source) if source != outdir else info
    if not src["plan"].get("in_window"):
        return 0.0
    status = json.loads((source / "agent-status.json").read_text())
    revs = {int(r["id"]): r for r in status.get("history") or []}
    rev = revs[int(dec["revision"])]
    if rev.get("kind") == "rollback":  # recorded before `loop_decision`: the change it undid
        rev = revs[int(rev["parent"])]
    return max(0.0, float(rev["applied_at"]) - float(src["t0"]))


def agent_moves(outdir: Path, t0: float, day: float) -> str:
    """The changes the agent's loop applied through the window, in order (its store's revisions
    after the baseline's, each with its time in trace days from `t0` and predicted gain), when
    there is more than one; "" otherwise (the run's decision says it all)."""
    path = outdir / "agent-status.json"
    if not path.exists():
        return ""
    revs = sorted((r for r in json.loads(path.read_text()).get("history") or []
                   if r.get("trigger") != "baseline" and r.get("applied_at") is not None),
                  key=lambda r: int(r["id"]))
    if len(revs) < 2:
        return ""
    said = []
    for r in revs:
        at = (float(r["applied_at"]) - t0) / day
        diff = cb.diff_words(r.get("diff") or {})
        gain = (r.get("evidence") or {}).get("predicted_gain")
        why = f"predicted {gain:+.1%}" if gain is not None else str(r.get("trigger") or "")
        said.append(f"{at:.2f} d: {diff} ({why})")
    return "; ".join(said)


# The flags a run takes, each checked before anything starts (`checked_plan`): a bad value costs
# an error line, not two clusters started for 40 minutes.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a run's directory: one plain name inside --out
MAX_LOAD = 1.5  # above it the backlog grows for the whole run: no config drains it
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_ports() -> tuple[int, int] | None:
    """The kernel's range of ports for outgoing connections (None where it cannot be read)."""
    try:
        lo, hi = (int(x) for x in EPHEMERAL.read_text().split())
    except (OSError, ValueError):
        return None
    return lo, hi


B_PORTS = 100  # cluster B's port base is this far above A's
LAST_PORT = B_PORTS + 19  # a cluster reserves its base and the 19 ports above it (docs/testbed.md)


def trace_of(path: Path) -> Trace:
    """The trace --trace names; InputError naming the flag if it is not a trace file."""
    if not path.is_file():
        raise InputError(f"--trace {path}: no such file")
    try:
        return load_trace(path)[0]
    except AutoschedError as e:
        raise InputError(f"--trace {path}: {e}") from None


def check_load(load: float | None) -> None:
    if load is not None and not (math.isfinite(load) and 0 < load <= MAX_LOAD):
        raise InputError(f"--load {load}: the offered load must be in (0, {MAX_LOAD:g}] of the {GPUS} GPUs")


def check_decision(source: Path, plan: Plan) -> None:
    """--decision-from RUN: RUN must be a finished block run with the agent's decision, on the
    same window as `plan`. The design may differ (the decision is the config, not the blocks):
    a crossover can measure a decision a switchback made, as an experiment of its own."""
    if plan.design == "side-by-side":
        raise InputError(f"--decision-from {source.name}: only a block design takes another run's decision")
    if not (source / "run.json").is_file():
        raise InputError(f"--decision-from {source.name}: no run of that name in {source.parent}")
    info = run_info(source)
    if "decision" not in info:
        raise InputError(f"--decision-from {source.name}: {source / 'run.json'} holds no agent decision (an A/A run?)")
    if info.get("unchanged"):
        raise InputError(f"--decision-from {source.name}: its agent changed nothing; a replicate would be an A/A run")
    theirs = Plan(**info["plan"])
    def key(p: Plan, k: str) -> Any:  # a trace by its file's name, as `cb.pool` reads it: checkouts differ
        return Path(p.trace).name if k == "trace" else getattr(p, k)
    differ = [k for k in cb.POOL_KEYS if k not in ("aa", "design", "blocks") and key(theirs, k) != key(plan, k)]
    if differ:
        raise InputError(f"--decision-from {source.name}: its run differs in {', '.join(differ)}: a replicate "
                         "runs the same window")


def checked_plan(args: argparse.Namespace) -> tuple[Plan, Trace, Selection, tuple[Path, Path]]:
    """The run the flags ask for, every flag checked first (InputError names the flag): the plan,
    its trace, the jobs it replays, and the two clusters' roots."""
    plan = PLANS[args.run]
    name = args.name or plan.name
    if not NAME.fullmatch(name):
        raise InputError(f"--name {name!r}: a run's name is one directory name (letters, digits, "
                         "'.', '_', '-'; not starting with '.' or '-')")
    if (args.out / name / "run.json").exists():
        raise InputError(f"--name {name}: {args.out / name} holds a run already; remove it or "
                         "choose another name")
    check_load(args.load)
    if args.start_day is not None and not (math.isfinite(args.start_day) and args.start_day >= 0):
        raise InputError(f"--start-day {args.start_day}: must be a day >= 0 of the trace")
    if args.seed is not None and args.seed < 0:
        raise InputError(f"--seed {args.seed}: a seed is an integer >= 0")
    if args.design_seed is not None and args.design_seed < 0:
        raise InputError(f"--design-seed {args.design_seed}: a seed is an integer >= 0")
    by_run = (args.design or plan.design) == "crossover-by-run"
    if args.blocks is not None and by_run and args.blocks != 1:
        raise InputError(f"--blocks {args.blocks}: a crossover by run is one block, the whole window")
    if args.blocks is not None and not by_run and (args.blocks < 2 or args.blocks % 2):
        raise InputError(f"--blocks {args.blocks}: an even number of blocks, at least 2 "
                         f"({cb.MIN_BLOCKS} for a 95% interval)")
    if args.model is not None and args.model not in MODELS:
        raise InputError(f"--model {args.model!r}: unknown workload model; known: {', '.join(MODELS)}")
    if not 1024 <= args.port_base <= 65535 - LAST_PORT:
        raise InputError(f"--port-base {args.port_base}: must be in 1024-{65535 - LAST_PORT} (cluster B "
                         f"uses ports {B_PORTS}-{LAST_PORT} above it)")
    eph = ephemeral_ports()
    if eph and args.port_base <= eph[1] and args.port_base + LAST_PORT >= eph[0]:
        raise InputError(f"--port-base {args.port_base}: its ports ({args.port_base}-{args.port_base + LAST_PORT}) "
                         f"reach into the kernel's ephemeral range {eph[0]}-{eph[1]}, where an outgoing "
                         "connection can take one before a daemon binds it; choose a base below "
                         f"{eph[0] - LAST_PORT}")
    roots = [r for r in args.roots.split(",")]
    if len(roots) != 2 or not all(roots):
        raise InputError(f"--roots {args.roots!r}: give the two clusters' roots, comma-separated "
                         "(a switchback uses the first)")
    changes = {k: v for k, v in (("trace", args.trace), ("start_day", args.start_day),
                                 ("seed", args.seed), ("load", args.load), ("model", args.model),
                                 ("model_trace_time", args.model_trace_time), ("design", args.design),
                                 ("design_seed", args.design_seed), ("blocks", 1 if by_run else args.blocks),
                                 ("decision_from", args.decision_from), ("control", args.control),
                                 ("in_window", args.in_window), ("def_cpu_per_gpu", args.def_cpu_per_gpu),
                                 ("persistence", args.persistence))
               if v is not None}
    plan = replace(plan, name=name, **changes)
    check_cpus_per_gpu(plan.def_cpu_per_gpu)
    try:
        check_persistence(plan.persistence)
    except AutoschedError as e:
        raise InputError(f"--persistence: {e}") from None
    if plan.decision_from:
        check_decision(args.out / plan.decision_from, plan)
    if plan.in_window and (plan.aa or plan.decision_from or plan.control or plan.design == "side-by-side"):
        raise InputError("--in-window: the agent's loop through the window of a block design (not with an A/A "
                         "plan, --decision-from, --control or the side-by-side design)")
    if plan.in_window and plan.design == "crossover-by-run":
        raise InputError("--in-window: a crossover by run has one block, whose arm 1 is set at the window's start: "
                         "give it the agent's decision of a finished run (--decision-from)")
    if plan.control and (plan.aa or plan.decision_from or plan.design == "side-by-side"):
        raise InputError(f"--control {plan.control!r}: a control is arm 1 of a block design, without an agent "
                         "(not with an A/A plan, --decision-from or the side-by-side design)")
    if plan.control:
        control_config(plan.control, baseline(plan.scale))
    path = Path(plan.trace)
    trace = trace_of(path)
    sel = select(trace, plan)
    if not sel.jobs:
        raise InputError(f"--trace {path}: no job in days {plan.start_day:g}-{plan.start_day + plan.days:g} "
                         f"after thinning to {sel.fraction:.3f}")
    return plan, trace, sel, (Path(roots[0]), Path(roots[1]))


def check_cpus_per_gpu(n: int) -> int:
    """--def-cpu-per-gpu: a count the test nodes can give their every GPU (8 CPUs, 8 GPUs: 0 or 1)."""
    most = tw.CPUS_PER_NODE // tw.GPUS_PER_NODE
    if not 0 <= n <= most:
        raise InputError(f"--def-cpu-per-gpu {n}: must be 0-{most}: a test node has {tw.CPUS_PER_NODE} CPUs for "
                         f"{tw.GPUS_PER_NODE} GPUs, so an {tw.GPUS_PER_NODE}-GPU job could get no node")
    return n


def pick_windows(args: argparse.Namespace) -> int:
    """--pick: the table of every window of the trace, and the picked ones."""
    plan = Plan("pick", design="switchback")
    if args.trace:
        plan = replace(plan, trace=args.trace)
    if args.def_cpu_per_gpu is not None:
        plan = replace(plan, def_cpu_per_gpu=check_cpus_per_gpu(args.def_cpu_per_gpu))
    check_load(args.load)
    if args.load is not None:
        plan = replace(plan, load=args.load)
    path = Path(plan.trace)
    trace = trace_of(path)
    print(f"{path.name}: windows of {plan.days:g} days thinned to a load of {plan.load:g}; each cell: the "
          "archetype's gain on the baseline in the blocks (over the whole window run under it)\n")
    print(pick_header())
    scores = pick(trace, plan)
    picked = [f"day {w.start_day:g} ({w.best}: {w.window_gain[w.best]:+.1%} over the window, "
              f"{w.block_gain[w.best]:+.1%} in the blocks)" for w in scores if w.picked]
    print("\npicked: " + (", ".join(picked) if picked else "none"))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", choices=sorted(PLANS), help="replay this plan on two fresh clusters")
    ap.add_argument("--name", help="the run's directory name (default: the plan's)")
    ap.add_argument("--trace", help="canonical trace to take the jobs from (time_limit, user, "
                                    "account and vc are used when present; default: the bundled sample)")
    ap.add_argument("--start-day", type=float)
    ap.add_argument("--seed", type=int, help="thinning seed (>= 0)")
    ap.add_argument("--load", type=float, help=f"offered load the thinning aims at, in (0, {MAX_LOAD:g}]")
    ap.add_argument("--model", help="the agent's workload model (default: the plan's, stat)")
    ap.add_argument("--model-trace-time", action=argparse.BooleanOptionalAction, help="the agent's model fits and "
                    "samples on the trace's clock (agent init --time-scale SCALE), not the compressed one")
    ap.add_argument("--design", choices=("side-by-side", *sb.DESIGNS), help="the plan's design, or another")
    ap.add_argument("--design-seed", type=int, help="the seed of the block order (>= 0)")
    ap.add_argument("--blocks", type=int, help=f"blocks of a block design (even; {cb.MIN_BLOCKS} by default; "
                    "a crossover by run is one)")
    ap.add_argument("--decision-from", metavar="RUN", help="a replicate: arm 1 is the config the agent chose in "
                    "run RUN (in --out), with no agent round of its own; both runs' pairs are read together")
    ap.add_argument("--control", metavar="ARCHETYPE|KNOB=VALUE,...", help="a control: arm 1 is this "
                    "archetype, or these knobs (e.g. bf_max_job_test=1), over the baseline, with no agent round")
    ap.add_argument("--in-window", action=argparse.BooleanOptionalAction, help="the agent's loop runs through "
                    "the window (its rounds each period and at a burst), arm 1 its config at each block's start")
    ap.add_argument("--def-cpu-per-gpu", type=int, metavar="N", help="the test clusters' DefCpuPerGPU: a job "
                    f"that asks for GPUs alone gets N CPUs per GPU (0-{tw.CPUS_PER_NODE // tw.GPUS_PER_NODE}; "
                    "default 0, unset: one CPU a job, so Slurm's job-size factor sees every job alike)")
    ap.add_argument("--persistence", type=float, metavar="P", help="the agent's --persistence: its samples "
                    "follow the last hours' load to this power (0-1; default 0, as the runs before it)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--roots", default="/tmp/cl-A,/tmp/cl-B", help="the two clusters' TESTBED_ROOTs")
    ap.add_argument("--port-base", type=int, default=23000, help="cluster A's; B's is 100 above")
    ap.add_argument("--pick", action="store_true", help="score every window of --trace in the twin "
                    f"(offered load, what the archetypes gain over it and in the blocks) and name those at "
                    f"a load of {PICK_LOAD[0]:g}-{PICK_LOAD[1]:g} where one gains at least {PICK_GAIN:.0%}% "
                    f"over the window and the blocks show at least {PICK_SEEN:.0%}% of it")
    ap.add_argument("--analyse", action="store_true", help="recompute every table from the "
                    "committed runs in --out, rewrite docs/closed-loop.md's section and the plot")
    ap.add_argument("--check", action="store_true", help="with --analyse: exit 1 if the doc is not current")
    args = ap.parse_args(argv)
    try:
        if args.analyse:
            return analyse(args.out, args.check)
        if args.pick:
            return pick_windows(args)
        if args.run is None:
            ap.error("give --run PLAN or --analyse")
        plan, trace, sel, roots = checked_plan(args)
        ports = (args.port_base, args.port_base + B_PORTS)
        if plan.design == "side-by-side":
            run(plan, args.out / plan.name, roots, ports, trace=trace)
        else:
            run_blocks(plan, args.out / plan.name, roots, ports, trace)
    except AutoschedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
