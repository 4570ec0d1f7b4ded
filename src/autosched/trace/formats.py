"""Trace formats: how each is recognised and parsed into canonical columns.

A format is a `Format`: a name, a test on the file's first bytes (header), and a parser that
returns canonical columns and records every row it cannot use in a `RowCheck`. To add a format,
write a parser and append it to `FORMATS`.
"""

from __future__ import annotations

import calendar
import csv
import gzip
import io
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .report import RowCheck
from .table import COLUMNS, OPTIONAL, TraceError

Columns = dict[str, list]


@dataclass(frozen=True)
class Format:
    name: str
    help: str
    detect: Callable[[str], bool]  # gets the first 4 KiB of the file as text
    parse: Callable[[Path, RowCheck], Columns]


def csv_header(head: str) -> list[str]:
    first = head.splitlines()[0] if head else ""
    return [c.strip().lower() for c in next(csv.reader([first]), [])]


def read_csv_rows(path: Path, delimiter: str = ",") -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header (lower-cased) and (line number, cells) per non-blank data row."""
    with open_text(path) as f:
        reader = csv.reader(f, delimiter=delimiter)
        try:
            header = [c.strip().lower() for c in next(reader)]
        except StopIteration:
            raise TraceError(f"{path}: the file is empty (no header row)") from None
        rows = [(reader.line_num, r) for r in reader if r and any(c.strip() for c in r)]
    return header, rows


def column_index(path: Path, header: list[str], names: tuple[str, ...]) -> dict[str, int]:
    missing = [n for n in names if n not in header]
    if missing:
        raise TraceError(
            f"{path}: line 1 (header): missing column(s) {', '.join(missing)}; found {', '.join(header)}"
        )
    return {n: header.index(n) for n in names}


def _new_columns(*names: str) -> Columns:
    return {n: [] for n in names}


# ---------------------------------------------------------------------------------- canonical CSV


def _parse_canonical(path: Path, check: RowCheck) -> Columns:
    header, rows = read_csv_rows(path)
    idx = column_index(path, header, ("job_id", "submit_time", "num_gpus", "duration"))
    extra = {c: header.index(c) for c in OPTIONAL if c in header}
    cols = _new_columns("job_id", "submit_time", "num_gpus", "duration", *extra)
    for line, r in rows:
        where = f"line {line}"
        if len(r) != len(header):
            check.drop(where, "*", f"row has {len(r)} cells, header has {len(header)}")
            continue
        t = check.seconds(where, "submit_time", r[idx["submit_time"]])
        g = check.gpus(where, "num_gpus", r[idx["num_gpus"]])
        d = check.seconds(where, "duration", r[idx["duration"]], positive=True)
        num_cpus = None
        if "num_cpus" in extra and r[extra["num_cpus"]].strip():
            try:
                num_cpus = int(float(r[extra["num_cpus"]]))
            except ValueError:
                check.drop(where, "num_cpus", "CPU count is not a number", r[extra["num_cpus"]])
                continue
        if t is None or g is None or d is None:
            continue
        cols["job_id"].append(r[idx["job_id"]])
        cols["submit_time"].append(t)
        cols["num_gpus"].append(g)
        cols["duration"].append(d)
        for c, i in extra.items():
            cols[c].append(num_cpus or 0 if c == "num_cpus" else r[i])
    return cols


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
    stamps, cols = [], _new_columns("job_id", "num_gpus", "duration", "vc")
    for line, r in rows:
        where = f"line {line}"
        if len(r) != len(header):
            check.drop(where, "*", f"row has {len(r)} cells, header has {len(header)}")
            continue
        ts = _wallclock_seconds(r[idx["timestamp"]])
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
    t0 = min(stamps) // 86400 * 86400 if stamps else 0
    cols["submit_time"] = [float(s - t0) for s in stamps]
    return cols


def _wallclock_seconds(text: str) -> int | None:
    try:
        return calendar.timegm(datetime.strptime(text.strip(), PHILLY_TIME).timetuple())
    except ValueError:
        return None


def _is_philly_csv(head: str) -> bool:
    return {"timestamp", "duration", "num_gpus", "cluster"} <= set(csv_header(head))


# ---------------------------------------------------------------------- Microsoft ITP (ElasticFlow)


def _parse_itp_csv(path: Path, check: RowCheck) -> Columns:
    """``job_id,submission_time,duration,num_gpu``: seconds since the collection window began."""
    header, rows = read_csv_rows(path)
    idx = column_index(path, header, ("job_id", "submission_time", "duration", "num_gpu"))
    cols = _new_columns("job_id", "submit_time", "num_gpus", "duration")
    for line, r in rows:
        where = f"line {line}"
        t = check.seconds(where, "submission_time", r[idx["submission_time"]])
        g = check.gpus(where, "num_gpu", r[idx["num_gpu"]])
        d = check.seconds(where, "duration", r[idx["duration"]], positive=True)
        if t is None or g is None or d is None:
            continue
        cols["job_id"].append(r[idx["job_id"]])
        cols["submit_time"].append(t)
        cols["num_gpus"].append(g)
        cols["duration"].append(d)
    return cols


def _is_itp_csv(head: str) -> bool:
    return {"job_id", "submission_time", "duration", "num_gpu"} <= set(csv_header(head))


FORMATS: list[Format] = [
    Format("canonical", "autosched's own CSV (job_id,submit_time,num_gpus,duration[,user,vc,...])",
           _is_canonical, _parse_canonical),
    Format("philly", "Philly per-job CSV as flattened by the Sia authors (timestamp,duration,num_gpus,gpu_time,cluster)",
           _is_philly_csv, _parse_philly_csv),
    Format("itp", "Microsoft ITP / ElasticFlow CSV (job_id,submission_time,duration,num_gpu)",
           _is_itp_csv, _parse_itp_csv),
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
    first = head.splitlines()[0][:200] if head else "(empty file)"
    raise TraceError(
        f"{path}: cannot tell the trace format from its first line {first!r}; "
        f"pass --format, one of: {', '.join(format_names())}"
    )


def open_text(path: Path):
    """Open a text file, gzip-compressed or not (by its first bytes)."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    if gz:
        return gzip.open(path, "rt", newline="", encoding="utf-8-sig")
    return open(path, newline="", encoding="utf-8-sig")


def head_text(path: Path, size: int = 4096) -> str:
    with open(path, "rb") as f:
        raw = f.read(size)
    if raw[:2] == b"\x1f\x8b":
        with gzip.open(path, "rb") as f:
            raw = f.read(size)
    return io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8-sig", errors="replace").read()
