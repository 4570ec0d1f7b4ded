"""``autosched run``: the main job. Replay a real trace period by period with autosched re-tuning
the scheduler, next to the fixed default, tuning on the last period, and two oracles."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from ..adapt.experiment import Settings
from ..timeparse import format_duration, parse_duration
from .common import (
    LOOP,
    check_seed,
    cluster_file,
    default_trace_and_cluster,
    fail,
    load_inputs,
    loop_options,
    note,
    outputs,
    print_json,
    require,
    table_console,
)

DEFAULT_STRATEGIES = "default,autosched,last_period,oracle_static,oracle_period"


@loop_options(Settings)
def run_cmd(
    trace: Optional[Path] = typer.Argument(None, help="trace file (any supported format); default: the bundled 28-day Philly sample on 32x8"),
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", help="NODESxGPUS[,CPUs=C][,DefCpuPerGPU=D] (e.g. 32x8; 11x8,CPUs=40) or a VC file (vc,nodes); required with a trace"),
    loop: dict[str, Any] = LOOP,
    workers: int = typer.Option(2, "--workers", "-j", help="tuning trials run in parallel processes (1 = in this process)"),
    strategies: str = typer.Option(DEFAULT_STRATEGIES, "--strategies", help="comma-separated strategies to compare (oracle_* read the real future; "
                                   "oracle_static_policy, kept to the operator's policy, runs when named)"),
    first_decision: Optional[str] = typer.Option(None, "--first-decision", metavar="DURATION|off", help="a first tuning round this long after the start, on the history seen so far (default: 3/7 of the period, day 3 of a week; 'off': none before the first period boundary)"),
    early_rounds: Optional[bool] = typer.Option(None, "--early-rounds/--no-early-rounds", help="after the first round, another round every day until the first period boundary, while the history is young and grows fastest (none without a first round; a long period gets many)  [default: on]", show_default=False),
    live_knobs: bool = typer.Option(False, "--live-knobs", help="search only the knobs the live Slurm agent may write (multifactor's priority and bf_* settings), the others pinned at the cluster's values, as `autosched agent` searches"),
    fix: list[str] = typer.Option([], "--fix", metavar="KNOB=VALUE", help="with --live-knobs: the cluster's value of a knob the agent cannot write (repeatable; the others at their defaults)"),
    skip: str = typer.Option("0", "--skip", help="ignore the trace's first SKIP (e.g. 14d) before replaying"),
    span: Optional[str] = typer.Option(None, "--span", help="replay only SPAN of the trace (e.g. 28d) after --skip"),
    seeds: int = typer.Option(1, "--seeds", help="run the experiment for seeds SEED..SEED+N-1 and print mean ± sd per strategy"),
    oracle_budget: Optional[int] = typer.Option(None, "--oracle-budget", help="trials of each oracle search (default: 10 x --budget)"),
    cache: Optional[Path] = typer.Option(None, "--cache", help="directory caching the oracles' searches (default: ~/.cache/autosched/tuning)"),
    fmt: Optional[str] = typer.Option(None, "--format", help="trace format (default: detected from the header)"),
    report: Optional[Path] = typer.Option(None, "--report", help="write an HTML report (index.html) and its data (report.json) into this directory"),
    as_json: bool = typer.Option(False, "--json", help="print the results as one JSON object"),
) -> None:
    """Replay a trace with autosched re-tuning the scheduler each period; compare with the fixed
    default, tuning on the last period, and two oracles (best fixed config in hindsight; per-period
    tuning on the real future)."""
    options = RunOptions.of(locals())  # first, while the arguments are all that is bound
    from ..adapt import KNOWN_STRATEGIES, run_experiment
    from ..adapt.cache import default_cache_dir
    from ..adapt.experiment import seeds_document

    seed = loop["seed"]
    check_seed(seed)
    if seeds < 1:
        fail(f"--seeds must be at least 1 (got {seeds})")
    check_seed(seed + seeds - 1)
    settings, names, window = options.resolve(KNOWN_STRATEGIES)
    if report is not None:
        require("matplotlib", "--report", "report")
    if settings.model == "neural":
        require("torch", "--model neural", "neural")
    trace_path, cluster_spec = default_trace_and_cluster(trace, cluster)
    outputs((trace_path, cluster_file(cluster_spec)), dirs=(report,))
    tr, cl, loaded = load_inputs(trace_path, cluster_spec, fmt, quiet=as_json)
    tr = tr.window(tr.start + window[0], tr.start + window[1])
    if len(tr) < 2 or tr.end - tr.start <= settings.period:
        fail(f"{trace_path}: the trace (after --skip/--span) spans {(tr.end - tr.start) / 86400:.1f} days, "
             f"less than two periods of {settings.period / 86400:g} days: nothing to re-tune")
    if not as_json:
        from ..cluster import cpu_sizing, cpu_sizing_text

        note(f"replaying {len(tr):,} jobs of {trace_path.name} on {cl.describe()}, policy {settings.policy}, "
             f"period {format_duration(settings.period)}, history {format_duration(settings.history)}, "
             f"budget {settings.budget} x {settings.samples} samples; CPUs: "
             f"{cpu_sizing_text(cpu_sizing(tr, cl))}")
    cache_dir = cache if cache is not None else default_cache_dir()
    results = []
    for k in range(seeds):
        with _progress(len(names)) as update:
            results.append(run_experiment(tr, cl, replace(settings, seed=seed + k), names, progress=update,
                                          cache=cache_dir))
    result = results[0]
    data = seeds_document({**result.to_dict(), "dropped": loaded.to_dict()}, [r.to_dict() for r in results[1:]])
    if report is not None:
        from ..adapt.report import build_report

        page = build_report(result).write(report, data=data)
        if not as_json:
            note(f"report: {page}")
    if as_json:
        print_json(data)
        return
    for r in results:
        _print(r)
    if seeds > 1:
        _print_seeds(data["across_seeds"])


@dataclass(frozen=True)
class RunOptions:
    """The options of `autosched run` that make its `Settings`, as given on the command line:
    the loop's (`loop`, from the shared option group `loop_flags`) and the experiment's. A new
    experiment flag is a parameter of `run_cmd` and a field here (of the same name), used in
    `resolve`: the command hands all its arguments over at once (`of`)."""

    loop: dict[str, Any]
    workers: int
    strategies: str
    first_decision: str | None
    early_rounds: bool | None  # None: the Settings' default
    skip: str
    span: str | None
    oracle_budget: int | None
    live_knobs: bool = False
    fix: Sequence[str] = ()

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> "RunOptions":
        """The options among a command's arguments (by name; the others are left out)."""
        return cls(**{f.name: arguments[f.name] for f in fields(cls)})

    def resolve(self, known: Sequence[str]) -> tuple[Settings, list[str], tuple[float, float]]:
        """Check every option up front, so that a bad one fails with one line before any work
        starts: the settings, the strategies to run (of `known`), and the window of the trace
        to replay (from its start). `Settings` checks what it holds itself (the loop's settings,
        the first decision, the oracle budget; `ExecutionConfig` the workers); only what it cannot
        see (the text as typed, the strategies, the window) is checked here."""
        from ..adapt.experiment import FIRST_DECISION
        from ..tune import ExecutionConfig

        p = self.loop["period"]
        start = parse_duration(self.skip, "--skip")
        length = parse_duration(self.span, "--span") if self.span is not None else float("inf")
        off = self.first_decision is not None and self.first_decision.strip().lower() == "off"
        first = (None if self.first_decision is None or off
                 else parse_duration(self.first_decision, "--first-decision"))
        if start < 0:
            fail(f"--skip {self.skip}: must be >= 0")
        if length <= 0:
            fail(f"--span {self.span}: must be > 0")
        if first is not None and p > 0 and not 0 < first < p:
            fail(f"--first-decision {self.first_decision} is not inside the first period "
                 f"({format_duration(p)}); use 'off' for none")
        if off and self.early_rounds:
            fail("--early-rounds follow the first round, and --first-decision off leaves none")
        if self.first_decision is None:
            fraction: float | None = FIRST_DECISION
        else:  # "off" or a duration inside the first period (a period <= 0: Settings says so)
            fraction = None if first is None or p <= 0 else first / p
        names = [s.strip() for s in self.strategies.split(",") if s.strip()]
        bad = [s for s in names if s not in known]
        if bad or not names:
            fail(f"--strategies: unknown {', '.join(bad) or '(none given)'}; use some of {', '.join(known)}")
        if self.fix and not self.live_knobs:
            fail("--fix gives the cluster's value of a knob the live agent cannot write: it needs --live-knobs")
        subspace = None
        if self.live_knobs:
            from ..export.live import live_subspace
            from ..policies import get_policy

            space = get_policy(self.loop["policy"]).space
            fixed = {}
            for item in self.fix:  # each --fix checked alone: `live_subspace` says which may be fixed
                name = item.partition("=")[0].strip()
                fixed[name] = space.parse_assignments([item])[name]
            subspace = live_subspace(self.loop["policy"], fixed)
        given: dict[str, Any] = {} if self.early_rounds is None else {"early_rounds": self.early_rounds}
        settings = Settings(**self.loop, oracle_budget=self.oracle_budget, first_decision=fraction,
                            execution=ExecutionConfig(workers=self.workers), subspace=subspace,
                            **given)
        return settings, names, (start, start + length)


