"""The revision store: exact state after hand-made sequences, a model-checked property test, and
several real processes acting on one store at once (one wins, none corrupts), including kill -9."""

from __future__ import annotations

import json
import os
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

from autosched.errors import LiveError
from autosched.live.errors import ActionNotAllowed, UnknownRevision
from autosched.live.store import Flags, RevisionState, RevisionStore

SRC = str(Path(__file__).resolve().parents[1] / "src")
P, A, R, RB, F = (RevisionState.PROPOSED, RevisionState.APPLIED, RevisionState.REJECTED,
                  RevisionState.ROLLED_BACK, RevisionState.FAILED)


def test_baseline_proposal_approve_and_diff(tmp_path):
    s = RevisionStore(tmp_path / "st")
    assert (tmp_path / "st" / "state.db").exists()
    assert s.running() is None and s.pending() is None and s.history() == []
    base = s.create({"PriorityWeightAge": 1000, "PriorityMaxAge": "7-0"}, trigger="baseline",
                    actor="agent", state=A, note="found live")
    assert base.id == 1 and base.parent is None and base.state is A
    assert base.diff == {"PriorityWeightAge": (None, 1000), "PriorityMaxAge": (None, "7-0")}
    prop = s.create({"PriorityWeightAge": 5000, "PriorityMaxAge": "7-0"}, trigger="period",
                    actor="agent:propose", evidence={"predicted_gain": 0.08, "spread": 0.01})
    assert prop.id == 2 and prop.parent == 1 and prop.state is P
    assert prop.diff == {"PriorityWeightAge": (1000, 5000)}
    assert s.pending().id == 2 and s.running().id == 1
    with pytest.raises(ActionNotAllowed, match="already proposed"):
        s.create({"PriorityWeightAge": 7}, trigger="period", actor="agent")
    s.transition(2, A, actor="operator:alice", note="looks right", allowed_from=[P])
    assert s.pending() is None and s.running().id == 2
    with pytest.raises(ActionNotAllowed, match="revision 2 is applied; this needs it to be proposed"):
        s.transition(2, R, actor="operator:bob", allowed_from=[P])
    rev = s.get(2)
    assert [e.state for e in rev.events] == [P, A]
    assert rev.events[1].actor == "operator:alice" and rev.events[1].note == "looks right"
    assert [r.id for r in s.history()] == [2, 1] and [r.id for r in s.history(1)] == [2]
    d = rev.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["state"] == "applied" and d["diff"] == {"PriorityWeightAge": [1000, 5000]}
    assert d["evidence"]["predicted_gain"] == 0.08


def test_unknown_revision_and_outcome(tmp_path):
    s = RevisionStore(tmp_path)
    with pytest.raises(UnknownRevision, match="no revision 4"):
        s.get(4)
    assert isinstance(UnknownRevision("x"), LiveError)
    s.create({"a": 1}, trigger="baseline", actor="agent", state=A)
    s.record_outcome(1, {"avg_jct": 10.0})
    s.record_outcome(1, {"avg_jct": 12.0, "predicted": 11.0})
    assert s.get(1).outcome == {"avg_jct": 12.0, "predicted": 11.0}


def test_rollback_makes_the_new_revision_running(tmp_path):
    s = RevisionStore(tmp_path)
    s.create({"w": 1}, trigger="baseline", actor="agent", state=A)
    s.create({"w": 2}, trigger="period", actor="agent")
    s.transition(2, A, actor="op", allowed_from=[P])
    s.transition(2, RB, actor="agent:guard", note="worse than predicted")
    assert s.running() is None  # the live one was rolled back and nothing replaced it yet
    s.create({"w": 1}, trigger="rollback to 1", actor="agent:guard", state=A, parent=2)
    assert s.running().id == 3 and s.get(3).diff == {"w": (2, 1)}
    assert s.running().config == s.get(1).config


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
    s.create({"w": 1}, trigger="baseline", actor="agent", state=A)
    s.create({"w": 2}, trigger="period", actor="agent")
    it = s.begin_apply(2, actor="op", previous={"text": "old"})
    assert s.open_apply() == it and it.previous == {"text": "old"} and it.owner_alive()
    with pytest.raises(ActionNotAllowed, match=r"revision 2 is being applied by pid \d+ right now"):
        s.begin_apply(2, actor="op", previous={})
    s.end_apply(it, state=A, actor="op", note="applied")
    assert s.open_apply() is None and s.running().id == 2


