"""The tuning report: convergence, knob importance, causal graph, best vs default."""

from __future__ import annotations

import math

from ..htmlreport import Report
from ..sim.metrics import METRIC_HELP
from .evaluate import INTERMEDIATES
from .screening import Screening
from .tuner import TrialState, TuneResult


def tuning_report(result: TuneResult, title: str) -> Report:
    rep = Report(title)
    obj = result.objective
    rep.text(f"Objective: {obj.describe()}. {result.cost['trials']:.0f} trials, "
             f"{result.cost['simulations']:.0f} simulations, {result.cost['wall_seconds']:.1f} s.")
    rep.heading("Best configuration")
    rep.table(["knob", "best", "status"],
              [[k, v, "frozen by screening" if k in result.screened_knobs else "searched"]
               for k, v in (result.best_config or {}).items()])
    rep.text(f"policy {result.best_policy}; {obj.metric} {result.best_value:,.4g} vs default "
             f"{result.default_value:,.4g} ({result.improvement:+.1%} better)")
    _convergence(rep, result)
    _metrics_table(rep, result)
    _importance(rep, result)
    if result.screening is not None:
        rep.heading("Causal graph (knobs → intermediate metrics → objective)")
        _graph(rep, result, result.screening)
        rep.pre(result.screening.text())
    failed = [t for t in result.trials if t.state is TrialState.FAILED]
    if failed:
        rep.heading("Failed trials")
        rep.table(["trial", "error"], [[t.number, t.error] for t in failed])
    return rep


def _convergence(rep: Report, result: TuneResult) -> None:
    rep.heading("Convergence")
    fig, ax = rep.figure(8, 3.5)
    trials = sorted(result.trials, key=lambda t: t.number)
    xs = [t.number for t in trials if t.state is TrialState.COMPLETE]
    ys = [t.score for t in trials if t.state is TrialState.COMPLETE]
    best, curve = math.nan, []
    for y in ys:
        if math.isnan(best) or result.objective.better(y, best):
            best = y
        curve.append(best)
    ax.scatter(xs, ys, s=10, alpha=0.5, label="trial")
    ax.step(xs, curve, where="post", color="C1", label="best so far")
    if not math.isnan(result.default_value):
        ax.axhline(result.default_value, color="grey", ls="--", lw=1, label="default")
    if result.screening is not None:
        ax.axvline(result.screening.samples - 0.5, color="C2", ls=":", lw=1, label="screening")
    ax.set_xlabel("trial")
    ax.set_ylabel(result.objective.metric)
    ax.legend(fontsize=8)
    rep.add_figure(fig, caption=f"{result.objective.metric} of each trial and the best so far")


def _metrics_table(rep: Report, result: TuneResult) -> None:
    if not result.best_metrics or not result.default_metrics:
        return
    rep.heading("Best vs default, per metric (mean over workloads)")
    rows = []
    for name, (meaning, lower) in METRIC_HELP.items():
        b = sum(getattr(m, name) for m in result.best_metrics) / len(result.best_metrics)
        d = sum(getattr(m, name) for m in result.default_metrics) / len(result.default_metrics)
        change = (b - d) / abs(d) if d else math.nan
        rows.append([name, d, b, f"{change:+.1%}" if not math.isnan(change) else "", meaning])
    rep.table(["metric", "default", "best", "change", "meaning"], rows)


def _importance(rep: Report, result: TuneResult) -> None:
    if not result.effects:
        return
    rep.heading("Knob importance")
    items = sorted(result.effects.items(), key=lambda kv: abs(kv[1]))
    fig, ax = rep.figure(7, 0.4 * len(items) + 1)
    once = result.screening.frozen if result.screening else {}
    colors = ["C3" if k in result.screened_knobs else "C1" if k in once else "C0" for k, _ in items]
    ax.barh([k for k, _ in items], [v for _, v in items], color=colors)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel(f"standardised effect on {result.objective.metric} (red: frozen; orange: frozen, then given back)")
    rep.add_figure(fig, caption="regression coefficient of each standardised knob on the rank-Gaussian "
                                "objective, from the initial design")


def _graph(rep: Report, result: TuneResult, s: Screening) -> None:
    inter = [m for m in INTERMEDIATES if m in s.intermediates]
    cols = {0: list(s.knobs), 1: inter, 2: [s.objective]}
    pos = {}
    for x, names in cols.items():
        for i, n in enumerate(names):
            pos[n] = (x, -(i - (len(names) - 1) / 2))
    fig, ax = rep.figure(8, max(3.0, 0.55 * len(s.knobs) + 1))
    labels = {}
    for n, (x, y) in pos.items():
        frozen = n in result.screened_knobs
        given_back = n in s.frozen and not frozen
        labels[n] = ax.text(x, y, n, ha="center", va="center", fontsize=9, zorder=3,
                            bbox={"boxstyle": "round", "fc": "#fdd" if frozen else "#fec" if given_back else "#def",
                                  "ec": "grey"})
    for e in s.edges:
        if e.source not in pos or e.target not in pos:
            continue
        # Arrows run between the label boxes (patchA/B) and bend a little, so an edge that skips
        # the middle column does not look as if it went through an intermediate.
        skip = abs(pos[e.target][0] - pos[e.source][0]) > 1
        ax.annotate("", xy=pos[e.target], xytext=pos[e.source], zorder=2,
                    arrowprops={"arrowstyle": "-|>" if e.directed else "-", "color": "C0", "lw": 1.2,
                                "patchA": labels[e.source].get_bbox_patch(),
                                "patchB": labels[e.target].get_bbox_patch(),
                                "connectionstyle": f"arc3,rad={0.35 if skip else 0.12}", "mutation_scale": 14})
    ax.set_xlim(-0.6, 2.6)
    ax.set_ylim(min(p[1] for p in pos.values()) - 0.7, max(p[1] for p in pos.values()) + 0.7)
    ax.axis("off")
    rep.add_figure(fig, caption="PC graph; knobs left (red: frozen; orange: frozen, then searched again "
                                "when the reduced search stalled), intermediate metrics middle, objective "
                                "right; a line without arrow could not be oriented")
