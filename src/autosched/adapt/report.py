"""The HTML report of an experiment: did autosched help, when, and why."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..htmlreport import Report
from ..space import Categorical, Float, Int, Knob
from .experiment import DAY, ExperimentResult

COLORS = {"default": "#777777", "autosched": "#1f77b4", "last_period": "#ff7f0e",
          "oracle_static": "#2ca02c", "oracle_period": "#d62728"}


def build_report(result: ExperimentResult) -> Report:
    st = result.settings
    rep = Report(f"autosched on {result.trace or 'trace'}: {st.policy} on {result.cluster}")
    rep.text(_verdict(result))
    rep.text(f"{result.jobs:,} jobs; period {st.period / DAY:g} d, history {st.history / DAY:g} d, "
             f"workload model {st.model}, {st.samples} sampled workloads per round, tuning budget {st.budget} "
             f"trials, objective {st.metric}; guardrail: on {st.validation_samples} fresh samples, "
             f"deploy only if the mean paired gain > {st.guard_k:g} standard errors and > {st.guard_margin:.1%}"
             + (f" and no sample loses more than {st.guard_max_loss:.1%}" if st.guard_max_loss is not None else "")
             + (f"; samples are load scenarios (log sd {st.level_sd:g})" if st.level_sd else "")
             + ". Strategies marked ORACLE read the real future and cannot be deployed; they bound what is "
             "possible.", "note")
    _summary_table(rep, result)
    _jct_per_period(rep, result)
    _drift(rep, result)
    _knobs(rep, result)
    _decisions(rep, result)
    return rep


def _verdict(result: ExperimentResult) -> str:
    summ = result.summary()
    rel = summ.get("relative_avg_jct", {})
    if "autosched" not in rel:
        return "autosched was not among the strategies run."
    parts = [f"autosched's average JCT is {rel['autosched'] - 1:+.1%} vs the fixed default"]
    share = summ.get("autosched_share_of_oracle_period_gain")
    if share is not None:
        parts.append(f"it captured {share:.0%} of the per-period oracle's gain")
    if "last_period" in rel:
        parts.append(f"tuning on the last period gives {rel['last_period'] - 1:+.1%}")
    worst = summ.get("worst_period_vs_default", {}).get("autosched")
    if worst is not None:
        parts.append(f"its worst period is {worst - 1:+.1%} vs the default")
    n = len(result.strategies["autosched"].decisions)
    k = sum(d.deployed for d in result.strategies["autosched"].decisions)
    parts.append(f"it re-tuned {n} times and deployed {k} new configs")
    return "; ".join(parts) + "."


def _summary_table(rep: Report, result: ExperimentResult) -> None:
    rep.heading("Overall")
    base = result.strategies.get("default")
    summ = result.summary()
    shares = [summ.get(k, {}) for k in ("share_of_oracle_static_gain", "share_of_oracle_static_gain_after_p0")]
    rows = []
    for name, r in result.strategies.items():
        m = r.metrics
        rows.append([name + (" (ORACLE)" if r.oracle else ""), r.description, m.avg_jct / 3600,
                     f"{m.avg_jct / base.metrics.avg_jct - 1:+.1%}" if base else "",
                     *("" if sh.get(name) is None else f"{sh[name]:.0%}" for sh in shares),
                     m.p99_jct / 3600, m.avg_queue / 3600, round(m.utilization, 3),
                     f"{sum(d.deployed for d in r.decisions)}/{len(r.decisions)}" if r.decisions else "-",
                     round(r.seconds, 1)])
    rep.table(["strategy", "what", "avg JCT (h)", "vs default", "of oracle_static's gain",
               "the same, jobs after period 0", "p99 JCT (h)", "avg queue (h)", "utilisation",
               "deployed / rounds", "wall s"], rows)


def _jct_per_period(rep: Report, result: ExperimentResult) -> None:
    rep.heading("Average JCT per period, relative to the fixed default")
    s = result.strategies
    base = s.get("default")
    if base is None:
        return
    n = len(base.periods)
    fig, ax = rep.figure(9, 3.8)
    names = [k for k in s if k != "default"]
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        rel = [p.metrics.avg_jct / b.metrics.avg_jct - 1 if b.metrics.jobs else 0
               for p, b in zip(s[name].periods, base.periods)]
        ax.bar(np.arange(n) + (i - (len(names) - 1) / 2) * width, np.array(rel) * 100, width,
               label=name + (" (oracle)" if s[name].oracle else ""), color=COLORS.get(name))
    ax.axhline(0, color="k", lw=0.8)
    ax.axhline(2, color="k", lw=0.6, ls=":")
    ax.set_xticks(np.arange(n), [f"P{p.index}\n{(p.start - result.boundaries[0]) / DAY:g} d" for p in base.periods])
    ax.set_ylabel("avg JCT vs default (%)")
    ax.legend(fontsize=8, ncol=2)
    rep.add_figure(fig, "below 0 = faster than the fixed default; dotted line: +2% (the guardrail's promise). "
                        "Period 0 starts with no history: every strategy but oracle_static runs the default there "
                        "until its first round.")
    rows = [[f"P{i}", f"{b.metrics.jobs:,}", b.metrics.avg_jct / 3600] +
            [f"{s[n].periods[i].metrics.avg_jct / b.metrics.avg_jct - 1:+.1%}" if b.metrics.jobs else "-" for n in names]
            for i, b in enumerate(base.periods)]
    rep.table(["period", "jobs", "default avg JCT (h)"] + names, rows)


def _drift(rep: Report, result: ExperimentResult) -> None:
    rep.heading("The workload's drift, and when autosched re-tuned")
    w = result.workload
    days = np.arange(len(w["arrivals"]))
    fig, axes = rep.figure(9, 6.5, nrows=3, sharex=True)
    axes[0].plot(days + 0.5, w["arrivals"], marker=".", color="#444")
    axes[0].set_ylabel("jobs / day")
    axes[1].plot(days + 0.5, w["offered_load"], marker=".", color="#444")
    axes[1].axhline(1.0, color="k", lw=0.6, ls=":")
    axes[1].set_ylabel("offered load\n(GPU demand / capacity)")
    bottom = np.zeros(len(days))
    for k, share in w["gpu_mix"].items():
        axes[2].bar(days + 0.5, share, 1.0, bottom=bottom, label=f"{k} GPU")
        bottom += np.array(share)
    axes[2].set_ylabel("share of jobs")
    axes[2].legend(fontsize=7, ncol=4, loc="lower right")
    axes[2].set_xlabel("day of the trace")
    auto = result.strategies.get("autosched")
    for ax in axes:
        for b in result.boundaries[1:-1]:
            ax.axvline((b - result.boundaries[0]) / DAY, color="#bbb", lw=0.6)
        for d in auto.decisions if auto else []:
            x = (d.time - result.boundaries[0]) / DAY
            ax.axvline(x, color="#1f77b4" if d.deployed else "#999", lw=1.6 if d.deployed else 1.0,
                       ls="-" if d.deployed else "--")
    rep.add_figure(fig, "autosched's rounds: solid blue = new config deployed, dashed grey = kept the running "
                        "config; grey thin lines = period boundaries. The rounds inside period 0 are the first round "
                        "(on the history seen so far) and the early rounds a day apart after it; other rounds "
                        "between boundaries were triggered by the drift tests (rate ratio, log-duration KS, "
                        "GPU-mix chi-square).")


def _knobs(rep: Report, result: ExperimentResult) -> None:
    rep.heading("Knob values over time")
    s = result.strategies
    from ..policies import get_policy

    space = get_policy(result.settings.policy).space
    changing = [k.name for k in space if any(len({str(c[k.name]) for _, c in r.timeline}) > 1 for r in s.values())]
    if not changing:
        rep.text("No strategy changed any knob: every strategy ran one config throughout.")
        return
    end = (result.boundaries[-1] - result.boundaries[0]) / DAY
    fig, axes = rep.figure(9, 1.9 * len(changing), nrows=len(changing), sharex=True, squeeze=False)
    for ax, knob in zip(axes[:, 0], changing):
        for name, r in s.items():
            xs = [(t - result.boundaries[0]) / DAY for t, _ in r.timeline] + [end]
            ys = [_num(c[knob], space[knob]) for _, c in r.timeline]
            ax.step(xs, ys + ys[-1:], where="post", label=name, color=COLORS.get(name), lw=1.4)
        ax.set_ylabel(knob, fontsize=8)
        k = space[knob]
        if isinstance(k, (Float, Int)) and k.log:  # only numeric knobs have a scale
            ax.set_yscale("log")
    axes[0, 0].legend(fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel("day of the trace")
    rep.add_figure(fig, "the config each strategy ran, over time (categorical knobs as the index of their value among the choices)")


def _decisions(rep: Report, result: ExperimentResult) -> None:
    rep.heading("Every re-tuning round: evidence, causal graph, cost")
    for name in ("autosched", "last_period", "oracle_period"):
        r = result.strategies.get(name)
        if r is None or not r.decisions:
            continue
        rows = []
        for d in r.decisions:
            cost = d.tuning_cost or {}
            knobs = "; ".join(f"{k}: {_fmt(a)} -> {_fmt(b)}" for k, (a, b) in d.knobs_changed.items())
            rows.append([f"{(d.time - result.boundaries[0]) / DAY:.1f}", d.trigger, "yes" if d.deployed else "no",
                         f"{d.predicted_gain:+.1%} ± {d.spread:.1%}", knobs or "-", d.reason,
                         cost.get("simulations", "-") if isinstance(cost, dict) else "-", round(d.tuning_seconds, 1)])
        rep.text(f"{name}" + (" (ORACLE)" if r.oracle else ""), "note")
        rep.table(["day", "trigger", "deployed", "predicted gain ± s.e.", "knobs changed", "why", "simulations",
                   "seconds"], rows)
        if name != "autosched":
            continue
        for d in r.decisions:
            edges = _edges(d.causal_graph)
            screened = d.screened_knobs or {}
            head = f"day {(d.time - result.boundaries[0]) / DAY:.1f} causal graph"
            if not edges:
                rep.pre(f"{head}: none (screening did not run this round)")
                continue
            frozen = ", ".join(f"{k}={_fmt(v)}" for k, v in screened.items()) if isinstance(screened, dict) else str(screened)
            rep.pre(f"{head} ({len(edges)} edges; frozen: {frozen or 'none'}):\n" + "\n".join(edges))


def _edges(graph: Any) -> list[str]:
    out = []
    for e in graph or []:
        if isinstance(e, (list, tuple)) and len(e) >= 2:
            directed = e[2] if len(e) > 2 else True
            out.append(f"  {e[0]} {'->' if directed else '--'} {e[1]}")
        else:
            out.append(f"  {e}")
    return out


def _num(v: Any, knob: Knob) -> float:
    """A knob value on a numeric axis: categorical values as their index among the choices."""
    if isinstance(v, (bool, int, float)):
        return float(v)
    choices = knob.choices if isinstance(knob, Categorical) else ()
    return float(choices.index(v)) if v in choices else 0.0


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
