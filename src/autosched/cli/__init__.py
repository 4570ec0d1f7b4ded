"""The ``autosched`` command line. Each command (group) lives in its own module.

Modules are imported only for the command being run: ``autosched simulate`` is timed end to end
(the tuner runs it thousands of times), so it must not pay for the tuner's or the workload
models' imports.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from typing import Any

import typer

from ..atomic import output_scope
from ..errors import AutoschedError

# name -> (module, attribute, is a group of subcommands)
COMMANDS: dict[str, tuple[str, str, bool]] = {
    "simulate": (".simulate", "simulate_cmd", False),
    "policies": (".simulate", "policies_cmd", False),
    "trace": (".trace_cmd", "trace_app", True),
    "workload": (".workload_cmd", "workload_app", True),
    "tune": (".tune_cmd", "tune_cmd", False),
    "run": (".run_cmd", "run_cmd", False),
    "agent": (".agent_cmd", "agent_app", True),
    "slurm": (".slurm_cmd", "slurm_app", True),
}


def build_app(only: str | None = None) -> typer.Typer:
    """The app with every command, or with just `only` (what ``main`` runs)."""
    app = typer.Typer(
        help="autosched: keep a GPU cluster's scheduler well configured as its workload drifts.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)  # keeps the app a group of commands even when only one is registered
    for name, (module, attr, group) in COMMANDS.items():
        if only is not None and name != only:
            continue
        obj = getattr(importlib.import_module(module, __name__), attr)
        if group:
            for cmd in obj.registered_commands:
                cmd.callback = _one_line_errors(cmd.callback)
            app.add_typer(obj, name=name)
        else:
            app.command(name)(_one_line_errors(obj))
    return app


def _one_line_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """The one place the CLI turns an `AutoschedError`, or an `OSError` about a named file (one
    that cannot be opened, read or written), into ``error: <message>`` and exit code 2.

    Commands let those errors rise; anything else that escapes is a bug and keeps its
    traceback."""
    if getattr(command, "_one_line", False):  # build_app may run more than once
        return command

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            with output_scope():  # the inputs this command protects from its own outputs
                return command(*args, **kwargs)
        except AutoschedError as e:
            message = str(e)
        except OSError as e:
            if e.filename is None:
                raise  # no file named: a pipe, a socket, a leak of descriptors... a bug's traceback
            message = _file_message(e)
        typer.echo(f"error: {' '.join(message.splitlines())}", err=True)  # one line, always
        raise typer.Exit(2) from None

    run._one_line = True  # type: ignore[attr-defined]
    return run


def _file_message(e: OSError) -> str:
    """An OSError about a file, the file first (``trace.csv: No such file or directory``), as the
    project's messages name their file."""
    if not e.strerror:
        return str(e)
    where = f"{e.filename} -> {e.filename2}" if e.filename2 is not None else f"{e.filename}"
    return f"{where}: {e.strerror}"


def _root() -> None:
    """autosched: keep a GPU cluster's scheduler well configured as its workload drifts."""


def __getattr__(name: str):
    if name == "app":  # the full app, built on first use (tests drive it with CliRunner)
        globals()["app"] = full = build_app()
        return full
    raise AttributeError(name)


def main() -> None:
    from .streams import guard

    streams = guard()  # a failed write to stdout is one line; a message lost from stderr, exit code 2
    command = sys.argv[1] if len(sys.argv) > 1 else None
    try:
        build_app(command if command in COMMANDS else None)()
        code: int | str | None = 0
    except SystemExit as e:
        code = e.code
    sys.exit(streams.finish(code))
