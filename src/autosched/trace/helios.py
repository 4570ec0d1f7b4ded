"""Helios ``cluster_log.csv`` (SenseTime; S-Lab-System-Group/HeliosData).

Columns: ``job_id, user, vc, gpu_num, cpu_num, node_num, state, submit_time, start_time,
end_time, duration, queue``. Times are ``YYYY-MM-DD HH:MM:SS`` (local, no zone); ``duration`` is
``end_time - start_time`` in seconds and ``queue`` is ``start_time - submit_time``.

Mapping: submit = ``submit_time``; duration = ``duration`` (or ``end_time - start_time`` when the
file has no ``duration`` column); GPUs = ``gpu_num``; ``state`` (COMPLETED, CANCELLED, FAILED,
TIMEOUT, NODE_FAIL) becomes ``status``; ``cpu_num`` becomes ``num_cpus``. About half of Helios's
jobs are CPU-only (``gpu_num`` 0): they are dropped, counted under "job requests no GPUs", as are
jobs that never ran (``duration`` 0, e.g. cancelled while queued).
"""

from __future__ import annotations

from pathlib import Path

from .parsing import (
    Columns,
    checked_rows,
    column_index,
    csv_header,
    found_columns,
    from_first_day,
    new_columns,
    read_csv_rows,
    wallclock_seconds,
)
from .report import RowCheck
from .table import TraceError

_TIME_RULE = "time is not of the form YYYY-MM-DD HH:MM:SS"
_OPTIONAL = {"user": "user", "vc": "vc", "state": "status"}


def detect(head: str) -> bool:
    return {"job_id", "gpu_num", "submit_time"} <= set(csv_header(head))


def parse(path: Path, check: RowCheck) -> Columns:
    header, rows = read_csv_rows(path)
    idx = column_index(path, header, ("job_id", "gpu_num", "submit_time"))
    if "duration" not in header and not {"start_time", "end_time"} <= set(header):
        raise TraceError(f"{path}: line 1 (header): need column 'duration' or both 'start_time' and "
                         f"'end_time'; found {found_columns(header)}")
    extra = {canon: header.index(col) for col, canon in _OPTIONAL.items() if col in header}
    icpu = header.index("cpu_num") if "cpu_num" in header else None
    stamps: list[int] = []
    cols = new_columns("job_id", "num_gpus", "duration", *extra, *(["num_cpus"] if icpu is not None else []))
    for line, r in checked_rows(check, header, rows):
        where = f"line {line}"
        submit = wallclock_seconds(r[idx["submit_time"]])
        if submit is None:
            check.drop(where, "submit_time", _TIME_RULE, r[idx["submit_time"]])
            continue
        gpus = check.gpus(where, "gpu_num", r[idx["gpu_num"]])
        duration = _duration(check, where, header, r)
        cpus = _cpus(check, where, r, icpu)
        if gpus is None or duration is None or cpus is False:
            continue
        stamps.append(submit)
        cols["job_id"].append(r[idx["job_id"]].strip())
        cols["num_gpus"].append(gpus)
        cols["duration"].append(duration)
        for canon, i in extra.items():
            cols[canon].append(r[i].strip())
        if icpu is not None:
            cols["num_cpus"].append(cpus)
    cols["submit_time"] = from_first_day(stamps)
    return cols


def _duration(check: RowCheck, where: str, header: list[str], r: list[str]) -> float | None:
    if "duration" in header:
        return check.seconds(where, "duration", r[header.index("duration")], positive=True)
    start, end = (r[header.index(c)] for c in ("start_time", "end_time"))
    t0, t1 = wallclock_seconds(start), wallclock_seconds(end)
    if t0 is None or t1 is None:
        column, value = ("start_time", start) if t0 is None else ("end_time", end)
        check.drop(where, column, _TIME_RULE + " (job never started or never ended?)", value)
        return None
    return check.seconds(where, "end_time", str(t1 - t0), positive=True)


def _cpus(check: RowCheck, where: str, r: list[str], icpu: int | None) -> int | None | bool:
    """CPU count (0 when empty); False after recording a drop."""
    if icpu is None or not r[icpu].strip():
        return 0
    try:
        return int(float(r[icpu]))
    except ValueError:
        check.drop(where, "cpu_num", "CPU count is not a number", r[icpu])
        return False
