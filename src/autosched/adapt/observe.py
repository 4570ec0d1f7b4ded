"""What a real controller knows at time `now`, read off the running cluster (the simulator).

A real controller sees jobs that have been submitted, and the true duration only of jobs that have
finished. A job still queued or running at `now` has an unknown duration; all that is known is a
lower bound: the time it has run so far. Two simple answers are both biased:

- keep only finished jobs: the window loses exactly its long jobs (and its arrivals look lighter);
- keep every job with its duration capped at what was observed: long jobs look short.

We keep every submitted job (so arrival counts and the size mix are right) and *impute* the
duration of each unfinished job by drawing from the durations of jobs that finished in the window,
conditioned on being longer than what the job has already run (the censored-data estimate of its
duration). When no finished job is longer, the observed lower bound is used. The draw is seeded
from `now`, so an observation is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..sim.engine import DONE, FUTURE, RUNNING, Simulator
from ..trace.table import Trace


@dataclass(frozen=True)
class Observation:
    """The cluster as the controller sees it at `now`.

    ``history``: jobs submitted in [start, now], durations true if finished, imputed otherwise.
    ``finished`` / ``end``: per history row, whether it finished by `now` and when (NaN if not).
    ``backlog``: jobs queued or running at `now`, as new jobs submitted at `now` whose duration is
    their imputed remaining work; evaluation workloads start with them, so a config is judged on
    the load the cluster really carries over.
    """

    now: float
    start: float
    history: Trace
    finished: np.ndarray
    end: np.ndarray
    backlog: Trace
    imputed: int


def observe(sim: Simulator, now: float, start: float, seed: int = 0) -> Observation:
    """Read what is known at `now` (the simulator must have been run up to `now`) about the jobs
    submitted in [start, now]."""
    if sim.now > now:
        raise ValueError(f"the simulator is at t={sim.now:g}, past the observation time {now:g}")
    trace = sim.trace
    state = np.asarray(sim.state)
    arrived = np.flatnonzero(state != FUTURE)
    rec = sim.records()
    executed = rec.run_time.copy()
    running = np.flatnonzero(state == RUNNING)
    for j in running:  # run time so far includes the current run
        executed[j] += now - sim.partitions[rec.partition[j]].run_started(int(j))
    known = arrived[trace.submit_time[arrived] >= start]
    done = state[known] == DONE
    dur = np.where(done, trace.duration[known], executed[known])
    rng = np.random.default_rng([seed, int(now)])
    imputed_dur = impute(dur, done, rng)
    history = trace.take(known).replace(duration=np.maximum(imputed_dur, 1.0))
    end = np.where(done, rec.end[known], np.nan)

    active = arrived[state[arrived] != DONE]
    pos = np.searchsorted(known, active)  # active jobs inside the window have an imputed duration
    inside = (pos < len(known)) & (known[np.minimum(pos, len(known) - 1)] == active)
    total = np.where(inside, imputed_dur[np.minimum(pos, len(known) - 1)], executed[active])
    remaining = np.maximum(total - executed[active], 1.0)
    backlog = trace.take(active).replace(submit_time=np.full(len(active), float(now)), duration=remaining)
    return Observation(now, start, history, done, end, backlog, int((~done).sum()))


def impute(duration: np.ndarray, finished: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Durations with each unfinished job's value (a lower bound) replaced by a draw from the
    finished durations longer than that bound (the bound itself when there are none)."""
    out = duration.astype(np.float64).copy()
    pool = np.sort(duration[finished])
    for i in np.flatnonzero(~finished):
        lo = np.searchsorted(pool, duration[i], side="right")
        if lo < len(pool):
            out[i] = pool[rng.integers(lo, len(pool))]
    return out
