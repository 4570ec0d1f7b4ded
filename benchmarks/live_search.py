"""Does the search find what Slurm's live knobs can give? multifactor's live knob space (the knobs
the agent may write, the others pinned at Slurm's defaults), on traces with time limits.

    nice -n 5 .venv/bin/python benchmarks/live_search.py --trace itp02 --workers 2
    nice -n 5 .venv/bin/python benchmarks/live_search.py --table      # all traces, from the results

Traces (real, from ../shared/traces; time limits drawn by `autosched trace limits`, seed 0):
  philly2d  the 2-day Philly slice (philly/slices/philly_2017-10-02_2d.csv, 1,682 jobs) on 16x8:
            offered load 2.0, the setting the live-knob measurements were first made on.
  itp02     ITP cluster02, jobs submitted in days [7, 11) of the collection (440 jobs), on 11x8,
            the size docs/results.md uses for cluster02: offered load 0.93.
  itp06     ITP cluster06, days [28, 35) (227 jobs), on 15x8 (docs/results.md): offered load 0.96.
Offered load = GPU-seconds of the jobs / (cluster GPUs x submission span).

For each trace: the default config and the space's archetypes (age only, small first, GPU first,
fair-share heavy); the reference, the best of `--reference` (1,000) random configs of the live
space (each knob drawn on its own within its searched range, `ConfigSpace.sample`); then the
Tuner over the live space (`SearchConfig(subspace=live_subspace("multifactor"))`, TPE, no causal
screening, as `autosched run --live-knobs` searches) with `--budget` (40) trials for seeds
0..`--seeds`-1. The target: within the budget, at least as good as the best archetype and within
2% of the reference. The reference's simulations are stored in
benchmarks/results/live_search_<trace>.json with the searches' trial values, so `--table`
recomputes the table without simulating. `--methods structured,plain` also runs the same Tuner
over the same knobs searched knob by knob (no direction, archetypes or probes), for comparison.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (imported as a module by the tests too)
from tuning import best_curve, sims_to_reach  # noqa: E402  benchmarks/tuning.py: best-so-far curves

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
RESULTS = Path(__file__).resolve().parent / "results"
DAY = 86400.0
TRACES = {  # name: (file, first day, last day (exclusive) or None for the whole file, cluster)
    "philly2d": ("philly/slices/philly_2017-10-02_2d.csv", None, None, "16x8"),
    "itp02": ("microsoft-itp-elasticflow/cluster02.csv", 7, 11, "11x8"),
    "itp06": ("microsoft-itp-elasticflow/cluster06.csv", 28, 35, "15x8"),
}
TOLERANCE = 0.02
METHODS = ("structured", "plain")


def workload(name: str):
    """The trace (shifted to start at 0, fitted to the cluster, limits drawn with seed 0), the
    cluster and the offered load."""
    from autosched.cluster import fit_to_cluster, parse_cluster
    from autosched.trace import load_trace
    from autosched.trace.limits import add_time_limits

    path, first, last, size = TRACES[name]
    tr, _ = load_trace(SHARED / path)
    if first is not None:
        tr = tr.window(tr.start + first * DAY, tr.start + last * DAY)
    tr = tr.shifted(-tr.start)
    cluster = parse_cluster(size)
    tr, _ = fit_to_cluster(tr, cluster)
    tr, _ = add_time_limits(tr, seed=0)
    return tr, cluster, tr.gpu_seconds() / (cluster.gpus * (tr.end - tr.start))


def live_space():
    from autosched.export.live import live_subspace
    from autosched.policies import get_policy

    sub = live_subspace("multifactor")
    return sub, get_policy("multifactor").space.restrict(sub)


_STATE: dict = {}


def _init(name: str) -> None:
    _STATE["workload"] = workload(name)


def _simulate(config: dict) -> float:
    from autosched.policies import get_policy
    from autosched.sim import simulate

    tr, cluster, _ = _STATE["workload"]
    return float(simulate(tr, cluster, get_policy("multifactor")(config)).metrics.avg_jct)


def evaluate_all(name: str, configs: list[dict], workers: int) -> list[float]:
    if workers <= 1:
        _init(name)
        return [_simulate(c) for c in configs]
    with ProcessPoolExecutor(workers, initializer=_init, initargs=(name,)) as pool:
        return list(pool.map(_simulate, configs, chunksize=4))


def reference(name: str, n: int, workers: int, stored: dict) -> list[dict]:
    """The default, the archetypes and `n` random live configs, each with its avg JCT; reuses
    (and extends) what `stored` holds."""
    _, space = live_space()
    rng = random.Random(12345)
    configs = {"default": space.default(), **{k: space.validate({**space.default(), **v})
                                               for k, v in space.archetypes.items()}}
    rows = [{"label": k, "config": c} for k, c in configs.items()]
    rows += [{"label": f"random {i}", "config": space.sample(rng)} for i in range(n)]
    known = {json.dumps(r["config"], sort_keys=True): r["value"] for r in stored.get("reference", [])}
    todo = [r for r in rows if json.dumps(r["config"], sort_keys=True) not in known]
    t0 = time.perf_counter()
    for start in range(0, len(todo), 50):  # in chunks, stored after each: a killed run resumes
        chunk = todo[start:start + 50]
        for r, v in zip(chunk, evaluate_all(name, [r["config"] for r in chunk], workers)):
            known[json.dumps(r["config"], sort_keys=True)] = v
        stored["reference"] = [{**r, "value": known[json.dumps(r["config"], sort_keys=True)]}
                               for r in rows if json.dumps(r["config"], sort_keys=True) in known]
        save(name, stored)
        print(f"  reference {start + len(chunk)}/{len(todo)} new, {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)
    return [{**r, "value": known[json.dumps(r["config"], sort_keys=True)]} for r in rows]


def policy(method: str):
    """multifactor as `autosched run --live-knobs` searches it ("structured": its weights by
    direction and scale, its archetypes first, its bf_* knobs probed), or ("plain") the same
    knobs, ranges and subspace searched knob by knob: a copy of the policy whose space declares
    nothing else (benchmark only)."""
    from autosched.policies import get_policy
    from autosched.space import ConfigSpace

    cls = get_policy("multifactor")
    if method == "structured":
        return cls
    return type("PlainMultifactor", (cls,), {"space": ConfigSpace(cls.space.knobs)})


def search(name: str, method: str, budget: int, seed: int) -> dict:
    """One search of the live space with TPE, no causal screening (as `run` searches)."""
    from autosched.tune import ExecutionConfig, Objective, SearchConfig, Tuner

    tr, cluster, _ = workload(name)
    sub, _ = live_space()
    t0 = time.perf_counter()
    tuner = Tuner(policy(method), cluster, Objective("avg_jct"),
                  SearchConfig(budget=budget, seed=seed, screening=False, subspace=sub), ExecutionConfig(workers=1))
    res = tuner.tune([tr])
    trials = sorted(res.trials, key=lambda t: t.number)
    return {"seed": seed, "values": [t.value for t in trials], "seconds": time.perf_counter() - t0,
            "frozen": res.screened_knobs, "effects": res.effects,
            "best_config": res.best_config}


def path_of(name: str) -> Path:
    return RESULTS / f"live_search_{name}.json"


def load(name: str) -> dict:
    p = path_of(name)
    return json.loads(p.read_text()) if p.exists() else {}


def save(name: str, stored: dict) -> None:
    RESULTS.mkdir(exist_ok=True)
    tmp = path_of(name).with_suffix(".tmp")
    tmp.write_text(json.dumps(stored, indent=0, default=float))
    tmp.replace(path_of(name))


def summary(name: str, stored: dict, method: str = "structured") -> dict | None:
    rows = stored.get("reference", [])
    runs = stored.get("runs", {}).get(method, [])
    if not rows or not runs:
        return None
    by_label = {r["label"]: r["value"] for r in rows}
    default = by_label["default"]
    archetypes = {k: v for k, v in by_label.items() if k != "default" and not k.startswith("random")}
    best_arch = min(archetypes, key=archetypes.__getitem__)
    randoms = [r["value"] for r in rows if r["label"].startswith("random")]
    ref = min(randoms)
    target = min(archetypes[best_arch], ref * (1 + TOLERANCE))
    finals = [best_curve(r["values"])[-1] for r in runs]
    reach = [sims_to_reach(r["values"], target) for r in runs]
    rel = [f / default - 1 for f in finals]
    return {"trace": name, "method": method, "jobs": stored["jobs"], "cluster": stored["cluster"], "load": stored["load"],
            "default": default, "archetypes": archetypes, "best_archetype": best_arch,
            "random": len(randoms), "random_best": ref, "random_median": statistics.median(randoms),
            "target": target, "seeds": [r["seed"] for r in runs], "budget": stored["budget"],
            "final_vs_default_mean": statistics.mean(rel), "final_vs_default_sd": statistics.stdev(rel) if len(rel) > 1 else 0.0,
            "final_vs_random_best": [f / ref - 1 for f in finals], "trials_to_target": reach,
            "met": sum(k is not None for k in reach), "frozen": [r["frozen"] for r in runs],
            "seconds": [r["seconds"] for r in runs]}


def _pct(x: float, places: int = 1) -> str:
    """A signed percentage as the docs print it (a true minus sign)."""
    return f"{x:+.{places}%}".replace("-", "\u2212")


def table_rows(names: list[str]) -> list[str]:
    """The rows of docs/tuning.md's table ("Searching multifactor's live knobs"), from the
    stored results: a trace's first row with its workload, one more row per other method."""
    out = []
    for name in names:
        stored = load(name)
        first = True
        for method in METHODS:
            s = summary(name, stored, method)
            if s is None:
                continue
            d = s["default"]
            fin = f"{_pct(s['final_vs_default_mean'])} ± {s['final_vs_default_sd']:.1%} ({len(s['seeds'])} seeds)"
            met = ", ".join("\u2013" if k is None else str(k) for k in s["trials_to_target"])
            cells = [fin, _pct(statistics.mean(s["final_vs_random_best"])), f"{s['met']}/{len(s['seeds'])} ({met})"]
            if first:
                arch = s["best_archetype"].replace(" (FIFO)", "")
                head = [name, f"{s['jobs']:,}", s["cluster"].split(" ", 1)[0], f"{s['load']:.2f}", f"{d:,.0f} s",
                        f"{arch} {_pct(s['archetypes'][s['best_archetype']] / d - 1)}",
                        f"{_pct(s['random_median'] / d - 1)} / {_pct(s['random_best'] / d - 1)}"]
            else:
                head = [name, *[""] * 6]  # the workload's cells once per trace
            out.append(("| " + " | ".join([*head, method, *cells]) + " |").replace("|  ", "| "))
            first = False
    return out


