"""Workload models: reproducibility, no leakage, valid output, save/load, and what the stat model
recovers from a synthetic history with a known daily cycle and size mix."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.timeparse import TimeParseError, format_duration, parse_duration
from autosched.trace import Trace
from autosched.workload import MODELS, WorkloadError, get_model, load_model, parse_model_spec

DAY, HOUR = 86400.0, 3600.0
CORE = ("replay", "stat", "hybrid")


def trace_of(t, g, d, vc=None, prefix="h") -> Trace:
    cols = {"job_id": [f"{prefix}{i}" for i in range(len(t))], "submit_time": t, "num_gpus": g, "duration": d}
    if vc is not None:
        cols["vc"] = vc
    return Trace.from_columns(cols)


def random_history(seed: int = 0, days: float = 14.0, per_day: int = 60) -> Trace:
    rng = np.random.default_rng(seed)
    n = int(days * per_day)
    t = np.sort(rng.uniform(0, days * DAY, n))
    return trace_of(t, rng.choice([1, 2, 4, 8], n), rng.lognormal(7, 1.5, n) + 1, rng.choice(["a", "b", "c"], n))


# ----------------------------------------------------------------------------------- timeparse


@pytest.mark.parametrize("text,seconds", [("21d", 21 * DAY), ("12h", 12 * HOUR), ("3600", 3600.0),
                                          ("90m", 5400.0), ("1.5h", 5400.0), ("2w", 14 * DAY),
                                          (" 30 s ", 30.0), ("-1d", -DAY), (7, 7.0)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "7x", "d", "1e999", "nan", "3 days"])
def test_parse_duration_rejects(text):
    with pytest.raises(TimeParseError, match="--horizon"):
        parse_duration(text, "--horizon")


def test_format_duration():
    assert [format_duration(x) for x in (21 * DAY, 5400.0, 7200.0, 30.0, 1.5)] == ["21d", "90m", "2h", "30s", "1.5s"]


# ------------------------------------------------------------------------------------- replay


def test_replay_shifts_the_last_window_by_whole_days():
    # Last job at 13.9 d; window (6.9 d, 13.9 d]; shift 14 - 6.9 = 7.1 d rounds to 7 d. The window
    # is tiled back to back, so the piece (6.9 d, 7 d) lands at the end of the period.
    hist = trace_of([1.0 * DAY, 6.95 * DAY, 7.5 * DAY, 10.25 * DAY, 13.9 * DAY], [1, 2, 4, 8, 1],
                    [10.0, 20.0, 30.0, 40.0, 50.0])
    out = get_model("replay")().fit(hist).sample(14 * DAY, 7 * DAY, seed=3)
    assert out.submit_time.tolist() == pytest.approx([14.5 * DAY, 17.25 * DAY, 20.9 * DAY, 20.95 * DAY])
    assert out.num_gpus.tolist() == [4, 8, 1, 2]
    assert out.duration.tolist() == [30.0, 40.0, 50.0, 20.0]


def test_replay_tiles_a_short_history():
    # Span 1 day: the window is that day, (0.5 d, 1.5 d] = the job at 1.5 d; the shift from
    # 0.5 d to 2 d (1.5 d) rounds to 2 d, so copies land at 2.5, 3.5 and 4.5 d.
    hist = trace_of([0.5 * DAY, 1.5 * DAY], [2, 4], [100.0, 200.0])
    out = get_model("replay")().fit(hist).sample(2 * DAY, 3 * DAY, seed=0)
    assert out.submit_time.tolist() == pytest.approx([2.5 * DAY, 3.5 * DAY, 4.5 * DAY])
    assert out.num_gpus.tolist() == [4, 4, 4]
    assert len(set(out.job_id.tolist())) == 3


# ----------------------------------------------------------------------- contract of every model


@pytest.mark.parametrize("name", CORE)
def test_sample_is_reproducible_for_a_seed(name):
    m = get_model(name)().fit(random_history())
    a, b = m.sample(14 * DAY, 7 * DAY, seed=5), m.sample(14 * DAY, 7 * DAY, seed=5)
    assert a.equals(b) and len(a) > 0
    if not m.deterministic:
        assert not a.equals(m.sample(14 * DAY, 7 * DAY, seed=6))


@pytest.mark.parametrize("name", CORE)
def test_no_leakage_from_after_until(name):
    """Two traces equal before `until` and wildly different after it give identical models."""
    until = 14 * DAY
    hist = random_history(1)
    rng = np.random.default_rng(9)
    tail_t = until + np.sort(rng.uniform(0, 7 * DAY, 500))
    poison = trace_of(np.concatenate([hist.submit_time, tail_t]),
                      np.concatenate([hist.num_gpus, np.full(500, 64)]),
                      np.concatenate([hist.duration, np.full(500, 1e7)]),
                      np.concatenate([hist.vc, np.full(500, "poison")]))
    clean_m = get_model(name)().fit(hist.window(-math.inf, until))
    poison_m = get_model(name)().fit(poison.window(-math.inf, until))
    for seed in (0, 1):
        a, b = clean_m.sample(until, 7 * DAY, seed), poison_m.sample(until, 7 * DAY, seed)
        assert a.equals(b)
        assert 64 not in b.num_gpus and "poison" not in set(b.vc.tolist())


@pytest.mark.parametrize("name", CORE)
def test_fit_reads_nothing_after_history_end(name):
    """The fitted state only depends on the history: a later sample start does not change the
    jobs' attributes, and the model remembers where its history ended."""
    hist = random_history(2)
    m = get_model(name)().fit(hist)
    assert m.history_end == hist.end and m.history_jobs == len(hist)
    m = get_model(name)().fit(hist, -DAY, 15 * DAY)  # the window the history was cut from
    assert (m.history_start, m.history_end) == (-DAY, 15 * DAY)
    assert set(m.sample(30 * DAY, 7 * DAY, 0).num_gpus.tolist()) <= set(hist.num_gpus.tolist())


