"""A live cluster's job history: sacct text kept incrementally, read into what the Controller
observes, and the metrics of a past period as they really were.

Finished jobs go through the project's sacct loader (`autosched.trace.slurm`: GPUs from the TRES,
step folding, every dropped row counted under its rule). What the loader does not keep and the
live layer needs - absolute times, account, time limit, and the jobs still pending or running -
is read here from the same rows, by job id.
"""

from __future__ import annotations

import csv
import io
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..adapt.observe import BACKLOG_HISTORY, Observation, impute_from_past
from ..trace.io import load_trace
from ..trace.parsing import wallclock_seconds
from ..trace.report import LoadReport
from ..trace.slurm import UNSET, slurm_duration, tres_gpus
from ..trace.table import Trace
from .errors import LiveError

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
    finished: np.ndarray  # bool: the loader kept it (ended, with GPUs and a run time)
    duration: np.ndarray  # s of run time (finished) or so far (running), 0 if pending
    report: LoadReport = field(compare=False)
    malformed: int = 0  # rows dropped for a fault of the row (not for being queued/running)

    def __len__(self) -> int:
        return len(self.job_id)


def read_jobs(text: str, source: str = "sacct") -> LiveJobs:
    """The jobs in sacct text (see `Connector.sacct_rows`); malformed rows are skipped and
    counted (``malformed``, with their rules in ``report``)."""
    if not text.strip():
        return _empty(LoadReport(source=source, format="slurm"))
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "sacct.txt"
        p.write_text(text)
        trace, report = load_trace(p, format="slurm")
    report.source = source
    malformed = sum(r.count for r in report.drops.values()
                    if not any(r.rule.startswith(x) for x in _NOT_MALFORMED))
    rows = _job_rows(text)
    done = {str(j): (float(d), int(g)) for j, d, g in zip(trace.job_id, trace.duration, trace.num_gpus)}
    cols: dict[str, list] = {k: [] for k in ("job_id", "submit", "start", "end", "gpus", "user",
                                             "account", "partition", "time_limit", "finished",
                                             "duration")}
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
        for k, v in (("job_id", job_id), ("submit", float(submit)), ("start", start), ("end", end),
                     ("gpus", gpus), ("user", r.get("user", "")), ("account", r.get("account", "")),
                     ("partition", r.get("partition", "")),
                     ("time_limit", limit),
                     ("finished", finished), ("duration", duration)):
            cols[k].append(v)
    arrays = {k: np.asarray(v, dtype=object if k in ("job_id", "user", "account", "partition")
                            else bool if k == "finished" else np.int64 if k == "gpus" else float)
              for k, v in cols.items()}
    order = np.argsort(arrays["submit"], kind="stable")
    arrays = {k: a[order] for k, a in arrays.items()}
    return LiveJobs(**arrays, report=report, malformed=malformed)


def _empty(report: LoadReport) -> LiveJobs:
    z = np.zeros(0)
    o = np.zeros(0, dtype=object)
    return LiveJobs(o, z, z, z, np.zeros(0, np.int64), o, o, o, z, np.zeros(0, bool), z, report)


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


def observation(jobs: LiveJobs, now: float, window: float, seed: int = 0,
                backlog_history: bool = BACKLOG_HISTORY) -> tuple[Observation, float]:
    """What the Controller sees at `now` of the jobs submitted in the last `window`, and the
    unix time its times count from (00:00 UTC of the first day, as the trace loaders count).

    Unfinished jobs keep their place in the history with an imputed duration (as
    `autosched.adapt.observe` does in the simulator); running and pending ones also form the
    backlog the coming period starts with; with `backlog_history` (as `observe`) each backlog
    job carries its run time so far x GPUs (``attained``) and its age since submission."""
    start = now - window
    keep = jobs.submit >= start
    active = ~jobs.finished & (jobs.submit <= now)
    first = float(jobs.submit[keep].min()) if keep.any() else start
    origin = math.floor(first / 86400.0) * 86400.0
    idx = np.flatnonzero(keep & (jobs.submit <= now))
    done = jobs.finished[idx]
    ran = np.where(np.isnan(jobs.start), 0.0, np.maximum(now - np.nan_to_num(jobs.start), 0.0))
    dur = np.where(jobs.finished, jobs.duration, ran)
    rng = np.random.default_rng([seed, int(now)])
    # Durations are estimated from every job known by now, not only the window's (see
    # autosched.adapt.observe: a window's finished jobs are its short ones).
    past = np.flatnonzero(jobs.submit <= now)
    imputed_past = impute_from_past(dur[past], jobs.finished[past], jobs.submit[past], jobs.gpus[past], now, rng)
    imputed = imputed_past[np.searchsorted(past, idx)]
    history = _trace(jobs, idx, jobs.submit[idx] - origin, np.maximum(imputed, 1.0))
    end = np.where(done, jobs.end[idx] - origin, np.nan)
    # Every unfinished job gets its imputed total, also one submitted before the window (what it
    # has run is only a lower bound of its duration).
    act = np.flatnonzero(active)
    total = imputed_past[np.searchsorted(past, act)]
    remaining = np.maximum(total - ran[act], 1.0)
    backlog = _trace(jobs, act, np.full(len(act), now - origin), remaining)
    if backlog_history:
        backlog = backlog.replace(attained=ran[act] * jobs.gpus[act], age=now - jobs.submit[act])
    obs = Observation(now - origin, start - origin, history, done, end, backlog,
                      int((~done).sum()))
    return obs, origin


