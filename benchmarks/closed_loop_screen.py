"""What the shipped agent would do on a window of a block run, in the twin only (no Slurm).

A real block run (benchmarks/closed_loop.py) takes 36 minutes and, when the agent's round before
the window changes nothing, measures nothing. This screen asks the agent itself, cheaply: the
agent's own loop (`Agent.run`: a round every period, the contention and drift checks every poll
between rounds, as `agent run` does) runs on a clock of its own over the whole window, against
`TwinCluster`: a fake Slurm (`autosched.live.fake.FakeConnector`) whose job history is the twin
replaying the window's jobs as the harness submits them, under the baseline and, from each apply
on, under the config the agent applied. Its seed history, settings and cluster setup are a real
run's: the plan's `agent init` options, the window before simulated under the baseline
(`closed_loop.seed_history`), the test cluster's setup as its slurmctld reported it.

Its contention trigger asks at every poll whether the queue has doubled past what the last
round saw (its floor of GPU-hours on the jobs' clock), so a burst inside the window gets its
round at the next poll.

    PYTHONPATH=src nice -n 10 python benchmarks/closed_loop_screen.py --run sb-itp21 --days 41-57
    PYTHONPATH=src nice -n 10 python benchmarks/closed_loop_screen.py --run sb-s18 --days 3-25

Each window prints the agent's rounds (the time in trace days from the window's start, the
trigger, what it did and why, the best candidate, the predicted gain of a change) and, when the
agent changed the config, the twin's gain of the agent's run over the baseline's, on the
window and in the design's blocks. A round takes no time on the screen's clock (on the test
cluster, 5-10 s).
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

import closed_loop as cl  # noqa: E402
import closed_loop_blocks as cb  # noqa: E402
import slurm_twin as tw  # noqa: E402

from autosched import switchback as sb  # noqa: E402
from autosched.errors import InputError  # noqa: E402
from autosched.live.agent import start_agent  # noqa: E402
from autosched.live.fake import FakeConnector  # noqa: E402
from autosched.live.twin import ClusterSetup  # noqa: E402
from autosched.sim import JobRecords  # noqa: E402

T0 = 1_800_000_000.0  # the window's first instant on the screen's clock (unix s; any will do)
# The test cluster's setup as its slurmctld reported it to the agent (a real run's round recorded it)
SETUP_RUN = cl.RESULTS / "sb-itp21"


def testbed_setup(run: Path = SETUP_RUN) -> tuple[ClusterSetup, dict[str, str]]:
    """The setup and the baseline's live settings (as `scontrol show config` spells them) that the
    agent's round read from the real test cluster in `run` (its agent-store.json, agent-status.json)."""
    rounds = json.loads((run / "agent-store.json").read_text())["state.db"]["rounds"]
    summary = rounds[0]["summary"]
    setup = ClusterSetup.from_dict((json.loads(summary) if isinstance(summary, str) else summary)["setup"])
    live = json.loads((run / "agent-status.json").read_text())["live"]["knobs"]
    # a flag (bf_continue) is "" when set and absent when not, as the connector reads Slurm's
    flags = {k for k, v in live.items() if k.startswith("bf_") and v in ("YES", "NO")}
    return setup, {**{str(k): str(v) for k, v in live.items() if k not in flags},
                   **{k: "" for k in flags if live[k] == "YES"}}


class TwinCluster(FakeConnector):
    """A fake cluster whose clock and sacct are the twin's: the window's jobs (`window_trace`,
    submit times in s from `t0`) replayed under the configs in force, each from the time it was
    applied (`switch`). `elapsed` is the clock, in s from `t0`; `sacct_rows` shows every job
    submitted by then, as PENDING, RUNNING or COMPLETED at that moment (a twin run to the end is
    the same up to any moment before the next switch: the past does not depend on the future)."""

    def __init__(self, directory: str | Path, jobs: Sequence[tw.Job], t0: float, config: Mapping[str, Any],
                 def_cpu_per_gpu: int = 0):
        super().__init__(directory)
        self.trace = cb.window_trace(jobs)
        self.jobs = {j.name: j for j in jobs}
        self.t0, self.elapsed = t0, 0.0
        self.switches: list[tuple[float, dict[str, Any]]] = [(0.0, dict(config))]
        self._records: JobRecords | None = None
        self.def_cpu_per_gpu = def_cpu_per_gpu
        self.spec = cb.testbed_spec(def_cpu_per_gpu=def_cpu_per_gpu)

    def switch(self, config: Mapping[str, Any]) -> None:
        """From now on the cluster runs `config` (whole)."""
        self.switches.append((self.elapsed, dict(config)))
        self._records = None

    def records(self) -> JobRecords:
        if self._records is None:
            self._records = cb.simulate(self.trace, self.spec, self.switches).records()
        return self._records

    def now(self) -> float:
        return self.t0 + self.elapsed

    def sacct_rows(self, since: float, until: float) -> str:
        self._log("sacct")
        return window_sacct(self.trace, self.jobs, self.records(), self.t0, self.elapsed, self.def_cpu_per_gpu)


