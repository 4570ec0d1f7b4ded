"""How heavy are the `stat` model's sampled weeks? Prints, at rolling weekly origins of the bundled
Philly sample (32x8), the ratio of sampled to real next-week offered load (GPU-hours / capacity),
job count and p90 duration, with the model fitted (a) on the true last week and (b) on what the
controller sees at the origin (`observe`: unfinished jobs' durations imputed), 4 seeds each.

    PYTHONPATH=src python benchmarks/stat_load_ratio.py
"""

from __future__ import annotations

import numpy as np

from autosched.adapt import observe
from autosched.cluster import ClusterSpec, fit_to_cluster
from autosched.data import sample_path
from autosched.policies.tiresias import Tiresias
from autosched.sim import Simulator
from autosched.trace import load_trace
from autosched.workload import get_model

DAY = 86400.0
SEEDS = range(4)


def main() -> None:
    cl = ClusterSpec.uniform_nodes(32, 8)
    tr, _ = fit_to_cluster(load_trace(sample_path())[0], cl)

    def load(w) -> float:
        return float((w.num_gpus * w.duration).sum()) / (cl.gpus * 7 * DAY)

    sim = Simulator(tr, cl, Tiresias())
    ratios: dict[str, list[tuple[float, float, float]]] = {"true history": [], "observed history": []}
    for day in (7, 14, 21):
        t = tr.start + day * DAY
        sim.run(until=t)
        real = tr.window(t, t + 7 * DAY)
        fits = {"true history": tr.window(t - 7 * DAY, t), "observed history": observe(sim, t, t - 7 * DAY, seed=0).history}
        for name, hist in fits.items():
            model = get_model("stat")().fit(hist)
            for seed in SEEDS:
                s = model.sample(t, 7 * DAY, seed=seed)
                r = (load(s) / load(real), len(s) / len(real),
                     float(np.percentile(s.duration, 90) / np.percentile(real.duration, 90)))
                ratios[name].append(r)
                print(f"day {day:2d} {name:16s} seed {seed}: load {r[0]:.2f} count {r[1]:.2f} p90 {r[2]:.2f}"
                      f"  (real load {load(real):.2f})")
    for name, rs in ratios.items():
        a = np.array(rs)
        print(f"{name}: sampled/real offered load {a[:, 0].mean():.2f} ± {a[:, 0].std(ddof=1):.2f}, "
              f"job count {a[:, 1].mean():.2f}, p90 duration {a[:, 2].mean():.2f} (mean over {len(a)} samples)")


if __name__ == "__main__":
    main()
