"""A round's portfolio (adapt/portfolio.py) and the operator's policy (adapt/constraints.py) on
hand-made scores: which candidates a race drops, which leads, when the sample count grows, what
the guardrail decides, and what breaks the policy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autosched.adapt.constraints import PolicyConstraints, fairshare_fraction
from autosched.adapt.errors import AdaptError
from autosched.adapt.guardrail import Guardrail
from autosched.adapt.portfolio import (
    Budget,
    Candidate,
    candidates,
    milder_variants,
    multiple_k,
    overlay,
    race,
    toward,
    within_rules,
)
from autosched.adapt.scoring import Score, ScoreSet
from autosched.policies import get_policy
from autosched.space import Bool, Categorical, ConfigSpace, Float, Int, Subspace

NO_POLICY = PolicyConstraints(account_tolerance=None, size_tolerance=None)


def sc(value: float, waits: dict[str, float] | None = None, usage: dict[str, float] | None = None,
       p95: dict[str, float] | None = None, jobs: int = 10) -> Score:
    waits = waits or {}
    return Score(value=value, jobs=jobs, account_jobs={a: jobs for a in waits}, account_wait=waits,
                 account_usage=usage or {a: 1.0 for a in waits}, size_jobs={k: jobs for k in p95 or {}},
                 size_p95_wait=p95 or {})


def table_race(values: dict[str, list[float]], budget: Budget, constraints=NO_POLICY, extra=None):
    """Race candidates named as `values`' keys ("running" first); config {"name": key}; sample i
    of a candidate scores values[key][i] (and `extra[key][i]`'s waits, when given)."""
    port = [Candidate(name, {"name": name}) for name in values]
    asked: list[tuple[int, int]] = []

    def draw(start: int, count: int):
        asked.append((start, count))
        return list(range(start, min(start + count, len(values["running"]))))

    def scorer(config, work):
        name = config["name"]
        return [extra[name][i] if extra else sc(values[name][i]) for i in work]

    return race(port, draw, scorer, budget, Guardrail(1.0, 0.01), constraints), asked


def test_multiple_k_shares_the_tail_among_the_configs_compared():
    # P(Z > 1) = 0.1587; over 3 configs 0.0529 each -> z = 1.617; one config: k itself; k = 0 stays 0
    assert multiple_k(1.0, 1) == 1.0 and multiple_k(0.0, 10) == 0.0
    assert multiple_k(1.0, 3) == pytest.approx(1.617, abs=1e-3)
    assert multiple_k(1.0, 10) == pytest.approx(2.14, abs=1e-2)


def test_race_drops_what_cannot_pass_then_deploys_a_clear_leader():
    values = {"running": [100.0] * 8,
              "A": [80.0, 82, 78, 80, 81, 79, 80, 80],  # about +20%: the leader
              "B": [120.0] * 8,  # -20% on every sample: out at the screen
              "C": [99.0] * 8,  # +1%, at the margin: no better than it, behind A
              "D": [99.0] * 8}  # as C on every sample: the same schedule, out at the screen
    res, asked = table_race(values, Budget(4, 8, 16))
    # the screen on samples 0-3, then 4 more for the two left; the guardrail decides at 8
    assert asked == [(0, 4), (4, 4)]
    assert res.leader is not None and res.leader.name == "A" and res.verdict.deploy and res.samples == 8
    assert res.k == pytest.approx(multiple_k(1.0, 4))
    got = {s.name: (s.samples, s.dropped) for s in res.standings}
    assert got == {"A": (8, ""), "B": (4, "cannot reach the margin on the first 4 samples"),
                   "C": (8, "behind the leader"), "D": (4, "scheduled as C on the first 4 samples")}
    assert res.verdict.gain == pytest.approx(sum(1 - v / 100 for v in values["A"]) / 8)


def test_race_grows_the_samples_while_undecided():
    # A gains +25% and -15% by turns: a mean of 5% with s.e. 0.2 / sqrt(n - 1) on n samples (k = 1,
    # one config compared). At 8: 7.6% s.e., within noise; the budget's 32 could decide (s.e.
    # 7.6% x sqrt(8/32) = 3.8% < 5%), so 8 more; at 16: 5.2%, still within, 3.7% projected: 16
    # more; at 32: 3.6% and the gain passes. Only the running config and A are scored on them.
    res, asked = table_race({"running": [100.0] * 32, "A": [75.0, 115.0] * 16}, Budget(4, 8, 32))
    assert asked == [(0, 4), (4, 4), (8, 8), (16, 16)]
    assert res.samples == 32 and res.verdict.deploy and len(res.running) == 32
    assert res.verdict.spread == pytest.approx(0.2 / 31 ** 0.5)
    # with a budget of 16 the projected s.e. (7.6% x sqrt(8/16) = 5.3%) leaves 5% within it:
    # futile, kept at 8
    res, asked = table_race({"running": [100.0] * 32, "A": [75.0, 115.0] * 16}, Budget(4, 8, 16))
    assert asked == [(0, 4), (4, 4)] and res.samples == 8 and not res.verdict.deploy


def test_race_stops_when_the_gain_cannot_reach_the_margin():
    # A swings +-30% about the running config: a mean of 0, below the margin: no more samples
    res, asked = table_race({"running": [100.0] * 16, "A": [70.0, 130.0] * 8}, Budget(4, 8, 16))
    assert asked == [(0, 4), (4, 4)] and not res.verdict.deploy and "below the margin" in res.verdict.reason
    # 0.5% better on every sample (s.e. 0) cannot pass a 1% margin: out at the screen
    res, asked = table_race({"running": [100.0] * 16, "A": [99.5] * 16}, Budget(4, 8, 16))
    assert asked == [(0, 4)] and res.leader is None and res.verdict.reason == "no candidate but the running config is left"


def test_race_leader_keeps_the_operators_policy():
    # A gains 20% but makes account "chem" wait 30 min instead of 10 (allowed: 25% of 10 min +
    # 10 min of slack = 12.5 min more); C gains 10% and keeps chem's wait
    run = [sc(100.0, {"phys": 600.0, "chem": 600.0})] * 8
    a = [sc(80.0, {"phys": 300.0, "chem": 1800.0})] * 8
    c = [sc(90.0, {"phys": 500.0, "chem": 600.0})] * 8
    values = {"running": [100.0] * 8, "A": [80.0] * 8, "C": [90.0] * 8}
    res, _ = table_race(values, Budget(4, 8, 8), PolicyConstraints(size_tolerance=None),
                        extra={"running": run, "A": a, "C": c})
    assert res.leader is not None and res.leader.name == "C" and res.verdict.deploy
    assert res.check is not None and res.check.holds
    effects = {(e.kind, e.name): (e.running, e.candidate, e.allowed) for e in res.check.effects}
    assert effects[("account", "chem")] == (600.0, 600.0, 600 * 0.25 + 600)
    # A alone: nothing keeps the policy
    res, _ = table_race({"running": [100.0] * 8, "A": [80.0] * 8}, Budget(4, 8, 8),
                        PolicyConstraints(size_tolerance=None), extra={"running": run, "A": a})
    assert res.leader is None and not res.verdict.deploy
    (a_row,) = res.standings
    # (out at the screen: it broke the policy on the first 4 samples already)
    assert a_row.dropped == ("breaks the policy on the first 4 samples: account chem: average wait 10 -> 30 min, "
                             "more than the 12 min allowed") and a_row.samples == 4


def test_of_two_that_schedule_alike_the_one_that_keeps_the_policy_stays():
    # age only and fair-share heavy give the same schedule (one user: fair share orders nothing),
    # 20% better on every sample; age only's fair-share weight 0 breaks the floor of half the
    # largest weight, fair-share heavy's 10000 of 10000 keeps it: it stays in the race and leads
    weights = get_policy("multifactor").space.weights
    running = {"PriorityWeightFairshare": 10000, "PriorityWeightAge": 1000, "PriorityWeightJobSize": 1000,
               "PriorityWeightTRES.GRES/gpu": 2000, "PriorityWeightTRES.CPU": 1000}
    none = dict.fromkeys(running, 0)
    port = [Candidate("running", running), Candidate("age only", {**none, "PriorityWeightAge": 10000}),
            Candidate("fair-share heavy", {**none, "PriorityWeightFairshare": 10000, "PriorityWeightAge": 1000})]
    policy = PolicyConstraints(account_tolerance=None, size_tolerance=None, fairshare_floor=0.5, weights=weights)

    def scorer(config, work):
        return [sc(100.0 if config is running else 80.0) for _ in work]

    res = race(port, lambda start, count: list(range(start, min(start + count, 8))), scorer, Budget(4, 8, 8),
               Guardrail(1.0, 0.01), policy)
    assert res.leader is not None and res.leader.name == "fair-share heavy" and res.verdict.deploy
    got = {s.name: s.dropped for s in res.standings}
    assert got == {"fair-share heavy": "", "age only": "breaks the policy on the first 4 samples: "
                   "PriorityWeightFairshare 0 is 0% of the largest priority weight, below the floor of 50%"}


def test_an_account_above_its_share_may_wait_longer():
    # 60/40 shares; phys ran 90% of the GPU-seconds (1.5x its share): its tolerance is 1.5 x 25%.
    # chem ran 10% (below its share): 25%. No slack, to see the tolerance alone.
    run = ScoreSet((sc(1.0, {"phys": 1000.0, "chem": 1000.0}, usage={"phys": 9.0, "chem": 1.0}),))
    cand = ScoreSet((sc(1.0, {"phys": 1370.0, "chem": 1260.0}, usage={"phys": 9.0, "chem": 1.0}),))
    policy = PolicyConstraints(wait_slack=0.0, size_tolerance=None, shares={"phys": 60, "chem": 40}, min_jobs=1)
    check = policy.check(run, cand, {}, {})
    allowed = {e.name: e.allowed for e in check.effects}
    assert allowed == pytest.approx({"phys": 1000 * 0.25 * 1.5, "chem": 250.0})
    assert check.violations == ("account chem: average wait 17 -> 21 min, more than the 4 min allowed",)


def test_size_class_p95_and_too_few_jobs():
    run = ScoreSet((sc(1.0, p95={"1": 600.0, "5-8": 3600.0}, jobs=10),))
    cand = ScoreSet((sc(1.0, p95={"1": 60.0, "5-8": 9000.0}, jobs=10),))
    check = PolicyConstraints(account_tolerance=None).check(run, cand, {}, {})
    # 5-8 GPUs: 60 -> 150 min against 60 + 10 min allowed (tolerance 1: it may double)
    assert check.violations == ("size 5-8: p95 wait 60 -> 150 min, more than the 70 min allowed",)
    # with 4 jobs a sample the class does not count
    few = PolicyConstraints(account_tolerance=None, min_jobs=11).check(run, cand, {}, {})
    assert few.holds and few.effects == ()


def test_pins_and_the_fairshare_floor():
    weights = get_policy("multifactor").space.weights
    running = {"PriorityWeightFairshare": 10000, "PriorityWeightAge": 1000, "PriorityWeightJobSize": 1000,
               "PriorityWeightTRES.GRES/gpu": 2000, "PriorityWeightTRES.CPU": 0, "bf_window": 1440}
    policy = PolicyConstraints(account_tolerance=None, size_tolerance=None, fairshare_floor=0.5,
                               pins=("bf_window",), weights=weights)
    empty = ScoreSet((sc(1.0),))
    # fair share 10000 against job size 15000: 67%, above the floor; against 20000: 50%, at it
    assert policy.check(empty, empty, running, {**running, "PriorityWeightJobSize": 15000}).holds
    ok = policy.check(empty, empty, running, {**running, "PriorityWeightJobSize": 20000})
    assert ok.holds
    low = policy.check(empty, empty, running, {**running, "PriorityWeightFairshare": 0})
    assert low.violations == ("PriorityWeightFairshare 0 is 0% of the largest priority weight, below the floor of 50%",)
    moved = policy.check(empty, empty, running, {**running, "bf_window": 2880})
    assert moved.violations == ("bf_window is pinned at 1440",)
    # a running config already below the floor: the floor is its own fraction (20%)
    lower = {**running, "PriorityWeightJobSize": 50000}
    assert policy.check(empty, empty, lower, {**lower, "PriorityWeightAge": 2000}).holds
    assert not policy.check(empty, empty, lower, {**lower, "PriorityWeightFairshare": 5000}).holds
    assert fairshare_fraction({"PriorityWeightFairshare": 0, "PriorityWeightAge": 0}, weights) is None


def test_the_portfolio_holds_the_archetypes_over_the_running_config_within_the_search():
    space = get_policy("multifactor").space
    running = space.default()
    port = candidates(space, running, winners=[], best=None)
    names = [c.name for c in port]
    assert names == ["running", "age only (FIFO)", "small first", "small first, aged", "GPU first",
                     "fair-share heavy", "deep backfill", "frequent backfill"]
    small = dict(port[2].config)
    assert (small["PriorityWeightJobSize"], small["PriorityFavorSmall"], small["PriorityWeightFairshare"]) == \
        (100000, True, 0)
    assert small["bf_window"] == running["bf_window"]  # the rest is the running config
    # Fairshare bounded to [5000, 100000] and bf_window pinned: small first keeps fair share at
    # its bound's low, deep backfill is the running config (dropped as a duplicate)
    sub = Subspace.of(pinned={"bf_window": 1440}, bounds={"PriorityWeightFairshare": (5000, 100000)},
                      start={"PriorityWeightFairshare": 10000})
    bounded = space.restrict(sub)
    small = overlay(bounded, bounded.default(), space.archetypes["small first"])
    assert small is not None and small["PriorityWeightFairshare"] == 5000 and small["bf_window"] == 1440
    names = [c.name for c in candidates(bounded, bounded.default(), [], None)]
    assert "deep backfill" in names  # (its other bf_* knobs still move)
    # the search's best and winners come before the archetypes; a duplicate keeps its first name
    best = {**running, "PriorityWeightAge": 5000}
    port = candidates(space, running, winners=[running, best], best=best)
    assert [c.name for c in port][:2] == ["running", "search's best"] and "winner 1" not in [c.name for c in port]


def test_where_fair_share_has_a_floor_the_archetypes_keep_it():
    space = get_policy("multifactor").space
    running = space.default()  # fair share 10,000 of weights up to 10,000: its fraction is 1
    rules = PolicyConstraints(fairshare_floor=0.5, weights=space.weights)
    port = {c.name: c.config for c in candidates(space, running, [], None, rules=rules)}
    # small first (job size 100,000, fair share 0) is raced as small first with fair share at
    # half of it, 50,000; age only (10,000) with 5,000; GPU first (GPU weight 10,000) with 5,000
    assert "small first" not in port and port["small first, fair share at the floor"]["PriorityWeightFairshare"] == 50000
    assert port["small first, fair share at the floor"]["PriorityWeightJobSize"] == 100000
    assert port["age only (FIFO), fair share at the floor"]["PriorityWeightFairshare"] == 5000
    assert port["GPU first, fair share at the floor"]["PriorityWeightFairshare"] == 5000
    # an archetype that keeps the floor, and the backfill corners, as they were
    assert port["fair-share heavy"]["PriorityWeightFairshare"] == 10000 and "deep backfill" in port
    assert all(not rules.config_violations(running, c) for c in port.values())
    # fair share's range caps it: a floor of 0.5 under a job-size weight of 100,000 with fair
    # share at most 20,000 scales the weights down together (job size 40,000, fair share 20,000)
    capped = space.restrict(Subspace.of(bounds={"PriorityWeightFairshare": (0, 20000)},
                                        start={"PriorityWeightFairshare": 10000}))
    small = within_rules(capped, rules, capped.default(), {**capped.default(), "PriorityWeightJobSize": 100000,
                                                            "PriorityFavorSmall": True, "PriorityWeightFairshare": 0})
    assert small is not None and (small["PriorityWeightJobSize"], small["PriorityWeightFairshare"]) == (40000, 20000)
    # a running config below the floor already is the floor: fair share at a quarter of job size
    # (10,000 of 40,000) lets small first keep a quarter, 25,000 of 100,000
    low = {**running, "PriorityWeightJobSize": 40000}
    small = within_rules(space, rules, low, {**low, "PriorityWeightJobSize": 100000, "PriorityWeightFairshare": 0})
    assert small is not None and small["PriorityWeightFairshare"] == 25000
    # without rules, the archetypes as they are
    assert "small first" in [c.name for c in candidates(space, running, [], None)]


def test_an_archetype_fitted_to_the_pins_alone_is_named_for_them():
    # the operator pins the job-size weight, the searched space does not: small first (job size
    # 100,000) gets it back at 1,000 and keeps fair share 0 (no floor); its name says so
    space = get_policy("multifactor").space
    running = space.default()
    rules = PolicyConstraints(pins=("PriorityWeightJobSize",), weights=space.weights)
    port = {c.name: c.config for c in candidates(space, running, [], None, rules=rules)}
    small = port["small first, the pins kept"]
    assert (small["PriorityWeightJobSize"], small["PriorityWeightFairshare"]) == (1000, 0)
    assert not any(name.endswith("fair share at the floor") for name in port)
    # with the floor too, both are named: fair share at half the largest weight left, the pinned
    # job size's 1,000
    both = PolicyConstraints(pins=("PriorityWeightJobSize",), fairshare_floor=0.5, weights=space.weights)
    port = {c.name: c.config for c in candidates(space, running, [], None, rules=both)}
    small = port["small first, fair share at the floor and the pins kept"]
    assert (small["PriorityWeightJobSize"], small["PriorityWeightFairshare"]) == (1000, 500)


def test_a_race_without_a_job_in_its_samples_keeps_the_running_config():
    port = [Candidate("running", {"name": "running"}), Candidate("A", {"name": "A"})]
    res = race(port, lambda a, b: [], lambda c, w: [], Budget(4, 8, 16), Guardrail(), NO_POLICY)
    assert res.leader is None and not res.verdict.deploy and res.samples == 0
    assert res.verdict.reason == "no job in the fresh samples of the coming period"


def test_budget_and_portfolio_are_checked():
    with pytest.raises(AdaptError, match="screen 5 <= decide 4"):
        Budget(5, 4, 8)
    with pytest.raises(AdaptError, match="starts with the running config"):
        race([Candidate("A", {})], lambda a, b: [0], lambda c, w: [sc(1.0)], Budget(1, 1, 1), Guardrail(), NO_POLICY)


def test_a_score_judges_the_jobs_the_config_decides_for():
    from autosched.adapt.scoring import score
    from autosched.cluster import ClusterSpec
    from autosched.trace import Trace

    # 1x4 under fifo: R (running at the round, submitted 60 s before it) holds the node 940-1040;
    # then Q (account a, 1 GPU, 50 s) 1040-1090 and P (account b, 4 GPUs, 10 s) 1090-1100.
    # Judged: Q and P (submitted at the round, 1000): JCT 90 and 100, waits 40 and 90.
    w = Trace.from_columns({"job_id": ["R", "Q", "P"], "submit_time": [940.0, 1000.0, 1000.0],
                            "num_gpus": [4, 1, 4], "duration": [100.0, 50.0, 10.0], "account": ["a", "a", "b"]})
    s = score(get_policy("fifo"), {}, w, ClusterSpec.uniform_nodes(1, 4), 1000.0, "avg_jct")
    assert (s.value, s.jobs) == (95.0, 2)
    assert (s.account_wait, s.account_jobs, s.account_usage) == ({"a": 40.0, "b": 90.0}, {"a": 1, "b": 1},
                                                                 {"a": 50.0, "b": 40.0})
    assert (s.size_p95_wait, s.size_jobs) == ({"1": 40.0, "2-4": 90.0}, {"1": 1, "2-4": 1})


def test_the_jobs_queued_at_the_round_may_wait_a_quarter_longer_in_all():
    # 2 jobs queued at the round wait 10 h in all under the running config: a quarter of it and
    # 10 minutes each, 2.5 h + 20 min, may be added. 12.8 h holds; 13 h does not.
    def queued(hours: float) -> Score:
        return replace(sc(1.0), queued_jobs=2, queued_wait=hours * 3600)

    policy = PolicyConstraints(account_tolerance=None, size_tolerance=None)
    run = ScoreSet((queued(10.0),))
    assert policy.check(run, ScoreSet((queued(12.8),)), {}, {}).holds
    check = policy.check(run, ScoreSet((queued(13.0),)), {}, {})
    assert check.violations == ("queue at the round: total wait 10 -> 13 h, more than the 3 h allowed",)
    (e,) = check.effects
    assert (e.kind, e.jobs, e.allowed) == ("queue", 2.0, 10 * 3600 * 0.25 + 2 * 600)
    # no queue: nothing to check
    assert policy.check(ScoreSet((sc(1.0),)), ScoreSet((sc(2.0),)), {}, {}).effects == ()


def test_the_queue_rule_asks_the_mean_added_wait_plus_a_standard_error():
    # 2 jobs queued wait 10 h under the running config in each of 4 samples; a candidate cuts
    # them to 8 h in three and stretches them to 20 h in one (a burst): added -2, -2, -2, +10 h,
    # mean +1 h, sd 6 h, standard error 3 h. The mean alone is within the 2 h 50 min allowed
    # (a quarter of 10 h, 10 minutes a job); the mean plus one standard error, 4 h, is not.
    def queued(hours: float) -> Score:
        return replace(sc(1.0), queued_jobs=2, queued_wait=hours * 3600)

    run = ScoreSet(tuple(queued(10.0) for _ in range(4)))
    burst = ScoreSet((queued(8.0), queued(8.0), queued(8.0), queued(20.0)))
    check = PolicyConstraints(account_tolerance=None, size_tolerance=None).check(run, burst, {}, {})
    assert check.violations == ("queue at the round: total wait 10 -> 14 h, more than the 3 h allowed",)
    (e,) = check.effects
    assert (e.running, e.allowed) == (36000.0, 10 * 3600 * 0.25 + 2 * 600)
    assert e.candidate == pytest.approx(14 * 3600.0)
    # k = 0: the mean alone (11 h) holds; k = 2: 10 + 1 + 6 h
    mean_only = PolicyConstraints(account_tolerance=None, size_tolerance=None, queue_k=0.0).check(run, burst, {}, {})
    assert mean_only.holds and mean_only.effects[0].candidate == pytest.approx(11 * 3600.0)
    two = PolicyConstraints(account_tolerance=None, size_tolerance=None, queue_k=2.0).check(run, burst, {}, {})
    assert two.effects[0].candidate == pytest.approx(17 * 3600.0)
    # the same added wait in every sample has no spread: the mean decides, as with one sample
    even = ScoreSet(tuple(queued(12.5) for _ in range(4)))
    assert PolicyConstraints(account_tolerance=None, size_tolerance=None).check(run, even, {}, {}).holds
    with pytest.raises(AdaptError, match=r"queue k must be a number >= 0"):
        PolicyConstraints(queue_k=-1.0)


def test_the_policy_of_a_cluster_with_an_association_tree():
    from autosched.adapt.config import LoopConfig
    from autosched.associations import Association
    from autosched.cluster import ClusterSpec

    tree = (Association("root"), Association("physics", "", "root", 60), Association("physics", "alice", "physics", 1),
            Association("chemistry", "", "root", 40), Association("chemistry", "bob", "chemistry", 1),
            Association("theory", "", "physics", 5))  # a sub-account: its share is among physics' own
    cluster = ClusterSpec.uniform_nodes(4, 8, associations=tree)
    policy = LoopConfig(policy="multifactor").constraints(cluster)
    # fair share is configured: its floor is half the largest weight; the shares are the top level's
    assert policy.fairshare_floor == 0.5 and dict(policy.shares) == {"physics": 60.0, "chemistry": 40.0}
    assert LoopConfig(policy="multifactor", fairshare_floor=0.0).constraints(cluster).fairshare_floor is None
    # no tree (a replayed trace): no floor unless given, equal shares
    plain = LoopConfig(policy="multifactor").constraints(ClusterSpec.uniform_nodes(4, 8))
    assert plain.fairshare_floor is None and dict(plain.shares) == {}
    assert LoopConfig(policy="multifactor", fairshare_floor=0.3).constraints(ClusterSpec.uniform_nodes(4, 8)) \
        .fairshare_floor == 0.3


SPACE = ConfigSpace([Int("w", "a weight", low=0, high=200000, default=1000),
                     Float("h", "a log knob", low=60.0, high=1e6, default=600.0, log=True),
                     Bool("b", "a flag"), Categorical("c", "a choice", choices=("a", "b"), default="a"),
                     Int("p", "held", low=0, high=10, default=5)])


def test_toward_moves_each_changed_knob_part_of_the_way():
    held = SPACE.restrict(Subspace.of(pinned={"p": 5}))
    running = {"w": 1000, "h": 600.0, "b": False, "c": "a", "p": 5}
    target = {"w": 101000, "h": 60000.0, "b": True, "c": "b", "p": 5}
    # halfway: the weight linearly (1000 + 100000 / 2), the log knob geometrically (sqrt(600 x
    # 60000) = 6000), the flag and the choice as the target has them, the pinned knob kept
    half = toward(held, running, target, 0.5)
    assert half == {"w": 51000, "h": pytest.approx(6000.0), "b": True, "c": "b", "p": 5}
    # a quarter: 1000 + 25000; 600 x 100 ** 0.25 = 1897.37
    assert toward(held, running, target, 0.25) == {"w": 26000, "h": pytest.approx(1897.366, abs=1e-3),
                                                     "b": True, "c": "b", "p": 5}
    # a knob the target leaves as it runs stays; an unchanged target gives the running config
    assert toward(held, running, {**running, "w": 3000}, 0.5) == {**running, "w": 2000}
    assert toward(held, running, running, 0.5) == running
    # a running config the space refuses (a pinned knob elsewhere) gives none
    assert toward(held, {**running, "p": 7}, target, 0.5) is None


def test_milder_variants_skip_the_running_config_and_the_candidate_itself():
    running = {"w": 1000, "h": 600.0, "b": False, "c": "a", "p": 5}
    variants = milder_variants(SPACE, running)
    got = variants(Candidate("small first", {**running, "w": 5000}))
    assert [(c.name, c.config["w"]) for c in got] == [("small first, halfway", 3000),
                                                       ("small first, a quarter of the way", 2000)]
    # a step of 1 rounds back to the running value (halfway: 1000.5 -> 1000) or to the candidate
    assert variants(Candidate("x", {**running, "w": 1001})) == []


def milder_race(wait_per_x: float, gain_per_x: float = 0.002):
    """A race on one knob x (0 running): a config with x scores 100 x (1 - gain_per_x x) on
    every sample, and makes account "chem" wait 600 + wait_per_x x s (the others 600)."""
    space = ConfigSpace([Int("x", "x", low=0, high=100, default=0)])

    def scorer(config, work):
        x = config["x"]
        return [sc(100.0 * (1 - gain_per_x * x), {"phys": 600.0, "chem": 600.0 + wait_per_x * x}) for _ in work]

    port = [Candidate("running", {"x": 0}), Candidate("A", {"x": 100})]
    return race(port, lambda start, count: list(range(start, min(start + count, 8))), scorer, Budget(4, 8, 8),
                Guardrail(1.0, 0.01), PolicyConstraints(size_tolerance=None),
                milder=milder_variants(space, {"x": 0}))


def test_race_screens_a_milder_variant_of_what_breaks_the_policy():
    # chem may wait 600 x 0.25 + 600 = 750 s longer. A (x = 100): 20% better, chem 600 -> 1800 s:
    # breaks. Halfway (x = 50): 10% better, 600 -> 1200 s: keeps; a quarter (x = 25): 5%, keeps.
    res = milder_race(wait_per_x=12.0)
    assert res.leader is not None and res.leader.name == "A, halfway" and res.leader.config == {"x": 50}
    assert res.verdict.deploy and res.verdict.gain == pytest.approx(0.10)
    # three configs compared: A and its two variants
    assert res.k == pytest.approx(multiple_k(1.0, 3))
    got = {s.name: (s.samples, s.dropped.split(":")[0]) for s in res.standings}
    assert got == {"A": (4, "breaks the policy on the first 4 samples"), "A, halfway": (8, ""),
                   "A, a quarter of the way": (8, "behind the leader")}
    # chem at 30 s per x: halfway waits 2100 s and breaks too; a quarter (1350 s, 750 more) keeps
    res = milder_race(wait_per_x=30.0)
    assert res.leader is not None and res.leader.name == "A, a quarter of the way"
    assert res.verdict.gain == pytest.approx(0.05)


def test_race_offers_no_milder_variant_of_a_candidate_short_of_the_margin():
    # A gains 0.5% (x = 100 at 0.005% per x) and breaks the policy: nothing milder is tried
    res = milder_race(wait_per_x=12.0, gain_per_x=0.00005)
    assert res.leader is None and [s.name for s in res.standings] == ["A"]
    assert res.k == 1.0


def reference_race(reference):
    """Running at x = 10, candidate A at x = 20; a config with x scores 100 (1 - 0.002 x) and
    makes account "chem" wait 600 + 40 x s. Returns the race and the samples each x was scored on."""
    space = ConfigSpace([Int("x", "x", low=0, high=100, default=0)])
    scored: dict[int, list[int]] = {}

    def scorer(config, work):
        scored.setdefault(config["x"], []).extend(work)
        return [sc(100.0 * (1 - 0.002 * config["x"]), {"phys": 600.0, "chem": 600.0 + 40.0 * config["x"]})
                for _ in work]

    port = [Candidate("running", {"x": 10}), Candidate("A", {"x": 20})]
    res = race(port, lambda start, count: list(range(start, min(start + count, 8))), scorer, Budget(4, 8, 8),
               Guardrail(1.0, 0.01), PolicyConstraints(size_tolerance=None),
               milder=milder_variants(space, {"x": 10}), reference=reference)
    return res, scored


def test_race_holds_a_candidate_to_the_policy_against_the_operators_config_too():
    # against the running config (x = 10, chem 1000 s) A's 1400 s is 400 s more, within 0.25 x
    # 1000 + 600 = 850: A leads, 96 against 98, +2.04%
    res, scored = reference_race(None)
    assert res.leader is not None and res.leader.name == "A" and res.verdict.gain == pytest.approx(2 / 98)
    assert 0 not in scored
    # the operator's config (x = 0, chem 600 s) allows 0.25 x 600 + 600 = 750 s more: A's 800
    # breaks it; halfway (x = 15, 1200 s: 600 more) keeps it, 97 against 98 (+1.02%); a quarter
    # (x = 12.5 -> 12, +0.41%) cannot reach the margin
    res, scored = reference_race({"x": 0})
    assert res.leader is not None and res.leader.name == "A, halfway" and res.verdict.deploy
    assert res.verdict.gain == pytest.approx(1 / 98)
    rows = {s.name: s.dropped for s in res.standings}
    assert rows["A"] == ("breaks the policy on the first 4 samples: against the operator's config: account chem: "
                         "average wait 10 -> 23 min, more than the 12 min allowed")
    assert rows["A, a quarter of the way"] == "cannot reach the margin on the first 4 samples"
    # the operator's config is scored on every sample the running config is
    assert scored[0] == scored[10] == list(range(8))
    assert res.check is not None and res.check.holds
    # a reference equal to the running config adds nothing
    res, scored = reference_race({"x": 10})
    assert res.leader is not None and res.leader.name == "A" and scored[10] == list(range(8))


def test_against_the_operators_config_a_change_back_toward_it_is_no_break():
    # the running config (x = 10) makes chem wait 1600 s where the operator's (x = 0) made it
    # wait 600: past the 750 s more allowed already. B (x = 8, 1400 s, 5% better) breaks the
    # policy against the operator's config too but less than the running config does: it may
    # lead. C (x = 12, 1800 s, 10% better) keeps it against the running config (200 s more of
    # 0.25 x 1600 + 600 allowed) and makes the operator's break worse: refused.
    value = {0: 110.0, 8: 95.0, 10: 100.0, 12: 90.0}

    def scorer(config, work):
        x = config["x"]
        return [sc(value[x], {"phys": 600.0, "chem": 600.0 + 100.0 * x}) for _ in work]

    port = [Candidate("running", {"x": 10}), Candidate("B", {"x": 8}), Candidate("C", {"x": 12})]
    res = race(port, lambda start, count: list(range(start, min(start + count, 8))), scorer, Budget(4, 8, 8),
               Guardrail(1.0, 0.01), PolicyConstraints(size_tolerance=None), reference={"x": 0})
    assert res.leader is not None and res.leader.name == "B" and res.verdict.gain == pytest.approx(0.05)
    rows = {s.name: s.dropped for s in res.standings}
    assert rows["C"] == ("breaks the policy on the first 4 samples: against the operator's config: account chem: "
                         "average wait 10 -> 30 min, more than the 12 min allowed")