def table_head(names: list[str]) -> list[str]:
    """The table's header lines, with the number of random configs the stored references hold."""
    counts = {len([r for r in load(n).get("reference", []) if r["label"].startswith("random")]) for n in names}
    if len(counts) != 1:
        raise SystemExit(f"the stored references hold different numbers of random configs: {sorted(counts)}")
    return ["| trace | jobs | cluster | load | default avg JCT | best archetype | random: median / best of "
            f"{counts.pop():,} | search | final vs default (mean ± sd) | vs best random | target met (trials it took) |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]


def table(names: list[str]) -> None:
    for line in [*table_head(names), *table_rows(names)]:
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", action="append", choices=list(TRACES), help="trace(s) to run (repeatable)")
    ap.add_argument("--reference", type=int, default=1000, help="random live configs of the reference")
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=1, help="processes for the reference's simulations")
    ap.add_argument("--methods", default="structured", help=f"searches to run: some of {','.join(METHODS)}")
    ap.add_argument("--table", action="store_true", help="print the table from stored results only")
    args = ap.parse_args()
    names = args.trace or list(TRACES)
    if not args.table:
        for name in names:
            tr, cluster, offered = workload(name)
            stored = load(name)
            stored.update({"trace": name, "jobs": len(tr), "cluster": cluster.describe(), "load": offered})
            print(f"{name}: {len(tr):,} jobs on {cluster.describe()}, offered load {offered:.2f}", file=sys.stderr)
            reference(name, args.reference, args.workers, stored)
            stored["budget"] = args.budget
            runs = stored["runs"] = stored.get("runs") or {}
            for method in [m for m in args.methods.split(",") if m] if args.seeds else []:
                runs[method] = []
                for seed in range(args.seeds):
                    run = search(name, method, args.budget, seed)
                    runs[method].append(run)
                    save(name, stored)
                    print(f"  {method} seed {seed}: best {min(v for v in run['values'] if v is not None):,.0f} "
                          f"({run['seconds']:.0f} s)", file=sys.stderr, flush=True)
    table(names)


if __name__ == "__main__":
    main()
