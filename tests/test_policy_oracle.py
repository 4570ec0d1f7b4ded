"""oracle_static_policy: the best fixed config in hindsight that keeps to the operator's policy
against the default in every period (`autosched.adapt.oracle`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from autosched.adapt import Settings, run_experiment
from autosched.adapt.constraints import PolicyConstraints
from autosched.adapt.oracle import PolicyOracleTuner, period_breaks, period_scores
from autosched.cluster import ClusterSpec
from autosched.policies import get_policy
from autosched.sim import Metrics, Simulator
from autosched.trace import Trace
from autosched.tune import Objective

FIFO = get_policy("fifo")
CLUSTER = ClusterSpec.uniform_nodes(1, 4)
START = FIFO.space.validate({})  # no backfill
FULL = FIFO.space.validate({"backfill": True})  # small jobs pass the head until it waited 6 h
SHORT = FIFO.space.validate({"backfill": True, "reserve_after": 100.0})  # ... until it waited 100 s


def trace() -> Trace:
    """1x4 under fifo, worked by hand (the simulator agrees, `test_the_hand_worked_replays`):
    J0 (1 GPU, 1000 s) runs from 0; B (4 GPUs, 100 s) comes at 10 and waits for the node; S1, S2
    (1 GPU, 2000 s) at 20 and S3 at 500.
    - START: B 1000-1100, then S1-S3 from 1100. Waits J0 0, B 990, S1 S2 1080, S3 600: avg JCT
      (1000 + 1090 + 3080 + 3080 + 2600) / 5 = 2170.
    - FULL: S1, S2 pass B at 20, S3 at 500 (a GPU is free); B waits for all four, 2500-2600.
      Waits 0, 2490, 0, 0, 0: avg JCT (1000 + 2590 + 3 x 2000) / 5 = 1918.
    - SHORT: S1, S2 pass at 20 (B has waited 10 s); at 500 B has waited 490 s > 100: S3 queues
      behind B, which runs 2020-2120, S3 2120-4120. Waits 0, 2010, 0, 0, 1620: avg JCT
      (1000 + 2110 + 2000 + 2000 + 3620) / 5 = 2146."""
    return Trace.from_columns({"job_id": ["J0", "B", "S1", "S2", "S3"],
                               "submit_time": [0.0, 10.0, 20.0, 20.0, 500.0], "num_gpus": [1, 4, 1, 1, 1],
                               "duration": [1000.0, 100.0, 2000.0, 2000.0, 2000.0]})


# a size class's p95 wait may grow by 1.2x its default's, no slack, and one job counts
TIGHT = PolicyConstraints(account_tolerance=None, size_tolerance=1.2, queue_tolerance=None, wait_slack=0.0,
                          min_jobs=1)


@dataclass
class Tried:
    state: str
    config: dict
    metrics: list


@dataclass
class Outcome:
    best_config: dict | None
    trials: list
    cost: dict = field(default_factory=lambda: {"simulations": 2.0})
    graph: list = field(default_factory=list)
    screened_knobs: dict = field(default_factory=dict)


class TwoTrials:
    """A search that tried FULL and SHORT, on the hand-worked trace, with their avg JCTs."""

    def __init__(self, *args: Any) -> None:
        self.searched = 0

    def tune(self, workloads, warm_start=None, progress=None, prior=None, check=None):
        self.searched += 1
        values = {repr(FULL): 1918.0, repr(SHORT): 2146.0}
        return Outcome(FULL, [Tried("complete", c, [_metrics(values[repr(c)])]) for c in (SHORT, FULL)])

    def evaluate(self, policy_name, config, workloads):
        raise AssertionError("the walk reads the trials' values and replays; it scores nothing else")


def _metrics(avg_jct: float) -> Metrics:
    return Metrics(**{**{f: 0.0 for f in Metrics.__dataclass_fields__}, "avg_jct": avg_jct, "jobs": 5})


def _oracle(constraints: PolicyConstraints, bounds: list[float]) -> PolicyOracleTuner:
    return PolicyOracleTuner(TwoTrials(), FIFO, FIFO.space, CLUSTER, Objective("avg_jct"), constraints, bounds,
                             START)


def test_the_hand_worked_replays():
    for config, waits, avg in ((START, [0, 990, 1080, 1080, 600], 2170.0), (FULL, [0, 2490, 0, 0, 0], 1918.0),
                               (SHORT, [0, 2010, 0, 0, 1620], 2146.0)):
        rec = Simulator(trace(), CLUSTER, FIFO(config)).run().records()
        assert rec.queue.tolist() == waits
        (score,) = period_scores(rec, trace(), CLUSTER, [0.0, 1e4])
        assert score is not None and score.value == avg


def test_the_unconstrained_oracle_breaks_the_policy_and_the_policy_oracle_picks_another():
    # One period. FULL: B (the 2-4 GPU class) waits 990 -> 2490 s, 1500 more where 1.2 x 990 =
    # 1188 are allowed: refused. SHORT: B 990 -> 2010 (+1020 <= 1188) and the 1-GPU class's p95
    # (numpy's, over J0 S1 S2 S3) 1080 -> 1377 (+297 <= 1296): it holds, and beats the default.
    out = _oracle(TIGHT, [0.0, 1e4]).tune([trace()])
    assert out.best_config == SHORT
    assert (out.cost["policy_refused"], out.cost["policy_replays"]) == (1.0, 2.0)
    # a looser policy (B may wait twice as long again: +1980) lets the search's best through
    loose = PolicyConstraints(account_tolerance=None, size_tolerance=2.0, queue_tolerance=None, wait_slack=0.0,
                              min_jobs=1)
    assert _oracle(loose, [0.0, 1e4]).tune([trace()]).best_config == FULL


def test_every_period_must_keep_the_policy():
    # Two periods, the second holding S3 alone. SHORT makes S3 wait 600 -> 1620 s: +1020 where
    # 1.2 x 600 = 720 are allowed, so it breaks period 1 though the whole trace held; FULL breaks
    # period 0 (B). Neither is a fixed config within the policy: the oracle keeps the default.
    bounds = [0.0, 300.0, 1e4]
    base = [period_scores(Simulator(trace(), CLUSTER, FIFO(c)).run().records(), trace(), CLUSTER, bounds)
            for c in (START, SHORT, FULL)]
    assert [bool(b) for b in period_breaks(TIGHT, base[0], base[1])] == [False, True]
    assert [bool(b) for b in period_breaks(TIGHT, base[0], base[2])] == [True, False]
    assert _oracle(TIGHT, bounds).tune([trace()]).best_config == START


def test_run_labels_the_policy_oracle_and_records_what_each_period_breaks(tmp_path):
    settings = Settings(policy="fifo", period=1e4, history=1e4, budget=1, samples=1, first_decision=None,
                        account_tolerance=None, size_tolerance=1.2, queue_tolerance=None)
    names = ["default", "oracle_static", "oracle_static_policy"]
    res = run_experiment(trace(), CLUSTER, settings, names, tuner_factory=TwoTrials, cache=tmp_path / "c")
    s = res.strategies
    # (the run's policy counts a class with 5 jobs a period: here no class counts, so FULL holds)
    assert s["oracle_static"].metrics.avg_jct == 1918.0
    assert s["oracle_static_policy"].oracle and s["oracle_static_policy"].description.startswith("ORACLE")
    assert s["oracle_static_policy"].metrics.avg_jct == 1918.0
    assert res.summary()["periods_breaking_policy"] == {k: 0 for k in names}
    assert res.to_dict()["strategies"]["oracle_static"]["periods"][0]["policy_breaks"] == []
    assert res.summary()["share_of_oracle_static_policy_gain"]["oracle_static"] == pytest.approx(1.0)
    assert len(list((tmp_path / "c").glob("*.json"))) == 2  # each oracle's pick is cached


def test_a_run_counts_the_periods_that_break_the_policy(tmp_path, monkeypatch):
    # With a class counted from one job (TIGHT's min_jobs), FULL breaks the only period (B's
    # wait, as above) and the policy oracle picks SHORT, which holds.
    monkeypatch.setattr(Settings, "constraints", lambda self, cluster: TIGHT)
    settings = Settings(policy="fifo", period=1e4, history=1e4, budget=1, samples=1, first_decision=None)
    names = ["default", "oracle_static", "oracle_static_policy"]
    res = run_experiment(trace(), CLUSTER, settings, names, tuner_factory=TwoTrials)
    assert res.summary()["periods_breaking_policy"] == {"default": 0, "oracle_static": 1, "oracle_static_policy": 0}
    assert res.strategies["oracle_static_policy"].metrics.avg_jct == 2146.0
    share = res.summary()["share_of_oracle_static_policy_gain"]
    assert share["oracle_static"] == pytest.approx((2170 - 1918) / (2170 - 2146))
    assert not math.isnan(share["default"])
