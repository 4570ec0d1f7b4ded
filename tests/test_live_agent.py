"""The agent's logic with the fake connector (unit tests; the same paths run against a real
slurmctld in test_live_slurm.py): propose, approve, reject, rollback, freeze, hand edits, too
little history, Slurm down, failed applies, auto mode, automatic rollback, kill -9 mid-apply."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from autosched.errors import AutoschedError
from autosched.live.agent import AgentSettings, init_agent, open_agent, start_agent
from autosched.live.errors import ActionNotAllowed, ApplyFailed, LiveError, SlurmUnavailable
from autosched.live.fake import FakeConnector
from autosched.live.judge import JITTERS
from autosched.live.records import Evidence, RevisionKind, RevisionState
from autosched.live.round import Action
from live_helpers import (
    HEADER,
    PINNED_NOW,
    SMALL_FIRST,
    FakeTime,
    apply_change,
    contended,
    leave_an_apply_open,
    make,
    period_rows,
    proposed,
    replay_gains,
    row,
)

SRC = str(Path(__file__).resolve().parents[1] / "src")
P, A, R, RB, F = (RevisionState.PROPOSED, RevisionState.APPLIED, RevisionState.REJECTED,
                  RevisionState.ROLLED_BACK, RevisionState.FAILED)


def test_propose_then_approve_writes_the_include_file_and_goes_live(tmp_path):
    agent, fake = make(tmp_path)
    rev = proposed(agent)
    assert rev.id == 2 and rev.parent == 1 and agent.store.get(1).kind is RevisionKind.BASELINE
    assert rev.kind is RevisionKind.PROPOSAL and rev.trigger == "period"
    assert rev.evidence.predicted_gain > 0 and rev.evidence.samples == 1
    assert rev.evidence.tuning_cost["trials"] == 12
    assert fake.state()["live"] == fake.state()["base"]  # proposing applies nothing
    assert not fake.include.exists()
    # a second round does not stack a second proposal
    assert agent.step().why == "revision 2 is proposed and awaits approval"
    agent.approve(2, "operator:alice")
    live = fake.state()["live"]
    want = agent.space.to_settings(agent.space.full(rev.config))
    assert {k: live[k] for k in want} == want
    # the header names the revision and the store that wrote it, then the settings
    assert fake.include.read_text().splitlines() == [
        "# revision 2 (period)", f"# store: {agent.store.path}",
        *(f"{k}={v}" for k, v in want.items())]
    assert agent.store.running().id == 2
    assert [(e.state, e.actor) for e in agent.store.get(2).events] == [
        (P, "agent:propose"), (A, "operator:alice")]
    with pytest.raises(ActionNotAllowed, match="revision 2 is applied; only a proposed"):
        agent.approve(2, "operator:bob")
    # at most one change per period
    assert "at most one change per period" in agent.step().why


def test_reject_and_rollback_to_any_earlier_revision(tmp_path):
    agent, fake = make(tmp_path)
    rev = proposed(agent)
    agent.reject(rev.id, "operator:bob", "not on a Friday")
    assert agent.store.get(rev.id).state is R and agent.store.get(rev.id).events[-1].note == "not on a Friday"
    with pytest.raises(ActionNotAllowed, match="nothing to roll back to"):
        agent.rollback(None, "operator:bob")
    base = dict(fake.state()["live"])
    cfg = dict(agent.store.get(1).config, PriorityWeightAge=4242)
    p = agent.store.create(cfg, trigger="manual", actor="t")
    agent.approve(p.id, "operator:bob")
    assert fake.state()["live"]["PriorityWeightAge"] == "4242"
    back = agent.rollback(None, "operator:bob")
    assert back.trigger == "rollback to 1" and back.state is A and back.parent == p.id
    assert back.kind is RevisionKind.ROLLBACK and back.evidence == Evidence(rollback_of=p.id, to=1)
    assert agent.store.get(p.id).state is RB
    assert {k: fake.state()["live"][k] for k in base} == base
    again = agent.rollback(p.id, "operator:bob")  # forward again to a rolled-back revision
    assert again.config == p.config and fake.state()["live"]["PriorityWeightAge"] == "4242"
    with pytest.raises(ActionNotAllowed, match="never applied"):
        agent.rollback(rev.id, "operator:bob")


def test_too_little_history_proposes_nothing_and_says_so(tmp_path):
    now = time.time()
    text = "\n".join([HEADER] + [row(str(i), now - 900 + i, now - 800 + i, now - 700 + i, 1)
                                  for i in range(1, 4)]) + "\n"
    agent, _ = make(tmp_path, sacct=text)
    out = agent.step()
    assert out.action is Action.BLOCKED and out.retry_after is None and out.exit_code == 5
    assert out.why.startswith("too little history: 3 jobs finished in the last 1h (3600 s), 10 needed")
    assert agent.store.pending() is None and agent.status().blocked == out.why


def test_hand_edit_blocks_until_adopted(tmp_path):
    agent, fake = make(tmp_path)
    agent.step()  # baseline + proposal
    fake.hand_edit("PriorityWeightAge", "7")
    with pytest.raises(ActionNotAllowed, match="PriorityWeightAge is 7 live, 1000 in revision 1"):
        agent.approve(2, "operator:alice")
    agent.reject(2, "operator:alice")
    out = agent.step()
    assert out.action is Action.BLOCKED and out.why.startswith(
        "hand edit: PriorityWeightAge is 7 live, 1000 in revision 1")
    assert out.retry_after is None and out.exit_code == 5
    assert agent.status().blocked == out.why and agent.store.pending() is None
    rev = agent.adopt("operator:alice")
    assert rev.kind is RevisionKind.ADOPTED and rev.trigger == "adopted"
    assert rev.config["PriorityWeightAge"] == 7 and rev.diff == {"PriorityWeightAge": (1000, 7)}
    assert agent.status().blocked == ""
    # an adopt changed the live config: the agent waits a period before it proposes again
    out = agent.step()
    assert out.action is Action.WAIT and "at most one change per period" in out.why


def test_freeze_is_a_kill_switch_but_rollback_still_works(tmp_path):
    agent, fake = make(tmp_path)
    p = agent.store.create(dict(agent.view.running_or_baseline().config, PriorityWeightAge=5),
                           trigger="manual", actor="t")
    agent.approve(p.id, "operator:alice")
    agent.freeze("operator:alice", "maintenance")
    out = agent.step()
    summary = out.to_summary()
    assert 0 <= summary.pop("seconds") < 30  # how long the round took
    assert summary == {"trigger": "period", "action": "frozen",
                       "why": "frozen by operator:alice: maintenance"}
    assert out.exit_code == 3
    st = agent.status()
    assert st.frozen and st.frozen_reason == "maintenance" and st.frozen_by == "operator:alice"
    q = agent.store.create(dict(p.config, PriorityWeightAge=6), trigger="manual", actor="t")
    with pytest.raises(ActionNotAllowed, match="frozen by operator:alice: maintenance"):
        agent.approve(q.id, "operator:alice")
    back = agent.rollback(None, "operator:alice")
    assert fake.state()["live"]["PriorityWeightAge"] == "1000" and back.state is A
    assert agent.store.get(q.id).state is R  # the open proposal was superseded
    agent.unfreeze("operator:bob")
    assert not agent.status().frozen


def test_slurm_down_blocks_and_never_applies_blind(tmp_path):
    agent, fake = make(tmp_path)
    rev = proposed(agent)
    fake.update(down=True)
    out = agent.step()
    assert out.action is Action.BLOCKED and out.why.startswith("Slurm does not answer:")
    assert out.retry_after == 30.0 and out.exit_code == 4
    assert "scontrol show config" in out.why and agent.status().blocked == out.why
    with pytest.raises(SlurmUnavailable, match="scontrol show config"):
        agent.approve(rev.id, "operator:alice")
    assert not fake.include.exists() and agent.store.get(rev.id).state is P
    assert agent.store.open_apply() is None
    fake.update(down=False)
    agent.approve(rev.id, "operator:alice")
    assert agent.store.running().id == rev.id


@pytest.mark.parametrize("fault", ["fail_reconfigure", "ignore"])
def test_failed_apply_restores_the_previous_file_and_marks_the_revision_failed(tmp_path, fault):
    agent, fake = make(tmp_path)
    first = agent.store.create(dict(agent.view.running_or_baseline().config, PriorityWeightAge=11),
                               trigger="manual", actor="t")
    agent.approve(first.id, "operator:alice")
    before_file, before_live = fake.include.read_text(), dict(fake.state()["live"])
    fake.update(**({"fail_reconfigure": True} if fault == "fail_reconfigure"
                   else {"ignore": ["PriorityWeightJobSize"]}))
    p = agent.store.create(dict(first.config, PriorityWeightAge=22, PriorityWeightJobSize=33),
                           trigger="manual", actor="t")
    msg = "fake failure" if fault == "fail_reconfigure" else \
        r"PriorityWeightJobSize=1000 \(wanted '33'\)"
    with pytest.raises(ApplyFailed, match=msg):
        agent.approve(p.id, "operator:alice")
    assert fake.include.read_text() == before_file and fake.state()["live"] == before_live
    rev = agent.store.get(p.id)
    assert rev.state is F and "previous" in rev.events[-1].note
    assert agent.store.running().id == first.id and agent.store.open_apply() is None


def test_unwritable_include_file_is_a_clear_error_and_nothing_is_lost(tmp_path):
    agent, fake = make(tmp_path)
    p = agent.store.create(dict(agent.view.running_or_baseline().config, PriorityWeightAge=9),
                           trigger="manual", actor="t")
    fake.include.mkdir()  # a directory where the file should be: fails for root too
    with pytest.raises(LiveError, match="autosched.conf: cannot"):
        agent.approve(p.id, "operator:alice")
    assert agent.store.get(p.id).state in (P, F) and agent.store.running().id == 1
    assert fake.state()["live"]["PriorityWeightAge"] == "1000"


def test_unwritable_state_dir_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("")
    FakeConnector.create(tmp_path / "fake")
    with pytest.raises(LiveError, match="cannot write the agent's settings"):
        init_agent(tmp_path / "file" / "state", AgentSettings(
            connector={"kind": "fake", "directory": str(tmp_path / "fake")}))


def test_malformed_sacct_rows_are_skipped_and_counted(tmp_path):
    text = contended(PINNED_NOW)
    text += "999|not-a-time|x|y|gres/gpu=1|gres/gpu=1|a|b|gpu|COMPLETED|j|1|1\n"
    text += "1000|2026-01-01T00:00:00\n"  # a partial row
    agent, _ = make(tmp_path, sacct=text, pin=PINNED_NOW)
    out = agent.step()
    assert out.history.malformed_rows == 2 and out.action is Action.PROPOSED


def test_auto_mode_applies_within_bounds_and_one_step(tmp_path):
    agent, fake = make(tmp_path, mode="auto", max_step=0.1,
                       bounds={"PriorityWeightAge": [0, 1500]})
    out = agent.step()
    assert out.action is Action.APPLIED, out
    rev = agent.store.get(out.revision)
    assert [(e.state, e.actor) for e in rev.events] == [(P, "agent:auto"), (A, "agent:auto")]
    base = agent.store.get(1).config
    space = agent.space
    for k in space.managed:
        if hasattr(k, "low"):
            v, old = rev.config[k.name], base[k.name]
            if k.log:
                import math
                f = math.exp(0.1 * math.log(k.high / k.low))
                assert old / f - 60 <= v <= old * f + 60, k.name  # +- a minute of rounding
            else:
                assert abs(v - old) <= 0.1 * (k.high - k.low) + 1e-9, k.name
    assert rev.config["PriorityWeightAge"] <= 1500
    assert fake.state()["live"]["PriorityWeightAge"] == str(rev.config["PriorityWeightAge"])


def test_a_change_that_helped_in_the_counterfactual_is_kept(tmp_path):
    agent, fake = make(tmp_path)
    at = apply_change(agent, SMALL_FIRST)
    fake.update(sacct=period_rows(int(at), small_first=True), clock=at + 700)
    agent.step()
    rev = agent.store.running()
    o = rev.outcome
    assert rev.id == 2 and rev.state is A
    # on the recorded times (500 - 366.7) / 500 = +26.7%, and the twin replays what the cluster
    # did: error 0. No two jobs arrive within seconds of each other, so a copy keeps their order:
    # its arrivals move by under 0.5 s, and each start and end by about a second at most (the
    # next tick of slurmctld's once-a-second loop): the copies' average JCTs move by as little,
    # and the gain by well under 0.5%
    assert (o.realized["avg_jct"], o.simulated_new["avg_jct"]) == (pytest.approx(1100 / 3),) * 2
    assert o.simulated_old["avg_jct"] == pytest.approx(500.0)
    assert (o.replays, len(o.copies)) == (JITTERS + 1, JITTERS)
    assert o.counterfactual_gain == pytest.approx(np.mean(replay_gains(o)))
    assert (o.predicted_gain, o.counterfactual_gain) == (0.1, pytest.approx(0.8 / 3, abs=0.005))
    assert o.twin_error < 0.005
    assert o.verdict.startswith("kept: avg_jct 500.0 -> 366.7 s in the twin on the recorded times "
                                f"(+26.7%), {o.counterfactual_text()} with submit times jittered (judged 3 "
                                "jobs: 3 finished, 0 censored at ") and "); twin error 0." in o.verdict
    assert o.verdict.endswith("% (mean of 5 replays)")
    assert o.period == {"start": at, "end": at + 600, "running_at_change": 1, "queued_at_change": 1,
                        "imputed": 0}


def test_a_change_that_did_worse_in_the_counterfactual_is_rolled_back(tmp_path):
    agent, fake = make(tmp_path)
    apply_change(agent, SMALL_FIRST)
    at = apply_change(agent, agent.store.get(1).config)  # back to the baseline's weights
    fake.update(sacct=period_rows(int(at), small_first=False), clock=at + 700)
    out = agent.step()
    assert out.action is Action.ROLLED_BACK, out
    rev = agent.store.get(3)
    # (366.7 - 500) / 366.7 = -36.4% on the recorded times (the jittered copies within 0.5% of
    # it, as above), beyond the margin (0 here); the twin was exact on the recorded times
    assert rev.state is RB and rev.outcome.counterfactual_gain == pytest.approx(-4 / 11, abs=0.005)
    assert rev.outcome.twin_error < 0.005
    assert out.why.startswith("worse: avg_jct 366.7 -> 500.0 s in the twin on the recorded times (-36.4%)")
    back = agent.store.running()
    assert back.trigger == "rollback to 2" and back.events[-1].actor == "agent:guard"
    assert fake.state()["live"]["PriorityWeightJobSize"] == "100000"


def test_a_twin_that_missed_the_period_freezes_the_agent_and_changes_nothing(tmp_path):
    agent, fake = make(tmp_path)
    at = apply_change(agent, SMALL_FIRST)
    # the cluster did not run small first (as if the change had not taken): the twin under the
    # change says 366.7 s on the recorded times (the copies within a few seconds of it), the
    # cluster had 500 s: error 26.7% (within 0.5% of it on average), over the 25% limit
    fake.update(sacct=period_rows(int(at), small_first=False), clock=at + 700)
    out = agent.step()
    assert out.action is Action.FROZEN and out.exit_code == 3
    flags = agent.store.flags()
    assert flags.frozen and flags.frozen_by == "agent:judge" and flags.frozen_reason == out.why
    rev = agent.store.running()
    assert rev.id == 2 and rev.outcome.twin_error == pytest.approx(0.8 / 3, abs=0.005)
    assert out.why.startswith(f"twin not trusted: it missed the cluster's 500.0 s by "
                              f"{rev.outcome.twin_error:.1%} on average over 5 replays (avg_jct, "
                              "over the 25% limit)")
    assert fake.state()["live"]["PriorityWeightJobSize"] == "100000"  # nothing rolled back
    # frozen, the next round does nothing; unfrozen, the untrusted period decides nothing later
    assert agent.step().action is Action.FROZEN
    agent.unfreeze("operator:bob")
    assert agent.step().action is not Action.ROLLED_BACK and agent.store.running().id == 2


def test_status_to_dict_is_json(tmp_path):
    agent, _ = make(tmp_path)
    agent.step()
    d = agent.status().to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["pending"]["id"] == 2 and d["running"]["id"] == 1 and d["mode"] == "propose"
    assert d["next_round"] == pytest.approx(d["history"][0]["created"] + 600, abs=5)


def test_open_agent_reads_the_saved_settings(tmp_path):
    agent, _ = make(tmp_path, period=120)
    again = open_agent(tmp_path / "state")
    assert again.settings == agent.settings and again.connector.kind == "fake"
    with pytest.raises(LiveError, match="no agent here"):
        open_agent(tmp_path / "nothing")


APPROVER = """
import sys
from autosched.live.agent import open_agent
open_agent(sys.argv[1]).approve(int(sys.argv[2]), "operator:killed")
"""


def test_kill_9_during_an_apply_leaves_old_or_new_never_half(tmp_path):
    agent, fake = make(tmp_path)
    p = agent.store.create(dict(agent.view.running_or_baseline().config, PriorityWeightAge=31337),
                           trigger="manual", actor="t")
    old_live = dict(fake.state()["live"])
    fake.update(apply_delay=30.0)  # the fake sleeps between writing the file and reconfiguring
    proc = subprocess.Popen([sys.executable, "-c", APPROVER, str(tmp_path / "state"), str(p.id)],
                            env={**os.environ, "PYTHONPATH": SRC})
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            if fake.include.exists() and "31337" in fake.include.read_text():
                break
            time.sleep(0.05)
        else:
            pytest.fail("the apply never wrote the include file")
        assert agent.store.open_apply() is not None  # the write-ahead intent is there
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    fake.update(apply_delay=0.0)
    # the half state the kill left: file new, Slurm old, store 'applying'
    assert fake.state()["live"] == old_live
    restarted = start_agent(tmp_path / "state")  # reconciles on start
    assert restarted.store.open_apply() is None
    rev = restarted.store.get(p.id)
    assert rev.state is F and "interrupted" in rev.events[-1].note
    assert restarted.store.running().id == 1
    assert not fake.include.exists()  # there was none before: back to that
    assert fake.state()["live"] == old_live
    assert restarted.step().action in (Action.PROPOSED, Action.NONE)  # and it goes on


def test_a_sacct_export_seeds_the_history(tmp_path):
    seed = tmp_path / "old.txt"
    seed.write_text(contended(PINNED_NOW))  # what the cluster no longer reports
    agent, _ = make(tmp_path, sacct=HEADER + "\n", pin=PINNED_NOW, seed_history=str(seed))
    out = agent.step()
    assert out.history.jobs == 60 and out.action is Action.PROPOSED
    # init refuses a seed history that is not sacct text; one that became so later blocks the round
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_time,num_gpus,duration\n1,0,1,10\n")
    with pytest.raises(LiveError, match="a seed history must be sacct text"):
        make(tmp_path / "b", sacct=HEADER + "\n", seed_history=str(bad))
    assert not (tmp_path / "b" / "state").exists()
    bad.write_text(contended(PINNED_NOW))
    agent2, _ = make(tmp_path / "c", sacct=HEADER + "\n", seed_history=str(bad))
    bad.write_text("job_id,submit_time,num_gpus,duration\n1,0,1,10\n")
    out = agent2.step()
    assert out.action is Action.BLOCKED and out.why.startswith("cannot read the history: ")
    assert "a seed history must be sacct text" in out.why


def test_run_loops_every_period_and_backs_off_while_slurm_is_down(tmp_path):
    agent, fake = make(tmp_path, drift=False)
    fake.update(down=True)
    ft = FakeTime()
    out = agent.run(rounds=4, poll=1000, sleep=ft.sleep, clock=ft.clock)
    assert [o.action for o in out] == [Action.BLOCKED] * 4
    assert ft.sleeps == [30.0, 60.0, 120.0]  # back-off doubles (period 600 s caps it)
    fake.update(down=False)
    ft2 = FakeTime()
    out = agent.run(rounds=3, poll=1000, sleep=ft2.sleep, clock=ft2.clock)
    assert [o.action for o in out] == [Action.PROPOSED, Action.WAIT, Action.WAIT]
    assert ft2.sleeps == [600.0, 600.0]
    assert len(agent.store.rounds(limit=100)) == 7


def test_run_starts_a_round_early_when_the_workload_drifts(tmp_path):
    agent, fake = make(tmp_path)
    ft = FakeTime()
    calls = []

    def drifted(now=None):
        calls.append(ft.t)
        return "drift: arrival rate x3.00 (rate-ratio test p=1e-09)" if ft.t >= 300 else ""

    agent.tuning.drifted = drifted
    out = agent.run(rounds=2, poll=150, sleep=ft.sleep, clock=ft.clock)
    assert calls == [150.0, 300.0] and ft.t == 300.0
    assert out[0].action is Action.PROPOSED and out[1].action is Action.WAIT
    assert out[1].trigger == "drift: arrival rate x3.00 (rate-ratio test p=1e-09)"
    assert agent.store.last_round().to_summary() == out[1].to_summary()


def test_the_loser_of_an_approve_race_says_the_winner_applied_it(tmp_path):
    # Two processes approve revision 2 at once. The loser read the proposal before the winner's
    # commit; by the time it reads the running revision and the live config, both are the
    # winner's. It must say "revision 2 is applied", not call the winner's change a hand edit
    # or a proposal against a stale revision (which is what it said before).
    winner, fake = make(tmp_path)
    proposed(winner)
    loser = open_agent(tmp_path / "state")
    real_get = loser.store.get
    reads = []

    def get_then_race(rev_id):
        rev = real_get(rev_id)
        if not reads:  # the loser's first read: the winner commits right after it
            winner.approve(rev_id, "operator:alice")
        reads.append(rev.state)
        return rev

    loser.store.get = get_then_race
    with pytest.raises(ActionNotAllowed, match=r"^revision 2 is applied; only a proposed"):
        loser.approve(2, "operator:bob")
    assert reads[0] is P and winner.store.get(2).state is A
    assert [e.actor for e in winner.store.get(2).events] == ["agent:propose", "operator:alice"]


def test_a_model_round_draws_the_agents_validation_samples(tmp_path):
    """The agent's source validates on its own count of fresh samples (the controller's tests
    check that those are judged and never tuned on)."""
    agent, _ = make(tmp_path, model="stat", samples=2, validation_samples=3, period=3600)
    source = agent.tuning.new_controller(agent.view.running_or_baseline(), agent.connector.setup()).source
    assert source.seeds(0) == [0, 1] and source.validation_seeds(503) == [503, 504, 505]


def test_agent_settings_refuse_too_few_validation_samples(tmp_path):
    with pytest.raises(AutoschedError, match="validation samples must be at least 2"):
        make(tmp_path, model="stat", validation_samples=1)


def test_the_agent_observes_with_its_backlog_history_setting(tmp_path, monkeypatch):
    """AgentSettings.backlog_history reaches every observation a round makes."""
    import autosched.live.tuning as tuning

    seen = []
    real = tuning.observation

    def spy(*a, **k):
        seen.append(k.get("backlog_history"))
        return real(*a, **k)

    monkeypatch.setattr(tuning, "observation", spy)
    for flag in (False, True):
        seen.clear()
        agent, _ = make(tmp_path / str(flag), backlog_history=flag)
        agent.step()
        assert seen and all(s is flag for s in seen), seen


# -- the round as a controller: back-off by type, memory in the store, one change per period ----
def test_run_backs_off_while_an_interrupted_apply_cannot_be_restored(tmp_path):
    """Slurm down with an interrupted apply to reconcile: the round says when to try again and
    `run` waits that long (it waited a whole period at each round when it read the message)."""
    agent, fake = make(tmp_path, drift=False)
    p = agent.store.create(dict(agent.view.running_or_baseline().config, PriorityWeightAge=5),
                           trigger="manual", actor="t")
    # the process that began the apply is gone: its intent stays open
    leave_an_apply_open(agent, p.id)
    fake.update(down=True)
    ft = FakeTime()
    out = agent.run(rounds=4, poll=1000, sleep=ft.sleep, clock=ft.clock)
    assert [o.action for o in out] == [Action.BLOCKED] * 4
    assert out[0].why.startswith(f"an apply of revision {p.id} was interrupted and its previous "
                                 "settings could not be restored yet: `scontrol reconfigure` "
                                 "could not reach Slurm")
    assert [o.retry_after for o in out] == [30.0, 60.0, 120.0, 240.0]
    assert ft.sleeps == [30.0, 60.0, 120.0]
    assert agent.status().next_round == pytest.approx(agent.store.last_round().time + 240.0)
    fake.update(down=False)
    out = agent.step()
    assert agent.store.get(p.id).state is F and agent.store.open_apply() is None
    assert out.action is Action.PROPOSED and out.retry_after is None


def tuned(out):
    """What a tuning round decided, without its timings."""
    ev = out.evidence.to_dict()
    ev.pop("tuning_seconds")
    ev["tuning_cost"] = {k: v for k, v in ev["tuning_cost"].items() if "seconds" not in k}
    return out.action, out.why, ev


def test_three_steps_in_fresh_agents_decide_as_one_run_of_three_rounds(tmp_path):
    """The controller's memory (round count, warm starts, pooled trials, drift reference) is in
    the store: `agent step` three times, each a new Agent as a new process makes it, decides what
    one `agent run` of three rounds decides."""
    from autosched.adapt.controller import ControllerMemory

    kw = dict(guard_margin=0.9, drift=False)  # the guardrail keeps the running config: each round tunes
    one, _ = make(tmp_path / "run", **kw)
    ft = FakeTime()
    ran = one.run(rounds=3, poll=1000, sleep=ft.sleep, clock=ft.clock)
    make(tmp_path / "steps", **kw)
    stepped = [open_agent(tmp_path / "steps" / "state").step() for _ in range(3)]
    assert [o.action for o in ran] == [Action.NONE] * 3
    assert [tuned(o) for o in stepped] == [tuned(o) for o in ran]
    # the rounds went on from each other: each tuned with its own seed, not the first round's again
    assert len({json.dumps(tuned(o)[2], sort_keys=True) for o in ran}) > 1
    for agent in (one, open_agent(tmp_path / "steps" / "state")):
        memory = ControllerMemory.from_json(agent.store.controller_memory())
        assert memory.rounds == 3 and len(memory.prior) == 3 and len(memory.winners) == 3
        assert memory.last_round is not None and memory.reference is not None


def test_a_restarted_agent_sees_drift_against_the_reference_in_the_store(tmp_path):
    agent, fake = make(tmp_path, guard_margin=0.9)
    assert agent.step().action is Action.NONE  # a round tuned on the last hour
    # then 40 jobs arrive in 400 s, four times the hour's rate
    burst = [row(f"d{i}", PINNED_NOW + 110 + 10 * i, PINNED_NOW + 110 + 10 * i,
                 PINNED_NOW + 130 + 10 * i, 2) for i in range(40)]
    fake.update(sacct=contended(PINNED_NOW) + "\n".join(burst) + "\n", clock=PINNED_NOW + 700)
    restarted = open_agent(tmp_path / "state")
    why = restarted.drifted()
    assert why.startswith("drift: arrival rate x"), why
    assert make(tmp_path / "fresh", guard_margin=0.9)[0].drifted() == ""  # no round tuned: no reference


def test_two_auto_mode_agents_on_one_state_directory_apply_one_change(tmp_path):
    """Agent b tunes on what it saw; meanwhile agent a's whole round applies a change. b's winner
    was made against the revision a replaced: the store refuses it in the transaction that would
    begin b's apply, and b says so."""
    a, fake = make(tmp_path, mode="auto")
    b = open_agent(tmp_path / "state")
    a.view.running_or_baseline()
    real_create = b.store.create

    def create_after_a_applied(*args, **kw):
        assert a.step().action is Action.APPLIED
        b.store.create = real_create
        return real_create(*args, **kw)

    b.store.create = create_after_a_applied
    out = b.step()
    assert out.action is Action.WAIT and out.revision == 3
    # the round rejected it itself: it does not tell the operator to (it used to)
    assert out.why == ("revision 3 not applied: revision 3 was proposed against revision 1, but "
                       "revision 2 is running")
    store = a.store
    assert [(r.id, r.state) for r in store.history()] == [(3, R), (2, A), (1, A)]
    assert store.running().id == 2
    want = a.space.to_settings(a.space.full(store.get(2).config))
    assert {k: fake.state()["live"][k] for k in want} == want


