"""Rolling-origin evaluation: origins, measures worked out by hand, and no leakage."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autosched.cluster import parse_cluster
from autosched.policies import get_policy
from autosched.trace import Trace
from autosched.workload import MODELS, Replay, WorkloadError
from autosched.workload.evaluate import EvalSetup, _demand, _regret, _spearman, distances, evaluate, origins, panel_configs

DAY, HOUR = 86400.0, 3600.0


def week_trace(days: int = 21, per_day: int = 40, seed: int = 0) -> Trace:
    rng = np.random.default_rng(seed)
    n = days * per_day
    t = np.sort(rng.uniform(0, days * DAY, n))
    return Trace.from_columns({"job_id": [str(i) for i in range(n)], "submit_time": t,
                               "num_gpus": rng.choice([1, 2, 4], n), "duration": rng.lognormal(8, 1, n),
                               "vc": rng.choice(["a", "b"], n)})


def test_origins_are_a_week_apart_with_full_history_and_horizon():
    tr = week_trace(30)
    setup = EvalSetup(history=14 * DAY, horizon=7 * DAY, step=3 * DAY)
    got = origins(tr, setup)
    # first = start + 14 d; the last must leave 7 d before the last job (< 30 d).
    assert got[0] == pytest.approx(tr.start + 14 * DAY)
    assert np.all(np.diff(got) == 3 * DAY)
    assert got[-1] + 7 * DAY <= tr.end + 1e-6 and got[-1] + 3 * DAY + 7 * DAY > tr.end
    assert origins(tr, EvalSetup(first=15 * DAY, last=21 * DAY, step=7 * DAY)).tolist() == [15 * DAY]


def test_measures_by_hand():
    assert _regret(np.array([10.0, 12.0, 15.0]), 1) == pytest.approx(0.2)
    assert _regret(np.array([10.0, 12.0, 15.0]), 0) == 0.0
    assert _spearman(np.array([1.0, 2.0, 3.0]), np.array([10.0, 30.0, 20.0])) == pytest.approx(0.5)
    assert math.isnan(_spearman(np.array([1.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0])))
    # Two jobs: 2 GPUs over [0, 2h), 1 GPU over [1h, 4h): demand at hours 0..3 is 2, 3, 1, 1.
    tr = Trace.from_columns({"job_id": ["a", "b"], "submit_time": [0.0, HOUR], "num_gpus": [2, 1],
                             "duration": [2 * HOUR, 3 * HOUR]})
    assert _demand(tr, 0.0, 4 * HOUR).tolist() == [2.0, 3.0, 1.0, 1.0]


def test_distances_of_a_trace_to_itself_are_zero():
    tr = week_trace(7)
    d = distances(tr, tr)
    assert d.ks_interarrival == d.ks_log_duration == d.ks_gpus == d.ks_gpu_hours_tod == 0.0
    assert d.w_gpus == 0.0 and d.tv_vc == 0.0 and d.load_ratio == 1.0
    other = tr.replace(num_gpus=np.full(len(tr), 8))
    assert distances(tr, other).load_ratio > 1.0 and distances(tr, other).ks_gpus == 1.0


def test_panel_is_default_plus_fixed_draws():
    pol = get_policy("tiresias")
    a, b = panel_configs(pol, 4, seed=7), panel_configs(pol, 4, seed=7)
    assert a == b and len(a) == 5 and a[0] == pol.space.default()
    assert a != panel_configs(pol, 4, seed=8)


class Spy(Replay):
    """Replay that records the last submission it was fitted on."""

    name = "spy"
    seen: list[tuple[float, float]] = []

    def _fit(self, history):
        Spy.seen.append((history.start, history.end))
        super()._fit(history)


def test_evaluate_fits_only_on_the_past_and_scores(monkeypatch):
    monkeypatch.setitem(MODELS, "spy", Spy)
    Spy.seen = []
    tr = week_trace(24)
    setup = EvalSetup(history=14 * DAY, horizon=3 * DAY, step=3 * DAY, samples=2, panel=2)
    ev = evaluate(tr, parse_cluster("2x8"), get_policy("fifo"), ["spy", "stat"], setup)
    when = origins(tr, setup)
    assert [r.origin for r in ev.reals] == when.tolist() and len(when) == 3
    for (lo, hi), o in zip(Spy.seen, when):
        assert o - 14 * DAY <= lo and hi < o
    summ = ev.summary()
    assert set(summ) == {"spy", "stat"}
    for key in ("spearman_mean", "regret_mean", "ks_interarrival_mean"):
        assert key in summ["stat"]
    assert len(summ["stat"]["per_origin"]["regret"]) == 3
    assert all(len(r.samples) == 1 for r in ev.results["spy"])  # replay is deterministic: one sample
    assert all(len(r.samples) == 2 for r in ev.results["stat"])
    assert all(r >= 0 for r in summ["stat"]["per_origin"]["regret"])


def test_evaluate_rejects_bad_setups():
    tr = week_trace(10)
    pol, cl = get_policy("fifo"), parse_cluster("2x8")
    with pytest.raises(WorkloadError, match="no origin has 21 days of history"):
        evaluate(tr, cl, pol, ["replay"])
    with pytest.raises(WorkloadError, match="horizon must be > 0"):
        evaluate(tr, cl, pol, ["replay"], EvalSetup(horizon=0))
    with pytest.raises(WorkloadError, match="unknown workload model"):
        evaluate(tr, cl, pol, ["replay", "arima"], EvalSetup(history=DAY, horizon=DAY))
    with pytest.raises(WorkloadError, match="unknown objective"):
        evaluate(tr, cl, pol, ["replay"], EvalSetup(history=DAY, horizon=DAY, objective="speed"))
