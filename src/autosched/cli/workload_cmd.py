"""``autosched workload``: fit, sample and evaluate workload models."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..atomic import output_path
from ..timeparse import check_within, format_duration, parse_length, parse_time
from .common import (
    check_seed,
    cluster_file,
    fail,
    load_inputs,
    note,
    outputs,
    print_json,
    progress_bar,
    require,
    table_console,
)

workload_app = typer.Typer(help="Workload models: learn a cluster's workload from its history and generate its next period.",
                           no_args_is_help=True)

DAY = 86400.0


def _load_trace(path: Path, fmt: Optional[str]):
    from ..trace import load_trace

    trace, report = load_trace(path, format=fmt)
    if report.dropped:
        note(report.summary())
    return trace, report


@workload_app.command("models")
def models_cmd(as_json: bool = typer.Option(False, "--json", help="print as one JSON object")) -> None:
    """List the workload models and their parameters."""
    from ..workload import MODELS

    if as_json:
        print_json({n: {"summary": c.summary, "params": {k.name: {"range": k.describe(), "default": k.default,
                                                                  "help": k.help} for k in c.space}}
                    for n, c in MODELS.items()})
        return
    console = table_console()
    for name, cls in MODELS.items():
        console.print(f"[bold cyan]{name}[/]: {cls.summary}")
        for k in cls.space:
            console.print(f"  {k.name} = {k.default}  [dim]{k.describe()}; {k.help}[/]")


@workload_app.command("fit")
def fit_cmd(
    trace: Path = typer.Argument(..., help="trace file (any supported format)"),
    until: str = typer.Option(..., "--until", help="fit on jobs submitted before this time (s since the trace's origin, or 49d, 12h, ...)"),
    model: str = typer.Option("stat", "--model", "-m", help="workload model: replay, stat or neural (see `autosched workload models`)"),
    out: Path = typer.Option(..., "--out", "-o", parser=output_path, help="where to write the fitted model (.npz)"),
    history: Optional[str] = typer.Option(None, "--history", help="use only this much history before --until (e.g. 21d); default: all of it"),
    set_: list[str] = typer.Option([], "--set", "-s", help="model parameter param=value (repeatable)"),
    fmt: Optional[str] = typer.Option(None, "--format", help="trace format (default: detected from the header)"),
    as_json: bool = typer.Option(False, "--json", help="print a summary as one JSON object"),
) -> None:
    """Fit a workload model on a trace's jobs before --until and save it."""
    from ..workload import get_model

    outputs((trace,), (out,))
    t_until = parse_time(until, "--until")
    length = parse_length(history, "--history") if history is not None else None
    cls = get_model(model)
    m = cls(**cls.space.parse_assignments(set_))
    tr, loaded = _load_trace(trace, fmt)
    check_within(t_until, "--until", tr.end)
    lo = t_until - length if length is not None else -float("inf")
    past = tr.window(lo, t_until)
    if len(past) == 0:
        fail(f"{trace}: no jobs submitted in [{_when(lo)}, {_when(t_until)}): the history to fit on is empty "
             f"(the trace spans {_when(tr.start)} to {_when(tr.end)})")
    m.fit(past, lo if length is not None else None, t_until)
    m.save(out)
    info = {"model": m.name, "params": m.params, "out": str(out), "jobs": len(past),
            "history_start": m.history_start, "history_end": m.history_end, "dropped": loaded.to_dict()}
    if as_json:
        print_json(info)
    else:
        first, last = float(past.submit_time.min()), float(past.submit_time.max())
        note(f"fitted {m.describe()} on {len(past):,} jobs submitted {_when(first)} to "
             f"{_when(last)} (history window {_when(m.history_start)} to {_when(m.history_end)}); "
             f"wrote {out}")


