"""What a real controller knows at time `now`, read off the running cluster (the simulator).

A real controller sees jobs that have been submitted, and the true duration only of jobs that have
finished. A job still queued or running at `now` has an unknown duration; all that is known is a
lower bound: the time it has run so far. Two simple answers are both biased:

- keep only finished jobs: the window loses exactly its long jobs (and its arrivals look lighter);
- keep every job with its duration capped at what was observed: long jobs look short.

We keep every submitted job (so arrival counts and the size mix are right) and *impute* the
duration of each unfinished job by a draw from the Kaplan-Meier (product-limit) estimate of the
duration distribution, conditioned on being longer than what the job has already run. The
estimate uses every job submitted by `now`, not only those of the window (finished jobs are
events, unfinished ones are censored at what they have run; each weighs
``0.5 ** (age / DURATION_HALF_LIFE)``), one estimate per GPU-count class (1, 2-4, 5-8, >8: large
jobs run longer) when the class has enough finished jobs. Both choices matter where jobs are
long and the cluster is busy: on Philly (all durations, 72x8) a 7-day window's unfinished jobs
hold 80-99 % of its GPU-hours, and drawing them from the durations of the window's *finished*
jobs (the earlier rule: finishing is what short jobs do) made the observed week 3-20x lighter
than the real one. Probability mass the estimate leaves beyond the longest finished job (when the
longest observations are censored), and every job that has run longer than it, is imputed from a
Pareto tail above b = max(longest finished, the job's bound): b / U**(1/TAIL_ALPHA), capped at
b + TAIL_CAP. (The earlier rule, TAIL_ALPHA = None, imputed b itself: a job that had outrun every
finished job was left with no work, e.g. ITP cluster02's 4-GPU job 160 h in with 55 h to go.)
The draw is seeded from `now`, so an observation is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import SimulationError
from ..sim.engine import DONE, FUTURE, RUNNING, Simulator
from ..trace.table import Trace

# Age (s) at which a job counts half as much in the duration estimate: durations drift (Philly's
# September jobs run longer than October's), and with every past job weighed alike the imputed
# 7-day windows of Philly (72x8) came out 1.5x heavier than the real ones (1.24x with 7 days,
# 1.15x with 3.5; ITP cluster02/04/07 and the bundled sample are within 0.93-1.06 at 3.5 days).
DURATION_HALF_LIFE = 3.5 * 86400.0
ESTIMATE_AGE = 10 * DURATION_HALF_LIFE
GPU_CLASSES = (1, 4, 8)  # upper bounds of the classes 1, 2-4, 5-8; the rest is >8


def gpu_class(gpus: np.ndarray) -> np.ndarray:
    """Each job's GPU-size class: 0 for 1 GPU, 1 for 2-4, 2 for 5-8, 3 for more."""
    return np.searchsorted(GPU_CLASSES, gpus, side="left")


@dataclass(frozen=True)
class Observation:
    """The cluster as the controller sees it at `now`.

    ``history``: jobs submitted in [start, now], durations true if finished, imputed otherwise.
    ``finished`` / ``end``: per history row, whether it finished by `now` and when (NaN if not).
    ``backlog``: jobs queued or running at `now`, as new jobs submitted at `now` whose duration is
    their imputed remaining work; evaluation workloads start with them, so a config is judged on
    the load the cluster really carries over. Observed with ``backlog_history``, the backlog also
    carries what the scheduler knows of each job's past (the trace's ``attained`` and ``age``
    columns): the GPU-seconds it has run and how long ago it was submitted. Without them a
    backlog job looks brand new: Tiresias ranks it first (no attained service) and Slurm's age
    factor and FIFO order forget how long it waited.
    ``running``: per backlog row, whether the job was running at `now` (None: not known); a
    running job's time limit in the backlog is what is left of it. `carried_over` frames them.
    """

    now: float
    start: float
    history: Trace
    finished: np.ndarray
    end: np.ndarray
    backlog: Trace
    imputed: int
    running: np.ndarray | None = None


# How long before the round a job running at it is submitted in the evaluation workloads: alone on
# the cluster then, it starts at once under any config (Slurm's first pass after a submission
# comes at its next tick, about a second; Tiresias and the others decide at the arrival) and runs
# on through the round, as a running job does on a real cluster.
RUNNING_LEAD = 60.0


