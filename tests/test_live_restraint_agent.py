"""What holds the agent back, on the fake cluster: a config an operator rejected cools down, the
brake turns auto mode's apply into a proposal, and a proposal's evidence shows its portfolio."""

from __future__ import annotations

from autosched.live.records import Evidence, JudgedOutcome, RevisionKind, RevisionState
from autosched.live.round import Action
from live_helpers import make


def test_a_rejected_config_is_not_offered_again_within_the_cooldown(tmp_path):
    from autosched.adapt.portfolio import overlay

    agent, _ = make(tmp_path)
    base = agent.view.running_or_baseline()
    # an operator rejected "age only (FIFO)" laid over the running config, as Slurm would hold it
    space = agent.tuning.controller(base, agent.view.connector.setup()).searched
    fifo = overlay(space, agent.view.twin_space(agent.view.connector.setup()).full(base.config),
                   space.archetypes["age only (FIFO)"])
    assert fifo is not None
    rev = agent.store.create(agent.view.space.quantized(fifo), kind=RevisionKind.PROPOSAL, trigger="period",
                             actor="agent:propose", evidence=Evidence(predicted_gain=0.1), parent=base.id)
    agent.reject(rev.id, "operator:alice", "fair share is our contract")
    out = agent.step()
    ev = agent.store.get(out.revision).evidence if out.revision else out.evidence
    rows = {r["name"]: r for r in ev.portfolio}
    assert rows["age only (FIFO)"]["dropped"].startswith(f"rejected by operator:alice as revision {rev.id}; "
                                                        "not proposed again until "), rows
    assert rows["age only (FIFO)"]["samples"] == 0
    # with a cooldown of 0 it is raced again
    agent2, _ = make(tmp_path / "b", cooldown=0.0)
    base2 = agent2.view.running_or_baseline()
    rev2 = agent2.store.create(agent2.view.space.quantized(fifo), kind=RevisionKind.PROPOSAL, trigger="period",
                               actor="agent:propose", evidence=Evidence(predicted_gain=0.1), parent=base2.id)
    agent2.reject(rev2.id, "operator:alice")
    out2 = agent2.step()
    ev2 = agent2.store.get(out2.revision).evidence if out2.revision else out2.evidence
    assert not any(str(r["dropped"]).startswith("rejected") for r in ev2.portfolio)


def test_the_brake_turns_auto_mode_into_proposals(tmp_path):
    agent, _ = make(tmp_path, mode="auto")
    base = agent.view.running_or_baseline()
    # two earlier changes whose predictions overshot: +20% and +10% predicted, 0% and +2% judged
    for age, predicted, judged in ((5, 0.20, 0.0), (7, 0.10, 0.02)):
        rev = agent.store.create(dict(base.config, PriorityWeightAge=age), kind=RevisionKind.PROPOSAL,
                                 trigger="period", actor="agent:auto", evidence=Evidence(predicted_gain=predicted),
                                 parent=base.id)
        agent.store.record_outcome(rev.id, JudgedOutcome("avg_jct", predicted, "kept: ...", counterfactual_gain=judged))
        agent.store.transition(rev.id, RevisionState.REJECTED, actor="agent:auto", note="by hand")
    out = agent.step()
    assert out.action is Action.PROPOSED, out
    held = agent.store.get(out.revision).evidence.held
    assert held.startswith("brake: the last 2 changes' predictions overshot (revision 3: +10.0% predicted, "
                           "+2.0% judged; revision 2: +20.0% predicted, +0.0% judged)"), held
    assert "proposed, not applied: brake" in out.why
    assert agent.store.get(out.revision).events[0].actor == "agent:propose"


def test_a_proposals_evidence_shows_its_portfolio_and_the_status_says_it(tmp_path):
    from typer.testing import CliRunner

    from autosched.cli import build_app

    agent, _ = make(tmp_path)
    out = agent.step()
    ev = agent.store.get(out.revision).evidence
    assert ev.leader and ev.portfolio and ev.guard_k is not None
    lines = ev.portfolio_lines()
    assert lines[0].startswith(f"{ev.leader}: ") and lines[0].endswith("(the leader)")
    status = CliRunner().invoke(build_app(), ["agent", "status", "--state", str(agent.state_dir)]).output
    assert f"  portfolio: {lines[0]}" in status


def test_the_agent_holds_a_change_to_the_policy_against_the_operators_config(tmp_path):
    agent, _ = make(tmp_path)
    base = agent.view.running_or_baseline()
    setup = agent.view.connector.setup()
    full = agent.view.twin_space(setup).full
    # running a config of the agent's own (age weight 5): the controller's baseline stays the
    # config the agent found live
    mine = agent.store.create(dict(base.config, PriorityWeightAge=5), kind=RevisionKind.PROPOSAL, trigger="period",
                              actor="agent:propose", parent=base.id)
    ctl = agent.tuning.controller(mine, setup)
    assert ctl.running == full(mine.config) and ctl.baseline == full(base.config) != ctl.running
    assert agent.tuning.operator_config() == base
    # a hand edit the operator kept becomes the config the policy is held against
    kept = agent.store.create(dict(base.config, PriorityWeightAge=9), kind=RevisionKind.ADOPTED, trigger="adopted",
                              actor="operator:alice")
    assert agent.tuning.operator_config() == kept
    assert agent.tuning.controller(mine, setup).baseline == full(kept.config)
