"""Slurm accounting: ``sacct --parsable2`` output (``|``-separated, one header line).

Needed columns: ``JobID, Submit, Start, End, AllocTRES``; used when present: ``User``,
``Partition`` (-> vc and partition), ``State`` (-> status, first word: "CANCELLED by 0" -> CANCELLED),
``JobName`` (-> name), ``ReqTRES``'s ``cpu=N``, else ``AllocCPUS`` or ``NCPUS`` (-> num_cpus: the CPUs a
job asked for, which Slurm's TRES factor weighs; where DefCpuPerGPU sizes a GPU job, sacct
requests 1 and allocates more), ``Account`` (-> account),
``Timelimit`` (-> time_limit in seconds; ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
``D-HH:MM:SS`` as Slurm prints them; ``UNLIMITED``, ``Partition_Limit`` or empty -> no limit). Times are
``YYYY-MM-DDTHH:MM:SS`` (local, no zone); ``Unknown`` or ``None`` mean unset. GPUs come from
``gres/gpu=N`` in AllocTRES, or the sum of the typed ``gres/gpu:TYPE=N`` when only those are
listed. A plain ``sacct --parsable`` file (with a trailing ``|``) reads the same.

Job steps (``123.batch``, ``123.extern``, ``123.0``; also ``123_4.0`` for array task 4) are folded
into their job: the job's own row gives submit, start, end, state and allocation; a step only
supplies the GPU count when the job row lists none. Array tasks (``123_4``) and heterogeneous
components (``123+0``) are jobs of their own. Duration = End - Start. A job that never started
(PENDING, or CANCELLED while queued: Start unset) or has not ended (End unset) cannot be replayed
and is dropped with its reason. With ``--duplicates``, a requeued job is listed once per run; the
last row is kept.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from .parsing import (
    Columns,
    checked_rows,
    column_index,
    csv_header,
    from_first_day,
    new_columns,
    read_csv_rows,
    wallclock_seconds,
)
from .report import MAX_TIME_LIMIT, RowCheck

UNSET = ("", "unknown", "none")
_TIME_RULE = "time is not of the form YYYY-MM-DDTHH:MM:SS"
_REQUIRED = ("jobid", "submit", "start", "end", "alloctres")
# canonical column <- sacct column (lower-cased), first one present wins
_OPTIONAL = {"user": ("user",), "vc": ("partition",), "status": ("state",), "name": ("jobname",),
             "account": ("account",), "time_limit": ("timelimit",),
             "partition": ("partition",)}
# where a job's CPUs come from, in order: the first that gives a count > 0 (ReqTRES: what the job
# asked for, which the TRES factor weighs; then the allocation)
_CPU_COLUMNS = ("reqtres", "alloccpus", "ncpus")
# how sacct spells the columns, for messages
_SPELLING = {"jobid": "JobID", "submit": "Submit", "start": "Start", "end": "End", "alloctres": "AllocTRES",
             "alloccpus": "AllocCPUS", "ncpus": "NCPUS"}


@dataclass
class _Job:
    """One job and the steps folded into it."""

    line: int = 0
    cells: list[str] | None = None  # the job's own row
    step_gpus: int = 0
    step_line: int = 0
    rows: int = 0


@dataclass
class _Fold:
    jobs: dict[str, _Job] = field(default_factory=dict)
    steps: int = 0
    duplicates: int = 0


def detect(head: str) -> bool:
    h = csv_header(head, delimiter="|")
    return len(h) > 1 and {"jobid", "submit"} <= set(h)


def parse(path: Path, check: RowCheck) -> Columns:
    header, rows = read_csv_rows(path, delimiter="|", quoting=csv.QUOTE_NONE)
    if header and header[-1] == "":  # `sacct --parsable` ends every line with '|'
        header = header[:-1]
        rows = [(n, r[:-1] if r and r[-1] == "" else r) for n, r in rows]
    idx = column_index(path, header, _REQUIRED)
    fold = _fold(check, header, idx, rows)
    extra = _optional_columns(header)
    cpu_cols = [(c, header.index(c)) for c in _CPU_COLUMNS if c in header]
    stamps: list[int] = []
    cols = new_columns("job_id", "num_gpus", "duration", *extra, *(["num_cpus"] if cpu_cols else []))
    for job_id, job in fold.jobs.items():
        got = _job(check, idx, job_id, job)
        if got is None:
            continue
        submit, gpus, duration, cells = got
        stamps.append(submit)
        cols["job_id"].append(job_id)
        cols["num_gpus"].append(gpus)
        cols["duration"].append(duration)
        for canon, i in extra.items():
            cols[canon].append(_optional_value(canon, cells[i]))
        if cpu_cols:
            cols["num_cpus"].append(_cpus(cpu_cols, cells))
    cols["submit_time"] = from_first_day(stamps)
    _notes(check, fold)
    return cols


def _optional_columns(header: list[str]) -> dict[str, int]:
    out = {}
    for canon, names in _OPTIONAL.items():
        present = [c for c in names if c in header]
        if present:
            out[canon] = header.index(present[0])
    return out


def _optional_value(canon: str, text: str) -> str | int | float:
    text = text.strip()
    if canon == "status":
        return text.split()[0] if text else ""
    if canon == "time_limit":
        return slurm_duration(text)
    return text


def _cpus(columns: list[tuple[str, int]], cells: list[str]) -> int:
    """A job's CPUs: the first of `_CPU_COLUMNS` present with a count; 0 (not known) without."""
    for name, i in columns:
        text = cells[i].strip()
        n = tres_cpus(text) if name == "reqtres" else int(text) if text.isdigit() else 0
        if n > 0:
            return n
    return 0