def test_unwritable_state_dir_is_a_clear_error(tmp_path):
    # a regular file where the directory should be: fails for root too (chmod would not)
    (tmp_path / "file").write_text("x")
    with pytest.raises(LiveError, match=r"state\.db: cannot open the revision store"):
        RevisionStore(tmp_path / "file" / "state")


# -- a model of the store, checked against it on random sequences --------------------------
OPS = st.lists(st.tuples(st.sampled_from(["propose", "approve", "reject", "rollback", "fail"]),
                         st.integers(0, 5)), max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPS)
def test_store_matches_a_model(tmp_path_factory, ops):
    s = RevisionStore(tmp_path_factory.mktemp("m"))
    s.create({"w": 0}, trigger="baseline", actor="t", state=A)
    states = {1: A}
    live = 1
    for op, k in ops:
        pend = [i for i, st_ in states.items() if st_ is P]
        if op == "propose":
            if pend:
                with pytest.raises(ActionNotAllowed):
                    s.create({"w": k}, trigger="period", actor="t")
            else:
                states[s.create({"w": k}, trigger="period", actor="t").id] = P
        elif op in ("approve", "reject", "fail"):
            rid = 1 + k % len(states)
            new = {"approve": A, "reject": R, "fail": F}[op]
            if states[rid] is P:
                s.transition(rid, new, actor="t", allowed_from=[P])
                states[rid] = new
                if new is A:
                    live = rid
            else:
                with pytest.raises(ActionNotAllowed):
                    s.transition(rid, new, actor="t", allowed_from=[P])
        elif op == "rollback" and live is not None and states[live] is A:
            s.transition(live, RB, actor="t")
            states[live] = RB
            live = None
        run = s.running()
        assert (run.id if run else None) == (live if live and states[live] is A else None)
        pend = [i for i, st_ in states.items() if st_ is P]
        assert (s.pending().id if s.pending() else None) == (pend[0] if pend else None)
        assert {r.id: r.state for r in s.history()} == states


# -- real processes --------------------------------------------------------------------------
RACER = textwrap.dedent("""
    import sys, time
    from autosched.live.store import RevisionStore, RevisionState
    from autosched.live.errors import ActionNotAllowed
    s = RevisionStore(sys.argv[1])
    while time.time() < float(sys.argv[3]):
        time.sleep(0.001)
    try:
        s.transition(2, RevisionState.APPLIED, actor="proc:" + sys.argv[2],
                     allowed_from=[RevisionState.PROPOSED])
        print("won")
    except ActionNotAllowed:
        print("lost")
""")


def test_processes_racing_to_approve_one_wins(tmp_path):
    s = RevisionStore(tmp_path)
    s.create({"w": 1}, trigger="baseline", actor="t", state=A)
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
    from autosched.live.store import RevisionStore, RevisionState
    s = RevisionStore(sys.argv[1])
    i = 0
    print("ready", flush=True)
    while True:
        i += 1
        r = s.create({"w": i}, trigger="period", actor="w")
        s.transition(r.id, RevisionState.REJECTED, actor="w", allowed_from=[RevisionState.PROPOSED])
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
        s.transition(hist[0].id, R, actor="t", allowed_from=[P])
    s.create({"w": -1}, trigger="period", actor="t")  # the store goes on


def test_only_a_proposal_can_be_applied(tmp_path):
    s = RevisionStore(tmp_path)
    s.create({"w": 1}, trigger="baseline", actor="agent", state=A)
    with pytest.raises(ActionNotAllowed, match="revision 1 is applied; only a proposed revision"):
        s.begin_apply(1, actor="op", previous={})
