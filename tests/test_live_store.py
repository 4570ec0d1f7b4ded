"""The revision store: its transition table checked against a model on random sequences, illegal
moves through the public API, exact state after hand-made sequences, a store written before
revision kinds loading (and its migration surviving an interruption), and several real processes
acting on one store at once (one wins, none corrupts), including kill -9."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autosched.live.roundlog as roundlog
import autosched.live.storefile as storefile
from autosched.errors import LiveError
from autosched.live.errors import ActionNotAllowed, IllegalTransition, UnknownRevision
from autosched.live.records import (
    Evidence,
    Flags,
    JudgedOutcome,
    RevisionKind,
    RevisionState,
    StoredRound,
    gain_text,
)
from autosched.live.store import BIRTH, TRANSITIONS, RevisionStore

SRC = str(Path(__file__).resolve().parents[1] / "src")
FIXTURE = Path(__file__).parent / "fixtures" / "state-v0"
P, A, R, RB, F = (RevisionState.PROPOSED, RevisionState.APPLIED, RevisionState.REJECTED,
                  RevisionState.ROLLED_BACK, RevisionState.FAILED)
K = RevisionKind


def apply(s: RevisionStore, rev_id: int, state=A, actor="op", **kw):
    """An apply through the store as the agent does it: the write-ahead intent, then its end."""
    it = s.begin_apply(rev_id, actor=actor, previous={"text": "old"})
    s.end_apply(it, state=state, actor=actor, note="done", **kw)
    return s.get(rev_id)


def test_the_table_is_the_one_worked_out_by_hand():
    # (from, to, the one store method that makes the move)
    assert {(t.source, t.target, t.by) for t in TRANSITIONS} == {
        (None, P, "create"), (None, A, "create"), (P, R, "transition"), (P, A, "end_apply"),
        (P, F, "end_apply"), (A, RB, "end_apply")}
    assert BIRTH == {K.BASELINE: A, K.ADOPTED: A, K.PROPOSAL: P, K.ROLLBACK: P}


def test_baseline_proposal_approve_and_diff(tmp_path):
    s = RevisionStore(tmp_path / "st")
    assert (tmp_path / "st" / "state.db").exists()
    assert s.running() is None and s.pending() is None and s.history() == []
    base = s.create({"PriorityWeightAge": 1000, "PriorityMaxAge": "7-0"}, kind=K.BASELINE,
                    trigger="baseline", actor="agent", note="found live")
    assert base.id == 1 and base.parent is None and base.state is A and base.kind is K.BASELINE
    assert base.diff == {"PriorityWeightAge": (None, 1000), "PriorityMaxAge": (None, "7-0")}
    prop = s.create({"PriorityWeightAge": 5000, "PriorityMaxAge": "7-0"}, trigger="period",
                    actor="agent:propose", evidence=Evidence(predicted_gain=0.08, spread=0.01))
    assert prop.id == 2 and prop.parent == 1 and prop.state is P and prop.kind is K.PROPOSAL
    assert prop.diff == {"PriorityWeightAge": (1000, 5000)}
    assert s.pending().id == 2 and s.running().id == 1
    with pytest.raises(ActionNotAllowed, match="already proposed"):
        s.create({"PriorityWeightAge": 7}, trigger="period", actor="agent")
    it = s.begin_apply(2, actor="operator:alice", previous={})
    s.end_apply(it, state=A, actor="operator:alice", note="looks right")
    assert s.pending() is None and s.running().id == 2
    with pytest.raises(IllegalTransition, match="^revision 2 is applied; it cannot become rejected"):
        s.transition(2, R, actor="operator:bob")
    rev = s.get(2)
    assert [e.state for e in rev.events] == [P, A] and rev.applied_at == rev.events[1].time
    assert rev.events[1].actor == "operator:alice" and rev.events[1].note == "looks right"
    assert [r.id for r in s.history()] == [2, 1] and [r.id for r in s.history(1)] == [2]
    assert s.newest_id() == 2
    d = rev.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["state"] == "applied" and d["kind"] == "proposal"
    assert d["diff"] == {"PriorityWeightAge": [1000, 5000]}
    assert d["evidence"]["predicted_gain"] == 0.08 and d["evidence"]["samples"] is None
    with pytest.raises(ActionNotAllowed, match="a baseline is only ever a store's first revision"):
        s.create({"w": 1}, kind=K.BASELINE, trigger="baseline", actor="agent")


def test_illegal_moves_through_the_public_api_name_the_rule(tmp_path):
    """The sequence that used to go through: PROPOSED -> REJECTED -> APPLIED -> PROPOSED, after
    which running() and pending() both returned the rejected revision."""
    s = RevisionStore(tmp_path)
    s.create({"w": 1}, kind=K.BASELINE, trigger="baseline", actor="agent")
    s.create({"w": 2}, trigger="period", actor="agent")
    s.transition(2, R, actor="op")
    with pytest.raises(IllegalTransition, match=r"^revision 2 is rejected, which is final; it "
                                                r"cannot become applied$"):
        s.transition(2, A, actor="op")
    with pytest.raises(ActionNotAllowed, match="revision 2 is rejected; only a proposed revision "
                                               "can be applied"):
        s.begin_apply(2, actor="op", previous={})
    with pytest.raises(IllegalTransition, match="rejected, which is final; it cannot become proposed"):
        s.transition(2, P, actor="op")
    assert [e.state for e in s.get(2).events] == [P, R]
    assert s.running().id == 1 and s.pending() is None
    # a move the table has, asked of the wrong method: named with the rule that allows it
    s.create({"w": 3}, trigger="period", actor="agent")
    with pytest.raises(IllegalTransition, match=r"^revision 3 is proposed; it becomes applied only "
                                                r"through end_apply \(a proposal becomes applied "
                                                r"only when its apply ends well\)$"):
        s.transition(3, A, actor="op")
    with pytest.raises(IllegalTransition, match=r"it cannot become rolled_back \(from proposed the "
                                                r"table allows rejected: a proposal can be rejected; "
                                                r"applied: .*; failed: "):
        s.transition(3, RB, actor="op")
    # an apply cannot end in any state but applied or failed, and leaves the intent open if asked to
    it = s.begin_apply(3, actor="op", previous={})
    with pytest.raises(IllegalTransition, match="revision 3 is proposed; it becomes rejected only "
                                                "through transition"):
        s.end_apply(it, state=R, actor="op", note="")
    assert s.open_apply() == it
    with pytest.raises(ActionNotAllowed, match="revision 3 is being applied by pid"):
        s.transition(3, R, actor="op")  # not while its apply runs
    s.end_apply(it, state=A, actor="op", note="")
    assert [e.state for e in s.get(3).events] == [P, A] and s.running().id == 3


def test_every_move_of_every_state_through_the_public_api(tmp_path):
    """From each of the five states, `transition` to each state is allowed exactly where the table
    has the move (and an apply's end only from proposed: `begin_apply` wants a proposal)."""
    s = RevisionStore(tmp_path)
    s.create({"w": 0}, kind=K.BASELINE, trigger="baseline", actor="t")  # 1 applied
    s.create({"w": 1}, trigger="t", actor="t")
    apply(s, 2)  # 2 applied (running)
    s.create({"w": 1}, kind=K.ROLLBACK, trigger="t", actor="t")
    apply(s, 3)  # 3 applied, 2 rolled back
    s.create({"w": 3}, trigger="t", actor="t")
    s.transition(4, R, actor="t")  # 4 rejected
    s.create({"w": 5}, trigger="t", actor="t")
    apply(s, 5, state=F)  # 5 failed
    s.create({"w": 6}, trigger="t", actor="t")  # 6 proposed
    at = {A: 3, RB: 2, R: 4, F: 5, P: 6}
    assert {r.state: r.id for r in s.history() if r.id != 1} == at
    for source in list(at):
        for target in RevisionState:
            rid = at[source]
            events = len(s.get(rid).events)
            if (source, target, "transition") in LEGAL:
                assert s.transition(rid, target, actor="t").state is target
                s.create({"w": 7}, trigger="t", actor="t")  # a fresh proposal for what follows
                at[P] = s.pending().id
            else:
                with pytest.raises(IllegalTransition, match=f"^revision {rid} is {source.value}"):
                    s.transition(rid, target, actor="t")
                assert len(s.get(rid).events) == events


def test_unknown_revision_and_outcome(tmp_path):
    s = RevisionStore(tmp_path)
    with pytest.raises(UnknownRevision, match="no revision 4"):
        s.get(4)
    assert isinstance(UnknownRevision("x"), LiveError)
    s.create({"a": 1}, kind=K.BASELINE, trigger="baseline", actor="agent")
    s.record_outcome(1, JudgedOutcome("avg_jct", None, "not judged: x"))
    new = JudgedOutcome("avg_jct", 0.1, "kept", 1 / 12, 0.02, {"avg_jct": 12.0}, {"avg_jct": 12.0},
                        {"avg_jct": 11.0}, {"start": 1.0, "end": 2.0})
    s.record_outcome(1, new)
    assert s.get(1).outcome == new


def test_an_outcome_stored_before_the_judge_replayed_copies_reads_without_a_spread(tmp_path):
    s = RevisionStore(tmp_path)
    s.create({"a": 1}, kind=K.BASELINE, trigger="baseline", actor="agent")
    # a row as the one-replay counterfactual judge wrote it: no gain_sd, ..., replays, copies
    row = {"metric": "avg_jct", "predicted_gain": 0.1, "verdict": "kept", "counterfactual_gain": 0.05,
           "twin_error": 0.02, "realized": {"avg_jct": 12.0}, "simulated_old": {"avg_jct": 12.0},
           "simulated_new": {"avg_jct": 11.4}, "period": {"start": 1.0, "end": 2.0}}
    with sqlite3.connect(tmp_path / "state.db") as db:
        db.execute("INSERT INTO outcomes (rev_id, time, outcome) VALUES (1, 0, ?)", (json.dumps(row),))
    out = s.get(1).outcome
    assert out == JudgedOutcome("avg_jct", 0.1, "kept", 0.05, 0.02, {"avg_jct": 12.0},
                                {"avg_jct": 12.0}, {"avg_jct": 11.4}, {"start": 1.0, "end": 2.0})
    assert (out.gain_sd, out.gain_min, out.gain_max, out.replays, out.copies) == (None,) * 5
    assert out.counterfactual_text() == "+5.0%"
    # and one with them reads them back
    spread = JudgedOutcome("avg_jct", 0.1, "kept", 0.05, 0.02, gain_sd=0.03, gain_min=-0.01,
                           gain_max=0.09, replays=5, copies=[[{"avg_jct": 12.0}, {"avg_jct": 11.0}]])
    s.record_outcome(1, spread)
    assert s.get(1).outcome == spread
    assert spread.counterfactual_text() == "+5.0% ± 3.0% (range -1.0% to +9.0%, 5 replays)"


def test_gain_text_words_every_case():
    assert gain_text(None, None, None, None, None) == "unknown"
    assert gain_text(-0.123, None, None, None, None) == "-12.3%"  # an outcome without replays
    assert gain_text(0.05, None, 0.05, 0.05, 1) == "+5.0% (1 replay)"
    assert gain_text(0.0, 0.001, -0.002, 0.0015, 5) == "+0.0% ± 0.1% (range -0.2% to +0.1%, 5 replays)"


def test_rollback_makes_the_new_revision_running_and_rolls_back_its_parent(tmp_path):
    s = RevisionStore(tmp_path)
    s.create({"w": 1}, kind=K.BASELINE, trigger="baseline", actor="agent")
    s.create({"w": 2}, trigger="period", actor="agent")
    apply(s, 2)
    back = s.create({"w": 1}, kind=K.ROLLBACK, trigger="rollback to 1", actor="agent:guard",
                    evidence=Evidence(rollback_of=2, to=1))
    assert back.state is P and back.parent == 2 and s.running().id == 2
    apply(s, back.id, actor="agent:guard", replaced_note="worse than predicted")
    assert s.running().id == 3 and s.get(3).diff == {"w": (2, 1)}
    assert s.running().config == s.get(1).config
    two = s.get(2)
    assert two.state is RB and (two.events[-1].actor, two.events[-1].note) == (
        "agent:guard", "worse than predicted")
    assert s.get(3).evidence.rollback_of == 2 and s.get(3).evidence.to == 1


def test_flags(tmp_path):
    s = RevisionStore(tmp_path)
    assert s.flags() == Flags()
    assert s.freeze("operator:alice", "maintenance") == Flags(True, "maintenance", "operator:alice", "")
    assert s.set_blocked("hand edit: PriorityWeightAge is 3 live, 1000 in revision 1").blocked
    assert s.unfreeze("operator:bob").frozen is False
    assert s.flags().blocked.startswith("hand edit")
    s.set_blocked("")
    assert s.flags() == Flags()


def test_apply_intent_is_exclusive_and_closed_with_its_event(tmp_path):
    s = RevisionStore(tmp_path)
    s.create({"w": 1}, kind=K.BASELINE, trigger="baseline", actor="agent")
    s.create({"w": 2}, trigger="period", actor="agent")
    it = s.begin_apply(2, actor="op", previous={"text": "old"})
    assert s.open_apply() == it and it.previous == {"text": "old"} and it.owner_alive()
    with pytest.raises(ActionNotAllowed, match=r"revision 2 is being applied by pid \d+ right now"):
        s.begin_apply(2, actor="op", previous={})
    with pytest.raises(ActionNotAllowed, match="revision 2 is being applied right now"):
        s.create({"w": 9}, kind=K.ADOPTED, trigger="adopted", actor="op")
    s.end_apply(it, state=A, actor="op", note="applied")
    assert s.open_apply() is None and s.running().id == 2


def test_an_apply_checks_its_parent_and_the_period_in_its_transaction(tmp_path):
    """Two auto-mode agents on one store: the second one's proposal was made against a revision
    that is no longer running, and the first one's change is seconds old."""
    s = RevisionStore(tmp_path)
    s.create({"w": 1}, kind=K.BASELINE, trigger="baseline", actor="agent")
    s.create({"w": 2}, trigger="period", actor="agent:auto")
    # the baseline does not count as a change: the first apply is allowed at once
    it = s.begin_apply(2, actor="agent:auto", previous={}, min_interval=600.0)
    s.end_apply(it, state=A, actor="agent:auto", note="")
    s.create({"w": 3}, trigger="period", actor="agent:auto", parent=1)  # made before 2 went live
    with pytest.raises(ActionNotAllowed, match="^revision 3 was proposed against revision 1, but "
                                               "revision 2 is running$"):
        s.begin_apply(3, actor="agent:auto", previous={}, min_interval=600.0)
    s.transition(3, R, actor="agent:auto")
    s.create({"w": 4}, trigger="period", actor="agent:auto")
    with pytest.raises(ActionNotAllowed, match=r"^revision 2 went live \d+ s ago; at most one "
                                               r"change per period \(600 s\)$"):
        s.begin_apply(4, actor="agent:auto", previous={}, min_interval=600.0)
    assert s.open_apply() is None and s.running().id == 2
    it = s.begin_apply(4, actor="operator:alice", previous={})  # an operator's approve may
    s.end_apply(it, state=A, actor="operator:alice", note="")
    # an adopted config is a change too
    s.create({"w": 5}, kind=K.ADOPTED, trigger="adopted", actor="operator:alice")
    s.create({"w": 6}, trigger="period", actor="agent:auto")
    with pytest.raises(ActionNotAllowed, match="revision 5 went live"):
        s.begin_apply(6, actor="agent:auto", previous={}, min_interval=600.0)


def test_unwritable_state_dir_is_a_clear_error(tmp_path):
    # a regular file where the directory should be: fails for root too (chmod would not)
    (tmp_path / "file").write_text("x")
    with pytest.raises(LiveError, match=r"state\.db: cannot open the revision store"):
        RevisionStore(tmp_path / "file" / "state")


def test_only_a_proposal_can_be_applied(tmp_path):
    s = RevisionStore(tmp_path)
    s.create({"w": 1}, kind=K.BASELINE, trigger="baseline", actor="agent")
    with pytest.raises(ActionNotAllowed, match="revision 1 is applied; only a proposed revision"):
        s.begin_apply(1, actor="op", previous={})


# -- the transition table against a model, on random sequences -------------------------------
# The model is the table worked out by hand (test_the_table_is_the_one_worked_out_by_hand):
# every operation of the store's public API, legal or not, on random revisions.
LEGAL = {(P, R, "transition"), (P, A, "end_apply"), (P, F, "end_apply"), (A, RB, "end_apply")}
STATES = st.sampled_from(list(RevisionState))
OPS = st.lists(st.one_of(
    st.tuples(st.just("propose"), st.integers(0, 5)),
    st.tuples(st.just("adopt"), st.integers(0, 5)),
    st.tuples(st.just("rollback"), st.integers(0, 9)),
    st.tuples(st.just("move"), st.integers(0, 9), STATES),
    st.tuples(st.just("apply"), st.integers(0, 9), STATES),
), max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS)
def test_store_matches_the_table(tmp_path_factory, ops):
    s = RevisionStore(tmp_path_factory.mktemp("m"))
    s.create({"w": 0}, kind=K.BASELINE, trigger="baseline", actor="t")
    states, kinds, parents = {1: A}, {1: K.BASELINE}, {1: None}
    live = 1

    def pending():
        return [i for i, x in states.items() if x is P]

    def create(kind, config, parent):
        if BIRTH[kind] is P and pending():
            with pytest.raises(ActionNotAllowed, match="already proposed"):
                s.create(config, kind=kind, trigger="t", actor="t", parent=parent)
            return None
        rev = s.create(config, kind=kind, trigger="t", actor="t", parent=parent)
        states[rev.id], kinds[rev.id], parents[rev.id] = BIRTH[kind], kind, parent
        return rev.id

    for op, k, *rest in ops:
        rid = 1 + k % len(states)
        if op == "propose":
            create(K.PROPOSAL, {"w": k}, live)
        elif op == "adopt":
            if (new := create(K.ADOPTED, {"w": 100 + k}, live)) is not None:
                live = new
        elif op == "rollback":
            create(K.ROLLBACK, s.get(rid).config, live)
        elif op == "move":
            target = rest[0]
            if (states[rid], target, "transition") in LEGAL:
                s.transition(rid, target, actor="t")
                states[rid] = target
            else:
                with pytest.raises(IllegalTransition, match=f"^revision {rid} is {states[rid].value}"):
                    s.transition(rid, target, actor="t")
        elif op == "apply":
            target = rest[0]
            if states[rid] is not P or parents[rid] != live:
                with pytest.raises(ActionNotAllowed):
                    s.begin_apply(rid, actor="t", previous={})
                continue
            it = s.begin_apply(rid, actor="t", previous={})
            rolls_back = target is A and kinds[rid] is K.ROLLBACK
            if (P, target, "end_apply") in LEGAL:
                s.end_apply(it, state=target, actor="t", note="")
                states[rid] = target
                if rolls_back:
                    states[parents[rid]] = RB
                if target is A:
                    live = rid
            else:
                with pytest.raises(IllegalTransition, match=f"^revision {rid} is proposed"):
                    s.end_apply(it, state=target, actor="t", note="")
                assert s.open_apply() == it  # nothing of the refused end was written
                s.end_apply(it, state=None, actor="t", note="closed")
        assert s.running().id == live
        assert (s.pending().id if s.pending() else None) == (pending()[0] if pending() else None)
        assert len(pending()) <= 1
        assert {r.id: (r.state, r.kind) for r in s.history()} == {
            i: (states[i], kinds[i]) for i in states}


# -- a store written before revision kinds ----------------------------------------------------
def test_a_store_written_before_kinds_loads_with_the_kinds_its_triggers_named(tmp_path):
    """tests/fixtures/state-v0 was written by the code before this schema (make_old_state.py)."""
    shutil.copytree(FIXTURE, tmp_path / "s")
    with sqlite3.connect(tmp_path / "s" / "state.db") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 0
        assert "kind" not in [c[1] for c in db.execute("PRAGMA table_info(revisions)")]
    s = RevisionStore(tmp_path / "s")
    hist = {r.id: r for r in s.history()}
    assert {i: (r.kind, r.state, r.trigger.split(":")[0]) for i, r in hist.items()} == {
        1: (K.BASELINE, A, "baseline"), 2: (K.PROPOSAL, RB, "period"), 3: (K.PROPOSAL, R, "period"),
        4: (K.PROPOSAL, R, "drift"), 5: (K.ROLLBACK, A, "rollback to 1"),
        6: (K.PROPOSAL, F, "manual"), 7: (K.ADOPTED, A, "adopted")}
    assert s.running().id == 7 and s.pending() is None and s.open_apply() is None
    ev = hist[2].evidence
    assert ev.predicted_gain > 0 and ev.samples == 1 and ev.model == "replay"
    assert ev.tuning_cost["trials"] == 6
    assert hist[2].outcome.verdict == "kept: avg_jct 200.0 -> 100.0 (+50.0%)"
    # an outcome of the before/after judge (before the counterfactual one) reads with its
    # metric, predicted gain and verdict; the figures it did not have are None
    assert hist[2].outcome == JudgedOutcome("avg_jct", hist[2].evidence.predicted_gain,
                                            "kept: avg_jct 200.0 -> 100.0 (+50.0%)")
    assert hist[5].evidence == Evidence(rollback_of=2, to=1)
    assert hist[3].evidence == Evidence(predicted_gain=0.03, spread=0.01, samples=3)
    assert [r.action for r in s.rounds()] == ["frozen", "blocked", "none", "wait", "proposed"]
    assert s.flags() == Flags() and s.controller_memory() is None
    # and it goes on under the table
    p = s.create(dict(hist[7].config, PriorityWeightAge=8), trigger="period", actor="t")
    assert p.parent == 7 and apply(s, p.id).state is A
    with sqlite3.connect(tmp_path / "s" / "state.db") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == storefile.SCHEMA_VERSION


def test_a_migration_interrupted_midway_leaves_the_store_as_it_was(tmp_path, monkeypatch):
    shutil.copytree(FIXTURE, tmp_path / "s")
    # the first statement runs, then the process "dies" (an error unwinds the transaction as a
    # kill does: SQLite rolls back what was not committed)
    monkeypatch.setattr(storefile, "_MIGRATIONS", (
        storefile._MIGRATIONS[0][:1] + ("SELECT no_such_function()",), *storefile._MIGRATIONS[1:]))
    with pytest.raises(LiveError, match="state.db"):
        RevisionStore(tmp_path / "s")
    with sqlite3.connect(tmp_path / "s" / "state.db") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 0
        assert "kind" not in [c[1] for c in db.execute("PRAGMA table_info(revisions)")]
    monkeypatch.undo()
    assert RevisionStore(tmp_path / "s").get(7).kind is K.ADOPTED


def test_a_store_of_a_newer_version_is_refused(tmp_path):
    RevisionStore(tmp_path)
    with sqlite3.connect(tmp_path / "state.db") as db:
        db.execute(f"PRAGMA user_version = {storefile.SCHEMA_VERSION + 1}")
    with pytest.raises(LiveError, match="written by a newer autosched"):
        RevisionStore(tmp_path)


def test_a_revision_row_that_cannot_be_read_is_named(tmp_path):
    s = RevisionStore(tmp_path)
    s.create({"w": 1}, kind=K.BASELINE, trigger="baseline", actor="agent")
    with sqlite3.connect(tmp_path / "state.db") as db:
        db.execute("UPDATE events SET state = 'applying' WHERE rev_id = 1")
    with pytest.raises(LiveError, match="state.db: revision 1 cannot be read: 'applying'"):
        s.get(1)


def test_rounds_and_the_controller_memory(tmp_path):
    s = RevisionStore(tmp_path)
    s.record_round({"action": "wait", "why": "w"}, when=5.0)
    assert s.last_round() == StoredRound(5.0, "", "wait", "w") and s.controller_memory() is None
    for i in range(roundlog.MEMORY_KEPT + 2):
        s.record_round({"action": "none"}, memory=f'{{"m": {i}}}')
    assert s.controller_memory() == f'{{"m": {roundlog.MEMORY_KEPT + 1}}}'
    with sqlite3.connect(tmp_path / "state.db") as db:
        assert db.execute("SELECT COUNT(*) FROM memory").fetchone()[0] == roundlog.MEMORY_KEPT
        db.execute("INSERT INTO rounds (time, summary) VALUES (9, 'not json')")
    assert s.last_round() == StoredRound(9.0, "", "", "")


# -- real processes --------------------------------------------------------------------------
RACER = textwrap.dedent("""
    import sys, time
    from autosched.live.records import RevisionState
    from autosched.live.store import RevisionStore
    from autosched.live.errors import ActionNotAllowed
    s = RevisionStore(sys.argv[1])
    while time.time() < float(sys.argv[3]):
        time.sleep(0.001)
    try:
        it = s.begin_apply(2, actor="proc:" + sys.argv[2], previous={})
    except ActionNotAllowed:
        print("lost")
    else:
        s.end_apply(it, state=RevisionState.APPLIED, actor="proc:" + sys.argv[2], note="")
        print("won")
""")


def test_processes_racing_to_approve_one_wins(tmp_path):
    s = RevisionStore(tmp_path)
    s.create({"w": 1}, kind=K.BASELINE, trigger="baseline", actor="t")
    s.create({"w": 2}, trigger="period", actor="t")
    start = time.time() + 1.5
    env = {**os.environ, "PYTHONPATH": SRC}
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path), str(i), str(start)],
                              stdout=subprocess.PIPE, text=True, env=env) for i in range(4)]
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert sorted(outs) == ["lost", "lost", "lost", "won"]
    rev = s.get(2)
    assert [e.state for e in rev.events] == [P, A]


