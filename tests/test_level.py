"""Load-level scenarios (autosched.workload.level) and the source that uses them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.adapt import ModelSource, observe
from autosched.adapt.sources import concat
from autosched.cluster import ClusterSpec
from autosched.policies.tiresias import Tiresias
from autosched.sim import Simulator
from autosched.trace import Trace
from autosched.workload import WorkloadError
from autosched.workload.level import RECENT, recent_level, rescale, scenario_levels
from test_adapt_doubles import DAY, synthetic_trace


def _tiny() -> Trace:
    # a and b: one burst (one VC, 10 s apart); c and d: bursts of their own
    return Trace.from_columns({
        "job_id": np.array(["a", "b", "c", "d"], dtype=object),
        "submit_time": np.array([100.0, 110.0, 5000.0, 90000.0]),
        "num_gpus": np.array([1, 2, 1, 4]), "duration": np.array([10.0, 20.0, 30.0, 40.0]),
        "vc": np.array(["x", "x", "y", "x"], dtype=object)})


def test_scenario_levels_by_hand():
    assert np.array_equal(scenario_levels(4, 0.0), np.ones(4))
    lv = scenario_levels(2, 0.5)  # quantiles .25, .75: z = -/+0.6745, then scaled to mean 1
    assert lv.mean() == pytest.approx(1.0) and lv[1] / lv[0] == pytest.approx(math.exp(2 * 0.5 * 0.67449), rel=1e-4)
    lv = scenario_levels(8, 0.33)
    assert np.all(np.diff(lv) > 0) and lv.mean() == pytest.approx(1.0)
    with pytest.raises(WorkloadError):
        scenario_levels(0, 0.3)


def test_rescale_doubles_every_burst_by_whole_days():
    tr = _tiny()
    out = rescale(tr, 2.0, 0.0, 7 * DAY, np.random.default_rng(3))
    assert sorted(out.job_id) == ["a", "a~1", "b", "b~1", "c", "c~1", "d", "d~1"]
    t = dict(zip(out.job_id, out.submit_time))
    for j in "abcd":  # the first copy stays; a copy keeps its time of day, inside the period
        assert t[j] == tr.submit_time[list(tr.job_id).index(j)]
        moved = t[j + "~1"] - t[j]
        assert moved % DAY == 0 or (moved + 7 * DAY) % DAY == 0
        assert 0 <= t[j + "~1"] < 7 * DAY and t[j + "~1"] != t[j]
    assert t["b~1"] - t["a~1"] == 10.0  # a burst moves as one
    assert np.all(np.diff(out.submit_time) >= 0)
    assert rescale(tr, 1.0, 0.0, 7 * DAY, np.random.default_rng(3)) is tr


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), factor=st.floats(0.0, 3.0))
def test_rescale_keeps_or_drops_whole_bursts(seed, factor):
    out = rescale(_tiny(), factor, 0.0, 7 * DAY, np.random.default_rng(seed))
    ids = list(out.job_id)
    base = [i.split("~")[0] for i in ids]
    assert base.count("a") == base.count("b")  # one burst: the same number of copies
    for j in "abcd":
        assert math.floor(factor) <= base.count(j) <= math.floor(factor) + 1
    assert len(set(ids)) == len(ids)


def test_rescale_scales_the_expected_load():
    tr = synthetic_trace(days=7, per_day=100, seed=1)
    for factor in (0.6, 1.4):
        n = [len(rescale(tr, factor, tr.start, 7 * DAY, np.random.default_rng(s))) for s in range(200)]
        assert np.mean(n) == pytest.approx(factor * len(tr), rel=0.03)


def test_model_source_scenarios_bracket_the_forecast():
    """Scenario i rescales the sample of the same seed: below level 1 it keeps a subset of that
    sample's jobs, above 1 all of them and copies."""
    tr = synthetic_trace(days=4, per_day=150, seed=3)
    sim = Simulator(tr, ClusterSpec.uniform_nodes(1, 4), Tiresias()).run(until=2 * DAY)
    obs = observe(sim, 2 * DAY, 0)
    plain = ModelSource("stat", samples=4).workloads(obs, DAY, seed=5)
    scen = ModelSource("stat", samples=4, level_sd=0.5).workloads(obs, DAY, seed=5)
    levels = scenario_levels(4, 0.5)
    for p, s, lv in zip(plain, scen, levels):
        mine, theirs = set(s.job_id), set(p.job_id)
        originals = {i for i in mine if "~" not in i}
        if lv < 1:
            assert mine < theirs  # some bursts dropped
        else:
            assert originals == theirs and len(mine) > len(theirs)  # all kept, some copied
    src = ModelSource("stat", samples=4, level_sd=0.5, validation_samples=8)
    val = src.validation_workloads(obs, DAY, seed=505)
    base = ModelSource("stat", samples=4, validation_samples=8).validation_workloads(obs, DAY, seed=505)
    assert src.validation_seeds(505) == list(range(505, 513))
    assert [w.source for w in val] == [f"stat-{s}" for s in range(505, 513)]
    ratio = [len(v) / len(b) for v, b in zip(val, base)]
    assert ratio[0] < 1 < ratio[-1] and np.corrcoef(ratio, scenario_levels(8, 0.5))[0, 1] > 0.9


