"""Busier and quieter scenarios of a sampled period: its load scaled up or down by whole bursts.

A model fitted on the last week forecasts that week's level, but real weeks differ from the week
before by far more than a model's sampling noise: on the six traces of docs/results.md the log
of a week's offered load over the week before's has a standard deviation of 0.34 (23 pairs of
weeks; benchmarks/weekly_load.py, and docs/history.md, "the guardrail on 8 fresh samples"). A config tuned for last week's level can then
lose exactly the busy week that matters. `scenario_levels` gives ``n`` stratified levels of a log-normal with
mean 1 (so the scenarios keep the forecast's mean load and bracket it), and `rescale` applies one
level to a sampled workload.
"""

from __future__ import annotations

import math

import numpy as np

from ..trace.table import Trace
from .base import WorkloadError, check_sample_size
from .stat import bursts

DAY = 86400.0
MAX_LEVEL_SD = 2.0  # e^(2 x 2) already spans a 55x range of load between scenarios
# How far back "recent" reaches when a period's level follows the last hours' (`recent_level`),
# on the jobs' own clock: long enough to hold a few bursts, short enough to see one building.
RECENT = 6 * 3600.0
MAX_PERSISTENCE = 1.0  # 1: the coming period is taken to be exactly as busy as the last hours
MAX_RECENT_LEVEL = 4.0  # a level taken from a few hours is held within [1/4, 4]


def scenario_levels(n: int, sd: float) -> np.ndarray:
    """``n`` levels at the quantiles ``(i + 0.5) / n`` of a log-normal with log standard deviation
    ``sd``, in increasing order, scaled so that their mean is exactly 1 (all 1 when ``sd`` is 0)."""
    check_level_sd(sd)
    if n < 1:
        raise WorkloadError(f"scenario levels: need at least 1 (got {n})")
    from scipy.stats import norm  # here: scipy.stats takes 1.6 s to import, and every CLI command loads this module

    levels = np.exp(sd * norm.ppf((np.arange(n) + 0.5) / n))
    return levels / levels.mean()


def check_level_sd(sd: float) -> None:
    """The one check of a scenario spread, wherever it is set."""
    if not (math.isfinite(sd) and 0.0 <= sd <= MAX_LEVEL_SD):
        raise WorkloadError(f"level sd must be in [0, {MAX_LEVEL_SD:g}] (got {sd:g})")


def check_persistence(persistence: float) -> None:
    """The one check of a persistence exponent, wherever it is set."""
    if not (math.isfinite(persistence) and 0.0 <= persistence <= MAX_PERSISTENCE):
        raise WorkloadError(f"persistence must be in [0, {MAX_PERSISTENCE:g}] (got {persistence:g})")


def recent_level(submit: np.ndarray, start: float, now: float, persistence: float,
                 recent: float = RECENT) -> float:
    """The level of the coming period relative to the history's mean, from how busy the last
    `recent` s before `now` were: ``(r_recent / r_history) ** persistence``, held within
    [1 / `MAX_RECENT_LEVEL`, `MAX_RECENT_LEVEL`]. ``r`` are arrival rates (jobs per s, one job
    added to each count so that an empty stretch is not infinitely quiet) over [now - recent, now)
    and over [start, now). Arrivals persist in part: over the six traces of docs/results.md the
    log of the next day's arrivals over the history's mean grows by about 0.4 per unit of the log
    of the last six hours' (benchmarks/arrival_persistence.py), so 0.4 is the forecast the data
    supports; 0 ignores the last hours (the model's level), 1 takes them as the coming period's."""
    check_persistence(persistence)
    span = now - start
    if persistence == 0.0 or span <= recent or recent <= 0:
        return 1.0
    n_recent = float(np.count_nonzero((submit >= now - recent) & (submit < now)))
    n_all = float(np.count_nonzero((submit >= start) & (submit < now)))
    ratio = ((n_recent + 1.0) / recent) / ((n_all + 1.0) / span)
    return float(np.clip(ratio ** persistence, 1.0 / MAX_RECENT_LEVEL, MAX_RECENT_LEVEL))


def rescale(trace: Trace, factor: float, start: float, horizon: float, rng: np.random.Generator,
            burst_gap: float = 60.0) -> Trace:
    """The jobs of ``trace`` (submitted in ``[start, start + horizon)``) with the number of bursts
    scaled by ``factor``: each burst (jobs of one VC at most ``burst_gap`` s apart, `stat`'s unit)
    is kept ``floor(factor)`` times plus once more with probability ``factor - floor(factor)``.
    The first copy stays where it was; a further copy moves forward by a random whole number of
    days, wrapped back by whole days into the period's whole days (so time of day is kept and
    copies do not pile up at one instant); in a period shorter than two days it moves by a random
    time, wrapped inside the period. Copies get job ids ``<id>~<copy>``."""
    if factor < 0 or not math.isfinite(factor):
        raise WorkloadError(f"level: a scale factor must be finite and >= 0 (got {factor})")
    if factor == 1.0 or len(trace) == 0:
        return trace
    check_sample_size("level", math.ceil(factor) * len(trace))
    vc = None if trace.vc is None else np.unique(trace.vc, return_inverse=True)[1].astype(np.int64)
    batch = bursts(trace.submit_time, vc, burst_gap)
    nb = int(batch.max()) + 1
    copies = (math.floor(factor) + (rng.random(nb) < factor - math.floor(factor))).astype(np.int64)
    most = max(int(copies.max()), 1)
    days = int(horizon // DAY)
    span = days * DAY if days >= 2 else horizon  # copies wrap inside [start, start + span)
    if days >= 2:
        shift = DAY * rng.integers(1, days, size=(nb, most)).astype(np.float64)
    else:
        shift = rng.uniform(0.0, horizon, size=(nb, most))
    per_job = copies[batch]
    rows = np.repeat(np.arange(len(trace)), per_job)
    rank = np.arange(len(rows)) - np.repeat(np.cumsum(per_job) - per_job, per_job)
    own = trace.submit_time[rows]
    moved = start + np.mod(own - start + shift[batch[rows], rank], span)
    submit = np.where(rank > 0, moved, own)  # the first copy stays exactly where it was
    ids = trace.job_id[rows].astype(object)
    again = rank > 0
    ids[again] = [f"{j}~{r}" for j, r in zip(ids[again], rank[again])]
    return trace.take(rows).replace(submit_time=submit, job_id=ids)