def test_auto_mode_does_not_apply_right_after_an_adopt(tmp_path):
    agent, fake = make(tmp_path, mode="auto")
    agent.view.running_or_baseline()
    fake.hand_edit("PriorityWeightAge", "7")
    adopted = agent.adopt("operator:alice")
    out = agent.step()
    assert out.action is Action.WAIT and "at most one change per period (600 s)" in out.why
    assert agent.store.running().id == adopted.id and fake.state()["live"]["PriorityWeightAge"] == "7"


def test_an_agent_state_directory_from_before_revision_kinds_opens_and_runs(tmp_path):
    """tests/fixtures/state-v0 was written by the code before this one (make_old_state.py)."""
    import shutil

    from autosched.live.records import RoundRecord
    from autosched.service.models import StatusOut

    shutil.copytree(Path(__file__).parent / "fixtures" / "state-v0", tmp_path / "state")
    fake = FakeConnector.create(tmp_path / "fake", sacct=contended(PINNED_NOW), nodes=1, gpus_per_node=8)
    fake.update(clock=PINNED_NOW)
    settings = json.loads((tmp_path / "state" / "settings.json").read_text())
    settings["connector"]["directory"] = str(tmp_path / "fake")
    (tmp_path / "state" / "settings.json").write_text(json.dumps(settings))
    agent = open_agent(tmp_path / "state")
    st = agent.status()
    assert st.running.id == 7 and st.running.kind is RevisionKind.ADOPTED and st.pending is None
    assert st.last_round == RoundRecord(st.last_round.time, "period", "frozen",
                                        "frozen by operator:bob: maintenance")
    assert [r.kind.value for r in st.history] == ["adopted", "proposal", "rollback", "proposal",
                                                  "proposal", "proposal", "baseline"]
    assert StatusOut.model_validate(st.to_dict()).model_dump(mode="json") == st.to_dict()
    # the fake cluster runs its own defaults, not revision 7's PriorityWeightAge=7: a hand edit
    out = agent.step()
    assert out.action is Action.BLOCKED and "PriorityWeightAge is 1000 live, 7 in revision 7" in out.why


