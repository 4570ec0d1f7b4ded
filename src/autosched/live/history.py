"""A live cluster's job history: sacct text kept incrementally, read into what the Controller
observes, with each job's run time as known at a given moment.

Finished jobs go through the project's sacct loader (`autosched.trace.slurm`: GPUs from the TRES,
step folding, every dropped row counted under its rule). What the loader does not keep and the
live layer needs - absolute times, account, time limit, and the jobs still pending or running -
is read here from the same rows, by job id.

Files are read under the project's input rules (`atomic.check_input`: regular files only), with
bounded memory: a row longer than `MAX_ROW_BYTES`, with NUL bytes or not UTF-8 is skipped and
counted, a seed history keeps only the rows of the window it can serve, and a file larger than
`MAX_HISTORY_BYTES` is refused. Every error names the user's file.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..adapt.observe import BACKLOG_HISTORY, Observation, impute_from_past
from ..atomic import check_input, write_text_atomic
from ..errors import InputError
from ..trace.io import load_trace
from ..trace.parsing import found_columns, wallclock_seconds
from ..trace.report import LoadReport, RowCheck
from ..trace.slurm import UNSET, slurm_duration, tres_cpus, tres_gpus
from ..trace.table import Trace, TraceError
from .errors import LiveError

HISTORY_FILE = "history.sacct"  # the sacct rows seen so far, in the agent's state directory
FETCHED_FILE = "fetched.json"  # until when they were fetched
OVERLAP = 900.0  # s of history fetched again each round: jobs that changed state since
MAX_ROW_BYTES = 64 * 1024  # a sacct row is a few hundred bytes; a longer line is not one
MAX_HISTORY_BYTES = 4 * 2**30  # a history file (seed or cache) larger than this is refused
_MAX_FETCHED_BYTES = 4096
# columns a sacct text must have (those of the project's sacct loader)
REQUIRED_COLUMNS = ("JobID", "Submit", "Start", "End", "AllocTRES")
CLOCK_SLACK = 3600.0  # s a fetched job may be submitted after the agent's now without counting
_CACHE_HINT = "delete it and the next round fetches the history window again"

ACTIVE_STATES = ("PENDING", "RUNNING", "REQUEUED", "SUSPENDED", "CONFIGURING", "COMPLETING",
                 "RESIZING", "REQUEUE_HOLD", "REQUEUE_FED")
# rules of the loader that are not faults of the row: a job that is still queued or running, or
# that uses no GPU
_NOT_MALFORMED = ("job never started", "job has not ended", "job has no GPUs")


def prune_sacct(text: str, before: float) -> str:
    """`text` without the rows (jobs and their steps) of jobs that ended before `before`: the
    history cache keeps what a round can still use, not everything ever seen."""
    lines = text.splitlines()
    if len(lines) < 2:
        return text
    header = [h.strip().lower() for h in lines[0].split("|")]
    if "end" not in header:
        return text
    i = header.index("end")
    gone = set()
    for line in lines[1:]:
        cells = line.split("|")
        if len(cells) > i and "." not in cells[0]:
            t = wallclock_seconds(cells[i]) if cells[i].strip().lower() not in UNSET else None
            if t is not None and t < before:
                gone.add(cells[0])
    keep = [line for line in lines[1:] if line.split("|", 1)[0].split(".")[0] not in gone]
    return "\n".join([lines[0], *keep]) + "\n"


def _header_line(text: str) -> str:
    return text.partition("\n")[0].rstrip("\r")


def merge_sacct(old: str, new: str) -> str:
    """`new` sacct rows merged into `old` by JobID (a newer row of a job replaces the older;
    rows are kept in order of first appearance). Both must have the same header, or `old` is
    empty."""
    if not old.strip():
        return new if new.endswith("\n") or not new else new + "\n"
    if not new.strip():
        return old
    old_lines, new_lines = old.splitlines(), new.splitlines()
    if old_lines[0] != new_lines[0]:
        raise LiveError("sacct columns changed between fetches: "
                        f"{old_lines[0]!r} vs {new_lines[0]!r}")
    rows: dict[str, str] = {}
    for line in old_lines[1:] + new_lines[1:]:
        if line.strip():
            rows[line.split("|", 1)[0] if "|" in line else line] = line
    return "\n".join([old_lines[0], *rows.values()]) + "\n"


@dataclass(frozen=True)
class LiveJobs:
    """Every job of the history, finished or not; times are unix seconds (NaN: not yet)."""

    job_id: np.ndarray
    submit: np.ndarray
    start: np.ndarray
    end: np.ndarray
    gpus: np.ndarray
    user: np.ndarray
    account: np.ndarray
    partition: np.ndarray
    time_limit: np.ndarray  # s; NaN when unlimited or not reported
    cpus: np.ndarray  # CPUs (sacct's NCPUS); 0 when not reported
    finished: np.ndarray  # bool: the loader kept it (ended, with GPUs and a run time)
    duration: np.ndarray  # s of run time (finished) or so far (running), 0 if pending
    report: LoadReport = field(compare=False)
    malformed: int = 0  # rows dropped for a fault of the row (not for being queued/running)

    def __len__(self) -> int:
        return len(self.job_id)

    def faults(self) -> LoadReport:
        """`report` with only the rows dropped for a fault of the row (``malformed``), not those
        of jobs still queued or running or without GPUs: a sacct export keeps those rows."""
        drops = {k: d for k, d in self.report.drops.items()
                 if not any(d.rule.startswith(x) for x in _NOT_MALFORMED)}
        return replace(self.report, drops=drops, kept=self.report.rows - sum(
            d.count for d in drops.values()))


# the per-job arrays of LiveJobs, in order (text columns first)
_TEXT = ("job_id", "user", "account", "partition")
_COLUMNS = ("job_id", "submit", "start", "end", "gpus", "user", "account", "partition",
            "time_limit", "cpus", "finished", "duration")


def take_jobs(jobs: LiveJobs, keep: np.ndarray) -> LiveJobs:
    """The jobs of `jobs` where `keep` (a bool mask or indices), same report and counts."""
    return LiveJobs(**{n: getattr(jobs, n)[keep] for n in _COLUMNS}, report=jobs.report,
                    malformed=jobs.malformed)


def read_jobs(text: str, source: str = "sacct", *, lines: list[int] | None = None,
              skipped: LoadReport | None = None, until: float | None = None) -> LiveJobs:
    """The jobs in sacct text (see `Connector.sacct_rows`); malformed rows are skipped and
    counted (``malformed``, with their rules in ``report``, which names `source`). `lines` gives
    each line's number in the file the text was read from (drop examples then name those
    lines), `skipped` the rows the file's reader already skipped (counted the same way). With
    `until` (now), a job submitted after it is such a row: a clock behind Slurm's."""
    report = LoadReport(source=source, format="slurm")
    text, nul = _without_bad_rows(text, report, lines, until)
    if text.strip():
        trace, loaded = _load_sacct(text, source)
        for rule in loaded.drops.values():
            rule.examples = [_renumber(e, lines) for e in rule.examples]
        report.drops.update({k: v for k, v in loaded.drops.items() if k not in report.drops})
        report.rows, report.kept, report.notes = loaded.rows + nul, loaded.kept, loaded.notes
    else:
        trace = None
    if skipped is not None:
        for name, rule in skipped.drops.items():
            report.drops.setdefault(name, rule)
        report.rows += skipped.rows
    malformed = sum(r.count for r in report.drops.values()
                    if not any(r.rule.startswith(x) for x in _NOT_MALFORMED))
    if trace is None:
        return _empty(report, malformed)
    rows = _job_rows(text)
    done = {str(j): (float(d), int(g)) for j, d, g in zip(trace.job_id, trace.duration, trace.num_gpus)}
    cols: dict[str, list] = {k: [] for k in _COLUMNS}
    for job_id, r in rows.items():
        submit = wallclock_seconds(r.get("submit", ""))
        if submit is None:
            continue
        start = _stamp(r.get("start", ""))
        end = _stamp(r.get("end", ""))
        if job_id in done:
            duration, gpus = done[job_id]
            finished = True
        else:
            state = (r.get("state", "").split() or [""])[0]
            if state not in ACTIVE_STATES or not math.isnan(end):
                continue  # ended without being replayable (cancelled in queue, no GPUs, ...)
            gpus = tres_gpus(r.get("alloctres", "")) or tres_gpus(r.get("reqtres", "")) or 0
            if gpus < 1:
                continue
            duration, finished = 0.0, False
        limit = slurm_duration(r.get("timelimit", ""))  # NaN: no limit (0 is none, as in Slurm)
        # the CPUs the job asked for (ReqTRES): Slurm's TRES factor weighs them while it waits,
        # and DefCpuPerGPU adds to them when it starts (ClusterSpec.job_cpus); else those it had
        asked = tres_cpus(r.get("reqtres", ""))
        cpus_text = str(asked) if asked else (r.get("alloccpus") or r.get("ncpus") or "").strip()
        for k, v in (("job_id", job_id), ("submit", float(submit)), ("start", start), ("end", end),
                     ("gpus", gpus), ("user", r.get("user", "").strip()),
                     ("account", r.get("account", "").strip()),
                     ("partition", r.get("partition", "").strip()), ("time_limit", limit),
                     ("cpus", float(cpus_text) if cpus_text.isdigit() else 0.0),
                     ("finished", finished), ("duration", duration)):
            cols[k].append(v)
    arrays = {k: np.asarray(v, dtype=object if k in _TEXT
                            else bool if k == "finished" else np.int64 if k == "gpus" else float)
              for k, v in cols.items()}
    order = np.argsort(arrays["submit"], kind="stable")
    arrays = {k: a[order] for k, a in arrays.items()}
    return LiveJobs(**arrays, report=report, malformed=malformed)


