"""Why the closed loop's predictions overshoot: the figures behind docs/closed-loop.md's "prediction
against reality", from the committed runs in benchmarks/results/closed_loop/ alone.

For each change the agent applied (w1, w2), in two steps:

1. **Predicted (sampled days) against the twin's counterfactual (real jobs).** The agent's round
   is rebuilt at its own clock (the store's `last_round`): B's sacct and the seed history as
   known then, the same observation, the same workload model, seeds and backlog. The running
   config and the applied one are scored on the tuner's samples, on the guardrail's fresh
   samples (the prediction), and on the real next day given the same backlog (the model's
   samples swapped for the jobs that came), counting every job and the day's new jobs only.
   Beside them: what the samples and the real day held (jobs, offered load, GPU mix, run times).
2. **The twin's counterfactual against reality (B vs A).** Each cluster's own jobs replayed by
   the twin (A under the baseline; B under its configs, changed when they were, and under the
   baseline throughout), the day after the change: how B and A compare in reality and in the
   twin, the twin's error on each cluster that day, the same comparison the day before the
   change (the configs were identical: the noise of a one-day comparison), and the backlog
   each cluster carried at the change.

And for every run (``--step 3``), how far a replay parts on differences no one controls: each
cluster's own jobs, and each change's counterfactual, replayed with every submit time moved later
by under half a second (below Slurm's one-second resolution).

    PYTHONPATH=src python benchmarks/closed_loop_explain.py            # w1 and w2, about 10 s
    PYTHONPATH=src python benchmarks/closed_loop_explain.py --run w2
    # step 1 with the model on trace time (agent init --time-scale), as if the run had used it
    PYTHONPATH=src python benchmarks/closed_loop_explain.py --step 1 --model-trace-time
    # 3. the twin's spread: every run replayed with submit times jittered by under 0.5 s
    PYTHONPATH=src python benchmarks/closed_loop_explain.py --step 3   # about 40 s
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import closed_loop as cl  # noqa: E402
import slurm_twin as tw  # noqa: E402

from autosched.adapt.config import VALIDATION_SEED_OFFSET, round_seed_of  # noqa: E402
from autosched.adapt.controller import round_workloads  # noqa: E402
from autosched.adapt.sources import concat  # noqa: E402
from autosched.cluster import fit_to_cluster  # noqa: E402
from autosched.live.history import LiveJobs, combine, job_trace, observation, read_jobs, take_jobs  # noqa: E402
from autosched.live.judge import JITTER  # noqa: E402
from autosched.live.settings import AgentSettings  # noqa: E402
from autosched.live.twin import ClusterSetup  # noqa: E402
from autosched.policies import get_policy  # noqa: E402
from autosched.sim import Simulator  # noqa: E402
from autosched.trace.table import Trace  # noqa: E402

# ----------------------------------------------------------------------------- step 1: the round


@dataclass(frozen=True)
class Round:
    """The round that applied a change, as its store recorded it."""

    now: float  # the round's clock (unix s)
    index: int  # rounds the controller had decided before it
    running: dict[str, Any]  # the whole configs it simulated
    applied: dict[str, Any]
    tuning_gains: list[float]  # the winner's gain on each tuning sample, from its trials
    predicted: float


def applying_round(store: dict[str, Any]) -> Round:
    """The round whose summary says `applied`, with its controller memory (the tuner's trials)."""
    db = store["state.db"]
    summaries = {r["seq"]: json.loads(r["summary"]) for r in db["rounds"]}
    mems = sorted(db["memory"], key=lambda m: m["seq"])
    k = next(i for i, m in enumerate(mems) if summaries[m["round_seq"]].get("action") == "applied")
    mem = json.loads(mems[k]["memory"])
    before = json.loads(mems[k - 1]["memory"])["rounds"] if k > 0 else 0
    rev = db["revisions"][-1]
    ev = json.loads(rev["evidence"])
    trials = [t for t in mem["prior"][-1] if t["state"] == "complete"]
    running = next(t for t in trials if t["number"] == 0)  # the warm start: the running config
    best = min(trials, key=lambda t: t["value"])
    r = [m["avg_jct"] for m in running["metrics"]]
    gains = [(a - m["avg_jct"]) / a for a, m in zip(r, best["metrics"])]
    applied = {**running["config"], **json.loads(rev["config"])}
    return Round(float(ev["history_origin"]) + float(mem["last_round"]), before,
                 dict(running["config"]), applied, gains, float(ev["predicted_gain"]))


def as_of(jobs: LiveJobs, now: float) -> LiveJobs:
    """`jobs` as sacct showed them at `now`: submitted by then, starts and ends after it unknown."""
    j = take_jobs(jobs, jobs.submit <= now)
    start = np.where(j.start <= now, j.start, np.nan)
    end = np.where(j.end <= now, j.end, np.nan)
    finished = j.finished & ~np.isnan(end)
    return LiveJobs(j.job_id, j.submit, start, end, j.gpus, j.user, j.account, j.partition,
                    j.time_limit, j.cpus, finished, np.where(finished, j.duration, 0.0), j.report)


def settings(plan: cl.Plan) -> AgentSettings:
    """The agent's settings as `closed_loop.agent_init` sets them (the loop's fields only matter)."""
    return AgentSettings(connector={"kind": "fake", "directory": "/nonexistent"}, mode="auto",
                         period=plan.day, history=plan.history_days * plan.day,
                         min_jobs=plan.min_jobs, budget=plan.budget, samples=plan.samples,
                         validation_samples=plan.validation_samples, model=plan.model,
                         time_scale=plan.scale if plan.model_trace_time else 1.0,
                         fixed={"placement": cl.PLACEMENT})


def gain(old: float, new: float) -> float:
    """(old - new) / old, NaN when a workload has no new job (the judge's `gain` says 0 there:
    here an empty sample must drop out of the means, not count as no change)."""
    return (old - new) / old


@dataclass(frozen=True)
class Mix:
    """What a workload's new jobs (not its backlog) hold."""

    jobs: int
    load: float  # GPU x run time over the cluster's GPUs x the period
    gpu_share: dict[int, float]  # share of GPU-seconds by job size
    mean_run: float
    median_run: float

    def line(self) -> str:
        mix = " ".join(f"{g}:{s:.0%}" for g, s in sorted(self.gpu_share.items()))
        return (f"{self.jobs:5d} jobs  load {self.load:4.2f}  run mean {self.mean_run:6.1f} s  "
                f"median {self.median_run:5.1f} s  GPU-s by size {mix}")


def mix(trace: Trace, new: np.ndarray, period: float) -> Mix:
    g, d = trace.num_gpus[new], trace.duration[new]
    work = g * d
    share = {int(s): float(work[g == s].sum() / work.sum()) for s in np.unique(g)}
    if not len(d):
        return Mix(0, 0.0, {}, float("nan"), float("nan"))
    return Mix(int(new.sum()), float(work.sum() / (cl.GPUS * period)), share, float(d.mean()),
               float(np.median(d)))


def jct(workload: Trace, spec: Any, config: dict[str, Any], new: np.ndarray) -> tuple[float, float]:
    """Average JCT of every job of `workload` and of its new jobs only, under `config`."""
    rec = Simulator(workload, spec, get_policy("multifactor")(config)).run().records()
    return float(rec.jct.mean()), float(rec.jct[new].mean()) if new.any() else float("nan")


def step1(outdir: Path, trace_time: bool = False) -> None:
    """Step 1 for the run in `outdir`; `trace_time`: its agent's model on trace time whatever the
    run used (the same round, the samples the model would have given on the trace's clock)."""
    info = json.loads((outdir / "run.json").read_text())
    plan = cl.Plan(**info["plan"])
    plan = replace(plan, model_trace_time=plan.model_trace_time or trace_time)
    if plan.model != "stat":
        print(f"\n== {outdir.name}: the agent ran the `{plan.model}` model; step 1 rebuilds `stat` rounds only")
        return
    rnd = applying_round(json.loads((outdir / "agent-store.json").read_text()))
    store = json.loads((outdir / "agent-store.json").read_text())["state.db"]
    summary = next(json.loads(r["summary"]) for r in store["rounds"]
                   if json.loads(r["summary"]).get("action") == "applied")
    spec = ClusterSetup.from_dict(summary["setup"]).cluster_spec()
    s = settings(plan)
    live = read_jobs((outdir / "sacct-B.txt").read_text())
    everything = combine(live, read_jobs((outdir / "seed.sacct").read_text()))
    known = as_of(everything, rnd.now)
    obs, origin = observation(known, rnd.now, s.history, seed=s.seed, backlog_history=s.backlog_history)
    source = s.model_source()
    seed = round_seed_of(s.seed, rnd.index)
    tuning = round_workloads(source, obs, s.period, spec, seed, carry_backlog=s.carry_backlog)
    fresh = round_workloads(source, obs, s.period, spec, seed + VALIDATION_SEED_OFFSET,
                            carry_backlog=s.carry_backlog, fresh=True)
    # the real next day: the jobs B received in [now, now + period), their real run times
    nxt = np.flatnonzero((everything.submit >= rnd.now) & (everything.submit < rnd.now + s.period))
    day = job_trace(everything, nxt, everything.submit[nxt] - origin, np.maximum(everything.duration[nxt], 1.0),
                    everything.time_limit[nxt])
    real, _ = fit_to_cluster(concat(obs.backlog, day), spec)
    # the same with the backlog's true remaining run times in place of the imputed ones
    ix = {j: k for k, j in enumerate(everything.job_id.tolist())}
    back = np.array([ix[j] for j in obs.backlog.job_id.tolist()])
    left = everything.end[back] - np.maximum(np.nan_to_num(everything.start[back], nan=rnd.now), rnd.now)
    true_back = obs.backlog.replace(duration=np.maximum(left, 1.0))
    real_true, _ = fit_to_cluster(concat(true_back, day), spec)
    nb = len(obs.backlog)
    print(f"\n== {outdir.name}: step 1, the round at {(rnd.now - info['t0']) / plan.day:.2f} days "
          f"(round index {rnd.index}, seed {seed}); backlog {nb} jobs "
          f"({int(np.isnan(known.start[~known.finished]).sum())} queued), "
          f"{float((obs.backlog.num_gpus * obs.backlog.duration).sum()) / cl.GPUS:.0f} s of the "
          f"cluster's work left in it (imputed)")
    c = s.time_scale  # the model on the jobs' clock (ModelSource): its burst gap is in trace s then
    model = source.fit(obs)
    sizes = np.diff(model.ptr)
    expected = float(model.expected_batches(obs.now, s.period * c)[2].sum())
    print(f"the workload model ({s.model}, time scale {c:g}) on {len(obs.history)} jobs of the last {s.history:g} s: "
          f"{len(sizes)} batches (jobs of one VC at most burst_gap "
          f"{model.params['burst_gap']:g} s apart; the largest {int(sizes.max())} jobs, median "
          f"{float(np.median(sizes)):g}); {expected:.2f} batches expected in the period")
    print(f"what the workloads hold besides the backlog (a period is {s.period:g} s):")

    def is_new(w: Trace) -> np.ndarray:
        return np.arange(len(w)) >= nb  # concat puts the backlog first; fit_to_cluster keeps order

    rows = []
    sets = (("tuning", tuning), ("fresh", fresh), ("real day", [real]),
            ("real day, true backlog run times", [real_true]))
    for label, ws in sets:
        for i, w in enumerate(ws):
            new = is_new(w)
            if not label.startswith("real day, true"):  # the same jobs as "real day"
                print(f"  {label[:8]:8s} {i}: {mix(w, new, s.period).line()}")
            old = jct(w, spec, rnd.running, new)
            got = jct(w, spec, rnd.applied, new)
            rows.append((label, gain(old[0], got[0]), gain(old[1], got[1]), old[0], got[0]))
    print("the applied config against the running one (average JCT gain; every job / new jobs only):")
    print(f"  recorded: tuning samples {np.mean(rnd.tuning_gains):+.1%} "
          f"({', '.join(f'{g:+.1%}' for g in rnd.tuning_gains)}: the tuner's trials of the best "
          f"config), predicted on the fresh samples {rnd.predicted:+.1%}")
    for label, _ in sets:
        got = [r for r in rows if r[0] == label]
        new_only = np.array([r[2] for r in got])
        print(f"  on {label:32s}: every job {np.mean([r[1] for r in got]):+.1%}  new jobs only "
              f"{cl.pct(float(np.nanmean(new_only)) if np.isfinite(new_only).any() else None)}  (avg JCT {np.mean([r[3] for r in got]):.1f} -> "
              f"{np.mean([r[4] for r in got]):.1f} s)")


# ----------------------------------------------------------------------------- step 2: B against A


def step2(outdir: Path) -> None:
    info = json.loads((outdir / "run.json").read_text())
    plan = cl.Plan(**info["plan"])
    base, t0 = info["baseline"], float(info["t0"])
    status = json.loads((outdir / "agent-status.json").read_text())
    changes = cl.applied_changes(status, t0)
    full = cl.configs_in_force(status, base)
    names = {j.name for j in cl.read_jobs(outdir / "jobs.csv")}
    runs, specs, times = {}, {}, {}
    for label in "AB":
        runs[label] = tw.read_run(outdir / f"sacct-{label}.txt", cl.TAG,
                                  cl.load_times(outdir / f"times-{label}.json"))
        specs[label] = tw.twin_spec(runs[label], base, outdir / "assoc.txt")
        times[label] = cl.realized(cl.read_sacct(outdir / f"sacct-{label}.txt"), names)[1]
    a, b = runs["A"], runs["B"]
    moves = [(t0 + c.at - b.day0, full[c.revision]) for c in changes]
    sims = {"A": tw.simulate(a, specs["A"], base, cl.PLACEMENT).records(),
            "B": tw.simulate(b, specs["B"], base, cl.PLACEMENT, moves).records(),
            "B at the baseline": tw.simulate(b, specs["B"], base, cl.PLACEMENT).records()}
    print(f"\n== {outdir.name}: step 2, B against A (avg JCT of the jobs submitted in the day; "
          "positive = B better)")
    for c in changes:
        t = t0 + c.at
        for what, lo in (("the day before the change", t - plan.day), ("the day after the change", t)):
            pick = {lab: (r.submit + r.day0 >= lo) & (r.submit + r.day0 < lo + plan.day) for lab, r in runs.items()}
            real_a = float(np.mean((a.end - a.submit)[pick["A"]]))
            real_b = float(np.mean((b.end - b.submit)[pick["B"]]))
            sim = {k: float(v.jct[pick["A" if k == "A" else "B"]].mean()) for k, v in sims.items()}
            print(f"  {what} ({int(pick['B'].sum())} jobs on B, {int(pick['A'].sum())} on A):")
            print(f"    reality  A {real_a:6.1f}  B {real_b:6.1f} s   B vs A {gain(real_a, real_b):+.1%} "
                  f"(sacct's seconds: {cl.pct(cl.period_gain(times['A'], times['B'], lo, plan.day))})")
            print(f"    twin     A {sim['A']:6.1f}  B {sim['B']:6.1f} s   B vs A {gain(sim['A'], sim['B']):+.1%};"
                  f"  B at the baseline {sim['B at the baseline']:6.1f} s: the change's counterfactual "
                  f"{gain(sim['B at the baseline'], sim['B']):+.1%}, B at the baseline vs A "
                  f"{gain(sim['A'], sim['B at the baseline']):+.1%}")
            print(f"    twin error (sim / real - 1): A {sim['A'] / real_a - 1:+.1%}, B {sim['B'] / real_b - 1:+.1%}")
        for lab, r in runs.items():
            at = t - r.day0
            queued = (r.submit < at) & (r.start >= at)
            running = (r.start < at) & (r.end > at)
            left = float((r.trace.num_gpus * (r.end - np.maximum(r.start, at)))[queued | running].sum()) / cl.GPUS
            rec = sims[lab]
            sq = (rec.submit < at) & (rec.first_start >= at)
            print(f"  backlog on {lab} at the change: {int(queued.sum())} queued "
                  f"({int(r.trace.num_gpus[queued].sum())} GPUs asked), {int(running.sum())} running, "
                  f"{left:.0f} s of the whole cluster's work left; the twin: {int(sq.sum())} queued")


# -------------------------------------------------------------------- step 3: the twin's spread

JITTERS = 5


def jittered(real: tw.RealRun, rng: np.random.Generator) -> list[tw.RealRun]:
    """`real` on its own submit times, then `JITTERS` copies with each submit time moved later
    by U(0, `JITTER`) s: differences no one could control."""
    tr = real.trace
    return [real] + [replace(real, trace=tr.replace(submit_time=tr.submit_time + rng.uniform(0, JITTER, len(tr))))
                     for _ in range(JITTERS)]


def twin_spread(real: tw.RealRun, spec: Any, base: dict[str, Any], moves: list[tuple[float, dict]],
                rng: np.random.Generator) -> list[float]:
    """The twin's average wait of `real`'s jobs on each of its `jittered` copies."""
    out = []
    for copy in jittered(real, rng):
        rec = tw.simulate(copy, spec, base, cl.PLACEMENT, moves).records()
        out.append(float((rec.first_start - rec.submit).mean()))
    return out


def step3(outdir: Path) -> list[str]:
    """Print a row per cluster of the run in `outdir`; return the rows of its changes' spreads."""
    info = json.loads((outdir / "run.json").read_text())
    base = info["baseline"]
    status_path = outdir / "agent-status.json"
    status = json.loads(status_path.read_text()) if status_path.exists() else {}
    changes, full = cl.applied_changes(status, float(info["t0"])), cl.configs_in_force(status, base)
    for label in "AB":
        real = tw.read_run(outdir / f"sacct-{label}.txt", cl.TAG, cl.load_times(outdir / f"times-{label}.json"))
        spec = tw.twin_spec(real, base, outdir / "assoc.txt")
        moves = [] if label == "A" else [(float(info["t0"]) + c.at - real.day0, full[c.revision]) for c in changes]
        w = twin_spread(real, spec, base, moves, np.random.default_rng(1))
        jit = np.array(w[1:])
        rw = float((real.start - real.submit).mean())
        print(f"| {outdir.name} | {label} | {rw:.1f} | {w[0]:.1f} | {jit.mean():.1f} ± {jit.std(ddof=1):.1f} | "
              f"{jit.min():.1f}-{jit.max():.1f} | {'yes' if jit.min() <= rw <= jit.max() else 'no'} |", flush=True)
        if label == "B":
            return change_spreads(outdir.name, real, spec, base, moves, info["plan"])
    return []


def change_spreads(run: str, real: tw.RealRun, spec: Any, base: dict[str, Any],
                   moves: list[tuple[float, dict]], plan: dict[str, Any]) -> list[str]:
    """Rows of the twin's gain of each change (`closed_loop.counterfactual`) on the `jittered`
    copies of B's jobs: whether the verdict on a change survives the jitter."""
    rows = []
    for k in range(len(moves)):
        copies = jittered(real, np.random.default_rng(2))
        g = [cl.counterfactual(c, spec, base, moves, k, cl.Plan(**plan).day) for c in copies]
        if g[0] is None:
            continue
        jit = np.array(g[1:], dtype=float)
        rows.append(f"| {run} | {k + 2} | {g[0]:+.1%} | {jit.mean():+.1%} ± {jit.std(ddof=1):.1%} | "
                    f"{jit.min():+.1%} to {jit.max():+.1%} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", action="append", help="a run of --out with an agent (default: w1 and w2)")
    ap.add_argument("--out", type=Path, default=cl.RESULTS)
    ap.add_argument("--step", type=int, choices=(1, 2, 3), help="only this step (3: the twin's spread "
                    "under submit jitter, on every run of --out unless --run is given)")
    ap.add_argument("--model-trace-time", action="store_true", help="step 1 with the agent's model on trace "
                    "time (agent init --time-scale), whatever the run used")
    args = ap.parse_args()
    if args.step == 3:
        print(f"The twin's average wait (s) on each cluster's own jobs: on their recorded submit times, and over "
              f"{JITTERS} copies with each submit time moved later by U(0, {JITTER:g}) s (mean ± sd, range)\n")
        print("| run | cluster | real | twin | twin, jittered | range | real in range |\n|---|---|---|---|---|---|---|")
        runs = args.run or sorted(p.name for p in args.out.iterdir() if (p / "run.json").exists())
        changes = [row for name in runs for row in step3(args.out / name)]
        print("\nThe twin's gain of each change the agent applied (B's jobs submitted in the day after it, with the "
              "change against without), on the same jittered copies\n")
        print("| run | revision | twin's gain | jittered | range |\n|---|---|---|---|---|")
        print("\n".join(changes))
        return
    for name in args.run or ["w1", "w2"]:
        if args.step in (None, 1):
            step1(args.out / name, args.model_trace_time)
        if args.step in (None, 2):
            step2(args.out / name)


if __name__ == "__main__":
    main()
