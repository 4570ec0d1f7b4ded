"""Pieces every command shares: loading inputs, progress, JSON output. (Errors: commands let
them rise; `autosched.cli._one_line_errors` prints them as one line.)"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer

from ..atomic import check_output, is_stdout, protect_inputs
from ..cluster import ClusterSpec, fit_to_cluster, parse_cluster
from ..jsonable import jsonable
from ..timeparse import format_duration, parse_duration
from ..trace import LoadReport, Trace, load_trace


def default_state() -> Path:
    """The live agent's state directory when ``--state`` is not given."""
    return Path(os.environ.get("AUTOSCHED_STATE") or Path.home() / ".autosched")


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


def check_seed(seed: int) -> None:
    """A random seed is an integer in [0, 2**32 - 1]: say so before any work, not in a traceback."""
    from ..adapt.config import MAX_SEED

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


# ------------------------------------------------------------------ the loop's options (run, agent init)

@dataclass(frozen=True)
class LoopFlag:
    """One option of the loop's settings (`autosched.adapt.LoopConfig`), shared by `autosched run`
    and `autosched agent init`, made from the setting's declaration (`adapt.setting`): the field
    it sets, its spellings and its help. The default shown is the command's own settings class's
    (run's and the live agent's differ on purpose)."""

    field: str
    decls: tuple[str, ...]  # "--samples", "-k"; a flag pair: "--drift/--no-drift"
    help: str
    kind: Any  # the option's type as typed (a duration is text: 7d)
    duration: bool = False  # text such as 7d or 12h, given to the settings in seconds
    hidden: tuple[str, ...] = ()  # old spellings, still taken, not shown


def declared_flags(cls: type, names: Iterable[str] | None = None) -> tuple[LoopFlag, ...]:
    """The options of the declared settings of `cls` that have a flag (of `names` only, when
    given), in field order."""
    import typing

    from ..adapt.setting import settings_of

    hints = typing.get_type_hints(cls)
    return tuple(LoopFlag(name, s.flags, s.help, _option_type(hints[name], s.duration),
                          s.duration, s.hidden)
                 for name, s in settings_of(cls).items()
                 if s.flags and (names is None or name in names))


def _option_type(hint: Any, duration: bool = False) -> Any:
    """The option's type for a setting's annotation (`X | None` as typer reads it; a duration is
    typed as text: 7d)."""
    import types
    import typing

    if duration:
        return Optional[str] if isinstance(hint, types.UnionType) else str

    if isinstance(hint, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return Optional[args[0]] if len(args) == 1 else hint
    if typing.get_origin(hint) is tuple:  # a repeatable option (typer takes a list; the settings a tuple)
        return list[typing.get_args(hint)[0]]  # type: ignore[misc]
    return hint


@functools.cache
def loop_flags() -> tuple[LoopFlag, ...]:
    """The loop's options (`LoopConfig`'s declared settings with a flag), shared by `run` and
    `agent init`; made when a command that takes them is built (the settings import the
    policies, which ``autosched --help`` does not need)."""
    from ..adapt.config import LoopConfig

    return declared_flags(LoopConfig)
LOOP: Any = object()  # the default of a command's parameter ``loop``, where `loop_options` puts the options


def loop_options(settings: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the loop's options (`loop_flags`) in place of its parameter ``loop``, with
    the defaults of `settings` (a `LoopConfig` class); the command is called with ``loop``, the
    values given by field (durations parsed to seconds), for `settings` to check."""
    return settings_options(settings, loop_flags(), "loop")


def settings_options(settings: type, flags: tuple[LoopFlag, ...], param: str
                     ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the options `flags` (of declared settings of `settings`) in place of its
    parameter `param`, with the defaults of `settings`; the command is called with `param`, the
    values given by field (durations parsed to seconds), for `settings` to check."""
    from dataclasses import fields

    defaults = {f.name: f.default for f in fields(settings) if f.name in {x.field for x in flags}}

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(command, eval_str=True)
        params: list[inspect.Parameter] = []
        for p in sig.parameters.values():
            params += _loop_parameters(flags, defaults, p.kind) if p.name == param else [p]

        @functools.wraps(command)
        def run(**kwargs: Any) -> Any:
            values, rest = split_loop(kwargs, settings, flags)
            return command(**rest, **{param: values})

        run.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return decorate


def split_loop(arguments: Mapping[str, Any], settings: type,
               flags: tuple[LoopFlag, ...] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A command's `arguments`, by name, as `settings_options` takes them apart: the values of
    `flags` by field (durations parsed to seconds; an old spelling of a flag given with the new
    one fails) for `settings` to check, and the command's other arguments."""
    from dataclasses import fields

    defaults = {f.name: f.default for f in fields(settings)}
    rest = dict(arguments)
    loop = {}
    for flag in flags if flags is not None else loop_flags():
        value = rest.pop(flag.field)
        for spelling in flag.hidden:
            old = rest.pop(_alias(spelling))
            if old is not None and value != _shown(flag, defaults[flag.field]):
                fail(f"{flag.decls[0]} and {spelling} are one option (the second is its old name); give it once")
            value = old if old is not None else value
        if flag.kind == list[str]:  # a repeatable option: the settings hold a tuple
            value = tuple(value or ())
        loop[flag.field] = parse_duration(value, flag.decls[0]) if flag.duration and value is not None else value
    return loop, rest


def _loop_parameters(flags: tuple[LoopFlag, ...], defaults: dict[str, Any], kind: Any) -> list[inspect.Parameter]:
    out = []
    for flag in flags:
        default = _shown(flag, defaults[flag.field])
        out.append(inspect.Parameter(flag.field, kind, annotation=flag.kind,
                                     default=typer.Option(default, *flag.decls, help=flag.help)))
        for spelling in flag.hidden:
            out.append(inspect.Parameter(_alias(spelling), kind,
                                         annotation=Optional[flag.kind],
                                         default=typer.Option(None, spelling, hidden=True)))
    return out


def _shown(flag: LoopFlag, default: Any) -> Any:
    """A setting's default as its option shows it (a duration as text: 7d; a repeatable option's
    as a list)."""
    if flag.kind == list[str]:
        return list(default)
    return format_duration(default) if flag.duration and default is not None else default


def _alias(spelling: str) -> str:
    return "old_" + spelling.lstrip("-").replace("-", "_")
