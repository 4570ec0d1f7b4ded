"""``autosched trace inspect``, ``autosched trace convert`` and ``autosched trace limits``.

Only typer is imported at start-up; loading, summarising and rendering are imported when a
command runs, so ``autosched --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from ..atomic import output_path
from .common import table_console

if TYPE_CHECKING:
    from ..cluster import ClusterSpec
    from ..trace import LoadReport, Trace

trace_app = typer.Typer(help="Inspect job traces, convert them to autosched's canonical CSV/Parquet, and give them time limits.",
                        no_args_is_help=True)

_FORMAT_HELP = ("trace format (default: detected from the header): canonical, philly, itp, helios, "
                "philly-json, slurm, parquet")


@trace_app.command("inspect")
def inspect_cmd(
    trace: Path = typer.Argument(..., help="trace file (any supported format, gzip or not)"),
    fmt: Optional[str] = typer.Option(None, "--format", help=_FORMAT_HELP),
    cluster: Optional[str] = typer.Option(
        None, "--cluster", "-c",
        help="NODESxGPUS[,CPUs=C][,DefCpuPerGPU=D] (e.g. 32x8) or a VC file (vc,nodes): adds offered load and how jobs are sized in CPUs, and drops jobs it cannot run"),
    strict: bool = typer.Option(False, "--strict", help="fail on the first row that cannot be simulated instead of dropping it"),
    as_json: bool = typer.Option(False, "--json", help="print the summary and the drop report as one JSON object"),
) -> None:
    """Summarise a trace: jobs, span, GPU-hours, offered load, size and duration mix, per VC, and
    what was dropped and why."""
    from ..cluster import cpu_sizing
    from ..trace import summarize
    from .common import print_json

    tr, report, spec = _load(trace, fmt, cluster, strict)
    summary = summarize(tr, **_capacity(spec))
    # how jobs are sized in CPUs (Slurm's job-size factor counts them): a cluster's rule
    sizing = cpu_sizing(tr, spec) if spec is not None else None
    if as_json:
        print_json({**summary.to_dict(), "cpus": sizing, "load_report": report.to_dict()})
        return
    _render(summary, report, sizing)


@trace_app.command("convert")
def convert_cmd(
    source: Path = typer.Argument(..., help="trace file to read (any supported format)"),
    out: Path = typer.Argument(..., parser=output_path,
                               help="file to write: .csv, .csv.gz or .parquet (canonical columns); - for CSV on stdout"),
    fmt: Optional[str] = typer.Option(None, "--format", help=_FORMAT_HELP),
    strict: bool = typer.Option(False, "--strict", help="fail on the first row that cannot be simulated instead of dropping it"),
) -> None:
    """Convert a trace to canonical CSV or Parquet (the drop report goes to stderr)."""
    from ..trace import load_trace, write_trace
    from .common import fail, note, outputs

    stdout = str(out) == "-"
    outputs((source,), stream=(out,))
    if not stdout and not out.name.lower().endswith((".csv", ".csv.gz", ".parquet", ".pq")):
        fail(f"{out}: the output name must end in .csv, .csv.gz or .parquet (or be - for CSV on stdout)")
    tr, report = load_trace(source, format=fmt, strict=strict)
    _some_jobs(source, tr, report)
    write_trace(tr, out)
    note(report.summary())
    note(f"wrote {len(tr):,} jobs to {'stdout' if stdout else out}")


@trace_app.command("limits")
def limits_cmd(
    trace: Path = typer.Argument(..., help="trace file to read (any supported format)"),
    out: Path = typer.Option(..., "--out", "-o", help="file to write: canonical CSV (.csv or .csv.gz), every column kept, time_limit filled; - for stdout"),
    seed: int = typer.Option(0, "--seed", help="random seed of the drawn limits"),
    max_limit: Optional[str] = typer.Option(None, "--max-limit", help="the site's longest allowed limit (e.g. 7d); default: 1, 2, 3, 7, 14 or 30 days, the first at least the longest job"),
    fmt: Optional[str] = typer.Option(None, "--format", help=_FORMAT_HELP),
    strict: bool = typer.Option(False, "--strict", help="fail on the first row that cannot be simulated instead of dropping it"),
) -> None:
    """Give every job without a time limit one, drawn from Tsafrir, Etsion & Feitelson's model
    of user runtime estimates (a few round values are popular, the site's maximum most; a limit
    is never below the run time). Where the trace has VCs and no accounts, the VC becomes the
    account (and the user, without users). See docs/traces.md."""
    from ..timeparse import parse_duration
    from ..trace import load_trace, write_trace
    from ..trace.limits import add_time_limits
    from .common import check_seed, fail, note, outputs

    check_seed(seed)
    stdout = str(out) == "-"
    if not stdout and not out.name.lower().endswith((".csv", ".csv.gz")):
        fail(f"{out}: the output name must end in .csv or .csv.gz (canonical CSV), or be - for stdout")
    top = parse_duration(max_limit, "--max-limit") if max_limit is not None else None
    outputs((trace,), stream=(out,))
    tr, report = load_trace(trace, format=fmt, strict=strict)
    _some_jobs(trace, tr, report)
    limited, done = add_time_limits(tr, seed=seed, max_limit=top)
    write_trace(limited, out)
    note(report.summary())
    note(done.summary())
    note(f"wrote {len(limited):,} jobs to {'stdout' if stdout else out}")


def _some_jobs(path: Path, tr: Trace, report: LoadReport) -> None:
    """Fail, writing nothing, when no job is left to write: a script must not read an empty
    output as success."""
    from .common import fail, note

    if len(tr) == 0:
        if report.rows:
            note(report.summary())
        fail(f"{path}: no jobs to write ({'every row was dropped' if report.rows else 'no rows'}); "
             "nothing written")


def _load(trace: Path, fmt: str | None, cluster: str | None, strict: bool):
    from ..cluster import fit_to_cluster, parse_cluster
    from ..trace import load_trace

    spec = parse_cluster(cluster) if cluster else None  # a bad spec fails before a long load
    tr, report = load_trace(trace, format=fmt, strict=strict)
    if spec is not None:
        tr, report = fit_to_cluster(tr, spec, strict=strict, report=report)
    return tr, report, spec


def _capacity(spec: ClusterSpec | None) -> dict[str, Any]:
    """What `summarize` needs of the cluster, as plain values (the trace layer sits below the
    cluster's): its label, its GPUs and, when it has VCs, each VC's GPUs."""
    if spec is None:
        return {}
    vc_gpus = {} if spec.uniform else {name: g for (name, _), g in zip(spec.vc_nodes, spec.partition_gpus())}
    return {"cluster": spec.describe(), "cluster_gpus": spec.gpus, "vc_gpus": vc_gpus}


def _render(s, report, sizing: dict[str, Any] | None) -> None:
    from rich.table import Table

    from ..cluster import cpu_sizing_text

    console = table_console()
    console.print(f"[bold]{s.source}[/] ({report.format})")
    load = "n/a (give --cluster)" if s.cluster is None else (
        f"{s.offered_load:.3f} on {s.cluster}" if s.offered_load is not None else f"n/a (zero span) on {s.cluster}")
    facts = Table(show_header=False, box=None, padding=(0, 2))
    for key, value in (("jobs", f"{s.jobs:,}"),
                       ("span", f"{s.span_days:.2f} days (first to last submit)"),
                       ("GPU-hours", _hours(s.gpu_hours)),
                       ("offered load", load),
                       ("duration", f"median {s.median_duration:,.0f} s, mean {s.mean_duration:,.0f} s"),
                       ("largest job", f"{s.max_gpus} GPUs"),
                       ("CPUs", "n/a (give --cluster)" if sizing is None else cpu_sizing_text(sizing)),
                       ("users", "n/a (no user column)" if s.users is None else f"{s.users:,}"),
                       ("status", ", ".join(f"{k} {v:,}" for k, v in s.statuses) or "n/a (no status column)")):
        facts.add_row(key, value)
    console.print(facts)
    console.print(_mix_table("GPUs per job", s.sizes), _mix_table("duration", s.durations))
    if s.vcs:
        console.print(_vc_table(s))
    console.print(report.summary(), highlight=False, markup=False, soft_wrap=True)


def _mix_table(title: str, buckets):
    from rich.table import Table

    table = Table(title=title, title_justify="left", header_style="bold")
    for col in ("bucket", "jobs", "% jobs", "GPU-hours", "% GPU-hours"):
        table.add_column(col, justify="left" if col == "bucket" else "right")
    for b in buckets:
        table.add_row(b.label, f"{b.jobs:,}", f"{100 * b.job_share:.1f}", _hours(b.gpu_hours),
                      f"{100 * b.gpu_hour_share:.1f}")
    return table


def _vc_table(s):
    from rich.table import Table

    with_load = s.cluster is not None and any(v.gpus is not None for v in s.vcs)
    table = Table(title="per virtual cluster", title_justify="left", header_style="bold")
    for col in ("vc", "jobs", "GPU-hours", "% GPU-hours") + (("GPUs", "offered load") if with_load else ()):
        table.add_column(col, justify="left" if col == "vc" else "right")
    for v in s.vcs:
        row = [v.vc, f"{v.jobs:,}", _hours(v.gpu_hours), f"{100 * v.share:.1f}"]
        if with_load:
            row += ["-" if v.gpus is None else f"{v.gpus:,}",
                    "-" if v.offered_load is None else f"{v.offered_load:.3f}"]
        table.add_row(*row)
    return table


def _hours(h: float) -> str:
    return f"{h:,.1f}" if h < 100 else f"{h:,.0f}"
