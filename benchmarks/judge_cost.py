"""What the agent's counterfactual judge costs per judged period: the recorded times alone against
the recorded times plus `JITTERS` jittered copies (live/judge.py), each under the old config and
the new one.

Two periods:

- **test bed**: the period after the one change of a committed closed-loop run
  (benchmarks/results/closed_loop/RUN, B's sacct and its store), as the agent judged it;
- **a week of a real cluster**: the bundled sample's first week on 32x8 under multifactor with
  drawn time limits, the jobs as the default config ran them (the simulator stands in for the
  cluster's sacct, so the twin error there is the simulator against itself and says nothing of
  the twin), with a change to small first at day 2 (its backlog then) judged over the
  week after it.

Each judge call is timed `--repeat` times in this process (the best is printed, with the median):

    PYTHONPATH=src .venv/bin/python benchmarks/judge_cost.py
    PYTHONPATH=src .venv/bin/python benchmarks/judge_cost.py --run w3-replay --repeat 1
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from closed_loop_explain import as_of  # noqa: E402

from autosched.cluster import ClusterSpec, parse_cluster  # noqa: E402
from autosched.live.history import LiveJobs, SeedHistory, combine, read_jobs, take_jobs  # noqa: E402
from autosched.live.judge import JITTERS, counterfactual  # noqa: E402
from autosched.live.twin import ClusterSetup, twin_jobs, twin_space  # noqa: E402
from autosched.policies import get_policy  # noqa: E402
from autosched.sim import Simulator  # noqa: E402
from autosched.trace import LoadReport, load_trace  # noqa: E402
from autosched.trace.limits import add_time_limits  # noqa: E402

RUNS = REPO / "benchmarks" / "results" / "closed_loop"
SAMPLE = REPO / "src" / "autosched" / "data" / "philly_2017-10-02_28d.csv.gz"
DAY = 86400.0
POLICY = "multifactor"
SMALL_FIRST = {"PriorityWeightJobSize": 100000, "PriorityFavorSmall": True, "PriorityWeightAge": 0,
               "PriorityWeightFairshare": 0, "PriorityWeightTRES.GRES/gpu": 0, "PriorityWeightTRES.CPU": 0}


@dataclass(frozen=True)
class Period:
    """One judged period: the judge's arguments, and what the agent recorded of it (if it did)."""

    name: str
    jobs: LiveJobs
    cluster: ClusterSpec
    old: dict[str, Any]
    new: dict[str, Any]
    change: float
    until: float
    now: float
    seed: int = 0
    recorded: dict[str, Any] | None = None  # the agent's stored outcome of this period


def test_bed(run: str) -> Period:
    """The period after the change of closed-loop run `run`, as its agent judged it: its history
    then (B's sacct as of the judging round and the seed file's jobs, as `update_history` keeps
    them), its configs as `Agent.twin_space` makes them whole, and its seed."""
    out = RUNS / run
    db = json.loads((out / "agent-store.json").read_text())["state.db"]
    if not db["outcomes"]:
        raise SystemExit(f"{out}: the agent judged no change in this run (pick one with a change, e.g. w2-scaled)")
    outcome = db["outcomes"][0]
    recorded = json.loads(outcome["outcome"])
    revs = {r["id"]: r for r in db["revisions"]}
    rev = revs[outcome["rev_id"]]
    parent = revs[rev["parent"]]  # a judged revision always has one: the config it replaced
    summary = next(json.loads(r["summary"]) for r in db["rounds"] if "setup" in json.loads(r["summary"]))
    settings = json.loads((out / "agent-settings.json").read_text())
    loop = settings["loop"]
    setup = ClusterSetup.from_dict(summary["setup"])
    fixed = settings["fixed"]
    space = twin_space(loop["policy"], fixed, setup)  # as the agent makes its configs whole
    old, new = (dict(space.full(json.loads(r["config"]))) for r in (parent, rev))
    now, kept_from = float(outcome["time"]), float(outcome["time"]) - 2 * loop["history"]
    live = as_of(read_jobs((out / "sacct-B.txt").read_text()), now)
    live = take_jobs(live, np.isnan(live.end) | (live.end >= kept_from))  # the cache's pruning
    jobs = combine(live, SeedHistory(out / "seed.sacct").jobs(kept_from, now))
    jobs, _ = twin_jobs(jobs, setup)
    return Period(f"test bed, {run}", jobs, setup.cluster_spec(), old, new,
                  float(recorded["period"]["start"]), float(recorded["period"]["end"]), now,
                  int(loop["seed"]), recorded)


