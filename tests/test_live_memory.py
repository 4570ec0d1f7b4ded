"""The controller's memory and the operator's bounds, on the fake connector with the real tuner:
a memory edited or damaged in the store is dropped with one log line and the round goes on; a
bound added after some rounds (their winners outside it) never breaks tuning; an auto-mode
revision stays within every bound, also when the running value is outside one; and a maximum
step so small its range is one value tunes (nothing moves)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from autosched.live.agent import init_agent
from autosched.live.round import Action
from autosched.live.settings import AgentSettings
from live_helpers import make


def _edit_memory(agent, change) -> None:
    """Change the newest controller memory in the store as `change(memory dict)` says."""
    with sqlite3.connect(agent.store.path) as db:
        seq, text = db.execute("SELECT seq, memory FROM memory ORDER BY seq DESC LIMIT 1").fetchone()
        memory = json.loads(text)
        change(memory)
        db.execute("UPDATE memory SET memory = ? WHERE seq = ?", (json.dumps(memory), seq))


@pytest.fixture
def remembered(tmp_path):
    """An agent whose first round tuned (its memory is in the store), its proposal rejected."""
    agent, _ = make(tmp_path, budget=4)
    out = agent.step()
    assert agent.store.controller_memory() is not None, out
    if out.revision is not None:
        agent.reject(out.revision, "operator:test")
    return agent


DAMAGE = {
    "reference arrivals not a number": lambda m: m.__setitem__(
        "reference", {"start": 0, "end": 1, "arrivals": "abc", "log_durations": [], "gpu_mix": []}),
    "a prior trial not a trial": lambda m: m.__setitem__("prior", [[{"bogus": 1}]]),
    "a prior trial's metrics not metrics": lambda m: m["prior"][0][0].__setitem__(
        "metrics", [{"x": 1}]),
    "rounds below 0": lambda m: m.__setitem__("rounds", -5),
    "rounds beyond any seed": lambda m: m.__setitem__("rounds", 10**30),
    "a winner out of the knob's range": lambda m: m.__setitem__(
        "winners", [{"PriorityWeightAge": 10**12}]),
    "a winner of an unknown knob": lambda m: m.__setitem__("winners", [{"nosuch": 1}]),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_memory_is_dropped_and_the_round_goes_on(remembered, damage):
    """Each ended every round in a traceback (`agent run` exited) or in "tuning failed"."""
    agent = remembered
    said: list[str] = []
    agent.log = said.append
    _edit_memory(agent, DAMAGE[damage])
    out = agent.step()
    assert out.action in (Action.PROPOSED, Action.NONE), out
    assert any(m.startswith(f"{agent.store.path}: controller memory") and
               m.endswith("this round starts without it") for m in said), said
    # the round's own memory replaced it: the next round reads it again
    said.clear()
    agent.reject(out.revision, "operator:test") if out.revision else None
    assert agent.step().action in (Action.PROPOSED, Action.NONE)
    assert not any("without it" in m for m in said), said


def test_a_bound_added_after_rounds_whose_winners_lie_outside_it_tunes(remembered, tmp_path):
    """An earlier winner with fair share 0, then `--bound PriorityWeightFairshare=5000:100000`:
    every later round failed ("0 is outside its range [5000, ...]", exit 6)."""
    agent = remembered

    def winners_at_zero(m):
        m["winners"] = [{**w, "PriorityWeightFairshare": 0} for w in m["winners"]]
        for g in m["prior"]:
            for t in g:
                t["config"]["PriorityWeightFairshare"] = 0
    _edit_memory(agent, winners_at_zero)
    for mode in ("propose", "auto"):
        again = init_agent(agent.state_dir, AgentSettings(**{
            **agent.settings.__dict__, "mode": mode, "max_step": 0.25,
            "bounds": {"PriorityWeightFairshare": [5000.0, 100000.0]}}))
        out = again.step()
        assert out.action in (Action.PROPOSED, Action.APPLIED, Action.NONE), (mode, out)
        if out.revision is not None:
            rev = again.store.get(out.revision)
            assert 5000 <= rev.config["PriorityWeightFairshare"] <= 100000
            if mode == "propose":
                again.reject(rev.id, "operator:test")


@pytest.mark.parametrize("bound", [[2000.0, 3000.0], [1.0, 1.0]])
def test_auto_mode_applies_nothing_outside_a_bound(tmp_path, bound):
    """With the running PriorityWeightAge 1000 outside `--bound`, the applied revision kept 1000:
    a knob with no share of the gain went back to its running value."""
    agent, _ = make(tmp_path, mode="auto", budget=12, bounds={"PriorityWeightAge": bound})
    assert agent.step().action is Action.APPLIED
    age = agent.store.running().config["PriorityWeightAge"]
    assert bound[0] <= age <= bound[1], age


@pytest.mark.parametrize("step", [1e-300, 5e-324])
def test_a_step_too_small_to_move_tunes_and_moves_nothing(tmp_path, step):
    """Every round failed: "knob 'PriorityMaxAge': 604800 is outside its range [604800,
    604800]" (a range of one value searched on a log scale)."""
    agent, _ = make(tmp_path, mode="auto", max_step=step)
    out = agent.step()
    assert out.action is Action.NONE, out
