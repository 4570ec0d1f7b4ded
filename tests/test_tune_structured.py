"""A space that declares how to search it (weights, archetypes, secondary knobs) and a search held
to a subspace, with a test-double policy whose objective is a known function of its knobs."""

from __future__ import annotations

import warnings

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.policies.base import Policy
from autosched.sim import Metrics
from autosched.space import Bool, ConfigSpace, Int, Subspace
from autosched.tune import ExecutionConfig, Objective, SearchConfig, TuneError, Tuner
from autosched.tune.searchspace import SCALE_PARAM, SearchSpace, direction_of, share_param, weights_of
from autosched.tune.study import StudyError
from tune_doubles import CLUSTER, TRACE, Knobby, known_sim


class Weighted(Policy):
    name = "weighted"
    summary = ("test double: avg_jct = 100 + 1000 x (wb's share of the weights) + 10 |major - 20|; "
               "minor and flag do nothing")
    space = ConfigSpace([
        Int("wa", "a weight", low=0, high=1000, default=100),
        Int("wb", "a weight", low=0, high=1000, default=100),
        Int("wc", "a weight", low=0, high=1000, default=0),
        Int("minor", "does nothing", low=1, high=100, default=10, search=(5, 50)),
        Int("major", "matters", low=1, high=100, default=10, search=(5, 50)),
        Bool("flag", "does nothing", default=False),
    ], weights=("wa", "wb", "wc"), weight_scale=(10.0, 1000.0),
        archetypes={"a only": {"wa": 100, "wb": 0, "wc": 0}, "c only": {"wa": 0, "wb": 0, "wc": 500}},
        secondary=("minor", "major", "flag"))


def jct(c) -> float:
    total = c["wa"] + c["wb"] + c["wc"]
    return 100.0 + 1000.0 * (c["wb"] / total if total else 1 / 3) + 10.0 * abs(c["major"] - 20)


def weighted_sim(trace, cluster, policy):
    v = jct(policy.config)
    return Metrics(jobs=2, avg_jct=v, median_jct=v, p95_jct=v, p99_jct=v, avg_queue=v, p99_queue=v,
                   avg_slowdown=1.0, makespan=1000.0, utilization=0.5, preemptions=0, fairness=1.0), {}


def tuner(budget=20, seed=0, subspace=None, **kw):
    return Tuner(Weighted, CLUSTER, Objective("avg_jct"),
                 SearchConfig(budget=budget, seed=seed, screening=False, subspace=subspace, **kw),
                 ExecutionConfig(workers=1), simulator=weighted_sim)


def test_weights_from_a_direction_and_a_scale_by_hand():
    space = Weighted.space
    # shares (0.5, 0.25, 0) at scale 400: the largest share gets 400, the others in proportion
    assert weights_of(space, [0.5, 0.25, 0.0], 400.0) == {"wa": 400, "wb": 200, "wc": 0}
    assert weights_of(space, [0.0, 0.0, 0.0], 400.0) == {"wa": 0, "wb": 0, "wc": 0}
    assert weights_of(space, [1.0, 1 / 3, 0.0], 100.0) == {"wa": 100, "wb": 33, "wc": 0}  # 33.3 rounds down
    assert direction_of(space, {"wa": 400, "wb": 200, "wc": 0}) == ([1.0, 0.5, 0.0], 400.0)
    assert direction_of(space, {"wa": 0, "wb": 0, "wc": 0}) == ([0.0, 0.0, 0.0], 10.0)


@settings(max_examples=200, deadline=None)
@given(w=st.tuples(st.integers(0, 1000), st.integers(0, 1000), st.integers(0, 1000)),
       major=st.integers(1, 100))
def test_every_config_is_searched_again_exactly_from_its_params(w, major):
    """Warm starts, archetypes and the default are queued as params: `sample` must give the very
    config back (a weight of 7 stays 7, not 6.99 -> 7 by luck)."""
    space = SearchSpace.of(Weighted)
    config = Weighted.space.validate({"wa": w[0], "wb": w[1], "wc": w[2], "major": major})
    params = space.params("weighted", config)
    assert {share_param("wa"), share_param("wb"), share_param("wc"), SCALE_PARAM} <= set(params)
    assert "wa" not in params
    with warnings.catch_warnings():  # a largest weight below the scale's range is queued as it is
        warnings.simplefilter("ignore")
        assert space.sample(optuna.trial.FixedTrial(params)) == ("weighted", config)


def test_the_search_starts_with_the_start_config_the_warm_starts_and_the_archetypes():
    res = tuner(budget=12).tune([TRACE], warm_start=[{"wa": 7, "wb": 3, "wc": 1}])
    configs = [t.config for t in sorted(res.trials, key=lambda t: t.number)]
    base = Weighted.space.default()
    assert configs[:4] == [base, {**base, "wa": 7, "wb": 3, "wc": 1}, {**base, "wa": 100, "wb": 0, "wc": 0},
                           {**base, "wa": 0, "wb": 0, "wc": 500}]
    assert res.default_value == jct(base)


