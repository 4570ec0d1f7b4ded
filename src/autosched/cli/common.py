"""Pieces every command shares: loading inputs, progress, JSON output. (Errors: commands let
them rise; `autosched.cli._one_line_errors` prints them as one line.)"""

from __future__ import annotations

import importlib.util
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import typer

from ..atomic import check_output, is_stdout, protect_inputs
from ..cluster import ClusterSpec, fit_to_cluster, parse_cluster
from ..jsonable import jsonable
from ..trace import LoadReport, Trace, load_trace


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {' '.join(message.splitlines())}", err=True)  # one line, always
    raise typer.Exit(code)


def note(message: str) -> None:
    typer.echo(message, err=True)


def require(module: str, what: str, extra: str) -> None:
    """Fail at once, before any work, when an optional dependency a chosen option needs is missing."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: blocked in sys.modules (set to None)
        found = False
    if not found:
        fail(f"{what} needs {module}, which is not installed: pip install 'autosched[{extra}]'")


MAX_SEED = 2**32 - 1  # the samplers' seeding (NumPy's legacy RandomState) takes no more


def check_seed(seed: int) -> None:
    """A random seed is an integer in [0, 2**32 - 1]: say so before any work, not in a traceback."""
    if not 0 <= seed <= MAX_SEED:
        fail(f"--seed must be in [0, {MAX_SEED}] (got {seed})")


def outputs(inputs: tuple, outs: tuple = (), stream: tuple = (), dirs: tuple = ()) -> None:
    """Declare a command's input files and check its output files up front (see autosched.atomic):
    an output that is a directory, device or FIFO, or one of the inputs, fails before any work.
    Outputs in `stream` may be ``-`` (standard output); `dirs` are output directories (reports)."""
    protect_inputs(*inputs)
    for out in outs + stream:
        if out is not None and not (out in stream and is_stdout(out)):
            check_output(out)
    for d in dirs:
        if d is not None and d.exists() and not d.is_dir():
            fail(f"{d}: is not a directory; a report is a directory (index.html, report.json)")


def cluster_file(spec: str | None) -> Path | None:
    """The cluster spec as a file to protect, if it names one (``32x8`` does not)."""
    return Path(spec) if spec is not None and Path(spec).is_file() else None


def default_trace_and_cluster(trace: Path | None, cluster: str | None) -> tuple[Path, str]:
    """With no trace, use the bundled sample (and its cluster, unless one is given)."""
    if trace is not None:
        if cluster is None:
            fail("--cluster is required with a trace (e.g. --cluster 32x8, or a VC file such as philly_vc_nodes.csv)")
        return trace, cluster
    from ..data import SAMPLE_CLUSTER, sample_path

    return sample_path(), cluster or SAMPLE_CLUSTER


def load_inputs(trace_path: Path, cluster_spec: str, fmt: str | None = None,
                strict: bool = False, quiet: bool = False) -> tuple[Trace, ClusterSpec, LoadReport]:
    """Load a trace and a cluster, drop (and report) jobs the cluster cannot run.

    Drops are always reported on stderr; `quiet` (under ``--json``) leaves out a report of notes only."""
    protect_inputs(trace_path, cluster_file(cluster_spec))
    cluster = parse_cluster(cluster_spec)
    trace, report = load_trace(trace_path, format=fmt, strict=strict)
    trace, report = fit_to_cluster(trace, cluster, strict=strict, report=report)
    if report.dropped or (report.notes and not quiet):  # drops go to stderr under --json too
        note(report.summary())
    if len(trace) == 0:
        fail(f"{trace_path}: no jobs left to simulate")
    return trace, cluster, report


def print_json(obj: Any) -> None:
    json.dump(jsonable(obj), sys.stdout, indent=2)
    sys.stdout.write("\n")


@contextmanager
def progress_bar(description: str, total: int, enabled: bool = True):
    """A rich progress bar on a terminal (stderr); a no-op callback elsewhere.

    Yields ``update(done, total)``.
    """
    if not enabled or not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def fmt_value(v: Any) -> str:
    """A knob's value in a result table: floats in the shortest form (``%g``), the rest as is."""
    return f"{v:g}" if isinstance(v, float) else str(v)


def fmt_metric(key: str, v: float | int) -> str:
    """A metric's value in a result table: counts with thousands separators, ratios to three
    decimals, times in seconds and hours."""
    if isinstance(v, int):
        return f"{v:,}"
    if key in ("utilization", "fairness", "avg_slowdown"):
        return f"{v:.3f}"
    return f"{v:,.0f} s ({v / 3600:.2f} h)"


PIPED_WIDTH = 160  # columns of a result table written to a file, a pipe or a CI log


def table_console() -> Any:
    """A rich console for result tables: the terminal's width, or `PIPED_WIDTH` columns when the
    output is not a terminal (rich would assume 80 and cut every number in a wide table)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=PIPED_WIDTH)
