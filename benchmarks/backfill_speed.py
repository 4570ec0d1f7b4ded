"""What Slurm's time-limit backfill costs `multifactor`, with the lazy planner
(`policies/lazy_backfill.py`) and with the reference planner (`policies/backfill.py`).

    PYTHONPATH=src .venv/bin/python benchmarks/backfill_speed.py tiresias [--pairs 5]
    PYTHONPATH=src .venv/bin/python benchmarks/backfill_speed.py queue [--plot docs/img/backfill-queue.png]
    PYTHONPATH=src .venv/bin/python benchmarks/backfill_speed.py agent [--planner lazy|reference]

Traces get their time limits as docs/results.md's multifactor runs do: `autosched trace limits`
(seed 0).

``tiresias``: whole `autosched simulate ... --json` processes (start-up, loading and metrics
included; wall and CPU seconds), multifactor at its default config against tiresias at its
default, in turn (tiresias, multifactor, tiresias, ...: --pairs of each), on the 7-day Philly slice of
`benchmarks/simulator.py` (11,236 jobs) and on the bundled sample's first 14 days (23,905 jobs),
both on 32x8. Prints each pair's ratio (multifactor / tiresias: the same jobs, so also per job)
and their median. The planner is the installed one (the lazy one).

``queue``: seconds of simulation per simulated day against the pending queue's length, for both
planners, in process: the first `--days` (3) days of the sample's four weeks laid over one week
(45,548 jobs in 7 days, as for ``agent``) on clusters of 128, 64, 32, 16 and 8 nodes of 8 GPUs
(offered load about 1, 2, 4, 8 and 16: the smaller the cluster, the longer the queue, up to
about 13,600 waiting), run a day at a time (`Simulator.run(until=...)`). Each day gives a point:
its mean number of waiting jobs over the backfill cycles, and the CPU seconds it took (less moved
by other work on the machine than wall time). Prints the points and, with --plot, draws them.

``agent``: one round of the live agent (`Agent.step`, its default settings: 20 trials on 3
samples of a day, guardrail) against a fake cluster of 128x8 (1,024 GPUs) whose history is a
week of Philly scaled to it: the bundled sample's four weeks laid over one (45,548 jobs, four
times the 32x8 load of one week on four times the GPUs), its jobs' starts and ends simulated
under the default config. Prints the round's wall and CPU time with the chosen planner.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

import simulator  # noqa: E402

from autosched.cluster import parse_cluster  # noqa: E402
from autosched.policies import get_policy  # noqa: E402
from autosched.policies.multifactor import Multifactor  # noqa: E402
from autosched.sim import Simulator  # noqa: E402
from autosched.trace import Trace, load_trace, write_trace  # noqa: E402
from autosched.trace.limits import add_time_limits  # noqa: E402

DAY = 86400.0
SAMPLE = REPO / "src" / "autosched" / "data" / "philly_2017-10-02_28d.csv.gz"
CLI = [str(Path(sys.executable).with_name("autosched")), "simulate"]
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as simulator.py


def limited(trace: Trace) -> Trace:
    return add_time_limits(trace, seed=0)[0]


def slice7(tmp: Path) -> Trace:
    path = tmp / "slice7.csv"
    simulator.make_slice(7, path)
    return limited(load_trace(path)[0])


def sample(days: float) -> Trace:
    trace = limited(load_trace(SAMPLE)[0])
    return trace.window(trace.start, trace.start + days * DAY)


def whole_process(path: Path, policy: str) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one `autosched simulate` process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([*CLI, str(path), "-c", "32x8", "-p", policy, "--json"],
                            stdout=subprocess.DEVNULL, env=ENV)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"autosched simulate {path} -p {policy} failed")
    return time.perf_counter() - t0, usage.ru_utime + usage.ru_stime


def vs_tiresias(pairs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, trace in (("7-day Philly slice", slice7(Path(tmp))), ("sample, first 14 days", sample(14))):
            path = Path(tmp) / "trace.csv"
            write_trace(trace, path)
            whole_process(path, "tiresias")  # untimed: compiles the bytecode, warms the disk cache
            runs: dict[str, list[tuple[float, float]]] = {"tiresias": [], "multifactor": []}
            for _ in range(pairs):
                for policy in runs:
                    runs[policy].append(whole_process(path, policy))
            for k, what in ((0, "wall"), (1, "CPU")):
                t = [r[k] for r in runs["tiresias"]]
                m = [r[k] for r in runs["multifactor"]]
                ratios = [b / a for a, b in zip(t, m)]
                print(f"{name} ({len(trace):,} jobs, 32x8), {what}: tiresias {statistics.median(t):.2f} s, "
                      f"multifactor {statistics.median(m):.2f} s (medians of {pairs}); ratio per pair "
                      f"{', '.join(f'{r:.2f}' for r in ratios)}, median {statistics.median(ratios):.2f}")


def four_weeks_in_one() -> Trace:
    """The sample's four weeks (with drawn limits) laid over its first: four times its load."""
    four = sample(28)
    week = four.replace(submit_time=four.start + (four.submit_time - four.start) % (7 * DAY))
    return week.take(np.argsort(week.submit_time, kind="stable"))


