"""The smallest change that carries the gain: a winner's knobs that carry none of its predicted
gain go back to their running values before it is proposed (adapt/guardrail.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.adapt.guardrail import paired_gain, smallest_change


def linear(weights):
    """A metric (lower is better) on two workloads: each knob lowers it by its weight."""
    def score(config):
        drop = sum(weights[k] * v for k, v in config.items())
        return [100 - drop, 200 - 2 * drop]
    return score


def test_a_knob_that_carries_no_gain_is_put_back_and_the_others_get_their_shares():
    score = linear({"a": 10, "b": 5, "c": 0})
    running, cand = {"a": 0, "b": 0, "c": 0}, {"a": 1, "b": 1, "c": 1}
    calls = []

    def counted(config):
        calls.append(dict(config))
        return score(config)

    red = smallest_change(running, cand, score(running), score(cand), counted)
    # gain: (15/100 + 30/200) / 2 = 0.15; a back: 0.05, b back: 0.10, c back: 0.15 (dropped)
    assert red.config == {"a": 1, "b": 1, "c": 0} and red.dropped == ("c",)
    assert red.gain == pytest.approx(0.15) and red.values == (85, 170)
    assert red.shares == pytest.approx({"a": 2 / 3, "b": 1 / 3})
    # a, b and c back once each; the kept knobs' shares reuse those scores (same configs)
    assert len(calls) == 5


def test_a_knob_kept_early_goes_back_once_the_others_have():
    # gains by (a, b, c), one workload at 100 s for the running config (0, 0, 0):
    #   (1,1,1) 10%; pass 1: a back -> (0,1,1) 9%: a stays; b back -> (1,0,1) 10%: b goes;
    #   c back -> (1,0,0) 9%: c stays. Pass 2 from (1,0,1): a back -> (0,0,1) 10%: a goes too;
    #   c back -> (0,0,0) 0%: c stays. Left: c alone, which carries the whole gain.
    gains = {(1, 1, 1): 0.10, (0, 1, 1): 0.09, (1, 0, 1): 0.10, (1, 0, 0): 0.09, (0, 0, 1): 0.10,
             (0, 0, 0): 0.0}

    def score(config):
        return [100 * (1 - gains[(config["a"], config["b"], config["c"])])]

    red = smallest_change({"a": 0, "b": 0, "c": 0}, {"a": 1, "b": 1, "c": 1}, [100.0], [90.0], score)
    assert red.config == {"a": 0, "b": 0, "c": 1} and red.dropped == ("b", "a")
    assert red.shares == pytest.approx({"c": 1.0})


def test_an_adopted_value_the_winner_undoes_for_nothing_stays():
    # after an adopt, PriorityWeightAge runs at 7; the winner moves it back to 1000 for nothing
    score = linear({"PriorityWeightAge": 0, "PriorityWeightJobSize": 0.01})
    running = {"PriorityWeightAge": 7, "PriorityWeightJobSize": 0}
    cand = {"PriorityWeightAge": 1000, "PriorityWeightJobSize": 500}
    red = smallest_change(running, cand, score(running), score(cand), score)
    assert red.config == {"PriorityWeightAge": 7, "PriorityWeightJobSize": 500}
    assert red.dropped == ("PriorityWeightAge",) and red.shares == {"PriorityWeightJobSize": 1.0}


def test_a_config_the_score_cannot_judge_keeps_its_knob():
    score = linear({"a": 10, "b": 0})
    running, cand = {"a": 0, "b": 0}, {"a": 1, "b": 1}
    red = smallest_change(running, cand, score(running), score(cand),
                          lambda c: None if c["b"] == 0 else score(c))
    assert red.config == cand and red.dropped == () and set(red.shares) == {"a"}


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from("abcdef"), st.integers(-3, 3), min_size=1))
def test_the_cut_never_loses_gain_and_changes_only_knobs_the_winner_changed(weights):
    score = linear(weights)
    running = {k: 0 for k in weights}
    cand = {k: 1 for k in weights}
    red = smallest_change(running, cand, score(running), score(cand), score)
    assert red.gain >= paired_gain(score(running), score(cand)) - 1e-12
    assert all(red.config[k] in (running[k], cand[k]) for k in weights)
    kept = {k for k in weights if red.config[k] != running[k]}
    assert kept == set(red.shares) or red.gain == 0
    # every knob whose own effect is nil or harmful goes back
    assert all(red.config[k] == 0 for k, w in weights.items() if w <= 0)