class ShadowCluster(FakeConnector):
    """The real test cluster as the agent of a block run with rounds in the window sees it
    (`closed_loop.Plan.in_window`): its clock, jobs, setup and backfill statistics are the
    cluster's (`slurm`), its settings a fake's. The agent's applies land in the fake; the harness
    runs the agent's running config in arm 1's blocks and the baseline in arm 0's, so an apply
    must not touch the cluster, and the agent must not read the harness's switches as hand edits."""

    def __init__(self, directory: str | Path, slurm: Any):
        super().__init__(directory)
        self.slurm = slurm

    def now(self) -> float:
        return float(self.slurm.now())

    def sacct_rows(self, since: float, until: float) -> str:
        return str(self.slurm.sacct_rows(since, until))

    def setup(self) -> ClusterSetup:
        return self.slurm.setup()  # type: ignore[no-any-return]

    def backfill_stats(self) -> Any:
        return self.slurm.backfill_stats()


def shadow(state: Path, fake: Path, slurm_conf: str, include: str) -> int:
    """`--shadow`: the agent's loop on the real cluster through `ShadowCluster`, until SIGTERM
    (the round under way finishes)."""
    from autosched.live.agent import make_connector

    slurm = make_connector({"kind": "slurm", "slurm_conf": slurm_conf, "include": include, "timeout": 30.0})
    agent = start_agent(state, ShadowCluster(fake, slurm), log=lambda m: print(m, flush=True))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    agent.run(should_stop=stop.is_set, sleep=stop.wait)
    return 0


def window_sacct(trace: Any, jobs: Mapping[str, tw.Job], rec: JobRecords, t0: float, at: float,
                 def_cpu_per_gpu: int = 0) -> str:
    """The window's jobs submitted by `at` (s from `t0`) as sacct shows them then (`cl.sacct_row`,
    sized by `def_cpu_per_gpu`), job ids from 1 in submit order, as a fresh cluster numbers them."""
    lines = ["|".join(cl.SACCT_FIELDS)]
    names = trace.name
    for k in range(len(trace)):
        if rec.submit[k] > at:
            continue
        start = float(rec.first_start[k])
        end = float(rec.end[k])
        lines.append(cl.sacct_row(k + 1, jobs[str(names[k])], t0 + float(rec.submit[k]),
                                  None if start > at else t0 + start, None if end > at else t0 + end,
                                  def_cpu_per_gpu))
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Round:
    """One of the agent's rounds on the screen: when (s from the window's start), why, what."""

    at: float
    trigger: str
    action: str
    why: str
    diff: dict[str, Any]
    predicted_gain: float | None
    best: str = ""  # the portfolio's best candidate on the samples (`closed_loop.best_candidate`)


@dataclass(frozen=True)
class Screened:
    """One window: its jobs and load, the agent's rounds, and (when it changed the config) the
    twin's gain in average JCT of the agent's run over the baseline's, on the window and in the
    design's blocks (arm 1 running what the agent ran at that moment)."""

    start_day: float
    jobs: int
    offered_load: float
    rounds: list[Round]
    switches: list[tuple[float, dict[str, Any]]]
    window_gain: float | None
    block_gain: float | None
    # the twin's gain of the agent's first change over the period it predicted (`round_gain`)
    # and that change's predicted gain: the prediction's calibration
    round_gain: float | None = None
    predicted: float | None = None

    @property
    def changed(self) -> bool:
        return len(self.switches) > 1


