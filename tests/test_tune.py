"""The tuner: objective, knob mapping, causal screening, failures, timeouts, dead workers, resume."""

from __future__ import annotations

import gc
import math
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import optuna
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autosched.cluster import ClusterSpec
from autosched.policies import get_policy
from autosched.sim import Simulator
from autosched.space import Bool, Categorical, Float, Int
from autosched.trace.table import Trace
from autosched.tune import ExecutionConfig, Objective, ObjectiveError, SearchConfig, TuneError, Tuner, distribution, fragmentation
from autosched.tune.screening import screen
from autosched.tune.searchspace import from_unit, latin_hypercube
from tune_doubles import (
    CLUSTER,
    RELEVANT,
    TRACE,
    Knobby,
    always_dies_sim,
    dies_once_sim,
    failing_sim,
    frozen_parent_sim,
    known_sim,
    metrics_of,
    sleepy_sim,
)

TESTS = Path(__file__).resolve().parent


SEARCH = set(SearchConfig.__dataclass_fields__)


def tuner(**kw) -> Tuner:
    """A Tuner of the test double; keyword arguments go to SearchConfig or ExecutionConfig."""
    objective, simulator = kw.pop("objective", Objective()), kw.pop("simulator", known_sim)
    search = SearchConfig(**{k: kw.pop(k) for k in list(kw) if k in SEARCH})
    return Tuner(Knobby, CLUSTER, objective, search, ExecutionConfig(**kw), simulator=simulator)


# ------------------------------------------------------------------------------ objective

def test_objective_direction_comes_from_metric_help():
    assert Objective("avg_jct").direction == "minimize"
    assert Objective("utilization").direction == "maximize"
    assert Objective("utilization", direction="minimize").direction == "minimize"


def test_objective_combines_workloads_by_mean_or_worst():
    m = [metrics_of({"a": 0.1, "c": 0}), metrics_of({"a": 0.5, "c": 1})]  # avg_jct 200 and 800
    assert Objective("avg_jct").value(m) == pytest.approx(500.0)
    assert Objective("avg_jct", combine="worst").value(m) == pytest.approx(800.0)
    # for a metric to maximise, the worst workload is the smallest value
    assert Objective("avg_queue", direction="maximize", combine="worst").value(m) == pytest.approx(100.0)


def test_constraint_violation_is_signed_distance_to_the_bound():
    m = [metrics_of({"a": 0.1, "c": 0}), metrics_of({"a": 0.5, "c": 1})]  # avg_queue 100, 500
    obj = Objective("avg_jct", constraints=("avg_queue<=400", "avg_queue>=50"))
    assert obj.violations(m) == pytest.approx([300 - 400, 50 - 300])
    worst = Objective("avg_jct", constraints=("avg_queue<=400", "avg_queue>=50"), combine="worst")
    assert worst.violations(m) == pytest.approx([500 - 400, 50 - 100])


@pytest.mark.parametrize("bad, msg", [
    ({"metric": "jct"}, "unknown metric 'jct'"),
    ({"constraints": ("p99_queue<21600",)}, "expected METRIC<=VALUE"),
    ({"constraints": ("nope<=1",)}, "unknown metric 'nope'"),
    ({"combine": "median"}, "combine 'median'"),
    ({"direction": "down"}, "direction 'down'"),
])
def test_bad_objective_is_a_clear_error(bad, msg):
    with pytest.raises(ObjectiveError, match=msg):
        Objective(**bad)


# ------------------------------------------------------------------------------ the space

def test_each_knob_type_maps_to_one_optuna_distribution():
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    assert distribution(Float("x", "", low=1.0, high=9.0, default=2.0, log=True)) == FloatDistribution(1.0, 9.0, log=True)
    assert distribution(Int("n", "", low=1, high=6, default=3)) == IntDistribution(1, 6)
    assert distribution(Bool("b", "")) == CategoricalDistribution((False, True))
    assert distribution(Categorical("c", "", choices=("p", "q"), default="p")) == CategoricalDistribution(("p", "q"))


@given(st.floats(0.0, 0.999999))
def test_from_unit_stays_in_range_and_is_monotone(u):
    for knob in Knobby.space:
        v = from_unit(knob, u)
        assert knob.coerce(v) == v
    a = Knobby.space["a"]
    assert from_unit(a, u) <= from_unit(a, min(0.999999, u + 0.1))