def test_probes_freeze_the_secondary_knobs_that_do_not_move_the_objective():
    """Design: start, 2 archetypes, 3 hypercube points (max(2, 24 // 8)); then one probe per
    secondary knob at the best of them. Moving `major` changes 10 |major - 20| (>= 1% of the
    JCT), moving `minor` or `flag` nothing: those two are frozen at the best trial's values."""
    t = tuner(budget=24)
    assert t.structured_design() == 6
    res = t.tune([TRACE])
    trials = sorted(res.trials, key=lambda t: t.number)
    probes = [tr for tr in trials[6:9]]
    assert len(probes) == 3
    s = res.screening
    assert s is not None and sorted(s.knobs) == ["flag", "major", "minor"]
    assert s.relevant == ["major"] and set(s.frozen) == {"minor", "flag"}
    assert s.method == "probes" and s.samples == 9 and "probes of 3 secondary knobs after 9 trials" in s.text()
    assert s.effects["minor"] == 0.0 and s.effects["flag"] == 0.0 and abs(s.effects["major"]) >= 0.01
    best_of_design = min(trials[:6], key=lambda t: t.value)
    for p in probes:  # each probe is the design's best with one knob moved to its far end
        moved = {k for k in p.config if p.config[k] != best_of_design.config[k]}
        assert len(moved) == 1
        k = moved.pop()
        assert p.config[k] in ((5, 50) if k != "flag" else (not best_of_design.config["flag"],))
    # while frozen, the later trials keep them at the best trial's values
    frozen_until = s.unfrozen_at or len(trials)
    for tr in trials[9:frozen_until]:
        assert all(tr.config[k] == v for k, v in s.frozen.items())


def test_sampled_weights_have_their_largest_within_the_scale_range():
    """The largest weight is the scale (10..1000 here, log-uniform); the others are its fractions."""
    space = SearchSpace.of(Weighted)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    tops = []
    for _ in range(200):
        _, c = space.sample(study.ask())
        top = max(c["wa"], c["wb"], c["wc"])
        assert 10 <= top <= 1000
        tops.append(top)
    assert sum(t < 100 for t in tops) > 50  # log scale: half the draws below the geometric middle


def test_a_search_held_to_a_subspace_never_leaves_it():
    sub = Subspace.of(pinned={"flag": True, "minor": 30}, bounds={"wa": (50, 200)}, start={"wa": 60})
    res = tuner(budget=15, subspace=sub).tune([TRACE])
    assert res.trials[0].config == {**Weighted.space.default(), "flag": True, "minor": 30, "wa": 60}
    for t in res.trials:
        assert t.config["flag"] is True and t.config["minor"] == 30 and 50 <= t.config["wa"] <= 200
    # a bounded weight: the weights are searched one by one; "c only" (wa = 0) lies outside the
    # bounds and is left out, "a only" (wa = 100) is tried
    space = SearchSpace.of(Weighted, sub)
    assert space.weight_group("weighted") == ()
    assert space.archetypes("weighted") == [{**res.trials[0].config, "wa": 100, "wb": 0, "wc": 0}]
    assert "minor" not in res.searched_knobs and "flag" not in res.searched_knobs


def test_a_subspace_restricts_one_policy():
    with pytest.raises(TuneError, match="a subspace restricts one policy"):
        Tuner([Weighted, Knobby], CLUSTER, Objective(), SearchConfig(subspace=Subspace.of(pinned={"flag": True})))


def test_a_study_of_the_whole_space_is_not_resumed_for_a_subspace(tmp_path):
    study = tmp_path / "s.db"
    Tuner(Weighted, CLUSTER, Objective(), SearchConfig(budget=3, screening=False),
          ExecutionConfig(study=study), simulator=weighted_sim).tune([TRACE])
    sub = Subspace.of(pinned={"flag": True})
    with pytest.raises(StudyError, match="the part of the knob space searched"):
        Tuner(Weighted, CLUSTER, Objective(), SearchConfig(budget=6, screening=False, subspace=sub),
              ExecutionConfig(study=study), simulator=weighted_sim).tune([TRACE])


def test_an_unstructured_space_is_searched_as_before():
    """Knobby declares nothing: no archetypes, no probes, no direction parameters."""
    t = Tuner(Knobby, CLUSTER, Objective(), SearchConfig(budget=8, screening=False), simulator=known_sim)
    res = t.tune([TRACE])
    assert res.screening is None and len(res.trials) == 8
    assert all(set(t.config) == set(Knobby.space.names) for t in res.trials)
    assert not t.space.structured("knobby") and t.space.weight_group("knobby") == ()
