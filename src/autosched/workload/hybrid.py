"""Replay with a forecast level: last period's batches, rescaled to the level the history forecasts.

`replay` keeps everything a week really had (its large jobs, its bursts, its VC mix) but also its
accidents: a week that was unusually busy or quiet is forecast as such. `stat` forecasts the
number of batches well but resamples their contents from three weeks, which mixes large-job
content and makes its samples' load vary more than real weeks do. The hybrid takes the contents
from replay and only the level from a model of the history:

1. The batches (``stat``'s unit: jobs of one VC at most ``burst_gap`` apart) that started in the
   last ``horizon`` of history are the replayed window, shifted forward by whole days as `replay`
   shifts it (tiled if the horizon is longer than the history).
2. The scale ``s`` is the forecast level over the replayed window's, clipped to [1/2, 2]:
   ``level=load`` (default): the history's GPU-hours per day, recency-weighted
   (``half_life``), over the replayed window's; ``level=count``: `stat`'s count model's expected
   batches in the new period (hour of day, day of week; trend only if asked) over the replayed
   window's batches. Batch counts and load need not move together (on ITP cluster04 the week
   with the fewest jobs, 283, was as heavy as the one with the most, 3,414): with
   ``level=count`` the forecast load was 1.40x the real one on cluster04 (1.13x with ``load``),
   and ``load`` ranked configs better on Philly, cluster02 and cluster04 (docs/workload.md).
   With ``overdispersion`` the scale is multiplied by one gamma factor for the period (mean 1, the
   variance of a period total under the count model's day-level noise: shape ``k x days`` for
   day-level shape ``k``), so samples spread around the replay.
3. Each replayed batch is kept ``floor(s)`` times plus once more with probability ``s - floor(s)``
   (so ``s = 1`` is the replay itself, and ``s = 0.8`` drops a fifth of the batches at random).
   A second or later copy of a batch is moved by a random whole number of days within the window,
   so time of day is kept and copies do not pile up at one instant.

Durations, GPUs and VCs are the replayed jobs' own (no jitter): the hybrid changes how many
batches a period has, never what a batch is.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..space import Categorical, ConfigSpace
from ..trace.table import Trace
from .base import Jobs, WorkloadModel, check_sample_size
from .replay import whole_days
from .stat import Stat, ranges

DAY = 86400.0
SCALE_CLIP = 2.0
# The count model's knobs; the hybrid has no others (declared once, in Stat's space).
_KNOBS = ("burst_gap", "half_life", "trend", "weekly", "overdispersion", "ridge")


class Hybrid(WorkloadModel):
    name = "hybrid"
    summary = "last period's bursts replayed, their number rescaled to the count model's forecast"
    space = ConfigSpace([
        Categorical("level", "what sets the period's level: the count model's batches, or the "
                    "history's recency-weighted GPU-hours per day", choices=("count", "load"), default="load"),
        *(Stat.space[k] for k in _KNOBS),
    ])

    def _fit(self, history: Trace) -> None:
        self.count = Stat(**{k: self.params[k] for k in _KNOBS}).fit(history, self.history_start, self.history_end)

    def scale(self, start: float, horizon: float) -> float:
        """The expected level of ``[start, start + horizon)`` over what the replayed window puts
        there, clipped to [1/2, 2] (before the period's gamma factor). ``level=count``: batches
        expected by the count model over the replayed batches; ``level=load``: the history's
        recency-weighted GPU-seconds per day over the replayed window's."""
        c = self.count
        length = self._length(horizon)
        in_window = c.bt > self.history_end - length
        if self.params["level"] == "count":
            now = float(np.count_nonzero(in_window))
            expected = float(c.expected_batches(start, horizon)[2].sum()) * length / horizon
        else:
            work = c.g * c.d  # per job, in batch order
            now = float(work[np.repeat(in_window, np.diff(c.ptr))].sum())
            submit = np.repeat(c.bt, np.diff(c.ptr)) + c.offset
            days = max(int(math.ceil((self.history_end - self.history_start) / DAY - 1e-9)), 1)
            age = np.minimum(np.floor((self.history_end - submit) / DAY), days - 1).astype(np.int64)
            per_day = np.bincount(age, weights=work, minlength=days)
            w = 0.5 ** ((np.arange(days) + 0.5) / self.params["half_life"])
            expected = float((per_day * w).sum() / w.sum()) * length / DAY
        if now <= 0:
            return 1.0
        return float(np.clip(expected / now, 1.0 / SCALE_CLIP, SCALE_CLIP))

    def _length(self, horizon: float) -> float:
        span = self.history_end - self.history_start
        # As `replay`: the horizon, or the history's whole days if it is shorter.
        return horizon if horizon <= span else (math.floor(span / DAY) * DAY or max(span, 60.0))

    def _sample(self, start: float, horizon: float, rng: np.random.Generator) -> Jobs:
        c = self.count
        end = self.history_end
        length = self._length(horizon)
        s = self.scale(start, horizon)
        if c.inv_shape > 0:
            k = max(horizon / DAY, 1.0) / c.inv_shape
            s *= float(rng.gamma(k, 1.0 / k))
        window = np.flatnonzero(c.bt > end - length)
        check_sample_size(self.name, (s + 1) * len(window) * float(np.diff(c.ptr).mean()) * (horizon / length + 2))
        shift = whole_days(start - (end - length), length)
        offsets = shift + length * np.arange(-1, math.ceil(horizon / length) + 1)  # tiles, as replay
        base = np.tile(window, len(offsets))
        bstart = (c.bt[window][None, :] + offsets[:, None]).ravel()
        copies = np.floor(s) + (rng.random(len(base)) < s - np.floor(s))
        copies = copies.astype(np.int64)
        chosen = np.repeat(base, copies)
        bt = np.repeat(bstart, copies)
        # The 2nd, 3rd... copy of a batch moves by whole days, wrapped inside its tile.
        rank = np.arange(len(chosen)) - np.repeat(np.cumsum(copies) - copies, copies)
        days = max(int(length // DAY), 1)
        if days > 1:
            moved = rank > 0
            tile0 = np.repeat(np.repeat(offsets, len(window)), copies) + end - length
            pos = bt[moved] - tile0[moved] + DAY * rng.integers(1, days, int(moved.sum()))
            bt[moved] = tile0[moved] + np.mod(pos, days * DAY)
        sizes = np.diff(c.ptr)[chosen]
        members = ranges(c.ptr[chosen], sizes)
        submit = np.repeat(bt, sizes) + c.offset[members]
        vc = None if c.vc is None else c.vc[members]
        src = None if c.src is None else c.src[members]
        return Jobs(submit, c.g[members], c.d[members], vc, self.vc_names, src)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return self.count._state()

    def _restore(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        # The count model's state is the file's (see _state), its history the hybrid's own.
        header = {"params": {k: self.params[k] for k in _KNOBS}, "state": meta,
                  "history": [self.history_start, self.history_end, self.history_jobs],
                  "vc_names": self.vc_names}
        self.count = Stat.load(header, arrays)