def queue(days: int, plot: str | None) -> None:
    week = four_weeks_in_one()
    trace = week.window(week.start, week.start + days * DAY)
    policy = get_policy("multifactor")
    points: dict[str, list[tuple[float, float]]] = {"reference": [], "lazy": []}
    for nodes in (128, 64, 32, 16, 8):
        for planner in points:
            Multifactor.reference_planner = planner == "reference"
            sim = Simulator(trace, parse_cluster(f"{nodes}x8"), policy(policy.space.validate({})))
            pol = sim.policies[0]
            waiting: list[int] = []
            real = pol._backfill

            def spy(now, limit, pol=pol, real=real, waiting=waiting):
                waiting.append(len(pol.waiting))
                real(now, limit)

            pol._backfill = spy
            for day in range(1, days + 1):
                waiting.clear()
                t0, c0 = time.perf_counter(), time.process_time()
                sim.run(until=trace.start + day * DAY)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                if waiting:
                    points[planner].append((float(np.mean(waiting)), cpu))
                    print(f"{nodes}x8 {planner:9s} day {day}: {np.mean(waiting):8.0f} waiting, {cpu:7.2f} CPU s "
                          f"({wall:.2f} s wall)", flush=True)
    Multifactor.reference_planner = False
    if plot:
        draw(points, days, plot)


def draw(points: dict[str, list[tuple[float, float]]], days: int, plot: str) -> None:
    """The queue points of each planner (mean waiting, CPU seconds per day), on log axes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for planner, marker in (("reference", "o"), ("lazy", "s")):
        q, s = zip(*points[planner])
        ax.scatter(q, s, marker=marker, label=f"{planner} planner", alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("waiting jobs (mean over the day's backfill cycles)")
    ax.set_ylabel("CPU seconds per simulated day")
    ax.set_title(f"multifactor with limits: the sample's 4 weeks in one, days 1-{days}, 128 to 8 nodes of 8 GPUs",
                 fontsize=8)
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(plot, dpi=100, metadata={"Software": None})
    print(f"wrote {plot}")


def agent_round(planner: str) -> None:
    from autosched.live.agent import AgentSettings, init_agent
    from autosched.live.fake import FakeConnector

    Multifactor.reference_planner = planner == "reference"
    with tempfile.TemporaryDirectory() as tmp:
        week = four_weeks_in_one()
        spec = parse_cluster("128x8")
        policy = get_policy("multifactor")
        rec = Simulator(week, spec, policy(policy.space.validate({}))).run().records()
        now = 1.7e9  # the history ends now: the week is shifted to end at it
        shift = now - float(np.max(rec.end)) - 60.0
        rows = ["JobID|Submit|Start|End|AllocTRES|ReqTRES|User|Account|Partition|State|JobName|NCPUS|Timelimit"]
        for i in range(len(week)):
            user = str(week.user[i]) if week.user is not None else "u"
            g, lim = int(week.num_gpus[i]), int(week.time_limit[i])
            tres = f"billing={g},cpu=1,gres/gpu={g},node=1"
            rows.append("|".join([str(i + 1), stamp(week.submit_time[i] + shift), stamp(rec.first_start[i] + shift),
                                  stamp(rec.end[i] + shift), tres, tres, user, user, "gpu",
                                  "TIMEOUT" if rec.killed[i] else "COMPLETED", "job", "1",
                                  f"{lim // 86400}-{lim % 86400 // 3600:02d}:{lim % 3600 // 60:02d}:00"]))
        fake = FakeConnector.create(Path(tmp) / "fake", sacct="\n".join(rows) + "\n", nodes=128, gpus_per_node=8)
        fake.update(clock=now)
        agent = init_agent(Path(tmp) / "state", AgentSettings(
            connector={"kind": "fake", "directory": str(Path(tmp) / "fake")}))
        t0, c0 = time.perf_counter(), cpu_seconds()
        outcome = agent.step()
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    print(f"one agent round, {len(week):,} jobs of history on 128x8, {planner} planner: {wall:.1f} s wall, "
          f"{cpu:.1f} CPU s (with its trial workers) "
          f"({outcome.action.value}: {outcome.why})")


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the trial workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("tiresias", "queue", "agent"))
    ap.add_argument("--pairs", type=int, default=5, help="tiresias: runs of each policy, in turn")
    ap.add_argument("--days", type=int, default=3, help="queue: days simulated")
    ap.add_argument("--plot", help="queue: write the plot here (.png)")
    ap.add_argument("--planner", choices=("lazy", "reference"), default="lazy", help="agent: which planner")
    ap.add_argument("--traces", default=str(simulator.SHARED.parent), help="the shared traces directory")
    args = ap.parse_args()
    simulator.SHARED = Path(args.traces) / "philly"
    if args.what == "tiresias":
        vs_tiresias(args.pairs)
    elif args.what == "queue":
        queue(args.days, args.plot)
    else:
        agent_round(args.planner)


if __name__ == "__main__":
    main()