def carried_over(obs: Observation, frame_running: bool = True) -> Trace:
    """The jobs an evaluation workload starts with (``obs.backlog``). With `frame_running`, as
    the cluster has them: those running at ``obs.now`` are submitted `RUNNING_LEAD` before it,
    so that they start on an empty cluster and keep running to their (imputed) end whatever
    order the config under test gives the rest; only the queued ones (submitted at ``now``) and
    the new jobs follow that order. Without it every backlog job is queued at ``now``, running
    ones too: a new order can hold back a job a real scheduler would never stop. Rows submitted
    before ``obs.now`` in a workload are the ones running at the round."""
    b = obs.backlog
    if not frame_running or obs.running is None or not obs.running.any():
        return b
    return b.replace(submit_time=np.where(obs.running, obs.now - RUNNING_LEAD, b.submit_time))


# The backlog keeps its past by default: without it a carried-over job restarts as new, first in
# Tiresias's queues and youngest in Slurm's age factor. With the Pareto tail below, the evaluation
# predicts more of the harm a config change does to the backlog (docs/traces.md), and on six
# traces x 8 seeds autosched's decisions moved within their noise (0.5-0.9% better on four, the
# same on one, 1.3% worse on one; docs/history.md, "the backlog's imputed tail and its past").
BACKLOG_HISTORY = True


def observe(sim: Simulator, now: float, start: float, seed: int = 0,
            backlog_history: bool = BACKLOG_HISTORY) -> Observation:
    """Read what is known at `now` (the simulator must have been run up to `now`) about the jobs
    submitted in [start, now]. With `backlog_history`, backlog jobs carry their past: the
    ``attained`` GPU-seconds they have held so far and their ``age`` (now - their submission),
    on top of any the trace itself gave them."""
    if sim.now > now:
        raise SimulationError(f"the simulator is at t={sim.now:g}, past the observation time {now:g}")
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
    rng = np.random.default_rng([seed, int(now)])
    done_all = state[arrived] == DONE
    bound_all = np.where(done_all, trace.duration[arrived], executed[arrived])
    # Every arrived job gets an imputed total, the backlog's too: a job running since before the
    # window still has work left (its executed time is only a lower bound of its duration).
    imputed_all = impute_from_past(bound_all, done_all, trace.submit_time[arrived], trace.num_gpus[arrived],
                                   now, rng)
    history = trace.take(known).replace(duration=np.maximum(imputed_all[np.searchsorted(arrived, known)], 1.0))
    end = np.where(done, rec.end[known], np.nan)

    active = arrived[~done_all]
    total = imputed_all[~done_all]
    # in the order the backlog's rows take (Trace.from_columns: all submitted at `now`, ties by
    # first submission), so that its per-row arrays line up with them
    first = trace.submit_time[active] - (0.0 if trace.age is None else trace.age[active])
    order = np.argsort(first, kind="stable") if backlog_history else np.arange(len(active))
    active, total = active[order], total[order]
    remaining = np.maximum(total - executed[active], 1.0)
    past: dict[str, np.ndarray | None] = {"attained": None, "age": None}
    if backlog_history:
        gpus = trace.num_gpus[active]
        past["attained"] = executed[active] * gpus + (0.0 if trace.attained is None else trace.attained[active])
        past["age"] = now - trace.submit_time[active] + (0.0 if trace.age is None else trace.age[active])
    is_running = np.asarray(state)[active] == RUNNING
    limits: dict[str, np.ndarray] = {}
    if trace.time_limit is not None:  # Slurm plans a running job's end at its start + limit
        left = np.maximum(trace.time_limit[active] - executed[active], 1.0)
        limits["time_limit"] = np.where(is_running, left, trace.time_limit[active])
    backlog = trace.take(active).replace(submit_time=np.full(len(active), float(now)), duration=remaining,
                                         **past, **limits)
    return Observation(now, start, history, done, end, backlog, int((~done).sum()), is_running)


def impute_from_past(duration: np.ndarray, finished: np.ndarray, submit: np.ndarray, gpus: np.ndarray,
                     now: float, rng: np.random.Generator) -> np.ndarray:
    """`impute` for every job known at `now` (finished: true duration; unfinished: what it has
    run so far), the estimate built from all of them, per GPU-count class, recent jobs weighing
    more (``DURATION_HALF_LIFE``). The simulator's `observe` and the live agent's history both
    read their windows out of it."""
    cls = gpu_class(gpus)  # large jobs run longer
    age = np.maximum(now - submit, 0.0)
    recency = 0.5 ** (age / DURATION_HALF_LIFE)
    # Finished jobs older than ESTIMATE_AGE weigh under 2**-10 and are left out of the estimate, so
    # a round's cost does not grow with the whole history; unfinished ones are all imputed.
    used = (age <= ESTIMATE_AGE) | ~finished
    out = duration.astype(np.float64)
    out[used] = impute(duration[used], finished[used], rng, cls[used], recency[used])
    return out