@workload_app.command("sample")
def sample_cmd(
    model: Path = typer.Argument(..., help="a fitted model file written by `autosched workload fit`"),
    start: str = typer.Option(..., "--start", help="start of the generated period (s since the trace's origin, or 49d, ...)"),
    horizon: str = typer.Option("7d", "--horizon", help="length of the generated period (e.g. 7d, 12h, 3600)"),
    seed: int = typer.Option(0, "--seed", help="random seed; the same seed gives the same trace"),
    out: Path = typer.Option(..., "--out", "-o", parser=output_path,
                             help="output trace (.csv canonical, or .parquet); - for CSV on stdout"),
    as_json: bool = typer.Option(False, "--json", help="print a summary as one JSON object"),
) -> None:
    """Generate a workload for [start, start + horizon) from a fitted model."""
    from ..trace import write_trace
    from ..workload import load_model

    outputs((model,), stream=(out,))
    if str(out) == "-" and as_json:
        fail("--out - writes the trace to stdout; it cannot be combined with --json")
    check_seed(seed)
    t0 = parse_time(start, "--start")
    h = parse_length(horizon, "--horizon")
    m = load_model(model)
    tr = m.sample(t0, h, seed)
    write_trace(tr, out)
    info = {"model": m.name, "out": str(out), "jobs": len(tr), "start": t0, "horizon": h, "seed": seed,
            "gpu_hours": tr.gpu_seconds() / 3600}
    if as_json:
        print_json(info)
    else:
        note(f"sampled {len(tr):,} jobs ({info['gpu_hours']:,.0f} GPU-hours) in [{_when(t0)}, {_when(t0 + h)}) "
             f"from {m.describe()}, seed {seed}; wrote {'stdout' if str(out) == '-' else out}")


