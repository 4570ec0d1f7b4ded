"""``autosched slurm history``: a running Slurm cluster's job history as a trace file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from ..atomic import output_path

slurm_app = typer.Typer(help="Read a running Slurm cluster (sacct).", no_args_is_help=True)

_TEXT_SUFFIXES = (".txt", ".sacct", ".psv")


@slurm_app.command("history")
def history_cmd(
    out: Path = typer.Option(..., "--out", parser=output_path,
                             help="trace file: .txt/.sacct/.psv keep sacct's text (absolute times, "
                             "running and pending jobs; `agent init --seed-history` reads it); .csv/.parquet "
                             "write the canonical trace of the finished jobs"),
    since: str = typer.Option("7d", "--since", help="how far back (e.g. 12h, 7d; at most 366d)"),
    slurm_conf: Optional[Path] = typer.Option(None, "--slurm-conf", help="slurm.conf [default: $SLURM_CONF]"),
    timeout: str = typer.Option("60", "--timeout", help="how long sacct may take (seconds, or 5m, ...)"),
) -> None:
    """Export the jobs of the last `--since` as a trace (GPUs from AllocTRES; malformed rows are
    skipped and counted)."""
    import time

    from ..atomic import write_text_atomic
    from ..live.history import read_jobs
    from ..live.slurm import SlurmConnector, SlurmRunner
    from ..live.slurmconf import slurm_config_files
    from ..timeparse import parse_length
    from ..trace import load_trace
    from ..trace.io import write_trace
    from .common import outputs

    # Every option before anything is read or written: the output is never one of the files
    # Slurm's commands read (slurm.conf, what it includes, its folder's *.conf)
    look_back = parse_length(since, "--since")
    wait = parse_length(timeout, "--timeout")
    outputs(tuple(slurm_config_files(slurm_conf)), (out,))
    conf = slurm_conf or (Path(os.environ["SLURM_CONF"]) if os.environ.get("SLURM_CONF") else None)
    runner = SlurmRunner(str(conf) if conf else None, timeout=wait)
    conn = SlurmConnector(Path(os.devnull), conf, runner)
    now = time.time()
    text = conn.sacct_rows(now - look_back, now)
    jobs = read_jobs(text, source="sacct")
    if out.suffix.lower() in _TEXT_SUFFIXES:
        write_text_atomic(out, text)
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "sacct.txt"
            p.write_text(text)
            trace, _ = load_trace(p, format="slurm")
        write_trace(trace, out)
    active = int((~jobs.finished).sum())
    typer.echo(f"{out}: {len(jobs)} GPU jobs ({int(jobs.finished.sum())} finished, {active} pending or "
               f"running), {jobs.malformed} malformed sacct row(s) skipped")
    # sacct's text keeps the rows of queued and running jobs: only faults are dropped from it
    report = jobs.faults() if out.suffix.lower() in _TEXT_SUFFIXES else jobs.report
    if report.drops:
        typer.echo(report.summary(), err=True)