def agent_rounds(plan: cl.Plan, sel: cl.Selection, work: Path) -> tuple[list[Round], TwinCluster]:
    """The agent's loop over the window on `TwinCluster` (see the module doc)."""
    base = cl.baseline(plan.scale)
    seed = work / "seed.sacct"
    assoc = work / "assoc.txt"
    assoc.write_text(cb.TESTBED_ASSOC)
    seed.write_text(cl.seed_history(sel.before, T0, base, assoc, plan.def_cpu_per_gpu))
    fake = work / "cluster"
    setup, live = testbed_setup()
    if plan.def_cpu_per_gpu:  # as the cluster's slurmctld would report its DefCpuPerGPU
        setup = replace(setup, def_cpu_per_gpu=float(plan.def_cpu_per_gpu))
    FakeConnector.create(fake, base=live, setup=setup)
    res = subprocess.run(cl.autosched("agent", "init", "--state", str(work / "state"), "--fake", str(fake),
                                      *cl.agent_options(plan, seed)),
                         capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"`autosched agent init` exited {res.returncode}: {res.stderr.strip()}")
    cluster = TwinCluster(fake, sel.jobs, T0, base, plan.def_cpu_per_gpu)
    agent = start_agent(work / "state", cluster, log=lambda m: None)
    horizon = plan.days * plan.day
    times: list[float] = []  # each round's moment: rounds take no time on this clock
    in_force: list[int | None] = [None]

    def after_rounds() -> None:
        """The rounds since the last look happened now; one that applied runs from now on."""
        times.extend([cluster.elapsed] * (len(agent.store.rounds(limit=100_000)) - len(times)))
        rev = agent.store.running()
        if rev is not None and rev.id != in_force[-1]:
            in_force.append(rev.id)
            if rev.parent is not None:  # (the baseline's revision, recorded by the first round, runs already)
                cluster.switch({**base, **dict(rev.config)})

    def sleep(dt: float) -> None:
        after_rounds()
        cluster.elapsed = min(horizon, cluster.elapsed + dt)

    agent.run(should_stop=lambda: cluster.elapsed >= horizon, sleep=sleep, clock=lambda: cluster.elapsed)
    after_rounds()
    rounds: list[Round] = []
    for at, r in zip(times, reversed(agent.store.rounds(limit=100_000))):
        rev = agent.store.get(r.revision) if r.revision is not None else None
        ev = rev.evidence if rev is not None else r.evidence
        rounds.append(Round(at, r.trigger, r.action, r.why, dict(rev.diff) if rev is not None else {},
                            None if ev is None else ev.predicted_gain,
                            "" if r.evidence is None else cl.best_candidate(r.evidence)))
    return rounds, cluster


def twin_gains(plan: cl.Plan, sel: cl.Selection, cluster: TwinCluster) -> tuple[float, float]:
    """The twin's gain in average JCT of the agent's run (its switches) over the baseline's: on
    the whole window, and in the design's blocks (the twin's switchback, arm 1 in each block the
    config the agent ran at the block's start, as `closed_loop.Plan.in_window` runs it)."""
    base = cl.baseline(plan.scale)
    agent_jct = float(cluster.records().jct.mean())
    base_jct = float(cb.simulate(cluster.trace, cluster.spec, [(0.0, base)]).records().jct.mean())
    lens = cb.lengths(sel.jobs, plan.days * plan.day, plan.blocks)
    sched = sb.schedule("switchback", lens.blocks, plan.design_seed)
    arm1 = tuple(next(c for t, c in reversed(cluster.switches) if t <= k * lens.block) for k in range(lens.blocks))
    tl = cb.Timeline(lens.block, lens.washout, sched, (base, cluster.switches[-1][1]), arm1)
    block = cb.twin_block_gain(cb.block_rows([cb.simulate_run(cluster.trace, cluster.spec, tl, 0)],
                                             cluster.spec, tl))
    return 1 - agent_jct / base_jct, block


def screen(plan: cl.Plan, trace: Any) -> Screened:
    """One window (see the module doc)."""
    sel = cl.select(trace, plan)
    with tempfile.TemporaryDirectory(prefix="clscreen-") as d:
        rounds, cluster = agent_rounds(plan, sel, Path(d))
    gains: tuple[float | None, float | None] = (None, None)
    at_round, predicted = None, None
    if len(cluster.switches) > 1:
        gains = twin_gains(plan, sel, cluster)
        (t, change), first = cluster.switches[1], next(r for r in rounds if r.diff)
        at_round = cb.round_gain(cluster.trace, cluster.spec, cluster.switches[0][1], change, t, plan.day)
        predicted = first.predicted_gain
    return Screened(plan.start_day, len(sel.jobs), sel.offered_load, rounds, cluster.switches, *gains,
                    at_round, predicted)


def row(s: Screened, plan: cl.Plan) -> str:
    """The window as a table row."""
    said = "; ".join(f"{r.at / plan.day:.2f} d {r.trigger.split(':')[0]}: {r.action}"
                     + (f" {r.diff} predicted {r.predicted_gain:+.1%}" if r.diff and r.predicted_gain is not None
                        else f" ({r.why}; best: {r.best})" if r.best and r.best != "—" else f" ({r.why})")
                     for r in s.rounds)
    gain = "" if s.window_gain is None else f"{s.window_gain:+.1%} ({s.block_gain:+.1%})"
    fired = "; ".join(f"{r.at / plan.day:.2f} d: {r.trigger.partition(': ')[2]}" for r in s.rounds
                      if r.trigger.startswith("contention"))
    return (f"| {s.start_day:g} | {s.jobs} | {s.offered_load:.2f} | {said} | {fired} | {gain} | "
            f"{calibration(s)} |")


