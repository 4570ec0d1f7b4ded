"""Where do the loop's decisions lose? At each period boundary (the default run's observation),
tune on the model's samples and on the replayed last period, then score every tried config on the
REAL coming period (with the backlog). One JSON line per boundary: Spearman between each source's
and the real scores of the tried configs, the real gain of the config each source chose and of
the best config it tried, the gain it predicted, and each trial's per-workload and real values
(so that any prefix of the budget can be read off: with screening off the trials of a budget-n
search are the first n of a larger one).

    PYTHONPATH=src python benchmarks/decision_diagnosis.py --budget 32 --no-screening
    PYTHONPATH=src python benchmarks/decision_diagnosis.py --budget 32 --no-screening \
        ../shared/traces/microsoft-itp-elasticflow/cluster07.csv --cluster 40x8 --span 28
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from scipy.stats import spearmanr

from autosched.adapt.controller import round_seed_of, round_workloads
from autosched.adapt.experiment import DAY, Settings, boundaries
from autosched.adapt.observe import observe
from autosched.adapt.sources import FutureSource, ModelSource, ReplaySource
from autosched.cli.common import load_inputs
from autosched.data import SAMPLE_CLUSTER, sample_path
from autosched.policies import get_policy
from autosched.sim import Simulator
from autosched.tune import ExecutionConfig, Objective, SearchConfig, Tuner


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path, nargs="?", help="a trace (default: the bundled sample)")
    ap.add_argument("--cluster", default=SAMPLE_CLUSTER)
    ap.add_argument("--skip", type=float, default=0.0, help="days skipped at the start")
    ap.add_argument("--span", type=float, default=None, help="days replayed (default: all)")
    ap.add_argument("--budget", type=int, default=8, help="tuning trials at each boundary, per source")
    ap.add_argument("--no-screening", dest="screening", action="store_false", help="no causal screening")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    tr, cluster, _ = load_inputs(args.trace or sample_path(), args.cluster, quiet=True)
    end = tr.end + 1.0 if args.span is None else tr.start + (args.skip + args.span) * DAY
    tr = tr.window(tr.start + args.skip * DAY, end)
    st = Settings(seed=args.seed)
    bounds = boundaries(tr, st.period)
    cls = get_policy("tiresias")
    default = cls.space.default()
    sim = Simulator(tr, cluster, cls(default))
    for bi, t in enumerate(bounds[1:-1]):
        sim.run(until=t)
        obs = observe(sim, t, max(bounds[0], t - st.history), seed=args.seed)
        real = round_workloads(FutureSource(tr), obs, st.period, cluster, 0)
        tuner_real = Tuner("tiresias", cluster, Objective("avg_jct"), SearchConfig(budget=1), ExecutionConfig())
        cache: dict[str, float] = {}

        def realv(c: dict) -> float:
            k = json.dumps(c, sort_keys=True)
            if k not in cache:
                cache[k] = tuner_real.evaluate("tiresias", c, real)[0]
            return cache[k]

        d_real = realv(default)
        row = {"t": bi + 1, "default_real": d_real}
        for sname, src in (("model", ModelSource("stat", 4)), ("replay", ReplaySource())):
            rs = round_seed_of(args.seed, bi)
            wl = round_workloads(src, obs, st.period, cluster, rs)
            t0 = time.perf_counter()
            search = SearchConfig(budget=args.budget, seed=rs, screening=args.screening)
            res = Tuner("tiresias", cluster, Objective("avg_jct"), search,
                        ExecutionConfig(workers=1)).tune(wl, warm_start=[default])
            tt = time.perf_counter() - t0
            comp = [x for x in res.trials if x.state == "complete"]
            sv = [x.value for x in comp]
            rv = [realv(x.config) for x in comp]
            rho = spearmanr(sv, rv)[0] if len(set(sv)) > 1 else float("nan")
            chosen = realv(res.best_config)
            row[sname] = {"tune_s": round(tt, 1), "n": len(comp), "rho": round(float(rho), 2),
                          "chosen_real_gain": round(1 - chosen / d_real, 3),
                          "best_tried_real_gain": round(1 - min(rv) / d_real, 3),
                          "src_gain_pred": round(1 - res.best_value / res.default_value, 3),
                          "best": res.best_config,
                          "per_wl": [[m.avg_jct for m in x.metrics] for x in comp], "real": rv}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