def _load_sacct(text: str, source: str) -> tuple[Trace, LoadReport]:
    """The project's sacct loader on `text` (it reads files: a private temporary one, which no
    message names: its errors name `source`)."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "sacct.txt"
        p.write_text(text)
        try:
            trace, report = load_trace(p, format="slurm")
        except TraceError as e:
            raise LiveError(str(e).replace(str(p), source)) from None
    report.source = source
    return trace, report


def _without_bad_rows(text: str, report: LoadReport, lines: list[int] | None,
                      until: float | None = None) -> tuple[str, int]:
    """`text` without its rows that hold NUL bytes (no sacct row does; csv refuses the whole text
    for one) or U+FFFD (a byte that was not UTF-8, as `SlurmRunner` reads a command's output),
    and, with `until`, without the jobs submitted after it (their steps go with them), each row
    counted in `report` (a job's steps are not)."""
    future = _future_jobs(text, until) if until is not None else {}
    if "\x00" not in text and "\ufffd" not in text and not future:
        return text, 0
    check = RowCheck(report)
    out = []
    for k, line in enumerate(text.split("\n")):
        job = line.split("|", 1)[0].strip() if k else ""
        why = ("row holds NUL bytes" if "\x00" in line else
               "row is not UTF-8 text" if "\ufffd" in line else None)
        n = lines[k] if lines is not None and k < len(lines) else k + 1
        if why is not None:
            check.drop(f"line {n}", "JobID", why)
            out.append("")  # keeps the line numbers
        elif job in future:
            check.drop(f"line {n}", "Submit", "submitted after now (a future date)", future[job])
            out.append("")
        elif job.split(".")[0] in future:
            out.append("")
        else:
            out.append(line)
    return "\n".join(out), report.dropped


def _future_jobs(text: str, until: float) -> dict[str, str]:
    """The job rows of `text` (by JobID, the first column) submitted after `until`, with their
    Submit cell."""
    lines = text.split("\n")
    header = [h.strip().lower() for h in lines[0].split("|")]
    if not header or header[0] != "jobid" or "submit" not in header:
        return {}
    i = header.index("submit")
    out = {}
    for line in lines[1:]:
        cells = line.split("|")
        if len(cells) > i and "." not in cells[0]:
            t = wallclock_seconds(cells[i])
            if t is not None and t > until:
                out[cells[0].strip()] = cells[i].strip()
    return out


_LINE = re.compile(r"\bline (\d+)")


def _renumber(example: str, lines: list[int] | None) -> str:
    """A drop example's "line N" of the text as the line of the file it was read from."""
    if lines is None:
        return example
    return _LINE.sub(lambda m: f"line {lines[int(m[1]) - 1]}" if 0 < int(m[1]) <= len(lines)
                     else m[0], example)


def _empty(report: LoadReport, malformed: int = 0) -> LiveJobs:
    z = np.zeros(0)
    o = np.zeros(0, dtype=object)
    return LiveJobs(o, z, z, z, np.zeros(0, np.int64), o, o, o, z, z, np.zeros(0, bool), z, report,
                    malformed)


def _stamp(text: str) -> float:
    if text.strip().lower() in UNSET:
        return float("nan")
    t = wallclock_seconds(text)
    return float("nan") if t is None else float(t)


def _job_rows(text: str) -> dict[str, dict[str, str]]:
    """Job rows (not steps) by JobID, the last row of a job winning; cells by lower-cased column."""
    reader = csv.reader(io.StringIO(text), delimiter="|", quoting=csv.QUOTE_NONE)
    header = [h.strip().lower() for h in next(reader, [])]
    out: dict[str, dict[str, str]] = {}
    for r in reader:
        if len(r) == len(header) + 1 and r[-1] == "":
            r = r[:-1]
        if len(r) != len(header) or not r or "." in r[0]:
            continue
        out[r[0].strip()] = dict(zip(header, r))
    return out


# -- reading history files --------------------------------------------------------------------

@dataclass
class SacctFile:
    """sacct text read from a file: its header and the rows kept, each kept line's number in the
    file (for messages), and the rows skipped while reading, by rule (``skipped.drops``)."""

    text: str
    lines: list[int]
    skipped: LoadReport


def read_sacct_file(path: Path, what: str, since: float | None = None,
                    until: float | None = None, empty_ok: bool = False) -> SacctFile:
    """The sacct text of `path` (`what` names it in messages: "seed history", "history cache").

    Refused with one `LiveError` naming the file: not a regular file (a FIFO, a device such as
    ``/dev/zero``), larger than `MAX_HISTORY_BYTES`, binary, or a header without the sacct
    columns. Skipped and counted: a row longer than `MAX_ROW_BYTES`, with NUL bytes or not UTF-8,
    and (with `until`) a job submitted after `until`. With `since`, the rows of jobs submitted
    before it are left out (not counted: they are older than what the history needs). Memory is
    bounded by the rows kept. With `empty_ok` an empty file is no rows (a cache of no history)."""
    path = Path(path)
    try:
        check_input(path, f"{what} (sacct text)")
        size = os.stat(path).st_size
    except InputError as e:
        raise LiveError(str(e)) from None
    except OSError as e:
        raise LiveError(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    if size > MAX_HISTORY_BYTES:
        raise LiveError(f"{path}: {size / 2**30:.1f} GiB is more than a {what} may have "
                        f"({MAX_HISTORY_BYTES / 2**30:g} GiB); export a shorter period")
    skipped = LoadReport(source=str(path), format="slurm")
    if size == 0 and empty_ok:
        return SacctFile("", [], skipped)
    check = RowCheck(skipped)
    try:
        with open(path, "rb") as f:
            header = _header(path, what, f.readline(MAX_ROW_BYTES + 1))
            cells = [c.strip().lower() for c in header.split("|")]
            ij, isub = cells.index("jobid"), cells.index("submit")
            out, lines, kept_jobs = [header], [1], set()
            number = 1
            while True:
                raw = f.readline(MAX_ROW_BYTES + 1)
                if not raw:
                    break
                number += 1
                if len(raw) > MAX_ROW_BYTES and not raw.endswith(b"\n"):
                    _skip_rest_of_line(f)
                    check.drop(f"line {number}", "JobID", f"row longer than {MAX_ROW_BYTES // 1024} KiB")
                    skipped.rows += 1
                    continue
                if b"\x00" in raw:
                    check.drop(f"line {number}", "JobID", "row holds NUL bytes")
                    skipped.rows += 1
                    continue
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError:
                    check.drop(f"line {number}", "JobID", "row is not UTF-8 text")
                    skipped.rows += 1
                    continue
                if not line.strip():
                    continue
                row = line.split("|")
                job = row[ij].strip() if len(row) > ij else ""
                if "." in job:  # a step: kept with its job
                    if (since is None and until is None) or job.split(".")[0] in kept_jobs:
                        out.append(line)
                        lines.append(number)
                    continue
                submit = wallclock_seconds(row[isub]) if len(row) > isub else None
                if submit is not None and until is not None and submit > until:
                    check.drop(f"line {number}", "Submit", "submitted after now (a future date)",
                               row[isub].strip())
                    skipped.rows += 1
                    continue
                if submit is not None and since is not None and submit < since:
                    continue
                kept_jobs.add(job)
                out.append(line)
                lines.append(number)
    except OSError as e:
        raise LiveError(f"{path}: cannot read the {what}: {e.strerror or e}") from None
    return SacctFile("\n".join(out) + "\n", lines, skipped)


def _header(path: Path, what: str, raw: bytes) -> str:
    """The header line of a sacct file, or a `LiveError` saying what the file is instead."""
    binary = f"{path}: a binary file, not sacct text; a {what} must be the output of `sacct --parsable2`"
    if b"\x00" in raw or (len(raw) > MAX_ROW_BYTES and not raw.endswith(b"\n")):
        raise LiveError(binary)
    try:
        header = raw.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError:
        raise LiveError(binary) from None
    if not header.strip():
        raise LiveError(f"{path}: empty; a {what} must be the output of `sacct --parsable2` "
                        "(a header line, then job rows)")
    cells = [c.strip().lower() for c in header.split("|")]
    missing = [c for c in REQUIRED_COLUMNS if c.lower() not in cells]
    if missing:
        raise LiveError(f"{path}: line 1: a {what} must be sacct text, the output of `sacct "
                        "--parsable2` (as `autosched slurm history` writes it with a .txt name; "
                        "other trace formats have no absolute times): missing column(s) "
                        f"{', '.join(missing)}; found {found_columns(header.split('|'))}")
    return header


def _skip_rest_of_line(f: io.BufferedReader) -> None:
    while True:
        chunk = f.readline(MAX_ROW_BYTES)
        if not chunk or chunk.endswith(b"\n"):
            return


def check_seed(path: Path | str) -> None:
    """Check a seed history before the agent is set up with it: a regular file of sacct text
    (its header); one `LiveError` naming the file otherwise."""
    path = Path(path)
    try:
        check_input(path, "seed history (sacct text)")
        with open(path, "rb") as f:
            _header(path, "seed history", f.readline(MAX_ROW_BYTES + 1))
    except InputError as e:
        raise LiveError(str(e)) from None
    except OSError as e:
        raise LiveError(f"{path}: cannot read the seed history: {e.strerror or e}") from None


def read_seed(path: Path | str, since: float, until: float) -> LiveJobs:
    """The jobs of a seed history (a sacct export: absolute times) submitted in [since, until];
    a job submitted after `until` is skipped and counted, as is every malformed row."""
    got = read_sacct_file(Path(path), "seed history", since, until)
    return read_jobs(got.text, str(path), lines=got.lines, skipped=got.skipped)


class SeedHistory:
    """A seed history that is read again only when the file changes (its device, inode, size or
    modification time differ): ``agent run`` reads the history at every drift poll, and a seed
    file may hold gigabytes. Each read keeps the rows of one window (`read_seed`); a later window
    that starts no earlier and ends no earlier is served from it. (Rows submitted after the
    first window's end were skipped as future rows then; a file that was not rewritten cannot
    have gained a job submitted since.)"""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._read: tuple[tuple[int, ...], float, float, LiveJobs] | None = None
        self.reads = 0  # how many times the file was read (for tests and figures)

    def jobs(self, since: float, until: float) -> LiveJobs:
        """The jobs of the seed history submitted in [since, until] (as `read_seed`)."""
        try:
            st = os.stat(self.path)
            key: tuple[int, ...] | None = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            key = None  # read_seed says what is wrong with the file
        if key is not None and self._read is not None:
            was, lo, hi, jobs = self._read
            if was == key and lo <= since and hi <= until:
                return jobs if since == lo else take_jobs(jobs, jobs.submit >= since)
        jobs = read_seed(self.path, since, until)
        self.reads += 1
        self._read = None if key is None else (key, since, until, jobs)
        return jobs


def read_fetched(path: Path) -> float | None:
    """Until when the history cache was fetched (``fetched.json``), None when it was not yet;
    a `LiveError` naming the file when it is not the agent's record."""
    if not os.path.lexists(path):
        return None
    try:
        check_input(path, "fetch record (JSON)")
        if os.stat(path).st_size > _MAX_FETCHED_BYTES:
            raise LiveError(f"{path}: too large for the agent's fetch record; {_CACHE_HINT}")
        data = json.loads(Path(path).read_bytes().decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
        if "until" not in data:
            raise ValueError("no 'until'")
        until = data["until"]
        if isinstance(until, bool) or not isinstance(until, (int, float)) or not math.isfinite(until):
            raise ValueError(f"'until' is {until!r}, not a time")
    except InputError as e:
        raise LiveError(str(e)) from None
    except OSError as e:
        raise LiveError(f"{path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:  # JSON, UTF-8 (a UnicodeDecodeError is one), the field
        what = f"{type(e).__name__}: {e}" if isinstance(e, UnicodeDecodeError) else str(e)
        raise LiveError(f"{path}: not the agent's fetch record ({what.splitlines()[0][:120]}); "
                        f"{_CACHE_HINT}") from None
    return float(until)


def update_history(state_dir: Path, fetch: Callable[[float, float], str], now: float,
                   window: float, seed: SeedHistory | None = None, save: bool = True) -> LiveJobs:
    """The history at `now`: the cache in `state_dir` updated with what `fetch(since, until)`
    (`Connector.sacct_rows`) has since the last fetch (with `OVERLAP`), incrementally, plus the
    `seed` history's jobs of the last two windows the cluster no longer reports. With `save` the
    cache and its fetch record are written (a round); without, nothing is (a read-only view)."""
    state_dir = Path(state_dir)
    cache = state_dir / HISTORY_FILE
    try:
        old = read_sacct_file(cache, "history cache", empty_ok=True).text if os.path.lexists(cache) else ""
    except LiveError as e:
        raise LiveError(f"{e}; {_CACHE_HINT}") from None
    if not old.partition("\n")[2].strip():
        old = ""  # a header only
    fetched = read_fetched(state_dir / FETCHED_FILE)
    since = now - window if fetched is None else min(fetched - OVERLAP, now - OVERLAP)
    since = max(since, now - window - OVERLAP)
    new = fetch(since, now)
    if old and new.strip() and _header_line(old) != _header_line(new):
        # the cache was fetched with other columns (by an older autosched, whose rows a job name
        # could forge): it is not merged into, the whole window is fetched again
        old, since = "", now - window
        new = fetch(since, now)
    text = prune_sacct(merge_sacct(old, new), now - 2 * window)
    if save:
        try:
            write_text_atomic(cache, text)
            write_text_atomic(state_dir / FETCHED_FILE, json.dumps({"until": now}))
        except OSError as e:
            raise LiveError(f"{cache}: cannot write the history cache: {e.strerror or e}") from None
    # a job submitted during this round's reads is after `now` by seconds: only a clock far
    # behind Slurm's makes a row "from the future"
    jobs = read_jobs(text, source=f"sacct since {since:.0f}", until=now + CLOCK_SLACK)
    if seed is not None:
        jobs = combine(jobs, seed.jobs(now - 2 * window, now))
    return jobs


# -- what the Controller sees -----------------------------------------------------------------

def observation(jobs: LiveJobs, now: float, window: float, seed: int = 0,
                backlog_history: bool = BACKLOG_HISTORY) -> tuple[Observation, float]:
    """What the Controller sees at `now` of the jobs submitted in the last `window`, and the
    unix time its times count from (00:00 UTC of the first day, as the trace loaders count).

    Unfinished jobs keep their place in the history with an imputed duration (as
    `autosched.adapt.observe` does in the simulator); running and pending ones also form the
    backlog the coming period starts with; with `backlog_history` (as `observe`) each backlog
    job carries its run time so far x GPUs (``attained``) and its age since submission. Every
    job carries its user, account, partition, CPUs and time limit (a running job in the backlog:
    what is left of its limit, at least a second)."""
    start = now - window
    keep = jobs.submit >= start
    active = ~jobs.finished & (jobs.submit <= now)
    first = float(jobs.submit[keep].min()) if keep.any() else start
    origin = math.floor(first / 86400.0) * 86400.0
    idx = np.flatnonzero(keep & (jobs.submit <= now))
    done = jobs.finished[idx]
    ran = run_so_far(jobs, now)
    total = durations_at(jobs, now, seed)
    history = job_trace(jobs, idx, jobs.submit[idx] - origin, np.maximum(total[idx], 1.0),
                        jobs.time_limit[idx])
    end = np.where(done, jobs.end[idx] - origin, np.nan)
    # Every unfinished job gets its imputed total, also one submitted before the window (what it
    # has run is only a lower bound of its duration).
    act = np.flatnonzero(active)
    if backlog_history:  # in the order the backlog's rows take (first submission), so that
        act = act[np.argsort(jobs.submit[act], kind="stable")]  # `running` lines up with them
    remaining = np.maximum(total[act] - ran[act], 1.0)
    # Slurm plans a running job's end at its start + limit: in the backlog, which starts it at
    # `now`, that is what is left of the limit
    left = np.maximum(jobs.time_limit[act] - ran[act], 1.0)  # NaN (no limit) stays NaN
    backlog = job_trace(jobs, act, np.full(len(act), now - origin), remaining, left)
    if backlog_history:
        backlog = backlog.replace(attained=ran[act] * jobs.gpus[act], age=now - jobs.submit[act])
    obs = Observation(now - origin, start - origin, history, done, end, backlog,
                      int((~done).sum()), ~np.isnan(jobs.start[act]))
    return obs, origin


def run_so_far(jobs: LiveJobs, now: float) -> np.ndarray:
    """Each job's run time by `now`: from its start (0 if it has not started), to `now`."""
    return np.where(np.isnan(jobs.start), 0.0, np.maximum(now - np.nan_to_num(jobs.start), 0.0))


def durations_at(jobs: LiveJobs, now: float, seed: int = 0) -> np.ndarray:
    """Each job's run time as known at `now`: the true one of a finished job; for one submitted
    by `now` that has not finished, a draw of its total given what it has run so far
    (`impute_from_past`, seeded by `seed` and `now`); for one submitted later, 0."""
    ran = run_so_far(jobs, now)
    out = np.where(jobs.finished, jobs.duration, ran)
    rng = np.random.default_rng([seed, int(now)])
    # Durations are estimated from every job known by now, not only a window's (see
    # autosched.adapt.observe: a window's finished jobs are its short ones).
    past = np.flatnonzero(jobs.submit <= now)
    out[past] = impute_from_past(out[past], jobs.finished[past], jobs.submit[past], jobs.gpus[past], now, rng)
    return out


def job_trace(jobs: LiveJobs, idx: np.ndarray, submit: np.ndarray, duration: np.ndarray,
              limit: np.ndarray) -> Trace:
    """The jobs `idx` as a Trace: Slurm's user, account and partition (also as the VC, the
    workload models' unit), CPUs and time limit (NaN: none)."""
    return Trace.from_columns({
        "job_id": jobs.job_id[idx].astype(str), "submit_time": submit.astype(float),
        "num_gpus": jobs.gpus[idx], "duration": duration.astype(float),
        "user": jobs.user[idx].astype(str), "account": jobs.account[idx].astype(str),
        "partition": jobs.partition[idx].astype(str), "vc": jobs.partition[idx].astype(str),
        "num_cpus": jobs.cpus[idx].astype(np.int64), "time_limit": np.asarray(limit, dtype=float)},
        source="sacct")


def combine(live: LiveJobs, seed: LiveJobs) -> LiveJobs:
    """`live` plus the jobs of `seed` it does not have (the cluster's own record wins)."""
    if not len(seed):
        return live if not seed.malformed else LiveJobs(
            **{n: getattr(live, n) for n in _COLUMNS}, report=live.report,
            malformed=live.malformed + seed.malformed)
    have = set(live.job_id.tolist())
    extra = np.array([j not in have for j in seed.job_id.tolist()], dtype=bool)
    cols = {n: np.concatenate([getattr(live, n), getattr(seed, n)[extra]]) for n in _COLUMNS}
    order = np.argsort(cols["submit"], kind="stable")
    return LiveJobs(**{n: a[order] for n, a in cols.items()}, report=live.report,
                    malformed=live.malformed + seed.malformed)
