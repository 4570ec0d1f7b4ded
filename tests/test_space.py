"""ConfigSpace: validation messages, knob=value parsing, sampling, JSON round trip."""

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.policies import POLICIES, get_policy
from autosched.space import Bool, Categorical, ConfigError, ConfigSpace, Float, Int, dump_config, parse_config_json

SPACE = ConfigSpace([
    Categorical("placement", "where", choices=("consolidate", "spread", "count"), default="consolidate"),
    Int("queues", "how many", low=1, high=6, default=3),
    Float("threshold", "first threshold", low=100.0, high=1e6, default=3250.0, log=True),
    Bool("backfill", "pass the head", default=False),
    Float("reserve_after", "guard", low=0.0, high=100.0, default=50.0, condition=("backfill", (True,))),
])


def test_default_and_validate_fill_in_defaults():
    assert SPACE.default() == {"placement": "consolidate", "queues": 3, "threshold": 3250.0,
                               "backfill": False, "reserve_after": 50.0}
    assert SPACE.validate({"queues": "4"})["queues"] == 4


@pytest.mark.parametrize("config, message", [
    ({"queues": 0}, "knob 'queues': 0 is outside its range [1, 6]"),
    ({"queues": 2.5}, "knob 'queues': 2.5 is not an integer"),
    ({"queues": "many"}, "knob 'queues': 'many' is not an integer"),
    ({"threshold": 5.0}, "knob 'threshold': 5 is outside its range [100, 1e+06]"),
    ({"threshold": "nan"}, "knob 'threshold': nan is outside its range"),
    ({"threshold": "x"}, "knob 'threshold': 'x' is not a number"),
    ({"backfill": "maybe"}, "knob 'backfill': 'maybe' is not a boolean (use true or false)"),
    ({"placement": "random"}, "knob 'placement': 'random' is not one of consolidate, spread, count"),
    ({"qeues": 2}, "unknown knob(s) qeues; known: placement, queues, threshold, backfill, reserve_after"),
])
def test_validation_messages(config, message):
    with pytest.raises(ConfigError) as err:
        SPACE.validate(config)
    assert message in str(err.value)


def test_bool_spellings():
    for text in ("true", "1", "yes", "on", "TRUE", True):
        assert SPACE.validate({"backfill": text})["backfill"] is True
    for text in ("false", "0", "no", "off", False):
        assert SPACE.validate({"backfill": text})["backfill"] is False


def test_parse_assignments():
    cfg = SPACE.parse_assignments(["queues=2", " threshold = 1e4", "backfill=yes"])
    assert cfg == {**SPACE.default(), "queues": 2, "threshold": 10000.0, "backfill": True}
    # applied over a base config; later assignments win
    base = SPACE.validate({"placement": "count"})
    assert SPACE.parse_assignments(["queues=5", "queues=6"], base)["queues"] == 6
    assert SPACE.parse_assignments([], base)["placement"] == "count"


@pytest.mark.parametrize("item, message", [
    ("queues", "'queues' is not of the form knob=value"),
    ("=3", "'=3' is not of the form knob=value"),
    ("depth=3", "unknown knob 'depth'; known: placement, queues"),
    ("queues=9", "knob 'queues': 9 is outside its range [1, 6]"),
])
def test_parse_assignment_errors(item, message):
    with pytest.raises(ConfigError) as err:
        SPACE.parse_assignments([item])
    assert message in str(err.value)


def test_conditional_knobs():
    assert SPACE.active({**SPACE.default(), "backfill": False}) == {
        "placement": "consolidate", "queues": 3, "threshold": 3250.0, "backfill": False}
    assert "reserve_after" in SPACE.active({**SPACE.default(), "backfill": True})


def test_bad_declarations_fail_at_construction():
    with pytest.raises(ValueError, match="duplicate"):
        ConfigSpace([Int("a", "", low=0, high=1), Int("a", "", low=0, high=1)])
    with pytest.raises(ValueError, match="unknown knob 'nope'"):
        ConfigSpace([Int("a", "", low=0, high=1, condition=("nope", (1,)))])
    with pytest.raises(ConfigError):
        ConfigSpace([Int("a", "", low=1, high=2, default=5)])


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_samples_are_valid_and_in_range(seed):
    rng = random.Random(seed)
    for cls in POLICIES.values():
        cfg = cls.space.sample(rng)
        assert cls.space.validate(cfg) == cfg
        for knob in cls.space:
            v = cfg[knob.name]
            if isinstance(knob, (Int, Float)):
                assert knob.low <= v <= knob.high
                assert isinstance(v, int) if isinstance(knob, Int) else isinstance(v, float)
            elif isinstance(knob, Categorical):
                assert v in knob.choices


def test_log_scale_samples_spread_over_decades():
    knob = SPACE["threshold"]
    xs = [knob.sample(random.Random(i)) for i in range(400)]
    below = sum(x < 1e4 for x in xs) / len(xs)  # log-uniform on [1e2, 1e6]: half below 1e4
    assert 0.4 < below < 0.6


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_json_round_trip(name):
    space = get_policy(name).space
    cfg = space.sample(random.Random(7))
    text = dump_config(name, cfg)
    policy, knobs = parse_config_json(text, "cfg.json")
    assert policy == name
    assert space.validate(knobs) == cfg
    assert json.loads(text) == {"policy": name, "knobs": cfg}


def test_parse_config_json_accepts_a_bare_object():
    assert parse_config_json('{"queues": 2}') == (None, {"queues": 2})


@pytest.mark.parametrize("text, message", [
    ("{", "cfg.json: not valid JSON (line 1, column 2"),
    ("[1, 2]", "cfg.json: expected a JSON object"),
    ('{"policy": "fifo", "knobs": [1]}', "cfg.json: 'knobs' must be a JSON object"),
])
def test_parse_config_json_errors(text, message):
    with pytest.raises(ConfigError) as err:
        parse_config_json(text, "cfg.json")
    assert message in str(err.value)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_declares_placement_and_help(name):
    cls = get_policy(name)
    # (multifactor adds first_fit, the way Slurm's select plugin places jobs)
    assert cls.space["placement"].choices[:3] == ("consolidate", "spread", "count")
    assert all(k.help for k in cls.space)
    assert cls.summary and cls.__doc__


def test_issue_knob_names_are_kept():
    names = {n: set(get_policy(n).space.names) for n in POLICIES}
    assert {"backfill", "reserve_after"} <= names["fifo"]
    assert {"queues", "threshold", "threshold_growth", "starvation", "min_run", "interval"} <= names["tiresias"]
    assert {"estimator", "history", "fallback", "preemptive"} <= names["qssf"]
    assert {"PriorityWeightAge", "PriorityMaxAge", "PriorityWeightFairshare", "PriorityDecayHalfLife",
            "PriorityWeightJobSize", "PriorityFavorSmall", "PriorityCalcPeriod", "backfill"} <= names["multifactor"]
