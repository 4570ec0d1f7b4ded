"""Busier and quieter scenarios of a sampled period: its load scaled up or down by whole bursts.

A model fitted on the last week forecasts that week's level, but real weeks differ from the week
before by far more than a model's sampling noise: on the six traces of docs/results.md the log
of a week's offered load over the week before's has a standard deviation of 0.34 (23 pairs of
weeks; section "Issue 11, the guardrail measured"). A config tuned for last week's level can then
lose exactly the busy week that matters. `scenario_levels` gives ``n`` stratified levels of a log-normal with
mean 1 (so the scenarios keep the forecast's mean load and bracket it), and `rescale` applies one
level to a sampled workload.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from ..trace.table import Trace
from .stat import _batches

DAY = 86400.0


def scenario_levels(n: int, sd: float) -> np.ndarray:
    """``n`` levels at the quantiles ``(i + 0.5) / n`` of a log-normal with log standard deviation
    ``sd``, in increasing order, scaled so that their mean is exactly 1 (all 1 when ``sd`` is 0)."""
    if n < 1 or sd < 0:
        raise ValueError(f"scenario_levels: need n >= 1 and sd >= 0 (got n {n}, sd {sd:g})")
    levels = np.exp(sd * norm.ppf((np.arange(n) + 0.5) / n))
    return levels / levels.mean()


def rescale(trace: Trace, factor: float, start: float, horizon: float, rng: np.random.Generator,
            burst_gap: float = 60.0) -> Trace:
    """The jobs of ``trace`` (submitted in ``[start, start + horizon)``) with the number of bursts
    scaled by ``factor``: each burst (jobs of one VC at most ``burst_gap`` s apart, `stat`'s unit)
    is kept ``floor(factor)`` times plus once more with probability ``factor - floor(factor)``.
    The first copy stays where it was; a further copy moves by a random whole number of days
    (by a random time if the period is shorter than two days), wrapped inside the period, so time
    of day is kept and copies do not pile up at one instant. Copies get job ids ``<id>~<copy>``."""
    if factor < 0 or not math.isfinite(factor):
        raise ValueError(f"rescale: factor must be finite and >= 0 (got {factor})")
    if factor == 1.0 or len(trace) == 0:
        return trace
    vc = None if trace.vc is None else np.unique(trace.vc, return_inverse=True)[1].astype(np.int64)
    batch = _batches(trace.submit_time, vc, burst_gap)
    nb = int(batch.max()) + 1
    copies = (math.floor(factor) + (rng.random(nb) < factor - math.floor(factor))).astype(np.int64)
    most = int(copies.max())
    days = int(horizon // DAY)
    if days >= 2:
        shift = DAY * rng.integers(1, days, size=(nb, max(most, 1)))
    else:
        shift = rng.uniform(0.0, horizon, size=(nb, max(most, 1)))
    shift[:, 0] = 0.0  # the first copy stays
    per_job = copies[batch]
    rows = np.repeat(np.arange(len(trace)), per_job)
    rank = np.arange(len(rows)) - np.repeat(np.cumsum(per_job) - per_job, per_job)
    submit = start + np.mod(trace.submit_time[rows] - start + shift[batch[rows], rank], horizon)
    ids = trace.job_id[rows].astype(object)
    again = rank > 0
    ids[again] = [f"{j}~{r}" for j, r in zip(ids[again], rank[again])]
    return trace.take(rows).replace(submit_time=submit, job_id=ids)
