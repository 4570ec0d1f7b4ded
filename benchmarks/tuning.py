"""How many simulations does each search method need to come within 2% of a strong reference?

    .venv/bin/python benchmarks/tuning.py --workload philly3d --budget 60 --seeds 5
    .venv/bin/python benchmarks/tuning.py --workload itp07 --budget 60 --seeds 5

Workloads (real traces from ../shared/traces, see PROVENANCE.md there):
  philly2d  the committed 2-day Philly slice (philly/slices/philly_2017-10-02_2d.csv: all VCs,
            [2017-10-02, 2017-10-04), duration <= 2 days), on a uniform cluster sized for ~80%
            offered load.
  philly3d  Philly, all VCs, jobs submitted in [2017-10-02, 2017-10-05), duration <= 2 days, on a
            uniform cluster sized for ~80% offered load.
  philly7d  the same over 7 days (the PROVENANCE slice rule); slower.
  itp07     Microsoft ITP cluster07, jobs submitted in days [14, 17) of the collection, sized for
            ~80% offered load.
Offered load = GPU-seconds of the jobs / (cluster GPUs x submission span).

Reference: the best of `--reference` (1,000) random configs of the policy, plus its default. Those
evaluations are cached (benchmarks/results/cache_<workload>.jsonl) and reused: the "random"
method replays them in a seeded random order (the default first, as the tuner does), so random
search costs no new simulations. TPE, GP and causal screening + TPE run the real Tuner.
For each method and seed the script records the best-so-far curve; the headline is the number of
simulations (trials; one workload each) until the best value is within 2% of the reference,
median over the seeds, and the final best at the budget.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
RESULTS = Path(__file__).resolve().parent / "results"
DAY = 86400.0
PHILLY_ORIGIN_TO_OCT2 = 28 * DAY  # the Philly loader counts from 2017-09-04 00:00


def workload(name: str, load: float):
    from autosched.cluster import ClusterSpec, fit_to_cluster
    from autosched.trace import load_trace

    if name == "philly2d":
        tr, _ = load_trace(SHARED / "philly" / "slices" / "philly_2017-10-02_2d.csv")
    elif name.startswith("philly"):
        days = 3 if name == "philly3d" else 7
        tr, _ = load_trace(SHARED / "philly" / "philly_jobs_sia.csv")
        tr = tr.window(PHILLY_ORIGIN_TO_OCT2, PHILLY_ORIGIN_TO_OCT2 + days * DAY)
        tr = tr.take(tr.duration <= 2 * DAY)
    elif name == "itp07":
        tr, _ = load_trace(SHARED / "microsoft-itp-elasticflow" / "cluster07.csv")
        tr = tr.window(14 * DAY, 17 * DAY)
    else:
        raise SystemExit(f"unknown workload {name}")
    tr = tr.shifted(-tr.start)
    span = tr.end - tr.start
    nodes = max(1, round(tr.gpu_seconds() / (load * 8 * span)))
    nodes = max(nodes, int(math.ceil(tr.num_gpus.max() / 8)))
    cluster = ClusterSpec.uniform_nodes(nodes, 8, source=f"{nodes}x8")
    tr, rep = fit_to_cluster(tr, cluster)
    offered = tr.gpu_seconds() / (cluster.gpus * span)
    return tr, cluster, offered


def reference(tuner, policy_cls, tr, n: int, cache: Path, seed: int = 12345) -> list[dict]:
    """Evaluate the default and `n` random configs, appending to (and reusing) the cache."""
    rows = [json.loads(line) for line in cache.read_text().splitlines()] if cache.exists() else []
    rng = random.Random(seed)
    configs = [policy_cls.space.default()] + [policy_cls.space.sample(rng) for _ in range(n)]
    t0 = time.perf_counter()
    with cache.open("a") as f:
        for i in range(len(rows), len(configs)):
            _, metrics = tuner.evaluate(policy_cls.name, configs[i], [tr])
            row = {"i": i, "config": configs[i], "metrics": metrics[0].to_dict()}
            f.write(json.dumps(row) + "\n")
            f.flush()
            rows.append(row)
            if i % 50 == 0:
                print(f"  reference {i}/{n}  {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    return rows[: n + 1]


def sims_to_reach(values: list[float], target: float) -> int | None:
    best = math.inf
    for k, v in enumerate(values, start=1):
        if v is not None and v < best:
            best = v
        if best <= target:
            return k
    return None


def best_curve(values: list[float | None]) -> list[float]:
    out, best = [], math.inf
    for v in values:
        if v is not None:
            best = min(best, v)
        out.append(best)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="philly3d", choices=["philly2d", "philly3d", "philly7d", "itp07"])
    ap.add_argument("--policy", default="tiresias")
    ap.add_argument("--load", type=float, default=0.9, help="target offered load")
    ap.add_argument("--objective", default="avg_jct", help="Metrics field to minimise")
    ap.add_argument("--reference", type=int, default=1000)
    ap.add_argument("--budget", type=int, default=60)
    ap.add_argument("--gp-budget", type=int, default=None, help="budget of the GP runs (default: --budget); "
                    "GP's model fit per trial is the slow part")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--methods", default="random,tpe,screen+tpe,gp")
    ap.add_argument("--tolerance", type=float, default=0.02)
    ap.add_argument("--merge", action="store_true", help="keep earlier runs of the methods not run now")
    args = ap.parse_args()

    from autosched.policies import get_policy
    from autosched.tune import Objective, SearchConfig, Tuner

    RESULTS.mkdir(exist_ok=True)
    tr, cluster, offered = workload(args.workload, args.load)
    print(f"{args.workload}: {len(tr):,} jobs, cluster {cluster.describe()}, offered load {offered:.2f}",
          file=sys.stderr)
    pol = get_policy(args.policy)
    obj = Objective(args.objective)
    if not obj.minimize:
        raise SystemExit("the benchmark assumes a metric to minimise")
    base = Tuner(args.policy, cluster, obj)
    tag = f"{args.workload}_load{args.load:g}_{args.policy}"
    cache = RESULTS / f"cache_{tag}.jsonl"  # all metrics, so one cache serves every objective
    t0 = time.perf_counter()
    rows = reference(base, pol, tr, args.reference, cache)
    ref_seconds = time.perf_counter() - t0
    for r in rows:
        r["value"] = r["metrics"][args.objective]
    ref = min(r["value"] for r in rows)
    default = rows[0]["value"]
    target = ref * (1 + args.tolerance)
    print(f"reference best {ref:,.0f} (default {default:,.0f}), target {target:,.0f}", file=sys.stderr)

    tag_obj = f"tuning_{tag}_{args.objective}.json"
    runs: dict[str, list[dict]] = {}
    if args.merge and (RESULTS / tag_obj).exists():  # keep the other methods' runs from before
        runs = json.loads((RESULTS / tag_obj).read_text())["runs"]
    for method in [m for m in args.methods.split(",") if m]:
        runs[method] = []
        for seed in range(args.seeds):
            t1 = time.perf_counter()
            if method == "random":
                order = list(range(1, len(rows)))
                random.Random(seed).shuffle(order)
                values = [default] + [rows[i]["value"] for i in order[: args.budget - 1]]
                extra = {}
            else:
                sampler = "gp" if method == "gp" else "tpe"
                budget = (args.gp_budget or args.budget) if method == "gp" else args.budget
                tuner = Tuner(args.policy, cluster, obj,
                              SearchConfig(budget=budget, seed=seed, sampler=sampler, screening=method.startswith("screen")))
                res = tuner.tune([tr])
                values = [t.value for t in sorted(res.trials, key=lambda t: t.number)]
                extra = {"frozen": res.screened_knobs, "searched": res.searched_knobs,
                         "graph": res.graph, "effects": res.effects,
                         "screening": res.screening.to_dict() if res.screening else None}
            k = sims_to_reach(values, target)
            run = {"seed": seed, "sims_to_target": k, "final_best": best_curve(values)[-1],
                   "seconds": time.perf_counter() - t1, "values": values, **extra}
            runs[method].append(run)
            print(f"  {method:11s} seed {seed}: within {args.tolerance:.0%} after {k} sims, "
                  f"final {run['final_best']:,.0f} ({run['seconds']:.0f}s)", file=sys.stderr, flush=True)

    summary = {}
    for method, rs in runs.items():
        ks = [r["sims_to_target"] if r["sims_to_target"] is not None else math.inf for r in rs]
        med = statistics.median(ks)
        summary[method] = {
            "median_sims_to_target": None if math.isinf(med) else med,
            "reached": sum(1 for k in ks if not math.isinf(k)),
            "median_final_best": statistics.median(r["final_best"] for r in rs),
            "median_final_gap": statistics.median(r["final_best"] / ref - 1 for r in rs),
        }
    out = {"workload": args.workload, "jobs": len(tr), "cluster": cluster.describe(), "offered_load": offered,
           "policy": args.policy, "objective": args.objective, "reference_configs": len(rows) - 1,
           "reference_best": ref, "default": default, "reference_seconds": ref_seconds,
           "budget": args.budget, "gp_budget": args.gp_budget or args.budget, "seeds": args.seeds, "tolerance": args.tolerance,
           "summary": summary, "runs": runs}
    path = RESULTS / tag_obj
    path.write_text(json.dumps(out, indent=1, default=float))
    print(f"\n{args.workload} ({len(tr):,} jobs, {cluster.describe()}, load {offered:.2f}); "
          f"{args.objective}: reference {ref:,.0f}, default {default:,.0f}")
    print(f"{'method':12s} {'median sims to 2%':>18s} {'reached':>8s} {'median final gap':>17s}")
    for method, s in summary.items():
        med = "never" if s["median_sims_to_target"] is None else f"{s['median_sims_to_target']:g}"
        print(f"{method:12s} {med:>18s} {s['reached']:>5d}/{args.seeds} {s['median_final_gap']:>16.2%}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
