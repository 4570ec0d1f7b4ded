"""Read any supported trace file into a `Trace`; write canonical CSV or Parquet."""

from __future__ import annotations

import csv
import gzip
import os
import zlib
from pathlib import Path

import numpy as np

from ..atomic import atomic_path

from .formats import detect_format, find_format, format_names
from .parsing import head_bytes
from .report import LoadReport, RowCheck
from .table import COLUMNS, REQUIRED, Trace, TraceError


def load_trace(path: str | os.PathLike, format: str | None = None, strict: bool = False) -> tuple[Trace, LoadReport]:
    """Load a trace, detecting its format from the header unless `format` is given.

    Rows that cannot be simulated are dropped and counted in the report; with ``strict`` the
    first such row raises `TraceError` instead.
    """
    path = Path(path)
    head = _head(path)
    if format == "parquet" or (format is None and (head[:4] == b"PAR1" or path.suffix.lower() in (".parquet", ".pq"))):
        return _read_parquet(path, strict)
    text = _head_as_text(path, head)
    fmt = find_format(format) if format else detect_format(path, text)
    report = LoadReport(source=str(path), format=fmt.name)
    try:
        cols = fmt.parse(path, RowCheck(report, strict))
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not a UTF-8 text file ({e.reason} at byte {e.start}); is it the right format?") from None
    except csv.Error as e:
        raise TraceError(f"{path}: malformed CSV: {e}") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise TraceError(f"{path}: damaged gzip file ({e or 'truncated'})") from None
    report.rows = len(cols["job_id"]) + report.dropped
    trace = Trace.from_columns(cols, source=str(path))
    report.kept = len(trace)
    return trace, report


def _head(path: Path) -> bytes:
    """The first bytes (decompressed), after checking the path is a non-empty readable file."""
    if not path.exists():
        raise TraceError(f"{path}: no such file")
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, not a trace file")
    try:
        head = head_bytes(path)
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise TraceError(f"{path}: damaged gzip file ({e or 'truncated'})") from None
    if not head.strip():
        raise TraceError(f"{path}: the file is empty")
    return head


def _head_as_text(path: Path, head: bytes) -> str:
    """The head as text; a binary file is refused here rather than misread as a trace."""
    text = head.decode("utf-8-sig", errors="replace")
    # NUL bytes, or more than 1% undecodable bytes (one may be a character cut at the end of the head)
    if b"\x00" in head or text.count("\ufffd") > len(text) // 100:
        raise TraceError(f"{path}: a binary file, not a text trace (for Parquet, name it .parquet or pass --format parquet)")
    return text


def write_trace(trace: Trace, path: str | os.PathLike) -> None:
    """Write canonical CSV (gzip-compressed when the name ends in .gz), or Parquet when the name
    ends in .parquet. Atomic: a failed write leaves any existing file as it was."""
    path = Path(path)
    with atomic_path(path) as tmp:
        if path.suffix.lower() in (".parquet", ".pq"):
            _write_parquet(trace, tmp)
        else:
            _write_csv(trace, tmp, compress=path.suffix.lower() == ".gz")


def _write_csv(trace: Trace, path: Path, compress: bool = False) -> None:
    cols = trace.columns()
    with (gzip.open(path, "wt", newline="") if compress else open(path, "w", newline="")) as f:
        w = csv.writer(f)
        w.writerow(list(cols))
        text = [_fmt_column(name, a) for name, a in cols.items()]
        w.writerows(zip(*text))


def _fmt_column(name: str, a: np.ndarray) -> list[str]:
    if a.dtype == object or name in ("num_gpus", "num_cpus"):
        return [str(x) for x in a.tolist()]
    return ["" if x != x else repr(x) if x != int(x) else str(int(x)) for x in a.tolist()]  # NaN: empty


def _write_parquet(trace: Trace, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({c: pa.array(a.tolist() if a.dtype == object else a) for c, a in trace.columns().items()})
    pq.write_table(table, path)


def _read_parquet(path: Path, strict: bool) -> tuple[Trace, LoadReport]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for a bad file
        raise TraceError(f"{path}: not a readable Parquet file ({e})") from None
    names = [n.lower() for n in table.column_names]
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise TraceError(f"{path}: missing required column(s) {', '.join(missing)}; found {', '.join(names)}")
    report = LoadReport(source=str(path), format="parquet", rows=table.num_rows)
    raw = {c: table.column(names.index(c)).to_numpy(zero_copy_only=False) for c in COLUMNS if c in names}
    keep = _check_parquet_rows(raw, RowCheck(report, strict))
    trace = Trace.from_columns({c: a[keep] for c, a in raw.items()}, source=str(path))
    report.kept = len(trace)
    return trace, report


def _check_parquet_rows(raw: dict[str, np.ndarray], check: RowCheck) -> np.ndarray:
    """Apply the same row rules as the CSV loaders to whole columns."""
    n = len(raw["job_id"])
    keep = np.ones(n, dtype=bool)
    rules = [
        ("submit_time", ~np.isfinite(raw["submit_time"].astype(float)), "time is not finite"),
        ("num_gpus", raw["num_gpus"].astype(float) < 1, "job requests no GPUs (must be >= 1)"),
        ("duration", ~(raw["duration"].astype(float) > 0), "duration is not positive"),
    ]
    if "time_limit" in raw:
        limit = raw["time_limit"].astype(float)
        rules.append(("time_limit", ~np.isnan(limit) & ~((limit > 0) & np.isfinite(limit)),
                      "time limit is not a positive number of seconds (NaN = none)"))
    for col, bad, rule in rules:
        for i in np.flatnonzero(bad & keep):
            check.drop(f"row {i + 1}", col, rule, raw[col][i].item())
        keep &= ~bad
    return keep


__all__ = ["load_trace", "write_trace", "format_names"]
