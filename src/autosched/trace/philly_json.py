"""The original Philly ``cluster_job_log``: a JSON list of jobs, each with its scheduling attempts.

Schema (msr-fiddle/philly-traces README): ``jobid``, ``user``, ``vc``, ``status`` (Pass, Killed,
Failed), ``submitted_time``, and ``attempts``, a list of ``{start_time, end_time, detail}`` where
``detail`` lists the servers (``ip``) and the GPUs on each (``gpus``). Times are
``YYYY-MM-DD HH:MM:SS``, local time without a zone.

Mapping: submit = ``submitted_time``; duration = the sum of the attempts' run times
(``end_time - start_time``), so the time between a failed attempt and its retry is not counted as
run time; GPUs = the largest attempt's GPU count (attempts of one job can differ, for instance
after a failure; the largest is what the job asked for at some point). A job with no attempt, an
attempt with a missing time (a logging error, says the README), or a last attempt with no end (still
running when the log was cut) cannot be replayed and is dropped with its reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from .parsing import Columns, from_first_day, new_columns, open_text, wallclock_seconds
from .report import RowCheck
from .table import TraceError

_WS = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


def detect(head: str) -> bool:
    # any of the keys: a job with many attempts can push "jobid" past the first 4 KiB
    return head.lstrip().startswith("[") and any(k in head for k in ('"jobid"', '"attempts"', '"submitted_time"'))


def parse(path: Path, check: RowCheck) -> Columns:
    with open_text(path) as f:
        text = f.read()
    stamps: list[int] = []
    cols = new_columns("job_id", "num_gpus", "duration", "user", "vc", "status")
    uneven = 0
    for line, entry in iter_json_list(path, text):
        if not isinstance(entry, dict):
            check.drop(f"line {line}", "*", "job entry is not a JSON object", type(entry).__name__)
            continue
        job = _job(check, line, entry)
        if job is None:
            continue
        submit, gpus, duration, even = job
        uneven += not even
        stamps.append(submit)
        cols["job_id"].append(str(entry.get("jobid")))
        cols["num_gpus"].append(gpus)
        cols["duration"].append(duration)
        for key in ("user", "vc", "status"):
            cols[key].append(_text(entry.get(key)))
    cols["submit_time"] = from_first_day(stamps)
    if uneven:
        check.report.notes.append(
            f"{uneven:,} job(s) used different GPU counts in different attempts; num_gpus is the largest")
    return cols


def _job(check: RowCheck, line: int, entry: dict[str, object]) -> tuple[int, int, float, bool] | None:
    """(submit, GPUs, duration, all attempts had the same GPUs) or None after recording the drop."""
    where = f"line {line} (jobid {_text(entry.get('jobid'))})"
    submit = _time(entry.get("submitted_time"))
    if submit is None:
        check.drop(where, "submitted_time", "time is not of the form YYYY-MM-DD HH:MM:SS", entry.get("submitted_time"))
        return None
    attempts = entry.get("attempts")
    if not isinstance(attempts, list) or not attempts:
        check.drop(where, "attempts", "job has no scheduling attempt (it never ran)")
        return None
    runs = _attempt_runs(check, where, attempts)
    if runs is None:
        return None
    duration = float(sum(r for r, _ in runs))
    gpus = [g for _, g in runs]
    if max(gpus) < 1:
        check.drop(where, "attempts.detail.gpus", "job requests no GPUs (must be >= 1)", 0)
        return None
    if duration <= 0:
        check.drop(where, "attempts", "duration is not positive", duration)
        return None
    return submit, max(gpus), duration, len(set(gpus)) == 1


def _attempt_runs(check: RowCheck, where: str, attempts: list) -> list[tuple[int, int]] | None:
    """(run time, GPUs) per attempt, or None after recording why the job cannot be used."""
    runs = []
    for k, a in enumerate(attempts, start=1):
        a = a if isinstance(a, dict) else {}
        start, end = _time(a.get("start_time")), _time(a.get("end_time"))
        if end is None and k == len(attempts) and a.get("end_time") in (None, "None", ""):
            check.drop(where, "attempts.end_time", "job was still running when the log was cut (last attempt has no end_time)")
            return None
        if start is None or end is None:
            column = "attempts.start_time" if start is None else "attempts.end_time"
            check.drop(where, column, "an attempt has no usable start_time/end_time (logging error)",
                       f"attempt {k}: {a.get(column.split('.')[1])!r}")
            return None
        if end < start:
            check.drop(where, "attempts.end_time", "an attempt ends before it starts", f"attempt {k}")
            return None
        runs.append((end - start, _attempt_gpus(a.get("detail"))))
    return runs


def _attempt_gpus(detail: object) -> int:
    if not isinstance(detail, list):
        return 0
    return sum(len(d.get("gpus") or []) for d in detail if isinstance(d, dict))


def _time(value: object) -> int | None:
    return wallclock_seconds(value) if isinstance(value, str) else None


def _text(value: object) -> str:
    return "" if value is None else str(value)


def iter_json_list(path: Path, text: str) -> Iterator[tuple[int, object]]:
    """(line, element) for each element of a top-level JSON list, decoding one element at a time
    so that every job and every syntax error is named by its line."""
    pos = _skip_space(text, 0)
    if text[pos:pos + 1] != "[":
        raise TraceError(f"{path}: {_where(text, pos)}: expected a JSON list of jobs ('[')")
    pos = _skip_space(text, pos + 1)
    line, counted = 1, 0
    if text[pos:pos + 1] == "]":
        pos = _skip_space(text, pos + 1)
    else:
        while True:
            line += text.count("\n", counted, pos)
            counted = pos
            try:
                obj, pos = _DECODER.raw_decode(text, pos)
            except json.JSONDecodeError as e:
                raise TraceError(f"{path}: line {e.lineno}, column {e.colno}: bad JSON: {e.msg}") from None
            yield line, obj
            at = _skip_space(text, pos)
            sep = text[at:at + 1]
            if sep not in (",", "]"):
                raise TraceError(f"{path}: {_where(text, at)}: bad JSON: expected ',' or ']' after a job")
            pos = _skip_space(text, at + 1)
            if sep == "]":
                break
    if pos < len(text):
        raise TraceError(f"{path}: {_where(text, pos)}: bad JSON: extra data after the list of jobs")


def _skip_space(text: str, pos: int) -> int:
    """The position of the first character at or after `pos` that is not white space."""
    m = _WS.match(text, pos)
    assert m is not None  # `\s*` matches everywhere, if only the empty string
    return m.end()


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {column}"