@workload_app.command("evaluate")
def evaluate_cmd(
    trace: Path = typer.Argument(..., help="real trace file to evaluate on"),
    cluster: str = typer.Option(..., "--cluster", "-c", help="NODESxGPUS (e.g. 32x8) or a VC file"),
    policy: str = typer.Option("tiresias", "--policy", "-p", help="policy whose config panel is simulated"),
    history: str = typer.Option("21d", "--history", help="history each model is fitted on"),
    horizon: str = typer.Option("7d", "--horizon", help="period predicted after each origin"),
    step: str = typer.Option("7d", "--step", help="time between origins"),
    first: Optional[str] = typer.Option(None, "--first", help="first origin (default: trace start + history)"),
    last: Optional[str] = typer.Option(None, "--last", help="last origin (default: last with a full horizon)"),
    models: str = typer.Option("replay,stat", "--models", help="comma-separated model specs: name or name:param=value:..."),
    samples: int = typer.Option(3, "--samples", help="samples per model and origin (replay is deterministic: one)"),
    panel: int = typer.Option(30, "--panel", help="configs drawn from the policy's space, besides its default"),
    seed: int = typer.Option(0, "--seed", help="seed of the config panel and of the samples"),
    objective: str = typer.Option("avg_jct", "--objective", help="metric to rank configs by (less is better)"),
    max_duration: Optional[str] = typer.Option(None, "--max-duration", help="drop jobs longer than this first (e.g. 2d, as the bundled sample does)"),
    fmt: Optional[str] = typer.Option(None, "--format", help="trace format (default: detected from the header)"),
    report: Optional[Path] = typer.Option(None, "--report", help="write an HTML report (index.html, report.json) into this directory"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object keyed by model name, plus 'dropped' (the trace's load report)"),
) -> None:
    """Rolling-origin evaluation of workload models: distribution distances and decision fidelity."""
    from ..policies import get_policy
    from ..trace.report import MAX_DURATION
    from ..workload import parse_model_spec
    from ..workload.evaluate import EvalSetup, evaluate

    outputs((trace, cluster_file(cluster)), dirs=(report,))
    check_seed(seed)
    if report is not None:
        require("matplotlib", "--report", "report")
    specs = [s.strip() for s in models.split(",") if s.strip()]
    if not specs:
        fail("--models is empty; give at least one model, e.g. replay,stat")
    pol = get_policy(policy)
    for s in specs:
        parse_model_spec(s)
    # (lengths > 0, samples and panel >= 1: EvalSetup.check checks them)
    setup = EvalSetup(history=parse_length(history, "--history"), horizon=parse_length(horizon, "--horizon"),
                      step=parse_length(step, "--step"), samples=samples, panel=panel, seed=seed,
                      objective=objective, first=parse_time(first, "--first") if first else None,
                      last=parse_time(last, "--last") if last else None)
    setup.check()
    cap = parse_length(max_duration, "--max-duration", MAX_DURATION) if max_duration is not None else None
    tr, cl, loaded = load_inputs(trace, cluster, fmt, quiet=as_json)
    if cap is not None:
        long = int((tr.duration > cap).sum())
        tr = tr.take(tr.duration <= cap)
        if not as_json:
            note(f"--max-duration {max_duration}: dropped {long:,} jobs longer than {format_duration(cap)}")
    with progress_bar("evaluating", 1, enabled=not as_json) as update:
        ev = evaluate(tr, cl, pol, specs, setup, progress=update)
    if report is not None:
        from ..workload.report import write_report

        page = write_report(ev, report, str(trace))
        if not as_json:
            note(f"report: {page}")
    if as_json:
        # nan (e.g. VC share without VCs) -> null: strict JSON
        print_json({**ev.summary(), "dropped": loaded.to_dict()})
    else:
        _print_summary(ev, str(trace))


def _when(t: float) -> str:
    if abs(t) == float("inf"):
        return "-inf" if t < 0 else "inf"
    return f"{t / DAY:.2f}d"


def _f(x: float, digits: int = 3) -> str:
    return "n/a" if x != x else f"{x:.{digits}f}"


def _print_summary(ev, trace: str) -> None:
    console = table_console()
    s = ev.setup
    console.print(f"[bold]workload models on {trace}[/], {ev.cluster}, policy {ev.policy}: "
                  f"{len(ev.reals)} origins, history {format_duration(s.history)}, horizon {format_duration(s.horizon)}, "
                  f"panel of {len(ev.configs)} configs, objective {s.objective}")
    summ = ev.summary()
    table = Table(show_header=True, header_style="bold")
    for col in ("model", "spearman", "regret", "KS inter-arr.", "KS log dur.", "KS GPUs", "KS GPU-h by hour",
                "TV VC", "load ratio", "beats replay (rho / regret)"):
        table.add_column(col, justify="right")
    for name, e in summ.items():
        vs = e.get("vs_replay")
        beats = f"{vs['spearman_better']}/{vs['origins']}, {vs['regret_better']}/{vs['origins']}" if vs else ""
        table.add_row(name, f"{_f(e['spearman_mean'])} ±{_f(e['spearman_std'], 2)}",
                      f"{_f(e['regret_mean'])} ±{_f(e['regret_std'], 2)}", _f(e["ks_interarrival_mean"]),
                      _f(e["ks_log_duration_mean"]), _f(e["ks_gpus_mean"]), _f(e["ks_gpu_hours_tod_mean"]),
                      _f(e["tv_vc_mean"]), _f(e["load_ratio_mean"], 2), beats)
    console.print(table)
    per = Table(show_header=True, header_style="bold", title="per origin: spearman / regret (min..max over samples)")
    per.add_column("origin")
    per.add_column("real jobs", justify="right")
    per.add_column("load", justify="right")
    per.add_column("default regret", justify="right")
    for name in summ:
        per.add_column(name, justify="right")
    for k, o in enumerate(ev.reals):
        cells = []
        for name, res in ev.results.items():
            r = res[k]
            lo, hi = r.spread("regret")
            cells.append(f"{_f(r.mean('spearman'), 2)} / {_f(r.mean('regret'))} ({_f(lo, 2)}..{_f(hi, 2)})")
        per.add_row(_when(o.origin), f"{o.jobs:,}", _f(o.load, 2), _f(o.default_regret), *cells)
    console.print(per)