WRITER = textwrap.dedent("""
    import sys
    from autosched.live.records import RevisionState
    from autosched.live.store import RevisionStore
    s = RevisionStore(sys.argv[1])
    i = 0
    print("ready", flush=True)
    while True:
        i += 1
        r = s.create({"w": i}, trigger="period", actor="w")
        s.transition(r.id, RevisionState.REJECTED, actor="w")
        s.record_round({"i": i})
""")


def test_kill_9_while_writing_leaves_a_store_the_next_start_trusts(tmp_path):
    env = {**os.environ, "PYTHONPATH": SRC}
    p = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE,
                         text=True, env=env)
    try:
        assert p.stdout.readline().strip() == "ready"
        deadline = time.time() + 60
        while time.time() < deadline:
            with sqlite3.connect(tmp_path / "state.db") as db:
                if db.execute("SELECT COUNT(*) FROM revisions").fetchone()[0] >= 20:
                    break
            time.sleep(0.05)
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    s = RevisionStore(tmp_path)
    with sqlite3.connect(tmp_path / "state.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    hist = s.history()
    assert len(hist) >= 20
    # every revision was written with its first event in one transaction; at most the newest
    # one lost its second event to the kill
    assert all(r.events and r.events[0].state is P for r in hist)
    assert all(r.state is R for r in hist[1:])
    assert s.pending() in (None, hist[0]) or s.pending().id == hist[0].id
    if s.pending() is not None:
        s.transition(hist[0].id, R, actor="t")
    s.create({"w": -1}, trigger="period", actor="t")  # the store goes on




def test_a_stored_field_without_a_reader_fails_when_its_class_is_made():
    """Each field of a stored record declares how it is read back: a new field without one
    fails at once, not when an old row is read."""
    from dataclasses import dataclass

    from autosched.live.records import finite, read_record, readable, stored

    with pytest.raises(TypeError, match="new_figure declare no reader"):
        @readable
        @dataclass(frozen=True)
        class Grown:
            known: float | None = stored(finite)
            new_figure: tuple[int, ...] | None = None

    @readable
    @dataclass(frozen=True)
    class Read:
        known: float | None = stored(finite)

    # a value of another type, or not finite, reads as empty; an unknown key is ignored
    assert read_record(Read, {"known": "1.5", "other": 2}) == Read(None)
    assert read_record(Read, {"known": float("nan")}) == Read(None) and read_record(Read, {"known": 2}) == Read(2.0)