def impute(duration: np.ndarray, finished: np.ndarray, rng: np.random.Generator,
           group: np.ndarray | None = None, weight: np.ndarray | None = None) -> np.ndarray:
    """Durations with each unfinished job's value (a lower bound: what it has run) replaced by a
    draw from the Kaplan-Meier estimate of the duration distribution given that bound.

    The estimate is built from the jobs passed (finished ones are events, unfinished ones
    censored at their bound), each weighing ``weight`` (default 1). With ``group`` (e.g.
    GPU-count classes: large jobs run longer) each group has its own estimate when it holds at
    least `MIN_EVENTS` finished jobs, the estimate of all jobs otherwise. Mass beyond the longest
    finished duration (and a job whose bound passes it) is drawn from a Pareto tail above the
    larger of the two (`TAIL_ALPHA`; None: that value itself); with no finished job at all the
    bound stays."""
    bound = np.asarray(duration, dtype=np.float64)
    finished = np.asarray(finished, dtype=bool)
    out = bound.copy()
    todo = np.flatnonzero(~finished)
    if len(todo) == 0:
        return out
    everyone = kaplan_meier(bound, finished, weight)
    if group is None:
        out[todo] = _draw(everyone, bound[todo], rng)
        return out
    for g in np.unique(group[todo]):
        mine = todo[group[todo] == g]
        ours = group == g
        est = kaplan_meier(bound[ours], finished[ours], None if weight is None else weight[ours]) \
            if np.count_nonzero(finished & ours) >= MIN_EVENTS else everyone
        out[mine] = _draw(est, bound[mine], rng)
    return out


MIN_EVENTS = 30  # finished jobs a group needs for an estimate of its own
# A job that outlives every finished job of its estimate (or whose draw lands in the mass the
# estimate leaves beyond them) gets its total from a Pareto tail above b = max(bound, longest
# finished): b / U**(1/TAIL_ALPHA), capped at b + TAIL_CAP (median 1.41 b, mean 2 b at alpha 2).
# Imputing b itself left it ~0 s of work: on ITP cluster02 a 4-GPU job 160 h in, 55 h from its
# end, was imputed to end at once. None: the old rule (total = b).
TAIL_ALPHA: float | None = 2.0
TAIL_CAP = 30 * 86400.0  # s, a simulation horizon


def _draw(est: tuple[np.ndarray, np.ndarray], bound: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per bound from the estimated distribution above it (see `impute`)."""
    times, cdf = est
    if len(times) == 0:
        return bound
    k = np.searchsorted(times, bound, side="right")  # events at or below the bound are ruled out
    base = np.where(k > 0, cdf[np.maximum(k - 1, 0)], 0.0)
    raw = rng.random(len(bound))
    u = base + raw * (1.0 - base)
    pick = np.searchsorted(cdf, u, side="left")
    drawn = times[np.minimum(pick, len(times) - 1)]
    beyond = (pick >= len(times)) | (bound >= times[-1])
    if TAIL_ALPHA is None or not beyond.any():
        return np.where(pick >= len(times), np.maximum(bound, times[-1]), np.maximum(drawn, bound))
    # The tail: where in the mass beyond the longest finished duration the draw fell, reused as
    # the Pareto's uniform so the rng is consumed exactly as by the old rule (a job whose bound
    # passes every finished duration has base = cdf[-1], so its position there is its own draw).
    last = cdf[-1]
    v = np.where(bound >= times[-1], raw, (u - last) / max(1.0 - last, 1e-300))
    floor = np.maximum(bound, times[-1])
    tail = floor / (1.0 - np.clip(v, 0.0, 1.0 - 1e-12)) ** (1.0 / TAIL_ALPHA)
    tail = np.minimum(tail, floor + TAIL_CAP)
    return np.where(beyond, tail, np.maximum(drawn, bound))


def kaplan_meier(duration: np.ndarray, finished: np.ndarray,
                 weight: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Product-limit estimate from right-censored durations: the distinct event (finished)
    durations, sorted, and the estimated CDF just after each. An unfinished job counts as at risk
    up to its bound (at a tie, events come first: the job ran at least that long). ``weight``
    (default 1) weighs each job in the risk sets (e.g. recent jobs more)."""
    order = np.lexsort((~finished, duration))
    d, ev = duration[order], finished[order]
    w = np.ones(len(d)) if weight is None else np.asarray(weight, dtype=np.float64)[order]
    at_risk = np.cumsum(w[::-1])[::-1]
    surv = np.cumprod(np.where(ev, 1.0 - w / np.maximum(at_risk, 1e-300), 1.0))
    times = d[ev]
    if len(times) == 0:
        return times, times
    cdf = 1.0 - surv[ev]
    # One point per distinct duration: the CDF after the last of its tied events.
    last = np.r_[times[1:] != times[:-1], True]
    return times[last], np.clip(cdf[last], 0.0, 1.0)
