"""The adaptive loop: observation without leakage, drift tests, guardrail, controller, replay."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.adapt import Controller, DriftTest, Guardrail, LoopConfig, ModelSource, Settings, observe, run_experiment
from autosched.adapt.drift import ks_2samp, mix_test, rate_ratio_test
from autosched.adapt.errors import AdaptError
from autosched.adapt.experiment import boundaries, check_times, make_controller, replay
from autosched.adapt.observe import RUNNING_LEAD
from autosched.cluster import ClusterSpec
from autosched.errors import SimulationError
from autosched.policies import get_policy
from autosched.policies.tiresias import Tiresias
from autosched.sim import Simulator, simulate
from autosched.trace import Trace
from test_adapt_doubles import DAY, FakeModel, FakeTuner, WorseTuner, fake_model_factory, synthetic_trace


def _trace(rows) -> Trace:
    submit, dur, gpus = zip(*rows)
    return Trace.from_columns({"job_id": [f"j{i}" for i in range(len(rows))], "submit_time": submit,
                               "num_gpus": gpus, "duration": dur})


# ------------------------------------------------------------------------------ observation

def test_observe_uses_only_what_is_known_at_now():
    # One GPU, FIFO: j0 runs 0-200, j1 200-250, j2 250-1250, j3 1250-1260; j4 arrives at 400.
    tr = _trace([(0, 200, 1), (10, 50, 1), (20, 1000, 1), (30, 10, 1), (400, 5, 1)])
    cl = ClusterSpec.uniform_nodes(1, 1)
    sim = Simulator(tr, cl, get_policy("fifo")()).run(until=300)
    obs = observe(sim, 300, 0)
    h = obs.history
    assert list(h.job_id) == ["j0", "j1", "j2", "j3"]  # j4 is in the future
    assert list(obs.finished) == [True, True, False, False]
    assert obs.end[:2].tolist() == [200, 250] and np.isnan(obs.end[2:]).all()
    assert obs.imputed == 2
    # finished: true durations; j2 has run 50 s: the only finished duration above 50 is 200;
    # j3 has not run: drawn from the finished durations {50, 200}. Never the true 1000 or 10.
    assert h.duration[:3].tolist() == [200, 50, 200]
    assert h.duration[3] in (50, 200)
    # backlog: j2 with 200 - 50 = 150 s left, j3 with its imputed duration, both submitted at now
    b = obs.backlog
    assert list(b.job_id) == ["j2", "j3"] and b.submit_time.tolist() == [300, 300]
    assert b.duration.tolist() == [150, h.duration[3]]


def test_observe_window_and_no_finished_longer_keeps_lower_bound(monkeypatch):
    import importlib

    # The old rule (no Pareto tail): a job that outran every finished one keeps its bound.
    monkeypatch.setattr(importlib.import_module("autosched.adapt.observe"), "TAIL_ALPHA", None)
    tr = _trace([(0, 10, 1), (5, 5000, 1), (100, 20, 1)])
    sim = Simulator(tr, ClusterSpec.uniform_nodes(1, 1), get_policy("fifo")()).run(until=1000)
    obs = observe(sim, 1000, 1)  # window starts at t=1: j0 is outside
    assert list(obs.history.job_id) == ["j1", "j2"]
    # j1 has run 1000 - 10 = 990 s; j0 (10 s) is the only finished job and is shorter, and not in
    # the window anyway: the lower bound stays
    assert obs.history.duration.tolist() == [990, 1.0] or obs.history.duration[0] == 990


def test_observe_imputes_from_jobs_before_the_window():
    # One GPU, FIFO: j0 runs 0-3000 (before the window), j1 3100-3150, j2 from 3200 (4000 s).
    # At 4000, j2 has run 800 s. The window's only finished job is 50 s long, so the old rule
    # (draw from the window's finished durations above 800 s, else keep 800) kept 800; the
    # estimate over every known job (50 s, 3000 s finished; j2 censored at 800) puts all the mass
    # above 800 on 3000.
    tr = _trace([(0, 3000, 1), (3100, 50, 1), (3200, 4000, 1)])
    sim = Simulator(tr, ClusterSpec.uniform_nodes(1, 1), get_policy("fifo")()).run(until=4000)
    obs = observe(sim, 4000, 3050)
    assert list(obs.history.job_id) == ["j1", "j2"] and obs.history.duration.tolist() == [50, 3000]
    assert obs.backlog.duration.tolist() == [2200]


def test_a_job_running_since_before_the_window_keeps_its_imputed_remaining_work():
    # Two GPUs, FIFO: j0 runs 0-3500; j1 runs from 1000 (9000 s long); j2 runs 3700-3710. At 4000
    # the window starts at 3600, so j1 (submitted at 1000) is running but outside it. It has run
    # 3000 s; the only finished job longer than that is j0 (3500 s), so its total is 3500 and
    # 500 s are left: the backlog must carry them, not the 1 s of "total = what it has run".
    tr = _trace([(0, 3500, 1), (1000, 9000, 1), (3700, 10, 1)])
    sim = Simulator(tr, ClusterSpec.uniform_nodes(1, 2), get_policy("fifo")()).run(until=4000)
    obs = observe(sim, 4000, 3600)
    assert list(obs.history.job_id) == ["j2"]
    assert list(obs.backlog.job_id) == ["j1"] and obs.backlog.duration.tolist() == [500]


def test_live_backlog_of_a_job_submitted_before_the_window():
    # The live agent's history, the same case: j1 was submitted before the window and still runs.
    from autosched.live.history import LiveJobs, observation
    from autosched.trace.report import LoadReport
    obj = lambda *v: np.array(v, dtype=object)  # noqa: E731
    jobs = LiveJobs(job_id=obj("0", "1", "2"), submit=np.array([0.0, 1000.0, 3700.0]),
                    start=np.array([0.0, 1000.0, 3700.0]), end=np.array([3500.0, np.nan, 3710.0]),
                    gpus=np.array([1, 1, 1]), user=obj("u", "u", "u"), account=obj("a", "a", "a"),
                    partition=obj("p", "p", "p"), time_limit=np.full(3, np.nan), cpus=np.zeros(3),
                    finished=np.array([True, False, True]), duration=np.array([3500.0, 0.0, 10.0]),
                    report=LoadReport(source="test"))
    obs, origin = observation(jobs, now=4000.0, window=400.0)
    assert origin == 0.0 and list(obs.history.job_id) == ["2"]
    assert list(obs.backlog.job_id) == ["1"] and obs.backlog.duration.tolist() == [500]


def test_kaplan_meier_and_imputation_by_hand(monkeypatch):
    import importlib

    from autosched.adapt.observe import impute, kaplan_meier

    # The old rule (no Pareto tail): the mass beyond the longest finished job sits on it.
    monkeypatch.setattr(importlib.import_module("autosched.adapt.observe"), "TAIL_ALPHA", None)

    # 10 / 20 / 30 finished, 20 and 40 still running: at risk 5, 4, (3), 2, (1); S = 0.8, 0.6, 0.3.
    d = np.array([10.0, 20.0, 20.0, 30.0, 40.0])
    f = np.array([True, True, False, True, False])
    times, cdf = kaplan_meier(d, f)
    assert times.tolist() == [10, 20, 30] and cdf == pytest.approx([0.2, 0.4, 0.7])
    # with weights 2 on the first job: at risk 6, 4, 2 -> S = 4/6, 4/6 * 3/4, 1/2 of that
    assert kaplan_meier(d, f, np.array([2.0, 1, 1, 1, 1]))[1] == pytest.approx([1 / 3, 0.5, 0.75])
    # Imputing those five jobs with n more still running at 0: censored before the first event,
    # the n jobs leave the risk sets before 10, so the estimate stays 0.2 / 0.4 / 0.7.
    # Bound 20 (tied with an event, which it rules out): mass above is 0.3 at 30 and the 0.3 tail
    # (imputed as the longest finished, 30); bound 40: only the tail, above the longest finished:
    # the bound stays; bound 0: 10, 20 with 0.2 each and 30 (with the tail) 0.6.
    rng = np.random.default_rng(0)
    n = 4000
    dn, fn = np.r_[d, np.zeros(n)], np.r_[f, np.zeros(n, dtype=bool)]
    assert np.array_equal(kaplan_meier(dn, fn)[1], cdf)
    out = impute(dn, fn, rng)
    assert out[:5].tolist() == [10, 20, 30, 30, 40] and set(out[5:].tolist()) == {10, 20, 30}
    share30 = np.mean(out[5:] == 30)
    assert abs(share30 - 0.6) < 4 * math.sqrt(0.6 * 0.4 / n)


def test_a_job_longer_than_every_finished_one_gets_a_pareto_tail(monkeypatch):
    import importlib

    observe_mod = importlib.import_module("autosched.adapt.observe")
    from autosched.adapt.observe import TAIL_CAP, impute

    assert observe_mod.TAIL_ALPHA == 2.0
    # Finished 10, 20, 30 and a job running for 500 s: no finished job is that long. Its total is
    # 500 / U**(1/2) with U = 1 - the rng's first draw; default_rng(0).random() = 0.63696...,
    # so 500 / sqrt(0.36304) = 829.84 s (the old rule: 500, i.e. no work left).
    d = np.array([10.0, 20.0, 30.0, 500.0])
    f = np.array([True, True, True, False])
    out = impute(d, f, np.random.default_rng(0))
    assert out[:3].tolist() == [10, 20, 30] and out[3] == pytest.approx(829.84, abs=0.01)
    assert np.array_equal(impute(d, f, np.random.default_rng(0)), out)  # reproducible
    # Capped at the bound + 30 days: a job 1e7 s in would draw 1.66e7 s.
    big = impute(np.r_[d[:3], 1e7], f, np.random.default_rng(0))
    assert big[3] == 1e7 + TAIL_CAP == 1e7 + 30 * 86400
    monkeypatch.setattr(observe_mod, "TAIL_ALPHA", None)  # one switch back to the old rule
    assert impute(d, f, np.random.default_rng(0))[3] == 500


def test_the_tail_takes_the_estimates_mass_beyond_the_longest_finished_job():
    from autosched.adapt.observe import impute

    # 10, 20, 30 finished, 20 and 40 censored: the estimate is 0.2 / 0.4 / 0.7 with 0.3 beyond
    # 30. n jobs that have not run: 10 and 20 with 0.2 each, 30 with 0.3, and 0.3 in the tail,
    # 30 / U**(1/2): above 30 * sqrt(2) with probability 0.3 / 2 = 0.15. The draws of the jobs
    # that land below the tail are the old rule's (the same rng order).
    n = 4000
    d = np.r_[10.0, 20.0, 20.0, 30.0, 40.0, np.zeros(n)]
    f = np.r_[True, True, False, True, False, np.zeros(n, dtype=bool)]
    out = impute(d, f, np.random.default_rng(0))[5:]
    assert set(out[out <= 30].tolist()) == {10, 20, 30}
    for value, p in ((10, 0.2), (20, 0.2), (30, 0.3)):
        assert abs(np.mean(out == value) - p) < 4 * math.sqrt(p * (1 - p) / n)
    assert abs(np.mean(out > 30) - 0.3) < 4 * math.sqrt(0.3 * 0.7 / n)
    assert abs(np.mean(out > 30 * math.sqrt(2)) - 0.15) < 4 * math.sqrt(0.15 * 0.85 / n)


def test_observe_refuses_a_simulator_past_now():
    tr = _trace([(0, 10, 1), (50, 10, 1)])
    sim = Simulator(tr, ClusterSpec.uniform_nodes(1, 1), get_policy("fifo")()).run(until=60)
    with pytest.raises(SimulationError, match="past the observation time"):
        observe(sim, 30, 0)


# ------------------------------------------------------------------------------ drift tests

def test_rate_ratio_test_by_hand():
    ratio, p = rate_ratio_test(100, DAY, 700, 7 * DAY)
    assert ratio == pytest.approx(1.0) and p == pytest.approx(1.0)
    ratio, p = rate_ratio_test(200, DAY, 700, 7 * DAY)
    z = math.log(2) / math.sqrt(1 / 200 + 1 / 700)
    assert ratio == pytest.approx(2.0) and p == pytest.approx(math.erfc(z / math.sqrt(2)))


def test_ks_and_chi_square_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    a, b = rng.normal(0, 1, 400), rng.normal(0.2, 1, 300)
    d, p = ks_2samp(a, b)
    ref = stats.ks_2samp(a, b, method="asymp")
    assert d == pytest.approx(ref.statistic)
    assert p == pytest.approx(ref.pvalue, rel=0.15)
    tv, p = mix_test(np.array([50, 30, 15, 5]), np.array([70, 20, 5, 5]))
    chi2, pref, *_ = stats.chi2_contingency(np.array([[50, 30, 15, 5], [70, 20, 5, 5]]), correction=False)
    assert tv == pytest.approx(0.5 * (0.2 + 0.1 + 0.1 + 0.0))
    assert math.log10(p) == pytest.approx(math.log10(pref), abs=0.3)


def test_drift_needs_significance_and_size():
    from autosched.adapt.drift import Profile

    ref = Profile(0, 7 * DAY, 7000, np.random.default_rng(0).normal(7, 1, 5000), np.array([6000, 600, 300, 100]))
    same = Profile(7 * DAY, 8 * DAY, 1000, np.random.default_rng(1).normal(7, 1, 800), np.array([860, 85, 40, 15]))
    busy = Profile(7 * DAY, 8 * DAY, 2500, np.random.default_rng(2).normal(7, 1, 800), np.array([2150, 210, 100, 40]))
    longer = Profile(7 * DAY, 8 * DAY, 1000, np.random.default_rng(3).normal(8, 1, 800), np.array([860, 85, 40, 15]))
    test = DriftTest()
    assert not test.compare(same, ref).drifted
    r = test.compare(busy, ref)
    assert r.drifted and "arrival rate x2.50" in r.reason and "KS" not in r.reason
    r = test.compare(longer, ref)
    assert r.drifted and "log-duration KS" in r.reason and "arrival" not in r.reason


# ------------------------------------------------------------------------------ guardrail

def test_guardrail_by_hand():
    g = Guardrail(k=2.0, margin=0.01)
    v = g.judge([100, 100, 100], [90, 92, 88])  # gains .10 .08 .12: mean .10, s.e. .02/sqrt(3)
    assert v.deploy and v.gain == pytest.approx(0.10) and v.spread == pytest.approx(0.02 / math.sqrt(3))
    v = g.judge([100, 100, 100], [90, 110, 95])  # mean gain .0167, s.e. .0601: within noise
    assert not v.deploy and "within noise" in v.reason
    v = g.judge([100, 100], [101, 102])
    assert not v.deploy and v.gain == pytest.approx(-0.015) and "predicted worse" in v.reason
    v = g.judge([100], [99.5])
    assert not v.deploy and "below the margin" in v.reason
    v = Guardrail(margin=0.0).judge([0.5, 0.5], [0.6, 0.62], minimize=False)  # utilisation: more is better
    assert v.deploy and v.gain == pytest.approx(0.22)


def test_guardrail_refuses_unpaired_values():
    with pytest.raises(AdaptError, match="same, non-zero number"):
        Guardrail().judge([100, 100], [90])
    with pytest.raises(AdaptError, match="same, non-zero number"):
        Guardrail().judge([], [])


def test_guardrail_max_loss_by_hand():
    """Scenarios: better on average is not enough if one scenario is clearly worse."""
    g = Guardrail(k=0.0, margin=0.01, max_loss=0.02)
    v = g.judge([100, 100, 100], [90, 90, 103])  # gains .10 .10 -.03: mean .0567, worst -.03
    assert not v.deploy and v.gain == pytest.approx(0.17 / 3) and "-3.00% on one workload" in v.reason
    v = g.judge([100, 100, 100], [90, 90, 101.5])  # worst -.015: within the allowed loss
    assert v.deploy and "worst workload -1.50%" in v.reason
    assert Guardrail(k=0.0, margin=0.01).judge([100, 100, 100], [90, 90, 103]).deploy  # no floor
    with pytest.raises(AdaptError, match="max loss must be finite and >= 0"):
        Guardrail(max_loss=-0.01)


def _controller(tuner_cls, cluster, validation_samples=None, execution=None, **kw):
    source = ModelSource("fake", samples=3, factory=fake_model_factory, validation_samples=validation_samples)
    return Controller(LoopConfig(policy="tiresias", period=2 * DAY, budget=3, **kw), cluster, source,
                      tuner_factory=tuner_cls, execution=execution)


def test_controller_settings_are_typed_and_checked_once(tmp_path):
    from autosched.tune import ExecutionConfig, SearchConfig, TuneError

    cl = ClusterSpec.uniform_nodes(1, 4)
    ctrl = _controller(FakeTuner, cl, screening=True, seed=4)
    assert ctrl.search == SearchConfig(budget=3, seed=4, screening=True)  # a round replaces the seed
    assert ctrl.guardrail == Guardrail(1.0, 0.01) and ctrl.drift is None and ctrl.objective.metric == "avg_jct"
    with pytest.raises(AdaptError, match="budget 0: must be at least 1"):
        Controller(LoopConfig(budget=0), cl, ModelSource("fake", samples=1, factory=fake_model_factory))
    with pytest.raises(AdaptError, match="is not a LoopConfig"):
        Controller({"budget": 3}, cl, ModelSource("fake", samples=1, factory=fake_model_factory))
    with pytest.raises(TuneError, match="holds one problem"):
        _controller(FakeTuner, cl, execution=ExecutionConfig(study=tmp_path / "s.db"))


def test_controller_refuses_a_config_predicted_worse():
    tr = synthetic_trace(days=4, per_day=150)
    cl = ClusterSpec.uniform_nodes(2, 4)
    sim = Simulator(tr, cl, Tiresias()).run(until=2 * DAY)
    # the portfolio (running config and the search's best: tiresias has no archetypes) drops
    # the search's best at the screen: worse on the first 4 fresh samples, it cannot reach the margin
    ctrl = _controller(WorseTuner, cl)
    d = ctrl.decide(observe(sim, 2 * DAY, 0))
    assert not d.deployed and d.reason == "no candidate but the running config is left"
    assert [(r["name"], r["samples"], r["dropped"]) for r in d.portfolio] == [
        ("search's best", 4, "cannot reach the margin on the first 4 samples")]
    assert d.portfolio[0]["gain"] < 0 and ctrl.running == Tiresias.space.default()
    # without the portfolio, the guardrail judges the search's best on the 3 fresh samples
    ctrl = _controller(WorseTuner, cl, portfolio=False)
    d = ctrl.decide(observe(sim, 2 * DAY, 0))
    assert not d.deployed and d.predicted_gain < 0 and "predicted worse" in d.reason
    assert ctrl.running == Tiresias.space.default() and d.config == ctrl.running
    assert d.knobs_changed == {"queues": (3, 1), "interval": (0.0, 3600.0)}
    assert d.samples == 3 and d.running_value < d.candidate_value


def test_controller_workloads_start_with_the_backlog_and_warm_start_grows():
    tr = synthetic_trace(days=4, per_day=200)
    cl = ClusterSpec.uniform_nodes(1, 4)
    sim = Simulator(tr, cl, Tiresias()).run(until=2 * DAY)
    obs = observe(sim, 2 * DAY, 0)
    assert len(obs.backlog) > 0
    FakeTuner.instances.clear()
    ctrl = _controller(FakeTuner, cl)
    ctrl.decide(obs)
    (workloads,) = FakeTuner.instances[-1].seen
    for w in workloads:  # the backlog: queued at the round, running ones just before it
        assert (w.submit_time >= 2 * DAY - RUNNING_LEAD).all()
        assert np.isin(w.submit_time, [2 * DAY - RUNNING_LEAD, 2 * DAY]).sum() >= len(obs.backlog)
    assert len(ctrl._warm_start()) >= 1


class _RecordingTuner(WorseTuner):
    """WorseTuner (always proposes a change) that also records the workloads configs are scored on
    outside tuning."""

    evaluated: list[list[Trace]] = []

    def evaluate(self, policy, config, workloads):
        if not getattr(self, "_tuning", False):
            _RecordingTuner.evaluated.append(list(workloads))
        return super().evaluate(policy, config, workloads)

    def tune(self, workloads, warm_start=None, progress=None, prior=None, check=None):
        self._tuning = True
        try:
            return super().tune(workloads, warm_start, progress, prior)
        finally:
            self._tuning = False


@pytest.mark.parametrize("validation_samples", [None, 7])
def test_guardrail_judges_on_fresh_samples_the_tuner_never_saw(validation_samples):
    tr = synthetic_trace(days=4, per_day=150, seed=3)
    cl = ClusterSpec.uniform_nodes(1, 4)
    sim = Simulator(tr, cl, Tiresias()).run(until=2 * DAY)
    obs = observe(sim, 2 * DAY, 0)
    FakeTuner.instances.clear()
    _RecordingTuner.evaluated.clear()
    # the search's best alone (no portfolio): the guardrail scores through the tuner
    ctrl = _controller(_RecordingTuner, cl, seed=2, validation_samples=validation_samples, portfolio=False)
    for _ in range(3):  # several rounds: no round's validation seed is any round's tuning seed
        ctrl.decide(obs)
    judged = [d for d in ctrl.decisions if d.validation == "fresh"]
    assert judged, [d.reason for d in ctrl.decisions]
    tuned_sources = {w.source for t in FakeTuner.instances for ws in t.seen for w in ws}
    judged_sources = {w.source for ws in _RecordingTuner.evaluated for w in ws}
    assert judged_sources and not (tuned_sources & judged_sources)
    # the sources name the sample seeds (FakeModel: "fake-<seed>"): the ones the decision reports
    assert judged_sources == {f"fake-{s}" for d in judged for s in d.validation_seeds}
    assert all(len(d.validation_seeds) == (validation_samples or 3) for d in judged)
    tuned_seeds = {int(s.split("-")[1]) for s in tuned_sources}
    assert len(tuned_seeds) == 3 * 3 and not tuned_seeds & {s for d in judged for s in d.validation_seeds}
    # the values the guardrail weighed are the configs' real metrics on those fresh workloads
    d = judged[0]
    fresh = _RecordingTuner.evaluated[0]
    run_vals = [simulate(w, cl, Tiresias(Tiresias.space.default())).metrics.avg_jct for w in fresh]
    assert d.running_value == pytest.approx(sum(run_vals) / len(run_vals))


def test_the_portfolio_is_raced_on_fresh_samples_the_tuner_never_saw():
    tr = synthetic_trace(days=4, per_day=150, seed=3)
    cl = ClusterSpec.uniform_nodes(1, 4)
    sim = Simulator(tr, cl, Tiresias()).run(until=2 * DAY)
    obs = observe(sim, 2 * DAY, 0)
    FakeTuner.instances.clear()
    ctrl = _controller(FakeTuner, cl, seed=2, validation_samples=4, max_validation_samples=8)
    for _ in range(3):
        ctrl.decide(obs)
    tuned = {int(w.source.split("-")[1]) for t in FakeTuner.instances for ws in t.seen for w in ws}
    raced = [s for d in ctrl.decisions for s in d.validation_seeds]
    assert len(tuned) == 3 * 3 and raced and not tuned & set(raced)
    # every round races at least the screen's 4 samples, at most the budget's 8
    assert all(d.validation == "fresh" and 4 <= len(d.validation_seeds) <= 8 for d in ctrl.decisions)


def test_a_deterministic_source_is_judged_on_its_tuning_workloads():
    from autosched.adapt.sources import ReplaySource

    tr = synthetic_trace(days=4, per_day=150, seed=3)
    cl = ClusterSpec.uniform_nodes(1, 4)
    sim = Simulator(tr, cl, Tiresias()).run(until=2 * DAY)
    ctrl = Controller(LoopConfig(period=2 * DAY, budget=3), cl, ReplaySource(), tuner_factory=WorseTuner)
    d = ctrl.decide(observe(sim, 2 * DAY, 0))
    assert d.validation == "tuning" and d.validation_seeds == []


# ------------------------------------------------------------------------------ no leakage

def _recording_factory(name: str):
    """The real workload model `name`, recording each history it is fitted on (as FakeModel does)."""
    from autosched.workload import get_model

    class Recording(get_model(name)):  # type: ignore[misc, valid-type]
        def fit(self, history, start=None, end=None):
            FakeModel.fitted_on.append(history)
            return super().fit(history, start, end)

    return Recording


@pytest.mark.parametrize("tuner", [FakeTuner, WorseTuner])  # WorseTuner: every round reaches the guardrail
@pytest.mark.parametrize("source", ["fake", "hybrid+replay", "stat+replay", "stat+first"])
def test_controller_never_reads_the_future(tuner, source):
    """Poison everything after T (the jobs submitted later, and the true durations of jobs still
    unfinished at T): every decision up to T must be the same. Also with real models, the
    source that mixes the replayed last period into the model samples, and a first round inside
    period 0 ("first": on the 12 hours seen so far)."""
    tr = synthetic_trace(days=6, per_day=120, seed=5)
    cl = ClusterSpec.uniform_nodes(1, 8)
    model, _, extra = source.partition("+")
    mix, first = extra == "replay", 0.25 if extra == "first" else None
    s = Settings(policy="tiresias", period=2 * DAY, history=2 * DAY, budget=2, samples=2, drift=True,
                 model="stat" if model == "fake" else model, with_replay=mix, first_decision=first)
    factory = fake_model_factory if model == "fake" else _recording_factory
    T = tr.start + 4 * DAY
    rec, dec_a, fit_a = _run_autosched(tr, cl, s, tuner, factory)
    _, dec_b, fit_b = _run_autosched(_poison_after(tr, rec, T), cl, s, tuner, factory)

    def key(d):
        return (d.time, d.trigger, d.deployed, d.config, d.candidate, d.predicted_gain, d.reason)

    if tuner is WorseTuner:  # the guardrail's fresh samples are covered too
        assert all(d.validation == "fresh" and d.validation_seeds for d in dec_a)
    if mix:  # the replayed period is one workload more than the samples
        assert all(d.samples == s.samples + 1 for d in dec_a if d.samples)
    if first is not None:
        assert dec_a[0].time == tr.start + DAY / 2 and dec_a[0].trigger == "first round"
    early_a = [key(d) for d in dec_a if d.time <= T]
    early_b = [key(d) for d in dec_b if d.time <= T]
    assert len(early_a) >= 2 and early_a == early_b
    _same_histories_up_to(T, fit_a, fit_b, dec_a)


def _run_autosched(trace: Trace, cl: ClusterSpec, s: Settings, tuner, model_factory):
    """Replay `trace` with autosched: the job records, its decisions, the histories it fitted on."""
    FakeModel.fitted_on.clear()
    ctrl = make_controller("autosched", trace, cl, s, tuner, model_factory)
    rec, _, decisions = replay(trace, cl, s, boundaries(trace, s.period), controller=ctrl)
    return rec, decisions, list(FakeModel.fitted_on)


def _poison_after(tr: Trace, rec, T: float) -> Trace:
    """The trace with everything a controller must not know at T changed: the jobs submitted later
    (sizes and times), and the true durations of jobs still unfinished at T."""
    unfinished = rec.end > T
    assert unfinished.any() and (tr.submit_time > T).any()
    future = tr.submit_time > T
    rng = np.random.default_rng(9)
    return tr.replace(
        duration=np.where(unfinished, tr.duration * 50, tr.duration),  # later: no finish moves before T
        num_gpus=np.where(future, rng.choice([1, 8], len(tr)), tr.num_gpus),
        submit_time=np.where(future, T + 1 + (tr.submit_time - T) * rng.uniform(0.2, 1, len(tr)), tr.submit_time),
    )


def _same_histories_up_to(T, fit_a, fit_b, dec_a) -> None:
    for h_a, h_b in zip(fit_a, fit_b):
        if h_a.end <= T:
            for col, arr in h_a.columns().items():
                np.testing.assert_array_equal(arr, h_b.columns()[col])
    for h in fit_a:  # no fitted history holds a job submitted after its round
        assert h.end <= max(d.time for d in dec_a)


def test_the_default_loop_never_reads_the_future():
    """The same poisoning with the real components and the defaults (`Settings()`: its budget,
    samples, search and guardrail; the real tuner and `stat` model), on a small trace."""
    from autosched.adapt.controller import default_tuner_factory

    tr = synthetic_trace(days=6, per_day=200, seed=3)
    cl = ClusterSpec.uniform_nodes(1, 8)  # busy: most rounds' winner reaches the guardrail
    # the first round a quarter into period 0, so that an early round fits before the boundary
    s = Settings(period=2 * DAY, history=2 * DAY, first_decision=0.25)
    T = tr.start + 4 * DAY
    rec, dec_a, fit_a = _run_autosched(tr, cl, s, default_tuner_factory, _recording_factory)
    _, dec_b, fit_b = _run_autosched(_poison_after(tr, rec, T), cl, s, default_tuner_factory, _recording_factory)
    # the rounds: a quarter into period 0 (on what was seen so far), an early round a day later,
    # then at each boundary
    assert [(d.time - tr.start, d.trigger) for d in dec_a] == \
        [(DAY / 2, "first round"), (1.5 * DAY, "early round"), (2 * DAY, "period"), (4 * DAY, "period")]
    # every round's winner is validated on fresh samples
    assert [d.validation for d in dec_a] == ["fresh", "fresh", "fresh", "fresh"], \
        [(d.validation, d.reason) for d in dec_a]
    keys = ("time", "deployed", "config", "candidate", "predicted_gain", "reason", "validation_seeds")
    early_a = [[getattr(d, k) for k in keys] for d in dec_a if d.time <= T]
    early_b = [[getattr(d, k) for k in keys] for d in dec_b if d.time <= T]
    assert len(early_a) == 4 and early_a == early_b
    _same_histories_up_to(T, fit_a, fit_b, dec_a)


# ------------------------------------------------------------------------------ switching mid-run

class _Counting(Tiresias):
    finishes: list[int] = []

    def on_finish(self, j, now):
        _Counting.finishes.append(j)
        super().on_finish(j, now)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), switch=st.floats(0.05, 0.95), n=st.integers(5, 60))
def test_config_switch_mid_run_keeps_every_job_accounted_for(seed, switch, n):
    rng = np.random.default_rng(seed)
    tr = _trace([(float(t), float(d), int(g)) for t, d, g in
                 zip(np.sort(rng.uniform(0, 20_000, n)).round(), rng.lognormal(7, 1.5, n).round() + 1,
                     rng.choice([1, 2, 4, 8], n))])
    cl = ClusterSpec.uniform_nodes(2, 4, restart_overhead=(30.0, 70.0), overhead_cutoff=2)
    space = Tiresias.space
    a, b = space.sample(random.Random(seed)), space.sample(random.Random(seed + 1))
    a["placement"] = b["placement"] = "count"  # node placement may differ; accounting must not
    _Counting.finishes = []
    sim = Simulator(tr, cl, _Counting(a))
    sim.run(until=float(tr.start + switch * (tr.end - tr.start)))
    sim.reconfigure(b)
    sim.run()
    rec = sim.records()
    assert sorted(_Counting.finishes) == list(range(n))  # each job finishes exactly once
    assert np.isfinite(rec.end).all() and (rec.end >= rec.submit + rec.duration - 1e-6).all()
    overhead = np.where(rec.gpus <= 2, 30.0, 70.0) * rec.preemptions
    np.testing.assert_allclose(rec.run_time, rec.duration + overhead, rtol=1e-9, atol=1e-6)


# ------------------------------------------------------------------------------ the experiment

def test_experiment_end_to_end_with_doubles():
    tr = synthetic_trace(days=6, per_day=120, seed=2)
    cl = ClusterSpec.uniform_nodes(1, 8)
    # the first round a quarter into period 0, so that an early round fits before the boundary
    s = Settings(policy="tiresias", period=2 * DAY, history=2 * DAY, budget=2, samples=2, first_decision=0.25)
    res = run_experiment(tr, cl, s, tuner_factory=FakeTuner, model_factory=fake_model_factory)
    assert list(res.strategies) == ["default", "autosched", "last_period", "oracle_static", "oracle_period"]
    assert res.boundaries == [tr.start + i * 2 * DAY for i in range(4)]
    plain = simulate(tr, cl, Tiresias()).metrics
    assert res.strategies["default"].metrics == plain  # one replay with no switch is plain simulation
    for name, sr in res.strategies.items():
        assert sr.oracle == name.startswith("oracle")
        assert sum(p.metrics.jobs for p in sr.periods) == len(tr) == sr.metrics.jobs
        deployed = [(d.time, d.config) for d in sr.decisions if d.deployed]
        assert sr.timeline[1:] == deployed
    # rounds: a quarter into period 0, an early round a day later, then at each inner boundary
    first = tr.start + DAY / 2
    rounds = [first, first + DAY] + res.boundaries[1:-1]
    auto = res.strategies["autosched"]
    assert [d.time for d in auto.decisions if d.trigger in ("period", "first round", "early round")] == rounds
    assert [d.trigger for d in auto.decisions[:3]] == ["first round", "early round", "period"]
    assert [d.time for d in res.strategies["oracle_period"].decisions] == [first, *rounds[2:]]  # no early round
    out = res.to_dict()
    for name in ("default", "autosched", "last_period", "oracle_static", "oracle_period"):
        assert {"avg_jct", "p99_jct", "avg_queue", "periods"} <= set(out["strategies"][name])
    assert set(out["summary"]["relative_avg_jct"]) == set(res.strategies)
    assert out["summary"]["relative_avg_jct"]["default"] == 1.0


def test_oracles_search_ten_times_longer_and_are_cached_on_disk(tmp_path):
    tr = synthetic_trace(days=6, per_day=120, seed=2)
    cl = ClusterSpec.uniform_nodes(1, 8)
    s = Settings(policy="tiresias", period=2 * DAY, history=2 * DAY, budget=2, samples=2, first_decision=0.25)
    assert s.oracle_budget == 20
    names = ["default", "last_period", "oracle_static", "oracle_period"]
    FakeTuner.instances.clear()
    first = run_experiment(tr, cl, s, names, tuner_factory=FakeTuner, cache=tmp_path / "c")
    budgets = sorted(t.budget for t in FakeTuner.instances if t.seen)
    # last_period: 4 rounds of 2 trials (two inside period 0: the first and an early round);
    # oracle_static: one search of 20; oracle_period: 3 rounds of 20 (an oracle has no early rounds)
    assert budgets == [2, 2, 2, 2, 20, 20, 20, 20]
    assert len(list((tmp_path / "c").glob("*.json"))) == 4  # the four oracle searches
    FakeTuner.instances.clear()
    again = run_experiment(tr, cl, s, names, tuner_factory=FakeTuner, cache=tmp_path / "c")
    assert sorted(t.budget for t in FakeTuner.instances if t.seen) == [2, 2, 2, 2]  # the oracles came from disk
    for name in names:
        assert again.strategies[name].metrics == first.strategies[name].metrics
        assert again.strategies[name].timeline == first.strategies[name].timeline
    # the oracles do not depend on the run's seed: another seed reads the same searches
    FakeTuner.instances.clear()
    other = run_experiment(tr, cl, replace(s, seed=1), names, tuner_factory=FakeTuner, cache=tmp_path / "c")
    assert sorted(t.budget for t in FakeTuner.instances if t.seen) == [2, 2, 2, 2]
    for name in ("oracle_static", "oracle_period"):
        assert other.strategies[name].metrics == first.strategies[name].metrics
    summ = first.summary()
    gain = first.strategies["default"].metrics.avg_jct - first.strategies["oracle_static"].metrics.avg_jct
    if gain > 0:
        assert summ["share_of_oracle_static_gain"]["oracle_static"] == pytest.approx(1.0)
        assert summ["share_of_oracle_static_gain"]["default"] == 0.0


@pytest.mark.parametrize("best", [5, "x", {"nosuch": 1}, {"placement": "nowhere"}, [1, 2]])
def test_a_cache_entry_that_is_not_an_outcome_is_searched_again(tmp_path, best):
    """An entry edited or damaged to hold a config of the wrong type or one the policy refuses is
    not used (it ended `run` with a TypeError, or an error naming no file): the search runs again
    and its outcome replaces the entry."""
    tr = synthetic_trace(days=4, per_day=60, seed=2)
    cl = ClusterSpec.uniform_nodes(1, 8)
    s = Settings(policy="tiresias", period=2 * DAY, history=2 * DAY, budget=2, samples=2,
                 first_decision=0.25)
    names = ["default", "oracle_static"]
    first = run_experiment(tr, cl, s, names, tuner_factory=FakeTuner, cache=tmp_path / "c")
    (entry,) = (tmp_path / "c").glob("*.json")
    good = json.loads(entry.read_text())
    entry.write_text(json.dumps({**good, "best_config": best}))
    FakeTuner.instances.clear()
    again = run_experiment(tr, cl, s, names, tuner_factory=FakeTuner, cache=tmp_path / "c")
    assert sorted(t.budget for t in FakeTuner.instances if t.seen) == [20]  # searched again
    assert again.strategies["oracle_static"].metrics == first.strategies["oracle_static"].metrics
    assert json.loads(entry.read_text()) == good


def test_share_of_oracle_gain_after_period_0_by_hand():
    """Period 0 runs the default for all but oracle_static; the second share leaves its jobs out."""
    from types import SimpleNamespace

    from autosched.adapt.experiment import ExperimentResult, PeriodResult, StrategyResult

    def strategy(name, per_period):  # (jobs, avg JCT) per period
        periods = [PeriodResult(i, 0.0, 1.0, SimpleNamespace(jobs=n, avg_jct=a)) for i, (n, a) in enumerate(per_period)]
        total = sum(n * a for n, a in per_period) / sum(n for n, _ in per_period)
        return StrategyResult(name, False, "", SimpleNamespace(avg_jct=total), periods, [], [], 0.0)

    res = ExperimentResult(Settings(), "c", "t", 40, [], {
        "default": strategy("default", [(10, 100), (10, 100), (20, 100)]),
        "oracle_static": strategy("oracle_static", [(10, 50), (10, 60), (20, 60)]),  # 57.5; after P0 60
        "autosched": strategy("autosched", [(10, 100), (10, 80), (20, 70)]),  # 80; after P0 220/3
    }, {})
    summ = res.summary()
    assert summ["share_of_oracle_static_gain"]["autosched"] == pytest.approx(20 / 42.5)
    assert summ["share_of_oracle_static_gain_after_p0"]["autosched"] == pytest.approx((100 - 220 / 3) / 40)
    assert summ["share_of_oracle_static_gain_after_p0"]["oracle_static"] == pytest.approx(1.0)


def test_across_seeds_by_hand():
    from autosched.adapt.experiment import summaries_across_seeds

    def across(*runs):  # (seed, autosched's and last_period's relative avg JCT) per run
        return summaries_across_seeds([r[0] for r in runs], [
            {"relative_avg_jct": {"default": 1.0, "autosched": r[1], "last_period": r[2]},
             "share_of_oracle_static_gain": {}} for r in runs], ["default", "autosched", "last_period"])

    out = across((0, 0.90, 0.95), (1, 0.94, 0.95), (2, 0.92, 0.98))
    assert out["seeds"] == [0, 1, 2]
    assert out["share_of_oracle_static_gain_after_p0"] == {}  # present, empty: no oracle in these runs
    assert out["relative_avg_jct"]["autosched"]["mean"] == pytest.approx(0.92)
    assert out["relative_avg_jct"]["autosched"]["sd"] == pytest.approx(0.02)  # sample sd of .90 .94 .92
    lead = out["autosched_lead_over_last_period"]  # leads .05 .01 .06: mean .04, sd .0265
    assert lead["mean"] == pytest.approx(0.04) and lead["sd"] == pytest.approx(math.sqrt(0.0007))
    assert lead["larger_than_spread"] is True
    out = across((0, 0.90, 0.95), (1, 0.99, 0.95))  # leads .05, -.04: mean .005, sd .064
    assert out["autosched_lead_over_last_period"]["larger_than_spread"] is False


def test_check_times():
    s = Settings(period=2 * DAY, history=2 * DAY, first_decision=None)
    bounds = [0.0, 2 * DAY, 4 * DAY, 6 * DAY]
    P, F, E, D = "period", "first round", "early round", "check"
    assert check_times(bounds, s, checks=False) == [(2 * DAY, P), (4 * DAY, P)]
    assert check_times(bounds, s, checks=True) == [(2 * DAY, P), (3 * DAY, D), (4 * DAY, P), (5 * DAY, D)]
    early = replace(s, first_decision=0.25)  # a quarter into period 0, then a day later (early rounds)
    assert check_times(bounds, early, checks=False) == [(DAY / 2, F), (1.5 * DAY, E), (2 * DAY, P), (4 * DAY, P)]
    assert check_times(bounds, replace(early, early_rounds=False), checks=False) == \
        [(DAY / 2, F), (2 * DAY, P), (4 * DAY, P)]
    assert check_times(bounds[:2], early, checks=False) == []  # one period: nothing to re-tune
    # an early round never falls on the boundary itself (the boundary's own round is there), nor
    # less than half a check interval before it
    assert check_times(bounds, replace(s, first_decision=0.5), checks=False) == [(DAY, F), (2 * DAY, P), (4 * DAY, P)]
    week = [0.0, 7 * DAY, 14 * DAY]
    late = Settings(first_decision=(3 * DAY - 30) / (7 * DAY))
    assert check_times(week, late, checks=False) == \
        [(3 * DAY - 30, F), (4 * DAY - 30, E), (5 * DAY - 30, E), (6 * DAY - 30, E), (7 * DAY, P)]
    half = Settings(first_decision=(5.5 * DAY) / (7 * DAY))  # 5.5 d, then 6.5 d: exactly half a day before
    assert check_times(week, half, checks=False) == [(5.5 * DAY, F), (6.5 * DAY, E), (7 * DAY, P)]
    # periods shorter than the check interval: no early round
    assert check_times([0.0, 0.5 * DAY, DAY], Settings(period=0.5 * DAY, history=0.5 * DAY), checks=False) == \
        [(round(3 / 7 * 0.5 * DAY), F), (0.5 * DAY, P)]
    # the default: day 3 of a week, to the second, then days 4, 5 and 6
    assert check_times([0.0, 7 * DAY, 14 * DAY], Settings(), checks=False) == \
        [(3 * DAY, F), (4 * DAY, E), (5 * DAY, E), (6 * DAY, E), (7 * DAY, P)]
    # checks (of the queue, and of drift) start after the first boundary; early rounds are not checks
    assert check_times([0.0, 7 * DAY, 14 * DAY, 21 * DAY], Settings(), checks=True)[:6] == \
        [(3 * DAY, F), (4 * DAY, E), (5 * DAY, E), (6 * DAY, E), (7 * DAY, P), (8 * DAY, D)]
    for bad in (0.0, 1.0, -0.5, 7 * DAY):
        with pytest.raises(AdaptError, match="first decision"):
            replace(s, first_decision=bad)
    # rounded to whole seconds, the first round must still fall strictly inside the first period
    for period, f in ((1.0, 3 / 7), (1.0, 0.6), (2.0, 0.75), (10.0, 0.96)):
        with pytest.raises(AdaptError, match="first decision"):
            Settings(period=period, history=period, first_decision=f)
    assert check_times([0.0, 10.0, 20.0, 30.0], Settings(period=10.0, history=10.0, first_decision=0.94),
                       checks=False) == [(9.0, F), (10.0, P), (20.0, P)]


# ------------------------------------------------------------------------------ mixing replay and samples

def test_model_source_with_replay_brackets_the_replay_and_keeps_it_out_of_fresh_samples():
    from autosched.adapt.sources import ReplaySource

    tr = synthetic_trace(days=4, per_day=150, seed=4)
    cl = ClusterSpec.uniform_nodes(1, 4)
    sim = Simulator(tr, cl, Tiresias()).run(until=2 * DAY)
    obs = observe(sim, 2 * DAY, 0)
    plain = ModelSource("hybrid", samples=3)
    mixed = ModelSource("hybrid", samples=3, with_replay=True)
    assert mixed.name == "model:hybrid+replay" and plain.name == "model:hybrid"
    got = mixed.workloads(obs, DAY, seed=7)
    assert len(got) == 4
    assert got[0].equals(ReplaySource().workloads(obs, DAY, seed=0)[0])  # the same for any seed
    for a, b in zip(got[1:], plain.workloads(obs, DAY, seed=7)):
        assert a.equals(b)
    fresh = mixed.validation_workloads(obs, DAY, seed=7 + 503)
    assert len(fresh) == 3 and not any(f.equals(got[0]) for f in fresh)

    # The controller tunes on replay + samples and judges the winner on fresh samples only.
    class Recording(WorseTuner):
        seen: list[list[str]] = []

        def tune(self, workloads, **kw):
            Recording.seen.append([w.source for w in workloads])
            return super().tune(workloads, **kw)

        def evaluate(self, policy, config, workloads):
            Recording.seen.append([w.source for w in workloads])
            return super().evaluate(policy, config, workloads)

    ctrl = Controller(LoopConfig(period=DAY, budget=3, portfolio=False), cl, mixed, tuner_factory=Recording)
    d = ctrl.decide(obs)
    assert d.samples == 4 and d.validation == "fresh" and len(d.validation_seeds) == 3
    tuned, *judged = Recording.seen
    assert len(tuned) == 4 and all(len(j) == 3 for j in judged)
    assert not set(tuned) & {s for j in judged for s in j}


def test_old_finished_jobs_are_left_out_of_the_duration_estimate(monkeypatch):
    import importlib

    observe_mod = importlib.import_module("autosched.adapt.observe")  # (the package exports a function of that name)
    from autosched.adapt.observe import DURATION_HALF_LIFE, GPU_CLASSES, impute, impute_from_past

    # A short cut-off, so that the jobs left out would weigh enough to change the draws.
    monkeypatch.setattr(observe_mod, "ESTIMATE_AGE", 20 * DAY)
    ESTIMATE_AGE = 20 * DAY
    r = np.random.default_rng(4)
    n, now = 600, 100 * DAY
    submit = np.sort(r.uniform(0, now, n))
    dur = r.exponential(3600.0, n)
    finished = r.random(n) < 0.8
    gpus = r.integers(1, 16, n)
    got = impute_from_past(dur, finished, submit, gpus, now, np.random.default_rng(1))
    old = (now - submit > ESTIMATE_AGE) & finished
    assert old.any() and np.array_equal(got[old], dur[old])  # finished: kept as they are
    keep = ~old  # the rest: exactly as if the old finished jobs had never been seen
    cls = np.searchsorted(GPU_CLASSES, gpus[keep], side="left")
    alone = impute(dur[keep], finished[keep], np.random.default_rng(1), cls,
                   0.5 ** ((now - submit[keep]) / DURATION_HALF_LIFE))
    assert np.array_equal(got[keep], alone)
    everyone = impute(dur, finished, np.random.default_rng(1), np.searchsorted(GPU_CLASSES, gpus, side="left"),
                      0.5 ** ((now - submit) / DURATION_HALF_LIFE))
    assert not np.array_equal(got, everyone)  # the cut changes the estimate


def test_report_puts_knob_values_on_a_numeric_axis():
    """The report's config-over-time plot: numbers as they are, a categorical value as its index
    among its knob's choices (multifactor's PriorityFlags: FAIR_TREE 0, NO_FAIR_TREE 1)."""
    from autosched.adapt.report import _num

    space = get_policy("multifactor").space
    assert _num("NO_FAIR_TREE", space["PriorityFlags"]) == 1.0
    assert _num("first_fit", space["placement"]) == 3.0
    assert _num(30, space["bf_interval"]) == 30.0 and _num(True, space["backfill"]) == 1.0
    assert _num("unknown", space["PriorityFlags"]) == 0.0 and _num("x", space["reserve_after"]) == 0.0