def test_latin_hypercube_puts_one_point_in_each_stratum():
    configs = latin_hypercube(Knobby.space, 10, seed=3)
    a = sorted(c["a"] for c in configs)
    assert [int(x * 10) for x in a] == list(range(10))
    assert latin_hypercube(Knobby.space, 10, seed=3) == configs  # seeded


# ------------------------------------------------------------------------------ searching

def test_default_config_is_the_first_trial_and_the_default_value():
    res = tuner(budget=6, screening=False).tune([TRACE])
    first = min(res.trials, key=lambda t: t.number)
    assert first.config == Knobby.space.default()
    assert res.default_value == pytest.approx(100 + 500 + 20 * 50)
    assert res.best_value <= res.default_value
    assert res.best_config == min((t for t in res.trials), key=lambda t: t.value).config


def test_warm_start_configs_come_right_after_the_default():
    warm = {"a": 0.0, "b": 5.0, "c": 0, "d": True, "e": "z", "f": 0.1}
    res = tuner(budget=4, screening=False).tune([TRACE], warm_start=[{"policy": "knobby", "knobs": warm}])
    second = sorted(res.trials, key=lambda t: t.number)[1]
    assert second.config == Knobby.space.validate(warm)
    assert res.best_value == pytest.approx(100.0)


def test_same_seed_gives_the_same_trials():
    a = tuner(budget=12, seed=7, screening=False).tune([TRACE])
    b = tuner(budget=12, seed=7, screening=False).tune([TRACE])
    assert [t.config for t in a.trials] == [t.config for t in b.trials]


def test_constraints_pick_the_best_feasible_trial():
    obj = Objective("avg_jct", constraints=("avg_queue>=600",))
    res = tuner(objective=obj, budget=25, screening=False).tune([TRACE])
    assert res.feasible
    assert res.best_config["a"] >= 0.6
    better_but_infeasible = [t for t in res.trials if t.state == "complete" and t.value < res.best_value]
    assert better_but_infeasible and all(t.config["a"] < 0.6 for t in better_but_infeasible)


def test_evaluate_uses_the_same_workloads_for_every_config():
    t = tuner()
    value, metrics = t.evaluate("knobby", {"a": 0.25, "c": 2}, [TRACE, TRACE])
    assert value == pytest.approx(100 + 250 + 400) and len(metrics) == 2


