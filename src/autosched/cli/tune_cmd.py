"""``autosched tune``: search a policy's knobs on a trace."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..atomic import write_text_atomic
from .common import (
    check_seed,
    cluster_file,
    fail,
    fmt_metric,
    fmt_value,
    load_inputs,
    note,
    outputs,
    print_json,
    progress_bar,
    require,
    table_console,
)


def tune_cmd(
    trace: Path = typer.Argument(..., help="trace file (any supported format) to tune on"),
    cluster: str = typer.Option(..., "--cluster", "-c", help="NODESxGPUS[,CPUs=C][,DefCpuPerGPU=D] (e.g. 32x8) or a VC file (vc,nodes)"),
    policy: list[str] = typer.Option(["tiresias"], "--policy", "-p",
                                     help="policy to tune: a name (see `autosched policies`) or MODULE:CLASS; repeat (or comma-separate) to make the policy itself a knob"),
    budget: int = typer.Option(40, "--budget", "-n", help="number of trials (one simulation each)"),
    objective: str = typer.Option("avg_jct", "--objective", help="Metrics field to optimise (see `autosched simulate --json`)"),
    direction: Optional[str] = typer.Option(None, "--direction", help="minimize or maximize (default: the metric's natural direction)"),
    constraint: list[str] = typer.Option([], "--constraint", help="METRIC<=VALUE or METRIC>=VALUE, e.g. 'p99_queue<=21600' (repeatable)"),
    sampler: str = typer.Option("tpe", "--sampler", help="tpe (default), gp (needs torch: pip install 'autosched\\[gp]') or random"),
    screening: bool = typer.Option(True, "--screening/--no-screening", help="freeze knobs that causal screening finds have no path to the objective"),
    workers: int = typer.Option(1, "--workers", "-j", help="trials run in parallel (1 = in this process); a seed and a worker count give the same trials on every run"),
    executor: str = typer.Option("local", "--executor", help="local (process pool) or ray (pip install 'autosched\\[ray]')"),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (default: start a local Ray instance)"),
    study: Optional[Path] = typer.Option(None, "--study", help="SQLite file for the study: a killed run resumes from it; one run at a time; refused if made for another trace, cluster, policy or objective"),
    seed: int = typer.Option(0, "--seed", help="random seed of the sampler"),
    trial_timeout: Optional[float] = typer.Option(None, "--trial-timeout", help="seconds after which a trial is stopped and recorded as failed"),
    warm_start: list[Path] = typer.Option([], "--warm-start", help="config file (as --out writes) to try early (repeatable)"),
    report: Optional[Path] = typer.Option(None, "--report", help="write an HTML report (index.html, report.json) into this directory"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="write the best config here (accepted by `autosched simulate --config`)"),
    fmt: Optional[str] = typer.Option(None, "--format", help="trace format (default: detected from the header)"),
    as_json: bool = typer.Option(False, "--json", help="print the result as one JSON object"),
) -> None:
    """Find the best knob settings of a policy on a trace (Bayesian optimisation + causal screening)."""
    from ..space import read_config_file
    from ..tune import ExecutionConfig, Objective, SearchConfig, Tuner

    outputs((trace, cluster_file(cluster), study, *warm_start), (out,), dirs=(report,))
    check_seed(seed)
    if report is not None:
        require("matplotlib", "--report", "report")
    from ..policies import get_policy

    names = [n.strip() for p in policy for n in p.split(",") if n.strip()]
    if not names:
        fail("--policy is empty; name a policy, e.g. tiresias")
    classes = [get_policy(n) for n in names]  # a bad name fails here, in one line, before any work
    obj = Objective(objective, direction, tuple(constraint))
    warm = []
    for path in warm_start:
        name, knobs = read_config_file(path)
        warm.append({"policy": name or classes[0].name, "knobs": knobs})

    oracles = [cls.name for cls in classes if cls.oracle]
    if oracles and not as_json:
        note(f"note: {', '.join(oracles)} read true job durations (oracle baselines, not deployable)")
    tr, cl, loaded = load_inputs(trace, cluster, fmt, quiet=as_json)
    search = SearchConfig(budget=budget, seed=seed, sampler=sampler, screening=screening)
    execution = ExecutionConfig(workers=workers, executor=executor, address=address,
                                trial_timeout=trial_timeout, study=study)
    tuner = Tuner(names if len(names) > 1 else names[0], cl, obj, search, execution)
    try:
        with progress_bar(f"tuning {', '.join(names)} ({len(tr):,} jobs)", budget) as update:
            result = tuner.tune([tr], warm_start=warm, progress=update)
    except KeyboardInterrupt:
        fail("interrupted" + (f"; finished trials are kept in {study}, run again to resume" if study else ""), 130)
    if result.best_config is None:
        fail(f"no trial finished; first error: {next((t.error for t in result.trials if t.error), 'none')}", 1)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, result.best_config_json() + "\n")
    if report is not None:
        from ..tune.report import tuning_report

        page = tuning_report(result, f"Tuning {', '.join(names)} on {trace.name}").write(report, data=result.to_dict())
        if not as_json:
            note(f"report: {page}")
    if as_json:
        print_json({**result.to_dict(), "dropped": loaded.to_dict()})
        return
    _print_result(result, str(trace), cl.describe())


def _print_result(result, trace: str, cluster: str) -> None:
    from ..sim import METRIC_HELP

    con = table_console()
    obj = result.objective
    con.print(f"[bold]best {result.best_policy}[/] on {cluster}, trace {trace}; objective: {obj.describe()}")
    if not result.feasible:
        con.print("[bold red]no trial met the constraints; showing the one closest to them[/]")
    t = Table(show_header=True, header_style="bold")
    for col in ("knob", "best", "status"):
        t.add_column(col)
    for k, v in result.best_config.items():
        status = "frozen (screening)" if k in result.screened_knobs else "searched"
        t.add_row(k, fmt_value(v), status)
    con.print(t)
    if result.default_metrics:
        m = Table(show_header=True, header_style="bold", title="best vs default")
        for col in ("metric", "default", "best", "change"):
            m.add_column(col, justify="right" if col != "metric" else "left")
        for key in METRIC_HELP:
            d, b = _mean(result.default_metrics, key), _mean(result.best_metrics, key)
            ch = f"{(b - d) / abs(d):+.1%}" if d else ""
            style = "bold" if key == obj.metric else ""
            m.add_row(f"[{style}]{key}[/]" if style else key, fmt_metric(key, d), fmt_metric(key, b), ch)
        con.print(m)
    if not math.isnan(result.improvement):
        con.print(f"{obj.metric}: {result.best_value:,.6g} vs default {result.default_value:,.6g} "
                  f"([bold]{result.improvement:+.1%}[/] better)")
    s = result.screening
    if s is not None:
        frozen = ", ".join(f"{k}={fmt_value(v)}" for k, v in s.frozen.items()) or "none"
        how = "probes" if s.method == "probes" else "screening"
        con.print(f"{how} on {s.samples} trials: froze {frozen}; searched {', '.join(s.relevant)}")
        if s.unfrozen_at is not None:
            con.print(f"  the reduced search stalled: all knobs searched again from trial {s.unfrozen_at}")
        if s.note:
            con.print(f"  note: {s.note}", style="dim")
    from ..tune import TrialState

    c = result.cost
    failed = sum(1 for t in result.trials if t.state is TrialState.FAILED)
    con.print(f"cost: {c['trials']:.0f} trials ({failed} failed), {c['simulations']:.0f} simulations, "
              f"{c['trial_seconds']:.1f} s in trials, {c['wall_seconds']:.1f} s wall")


def _mean(metrics, key: str):
    """Mean of a metric over the workloads; integer metrics (jobs, preemptions) stay integers."""
    values = [getattr(m, key) for m in metrics]
    mean = sum(values) / len(values)
    return round(mean) if all(isinstance(v, int) for v in values) else mean