def calibration(s: Screened) -> str:
    """The first change's predicted gain against the twin's over the period it predicted, and
    their ratio ("" without a change)."""
    if s.round_gain is None or s.predicted is None:
        return ""
    ratio = s.predicted / s.round_gain if s.round_gain > 0 else math.nan
    return f"{s.predicted:+.1%} / {s.round_gain:+.1%}" + (f" ({ratio:.2f})" if math.isfinite(ratio) else "")


def calibration_summary(screened: Sequence[Screened]) -> str:
    """How many first changes predicted their period's twin gain within a factor of 2."""
    pairs = [(s.predicted, s.round_gain) for s in screened if s.predicted is not None and s.round_gain is not None]
    within = sum(g > 0 and 0.5 <= p / g <= 2 for p, g in pairs)
    under = sum(g > 0 and p / g < 0.5 for p, g in pairs)
    ratios = [p / g for p, g in pairs if g > 0]
    median = f"; median ratio {float(np.median(ratios)):.2f}" if ratios else ""
    return (f"{len(pairs)} window(s) with a change: the prediction within a factor of 2 of the twin's gain "
            f"over its period on {within}, under half of it on {under}{median}")


HEADER = ("| start day | jobs | offered load | the agent's rounds (trace days into the window) | "
          "the contention trigger, where it fired | twin gain of its run: window (blocks) | "
          "its first change: predicted / the twin's gain over that period (ratio) |\n"
          "|---|---|---|---|---|---|---|")


MAX_WINDOWS = 1000  # a screen of more windows is a typo (each costs seconds to a minute)


def days_of(text: str) -> list[float]:
    """--days: "41-57" (every day), or "3,7,21": finite days >= 0, at most `MAX_WINDOWS`."""
    rule = f"--days {text!r}: a range A-B or a list A,B,C of trace days (finite, >= 0, at most {MAX_WINDOWS})"
    try:
        if "-" in text:
            a, b = (float(x) for x in text.split("-", 1))
            ends = [a, b]
        else:
            ends = [float(x) for x in text.split(",")]
    except ValueError:
        raise InputError(rule) from None
    if not all(math.isfinite(d) and d >= 0 for d in ends):
        raise InputError(rule)
    if "-" not in text:
        days = ends
    elif b - a + 1 > MAX_WINDOWS:
        raise InputError(rule)
    else:
        days = [float(d) for d in np.arange(a, b + 1e-9, 1.0)]
    if not days or len(days) > MAX_WINDOWS:
        raise InputError(rule)
    return days


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", choices=sorted(cl.PLANS), default="sb-itp21", help="the plan whose settings the agent has")
    ap.add_argument("--days", default="", help="the windows' start days: A-B or A,B,C")
    ap.add_argument("--trace", help="another trace than the plan's (canonical CSV)")
    ap.add_argument("--load", type=float, help="offered load the thinning aims at")
    ap.add_argument("--def-cpu-per-gpu", type=int, metavar="N", help="the test cluster's DefCpuPerGPU "
                    "(closed_loop.py --def-cpu-per-gpu; default: the plan's, 0)")
    ap.add_argument("--persistence", type=float, metavar="P", help="the agent's --persistence (closed_loop.py "
                    "--persistence; default: the plan's, 0)")
    ap.add_argument("--shadow", nargs=4, metavar=("STATE", "FAKE", "SLURM_CONF", "INCLUDE"),
                    help="(for closed_loop.py) the agent's loop on a real test cluster (ShadowCluster)")
    args = ap.parse_args(argv)
    if args.shadow:
        state, fake, conf, include = args.shadow
        return shadow(Path(state), Path(fake), conf, include)
    try:
        plan = cl.PLANS[args.run]
        cl.check_load(args.load)
        if args.load is not None:
            plan = replace(plan, load=args.load)
        if args.trace:
            plan = replace(plan, trace=args.trace)
        if args.def_cpu_per_gpu is not None:
            plan = replace(plan, def_cpu_per_gpu=cl.check_cpus_per_gpu(args.def_cpu_per_gpu))
        if args.persistence is not None:
            plan = replace(plan, persistence=args.persistence)
        trace = cl.trace_of(Path(plan.trace))
        days = days_of(args.days)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{Path(plan.trace).name}, the agent as in {plan.name} (max step {plan.max_step:g}, period "
          f"{plan.day:g} s = 1 trace day, history {plan.history_days:g} days"
          + (f", DefCpuPerGPU={plan.def_cpu_per_gpu}" if plan.def_cpu_per_gpu else "")
          + (f", persistence {plan.persistence:g}" if plan.persistence else "")
          + f")\n\n{HEADER}", flush=True)
    screened = []
    for day in days:
        p = replace(plan, start_day=day)
        try:
            s = screen(p, trace)
        except InputError as e:
            print(f"| {day:g} | | | {e} | | | |", flush=True)
            continue
        screened.append(s)
        print(row(s, p), flush=True)
    print(f"\n{calibration_summary(screened)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
