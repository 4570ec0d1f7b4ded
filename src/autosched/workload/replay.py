"""The baseline to beat: replay the last stretch of history in the new period."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..trace.table import Trace
from .base import CODES, DURATIONS, GPUS, TIMES, Jobs, WorkloadError, WorkloadModel, same_length, vc_codes

DAY = 86400.0


class Replay(WorkloadModel):
    """The last ``horizon``-long window of history, shifted to start at ``start``.

    The shift is rounded to whole days so that time of day is kept (with a 7-day horizon right
    after the history it is exactly one week, which keeps day of week too). A history shorter than
    the horizon is tiled: its last whole days are repeated back to back. Deterministic: the seed
    is ignored.
    """

    name = "replay"
    summary = "the last horizon-long window of history, shifted to the new period (baseline)"
    deterministic = True
    saved = {"t": TIMES, "g": GPUS, "d": DURATIONS, "vc": CODES}

    def _fit(self, history: Trace) -> None:
        # The whole history is kept: which window to replay depends on the horizon asked for.
        self.t = history.submit_time.copy()
        self.g = history.num_gpus.copy()
        self.d = history.duration.copy()
        self.vc = vc_codes(history, self.vc_names)

    def _sample(self, start: float, horizon: float, rng: np.random.Generator) -> Jobs:
        end = self.history_end
        span = end - self.history_start
        # The window length: the horizon, or the history's whole days if it is shorter.
        length = horizon if horizon <= span else (math.floor(span / DAY) * DAY or max(span, 60.0))
        shift = whole_days(start - (end - length), length)
        sel = np.flatnonzero(self.t > end - length)  # the window (end - length, end]
        # Copies of the window back to back; one before and one after, since rounding the shift
        # to whole days can leave up to half a day at either edge. to_trace() clips to the period.
        offsets = shift + length * np.arange(-1, math.ceil(horizon / length) + 1)
        idx = np.tile(sel, len(offsets))
        submit = (self.t[sel][None, :] + offsets[:, None]).ravel()
        return Jobs(submit, self.g[idx], self.d[idx], None if self.vc is None else self.vc[idx],
                    self.vc_names, idx)

    def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        arrays = {"t": self.t, "g": self.g, "d": self.d}
        if self.vc is not None:
            arrays["vc"] = self.vc
        return {}, arrays

    def _restore(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.t, self.g, self.d = arrays["t"], arrays["g"], arrays["d"]
        self.vc = arrays.get("vc")

    def _check_state(self) -> None:
        if len(self.t) < 1:
            raise WorkloadError("the model holds no job")
        same_length(len(self.t), g=self.g, d=self.d)
        self._check_times("t", self.t)
        self._check_vc("vc", self.vc, len(self.t))
        if self.carried:  # a sampled job copies the columns of the history row it replays
            same_length(self.history_jobs, t=self.t)


def whole_days(shift: float, length: float) -> float:
    """`shift` rounded to whole days when the window is at least a day long, so that a replayed
    window keeps its time of day (`replay` and `hybrid` shift their windows by it)."""
    if length < DAY:
        return shift
    return round(shift / DAY) * DAY