def slurm_seconds(text: str) -> float | None:
    """Seconds of a Slurm time string, as Slurm prints and reads them: ``D-HH:MM:SS``,
    ``D-HH:MM``, ``D-HH`` (``7-0`` is seven days), ``HH:MM:SS``, ``MM:SS`` or a bare number of
    minutes. None when the text is none of these (``UNLIMITED``, ``NONE``, empty, ...).

    The project's one parser of Slurm times: sacct's Timelimit (`slurm_duration`) and the
    slurm.conf / ``scontrol show config`` values of time settings (`autosched.export.slurm`).
    Zero stays 0.0 here: what a zero means depends on the setting."""
    text = text.strip()
    days, dash, rest = text.partition("-")
    if not dash:
        days, rest = "0", text
    parts = rest.split(":")
    if not days.isdigit() or not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    nums = [int(p) for p in parts]
    if dash:  # D-HH, D-HH:MM, D-HH:MM:SS
        nums += [0] * (3 - len(nums))
        h, m, sec = nums
    elif len(nums) == 1:  # MM
        h, m, sec = 0, nums[0], 0
    elif len(nums) == 2:  # MM:SS
        h, (m, sec) = 0, nums
    else:
        h, m, sec = nums
    return float(int(days) * 86400 + h * 3600 + m * 60 + sec)


def slurm_duration(text: str) -> float:
    """Seconds of a job's time limit as sacct prints it (Timelimit); NaN for no limit: the
    words for none (``UNLIMITED``, ``Partition_Limit``, empty, ...), a zero limit (Slurm's
    spelling of "no time limit", as in ``sbatch --time=0``), a limit beyond `MAX_TIME_LIMIT`,
    and text that is not a time (a job without a usable limit is simulated without one rather
    than dropped)."""
    seconds = slurm_seconds(text)
    return seconds if seconds is not None and 0 < seconds <= MAX_TIME_LIMIT else math.nan


def _fold(check: RowCheck, header: list[str], idx: dict[str, int], rows: list[tuple[int, list[str]]]) -> _Fold:
    """Group rows by job: ``123.batch`` and ``123.0`` go into ``123``."""
    fold = _Fold()
    for line, r in checked_rows(check, header, rows):
        job_id, dot, _ = r[idx["jobid"]].strip().partition(".")
        job = fold.jobs.setdefault(job_id, _Job())
        job.rows += 1
        if dot:
            fold.steps += 1
            gpus = tres_gpus(r[idx["alloctres"]])
            if gpus and gpus > job.step_gpus:
                job.step_gpus, job.step_line = gpus, line
            continue
        if job.cells is not None:
            fold.duplicates += 1
        job.line, job.cells = line, r
    return fold


def _job(check: RowCheck, idx: dict[str, int], job_id: str, job: _Job
         ) -> tuple[int, int, float, list[str]] | None:
    """(submit, GPUs, duration, the job's own row) of a folded job, or None after recording the drop."""
    if job.cells is None:
        check.drop(f"line {job.step_line or '?'} (job {job_id})", "JobID", "job step without its job's own row")
        return None
    r, where = job.cells, f"line {job.line}"
    submit = _time(check, where, "submit", r[idx["submit"]])
    if submit is None:
        return None
    start_text, end_text = r[idx["start"]].strip(), r[idx["end"]].strip()
    if start_text.lower() in UNSET:
        check.drop(where, "Start", "job never started (Start is Unknown/None)", start_text)
        return None
    if end_text.lower() in UNSET:
        check.drop(where, "End", "job has not ended (End is Unknown; still running?)", end_text)
        return None
    start, end = _time(check, where, "start", start_text), _time(check, where, "end", end_text)
    if start is None or end is None:
        return None
    gpus = _gpus(check, where, r[idx["alloctres"]], job)
    if gpus is None:
        return None
    duration = check.seconds(where, "End", str(end - start), positive=True)
    return None if duration is None else (submit, gpus, duration, r)


def _time(check: RowCheck, where: str, column: str, text: str) -> int | None:
    t = wallclock_seconds(text)
    if t is None:
        check.drop(where, _SPELLING[column], _TIME_RULE, text)
    return t


def _gpus(check: RowCheck, where: str, tres: str, job: _Job) -> int | None:
    gpus = tres_gpus(tres)
    if gpus is None:
        check.drop(where, "AllocTRES", "GPU count in gres/gpu=N is not a whole number", tres)
        return None
    gpus = gpus or job.step_gpus
    if gpus < 1:
        check.drop(where, "AllocTRES", "job has no GPUs (no gres/gpu in AllocTRES)", tres)
        return None
    return gpus


def tres_cpus(tres: str) -> int:
    """CPUs in a TRES string (``cpu=N``); 0 when none are listed or the count is not a number."""
    for item in tres.split(","):
        key, _, value = item.strip().partition("=")
        if key == "cpu":
            return int(value) if value.strip().isdigit() else 0
    return 0


def tres_gpus(tres: str) -> int | None:
    """GPUs in an AllocTRES string; 0 when none are listed, None when a count is not a number."""
    plain, typed = None, 0
    for item in tres.split(","):
        key, _, value = item.strip().partition("=")
        if key != "gres/gpu" and not key.startswith("gres/gpu:"):
            continue
        if not value.strip().isdigit():
            return None
        if key == "gres/gpu":
            plain = int(value)
        else:
            typed += int(value)
    return plain if plain is not None else typed


def _notes(check: RowCheck, fold: _Fold) -> None:
    if fold.steps:
        check.report.notes.append(f"{fold.steps:,} job-step row(s) (e.g. 123.batch, 123.0) folded into their jobs")
    if fold.duplicates:
        check.report.notes.append(f"{fold.duplicates:,} job(s) listed more than once (requeued); the last row is kept")