history_strategy = st.integers(1, 60).flatmap(lambda n: st.tuples(
    st.lists(st.floats(0, 20 * DAY, allow_nan=False), min_size=n, max_size=n),
    st.lists(st.sampled_from([1, 2, 4, 8, 16]), min_size=n, max_size=n),
    st.lists(st.floats(1.0, 1e6, allow_nan=False), min_size=n, max_size=n),
    st.lists(st.sampled_from(["x", "y"]), min_size=n, max_size=n)))


@settings(max_examples=40, deadline=None)
@given(history_strategy, st.sampled_from(CORE), st.floats(-5 * DAY, 40 * DAY), st.floats(60.0, 10 * DAY),
       st.integers(0, 2**31 - 1))
def test_samples_are_valid_traces(cols, name, start, horizon, seed):
    t, g, d, vc = cols
    hist = trace_of(t, g, d, vc)
    out = get_model(name)().fit(hist).sample(start, horizon, seed)
    assert len(set(out.job_id.tolist())) == len(out)
    assert np.all(np.diff(out.submit_time) >= 0)
    assert np.all((out.submit_time >= start) & (out.submit_time < start + horizon))
    assert set(out.num_gpus.tolist()) <= set(hist.num_gpus.tolist())
    assert np.all(out.duration > 0) and np.all(np.isfinite(out.duration))
    assert set(out.vc.tolist()) <= set(hist.vc.tolist())


def test_history_without_vc_gives_trace_without_vc():
    hist = random_history(3)
    hist = trace_of(hist.submit_time, hist.num_gpus, hist.duration)
    for name in CORE:
        assert get_model(name)().fit(hist).sample(14 * DAY, DAY, 0).vc is None


# ------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("name", CORE)
def test_bad_input(name):
    m = get_model(name)()
    with pytest.raises(WorkloadError, match="fit"):
        m.sample(0, DAY, 0)
    with pytest.raises(WorkloadError, match="empty history"):
        m.fit(random_history().window(-10, -5))
    m.fit(random_history())
    for horizon in (0, -DAY, math.inf, math.nan):
        with pytest.raises(WorkloadError, match="horizon must be > 0"):
            m.sample(0, horizon, 0)


