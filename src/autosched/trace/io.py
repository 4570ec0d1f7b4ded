"""Read any supported trace file into a `Trace`; write canonical CSV or Parquet."""

from __future__ import annotations

import csv
import gzip
import os
import sys
import zlib
from pathlib import Path

import numpy as np

from ..atomic import atomic_path, check_input, is_stdout
from ..errors import InputError
from .formats import detect_format, find_format, format_names
from .parsing import Columns, check_header, found_columns, head_bytes
from .report import (
    MAX_CPUS,
    MAX_DURATION,
    MAX_GPUS,
    MAX_SUBMIT_TIME,
    MAX_TIME_LIMIT,
    LoadReport,
    RowCheck,
)
from .table import COLUMNS, REQUIRED, TEXT_COLUMNS, Trace, TraceError


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
    check = RowCheck(report, strict)
    try:
        cols = fmt.parse(path, check)
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not a UTF-8 text file ({e.reason} at byte {e.start}); is it the right format?") from None
    except csv.Error as e:
        raise TraceError(f"{path}: malformed CSV: {e}") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise TraceError(f"{path}: damaged gzip file ({e or 'truncated'})") from None
    except RecursionError:
        raise TraceError(f"{path}: nested too deeply to be a trace") from None
    report.rows = len(cols["job_id"]) + report.dropped
    trace = Trace.from_columns(check_jobs(cols, check), source=str(path))
    report.kept = len(trace)
    return trace, report


def _head(path: Path) -> bytes:
    """The first bytes (decompressed), after checking the path is a non-empty readable file."""
    if not path.exists():
        raise TraceError(f"{path}: no such file")
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, not a trace file")
    try:
        check_input(path, "trace file")  # a FIFO would block, and is read twice (head, then rows)
    except InputError as e:
        raise TraceError(str(e)) from None
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
    undecodable = text.count("\ufffd") - head.count("\ufffd".encode())  # a literal U+FFFD is text
    if b"\x00" in head or undecodable > len(text) // 100:
        printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in head)
        if b"\x00" not in head and printable >= 0.9 * len(head):
            # text in another encoding (a Latin-1 name), not a binary file
            try:
                head.decode("utf-8-sig")
            except UnicodeDecodeError as e:
                raise TraceError(f"{path}: not UTF-8 text (byte {head[e.start]:#04x} at offset "
                                 f"{e.start}); save it as UTF-8") from None
        raise TraceError(f"{path}: a binary file, not a text trace (for Parquet, name it .parquet or give its format: parquet)")
    return text


def write_trace(trace: Trace, path: str | os.PathLike) -> None:
    """Write canonical CSV (gzip-compressed when the name ends in .gz), or Parquet when the name
    ends in .parquet; ``-`` writes CSV to standard output. Atomic: a failed write leaves any
    existing file as it was (the rule for outputs of `autosched.atomic` applies)."""
    if is_stdout(path):
        try:
            _write_csv_to(trace, sys.stdout)
            sys.stdout.flush()
        except BrokenPipeError:  # the reader stopped early (`| head`): not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return
    path = Path(path)
    with atomic_path(path) as tmp:
        if path.suffix.lower() in (".parquet", ".pq"):
            _write_parquet(trace, tmp)
        else:
            _write_csv(trace, tmp, compress=path.suffix.lower() == ".gz")


def _write_csv(trace: Trace, path: Path, compress: bool = False) -> None:
    with (gzip.open(path, "wt", newline="") if compress else open(path, "w", newline="")) as f:
        _write_csv_to(trace, f)


def _write_csv_to(trace: Trace, f) -> None:
    cols = trace.columns()
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
        raise TraceError(f"{path}: not a readable Parquet file ({' '.join(str(e).split())})") from None
    names = [n.lower() for n in table.column_names]
    check_header(path, names, where="schema")
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise TraceError(f"{path}: missing required column(s) {', '.join(missing)}; found {found_columns(names)}")
    report = LoadReport(source=str(path), format="parquet", rows=table.num_rows)
    try:
        raw = {c: _parquet_column(path, c, table.column(names.index(c))) for c in COLUMNS if c in names}
    except TraceError:
        raise
    except Exception as e:  # e.g. a string column that is not UTF-8
        raise TraceError(f"{path}: not a readable Parquet file ({' '.join(str(e).split())})") from None
    check = RowCheck(report, strict)
    keep = _check_parquet_rows(path, raw, check)
    trace = Trace.from_columns(check_jobs({c: a[keep] for c, a in raw.items()}, check), source=str(path))
    report.kept = len(trace)
    return trace, report


def _parquet_column(path: Path, name: str, col) -> np.ndarray:
    """One column as NumPy. A cell holds one value: a list or struct type is an error. In a text
    column integers become their digits and a null stays None (an integer column with nulls
    would otherwise become floats, ``1.0`` and ``nan``), so the job id rules see the same ids as
    in the CSV that `trace convert` writes."""
    import pyarrow as pa

    t = col.type
    if pa.types.is_nested(t):
        kind = "text" if name in TEXT_COLUMNS else "numeric"
        raise TraceError(f"{path}: column {name!r} is not {kind} (type {t}; a cell holds one value)")
    if name in TEXT_COLUMNS and pa.types.is_integer(t):
        col = col.cast(pa.string())
    return col.to_numpy(zero_copy_only=False)