@contextmanager
def _progress(n_strategies: int):
    """A progress bar on a terminal (stderr): one unit per strategy, with what is happening now."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description:<48}"), BarColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("starting", total=n_strategies)
        names: list[str] = []  # the strategies reported so far, in order

        def update(what: str, done: float, total: float) -> None:
            name = what.split(":", 1)[0]
            if not names or names[-1] != name:
                names.append(name)
            k = len(names) - 1
            bar.update(task, description=what, completed=k + (done / total if total else 0))

        yield update


def _print(result) -> None:
    console = table_console()
    s = result.strategies
    base = s.get("default")
    st = result.settings
    shares = result.summary().get("share_of_oracle_static_gain", {})
    table = Table(title=f"{st.policy} on {result.cluster}, {result.jobs:,} jobs, seed {st.seed}", header_style="bold",
                  caption=f"tuning: {st.budget} trials a round; oracles: {st.oracle_budget} trials a search"
                          + ("; of gain: share of oracle_static's gain over the default" if shares else ""))
    cols = ("strategy", "avg JCT", "vs default", *(("of gain",) if shares else ()), "p99 JCT", "avg queue", "util",
            "per period vs default", "deployed")
    for col in cols:
        table.add_column(col, justify="left" if col in ("strategy", "per period vs default") else "right",
                         no_wrap=col == "strategy")
    for name, r in s.items():
        m = r.metrics
        rel = f"{m.avg_jct / base.metrics.avg_jct - 1:+.1%}" if base else ""
        per = " ".join(f"{p.metrics.avg_jct / b.metrics.avg_jct - 1:+.0%}" if b.metrics.jobs else "-"
                       for p, b in zip(r.periods, base.periods)) if base else ""
        dep = f"{sum(d.deployed for d in r.decisions)}/{len(r.decisions)}" if r.decisions else "-"
        label = f"[red]{name}[/] (oracle)" if r.oracle else name
        sh = shares.get(name)
        table.add_row(label, _h(m.avg_jct), rel, *(("" if sh is None else f"{sh:.0%}",) if shares else ()), _h(m.p99_jct), _h(m.avg_queue), f"{m.utilization:.2f}", per, dep)
    console.print(table)
    summ = result.summary()
    share = summ.get("autosched_share_of_oracle_period_gain")
    if share is not None:
        console.print(f"autosched captured {share:.0%} of the per-period oracle's gain over the default")
    elif "autosched" in s and "oracle_period" in s:
        console.print("the per-period oracle did not beat the default: there was no gain to capture")
    if "autosched_beats_last_period" in summ:
        console.print("autosched " + ("beat" if summ["autosched_beats_last_period"] else "did not beat")
                      + " tuning on the last period")
    after = {k: v for k, v in summ.get("share_of_oracle_static_gain_after_p0", {}).items()
             if v is not None and k not in ("default", "oracle_static")}
    if after:
        console.print("share of oracle_static's gain on the jobs submitted after period 0 (the others run the "
                      "default in period 0 until their first round): " + ", ".join(f"{k} {v:.0%}" for k, v in after.items()))
    within = {k: v for k, v in summ.get("share_of_oracle_static_policy_gain", {}).items()
              if v is not None and k != "default"}
    if within:
        console.print("share of oracle_static_policy's gain (ORACLE: the best fixed config that keeps to the "
                      "operator's policy in every period): " + ", ".join(f"{k} {v:.0%}" for k, v in within.items()))
    breaks = summ.get("periods_breaking_policy", {})
    if any(breaks.values()):
        console.print(f"periods (of {len(result.boundaries) - 1}) that break the operator's policy against the "
                      "default: " + ", ".join(f"{k} {v}" for k, v in breaks.items() if k != "default"))
    worst = summ.get("worst_period_vs_default", {}).get("autosched")
    if worst is not None:
        console.print(f"autosched's worst period vs the default: {worst - 1:+.1%}")
    if "autosched" in s:
        for d in s["autosched"].decisions:
            verb = "[green]deployed[/]" if d.deployed else "kept"
            knobs = ", ".join(f"{k} {_v(a)}->{_v(b)}" for k, (a, b) in d.knobs_changed.items())
            leader = f" {d.leader}:" if d.leader else ""
            console.print(f"  day {(d.time - result.boundaries[0]) / 86400:5.1f} ({d.trigger}): {verb};{leader} {d.reason}"
                          + (f"; {knobs}" if knobs and d.deployed else ""))


def _print_seeds(summary: dict) -> None:
    """Mean ± sd over the seeds, and whether autosched's lead over last_period beats the spread."""
    console = table_console()
    n = len(summary["seeds"])
    table = Table(title=f"over {n} seeds ({', '.join(map(str, summary['seeds']))}): mean ± sd", header_style="bold")
    for col in ("strategy", "avg JCT vs default", "share of oracle_static gain", "the same, after period 0"):
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for name, st in summary["relative_avg_jct"].items():
        shares = [summary.get(key, {}).get(name) for key in
                  ("share_of_oracle_static_gain", "share_of_oracle_static_gain_after_p0")]
        table.add_row(name, f"{st['mean'] - 1:+.1%} ± {st['sd']:.1%}",
                      *("" if sh is None else f"{sh['mean']:.0%} ± {sh['sd']:.0%}" for sh in shares))
    console.print(table)
    within = summary.get("share_of_oracle_static_policy_gain", {})
    if within:
        console.print("share of oracle_static_policy's gain (ORACLE, within the operator's policy): " + ", ".join(
            f"{k} {v['mean']:.0%} ± {v['sd']:.0%}" for k, v in within.items() if k != "default"))
    lead = summary.get("autosched_lead_over_last_period")
    if lead is not None:
        verdict = "larger" if lead["larger_than_spread"] else "NOT larger"
        console.print(f"autosched's lead over last_period: {lead['mean']:+.1%} of the default's avg JCT "
                      f"± {lead['sd']:.1%} across seeds: {verdict} than the spread")


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def _v(x) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)
