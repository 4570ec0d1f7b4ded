"""Where a controller's evaluation workloads for the coming period come from.

- `ModelSource`: a workload model fitted on the observed history, sampled several times (autosched),
  optionally with the replayed last period as one more workload (``with_replay``);
- `ReplaySource`: the last period of observed history, replayed as the next (no model);
- `FutureSource`: the real jobs of the coming period. ORACLE: no real controller has them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from ..trace.table import Trace
from .errors import AdaptError
from .observe import Observation


class WorkloadSource(Protocol):
    name: str
    oracle: bool
    # True if another seed gives other workloads (a fitted model sampled); False if every seed gives
    # the same ones (replay, the real future): no fresh samples can be drawn to validate on.
    stochastic: bool

    def workloads(self, obs: Observation, horizon: float, seed: int) -> list[Trace]:
        """Traces of jobs submitted in [obs.now, obs.now + horizon)."""
        ...


class ModelSource:
    """Fit a workload model on the observed history and sample the coming period ``samples`` times.

    ``with_replay``: the workloads are the last period replayed (`ReplaySource`) followed by the
    ``samples`` model samples, so the samples bracket the plain replay instead of replacing it (a
    config is then judged on what really happened as well as on what the model says may happen).
    The replay is the same workload for every seed, so it is not part of ``fresh_workloads``: fresh
    samples to validate a winner on must be ones the tuner did not see.
    """

    oracle = False
    stochastic = True

    def __init__(self, model: str = "stat", samples: int = 3, params: Mapping[str, Any] | None = None,
                 factory: Callable[[str], Any] | None = None, with_replay: bool = False):
        if samples < 1:
            raise AdaptError(f"samples must be at least 1 (got {samples})")
        self.model = model
        self.samples = samples
        self.params = dict(params or {})
        self._factory = factory
        self.with_replay = with_replay
        self.name = f"model:{model}" + ("+replay" if with_replay else "")

    def seeds(self, seed: int) -> list[int]:
        """The sample seeds ``workloads(obs, horizon, seed)`` uses."""
        return [seed + i for i in range(self.samples)]

    def workloads(self, obs: Observation, horizon: float, seed: int) -> list[Trace]:
        replayed = ReplaySource().workloads(obs, horizon, seed) if self.with_replay else []
        return replayed + self.fresh_workloads(obs, horizon, seed)

    def fresh_workloads(self, obs: Observation, horizon: float, seed: int) -> list[Trace]:
        """The model samples only (seeds ``seeds(seed)``): what another seed changes."""
        factory = self._factory
        if factory is None:
            from ..workload import get_model as factory
        # The window the history was cut from, not its first and last job (see WorkloadModel.fit).
        model = factory(self.model)(**self.params).fit(obs.history, obs.start, obs.now)
        return [model.sample(obs.now, horizon, seed=s) for s in self.seeds(seed)]


class ReplaySource:
    """The last ``horizon`` of observed history, shifted to start at ``now`` (one workload)."""

    name = "replay"
    oracle = False
    stochastic = False

    def workloads(self, obs: Observation, horizon: float, seed: int) -> list[Trace]:
        start = max(obs.start, obs.now - horizon)
        past = obs.history.window(start, obs.now)
        return [past.shifted(obs.now - start)]


class FutureSource:
    """ORACLE: the real jobs submitted in the coming period, with their true durations."""

    name = "future (oracle)"
    oracle = True
    stochastic = False

    def __init__(self, trace: Trace):
        self.trace = trace

    def workloads(self, obs: Observation, horizon: float, seed: int) -> list[Trace]:
        return [self.trace.window(obs.now, obs.now + horizon)]


def concat(a: Trace, b: Trace) -> Trace:
    """Jobs of both traces (the columns they share), sorted by submit time."""
    ca, cb = a.columns(), b.columns()
    cols = {c: np.concatenate([ca[c], cb[c]]) for c in ca if c in cb}
    return Trace.from_columns(cols, source=b.source or a.source)
