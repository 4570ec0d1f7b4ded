"""The ``autosched`` command line. Each command group lives in its own module."""

from __future__ import annotations

import typer

from .run_cmd import run_cmd
from .simulate import policies_cmd, simulate_cmd
from .workload_cmd import workload_app
from .tune_cmd import tune_cmd
from .trace_cmd import trace_app

app = typer.Typer(
    help="autosched: keep a GPU cluster's scheduler well configured as its workload drifts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("simulate")(simulate_cmd)
app.command("policies")(policies_cmd)
app.command("run")(run_cmd)
app.command("tune")(tune_cmd)
app.add_typer(trace_app, name="trace")
app.add_typer(workload_app, name="workload")


def main() -> None:
    app()
