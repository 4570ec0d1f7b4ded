"""A statistical workload model: batch arrivals from a Poisson GLM, batch contents resampled.

Users submit jobs in bursts (a sweep of 20 runs within a minute), so the unit is the *batch*: the
jobs of one VC whose submissions are at most ``burst_gap`` seconds apart. The model has two parts.

1. When batches arrive. Hourly batch counts follow a Poisson GLM with log link:
   ``log rate = hour-of-day + day-of-week + trend x days``, fitted by IRLS with a small ridge,
   each hour weighted ``0.5 ** (age / half_life)`` so recent weeks count more. Count noise beyond
   Poisson is a per-day gamma factor whose variance is estimated from the history's daily totals
   (a negative-binomial day level). The trend is extrapolated into the sampled period but its
   factor is clipped to [1/2, 2] (a straight line fitted on three weeks is a weak forecast).
2. What a batch holds. Each generated batch copies a whole historical batch — its jobs' GPUs,
   durations, VC, offsets from the batch start and the columns every copy takes along
   (`base.CARRIED`: user, account, partition, time limit, CPUs) — so sizes, durations and VCs keep their joint
   distribution and jobs in a burst share attributes as they really do. The batch is drawn with
   probability ``0.5 ** (age / half_life) x exp(-dh^2 / 2 bandwidth^2)``, where ``dh`` is the
   circular distance in hours between its time of day and the new batch's. Durations get a
   multiplicative log-normal jitter (``duration_jitter``) so copies are not exact.

Times of day are ``t % 86400`` and days of week ``t % 604800`` in the trace's own clock: exact for
traces that start at 00:00 of a Monday (Philly, the bundled sample); for the ITP traces, which
start at an unknown time of day, the cycles are still found but their phase is relative.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..space import Bool, ConfigSpace, Float
from ..trace.report import MAX_DURATION
from ..trace.table import Trace
from .base import (
    CODES,
    DURATIONS,
    GPUS,
    NUMBERS,
    TIMES,
    Jobs,
    Saved,
    WorkloadError,
    WorkloadModel,
    check_sample_size,
    same_length,
    vc_codes,
)

HOUR, DAY, WEEK = 3600.0, 86400.0, 604800.0
TREND_CLIP = 2.0
MIN_WEEKLY_DAYS = 14.0  # of history, to fit day of week and trend


class Stat(WorkloadModel):
    name = "stat"
    summary = "Poisson GLM (hour of day, day of week, trend) for bursts; whole bursts resampled from recent history"
    space = ConfigSpace([
        Float("burst_gap", "jobs of one VC submitted at most this far apart form one batch", low=0.0,
              high=3600.0, default=60.0, unit="s"),
        Float("half_life", "age at which history counts half as much", low=0.5, high=1000.0,
              default=7.0, unit="days"),
        Float("bandwidth", "time-of-day kernel width for choosing batches", low=0.25, high=48.0,
              default=3.0, unit="h"),
        Float("duration_jitter", "std. dev. of the log-normal factor applied to durations", low=0.0,
              high=2.0, default=0.1),
        # Off by default: extrapolated, a trend fitted on three weeks made the forecast load worse
        # on 7 of 10 traces (docs/workload.md, "What was wrong with stat").
        Bool("trend", "fit and extrapolate a linear trend in the log rate (needs 14 days of history)",
             default=False),
        Bool("weekly", "fit a day-of-week effect (needs 14 days of history)", default=True),
        Bool("overdispersion", "draw a gamma factor per day (negative-binomial day totals)", default=True),
        Float("ridge", "L2 penalty on the GLM coefficients (keeps empty hours finite)", low=0.0,
              high=100.0, default=0.1),
    ])

    src: np.ndarray | None = None  # each job's history row, for `base.CARRIED` (see _fit)

    # ------------------------------------------------------------------------------------ fit

    def _fit(self, history: Trace) -> None:
        p = self.params
        t, vc = history.submit_time, vc_codes(history, self.vc_names)
        batch_of = bursts(t, vc, p["burst_gap"])
        nb = int(batch_of.max()) + 1
        # Batch table (CSR): members of batch b are jobs[ptr[b]:ptr[b+1]], in submit order.
        order = np.lexsort((t, batch_of))
        self.ptr = np.searchsorted(batch_of[order], np.arange(nb + 1)).astype(np.int64)
        self.bt = t[order][self.ptr[:-1]]
        self.offset = t[order] - np.repeat(self.bt, np.diff(self.ptr))
        self.g = history.num_gpus[order]
        self.d = history.duration[order]
        self.vc = None if vc is None else vc[order]
        self.src = order  # the history row of each job, in batch order
        self._fit_rate(np.sort(self.bt))

    def _fit_rate(self, bt: np.ndarray) -> None:
        """Poisson GLM on hourly batch counts (with exposure for partial first/last hours)."""
        lo, hi = self.history_start, self.history_end
        h0 = np.floor(lo / HOUR)
        hours = h0 + np.arange(max(1, int(np.ceil((hi + 1e-9) / HOUR) - h0)))
        exposure = (np.minimum(hours * HOUR + HOUR, hi + 1e-9) - np.maximum(hours * HOUR, lo)) / HOUR
        exposure = np.clip(exposure, 1e-3, 1.0)
        counts = np.bincount((np.floor(bt / HOUR) - h0).astype(np.int64), minlength=len(hours))[: len(hours)]
        span_days = (hi - lo) / DAY
        self.use_hour = span_days >= 1.0
        # A day-of-week effect and a trend need two weeks: over one week each weekday is seen
        # once, and the trend is whatever slope the weekday dummies leave (one busy Monday
        # extrapolated, clipped only at 2x).
        self.use_week = bool(self.params["weekly"]) and span_days >= MIN_WEEKLY_DAYS
        self.use_trend = bool(self.params["trend"]) and span_days >= MIN_WEEKLY_DAYS
        X = self._design(hours * HOUR + HOUR / 2)
        age = (hi - (hours * HOUR + HOUR / 2)) / DAY
        w = 0.5 ** (np.maximum(age, 0.0) / self.params["half_life"])
        self.beta = _poisson_irls(X, counts.astype(float), np.log(exposure), w, self.params["ridge"])
        # Day-level overdispersion: Var(Y) = mu + mu^2 / k for daily totals (method of moments).
        mu_h = np.exp(X @ self.beta) * exposure
        day = ((hours - h0) // 24).astype(np.int64)
        y_d, mu_d = np.bincount(day, counts), np.bincount(day, mu_h)
        w_d = np.bincount(day, w) / np.bincount(day)
        ok = mu_d > 1.0
        if self.params["overdispersion"] and ok.sum() >= 3:
            excess = ((y_d - mu_d) ** 2 - mu_d) / mu_d ** 2
            self.inv_shape = float(max(0.0, np.average(excess[ok], weights=w_d[ok])))
        else:
            self.inv_shape = 0.0

    def _design(self, t: np.ndarray) -> np.ndarray:
        """Columns: intercept, 23 hour-of-day dummies, 6 day-of-week dummies, trend (days)."""
        cols = [np.ones_like(t)]
        if self.use_hour:
            hod = (np.floor((t % DAY) / HOUR)).astype(np.int64)
            cols += [(hod == h).astype(float) for h in range(1, 24)]
        if self.use_week:
            dow = (np.floor((t % WEEK) / DAY)).astype(np.int64)
            cols += [(dow == k).astype(float) for k in range(1, 7)]
        if self.use_trend:
            cols.append((t - self.history_end) / DAY)
        return np.column_stack(cols)

    # --------------------------------------------------------------------------------- sample

    def expected_batches(self, start: float, horizon: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Hour slices ``[lo, hi)`` covering ``[start, start + horizon)`` and the expected number of
        batches in each (the GLM's rate, trend factor clipped to [1/2, 2]; no day-level noise)."""
        hours = np.floor(start / HOUR) + np.arange(int(np.ceil((start + horizon) / HOUR) - np.floor(start / HOUR)))
        lo = np.maximum(hours * HOUR, start)
        hi = np.minimum(hours * HOUR + HOUR, start + horizon)
        eta = self._design((lo + hi) / 2) @ self.beta
        if self.use_trend:  # keep the extrapolated trend factor within [1/2, 2]
            trend = self.beta[-1] * ((lo + hi) / 2 - self.history_end) / DAY
            eta = eta - trend + np.clip(trend, -np.log(TREND_CLIP), np.log(TREND_CLIP))
        return lo, hi, np.exp(eta) * (hi - lo) / HOUR

    def _sample(self, start: float, horizon: float, rng: np.random.Generator) -> Jobs:
        lo, hi, rate = self.expected_batches(start, horizon)
        if self.inv_shape > 0:
            day = np.floor(lo / DAY)
            days, inv = np.unique(day, return_inverse=True)
            k = 1.0 / self.inv_shape
            rate = rate * rng.gamma(k, 1.0 / k, size=len(days))[inv]
        check_sample_size(self.name, float(rate.sum()) * float(np.diff(self.ptr).mean()))
        n = rng.poisson(rate)
        starts = np.repeat(lo, n) + rng.random(int(n.sum())) * np.repeat(hi - lo, n)
        chosen = self._choose_batches(starts, rng)
        sizes = np.diff(self.ptr)[chosen]
        members = ranges(self.ptr[chosen], sizes)
        submit = np.repeat(starts, sizes) + self.offset[members]
        dur = self.d[members]
        if self.params["duration_jitter"] > 0:  # (a jittered year-long job stays within the bound on durations)
            dur = np.minimum(dur * np.exp(self.params["duration_jitter"] * rng.standard_normal(len(dur))), MAX_DURATION)
        vc = None if self.vc is None else self.vc[members]
        src = None if self.src is None else self.src[members]
        return Jobs(submit, self.g[members], dur, vc, self.vc_names, src)

    def _choose_batches(self, starts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """For each new batch, a historical batch: recent and at a similar time of day."""
        age = np.maximum(self.history_end - self.bt, 0.0) / DAY
        recency = 0.5 ** (age / self.params["half_life"])
        bt_hour = (self.bt % DAY) / HOUR
        slot = np.floor((starts % DAY) / HOUR).astype(np.int64)
        chosen = np.empty(len(starts), dtype=np.int64)
        bw = self.params["bandwidth"]
        for h in np.unique(slot):  # at most 24 distinct slots
            dh = np.abs(bt_hour - (h + 0.5))
            dh = np.minimum(dh, 24.0 - dh)
            w = recency * np.exp(-0.5 * (dh / bw) ** 2)
            cdf = np.cumsum(w)
            where = np.flatnonzero(slot == h)
            chosen[where] = np.searchsorted(cdf, rng.random(len(where)) * cdf[-1], side="right")
        return np.minimum(chosen, len(self.bt) - 1)

    # -------------------------------------------------------------------------- save / load

    _ARRAYS = ("ptr", "bt", "offset", "g", "d", "beta")
    saved = {"ptr": CODES, "bt": TIMES, "offset": Saved("offsets in a batch (s)", 0.0, TIMES.high),
             "g": GPUS, "d": DURATIONS, "beta": NUMBERS, "vc": CODES, "src": CODES}

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        arrays = {k: getattr(self, k) for k in self._ARRAYS}
        if self.vc is not None:
            arrays["vc"] = self.vc
        if self.src is not None:
            arrays["src"] = self.src
        meta = {"use_hour": self.use_hour, "use_week": self.use_week, "use_trend": self.use_trend,
                "inv_shape": self.inv_shape}
        return meta, arrays

    def _restore(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        for k in self._ARRAYS:
            setattr(self, k, arrays[k])
        self.vc = arrays.get("vc")
        self.src = arrays.get("src")  # (absent from a file saved before it was kept)
        self.use_hour, self.use_week, self.use_trend = meta["use_hour"], meta["use_week"], meta["use_trend"]
        self.inv_shape = float(meta["inv_shape"])

    def _check_state(self) -> None:
        n, nb = len(self.g), len(self.bt)
        if nb < 1:
            raise WorkloadError("the model holds no batch")
        same_length(n, offset=self.offset, d=self.d)
        same_length(nb + 1, ptr=self.ptr)
        if self.ptr[0] != 0 or self.ptr[-1] != n or np.any(np.diff(self.ptr) < 1):
            raise WorkloadError(f"array 'ptr' does not split the {n} jobs into {nb} batches")
        if np.any(self.offset[self.ptr[:-1]] != 0):
            raise WorkloadError("array 'offset' does not start every batch at 0")
        self._check_times("bt", self.bt)
        self._check_times("bt + offset", np.repeat(self.bt, np.diff(self.ptr)) + self.offset)
        if not all(isinstance(meta, bool) for meta in (self.use_hour, self.use_week, self.use_trend)):
            raise WorkloadError("use_hour, use_week and use_trend are not true/false")
        same_length(1 + 23 * self.use_hour + 6 * self.use_week + self.use_trend, beta=self.beta)
        if not (np.isfinite(self.inv_shape) and self.inv_shape >= 0):
            raise WorkloadError(f"inv_shape {self.inv_shape!r} is not a finite number >= 0")
        self._check_vc("vc", self.vc, n)
        self._check_source("src", self.src, n)

    # ----------------------------------------------------------------------- for reports

    def hourly_rate(self) -> np.ndarray:
        """Expected batches per hour for each hour of a week (168 values, trend at history end)."""
        t = self.history_end - self.history_end % WEEK + np.arange(168) * HOUR + HOUR / 2
        X = self._design(t)
        if self.use_trend:
            X[:, -1] = 0.0
        return np.exp(X @ self.beta)


def bursts(t: np.ndarray, vc: np.ndarray | None, gap: float) -> np.ndarray:
    """Batch index of each job: same VC, consecutive (within the VC) gaps of at most `gap`."""
    key = np.zeros(len(t), dtype=np.int64) if vc is None else vc
    order = np.lexsort((t, key))
    ts, ks = t[order], key[order]
    new = np.ones(len(t), dtype=bool)
    new[1:] = (ks[1:] != ks[:-1]) | (np.diff(ts) > gap)
    # Number batches by their first job's submit time, so batch ids follow the clock.
    first = np.flatnonzero(new)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(ts[first], kind="stable")] = np.arange(len(first))
    batch = np.empty(len(t), dtype=np.int64)
    batch[order] = rank[np.cumsum(new) - 1]
    return batch


def ranges(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + n) for each (s, n), without a Python loop: the job
    indices of chosen batches (`stat` and `hybrid` sample whole batches)."""
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    base = np.repeat(starts - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
    return base + np.arange(total)


def _poisson_irls(X: np.ndarray, y: np.ndarray, offset: np.ndarray, w: np.ndarray, ridge: float,
                  iters: int = 50) -> np.ndarray:
    """Weighted Poisson regression (log link) by Newton-IRLS; the intercept is not penalised."""
    p = X.shape[1]
    beta = np.zeros(p)
    beta[0] = np.log(max(np.average(y / np.exp(offset), weights=w), 1e-6))
    pen = np.full(p, ridge)
    pen[0] = 0.0
    for _ in range(iters):
        mu = np.exp(np.clip(X @ beta + offset, -30, 30))
        grad = X.T @ (w * (y - mu)) - pen * beta
        hess = (X * (w * mu)[:, None]).T @ X + np.diag(pen) + 1e-9 * np.eye(p)
        step = np.linalg.solve(hess, grad)
        beta = beta + step
        if np.max(np.abs(step)) < 1e-8:
            break
    return beta
