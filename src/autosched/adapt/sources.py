"""Where a controller's evaluation workloads for the coming period come from.

- `ModelSource`: a workload model fitted on the observed history, sampled several times (autosched),
  optionally with the replayed last period as one more workload (``with_replay``);
- `ReplaySource`: the last period of observed history, replayed as the next (no model);
- `FutureSource`: the real jobs of the coming period. ORACLE: no real controller has them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..trace.table import HISTORY, Trace
from ..workload import WorkloadModel, get_model
from ..workload.level import RECENT, check_level_sd, check_persistence, recent_level, rescale, scenario_levels
from .errors import AdaptError
from .observe import Observation

# The fastest a test bed may replay jobs against their own time (a trace minute in 0.6 ms).
MAX_TIME_SCALE = 100_000
# A workload model class by its name: `autosched.workload.get_model`, or a stand-in in tests.
ModelFactory = Callable[[str], type[WorkloadModel]]


@runtime_checkable
class WorkloadSource(Protocol):
    """Where a `Controller` gets the workloads of a round. The controller calls `workloads` once a
    round to tune on, then `validation_workloads` (with another seed) to judge the tuner's winner
    against the running config on workloads the tuner never saw."""

    name: str
    oracle: bool  # True if it reads the real future (no real controller could)

    def workloads(self, obs: Observation, horizon: float, seed: int) -> list[Trace]:
        """Traces of jobs submitted in [obs.now, obs.now + horizon) to tune on."""
        ...

    def seeds(self, seed: int) -> list[int]:
        """The random seeds `workloads(obs, horizon, seed)` draws its samples with ([] if none)."""
        ...

    def validation_workloads(self, obs: Observation, horizon: float, seed: int) -> list[Trace]:
        """Workloads for the same period drawn with `validation_seeds(seed)` and none of the tuning
        workloads; [] when every seed gives the same workloads (replay, the real future): such a
        source has nothing fresh to validate on."""
        ...

    def validation_seeds(self, seed: int) -> list[int]:
        """The seeds `validation_workloads(obs, horizon, seed)` draws with ([] if none)."""
        ...

    def draw(self, obs: Observation, horizon: float, seeds: list[int]) -> list[Trace]:
        """Fresh samples for the same period drawn with exactly `seeds`, one each ([] for a
        deterministic source): a round's portfolio draws more as it needs them."""
        ...


class ModelSource:
    """Fit a workload model on the observed history and sample the coming period ``samples`` times
    to tune on, and ``validation_samples`` times (other seeds) to validate on.

    ``with_replay``: the tuning workloads are the last period replayed (`ReplaySource`) followed by
    the ``samples`` model samples, so the samples bracket the plain replay instead of replacing it
    (a config is then judged on what really happened as well as on what the model says may happen).
    The replay is the same workload for every seed, so it is never a validation workload: fresh
    samples to validate a winner on must be ones the tuner did not see.

    ``validation_samples`` (default: ``samples``) sets how finely the guardrail measures a gain:
    validation simulates only two configs, so more samples there cost little next to a round's
    ``budget x samples`` tuning simulations.

    ``level_sd`` > 0: the samples of a draw are scenarios of a busier or quieter period; the i-th
    of n has its bursts scaled by the i-th of `scenario_levels(n, level_sd)` (stratified levels of
    mean 1), so a config is chosen, and judged, over the range of load the coming period may
    plausibly carry rather than at last week's level alone (`autosched.workload.level`).

    ``persistence`` > 0: the samples' level follows how busy the last hours were
    (`autosched.workload.level.recent_level`: the recent arrival rate over the history's, to this
    power). The model forecasts the history's level; a burst building at the round (the moment a
    contention round is called) would otherwise be forecast away as the history's average day.

    ``time_scale`` N > 1: the cluster runs the jobs N times faster than their own time (a test
    bed that replays a trace compressed). The model is fitted and sampled on the jobs' own clock
    (the history stretched N times about `now`, the samples compressed back), so its time
    constants (``stat``'s 60 s bursts, its hours of the day) mean what they mean on a real
    cluster. The scheduler's knobs stay in the cluster's seconds.
    """

    oracle = False

    def __init__(self, model: str = "stat", samples: int = 3, params: Mapping[str, Any] | None = None,
                 factory: ModelFactory | None = None, with_replay: bool = False,
                 validation_samples: int | None = None, level_sd: float = 0.0, time_scale: float = 1.0,
                 persistence: float = 0.0):
        check_model_source(samples, validation_samples, level_sd, time_scale, persistence)
        self.model = model
        self.samples = samples
        self.level_sd = level_sd
        self.persistence = persistence
        self.validation_samples = validation_samples if validation_samples is not None else samples
        self.params = dict(params or {})
        self._factory = factory
        self.with_replay = with_replay
        self.time_scale = time_scale
        self.name = f"model:{model}" + ("+replay" if with_replay else "")
        self._fitted: tuple[Observation, WorkloadModel] | None = None

    def seeds(self, seed: int) -> list[int]:
        return [seed + i for i in range(self.samples)]

    def validation_seeds(self, seed: int) -> list[int]:
        return [seed + i for i in range(self.validation_samples)]

    def workloads(self, obs: Observation, horizon: float, seed: int) -> list[Trace]:
        replayed = ReplaySource().workloads(obs, horizon, seed) if self.with_replay else []
        return replayed + self._sample(obs, horizon, self.seeds(seed))

    def validation_workloads(self, obs: Observation, horizon: float, seed: int) -> list[Trace]:
        return self._sample(obs, horizon, self.validation_seeds(seed))

    def draw(self, obs: Observation, horizon: float, seeds: list[int]) -> list[Trace]:
        return self._sample(obs, horizon, list(seeds))

    def fit(self, obs: Observation) -> WorkloadModel:
        """The model fitted on `obs`'s history, as the workloads are drawn from it: on the jobs'
        clock (`time_scale`), over the window the history was cut from, not its first and last
        job (see WorkloadModel.fit)."""
        factory = self._factory or get_model
        c, now = self.time_scale, obs.now
        history = obs.history.stretched(c, now) if c != 1 else obs.history
        return factory(self.model)(**self.params).fit(history, now - (now - obs.start) * c, now)

    def level(self, obs: Observation) -> float:
        """The samples' level from the last hours (`persistence`; 1 without): `RECENT` of the
        jobs' clock, on the history's."""
        return recent_level(obs.history.submit_time, obs.start, obs.now, self.persistence,
                            RECENT / self.time_scale)

    def _sample(self, obs: Observation, horizon: float, seeds: list[int]) -> list[Trace]:
        c, now = self.time_scale, obs.now
        # one fit per observation: a round draws its samples in several batches
        if self._fitted is None or self._fitted[0] is not obs:
            self._fitted = (obs, self.fit(obs))
        model = self._fitted[1]
        out = [model.sample(now, horizon * c, seed=s) for s in seeds]
        levels = (scenario_levels(len(seeds), self.level_sd) if self.level_sd > 0
                  else np.ones(len(seeds))) * self.level(obs)
        if (levels != 1.0).any():  # (bursts and days on the jobs' clock too)
            out = [rescale(w, f, now, horizon * c, np.random.default_rng([s, 1]))
                   for w, f, s in zip(out, levels, seeds)]
        return [w.stretched(1 / c, now) for w in out] if c != 1 else out


