"""Replay one job sequence on a real Slurm 22.05 cluster and in the simulator, and compare.

The jobs are a window of a real Philly slice, scaled down: durations 1 trace minute -> 1 s
(clipped to [--dmin, --dmax] s), arrivals compressed to --arrival-span s (so that the 4 x 8-GPU
testbed queues), jobs of at most 8 GPUs; users and accounts from the job's VC (the window's VCs
in order of appearance become alice/physics, bob/chemistry, carol/physics, alice/chemistry, ...); a time limit per job in whole minutes, 1.2-4 x its run
time (users over-ask), never below it. Each job is submitted as `sleep D` with sbatch at its
arrival time (a submission is an event for Slurm's main scheduler; a `--begin` time is not), as
its user and account, with `--gres=gpu:N --time=LIMIT`.

For each config the real cluster runs the jobs (configured through the include file that
slurm.conf reads last, with `scontrol reconfigure`; fair-share usage reset between configs),
sacct gives what happened, and the simulator replays the same jobs, read from that same sacct
output (submit times, run times and limits as the real cluster recorded them), under the same
config. Time constants are in the same scaled units on both sides (PriorityMaxAge etc. given
in seconds, written to slurm.conf in minutes).

    # a cluster of its own (scripts/slurm-testbed.sh), run, stop:
    python benchmarks/slurm_twin.py --jobs 40 --root /tmp/testbed-twin --port-base 22000 --json out.json

Prints, per config, Kendall's tau of the start orders, median and p90 |start difference|,
the share of starts within 2 x bf_interval, average wait and JCT real against simulated; and
whether the configs rank the same (by average wait) on both.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from autosched.associations import read_associations  # noqa: E402
from autosched.cluster import ClusterSpec, SlurmClocks, SlurmPartition  # noqa: E402
from autosched.export.slurm import slurm_conf_lines  # noqa: E402
from autosched.policies import get_policy  # noqa: E402
from autosched.sim import Simulator  # noqa: E402
from autosched.trace.io import load_trace  # noqa: E402
from autosched.trace.parsing import wallclock_seconds  # noqa: E402
from autosched.trace.slurm import tres_cpus  # noqa: E402
from autosched.trace.table import Trace  # noqa: E402

# The slice the jobs come from: one of the real traces, which live beside the checkout (README,
# "Tests on the real traces"); --trace names another copy.
PHILLY_SLICE = Path("philly") / "slices" / "philly_2017-10-02_2d.csv"
PHILLY = REPO.parent / "shared" / "traces" / PHILLY_SLICE
USERS = ("alice", "bob", "carol")
ACCOUNTS = ("physics", "chemistry")
SCRIPT = REPO / "scripts" / "slurm-testbed.sh"
# The test cluster's nodes as scripts/slurm/slurm.conf.in declares them: 4 of 8 GPUs and 8 CPUs,
# no DefCpuPerGPU unless TESTBED_DEF_CPU_PER_GPU sets one. Without it a job submitted as here
# (sbatch --gres=gpu:N, no CPU count) gets one task of one CPU, whatever its GPUs: DefCpuPerGPU 0
# in the simulator's terms (ClusterSpec.job_cpus); with it, that many CPUs per GPU.
NODES, GPUS_PER_NODE, CPUS_PER_NODE = 4, 8, 8

# Time constants in the scaled units (1 trace minute -> 1 s): PriorityMaxAge 10 min, half-life
# 10 min. PriorityCalcPeriod cannot go below 1 min in Slurm.
BASE = {"PriorityWeightAge": 1000, "PriorityMaxAge": 600.0, "PriorityWeightFairshare": 0,
        "PriorityDecayHalfLife": 600.0, "PriorityWeightJobSize": 0, "PriorityCalcPeriod": 1,
        "PriorityWeightTRES.CPU": 0, "PriorityWeightTRES.GRES/gpu": 0,
        "TRESBillingWeights.CPU": 1.0, "TRESBillingWeights.GRES/gpu": 4.0,
        "backfill": True, "bf_interval": 5, "bf_resolution": 60, "bf_window": 60,
        "sched_interval": 60}
CONFIGS = {
    "age": {},
    "age_bf30": {"bf_interval": 30},
    "gpu_first": {"PriorityWeightTRES.GRES/gpu": 5000},
    "small_first": {"PriorityWeightJobSize": 5000, "PriorityFavorSmall": True},
    "fairtree": {"PriorityWeightFairshare": 5000},
    # A second partition, hi = n1-n2 with PriorityTier 2, beside the testbed's gpu (all nodes,
    # tier 1); bob's jobs go to hi. Keys starting with "_" are the harness's, not knobs.
    "tiers": {"_partitions": [["gpu", [0, 1, 2, 3], 1], ["hi", [0, 1], 2]], "_partition_of": {"bob": "hi"}},
}


def knobs(config: dict) -> dict:
    """The policy's knobs of a harness config."""
    return {k: v for k, v in config.items() if not k.startswith("_")}


