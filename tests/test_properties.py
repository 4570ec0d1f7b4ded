"""The property battery (`autosched.policies.battery`) on every built-in policy, each with the
same number of random cases a plugin's policy gets from `check_policy`.

For each run: no GPU is double-booked (per node, and per partition under 'count'), every job
completes exactly once, each job's run time is exactly its work (slowed when its GPUs span
nodes) plus the restart overhead of every resumption, and the same inputs give the same run.
`tests/test_battery.py` checks that the battery fails policies that break these rules or the
engine's contract.
"""

from __future__ import annotations

import random

import pytest

from autosched.policies import POLICIES, get_policy
from autosched.policies import battery as B

WEEK = 7 * 86400.0


def relevant_config(name: str):
    """A config draw whose knobs matter on traces of a few hundred seconds."""

    def draw(rng: random.Random) -> dict:
        cfg = get_policy(name).space.sample(rng)
        if name == "fifo":
            cfg["reserve_after"] = rng.choice([0.0, 30.0, WEEK])
        elif name == "tiresias":
            cfg.update(threshold=rng.choice([100.0, 300.0, 1000.0]), interval=rng.choice([0.0, 60.0]),
                       min_run=rng.choice([0.0, 50.0]), starvation=rng.choice([0.0, 0.5, 2.0]))
        elif name == "qssf":
            cfg.update(fallback=rng.choice([10.0, 100.0, 1000.0]), history=rng.choice([1, 3, 1000]))
        elif name == "multifactor":
            cfg.update(PriorityCalcPeriod=rng.choice([1, 2]), PriorityMaxAge=600.0,
                       PriorityDecayHalfLife=rng.choice([600.0, 3600.0]),
                       reserve_after=rng.choice([0.0, 30.0, WEEK]))
        return cfg

    return draw


NAMES = sorted(POLICIES)


@pytest.mark.parametrize("name", NAMES)
def test_declaration(name):
    B.check_declaration(get_policy(name))


@pytest.mark.parametrize("name", NAMES)
def test_invariants_and_reproducibility(name):
    B.check_invariants(get_policy(name), relevant_config(name))


@pytest.mark.parametrize("name", NAMES)
def test_invariants_hold_across_a_reconfiguration(name):
    B.check_reconfiguration(get_policy(name), relevant_config(name))


# Policies that, with 'count' placement, never leave a job waiting while it fits in the free
# GPUs (all their decisions are greedy over GPU counts, and they decide at every event).
GREEDY = {
    "fifo": {"backfill": True, "reserve_after": WEEK},
    "srtf": {},
    "tiresias": {"interval": 0.0},
    "qssf": {"preemptive": True},
    "multifactor": {"backfill": True, "reserve_after": WEEK},
}


@pytest.mark.parametrize("name", sorted(GREEDY))
def test_work_conservation(name):
    B.check_work_conservation(get_policy(name), GREEDY[name], relevant_config(name))


@pytest.mark.parametrize("name", [n for n in NAMES if not POLICIES[n].oracle])
def test_true_durations_do_not_change_decisions_before_the_job_ends(name):
    B.check_non_clairvoyance(get_policy(name), relevant_config(name))


def test_a_plugin_policy_gets_as_many_cases_as_a_builtin_one():
    # A policy from outside the registry, run through the public check, is drawn exactly as many
    # cases as the built-in one it copies is in the tests above (counted where each case's
    # config is drawn).
    drawn = {"plugin": 0, "fifo": 0}

    class Plugin(get_policy("fifo")):
        name = "plugin_fifo"

    def counting(key, draw):
        def count(rng):
            drawn[key] += 1
            return draw(rng)
        return count

    B.check_invariants(Plugin, counting("plugin", Plugin.space.sample))
    B.check_invariants(get_policy("fifo"), counting("fifo", relevant_config("fifo")))
    assert drawn == {"plugin": B.EXAMPLES, "fifo": B.EXAMPLES}