def check_model_source(samples: int, validation_samples: int | None, level_sd: float,
                       time_scale: float = 1.0, persistence: float = 0.0) -> None:
    """The checks of `ModelSource`'s settings, in one place (`Settings` makes them up front)."""
    check_time_scale(time_scale)
    if samples < 1:
        raise AdaptError(f"samples must be at least 1 (got {samples})")
    if validation_samples is not None and validation_samples < 2:
        raise AdaptError(f"validation samples must be at least 2, to measure a spread (got {validation_samples})")
    check_level_sd(level_sd)
    check_persistence(persistence)


def check_time_scale(time_scale: float) -> None:
    """The one check of a time scale (`ModelSource`, the agent's settings)."""
    if not 1 <= time_scale <= MAX_TIME_SCALE:
        raise AdaptError(f"time scale {time_scale:g}: must be in [1, {MAX_TIME_SCALE:,}] (1: the cluster runs "
                         "jobs in their own time; N: a test bed replaying them N times faster)")


class _Deterministic:
    """A source whose every seed gives the same workloads: nothing fresh to validate on."""

    def seeds(self, seed: int) -> list[int]:
        return []

    def validation_workloads(self, obs: Observation, horizon: float, seed: int) -> list[Trace]:
        return []

    def validation_seeds(self, seed: int) -> list[int]:
        return []

    def draw(self, obs: Observation, horizon: float, seeds: list[int]) -> list[Trace]:
        return []


class ReplaySource(_Deterministic):
    """The last ``horizon`` of observed history, shifted to start at ``now`` (one workload)."""

    name = "replay"
    oracle = False

    def workloads(self, obs: Observation, horizon: float, seed: int) -> list[Trace]:
        start = max(obs.start, obs.now - horizon)
        past = obs.history.window(start, obs.now)
        return [past.shifted(obs.now - start)]


class FutureSource(_Deterministic):
    """ORACLE: the real jobs submitted in the coming period, with their true durations."""

    name = "future (oracle)"
    oracle = True

    def __init__(self, trace: Trace):
        self.trace = trace

    def workloads(self, obs: Observation, horizon: float, seed: int) -> list[Trace]:
        return [self.trace.window(obs.now, obs.now + horizon)]


def concat(a: Trace, b: Trace) -> Trace:
    """Jobs of both traces (the columns they share, and a job-history column either has: absent
    means 0), sorted by submit time."""
    ca, cb = a.columns(), b.columns()
    for c in HISTORY:
        if c in ca and c not in cb:
            cb[c] = np.zeros(len(b))
        elif c in cb and c not in ca:
            ca[c] = np.zeros(len(a))
    cols = {c: np.concatenate([ca[c], cb[c]]) for c in ca if c in cb}
    return Trace.from_columns(cols, source=b.source or a.source)