def partition_lines(config: dict) -> list[str]:
    """slurm.conf lines for a config's partitions beyond the testbed's own (gpu)."""
    return [f"PartitionName={name} Nodes={','.join(f'n{k + 1}' for k in nodes)} MaxTime=INFINITE "
            f"State=UP PriorityTier={tier} TRESBillingWeights=\"CPU=1.0,GRES/gpu=4.0\""
            for name, nodes, tier in config.get("_partitions", []) if name != "gpu"]


@dataclass(frozen=True)
class Job:
    name: str
    submit: float  # s after the first
    gpus: int
    seconds: int  # sleep
    limit_min: int
    user: str
    account: str
    partition: str = ""  # (empty: the default partition)


def pick_jobs(n: int, offset: int, arrival_span: float, dmin: int, dmax: int, tag: str,
              path: Path) -> list[Job]:
    """n consecutive jobs of at most 8 GPUs from `offset` in the Philly slice, scaled down."""
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if int(r["num_gpus"]) <= 8][offset:offset + n]
    t0 = float(rows[0]["submit_time"])
    span = max(1.0, float(rows[-1]["submit_time"]) - t0)
    jobs = []
    assoc = testbed_associations(r["vc"] for r in rows)
    for i, r in enumerate(rows):
        secs = int(min(dmax, max(dmin, round(float(r["duration"]) / 60.0))))
        submit = round((float(r["submit_time"]) - t0) / span * arrival_span, 1)
        jobs.append(Job(f"{tag}-{i:03d}", submit, int(r["num_gpus"]), secs,
                        rough_limit(str(r["job_id"]), secs), *assoc[r["vc"]]))
    return jobs


def testbed_associations(keys: Iterable[str]) -> dict[str, tuple[str, str]]:
    """The testbed's (user, account) for each key (a VC), in order of first appearance:
    alice/physics, bob/chemistry, carol/physics, alice/chemistry, ..."""
    return {k: (USERS[i % len(USERS)], ACCOUNTS[i % len(ACCOUNTS)])
            for i, k in enumerate(dict.fromkeys(keys))}


def rough_limit(key: str, secs: float) -> int:
    """A time limit in whole minutes for a job of `secs` s whose trace has none: (secs + 5) x
    1.2, 2 or 4 (users over-ask; which one by a hash of `key`), rounded up, never below the run."""
    over = (1.2, 2.0, 4.0)[zlib.crc32(key.encode()) % 3]
    return max(1, math.ceil((secs + 5) * over / 60.0))