def _trace(jobs: LiveJobs, idx: np.ndarray, submit: np.ndarray, duration: np.ndarray) -> Trace:
    user = jobs.user[idx]
    account = jobs.account[idx]
    return Trace.from_columns({
        "job_id": jobs.job_id[idx].astype(str), "submit_time": submit.astype(float),
        "num_gpus": jobs.gpus[idx], "duration": duration.astype(float),
        # multifactor charges fair share to the user, else the VC; Slurm's associations are
        # accounts, so the account stands in for the user when there is one
        "user": np.where(account != "", account, user).astype(str),
        "vc": jobs.partition[idx].astype(str)}, source="sacct")


@dataclass(frozen=True)
class PeriodMetrics:
    """What really happened to the jobs submitted in [start, end) that finished."""

    start: float
    end: float
    jobs: int
    values: dict[str, float]

    def to_dict(self) -> dict:
        return {"start": self.start, "end": self.end, "jobs": self.jobs, **self.values}


def period_metrics(jobs: LiveJobs, start: float, end: float) -> PeriodMetrics:
    """JCT, queueing delay and slowdown of the jobs submitted in [start, end) that finished, as
    sacct recorded them (the metrics of `autosched.sim.metrics` that a real cluster can give)."""
    m = jobs.finished & (jobs.submit >= start) & (jobs.submit < end)
    jct = jobs.end[m] - jobs.submit[m]
    queue = jobs.start[m] - jobs.submit[m]
    run = jobs.duration[m]
    if not m.any():
        return PeriodMetrics(start, end, 0, {})
    vals = {"avg_jct": float(jct.mean()), "median_jct": float(np.median(jct)),
            "p95_jct": float(np.percentile(jct, 95)), "p99_jct": float(np.percentile(jct, 99)),
            "avg_queue": float(queue.mean()), "p99_queue": float(np.percentile(queue, 99)),
            "avg_slowdown": float(np.mean(jct / np.maximum(run, 10.0)))}
    return PeriodMetrics(start, end, int(m.sum()), vals)


def seed_jobs(path: Path, before: float) -> str:
    """sacct text of a seed file for the history: a sacct export (absolute times) as it is;
    another trace format is not accepted (its times are relative, so where it belongs in time
    is unknown)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise LiveError(f"{path}: cannot read the seed history: {e.strerror}") from None
    head = text.split("\n", 1)[0].lower()
    if "jobid" not in head or "|" not in head or "submit" not in head:
        raise LiveError(f"{path}: a seed history must be sacct text (the output of "
                        "`sacct --parsable2`, or the cluster's history as autosched exports it); "
                        "other trace formats have no absolute times")
    return text


def combine(live: LiveJobs, seed: LiveJobs) -> LiveJobs:
    """`live` plus the jobs of `seed` it does not have (the cluster's own record wins)."""
    if not len(seed):
        return live
    have = set(live.job_id.tolist())
    extra = np.array([j not in have for j in seed.job_id.tolist()], dtype=bool)
    names = ("job_id", "submit", "start", "end", "gpus", "user", "account", "partition",
             "time_limit", "finished", "duration")
    cols = {n: np.concatenate([getattr(live, n), getattr(seed, n)[extra]]) for n in names}
    order = np.argsort(cols["submit"], kind="stable")
    return LiveJobs(**{n: a[order] for n, a in cols.items()}, report=live.report,
                    malformed=live.malformed + seed.malformed)
