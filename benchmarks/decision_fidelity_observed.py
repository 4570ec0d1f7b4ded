"""Decision fidelity on the histories the controller of `autosched run` actually observes.

`autosched workload evaluate` (docs/workload.md, "Decision fidelity") fits each model on the TRUE
history. The adaptive loop fits it on what it observes: at each decision time t of the replayed
span (`autosched.adapt.experiment.boundaries`, as `autosched run` decides), a simulator running
the policy's default config up to t, read with `observe` (history 7 days, unfinished jobs'
durations imputed), and every workload it tunes on prefixed with the jobs the cluster carries
over (``obs.backlog``). This script builds exactly those workloads with the controller's own
code (`autosched.adapt.controller.round_workloads`, round seed as the controller's i-th round):

* ``replay``: `ReplaySource`, the observed last 7 days (what ``last_period`` tunes on);
* ``stat``, ``hybrid``: `ModelSource(model, samples)` (what ``autosched`` tunes on);
* the REAL next period: `FutureSource(trace)` with the same backlog (what ``oracle_period`` tunes on).

A panel of Tiresias configs (its default + ``--panel`` drawn with ``--seed``,
`autosched.workload.evaluate.panel_configs`) is simulated on each workload (avg JCT). Per model
and origin: Spearman's rank correlation between the mean over the model's samples and the real
value, and the regret on the real period of the config with the best mean (the ``pooled`` rule of
benchmarks/workload_eval.py). One process, serial simulations (it never takes both cores).

    PYTHONPATH=src python benchmarks/decision_fidelity_observed.py                  # the six runs
    PYTHONPATH=src python benchmarks/decision_fidelity_observed.py --traces sample --panel 10
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

from autosched.adapt.controller import round_seed_of, round_workloads
from autosched.adapt.experiment import DAY, Settings, boundaries
from autosched.adapt.observe import observe
from autosched.adapt.sources import FutureSource, ModelSource, ReplaySource
from autosched.cli.common import load_inputs
from autosched.data import sample_path
from autosched.policies.tiresias import Tiresias
from autosched.sim import Simulator
from autosched.workload.evaluate import _objective, _regret, _spearman, panel_configs

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
ITP = TRACES / "microsoft-itp-elasticflow"
# name -> (trace, cluster, skip days, span days or None: the rest): docs/results.md's decision runs.
RUNS: dict[str, tuple[Path | None, str, float, float | None]] = {
    "sample": (None, "32x8", 0, None),
    "philly": (TRACES / "philly" / "philly_jobs_sia.csv", "72x8", 28, 21),
    "cluster04": (ITP / "cluster04.csv", "88x8", 0, 21),
    "cluster07": (ITP / "cluster07.csv", "40x8", 0, 21),
    "cluster02": (ITP / "cluster02.csv", "11x8", 0, 21),
    "cluster06": (ITP / "cluster06.csv", "15x8", 0, 21),
}
MODELS = ("stat", "hybrid")


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def panel_scores(workloads: list, cluster, configs: list) -> np.ndarray:
    """avg JCT of each panel config (columns) on each workload (rows), serially."""
    out = np.empty((len(workloads), len(configs)))
    for i, w in enumerate(workloads):
        for j, cfg in enumerate(configs):
            out[i, j] = _objective(w, cluster, Tiresias(cfg), "avg_jct")
    return out


def pooled(scores: np.ndarray, real: np.ndarray) -> tuple[float, float]:
    """Spearman between the mean over a source's workloads and the real values, and the real
    regret of the config with the best mean."""
    mean = scores.mean(axis=0)
    return _spearman(mean, real), _regret(real, int(np.argmin(mean)))


def measure(name: str, panel: int, samples: int, seed: int) -> list[dict]:
    path, spec, skip, span = RUNS[name]
    tr, cl, _ = load_inputs(path if path is not None else sample_path(), spec, quiet=True)
    length = span * DAY if span is not None else float("inf")
    tr = tr.window(tr.start + skip * DAY, tr.start + skip * DAY + length)  # as `autosched run` cuts it
    st = Settings(seed=seed)
    bounds = boundaries(tr, st.period)
    configs = panel_configs(Tiresias, panel, seed)
    sim = Simulator(tr, cl, Tiresias(Tiresias.space.default()))
    sources = {"replay": ReplaySource(), **{m: ModelSource(m, samples) for m in MODELS}}
    rows = []
    for i, t in enumerate(bounds[1:-1]):
        t0 = time.perf_counter()
        sim.run(until=t)
        obs = observe(sim, t, max(bounds[0], t - st.history), seed=seed)
        round_seed = round_seed_of(seed, i)  # the controller's i-th round (no drift rounds)
        real_w = round_workloads(FutureSource(tr), obs, st.period, cl, round_seed)
        if not real_w:
            continue
        real = panel_scores(real_w, cl, configs)[0]
        row = dict(trace=name, cluster=cl.describe().split(" ")[0], day=(t - bounds[0]) / DAY,
                   jobs=len(real_w[0]) - len(obs.backlog), backlog=len(obs.backlog),
                   default_regret=_regret(real, 0))
        for sname, src in sources.items():
            wl = round_workloads(src, obs, st.period, cl, round_seed)
            row[sname] = pooled(panel_scores(wl, cl, configs), real) if wl else (math.nan, math.nan)
        rows.append(row)
        say(f"{name} day {row['day']:.0f}: {time.perf_counter() - t0:.0f} s "
            + " ".join(f"{s} {row[s][0]:.2f}/{row[s][1]:.3f}" for s in sources))
    return rows


def beats(a: tuple[float, float], b: tuple[float, float]) -> str:
    """'rho, regret' marks: y where `a` has the higher Spearman / the lower regret than `b`."""
    rho = "y" if a[0] > b[0] else "n"
    reg = "y" if a[1] < b[1] - 1e-12 else ("=" if abs(a[1] - b[1]) <= 1e-12 else "n")
    return f"{rho} {reg}"


def _f(x: float, digits: int = 3) -> str:
    return "n/a" if math.isnan(x) else f"{x:.{digits}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    ap.add_argument("--panel", type=int, default=30, help="configs drawn besides the default")
    ap.add_argument("--samples", type=int, default=4, help="samples per model and decision")
    ap.add_argument("--seed", type=int, default=0, help="the run's seed (panel, observation, rounds)")
    args = ap.parse_args()
    t_all = time.perf_counter()
    rows = []
    for name in args.traces.split(","):
        t0 = time.perf_counter()
        rows += measure(name, args.panel, args.samples, args.seed)
        say(f"{name}: {time.perf_counter() - t0:.0f} s")
    print("| trace | cluster | day | real jobs | backlog | default regret | replay rho / regret "
          "| stat rho / regret | hybrid rho / regret | stat beats replay: rho, regret | hybrid beats replay: rho, regret |")
    print("|" + "---|" * 11)
    for r in rows:
        cells = " | ".join(f"{_f(r[s][0], 2)} / {_f(r[s][1])}" for s in ("replay", *MODELS))
        vs = " | ".join(beats(r[m], r["replay"]) for m in MODELS)
        print(f"| {r['trace']} | {r['cluster']} | {r['day']:.0f} | {r['jobs']:,} | {r['backlog']} "
              f"| {_f(r['default_regret'])} | {cells} | {vs} |")
    print()
    print("| trace | origins | model | Spearman higher than replay | regret lower / tied / higher |")
    print("|" + "---|" * 5)
    for name in dict.fromkeys(r["trace"] for r in rows):
        rs = [r for r in rows if r["trace"] == name]
        for m in MODELS:
            hi = sum(r[m][0] > r["replay"][0] for r in rs)
            lo = sum(r[m][1] < r["replay"][1] - 1e-12 for r in rs)
            tie = sum(abs(r[m][1] - r["replay"][1]) <= 1e-12 for r in rs)
            print(f"| {name} | {len(rs)} | {m} | {hi} | {lo} / {tie} / {len(rs) - lo - tie} |")
    say(f"total: {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main()