def test_gp_sampler_without_torch_is_a_clear_error(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_torch(name, *a, **kw):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("no torch")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(TuneError, match=r"GP sampler needs PyTorch.*autosched\[gp\]"):
        tuner(sampler="gp")


@pytest.mark.parametrize("kw, msg", [({"budget": 0}, "budget"), ({"sampler": "cma"}, "sampler"),
                                     ({"workers": 0}, "workers"), ({"executor": "k8s"}, "executor")])
def test_bad_settings_are_rejected(kw, msg):
    with pytest.raises(TuneError, match=msg):
        tuner(**kw)


# ------------------------------------------------------------------------------ screening

def test_screening_keeps_the_knobs_that_matter_and_freezes_the_rest():
    res = tuner(budget=40, seed=0, patience=None).tune([TRACE])
    assert res.screening is not None and res.screening.samples == 20  # 3 per knob + 2
    assert set(res.searched_knobs) == RELEVANT
    assert set(res.screened_knobs) == {"b", "d", "e", "f"}
    # frozen at their values in the best trial of the initial design
    design = sorted(res.trials, key=lambda t: t.number)[:20]
    best = min(design, key=lambda t: t.value)
    assert res.screened_knobs == {k: best.config[k] for k in ("b", "d", "e", "f")}
    # every trial after screening uses the frozen values
    for t in sorted(res.trials, key=lambda t: t.number)[20:]:
        assert {k: t.config[k] for k in res.screened_knobs} == res.screened_knobs
    # the graph has a path from each kept knob to the objective, none from a frozen one
    sources = {s for s, _, _ in res.graph}
    assert RELEVANT <= sources and not sources & set(res.screened_knobs)
    assert abs(res.effects["c"]) > abs(res.effects["a"]) > max(abs(res.effects[k]) for k in "bdef")


def test_a_stalled_reduced_search_gets_the_frozen_knobs_back():
    res = tuner(budget=45, seed=0, patience=5).tune([TRACE])
    s = res.screening
    assert s.frozen and s.unfrozen_at is not None and 20 < s.unfrozen_at < 45
    order = sorted(res.trials, key=lambda t: t.number)
    values = [t.value for t in order]
    best_before = min(values[: s.unfrozen_at - 5])
    # the 5 trials before unfreezing brought no new best, and the trials after vary frozen knobs
    assert min(values[s.unfrozen_at - 5: s.unfrozen_at]) >= best_before
    assert any(t.config["b"] != s.frozen["b"] for t in order[s.unfrozen_at:])
    assert res.screened_knobs == {} and set(res.searched_knobs) == set(Knobby.space.names)


def test_screening_never_keeps_a_useless_knob_over_ten_seeds():
    kept_a = 0
    for seed in range(10):
        res = tuner(budget=21, seed=seed, initial_design=20, patience=None).tune([TRACE])
        assert "c" in res.searched_knobs
        assert not set(res.searched_knobs) - RELEVANT
        kept_a += "a" in res.searched_knobs
    assert kept_a >= 8  # a's effect is half of c's; 20 trials find it most of the time


def test_screen_finds_a_path_through_an_intermediate():
    rng = np.random.default_rng(0)
    n = 40
    configs = [{"a": float(x), "b": float(y), "c": int(z), "d": bool(w), "e": str(v), "f": float(u)}
               for x, y, z, w, v, u in zip(rng.uniform(0, 1, n), rng.uniform(1, 100, n), rng.integers(0, 11, n),
                                           rng.integers(0, 2, n), rng.choice(["x", "y", "z"], n), rng.uniform(0, 1, n))]
    queue = np.array([c["a"] for c in configs]) ** 2 + rng.normal(0, 0.1, n)  # a -> queue
    util = rng.uniform(0, 1, n)  # unrelated to anything
    y = 3 * queue + rng.normal(0, 0.5, n)  # queue -> objective
    s = screen(Knobby.space, configs, {"avg_queue": queue, "utilization": util}, y, "avg_jct", configs[0])
    assert "a" in s.relevant
    # the graph: a -> avg_queue -> avg_jct, and nothing from the useless knobs or utilization
    assert not {e.source for e in s.edges} & {"b", "c", "d", "e", "f", "utilization"}
    assert ("a", "avg_queue", True) in [(e.source, e.target, e.directed) for e in s.edges]
    assert any(e.source == "avg_queue" and e.target == "avg_jct" for e in s.edges)
    assert not any(e.source == "utilization" for e in s.edges)


def test_screening_with_nothing_varied_freezes_nothing():
    configs = [Knobby.space.default()] * 12
    s = screen(Knobby.space, configs, {"avg_queue": [1.0] * 12}, [5.0] * 12, "avg_jct", configs[0])
    assert s.frozen == {} and s.relevant == list(Knobby.space.names)
    assert "no knob frozen" in s.note


# ------------------------------------------------------------------------------ failures

def test_failing_trial_is_recorded_and_the_search_goes_on():
    res = tuner(budget=15, screening=False, simulator=failing_sim).tune([TRACE])
    failed = [t for t in res.trials if t.state == "failed"]
    assert len(res.trials) == 15
    assert failed and all(t.config["d"] for t in failed)
    assert all(t.error == "RuntimeError: boom: d is on" and t.value is None for t in failed)
    assert all(not t.config["d"] for t in res.trials if t.state == "complete")
    assert res.best_config["d"] is False


def test_a_nan_objective_fails_the_trial_with_the_tuners_error():
    """A NaN objective is the project's error (TuneError), named so in the failed trial's message."""
    from dataclasses import replace

    from autosched.tune import Evaluator
    from autosched.tune.executor import run_trial

    def nan_sim(trace, cluster, policy):
        return replace(metrics_of(policy.config), avg_jct=math.nan), {}

    ev = Evaluator(CLUSTER, (TRACE,), Objective("avg_jct"), {"knobby": Knobby}, nan_sim)
    with pytest.raises(TuneError, match="objective avg_jct is NaN"):
        ev("knobby", Knobby.space.default())
    assert run_trial(ev, "knobby", Knobby.space.default()) == (None, "TuneError: objective avg_jct is NaN")


def test_executors_built_directly_refuse_bad_settings_with_the_tuners_error():
    """ProcessExecutor and make_executor are public: they refuse what ExecutionConfig refuses, alike."""
    from autosched.tune import ProcessExecutor, make_executor

    with pytest.raises(TuneError, match=r"workers must be at least 1 \(got 0\)"):
        ProcessExecutor(0)
    with pytest.raises(TuneError, match="executor 'dask': use one of local, ray"):
        make_executor("dask", 1)


def test_trial_timeout_in_worker_processes():
    res = tuner(budget=6, screening=False, simulator=sleepy_sim, workers=2, trial_timeout=1.0).tune([TRACE])
    assert len(res.trials) == 6
    for t in res.trials:
        if t.config["a"] > 0.5:
            assert t.state == "failed" and "timeout" in t.error
        else:
            assert t.state == "complete"


def test_trial_timeout_in_process():
    res = tuner(budget=4, screening=False, simulator=sleepy_sim, workers=1, trial_timeout=0.5).tune([TRACE])
    slow = [t for t in res.trials if t.config["a"] > 0.5]
    assert slow and all(t.state == "failed" and "timeout" in t.error for t in slow)


def test_dead_worker_trial_is_retried_once(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOSCHED_TEST_MARKERS", str(tmp_path))
    res = tuner(budget=4, screening=False, simulator=dies_once_sim, workers=2).tune([TRACE])
    assert [t.state for t in res.trials] == ["complete"] * 4
    assert [t.attempts for t in res.trials] == [2] * 4
    assert res.cost["simulations"] == 8


def test_worker_that_always_dies_fails_its_trial():
    res = tuner(budget=2, screening=False, simulator=always_dies_sim, workers=2).tune([TRACE])
    assert [t.state for t in res.trials] == ["failed"] * 2
    assert all(t.error == "worker died twice (exit code 3)" for t in res.trials)
    assert res.best_config is None and math.isnan(res.best_value)


def test_workers_inherit_the_parent_frozen_and_the_parent_stays_unfrozen():
    # Frozen: a worker's collections do not walk (and so copy) the parent's pages (executor.py _child).
    res = tuner(budget=4, screening=False, simulator=frozen_parent_sim, workers=2).tune([TRACE])
    assert [t.state for t in res.trials] == ["complete"] * 4
    assert gc.get_freeze_count() == 0
    # The same double fails in this process, where nothing is frozen: the check above can fail.
    res = tuner(budget=1, screening=False, simulator=frozen_parent_sim, workers=1).tune([TRACE])
    assert res.trials[0].error == "RuntimeError: the parent's objects are not frozen in the worker"


# ------------------------------------------------------------------------------ resume

_RUNNER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from tune_doubles import CLUSTER, TRACE, Knobby, slow_sim
    from autosched.tune import ExecutionConfig, SearchConfig, Tuner
    Tuner(Knobby, CLUSTER, None, SearchConfig(budget=200, screening=False), ExecutionConfig(study={study!r}),
          simulator=slow_sim).tune([TRACE])
""")


def test_killed_study_resumes_without_losing_trials(tmp_path):
    study = tmp_path / "study.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", _RUNNER.format(tests=str(TESTS), study=str(study))])
    try:
        deadline = time.monotonic() + 60
        before = []
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if study.exists():
                try:
                    s = optuna.load_study(study_name="autosched", storage=f"sqlite:///{study}")
                    before = s.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
                except Exception:  # the runner may not have created the study yet
                    continue
                if len(before) >= 5:
                    break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert len(before) >= 5, "the runner did not get going"
    s = optuna.load_study(study_name="autosched", storage=f"sqlite:///{study}")
    kept = {t.number: (t.user_attrs["config"], t.value) for t in s.get_trials(states=(optuna.trial.TrialState.COMPLETE,))}
    budget = len(kept) + 4
    res = tuner(budget=budget, study=study, screening=False).tune([TRACE])
    after = {t.number: (t.config, t.value) for t in res.trials}
    assert len(res.trials) == budget  # the budget counts the finished trials from before the kill
    assert {n: after[n] for n in kept} == kept  # nothing finished was lost
    interrupted = [t for t in optuna.load_study(study_name="autosched", storage=f"sqlite:///{study}").get_trials()
                   if t.user_attrs.get("interrupted")]
    assert all(t.number not in after for t in interrupted)
    # and a study made for another problem is refused
    with pytest.raises(TuneError, match="another problem"):
        tuner(budget=budget, study=study, objective=Objective("avg_queue")).tune([TRACE])


# ------------------------------------------------------------------------------ fragmentation

def test_fragmentation_counts_idle_gpus_while_a_job_waits():
    # 1 node x 4 GPUs, strict FIFO. Job 0 (3 GPUs) runs [0, 10); job 1 (2 GPUs) waits [0, 10) with
    # 1 GPU idle, then runs [10, 20) with nobody waiting. Idle-while-waiting = 1 GPU x 10 s out of
    # 4 GPUs x 20 s = 0.125.
    trace = Trace.from_columns({"job_id": ["0", "1"], "submit_time": [0.0, 0.0], "num_gpus": [3, 2],
                                "duration": [10.0, 10.0]})
    sim = Simulator(trace, ClusterSpec.uniform_nodes(1, 4), get_policy("fifo")(), record_segments=True).run()
    assert fragmentation(sim) == pytest.approx(0.125)


def test_no_fragmentation_when_nobody_waits():
    trace = Trace.from_columns({"job_id": ["0", "1"], "submit_time": [0.0, 5.0], "num_gpus": [1, 1],
                                "duration": [10.0, 10.0]})
    sim = Simulator(trace, ClusterSpec.uniform_nodes(1, 4), get_policy("fifo")(), record_segments=True).run()
    assert fragmentation(sim) == 0.0


def test_timeout_off_the_main_thread_uses_a_worker_process():
    import threading

    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("res", tuner(
        budget=3, screening=False, simulator=sleepy_sim, workers=1, trial_timeout=0.5).tune([TRACE])))
    thread.start()
    thread.join(30)
    slow = [t for t in out["res"].trials if t.config["a"] > 0.5]
    assert slow and all("timeout" in t.error for t in slow)


def test_tuning_twice_with_one_tuner_screens_each_study_afresh():
    t = tuner(budget=30, seed=0, patience=None)
    first = t.tune([TRACE])
    second = t.tune([TRACE])
    assert second.screening.samples == first.screening.samples
    assert [x.config for x in second.trials][:20] == [x.config for x in first.trials][:20]


def test_warm_start_from_a_previous_rounds_trials():
    first = tuner(budget=8, seed=1, screening=False).tune([TRACE])
    best_two = sorted((t for t in first.trials if t.state == "complete"), key=lambda t: t.value)[:2]
    second = tuner(budget=4, seed=2, screening=False).tune([TRACE], warm_start=best_two)
    order = sorted(second.trials, key=lambda t: t.number)
    assert [t.config for t in order[1:3]] == [t.config for t in best_two]
    assert second.best_value == first.best_value


def test_screening_pools_the_trials_of_earlier_searches():
    """Rounds of 8 trials are too small for a graph of their own (screening wants 20 on Knobby and
    screens after 4 trials at this budget); with the trials of earlier rounds (other workloads:
    ranked within each round) the second round screens on 8 + 4 and the third on 8 + 8 + 4; with
    enough earlier trials (the fourth: 24) a round screens right after its default trial."""
    rounds, prior = [], []
    for i in range(4):
        res = tuner(budget=8, seed=i, patience=None).tune([TRACE], prior=prior)
        rounds.append(res)
        prior = [*prior, res.trials]
    assert rounds[0].screened_knobs == {} and not rounds[0].graph  # 4 trials: "too few"
    assert rounds[1].screening.samples == 12
    assert rounds[3].screening.samples == 3 * 8 + 1
    third = rounds[2].screening
    assert third is not None and third.samples == 8 + 8 + 4
    assert set(third.relevant) <= set(Knobby.space.names) and third.frozen
    assert rounds[2].graph and not set(third.frozen) & RELEVANT
    # a round's own values are not comparable with another's: scale one round's values by 1000
    # (other workloads) and the pooled screening is the same
    scaled = [[t.__class__(**{**t.__dict__, "value": t.value * 1000,
                              "intermediates": {k: v * 1000 for k, v in t.intermediates.items()}})
               for t in rounds[0].trials], rounds[1].trials]
    assert len(prior) == 4 and len(scaled) == 2
    again = tuner(budget=8, seed=2, patience=None).tune([TRACE], prior=scaled)
    assert again.screening.frozen == third.frozen and again.graph == rounds[2].graph