def _queued(n: int, gpus: int, now: float) -> str:
    """`n` jobs submitted in the last minutes before `now`, all still PENDING."""
    return "".join(row(f"q{i}", now - 200 + i, None, None, gpus) + "\n" for i in range(n))


def test_a_burst_inside_the_period_asks_for_a_round_at_the_next_poll(tmp_path):
    """The agent checks its trigger at every poll from its last round on, not only once a period
    has passed (by then the period's own round is due and the burst's gain is gone). The round at
    PINNED_NOW saw no queue (every job of `contended` ended); 300 s later, half the 600-s period,
    40 jobs of 8 GPUs wait, each weighed at the mean run time of the history's 30 finished jobs of
    5-8 GPUs (216.1 s): 40 >= 2 x 10 jobs, and 40 x 8 x 216.1 / 3600 = 19.2 GPU-hours >= 2 x 8 (one
    hour of the 8 GPUs)."""
    agent, fake = make(tmp_path, guard_margin=0.9, drift=False)
    assert agent.step().action is Action.NONE
    fake.update(sacct=contended(PINNED_NOW) + _queued(40, 8, PINNED_NOW + 300), clock=PINNED_NOW + 300)
    why = open_agent(tmp_path / "state").drifted()
    assert why.startswith("contention: queue 40 jobs, 19 GPU-hours; the last round saw 0, 0"), why
    few, fake = make(tmp_path / "few", guard_margin=0.9, drift=False)
    assert few.step().action is Action.NONE
    fake.update(sacct=contended(PINNED_NOW) + _queued(19, 8, PINNED_NOW + 300), clock=PINNED_NOW + 300)
    assert open_agent(tmp_path / "few" / "state").drifted() == ""  # 19 jobs: not twice the floor of 10


def test_the_trigger_floor_is_on_the_jobs_clock_on_a_test_bed(tmp_path):
    """Under `time_scale` 60 the bed's second is a minute of the jobs' own time. 25 queued jobs
    of 1 GPU, each weighed at the mean run time of the history's 60 finished jobs (none of 1 GPU:
    233.0 s), hold 1.62 GPU-hours of the bed's clock: under twice one hour of 8 GPUs (16) it would
    never fire, but it is 97 hours of the jobs' own time, and the floor taken on their clock is
    2 x 8 / 60 = 0.27 of the bed's."""
    agent, fake = make(tmp_path, guard_margin=0.9, drift=False, time_scale=60.0)
    assert agent.step().action is Action.NONE
    fake.update(sacct=contended(PINNED_NOW) + _queued(25, 1, PINNED_NOW + 700), clock=PINNED_NOW + 700)
    why = open_agent(tmp_path / "state").drifted()
    assert why.startswith("contention: queue 25 jobs, 2 GPU-hours; the last round saw 0, 0"), why
