"""Where do the loop's decisions lose? At each period boundary (the default run's observation),
tune on the model's samples and on the replayed last period, then score every tried config on the
REAL coming period (with the backlog). One JSON line per boundary: Spearman between each source's
and the real scores of the tried configs, the real gain of the config each source chose and of
the best config it tried, the gain it predicted, and each trial's per-workload and real values
(so that any prefix of the budget can be read off: with screening off the trials of a budget-n
search are the first n of a larger one).

    PYTHONPATH=src python benchmarks/decision_diagnosis.py budget=32 screening=0
    PYTHONPATH=src python benchmarks/decision_diagnosis.py budget=32 screening=0 \
        trace=../shared/traces/microsoft-itp-elasticflow/cluster07.csv cluster=40x8 span=28
"""
import json
import sys
import time
from pathlib import Path

from scipy.stats import spearmanr

from autosched.adapt.controller import Controller, round_seed_of
from autosched.adapt.experiment import Settings, boundaries
from autosched.adapt.observe import observe
from autosched.adapt.sources import FutureSource, ModelSource, ReplaySource
from autosched.cli.common import load_inputs
from autosched.data import SAMPLE_CLUSTER, sample_path
from autosched.policies import get_policy
from autosched.sim import Simulator
from autosched.tune import ExecutionConfig, Objective, SearchConfig, Tuner

args = dict(a.split("=") for a in sys.argv[1:])
tpath = Path(args.get("trace", str(sample_path())))
cl = args.get("cluster", SAMPLE_CLUSTER)
budget = int(args.get("budget", 8))
screening = args.get("screening", "1") == "1"
seed = int(args.get("seed", 0))
tr, cluster, _ = load_inputs(tpath, cl, quiet=True)
skip = float(args.get("skip", 0)) * 86400
span = float(args.get("span", 1e9)) * 86400
tr = tr.window(tr.start + skip, tr.start + skip + span)
st = Settings(seed=seed)
bounds = boundaries(tr, st.period)
cls = get_policy("tiresias")
default = cls.space.default()
sim = Simulator(tr, cluster, cls(default))
out = []
for bi, t in enumerate(bounds[1:-1]):
    sim.run(until=t)
    obs = observe(sim, t, max(bounds[0], t - st.history), seed=seed)
    real_ctrl = Controller("tiresias", cluster, FutureSource(tr), period=st.period)
    real = real_ctrl._workloads(obs, 0)
    tuner_real = Tuner("tiresias", cluster, Objective("avg_jct"), SearchConfig(budget=1), ExecutionConfig())
    cache = {}
    def realv(c):
        k = json.dumps(c, sort_keys=True)
        if k not in cache:
            cache[k] = tuner_real.evaluate("tiresias", c, real)[0]
        return cache[k]
    d_real = realv(default)
    row = {"t": bi + 1, "default_real": d_real}
    for sname, src in (("model", ModelSource("stat", 4)), ("replay", ReplaySource())):
        ctrl = Controller("tiresias", cluster, src, period=st.period)
        rs = round_seed_of(seed, bi)
        wl = ctrl._workloads(obs, rs)
        t0 = time.perf_counter()
        res = Tuner("tiresias", cluster, Objective("avg_jct"), SearchConfig(budget=budget, seed=rs, screening=screening),
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