def test_unknown_model_and_bad_params():
    with pytest.raises(WorkloadError, match="unknown workload model 'arima'; known: replay, stat, hybrid, neural"):
        get_model("arima")
    with pytest.raises(ValueError, match="half_life"):
        parse_model_spec("stat:half_life=-1")
    assert parse_model_spec("stat:trend=false:half_life=3").params["half_life"] == 3.0
    assert set(MODELS) >= {"replay", "stat", "neural"}


@pytest.mark.parametrize("name", CORE)
def test_save_load_round_trip(name, tmp_path):
    m = get_model(name)(**({"half_life": 4.0} if name == "stat" else {})).fit(random_history(4))
    m.save(tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz")
    assert type(back) is type(m) and back.params == m.params
    assert back.sample(14 * DAY, 7 * DAY, 11).equals(m.sample(14 * DAY, 7 * DAY, 11))


@pytest.mark.parametrize("name", CORE)
def test_load_restores_what_fit_recorded(name, tmp_path):
    # A window wider than the jobs' span (-1 d to 15 d), as an operator's `workload fit` gives.
    hist = random_history(2)
    m = get_model(name)().fit(hist, -DAY, 15 * DAY)
    m.save(tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz")
    fitted = [(x.history_start, x.history_end, x.history_jobs, x.vc_names, x.fitted)
              for x in ((m, back, m.count, back.count) if name == "hybrid" else (m, back))]
    assert fitted == [(-DAY, 15 * DAY, len(hist), ["a", "b", "c"], True)] * len(fitted)


def test_a_damaged_model_header_is_one_error_naming_the_file(tmp_path):
    get_model("hybrid")().fit(random_history(4)).save(tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz") as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays.pop("__header__")))
    for field, value, why in [("history", [0.0, "x", 5], "ValueError"), ("state", {}, "KeyError: 'use_hour'"),
                              ("params", {"level": "loud"}, "ConfigError: knob 'level'")]:
        np.savez(tmp_path / "bad.npz", __header__=np.array(json.dumps({**header, field: value})), **arrays)
        with pytest.raises(WorkloadError, match=rf"^{re.escape(str(tmp_path / 'bad.npz'))}: damaged model file \({why}"):
            load_model(tmp_path / "bad.npz")
    with pytest.raises(WorkloadError, match=r"^damaged model file \(KeyError: 'ptr'\)"):
        get_model("stat").load({**header, "params": {}}, {})


def test_load_model_bad_files(tmp_path):
    with pytest.raises(WorkloadError, match="no such model file"):
        load_model(tmp_path / "missing.npz")
    junk = tmp_path / "junk.npz"
    junk.write_text("not a model")
    with pytest.raises(WorkloadError, match="not a workload model file"):
        load_model(junk)


# ----------------------------------------------------- stat recovers a known cycle and size mix

SIZES = np.array([1, 2, 4, 8])
MIX = np.array([0.6, 0.1, 0.1, 0.2])


def _true_batch_rate(t: np.ndarray) -> np.ndarray:
    """Batches per hour: a daily cycle peaking at 14:00 (x3 over the night), half on weekends."""
    hod = (t % DAY) / HOUR
    daily = 1.0 + 0.5 * np.cos(2 * np.pi * (hod - 14) / 24)
    weekend = np.where((t % (7 * DAY)) >= 5 * DAY, 0.5, 1.0)
    return 20.0 * daily * weekend


def _synthetic_history(days: int = 28, seed: int = 0) -> Trace:
    """Batches by thinning a Poisson process; each batch 1-5 jobs, 5 s apart, same GPUs and VC."""
    rng = np.random.default_rng(seed)
    cand = np.sort(rng.uniform(0, days * DAY, rng.poisson(30.0 * 24 * days)))
    starts = cand[rng.random(len(cand)) < _true_batch_rate(cand) / 30.0]
    size = rng.integers(1, 6, len(starts))
    gpus = rng.choice(SIZES, len(starts), p=MIX)
    vcs = rng.choice(list("abcdefgh"), len(starts))
    t = np.concatenate([s + 5.0 * np.arange(k) for s, k in zip(starts, size)])
    return trace_of(t, np.repeat(gpus, size), rng.lognormal(8, 1, len(t)), np.repeat(vcs, size))


def test_stat_recovers_daily_cycle_size_mix_and_bursts():
    """Tolerances: the history has ~11,000 batches and 8 sampled weeks ~23,000, so a 3-hour
    block of the day holds >1,000 batches on each side and its share has a Poisson error of ~3%
    (more for jobs, which come in bursts); we allow 10% relative on the daily and weekly shape
    and on the rate, 0.03 absolute on each GPU size share, and 10% on the mean burst size.
    Recency weighting is switched off (half_life large): the history is stationary."""
    hist = _synthetic_history()
    m = get_model("stat")(duration_jitter=0.0, half_life=1000.0).fit(hist)
    start = 28 * DAY
    gen = [m.sample(start, 7 * DAY, seed) for seed in range(8)]
    t = np.concatenate([g.submit_time for g in gen])
    g = np.concatenate([g.num_gpus for g in gen])
    blocks = np.floor((t % DAY) / (3 * HOUR)).astype(int)
    got = np.bincount(blocks, minlength=8) / len(t)
    grid = np.arange(0, 7 * DAY, 60.0)
    want = np.bincount(np.floor((grid % DAY) / (3 * HOUR)).astype(int), weights=_true_batch_rate(grid))
    want = want / want.sum()
    assert np.max(np.abs(got / want - 1)) < 0.10, (got, want)
    weekend = ((t % (7 * DAY)) >= 5 * DAY).mean()
    assert weekend == pytest.approx(2 * 0.5 / (5 + 2 * 0.5), rel=0.10)
    # Batches as the model defines them (same VC, gaps <= 60 s); rare chance merges of two true
    # batches happen alike in history and samples, so compare with the history's own count.
    hist_batches = _batch_ids(hist).max() + 1
    gen_batches = sum(_batch_ids(x).max() + 1 for x in gen)
    assert gen_batches / 8 == pytest.approx(_true_batch_rate(grid).mean() * 168, rel=0.10)
    share = np.array([(g == s).mean() for s in SIZES])
    assert np.max(np.abs(share - MIX)) < 0.03, share
    assert len(t) / gen_batches == pytest.approx(len(hist) / hist_batches, rel=0.10)
    assert len(hist) / hist_batches == pytest.approx(3.0, rel=0.10)
    # Jobs of one burst share their GPUs: neighbours in a batch have equal GPUs as often as in
    # the history (~95%; drawing sizes independently would give sum(MIX^2) = 42%).
    same_gen = np.mean([_same_gpus_in_batch(x) for x in gen])
    assert same_gen == pytest.approx(_same_gpus_in_batch(hist), abs=0.05)
    assert same_gen > 0.9


def _same_gpus_in_batch(tr: Trace) -> float:
    b = _batch_ids(tr)
    order = np.lexsort((tr.submit_time, b))
    pair = b[order][1:] == b[order][:-1]
    return float(np.mean(tr.num_gpus[order][1:][pair] == tr.num_gpus[order][:-1][pair]))


def _batch_ids(tr: Trace) -> np.ndarray:
    from autosched.workload.stat import bursts

    return bursts(tr.submit_time, np.searchsorted(np.unique(tr.vc), tr.vc), 60.0)


def test_stat_fitted_rate_matches_truth():
    """The GLM's weekly rate curve (168 hours) is within 15% of the truth in every 3-hour block."""
    m = get_model("stat")(trend=False).fit(_synthetic_history(seed=1))
    rate = m.hourly_rate()
    hours = np.arange(168) * HOUR + HOUR / 2
    truth = _true_batch_rate(hours)
    assert np.max(np.abs(rate.reshape(56, 3).mean(1) / truth.reshape(56, 3).mean(1) - 1)) < 0.15


# ------------------------------------------------------------------------------ history window


@pytest.mark.parametrize("name", CORE)
def test_fit_refuses_a_window_that_does_not_hold_the_history(name):
    hist = random_history(4)
    for lo, hi in ((hist.start + 1, hist.end + 1), (hist.start - 1, hist.end - 1), (math.nan, hist.end)):
        with pytest.raises(WorkloadError, match="does not hold its jobs"):
            get_model(name)().fit(hist, lo, hi)


def test_replay_of_a_full_window_does_not_tile():
    # Jobs at 1.5 d and 6.5 d of the window [0, 7 d): with the window given, the replayed week is
    # exactly those two jobs a week later. From the jobs alone the window is the 5 days
    # (1.5 d, 6.5 d], tiled: the 1.5 d job is lost and the 6.5 d one lands at 7.5 d and 12.5 d (a
    # 7-day window's first and last jobs are less than 7 days apart, so tiling that span made a
    # replayed week too heavy: about 7/6 with a job every few hours).
    hist = trace_of([1.5 * DAY, 6.5 * DAY], [1, 2], [10.0, 20.0])
    out = get_model("replay")().fit(hist, 0.0, 7 * DAY).sample(7 * DAY, 7 * DAY, seed=0)
    assert out.submit_time.tolist() == [8.5 * DAY, 13.5 * DAY] and out.num_gpus.tolist() == [1, 2]
    assert get_model("replay")().fit(hist).sample(7 * DAY, 7 * DAY, seed=0).submit_time.tolist() == [7.5 * DAY, 12.5 * DAY]


# ------------------------------------------------------------------------------------- hybrid


def _hourly_batches(per_hour_by_week: list[int]) -> Trace:
    """`k` single-job batches at minutes 10, 20, ... of every hour, `k` per week as given;
    job i of a week has GPUs 1 + i % 3 and duration 100 + i s."""
    t, g, d = [], [], []
    for w, k in enumerate(per_hour_by_week):
        for h in range(168):
            for j in range(k):
                t.append(w * 7 * DAY + h * HOUR + 600.0 * (j + 1))
                g.append(1 + len(t) % 3)
                d.append(100.0 + len(t))
    return trace_of(t, g, d)


EXACT = dict(level="count", trend=False, weekly=False, overdispersion=False, ridge=0.0, half_life=1000.0)


def test_hybrid_with_the_forecast_equal_to_last_week_is_last_week():
    # One batch every hour for two weeks: the count model (level=count) expects 168 batches next
    # week, the replayed week has 168, so the scale is 1 and the sample is exactly replay's.
    hist = _hourly_batches([1, 1])
    m = get_model("hybrid")(**EXACT).fit(hist, 0.0, 14 * DAY)
    assert m.scale(14 * DAY, 7 * DAY) == pytest.approx(1.0, abs=1e-4)
    out = m.sample(14 * DAY, 7 * DAY, seed=3)
    rep = get_model("replay")().fit(hist, 0.0, 14 * DAY).sample(14 * DAY, 7 * DAY, seed=0)
    for col in ("submit_time", "num_gpus", "duration"):
        assert getattr(out, col).tolist() == getattr(rep, col).tolist()


def test_hybrid_rescales_last_week_to_the_count_forecast():
    # level=count. Week 1: 2 batches an hour, week 2: 1. Hour-of-day means are 1.5 (weights
    # 0.5**(age/1000 d) make it 1.4988), so the forecast is 1.5 x 168 = 252 batches against the
    # replayed 168: scale 1.5 - every replayed batch once, and a second time with probability
    # 1/2, moved by whole days (same minute of the hour).
    hist = _hourly_batches([2, 1])
    m = get_model("hybrid")(**EXACT).fit(hist, 0.0, 14 * DAY)
    assert m.scale(14 * DAY, 7 * DAY) == pytest.approx(1.5, abs=0.002)
    out = m.sample(14 * DAY, 7 * DAY, seed=3)
    last = hist.window(7 * DAY, 14 * DAY)
    assert 168 < len(out) < 336 and abs(len(out) - 252) < 4 * math.sqrt(168 * 0.25)
    assert set(out.submit_time % HOUR) == {600.0}
    # every replayed job appears at least once, at its own time a week later
    assert set((last.submit_time + 7 * DAY).tolist()) <= set(out.submit_time.tolist())
    # a copy is a copy: (GPUs, duration) pairs are last week's
    assert set(zip(out.num_gpus.tolist(), out.duration.tolist())) == set(zip(last.num_gpus.tolist(), last.duration.tolist()))
    # 7 batches an hour, then 1: the forecast is 4x the replayed week, clipped to 2x
    assert get_model("hybrid")(**EXACT).fit(_hourly_batches([7, 1]), 0.0, 14 * DAY).scale(14 * DAY, 7 * DAY) == 2.0


def test_hybrid_load_level_follows_gpu_hours_not_batch_counts():
    # Week 1: 2 batches an hour of 2 GPUs x 50 s; week 2: 1 batch an hour of 3 GPUs x 100 s.
    # Counts: forecast 1.5 an hour against 1 -> 1.5. Load: 200 GPU-s an hour, then 300; the
    # mean day is 250 an hour against the replayed 300 -> 5/6 (weights 0.5**(age/1000 d) ~ 1).
    t = [w * 7 * DAY + h * HOUR + 600.0 * (j + 1) for w, k in enumerate([2, 1]) for h in range(168) for j in range(k)]
    g = [2] * 336 + [3] * 168
    d = [50.0] * 336 + [100.0] * 168
    hist = trace_of(t, g, d)
    by_count = get_model("hybrid")(**EXACT).fit(hist, 0.0, 14 * DAY)
    by_load = get_model("hybrid")(**{**EXACT, "level": "load"}).fit(hist, 0.0, 14 * DAY)
    assert by_count.scale(14 * DAY, 7 * DAY) == pytest.approx(1.5, abs=0.002)
    assert by_load.scale(14 * DAY, 7 * DAY) == pytest.approx(5 / 6, abs=0.002)
    out = by_load.sample(14 * DAY, 7 * DAY, seed=1)
    assert set(out.num_gpus.tolist()) == {3} and abs(len(out) - 140) < 4 * math.sqrt(168 / 6 * 5 / 6)


# ------------------------------------------------------------------------ sampled load vs known rate


def _poisson_jobs(rate_per_hour: float, days: float, seed: int) -> Trace:
    """Poisson arrivals; GPUs uniform on {1, 2, 4}; durations uniform on [600, 7200] s."""
    rng = np.random.default_rng(seed)
    n = rng.poisson(rate_per_hour * 24 * days)
    t = np.sort(rng.uniform(0, days * DAY, n))
    return trace_of(t, rng.choice([1, 2, 4], n), rng.uniform(600.0, 7200.0, n))


@settings(max_examples=6, deadline=None, derandomize=True)
@given(rate=st.floats(2.0, 12.0), seed=st.integers(0, 2**31 - 1))
@pytest.mark.parametrize("name", [*CORE, "hybrid:level=count"])
def test_sampled_load_matches_a_known_rate(name, rate, seed):
    """Fitted on 21 days of jobs arriving at a known rate, a model's next week carries the known
    offered load, within 4 sd of a week's total (compound Poisson: var = rate x T x E[(g d)^2]);
    `stat` and `hybrid` are averaged over 4 samples, which only narrows their own noise."""
    hist = _poisson_jobs(rate, 21, seed)
    m = parse_model_spec(name).fit(hist, 0.0, 21 * DAY)
    n = 1 if m.deterministic else 4
    got = np.mean([m.sample(21 * DAY, 7 * DAY, s).gpu_seconds() for s in range(n)])
    eg, eg2 = 7 / 3, 7.0  # E[g], E[g^2] for g uniform on {1, 2, 4}
    ed, ed2 = 3900.0, (7200.0 ** 3 - 600.0 ** 3) / (3 * 6600.0)  # uniform on [600, 7200]
    jobs = rate * 24 * 7
    truth, sd = jobs * eg * ed, math.sqrt(jobs * eg2 * ed2)
    assert abs(got - truth) < 4 * sd, (got / truth, sd / truth)
