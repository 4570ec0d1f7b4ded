"""Test doubles for the adaptive loop: a tiny random-search tuner and a replay-with-jitter model.

They keep to the agreed interfaces of autosched.tune.Tuner and autosched.workload models, run the
real simulator, and record what they were shown (so tests can check what the controller leaked).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autosched.cluster import ClusterSpec
from autosched.policies import get_policy
from autosched.sim import Metrics, simulate
from autosched.trace import Trace
from autosched.tune import ExecutionConfig, Objective, SearchConfig

DAY = 86400.0


def synthetic_trace(days: float = 6, per_day: int = 80, seed: int = 0, gpus=(1, 1, 1, 2, 4)) -> Trace:
    """Jobs with Poisson arrivals, log-normal durations (median ~40 min) and a small size mix."""
    rng = np.random.default_rng(seed)
    n = int(days * per_day)
    submit = np.sort(rng.uniform(0, days * DAY, n)).round()
    return Trace.from_columns({
        "job_id": [f"j{i}" for i in range(n)],
        "submit_time": submit,
        "num_gpus": rng.choice(gpus, n),
        "duration": np.maximum(1.0, rng.lognormal(np.log(2400), 1.2, n).round()),
    }, source="synthetic")


@dataclass
class FakeResult:
    """Keeps to autosched.adapt.controller.TuningOutcome."""

    best_config: dict | None
    best_value: float
    default_value: float
    trials: list = field(default_factory=list)
    screened_knobs: dict[str, Any] = field(default_factory=dict)
    graph: list[tuple[str, str, bool]] = field(default_factory=list)
    cost: dict[str, float] = field(default_factory=dict)


class FakeTuner:
    """Random search over the policy's space, scored with the real simulator. Its constructor
    keeps to autosched.adapt.controller.TunerFactory, its instances to RoundTuner."""

    instances: list["FakeTuner"] = []

    def __init__(self, policy: str, cluster: ClusterSpec, objective: Objective, search: SearchConfig,
                 execution: ExecutionConfig):
        self.policy, self.cluster, self.metric = policy, cluster, objective.metric
        self.budget, self.seed, self.execution = search.budget, search.seed, execution
        self.space = get_policy(policy).space
        self.seen: list[list[Trace]] = []
        FakeTuner.instances.append(self)

    def evaluate(self, policy, config, workloads) -> tuple[float, list[Metrics]]:
        ms = [simulate(w, self.cluster, get_policy(policy)(config)).metrics for w in workloads]
        return float(np.mean([getattr(m, self.metric) for m in ms])), ms

    def tune(self, workloads, warm_start=None, progress=None, prior=None, check=None):
        self.seen.append(list(workloads))
        self.prior = prior
        rng = random.Random(self.seed)
        configs = [self.space.default(), *(warm_start or []), *(self.space.sample(rng) for _ in range(self.budget))]
        values = [self.evaluate(self.policy, c, workloads)[0] for c in configs]
        best = int(np.argmin(values))
        return FakeResult(best_config=configs[best], best_value=values[best], default_value=values[0],
                          graph=[("queues", "avg_jct", True)], cost={"simulations": len(configs) * len(workloads)})


class WorseTuner(FakeTuner):
    """Returns a config that is clearly worse than the default (a broken or misled tuner)."""

    def tune(self, workloads, warm_start=None, progress=None, prior=None, check=None):
        self.seen.append(list(workloads))
        bad = self.space.validate({"queues": 1, "interval": 3600.0})  # FIFO-like, decides hourly
        return FakeResult(best_config=bad, best_value=0.0, default_value=1.0, cost={"simulations": 0})


class FakeModel:
    """Replays the last `horizon` of its history with seeded jitter; records what it was fitted on."""

    fitted_on: list[Trace] = []
    deterministic = False

    def __init__(self, **params):
        self.params = params

    def fit(self, history: Trace, start: float | None = None, end: float | None = None) -> "FakeModel":
        FakeModel.fitted_on.append(history)
        self.history = history
        return self

    def sample(self, start: float, horizon: float, seed: int) -> Trace:
        h = self.history
        past = h.window(max(h.start, start - horizon), start)
        rng = np.random.default_rng(seed)
        keep = rng.random(len(past)) < 0.9
        past = past.take(keep)
        cols = past.columns()
        cols["submit_time"] = np.clip(past.submit_time + (start - past.start) + rng.uniform(0, 600, len(past)),
                                      start, start + horizon - 1)
        cols["duration"] = np.maximum(1.0, past.duration * rng.lognormal(0, 0.1, len(past)))
        return Trace.from_columns(cols, source=f"fake-{seed}")


def fake_model_factory(name: str):
    return FakeModel


def test_doubles_keep_to_the_interfaces():
    tr = synthetic_trace(days=2, per_day=40)
    cl = ClusterSpec.uniform_nodes(1, 4)
    m = FakeModel().fit(tr.window(0, DAY))
    s = m.sample(DAY, DAY, seed=1)
    assert len(s) and s.start >= DAY and s.end < 2 * DAY
    tuner = FakeTuner("tiresias", cl, Objective(), SearchConfig(budget=2, screening=False), ExecutionConfig())
    res = tuner.tune([s])
    value, ms = tuner.evaluate("tiresias", res.best_config, [s])
    assert value == res.best_value and len(ms) == 1
