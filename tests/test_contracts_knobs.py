"""`unit` is part of every knob's contract, and a knob pinned in live mode keeps it: the Slurm
converters spell a pinned time as Slurm does and read it back (real Multifactor knobs)."""

from __future__ import annotations

import dataclasses

import pytest

from autosched.export.slurm import from_slurm, quantize, to_slurm
from autosched.policies.multifactor import Multifactor
from autosched.space import Bool, Categorical, ConfigError, Knob, Subspace


def test_every_knob_declares_a_unit_keyword_only():
    unit = {f.name: f for f in dataclasses.fields(Knob)}["unit"]
    assert unit.default == "" and unit.kw_only
    assert Bool("b", "h").unit == "" and Categorical("c", "h", choices=("x",), default="x").unit == ""
    units = {k.name: k.unit for k in Multifactor.space}
    assert units["PriorityMaxAge"] == "s" and units["PriorityCalcPeriod"] == "min"
    assert units["bf_interval"] == "sec" and units["PriorityWeightAge"] == ""


def test_a_pinned_time_is_spelled_and_read_as_slurm_does():
    space = Multifactor.space.restrict(Subspace.of(pinned={"PriorityMaxAge": 7 * 86400.0}))
    p = space["PriorityMaxAge"]
    assert p.unit == "s" and space.pinned == {"PriorityMaxAge": 604800.0}
    # by hand: 604800 s = 7 days -> "7-0"; back, "7-0" is 7 * 86400 s
    assert to_slurm(Multifactor.space["PriorityMaxAge"], 604800.0) == to_slurm(p, 604800.0) == "7-0"
    assert from_slurm(p, "7-0") == 604800.0
    assert from_slurm(p, "7-00:00:00") == 604800.0  # as scontrol show config prints it
    assert quantize(p, 604800.0) == 604800.0
    with pytest.raises(ConfigError, match="held at 604800.0 in this search"):
        space.validate({"PriorityMaxAge": from_slurm(p, "6-0")})


def test_a_pinned_minutes_knob_keeps_its_unit():
    space = Multifactor.space.restrict(Subspace.of(pinned={"PriorityCalcPeriod": 5}))
    p = space["PriorityCalcPeriod"]
    assert p.unit == "min" and to_slurm(p, 5) == "5"
    assert from_slurm(p, "00:05:00") == 5  # scontrol prints minutes as a time


def test_the_fake_clusters_slurm_conf_is_the_multifactor_defaults_as_before():
    from autosched.live.fake import DEFAULT_BASE

    # what it was when it was written out by hand
    assert DEFAULT_BASE == {"PriorityWeightAge": "1000", "PriorityMaxAge": "7-0",
                            "PriorityWeightFairshare": "10000", "PriorityDecayHalfLife": "7-0",
                            "PriorityWeightJobSize": "1000", "PriorityFavorSmall": "NO",
                            "PriorityCalcPeriod": "5"}
    assert list(DEFAULT_BASE) == ["PriorityWeightAge", "PriorityMaxAge", "PriorityWeightFairshare",
                                  "PriorityDecayHalfLife", "PriorityWeightJobSize",
                                  "PriorityFavorSmall", "PriorityCalcPeriod"]