def test_rescale_edge_cases_by_hand():
    tr = _tiny()
    assert len(rescale(tr, 0.0, 0.0, 7 * DAY, np.random.default_rng(0))) == 0
    # a period of 2.5 days: copies move by whole days inside its 2 whole days, keeping time of day
    late = Trace.from_columns({"job_id": np.array(["x", "y"], dtype=object),
                               "submit_time": np.array([2 * DAY + 3600.0, 2.5 * DAY]),
                               "num_gpus": np.array([1, 1]), "duration": np.array([5.0, 5.0])})
    for seed in range(20):
        out = rescale(late, 2.0, 0.0, 2.5 * DAY, np.random.default_rng(seed))
        t = dict(zip(out.job_id, out.submit_time))
        assert t["x"] == 2 * DAY + 3600.0 and t["y"] == 2.5 * DAY  # first copies stay, even at the end
        assert t["x~1"] % DAY == 3600.0 and 0 <= t["x~1"] < 2 * DAY
    with pytest.raises(WorkloadError, match="finite and >= 0"):
        rescale(tr, -1.0, 0.0, DAY, np.random.default_rng(0))
    with pytest.raises(WorkloadError, match=r"level sd must be in \[0, 2\]"):
        scenario_levels(4, float("nan"))


def test_recent_level_by_hand():
    # 4 days of history, 23 jobs in all; 11 of them in the last 6 hours (one added to each count):
    # recent rate 12 / 6 h, the history's 24 / 96 h: 8x; to the power 0.5, 2.83; capped at 4
    now, start = 4 * DAY, 0.0
    submit = np.concatenate([np.linspace(0.0, 3 * DAY, 12), now - RECENT + np.arange(11) * 600.0])
    assert recent_level(submit, start, now, 0.5) == pytest.approx(math.sqrt(8.0))
    assert recent_level(submit, start, now, 1.0) == 4.0  # 8, held at the cap
    assert recent_level(submit, start, now, 0.0) == 1.0
    # a quiet last 6 hours: 0 + 1 against 13 / 96 h: 8/13 to the power 0.5
    quiet = np.linspace(0.0, 3 * DAY, 12)
    assert recent_level(quiet, start, now, 0.5) == pytest.approx(math.sqrt((1 / 6) / (13 / 96)))
    # a history no longer than the recent window says nothing of it
    assert recent_level(submit, now - RECENT, now, 0.5) == 1.0
    with pytest.raises(WorkloadError, match=r"persistence must be in \[0, 1\]"):
        recent_level(submit, start, now, 1.5)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.0, 4 * DAY - 1), max_size=60), st.floats(0.0, 1.0))
def test_recent_level_is_held_and_grows_with_the_last_hours(times, persistence):
    submit = np.array(times)
    lv = recent_level(submit, 0.0, 4 * DAY, persistence)
    assert 0.25 <= lv <= 4.0
    busier = np.concatenate([submit, np.full(5, 4 * DAY - 60.0)])  # 5 more jobs a minute ago
    assert recent_level(busier, 0.0, 4 * DAY, persistence) >= lv - 1e-12


def test_model_source_follows_a_burst_at_the_round():
    """A burst in the last hours before the round: with persistence the samples hold more jobs,
    each sample rescaled from the plain sample of its seed."""
    tr = synthetic_trace(days=4, per_day=150, seed=3)
    burst = Trace.from_columns({"job_id": np.array([f"b{i}" for i in range(120)], dtype=object),
                                "submit_time": 2 * DAY - 3 * 3600.0 + np.arange(120) * 60.0,
                                "num_gpus": np.ones(120, dtype=np.int64), "duration": np.full(120, 600.0),
                                "vc": np.array(["vc0"] * 120, dtype=object)})
    both = concat(tr.window(0.0, 2 * DAY), burst)
    sim = Simulator(both, ClusterSpec.uniform_nodes(1, 4), Tiresias()).run(until=2 * DAY)
    obs = observe(sim, 2 * DAY, 0)
    src = ModelSource("stat", samples=4, persistence=0.5)
    level = src.level(obs)
    assert level > 1.5
    plain = ModelSource("stat", samples=4).workloads(obs, DAY, seed=5)
    more = src.workloads(obs, DAY, seed=5)
    assert np.mean([len(m) for m in more]) > 1.3 * np.mean([len(p) for p in plain])
    for p, m in zip(plain, more):
        assert {i for i in m.job_id if "~" not in i} == set(p.job_id)
    assert ModelSource("stat", samples=4).level(obs) == 1.0
