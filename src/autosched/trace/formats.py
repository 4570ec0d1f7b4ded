"""Trace formats: how each is recognised and parsed into canonical columns.

A format is a `Format`: a name, a test on the file's first bytes (header), and a parser that
returns canonical columns and records every row it cannot use in a `RowCheck`. To add a format,
write a parser (in its own module when it is more than a few lines, like `slurm.py`,
`helios.py`, `philly_json.py`) and append it to `FORMATS`; detection tries them in order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from . import helios, philly_json, slurm
from .parsing import (
    Columns,
    Format,
    checked_rows,
    column_index,
    csv_header,
    from_first_day,
    new_columns,
    read_csv_rows,
    wallclock_seconds,
)
from .report import MAX_CPUS, MAX_GPUS, MAX_TIME_LIMIT, RowCheck
from .table import COLUMNS, HISTORY, OPTIONAL, REQUIRED, TraceError

# ---------------------------------------------------------------------------------- canonical CSV


def _parse_canonical(path: Path, check: RowCheck) -> Columns:
    header, rows = read_csv_rows(path)
    idx = column_index(path, header, ("job_id", "submit_time", "num_gpus", "duration"))
    extra = {c: header.index(c) for c in OPTIONAL if c in header}
    unknown = [c for c in header if c not in COLUMNS]
    if unknown:
        check.report.notes.append(f"column(s) not in the canonical format, not read: {', '.join(unknown)}")
    fast = _canonical_clean(header, rows, idx, extra)
    if fast is not None:
        return fast
    cols = new_columns("job_id", "submit_time", "num_gpus", "duration", *extra)
    for line, r in checked_rows(check, header, rows):
        where = f"line {line}"
        t = check.seconds(where, "submit_time", r[idx["submit_time"]])
        g = check.gpus(where, "num_gpus", r[idx["num_gpus"]])
        d = check.seconds(where, "duration", r[idx["duration"]], positive=True)
        num_cpus = None
        if "num_cpus" in extra and r[extra["num_cpus"]].strip():
            try:
                x = float(r[extra["num_cpus"]])
            except ValueError:
                check.drop(where, "num_cpus", "CPU count is not a number", r[extra["num_cpus"]])
                continue
            if not 0 <= x <= MAX_CPUS:
                check.drop(where, "num_cpus", f"CPU count is not in [0, {MAX_CPUS:,}]", r[extra["num_cpus"]])
                continue
            num_cpus = int(x)
        if "time_limit" in extra and not _limit_ok(r[extra["time_limit"]]):
            check.drop(where, "time_limit", _LIMIT_RULE, r[extra["time_limit"]])
            continue
        history = {c: _history_seconds(r[extra[c]]) for c in HISTORY if c in extra}
        bad = next((c for c, v in history.items() if v is None), None)
        if bad is not None:
            check.drop(where, bad, "not a number of seconds >= 0 (empty = 0)", r[extra[bad]])
            continue
        if t is None or g is None or d is None:
            continue
        _add_job(cols, r[idx["job_id"]], t, g, d)
        for c, i in extra.items():
            cols[c].append((num_cpus or 0) if c == "num_cpus" else history[c] if c in history else r[i])
    return cols


def _history_seconds(text: str) -> float | None:
    """A canonical attained or age cell: seconds >= 0, empty = 0 (no history); None if neither."""
    text = text.strip()
    if not text:
        return 0.0
    try:
        x = float(text)
    except ValueError:
        return None
    return x if 0 <= x < float("inf") else None


def _canonical_clean(header: list[str], rows: list[tuple[int, list[str]]], idx: dict[str, int],
                     extra: dict[str, int]) -> Columns | None:
    """The columns at array speed when every row passes every rule; None sends the file to the
    row-by-row parser, which names each bad row (so the two never disagree on what is kept)."""
    if not rows or any(len(r) != len(header) for _, r in rows):
        return None
    cells = list(zip(*(r for _, r in rows)))  # column-wise
    try:
        t, g, d = (np.array(cells[idx[c]], dtype=float) for c in ("submit_time", "num_gpus", "duration"))
        cpus = np.array(cells[extra["num_cpus"]], dtype=float) if "num_cpus" in extra else None
    except ValueError:  # a cell that is not a number (or an empty num_cpus)
        return None
    ok = (np.isfinite(t).all() and np.isfinite(d).all() and (d > 0).all()
          and np.isfinite(g).all() and (g == np.floor(g)).all() and (g >= 1).all() and (g <= MAX_GPUS).all()
          and (cpus is None or ((cpus >= 0) & (cpus <= MAX_CPUS)).all()))
    if not ok or ("time_limit" in extra and not all(map(_limit_ok, cells[extra["time_limit"]]))):
        return None
    history = {}
    for c in HISTORY:
        if c in extra:
            try:
                history[c] = np.array(cells[extra[c]], dtype=float)
            except ValueError:  # text, or an empty cell (0): the row-by-row parser reads those
                return None
            if not (np.isfinite(history[c]) & (history[c] >= 0)).all():
                return None
    cols: dict[str, list[str] | np.ndarray] = {"job_id": list(cells[idx["job_id"]]), "submit_time": t,
                                               "num_gpus": g.astype(np.int64), "duration": d, **history}
    for c, i in extra.items():  # (cpus is None exactly when there is no num_cpus column)
        if c not in history:
            cols[c] = cpus.astype(np.int64) if c == "num_cpus" and cpus is not None else list(cells[i])
    return cols


_LIMIT_RULE = (f"time limit is not a number of seconds in (0, {MAX_TIME_LIMIT:,}] "
               "(empty = none)")


def _limit_ok(text: str) -> bool:
    """A canonical time_limit cell: empty or NaN (no limit), or seconds in (0, MAX_TIME_LIMIT]."""
    text = text.strip()
    if not text or text.lower() == "nan":
        return True
    try:
        return 0 < float(text) <= MAX_TIME_LIMIT
    except ValueError:
        return False


def _is_canonical(head: str) -> bool:
    h = csv_header(head)
    return {"job_id", "submit_time", "num_gpus", "duration"} <= set(h) and set(h) <= set(COLUMNS)


# ------------------------------------------------------------- Philly per-job CSV (Sia's flattening)

PHILLY_TIME = "%Y-%m-%d %H:%M:%S"


def _parse_philly_csv(path: Path, check: RowCheck) -> Columns:
    """``timestamp,duration,num_gpus,gpu_time,cluster``; timestamp is the arrival, local time.

    ``submit_time`` counts from 00:00 of the first job's day, so ``t % 86400`` is the time of
    day (the full Philly trace starts on a Monday). Times are read as naive wall-clock times, the
    same on every machine whatever its time zone.
    """
    header, rows = read_csv_rows(path)
    idx = column_index(path, header, ("timestamp", "duration", "num_gpus", "cluster"))
    stamps, cols = [], new_columns("job_id", "num_gpus", "duration", "vc")
    for line, r in checked_rows(check, header, rows):
        where = f"line {line}"
        ts = wallclock_seconds(r[idx["timestamp"]])
        if ts is None:
            check.drop(where, "timestamp", f"time is not of the form {PHILLY_TIME}", r[idx["timestamp"]])
            continue
        g = check.gpus(where, "num_gpus", r[idx["num_gpus"]])
        d = check.seconds(where, "duration", r[idx["duration"]], positive=True)
        if g is None or d is None:
            continue
        stamps.append(ts)
        cols["job_id"].append(str(line - 1))  # the row number: the file has no job id
        cols["num_gpus"].append(g)
        cols["duration"].append(d)
        cols["vc"].append(r[idx["cluster"]].strip())
    cols["submit_time"] = from_first_day(stamps)
    return cols


def _is_philly_csv(head: str) -> bool:
    return {"timestamp", "duration", "num_gpus", "cluster"} <= set(csv_header(head))


# ---------------------------------------------------------------------- Microsoft ITP (ElasticFlow)


def _parse_itp_csv(path: Path, check: RowCheck) -> Columns:
    """``job_id,submission_time,duration,num_gpu``: seconds since the collection window began."""
    header, rows = read_csv_rows(path)
    idx = column_index(path, header, ("job_id", "submission_time", "duration", "num_gpu"))
    cols = new_columns("job_id", "submit_time", "num_gpus", "duration")
    for line, r in checked_rows(check, header, rows):
        where = f"line {line}"
        t = check.seconds(where, "submission_time", r[idx["submission_time"]])
        g = check.gpus(where, "num_gpu", r[idx["num_gpu"]])
        d = check.seconds(where, "duration", r[idx["duration"]], positive=True)
        if t is None or g is None or d is None:
            continue
        _add_job(cols, r[idx["job_id"]], t, g, d)
    return cols


def _add_job(cols: dict[str, list[Any]], job_id: str, submit: float, gpus: int, duration: float) -> None:
    cols["job_id"].append(job_id)
    cols["submit_time"].append(submit)
    cols["num_gpus"].append(gpus)
    cols["duration"].append(duration)


def _is_itp_csv(head: str) -> bool:
    return {"job_id", "submission_time", "duration", "num_gpu"} <= set(csv_header(head))


FORMATS: list[Format] = [
    Format("canonical", "autosched's own CSV (job_id,submit_time,num_gpus,duration[,user,vc,...])",
           _is_canonical, _parse_canonical),
    Format("philly", "Philly per-job CSV as flattened by the Sia authors (timestamp,duration,num_gpus,gpu_time,cluster)",
           _is_philly_csv, _parse_philly_csv),
    Format("itp", "Microsoft ITP / ElasticFlow CSV (job_id,submission_time,duration,num_gpu)",
           _is_itp_csv, _parse_itp_csv),
    Format("helios", "Helios cluster_log.csv (job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,...)",
           helios.detect, helios.parse),
    Format("philly-json", "original Philly cluster_job_log (JSON list of jobs with attempts)",
           philly_json.detect, philly_json.parse),
    Format("slurm", "Slurm `sacct --parsable2` output (JobID|User|Partition|Submit|Start|End|State|AllocTRES|...)",
           slurm.detect, slurm.parse),
]


def format_names() -> list[str]:
    return [f.name for f in FORMATS] + ["parquet"]


def find_format(name: str) -> Format:
    for f in FORMATS:
        if f.name == name:
            return f
    raise TraceError(f"unknown trace format {name!r}; known: {', '.join(format_names())}")


def detect_format(path: Path, head: str) -> Format:
    for f in FORMATS:
        if f.detect(head):
            return f
    header = csv_header(head)
    if "job_id" in header and {"submit_time", "num_gpus", "duration"} & set(header):
        missing = [c for c in REQUIRED if c not in header]
        unknown = [c for c in header if c not in COLUMNS]
        said = "; ".join(x for x in (f"missing column(s) {', '.join(missing)}" if missing else "",
                                     f"column(s) {', '.join(unknown)} not in it" if unknown else "") if x)
        raise TraceError(f"{path}: line 1 (header): a canonical trace, but {said}; the canonical "
                         f"columns are {', '.join(COLUMNS)} (give the format canonical to read it "
                         "with unknown columns left out)")
    first = head.splitlines()[0][:200] if head else "(empty file)"
    raise TraceError(
        f"{path}: cannot tell the trace format from its first line {first!r}; "
        f"give its format, one of: {', '.join(format_names())}"
    )
