"""The HTML report of a workload-model evaluation: a summary table, and per origin the real vs
generated arrival and GPU-demand curves and the decision-fidelity scatter."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..htmlreport import Report
from .evaluate import ModelEvaluation, evaluation_data

DAY = 86400.0
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]


def write_report(ev: ModelEvaluation, out_dir: str | os.PathLike, trace: str) -> Path:
    rep = Report(f"Workload models on {Path(trace).name}")
    s = ev.setup
    rep.text(f"cluster {ev.cluster}; policy {ev.policy}; objective {s.objective} (less is better); "
             f"history {s.history / DAY:g} d, horizon {s.horizon / DAY:g} d, step {s.step / DAY:g} d; "
             f"panel: default + {s.panel} configs drawn with seed {s.seed}; {s.samples} samples per origin "
             "(replay is deterministic: one).", "note")
    summ = ev.summary()
    rep.heading("Summary (means over origins)")
    keys = ["spearman_mean", "regret_mean", "ks_interarrival_mean", "ks_log_duration_mean", "ks_gpus_mean",
            "ks_gpu_hours_tod_mean", "tv_vc_mean", "load_ratio_mean"]
    rep.table(["model", *keys, "vs replay (rho better / regret better / tied, of origins)"],
              [[m, *[e[k] for k in keys],
                (lambda v: f"{v['spearman_better']} / {v['regret_better']} / {v['regret_tied']} of {v['origins']}")(e["vs_replay"])
                if "vs_replay" in e else ""] for m, e in summ.items()])
    rep.heading("Per origin")
    rep.table(["origin (day)", "real jobs", "offered load", "default regret", "random regret",
               *[f"{m} rho / regret" for m in ev.results]],
              [[f"{o.origin / DAY:g}", o.jobs, o.load, o.default_regret, o.random_regret,
                *[f"{res[k].mean('spearman'):.2f} / {res[k].mean('regret'):.3f}" for res in ev.results.values()]]
               for k, o in enumerate(ev.reals)])
    for k, o in enumerate(ev.reals):
        rep.heading(f"Origin {o.origin / DAY:g} d")
        fig, axes = rep.figure(13, 3.6, ncols=3)
        hours = np.arange(len(o.arrivals)) / 24.0
        axes[0].plot(hours, o.arrivals, color="black", lw=1.2, label="real")
        axes[1].plot(hours, o.demand, color="black", lw=1.2, label="real")
        for c, (m, res) in zip(COLORS, ev.results.items()):
            smp = res[k].samples[0]
            axes[0].plot(hours, smp.arrivals, color=c, lw=0.8, alpha=0.8, label=m)
            axes[1].plot(hours, smp.demand, color=c, lw=0.8, alpha=0.8, label=m)
            for smp in res[k].samples:
                axes[2].scatter(o.objective / 3600, smp.objective / 3600, s=12, color=c, alpha=0.7,
                                label=m if smp is res[k].samples[0] else None)
        if ev.gpus:
            axes[1].axhline(ev.gpus, color="grey", ls="--", lw=0.8, label="capacity")
        axes[0].set(xlabel="days after origin", ylabel="jobs submitted per hour", title="arrivals")
        axes[1].set(xlabel="days after origin", ylabel="GPUs demanded", title="GPU demand (jobs started at submit)")
        lim = [min(o.objective.min(), *(s.objective.min() for r in ev.results.values() for s in r[k].samples)) / 3600,
               max(o.objective.max(), *(s.objective.max() for r in ev.results.values() for s in r[k].samples)) / 3600]
        axes[2].plot(lim, lim, color="grey", lw=0.6, ls=":")
        axes[2].set(xlabel=f"real {s.objective} (h)", ylabel=f"generated {s.objective} (h)",
                    title="decision fidelity (one dot per config and sample)")
        for ax in axes:
            ax.legend(fontsize=7)
        rep.add_figure(fig, caption=f"origin {o.origin / DAY:g} d: {o.jobs:,} real jobs, offered load {o.load:.2f}; "
                                    "curves show the first sample of each model")
    return rep.write(out_dir, data=evaluation_data(ev))