def sample_week() -> Period:
    """The sample's week from day 2 on 32x8, the jobs as the default config ran them: a period of
    a real cluster's size for timing the judge (its twin error means nothing: no real cluster ran it)."""
    full, _ = load_trace(SAMPLE)
    trace, _ = add_time_limits(full.window(full.start, full.start + 10 * DAY), seed=0)
    cluster = parse_cluster("32x8")
    default = get_policy(POLICY).space.default()
    rec = Simulator(trace, cluster, get_policy(POLICY)(default)).run().records()
    origin = 1.7e9  # a unix clock for the judge (any origin: only differences matter)
    submit = trace.submit_time - trace.start + origin
    start, end = rec.first_start - trace.start + origin, rec.end - trace.start + origin
    change, until = origin + 2 * DAY, origin + 9 * DAY
    now = until
    seen = submit <= now
    n = int(seen.sum())
    finished = end[:n] <= now
    ids = np.array([str(k) for k in range(n)])
    jobs = LiveJobs(ids, submit[:n], np.where(start[:n] <= now, start[:n], np.nan),
                    np.where(finished, end[:n], np.nan), trace.num_gpus[:n].astype(np.int64),
                    trace.user[:n], trace.account[:n],
                    np.full(n, ""), trace.time_limit[:n], np.zeros(n, dtype=np.int64), finished,
                    np.where(finished, end[:n] - start[:n], np.maximum(now - start[:n], 0.0)),
                    LoadReport(source="simulated sample", format="slurm"))
    return Period("a week of the sample, 32x8", jobs, cluster, default, {**default, **SMALL_FIRST},
                  change, until, now)


def timed(p: Period, jitters: int, repeat: int) -> tuple[float, float, Any]:
    times, cf = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        cf = counterfactual(p.jobs, p.cluster, POLICY, p.old, p.new, p.change, p.until, p.now, p.seed, jitters)
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times), cf


def check_recorded(p: Period, cf: Any) -> None:
    """Stop when the period's real jobs are not those the agent judged: what really happened does
    not depend on the replay code, so a difference means the history was rebuilt wrong."""
    if p.recorded is None:
        return
    want = p.recorded["realized"]
    got = cf.realized
    if (got.jobs, got.finished) != (want["jobs"], want["finished"]) or not math.isclose(
            got.avg_jct, want["avg_jct"], rel_tol=1e-9):
        raise SystemExit(f"{p.name}: the rebuilt period has {got.jobs} jobs ({got.finished} finished, avg JCT "
                         f"{got.avg_jct:.3f} s); the agent judged {want['jobs']} ({want['finished']} finished, "
                         f"{want['avg_jct']:.3f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default="w2-scaled", help="the committed closed-loop run of the test bed's period")
    ap.add_argument("--repeat", type=int, default=3, help="timings of each judge call (best and median printed)")
    ap.add_argument("--skip-sample", action="store_true", help="the test bed's period only")
    args = ap.parse_args()
    periods = [test_bed(args.run)] + ([] if args.skip_sample else [sample_week()])
    print("| period | judged jobs | replays | best s | median s | gain: mean ± sd (range) over the replays |")
    print("|---|---|---|---|---|---|")
    for p in periods:
        for jitters in (0, JITTERS):
            best, med, cf = timed(p, jitters, args.repeat)
            check_recorded(p, cf)
            g = cf.gains("avg_jct")
            spread = (f"{np.mean(g):+.1%} ± {np.std(g, ddof=1):.1%} ({g.min():+.1%} to {g.max():+.1%})"
                      if len(g) > 1 else f"{g[0]:+.1%}")
            print(f"| {p.name} | {cf.realized.jobs} | {1 + jitters} | {best:.2f} | {med:.2f} | {spread} |")
    for p in periods:
        if p.recorded is not None:
            print(f"\n{p.name}: the agent recorded a counterfactual gain of "
                  f"{p.recorded['counterfactual_gain']:+.1%}; the gains above are replayed with this checkout's "
                  f"simulator, which may have changed since")


if __name__ == "__main__":
    main()
