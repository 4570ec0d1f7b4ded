"""The live knob space is built once (`autosched.export.live.live_subspace`): the replay
experiment (`autosched run --live-knobs`) and the live agent search the same part of
multifactor's space, and `run` starts every strategy from the cluster's config."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autosched.cli import app
from autosched.export.live import LiveKnobError, fixed_values, live_subspace
from autosched.live.knobs import live_space
from autosched.policies.multifactor import Multifactor
from autosched.space import Subspace
from autosched.trace import write_trace
from autosched.tune import tuner as tuner_module
from test_adapt_doubles import synthetic_trace

runner = CliRunner()


@pytest.fixture
def seen(monkeypatch):
    """The subspaces every Tuner made in the test was given."""
    out: list[Subspace | None] = []
    init = tuner_module.Tuner.__init__

    def spy(self, policy, cluster, objective=None, search=None, execution=None, **kw):
        out.append(search.subspace if search is not None else None)
        init(self, policy, cluster, objective, search, execution, **kw)

    monkeypatch.setattr(tuner_module.Tuner, "__init__", spy)
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("live") / "tiny.csv"
    write_trace(synthetic_trace(days=4, per_day=40, seed=2), path)
    return path


def _run(tiny, *extra):
    return runner.invoke(app, ["run", str(tiny), "--cluster", "1x8", "--policy", "multifactor", "--period", "2d",
                               "--history", "2d", "--budget", "2", "--samples", "2", "--validation-samples", "2",
                               "--workers", "1", "--strategies", "default,last_period", "--json", *extra])


def test_the_replay_and_the_agent_build_the_same_live_space(tmp_path, tiny, seen):
    """The agent over a fake cluster at Slurm's defaults (propose mode: no step limit, no
    bounds) with reserve_after fixed, and `run --live-knobs --fix reserve_after=3600`."""
    from live_helpers import make

    agent, _ = make(tmp_path, fixed={"reserve_after": 3600.0})
    agent.step()
    from_agent = set(seen)
    seen.clear()
    res = _run(tiny, "--live-knobs", "--fix", "reserve_after=3600")
    assert res.exit_code == 0, res.output
    from_replay = set(seen)
    expected = live_subspace("multifactor", {"reserve_after": 3600.0})
    assert from_agent == from_replay == {expected}
    # every non-live knob pinned at the cluster's value, every live knob searched from its own
    assert dict(expected.pinned) == fixed_values("multifactor", {"reserve_after": 3600.0})
    assert {n for n, _ in expected.start} == set(live_space("multifactor").names)
    assert expected.bounds == ()


def test_a_flag_the_cluster_sets_is_pinned_alike_by_the_agent_and_the_replay(tmp_path, tiny, seen):
    """A cluster with ``PriorityFlags=NO_FAIR_TREE``: the agent pins the classic fair share from
    the cluster's setup; `run --live-knobs --fix PriorityFlags=NO_FAIR_TREE` describes the same
    cluster and searches the same space."""
    from dataclasses import replace

    from live_helpers import make

    agent, fake = make(tmp_path)
    fake.set_setup(replace(fake.setup(), priority_flags=("NO_FAIR_TREE",)))
    agent.step()
    from_agent = set(seen)
    seen.clear()
    res = _run(tiny, "--live-knobs", "--fix", "PriorityFlags=NO_FAIR_TREE")
    assert res.exit_code == 0, res.output
    expected = live_subspace("multifactor", {"PriorityFlags": "NO_FAIR_TREE"})
    assert from_agent == set(seen) == {expected}
    assert dict(expected.pinned)["PriorityFlags"] == "NO_FAIR_TREE"
    assert expected != live_subspace("multifactor")  # the default cluster's is Fair Tree


def test_without_live_knobs_run_searches_the_whole_space(tiny, seen):
    assert _run(tiny).exit_code == 0
    assert set(seen) == {None}


def test_run_starts_every_strategy_from_the_fixed_config(tiny):
    res = _run(tiny, "--live-knobs", "--fix", "backfill=false", "--fix", "sched_interval=120")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    start = out["strategies"]["default"]["timeline"][0]["config"]
    assert start == Multifactor.space.validate({"backfill": False, "sched_interval": 120})
    for d in out["strategies"]["last_period"]["decisions"]:
        assert d["config"]["backfill"] is False and d["config"]["sched_interval"] == 120
        assert d["candidate"]["backfill"] is False and d["candidate"]["sched_interval"] == 120
    assert out["settings"]["search"]["subspace"]["pinned"][0] == ["PriorityFlags", "FAIR_TREE"]


@pytest.mark.parametrize("extra, message", [
    (["--fix", "backfill=false"], "--fix gives the cluster's value of a knob the live agent cannot write: it needs --live-knobs"),
    (["--live-knobs", "--fix", "PriorityWeightAge=3"], "cannot fix PriorityWeightAge: a knob with a live Slurm setting"),
    (["--live-knobs", "--fix", "backfill"], "'backfill' is not of the form knob=value"),
    (["--live-knobs", "--fix", "nope=1"], "unknown knob 'nope'"),
])
def test_bad_live_knob_options_are_one_line_errors(tiny, extra, message):
    res = _run(tiny, *extra)
    assert res.exit_code == 2 and message in res.stderr, res.output
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_policy_without_live_knobs_is_refused(tiny):
    res = runner.invoke(app, ["run", str(tiny), "--cluster", "1x8", "--policy", "tiresias", "--live-knobs"])
    assert res.exit_code == 2 and "policy 'tiresias' has no knob with a live Slurm setting" in res.stderr


def test_a_running_config_far_from_the_defaults_is_searched_one_step_around_it():
    """Auto mode after a large move: the old live view kept the declared defaults, which then lay
    outside the narrowed ranges, and building it failed ('1000 is outside its range')."""
    running = Multifactor.space.validate({"PriorityWeightAge": 50000, "bf_interval": 200})
    sub = live_subspace("multifactor", running=running, max_step=0.1)
    space = Multifactor.space.restrict(sub)
    age = space["PriorityWeightAge"]
    assert (age.low, age.high) == (40000, 60000)  # +-10% of 0..100000
    bf = space["bf_interval"]
    assert (bf.low, bf.high) == (171, 229)  # +-10% of its searched 10..300: 29
    assert space.default() == running


def test_bounds_must_name_live_knobs():
    with pytest.raises(LiveKnobError, match="bounds for backfill: not a live knob of multifactor"):
        live_subspace("multifactor", bounds={"backfill": (0, 1)})


def test_a_step_that_reaches_the_whole_range_bounds_nothing_and_keeps_the_direction_search():
    # a bound on any weight turns the search of the weights as a direction off, so a step that
    # restricts nothing must not become one: --max-step 1 searches as propose mode does
    from autosched.tune.searchspace import SearchSpace

    running = Multifactor.space.validate({"PriorityWeightAge": 50000, "bf_interval": 200})
    whole = live_subspace("multifactor", running=running, max_step=1.0)
    assert whole.bound_ranges() == {}
    assert SearchSpace.of([Multifactor], whole).weight_group("multifactor") == Multifactor.space.weights
    stepped = live_subspace("multifactor", running=running, max_step=0.25)
    assert "PriorityWeightAge" in stepped.bound_ranges()
    assert SearchSpace.of([Multifactor], stepped).weight_group("multifactor") == ()
    # a running value outside the searched range widens it, as in propose mode: bf_interval's
    # 10-300 s becomes 5-300 s, and a full step from 5 s reaches all of it
    running = Multifactor.space.validate({"bf_interval": 5, "bf_window": 60})
    outside = live_subspace("multifactor", running=running, max_step=1.0)
    assert outside.bound_ranges() == {}
    searched = SearchSpace.of([Multifactor], outside).config_space("multifactor")
    assert (searched["bf_interval"].searched(), searched["bf_window"].searched()) == ((5, 300), (60, 10080))
    # a quarter of the widened range, 295 / 4 = 73.75 s, around the running 5 s
    assert live_subspace("multifactor", running=running, max_step=0.25).bound_ranges()["bf_interval"] == (
        5 - 73.75, 5 + 73.75)


def test_a_step_keeps_the_archetypes_with_their_weights_scaled_into_it():
    # small first sets PriorityWeightJobSize to 100,000, far above a quarter step from the
    # defaults (1,000 + 25,000); only the weights' ratios matter, so the same order fits
    from autosched.tune.searchspace import SearchSpace

    sub = live_subspace("multifactor", running=Multifactor.space.default(), max_step=0.25)
    got = SearchSpace.of([Multifactor], sub).archetypes("multifactor")
    # all but "deep backfill": its bf_window of a week is beyond a quarter step from a day
    assert len(got) == len(Multifactor.space.archetypes) - 1
    assert not any(c["bf_window"] == 10080 for c in got)
    small = next(c for c in got if c["PriorityFavorSmall"])
    assert {w: small[w] for w in Multifactor.space.weights} == {
        "PriorityWeightAge": 0, "PriorityWeightFairshare": 0, "PriorityWeightJobSize": 26000,
        "PriorityWeightTRES.GRES/gpu": 0, "PriorityWeightTRES.CPU": 0}
    # an archetype that fits is kept as declared
    assert any(c["PriorityWeightAge"] == 10000 and c["PriorityWeightFairshare"] == 0 for c in got)


def test_a_full_step_covers_a_log_scaled_knob_at_either_end_of_its_range():
    # rebuilt ends (100 * f) fall a hair short of 5000 in floating point; distances do not
    for value in (100, 5000):
        running = Multifactor.space.validate({"bf_max_job_test": value})
        assert "bf_max_job_test" not in live_subspace("multifactor", running=running, max_step=1.0).bound_ranges()


def test_scaling_an_archetype_never_loses_a_weight_it_sets():
    from autosched.tune.searchspace import SearchSpace

    def archetypes(running, bounds):  # (age, fair-share, job size) of each archetype kept
        sub = live_subspace("multifactor", running=Multifactor.space.validate(running), bounds=bounds)
        got = SearchSpace.of([Multifactor], sub).archetypes("multifactor")
        return sorted((c["PriorityWeightAge"], c["PriorityWeightFairshare"], c["PriorityWeightJobSize"])
                      for c in got)

    # fair-share heavy (age 1,000, fair-share 10,000) under fair-share <= 3 would need age 0.3:
    # it is left out rather than become fair-share alone; the others fit as declared
    # (the two backfill corners keep the running weights: age 1,000, fair-share 0, job size 1,000)
    assert archetypes({"PriorityWeightFairshare": 0}, {"PriorityWeightFairshare": (0, 3)}) == [
        (0, 0, 0), (0, 0, 100000), (1000, 0, 1000), (1000, 0, 1000), (10000, 0, 0),
        (100000, 0, 100000)]  # GPU first, small first, the corners, age only, small first aged
    # a high of 0 under the weight small first sets: small first (and aged) is left out, not all
    # zeros (the corners: the running weights, fair-share heavy's here)
    assert archetypes({"PriorityWeightJobSize": 0}, {"PriorityWeightJobSize": (0, 0)}) == [
        (0, 0, 0), (1000, 10000, 0), (1000, 10000, 0), (1000, 10000, 0), (10000, 0, 0)]
    # fair-share <= 5,000: fair-share heavy scaled by half, the same order
    assert (500, 5000, 0) in archetypes({"PriorityWeightFairshare": 0}, {"PriorityWeightFairshare": (0, 5000)})