class Cluster:
    """The Slurm commands the harness needs, for one testbed (SLURM_CONF in `env`)."""

    def __init__(self, env: dict[str, str], include: Path):
        self.env = env
        self.include = include

    def run(self, *argv: str, user: str | None = None, timeout: float = 30) -> str:
        cmd = list(argv) if user is None else ["runuser", "-u", user, "--", *argv]
        res = subprocess.run(cmd, env=self.env, cwd="/tmp", capture_output=True, text=True,
                             timeout=timeout)
        if res.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd)}` exited {res.returncode}: {res.stderr.strip()}")
        return res.stdout

    def configure(self, config: dict) -> None:
        """Write the config's slurm.conf lines to the include file and reconfigure; reset usage."""
        lines = [ln for ln in slurm_conf_lines(knobs(config)) if not ln.startswith("#")] + partition_lines(config)
        lines.append("DebugFlags=Backfill")  # the log then shows each backfill cycle (its clock)
        self.include.write_text("# written by benchmarks/slurm_twin.py\n" + "\n".join(lines) + "\n")
        self.run("scontrol", "reconfigure")
        for a in ACCOUNTS:
            self.run("sacctmgr", "-i", "modify", "account", f"name={a}", "set", "RawUsage=0")

    def equal_shares(self) -> None:
        """Fairshare=1 for both accounts (the simulator gives siblings equal shares)."""
        for a in ACCOUNTS:
            self.run("sacctmgr", "-i", "modify", "account", f"name={a}", "set", "fairshare=1")

    def submit(self, jobs: list[Job], t0: float | None = None) -> float:
        """Submit each job at `t0` (default: now) + its arrival time; returns `t0`."""
        t0 = time.time() if t0 is None else t0
        for j in jobs:
            delay = t0 + j.submit - time.time()
            if delay > 0:
                time.sleep(delay)
            self.run("sbatch", "--parsable", "--chdir=/tmp", "-o", "/dev/null", "-A", j.account,
                     *(["-p", j.partition] if j.partition else []),
                     "-t", str(j.limit_min), f"--gres=gpu:{j.gpus}", f"--job-name={j.name}",
                     "--wrap", f"sleep {j.seconds}", user=j.user)
        return t0

    def wait_done(self, names: set[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            left = set(self.run("squeue", "-h", "-o", "%j").split()) & names
            if not left:
                return
            time.sleep(1.0)
        raise RuntimeError(f"{len(left)} job(s) still queued after {timeout:.0f} s")

    def sacct(self, since: float, out: Path) -> None:
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 5))
        text = self.run("sacct", "-a", "-X", "-P", "-S", start, "-o",
                        "JobID,JobName,User,Account,Partition,Submit,Start,End,State,Timelimit,"
                        "AllocTRES,AllocCPUS")
        out.write_text(text)


_LOG = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\] (?:"
                  r"_slurm_rpc_submit_batch_job: JobId=(?P<submit>\d+) |"
                  r"sched: Allocate JobId=(?P<alloc>\d+) |"
                  r"sched/backfill: _start_job: Started JobId=(?P<bf>\d+) |"
                  r"_job_complete: JobId=(?P<end>\d+) done|"
                  r"(?P<cycle>sched/backfill: _attempt_backfill: beginning)|"
                  r"(?P<ctld>slurmctld version .* started))")


def log_times(log: Path) -> dict[str, dict[int, float]]:
    """Submit, start and end of every job in slurmctld's log, to the millisecond (sacct keeps
    whole seconds, which turns events a few hundred ms apart into ties)."""
    out: dict[str, dict[int, float]] = {"submit": {}, "start": {}, "end": {}, "by_backfill": {},
                                        "alloc_pass": {}, "bf_cycle": {}, "ctld_start": {}}
    with open(log, errors="replace") as f:
        for line in f:
            m = _LOG.match(line)
            if not m:
                continue
            stamp, frac = (m.group(1).split(".") + ["0"])[:2]
            t = wallclock_seconds(stamp) + float("0." + frac)
            if m.group("cycle"):  # (numbered in order: one dict shape for the JSON)
                out["bf_cycle"][len(out["bf_cycle"])] = t
            elif m.group("ctld"):
                out["ctld_start"][len(out["ctld_start"])] = t
            elif m.group("submit"):
                out["submit"][int(m.group("submit"))] = t
            elif m.group("alloc") or m.group("bf"):
                j = int(m.group("alloc") or m.group("bf"))
                out["start"].setdefault(j, t)
                out["by_backfill"][j] = bool(m.group("bf"))
                if m.group("alloc"):
                    out["alloc_pass"][j] = t
            else:
                out["end"][int(m.group("end"))] = t
    return out


def slurm_clocks(lt: dict[str, dict[int, float]], ids: list[int], day0: float) -> SlurmClocks:
    """slurmctld's thread phases during one run, from its log (times since `day0`): the main
    scheduler's tick from its first allocation of the run (the loop sleeps a second after its
    work, so the phase drifts a few ms a second: see docs/fidelity.md), the backfill cycle from
    its first cycle after the first submission, and the priority recalculation from slurmctld's
    start (its decay thread runs then and every PriorityCalcPeriod after)."""
    first = min(lt["submit"][j] for j in ids)
    passes = sorted({round(lt["alloc_pass"][j], 2) for j in ids if j in lt["alloc_pass"]})
    cycles = sorted(t for t in lt["bf_cycle"].values() if t >= first)
    starts = [t for t in lt["ctld_start"].values() if t <= first]
    tick, period = (passes[0] if passes else day0), 1.0
    if len(passes) > 2:
        # the loop's period: number the passes' ticks (gaps of a few s, so rounding is safe
        # despite the drift) and fit a line through them
        k = np.cumsum([0] + [round(b - a) for a, b in zip(passes, passes[1:])])
        period, tick = np.polyfit(k, passes, 1)
    return SlurmClocks(tick=float(tick) - day0, backfill=(cycles[0] if cycles else day0) - day0,
                       decay=(max(starts) if starts else day0) - day0, tick_period=float(period))


@dataclass
class RealRun:
    """The jobs of one real run as sacct (and, when it has them all, slurmctld's log) recorded
    them; times in s since `day0` (the UTC midnight before the first submission), by submit time."""

    trace: Trace  # as the simulator takes it: real submit times, run times, limits, users
    rows: list[dict[str, str]]  # the run's sacct rows
    ids: list[int]  # Slurm job ids, in the trace's order
    submit: np.ndarray
    start: np.ndarray
    end: np.ndarray
    day0: float
    times: dict[str, dict[int, float]] | None  # `log_times` of slurmctld's log, if given
    precise: bool  # submit/start/end come from the log (ms), not sacct (s)


def read_run(sacct_path: Path, tag: str, log: Path | dict | None = None) -> RealRun:
    """The jobs named TAG-... of an sacct export, read with autosched's own loader; with `log`
    (slurmctld.log, or `log_times` of it as saved by `save_times`), submit, start and end come
    from it to the millisecond."""
    with open(sacct_path, newline="") as f:
        rows = [r for r in csv.DictReader(f, delimiter="|") if r["JobName"].startswith(tag + "-")]
    with open(sacct_path) as f:
        header = f.readline()
    # a job's CPUs as it asked for them (ReqTRES), as the agent reads them: the twin gives it
    # the cluster's DefCpuPerGPU when it starts, and weighs the request in the TRES factor
    # (ClusterSpec.asked_cpus); NCPUS is what it was given
    for r in rows:
        if "NCPUS" in r and (asked := tres_cpus(r.get("ReqTRES") or "")):
            r["NCPUS"] = str(asked)
    with tempfile.TemporaryDirectory() as d:
        mine = Path(d) / "sacct.txt"
        mine.write_text(header + "".join("|".join(r[k] for k in header.strip().split("|")) + "\n"
                                         for r in rows))
        trace, _ = load_trace(mine, format="slurm")
    day0 = min(wallclock_seconds(r["Submit"]) for r in rows) // 86400 * 86400
    by_name = {r["JobName"]: r for r in rows}
    ids = [int(by_name[nm]["JobID"]) for nm in trace.name]
    start = np.array([wallclock_seconds(by_name[nm]["Start"]) - day0 for nm in trace.name], dtype=float)
    end = np.array([wallclock_seconds(by_name[nm]["End"]) - day0 for nm in trace.name], dtype=float)
    submit = trace.submit_time
    lt = log if isinstance(log, dict) else log_times(log) if log is not None and log.exists() else None
    precise = lt is not None and all(j in lt["submit"] and j in lt["start"] and j in lt["end"]
                                     for j in ids)
    if precise and lt is not None:
        submit = np.array([lt["submit"][j] - day0 for j in ids])
        start = np.array([lt["start"][j] - day0 for j in ids])
        end = np.array([lt["end"][j] - day0 for j in ids])
        trace = trace.replace(submit_time=submit, duration=end - start)
        order = np.argsort(submit, kind="stable")
        submit, start, end = submit[order], start[order], end[order]
        ids = [ids[k] for k in order]
    return RealRun(trace, rows, ids, submit, start, end, day0, lt, precise)


def testbed_cluster(def_cpu_per_gpu: float = 0.0, **fields: Any) -> ClusterSpec:
    """The test cluster's nodes as the simulator models them (see NODES), a job that asks for no
    CPUs given `def_cpu_per_gpu` per GPU (the cluster's DefCpuPerGPU; 0: unset, one CPU a job),
    with `fields` of ClusterSpec beside."""
    return ClusterSpec.uniform_nodes(NODES, GPUS_PER_NODE, node_cpus=CPUS_PER_NODE, def_cpu_per_gpu=def_cpu_per_gpu,
                                     **fields)


def twin_spec(run: RealRun, config: dict, assoc_path: Path | None, model: bool = True,
              def_cpu_per_gpu: float = 0.0) -> ClusterSpec:
    """The testbed as the simulator models it for `run`: 4 x 8 GPUs, `def_cpu_per_gpu` CPUs per
    GPU (`testbed_cluster`), the config's extra partitions; with `model`, slurmctld's thread
    clocks (from the log) and the association tree (`sacctmgr show assoc` saved at `assoc_path`)."""
    spec = testbed_cluster(def_cpu_per_gpu, slurm_partitions=tuple(
        SlurmPartition(name, tuple(nodes), tier) for name, nodes, tier in config.get("_partitions", [])))
    if model:
        clocks = slurm_clocks(run.times, run.ids, run.day0) if run.precise and run.times is not None \
            else SlurmClocks()
        spec = replace(spec, clocks=clocks, associations=read_associations(assoc_path)
                       if assoc_path is not None and assoc_path.exists() else ())
    return spec


def simulate(run: RealRun, spec: ClusterSpec, config: dict, placement: str,
             changes: Sequence[tuple[float, dict]] = ()) -> Simulator:
    """Replay the run's jobs under `config`, and from each (time since day0, config) of
    `changes` on under that one (`Simulator.reconfigure`, as slurmctld's reconfigure)."""
    sim = Simulator(run.trace, spec, get_policy("multifactor")({**knobs(config), "placement": placement}),
                    record_segments=True)
    for t, new in sorted(changes, key=lambda c: c[0]):
        sim.run(until=t)
        sim.reconfigure(get_policy("multifactor").space.validate({**knobs(new), "placement": placement}))
    return sim.run()


def agreement(run: RealRun, sim: Simulator, bf_interval: float) -> dict:
    """How the simulated run matches the real one: start order, start times, wait and JCT."""
    from scipy.stats import kendalltau

    rec = sim.records()
    diff = np.abs(rec.first_start - run.start)
    return {
        "jobs": len(run.trace),
        "times": "slurmctld.log (ms)" if run.precise else "sacct (s)",
        "tau": float(kendalltau(run.start, rec.first_start).statistic),
        "median_abs_start_diff": float(np.median(diff)),
        "p90_abs_start_diff": float(np.percentile(diff, 90)),
        "within_2_bf_interval": float(np.mean(diff <= 2 * bf_interval)),
        "avg_wait_real": float(np.mean(run.start - run.submit)),
        "avg_wait_sim": float(np.mean(rec.queue)),
        "avg_jct_real": float(np.mean(run.end - run.submit)),
        "avg_jct_sim": float(np.mean(rec.jct)),
        "backfill": sim.policies[0].backfill_kind,
        "killed_real": int(sum(r["State"].startswith("TIMEOUT") for r in run.rows)),
    }


def compare(sacct_path: Path, tag: str, config: dict, placement: str,
            log: Path | dict | None = None, model: bool = True) -> dict:
    """Simulate the jobs of one real run under `config` and compare start times (`read_run`,
    `twin_spec` with the assoc.txt beside the sacct file, `simulate`, `agreement`)."""
    run = read_run(sacct_path, tag, log)
    spec = twin_spec(run, config, sacct_path.parent / "assoc.txt", model)
    return agreement(run, simulate(run, spec, config, placement), config["bf_interval"])


def run_config(cl: Cluster, name: str, config: dict, jobs: list[Job], outdir: Path,
               placements: tuple[str, ...], timeout: float, log: Path | None = None) -> dict:
    mark = log.stat().st_size if log is not None and log.exists() else 0
    # the association tree as slurmdbd holds it: the simulator's fair share counts it all
    (outdir / "assoc.txt").write_text(cl.run("sacctmgr", "-P", "show", "assoc",
                                             "format=Cluster,Account,User,ParentName,Share"))
    cl.configure(config)
    # a reconfigure queues the main scheduler, whose next event-driven pass then waits
    # batch_sched_delay (3 s): let that pass happen before the first job arrives
    time.sleep(5.0)
    t0 = cl.submit(jobs)
    cl.wait_done({j.name for j in jobs}, timeout)
    time.sleep(1.0)  # sacct sees the last ends
    path = outdir / f"sacct-{name}.txt"
    cl.sacct(t0, path)
    tag = jobs[0].name.rsplit("-", 1)[0]
    times = log_times(log) if log is not None and log.exists() else None
    if times is not None:
        save_times(outdir / f"times-{name}.json", times, tag, config)
        with open(log, "rb") as f:  # this run's part of the log (cycle times, for the record)
            f.seek(mark)
            (outdir / f"slurmctld-{name}.log").write_bytes(f.read())
    return {p: compare(path, tag, config, p, times) for p in placements}


def save_times(path: Path, times: dict[str, dict[int, float]], tag: str, config: dict) -> None:
    """Keep what a replay needs (--replay): the log's times, the job-name tag and the config."""
    path.write_text(json.dumps({"tag": tag, "config": config,
                                "times": {k: {str(j): t for j, t in v.items()} for k, v in times.items()}}))


def load_times(path: Path) -> tuple[str, dict, dict[str, dict[int, float]]]:
    d = json.loads(path.read_text())
    return d["tag"], d["config"], {k: {int(j): t for j, t in v.items()} for k, v in d["times"].items()}


def run_noise(results: dict, placement: str, metric: str = "avg_wait") -> float | None:
    """Real run-to-run noise of `metric`: the largest difference between a config and its
    repeats (NAME#2, ...), None without repeats."""
    diffs = [abs(results[n][placement][f"{metric}_real"] - results[n.split("#")[0]][placement][f"{metric}_real"])
             for n in results if "#" in n and n.split("#")[0] in results]
    return max(diffs) if diffs else None


def rank_agreement(results: dict, placement: str, metric: str = "avg_wait", noise: float = 0.0) -> dict:
    """Do the real cluster and the simulator order the configs (repeats left out) the same by
    `metric`? Over all of them, and over the pairs whose real outcomes differ by more than
    `noise` (2 x the measured run-to-run noise: only those pairs are a decision tuning can make)."""
    names = [n for n in results if "#" not in n]
    real = sorted(names, key=lambda n: results[n][placement][f"{metric}_real"])
    sim = sorted(names, key=lambda n: results[n][placement][f"{metric}_sim"])
    clear, agree = [], []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ra, rb = (results[x][placement][f"{metric}_real"] for x in (a, b))
            sa, sb = (results[x][placement][f"{metric}_sim"] for x in (a, b))
            if abs(ra - rb) > noise:
                clear.append((a, b))
                if (ra - rb) * (sa - sb) > 0:
                    agree.append((a, b))
    return {"real": real, "sim": sim, "same": real == sim, "noise": noise,
            "clear_pairs": len(clear), "clear_pairs_same_order": len(agree),
            "clear_pairs_swapped": [p for p in clear if p not in agree]}


def _print(name: str, res: dict) -> None:
    for p, r in res.items():
        print(f"{name:14s} {p:12s} tau {r['tau']:.3f}  |dstart| median {r['median_abs_start_diff']:.1f} s "
              f"p90 {r['p90_abs_start_diff']:.1f} s  within 2xbf {r['within_2_bf_interval']:.0%}  "
              f"wait real {r['avg_wait_real']:.2f} sim {r['avg_wait_sim']:.2f}  "
              f"JCT real {r['avg_jct_real']:.2f} sim {r['avg_jct_sim']:.2f}", flush=True)


def replay(outdir: Path, placements: tuple[str, ...], names: list[str] | None = None) -> dict:
    """Simulate again the real runs saved in `outdir` (sacct-NAME.txt + times-NAME.json), with
    the committed simulator: a change of the model is measured without running Slurm again."""
    results = {}
    for path in sorted(outdir.glob("times-*.json")):
        name = path.stem[len("times-"):]
        if names is not None and name not in names:
            continue
        tag, config, times = load_times(path)
        results[name] = {p: compare(outdir / f"sacct-{name}.txt", tag, config, p, times) for p in placements}
        _print(name, results[name])
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", type=Path, default=PHILLY, help="the 2-day Philly slice (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--offset", type=int, default=1200, help="first job (of the <= 8-GPU jobs) of the slice")
    ap.add_argument("--arrival-span", type=float, default=45.0)
    ap.add_argument("--dmin", type=int, default=8)
    ap.add_argument("--dmax", type=int, default=90)
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="comma-separated; NAME#2 runs NAME again (run-to-run noise)")
    ap.add_argument("--placements", default="first_fit,consolidate")
    ap.add_argument("--root", default="/tmp/testbed-twin")
    ap.add_argument("--port-base", type=int, default=22000)
    ap.add_argument("--start", action="store_true", help="start the testbed (--fresh) first and stop it after")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a run may take")
    ap.add_argument("--out", default="/tmp/slurm_twin")
    ap.add_argument("--replay", action="store_true",
                    help="no Slurm: simulate the real runs saved in --out again and compare")
    ap.add_argument("--noise", type=float, default=1.0,
                    help="real run-to-run noise of the average wait (s) when no config is repeated")
    ap.add_argument("--json", help="write all figures here")
    args = ap.parse_args()
    if not args.replay and not args.trace.is_file():
        ap.error(f"--trace {args.trace}: no such file (the real traces go beside the checkout in "
                 "../shared/traces; README, \"Tests on the real traces\")")

    outdir = Path(args.out)
    placements = tuple(args.placements.split(","))
    if args.replay:
        results = replay(outdir, placements, args.configs.split(",") if args.configs != ",".join(CONFIGS) else None)
    else:
        results = run_all(args, outdir, placements)
    ranking = {}
    for p in placements:
        if len(results) > 1:
            noise = run_noise(results, p)
            ranking[p] = rank_agreement(results, p, noise=2 * (noise if noise is not None else args.noise))
    summary = {"results": results, "jobs": args.jobs, "offset": args.offset,
               "arrival_span": args.arrival_span, "ranking": ranking}
    for p, r in ranking.items():
        print(f"ranking by average wait ({p}): real {r['real']} sim {r['sim']} same={r['same']}; "
              f"pairs apart by more than {r['noise']:.2f} s (2 x run-to-run noise): "
              f"{r['clear_pairs_same_order']} of {r['clear_pairs']} in the same order"
              + (f", swapped: {r['clear_pairs_swapped']}" if r["clear_pairs_swapped"] else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))


def run_all(args: argparse.Namespace, outdir: Path, placements: tuple[str, ...]) -> dict:
    root = Path(args.root)
    env = dict(os.environ, SLURM_CONF=str(root / "etc" / "slurm.conf"), TESTBED_ROOT=str(root),
               TESTBED_PORT_BASE=str(args.port_base))
    if args.start:
        subprocess.run(["bash", str(SCRIPT), "start", "--fresh"], env=env, check=True, timeout=300)
    outdir.mkdir(parents=True, exist_ok=True)
    cl = Cluster(env, root / "etc" / "autosched.conf")
    results = {}
    try:
        cl.equal_shares()
        for name in args.configs.split(","):
            tag = f"tw{int(time.time()) % 100000}{name[:3]}"
            jobs = pick_jobs(args.jobs, args.offset, args.arrival_span, args.dmin, args.dmax, tag, args.trace)
            config = {**BASE, **CONFIGS[name.split("#")[0]]}
            to = config.get("_partition_of", {})
            jobs = [replace(j, partition=to.get(j.user, "")) for j in jobs]
            t = time.monotonic()
            results[name] = run_config(cl, name, config, jobs, outdir, placements, args.timeout,
                                       root / "log" / "slurmctld.log")
            print(f"{name}: real run {time.monotonic() - t:.0f} s", file=sys.stderr)
            _print(name, results[name])
    finally:
        cl.include.write_text("# Managed by autosched's live layer: keys here override slurm.conf (included at its end).\n")
        try:
            cl.run("scontrol", "reconfigure")
        except Exception:  # noqa: BLE001 - the cluster may be down already
            pass
        if args.start:
            subprocess.run(["bash", str(SCRIPT), "stop"], env=env, timeout=300)
    return results


if __name__ == "__main__":
    main()
