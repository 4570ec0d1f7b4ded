"""``autosched simulate`` and ``autosched policies``."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..associations import read_associations
from ..cluster import read_slurm_partitions
from ..errors import AutoschedError
from ..policies import Policy, PolicyLoadError, available_policies, get_policy, policy_identity
from ..space import ConfigError, read_config_file
from .common import (
    cluster_file,
    default_trace_and_cluster,
    fail,
    fmt_metric,
    fmt_value,
    load_inputs,
    outputs,
    print_json,
    progress_bar,
    table_console,
)

if TYPE_CHECKING:  # the engine is imported inside the command (start-up time)
    from ..sim import SimResult, Simulator


def build_policy(name: str, sets: list[str], config_file: Path | None) -> Policy:
    """A policy from its name (as `get_policy` takes it), an optional config file and
    ``knob=value`` overrides."""
    cls = get_policy(name)
    base: dict = {}
    if config_file is not None:
        file_policy, base = read_config_file(config_file)
        if file_policy is not None and file_policy not in (name, cls.name):  # (a file names a plugin by its name)
            raise ConfigError(f"{config_file}: the config is for policy {file_policy!r}, not {cls.name!r}")
        base = cls.space.validate(base)
    return cls(cls.space.parse_assignments(sets, base))


@contextmanager
def plugin_errors(name: str, pol: Policy) -> Iterator[None]:
    """A plugin policy's own exception as one line naming the plugin (its traceback is for its
    author: `autosched.policies.battery.check_policy` runs it case by case); a built-in policy's
    rises as it is (a bug of autosched)."""
    try:
        yield
    except AutoschedError:
        raise
    except Exception as e:
        if policy_identity(type(pol)) == pol.name:
            raise
        raise PolicyLoadError(f"policy {name!r} raised {type(e).__name__}: {e} (check it with "
                              "autosched.policies.battery.check_policy, docs/extending.md)") from e


def policy_from_config_file(config_file: Path) -> str | None:
    """The policy a config file names: a name only (built in, or an installed entry point's). A
    ``module:Class`` there would import a module because a file said so; it is refused unless
    ``--policy`` gives the same spec (`build_policy` checks that the two agree)."""
    name, _ = read_config_file(config_file)
    if name is not None and ":" in name:
        raise ConfigError(f"{config_file}: names the policy {name!r}, a module to import; a config "
                          "file names a policy by its name only: to load that module, give "
                          f"--policy {name}")
    return name


def simulate_cmd(
    trace: Optional[Path] = typer.Argument(None, help="trace file (any supported format); default: the bundled Philly sample"),
    cluster: Optional[str] = typer.Option(None, "--cluster", "-c", help="NODESxGPUS[,CPUs=C][,DefCpuPerGPU=D] (e.g. 32x8; 11x8,CPUs=40) or a VC file (vc,nodes); required with a trace"),
    policy: Optional[str] = typer.Option(None, "--policy", "-p", help="scheduling policy: a name (see `autosched policies`) or MODULE:CLASS; default fifo, or the one named in --config"),
    set_: list[str] = typer.Option([], "--set", "-s", help="knob=value (repeatable)"),
    config: Optional[Path] = typer.Option(None, "--config", help="JSON config file, as written by `autosched tune`"),
    fmt: Optional[str] = typer.Option(None, "--format", help="trace format (default: detected from the header)"),
    strict: bool = typer.Option(False, "--strict", help="fail on the first row that cannot be simulated instead of dropping it"),
    as_json: bool = typer.Option(False, "--json", help="print the metrics as one JSON object"),
    jobs_out: Optional[Path] = typer.Option(None, "--jobs-out", help="write per-job records (.csv or .parquet)"),
    restart_overhead: str = typer.Option("40,60", "--restart-overhead", help="seconds a preempted job pays when it resumes: SMALL,LARGE for jobs of <= 8 GPUs and above (Lucid: 40,60; Tiresias: 0,0)"),
    slurm_assoc: Optional[Path] = typer.Option(None, "--slurm-assoc", help="Slurm's association tree for multifactor's fair share, as `sacctmgr -P show assoc format=Account,User,ParentName,Share` prints it (default: the trace's accounts and users)"),
    slurm_partitions: Optional[Path] = typer.Option(None, "--slurm-partitions", help="Slurm partitions for multifactor: CSV partition,nodes,priority_tier[,billing_weights] (nodes from 0, e.g. 0-3; billing_weights as \"CPU=1.0,GRES/gpu=4.0\", in place of the TRESBillingWeights knobs); jobs use the trace's 'partition' column"),
) -> None:
    """Replay a trace on a cluster under a policy and print the metrics."""
    from ..sim import Simulator, result_of

    outputs((trace, config, cluster_file(cluster), slurm_assoc, slurm_partitions), (jobs_out,))
    name = policy or (policy_from_config_file(config) if config else None) or "fifo"
    pol = build_policy(name, set_, config)
    overhead = _parse_overhead(restart_overhead)
    trace_path, cluster_spec = default_trace_and_cluster(trace, cluster)
    tr, cl, report = load_inputs(trace_path, cluster_spec, fmt, strict, quiet=as_json)
    cl = replace(cl, restart_overhead=overhead)
    if slurm_assoc is not None:
        cl = replace(cl, associations=read_associations(slurm_assoc))
    if slurm_partitions is not None:
        cl = replace(cl, slurm_partitions=read_slurm_partitions(slurm_partitions))
    with progress_bar(f"simulating {len(tr):,} jobs", len(tr)) as update, plugin_errors(name, pol):
        sim = Simulator(tr, cl, pol, progress=update).run()
    res = result_of(sim)
    if jobs_out is not None:
        from ..sim.records_io import write_records

        write_records(res.records, tr, jobs_out)
    notes = _run_notes(sim, res)
    if as_json:
        out = {"policy": pol.name, "oracle": pol.oracle, "config": pol.config,
               "cluster": cl.describe(), **notes, **res.metrics.to_dict(), "dropped": report.to_dict()}
        print_json(out)
        return
    _print_metrics(pol, cl.describe(), str(trace_path), res.metrics, notes)


def _run_notes(sim: Simulator[Policy], res: SimResult) -> dict[str, str | int]:
    """What the run did that the metrics do not say: which backfill ran (multifactor), how many
    jobs were ended at their time limit (traces with limits)."""
    notes: dict[str, str | int] = {}
    kind = sim.policies[0].backfill_kind
    if kind is not None:
        notes["backfill"] = kind
    if sim.trace.time_limit is not None and res.records.killed is not None:
        notes["killed_at_limit"] = int(res.records.killed.sum())
    return notes


def _parse_overhead(text: str) -> tuple[float, float]:
    try:
        small, large = (float(x) for x in text.split(","))
    except ValueError:
        fail(f"--restart-overhead {text!r}: expected two numbers of seconds, SMALL,LARGE (e.g. 40,60)")
    if not (0 <= small < float("inf") and 0 <= large < float("inf")):
        fail(f"--restart-overhead {text!r}: overheads must be finite and >= 0 seconds")
    return small, large


def _print_metrics(pol: Policy, cluster: str, trace: str, m, notes: dict | None = None) -> None:
    from rich.table import Table

    from ..sim import METRIC_HELP

    console = table_console()
    oracle = " [bold red](oracle: reads true durations)[/]" if pol.oracle else ""
    console.print(f"[bold]{pol.name}[/]{oracle} on {cluster}, trace {trace}")
    console.print("config: " + ", ".join(f"{k}={fmt_value(v)}" for k, v in pol.config.items()))
    for k, v in (notes or {}).items():
        console.print(f"{k}: {v}", markup=False)
    table = Table(show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("meaning", style="dim")
    for key, value in m.to_dict().items():
        table.add_row(key, fmt_metric(key, value), METRIC_HELP[key][0])
    console.print(table)


def policies_cmd(
    name: Optional[str] = typer.Argument(None, help="a policy to show in full (a name or MODULE:CLASS)"),
    as_json: bool = typer.Option(False, "--json", help="print as JSON"),
) -> None:
    """List the scheduling policies (built-in and installed plugins') and their knobs."""
    chosen = [get_policy(name)] if name else list(available_policies().values())
    if as_json:
        print_json({cls.name: {"summary": cls.summary, "oracle": cls.oracle, "preemptive": cls.preemptive,
                               "knobs": {k.name: {"type": type(k).__name__.lower(), "range": k.describe(),
                                                  "default": k.default, "help": k.help,
                                                  "condition": k.condition} for k in cls.space}}
                    for cls in chosen})
        return
    from rich.table import Table

    console = table_console()
    for cls in chosen:
        tag = " [bold red]ORACLE[/] (reads true job durations; a baseline, not deployable)" if cls.oracle else ""
        console.print(f"[bold cyan]{cls.name}[/]: {cls.summary}{tag}")
        if name:
            doc = re.sub(r"(?<!\n)\n(?!\n)", " ", inspect.cleandoc(cls.__doc__ or ""))  # unwrap paragraphs
            console.print(doc + "\n", style="dim", markup=False)
        table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
        for col in ("knob", "type / range", "default", "help"):
            table.add_column(col)
        for k in cls.space:
            cond = f" (when {k.condition[0]} = {'/'.join(map(str, k.condition[1]))})" if k.condition else ""
            table.add_row(k.name, k.describe(), fmt_value(k.default), k.help + cond)
        console.print(table)
        console.print()
