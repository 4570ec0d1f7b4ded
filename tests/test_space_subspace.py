"""`ConfigSpace.restrict` and `Subspace`: pinned knobs, bounds, start values, search ranges, and the
declarations a space makes about how to search it (worked by hand on a small space)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.space import Bool, Categorical, ConfigError, ConfigSpace, Float, Int, Subspace

SPACE = ConfigSpace([
    Categorical("placement", "where", choices=("consolidate", "spread"), default="consolidate"),
    Int("weight", "a weight", low=0, high=100000, default=1000),
    Float("age", "max age", low=600.0, high=5184000.0, default=604800.0, log=True, unit="s"),
    Int("interval", "seconds between cycles", low=1, high=10800, default=30, search=(10, 300)),
    Int("depth", "jobs looked at", low=1, high=1000000, default=500, log=True, search=(100, 5000)),
    Bool("flag", "a switch", default=False),
])


def test_a_search_range_is_searched_but_validation_accepts_the_whole_range():
    assert SPACE.validate({"interval": 10800})["interval"] == 10800
    assert SPACE["interval"].searched() == (10, 300) and SPACE["weight"].searched() == (0, 100000)
    assert "searched in [10, 300]" in SPACE["interval"].describe()
    rng = random.Random(0)
    for _ in range(200):
        c = SPACE.sample(rng)
        assert 10 <= c["interval"] <= 300 and 100 <= c["depth"] <= 5000


def test_a_search_range_must_hold_the_default_and_lie_in_the_range():
    with pytest.raises(ValueError, match="search range"):
        ConfigSpace([Int("x", "x", low=0, high=10, default=5, search=(6, 9))])
    with pytest.raises(ValueError, match="search range"):
        ConfigSpace([Int("x", "x", low=0, high=10, default=5, search=(0, 11))])


def test_pinned_knobs_are_held_and_their_value_is_the_default():
    space = SPACE.restrict(Subspace.of(pinned={"placement": "spread", "interval": 600}))
    assert space.pinned == {"placement": "spread", "interval": 600}
    assert space.default()["placement"] == "spread" and space.default()["interval"] == 600
    assert space["interval"].search is None  # a pinned value may lie outside the search range
    with pytest.raises(ConfigError, match=r"knob 'placement': held at 'spread' in this search \(got 'consolidate'\)"):
        space.validate({"placement": "consolidate"})
    assert space["age"].unit == "s"  # the knobs are the declared ones
    for c in (space.sample(random.Random(i)) for i in range(20)):
        assert c["placement"] == "spread" and c["interval"] == 600


def test_bounds_cut_the_range_and_the_search_range_and_keep_the_start_inside():
    space = SPACE.restrict(Subspace.of(bounds={"weight": (0, 5000), "interval": (100.5, 1000),
                                               "depth": (50, 200)},
                                       start={"weight": 7000, "age": 86400.0}))
    w, i, d = space["weight"], space["interval"], space["depth"]
    # the start 7000 lies outside (0, 5000): the range grows to hold it, and it is the default
    assert (w.low, w.high, w.default) == (0, 7000, 7000)
    # whole numbers inward (101..1000); searched where the search range (10..300) meets it
    assert (i.low, i.high, i.search) == (101, 1000, (101, 300))
    assert i.default == 101  # the default (30) moved into the searched range
    assert (d.low, d.high, d.search, d.log) == (50, 200, (100, 200), True)
    assert space.default()["age"] == 86400.0 and space["age"].low == 600.0  # a start alone keeps the range
    assert space.bounds == {"weight": (0.0, 5000.0), "interval": (100.5, 1000.0), "depth": (50.0, 200.0)}
    with pytest.raises(ConfigError, match="outside its range"):
        space.validate({"weight": 8000})


def test_a_restricted_space_is_part_of_the_declared_one():
    space = SPACE.restrict(Subspace.of(pinned={"flag": True}, bounds={"age": (3600, 7200)}))
    for c in (space.sample(random.Random(i)) for i in range(50)):
        assert SPACE.validate(c) == c and 3600 <= c["age"] <= 7200 and c["flag"] is True


@pytest.mark.parametrize("sub, message", [
    (Subspace.of(pinned={"nope": 1}), "unknown knob"),
    (Subspace.of(bounds={"flag": (0, 1)}), "bounds need a numeric knob"),
    (Subspace.of(pinned={"weight": 3}, bounds={"weight": (0, 5)}), "both pinned and searched"),
    (Subspace.of(pinned={"weight": -3}), "outside its range"),
    (Subspace.of(bounds={"weight": (9, 2)}), "are empty"),
])
def test_bad_subspaces_are_one_line_errors(sub, message):
    with pytest.raises(ConfigError, match=message):
        SPACE.restrict(sub)


def test_a_subspace_is_plain_sorted_data_and_gives_its_start_config():
    sub = Subspace.of(pinned={"flag": True, "placement": "spread"}, bounds={"weight": (0, 5)},
                      start={"weight": 2})
    assert sub == Subspace((("flag", True), ("placement", "spread")), (("weight", 0.0, 5.0),), (("weight", 2),))
    assert sub.config() == {"weight": 2, "flag": True, "placement": "spread"}
    assert hash(sub) == hash(Subspace.of(pinned={"placement": "spread", "flag": True},
                                         bounds={"weight": (0, 5)}, start={"weight": 2}))


def test_weight_and_archetype_declarations_are_checked():
    knobs = [Int("a", "a", low=0, high=100, default=1), Int("b", "b", low=0, high=50, default=1),
             Float("f", "f", low=0.0, high=1.0, default=0.5)]
    space = ConfigSpace(knobs, weights=("a", "b"), archetypes={"a only": {"a": 10, "b": 0}}, secondary=("f",))
    assert space.structured and space.weight_scale == (1.0, 50.0)  # up to the smallest maximum
    assert not ConfigSpace(knobs).structured
    with pytest.raises(ValueError, match="weights are unconditional Int knobs with low 0"):
        ConfigSpace(knobs, weights=("f",))
    with pytest.raises(ValueError, match="weight scale"):
        ConfigSpace(knobs, weights=("a", "b"), weight_scale=(1.0, 100.0))
    with pytest.raises(ConfigError, match="outside its range"):
        ConfigSpace(knobs, archetypes={"bad": {"b": 60}})
    with pytest.raises(ValueError, match="secondary knob"):
        ConfigSpace(knobs, secondary=("g",))


@settings(max_examples=60, deadline=None)
@given(lo=st.integers(0, 100000), width=st.integers(0, 100000), start=st.integers(0, 100000))
def test_bounds_with_a_start_always_hold_the_start(lo, width, start):
    space = SPACE.restrict(Subspace.of(bounds={"weight": (lo, lo + width)}, start={"weight": start}))
    w = space["weight"]
    assert w.low <= start <= w.high and space.default()["weight"] == start
    assert w.low >= 0 and w.high <= 100000