def _check_parquet_rows(path: Path, raw: dict[str, np.ndarray], check: RowCheck) -> np.ndarray:
    """Apply the same row rules as the CSV loaders to whole columns."""
    n = len(raw["job_id"])
    keep = np.ones(n, dtype=bool)
    num = {}
    for col in ("submit_time", "num_gpus", "duration") + (("num_cpus",) if "num_cpus" in raw else ()):
        try:
            num[col] = np.asarray(raw[col], dtype=float)
        except (TypeError, ValueError):
            raise TraceError(f"{path}: column {col!r} is not numeric (type {raw[col].dtype})") from None
    g = num["num_gpus"]
    with np.errstate(invalid="ignore"):
        rules = [
            ("submit_time", ~np.isfinite(num["submit_time"]), "time is not finite"),
            ("num_gpus", ~np.isfinite(g) | (g != np.floor(g)), "GPU count is not a whole number"),
            ("num_gpus", g < 1, "job requests no GPUs (must be >= 1)"),
            ("num_gpus", g > MAX_GPUS, f"GPU count is beyond any cluster (must be <= {MAX_GPUS:,})"),
            ("duration", ~(num["duration"] > 0), "duration is not positive"),
        ]
        if "num_cpus" in num:
            c = num["num_cpus"]
            rules.append(("num_cpus", ~((c >= 0) & (c <= MAX_CPUS)), f"CPU count is not in [0, {MAX_CPUS:,}]"))
        if "time_limit" in raw:
            try:
                limit = np.asarray(raw["time_limit"], dtype=float)
            except (TypeError, ValueError):
                raise TraceError(f"{path}: column 'time_limit' is not numeric (type {raw['time_limit'].dtype})") from None
            rules.append(("time_limit", ~np.isnan(limit) & ~((limit > 0) & (limit <= MAX_TIME_LIMIT)),
                          f"time limit is not a number of seconds in (0, {MAX_TIME_LIMIT:,}] "
                          "(NaN = none)"))
    for col, bad, rule in rules:
        for i in np.flatnonzero(bad & keep):
            check.drop(f"row {i + 1}", col, rule, getattr(raw[col][i], "item", lambda: raw[col][i])())
        keep &= ~bad
    return keep


def check_jobs(cols: Columns, check: RowCheck) -> Columns:
    """The rules every format shares, applied to whole parsed columns: submit times in
    [0, MAX_SUBMIT_TIME], durations at most MAX_DURATION, and each job id once (the first row is
    kept). Broken rows are dropped (or, strict, raise) like any other; rows out of submit-time
    order are sorted, with a note."""
    ids = cols["job_id"]  # parsers give str ids (a list or an object array; None: a Parquet null)
    n = len(ids)
    t = np.asarray(cols["submit_time"], dtype=float)
    d = np.asarray(cols["duration"], dtype=float)
    bad = np.zeros(n, dtype=bool)
    rules = [
        ("job_id", np.fromiter((x is None or not str(x).strip() for x in ids), dtype=bool, count=n),
         "job id is empty"),
        ("submit_time", t < 0, "submit time is negative (must be >= 0)"),
        ("submit_time", t > MAX_SUBMIT_TIME, f"submit time is beyond 100 years (must be <= {MAX_SUBMIT_TIME:,} s)"),
        ("duration", d > MAX_DURATION, f"duration is longer than a year (must be <= {MAX_DURATION:,} s)"),
    ]
    # `row=i`: rows are named by job id, and two rows may share one (each dropped row counts)
    for col, mask, rule in rules:
        for i in np.flatnonzero(mask & ~bad).tolist():
            if col == "job_id":
                check.drop(f"a job submitted at {t[i]:g} s", col, rule, ids[i], row=i)
            else:
                check.drop(f"job {_id(ids[i])!r}", col, rule, float(t[i] if col == "submit_time" else d[i]), row=i)
        bad |= mask
    if len(set(ids)) != n:  # rare: a set is cheaper than a loop when there is none
        seen: set[str] = set()
        for i in range(n):
            if bad[i]:
                continue
            if ids[i] in seen:
                kept = "" if check.strict else " (the first row is kept)"
                check.drop(f"job {_id(ids[i])!r}", "job_id", f"job id appears more than once{kept}", row=i)
                bad[i] = True
            seen.add(ids[i])
    kept_t = t[~bad]
    late = int(np.count_nonzero(np.diff(kept_t) < 0))
    if late:
        check.report.notes.append(f"rows are not in submit-time order ({late:,} step(s) back); jobs are sorted by "
                                  "submit time, ties in file order")
    if not bad.any():
        return cols
    keep = ~bad
    return {c: (None if v is None else np.asarray(v, dtype=object if c in TEXT_COLUMNS else None)[keep])
            for c, v in cols.items()}


def _id(x: object) -> str:
    return "" if x is None else str(x)


__all__ = ["load_trace", "write_trace", "format_names"]
