"""Reads only read, and the status says whether the loop is alive (fake connector): `agent
status` never reconfigures; `agent run` records a heartbeat; overdue rounds, a dead loop and an
old reading of Slurm are warned of; a stale "Slurm does not answer" clears once Slurm answers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from autosched.live.agent import start_agent
from autosched.live.records import Heartbeat, LiveReading, RevisionState
from autosched.live.round import Action
from autosched.live.status import loop_warnings
from live_helpers import make

SRC = str(Path(__file__).resolve().parents[1] / "src")
AUTOSCHED = str(Path(sys.executable).parent / "autosched")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_agent_status_never_reconfigures_an_interrupted_apply_the_next_start_does(tmp_path):
    agent, fake = make(tmp_path)
    base = agent.view.running_or_baseline()
    p = agent.store.create(dict(base.config, PriorityWeightAge=31337), trigger="manual", actor="t")
    intent = agent.store.begin_apply(p.id, actor="t", previous=agent.connector.snapshot())
    fake.include.write_text("PriorityWeightAge=31337\n")  # the write a killed process left
    # make the intent a dead process's
    import sqlite3

    with sqlite3.connect(agent.store.path) as db:
        db.execute("UPDATE applies SET pid = ? WHERE seq = ?", (_dead_pid(), intent.seq))
    calls = len(fake.state()["calls"])
    res = subprocess.run([AUTOSCHED, "agent", "status", "--state", str(agent.state_dir)],
                         env={**os.environ, "PYTHONPATH": SRC}, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert f"an apply of revision {p.id} has not ended" in res.stdout
    assert fake.state()["calls"][calls:] == []  # nothing asked of Slurm, nothing reconfigured
    assert fake.include.read_text() == "PriorityWeightAge=31337\n"
    assert agent.store.open_apply() is not None
    started = start_agent(agent.state_dir)  # `agent run` / `agent serve` reconcile at start
    assert started.store.open_apply() is None and not fake.include.exists()
    assert started.store.get(p.id).state is RevisionState.FAILED


def test_agent_run_beats_and_the_status_says_the_loop_is_alive(tmp_path):
    agent, _ = make(tmp_path, drift=False)
    st = agent.status()
    assert st.heartbeat is None and not st.loop_alive
    assert st.warnings[0].startswith("no `agent run` has ever run")
    agent.run(rounds=1)
    st = agent.status()
    assert st.heartbeat.pid == os.getpid() and st.loop_alive
    assert not any("agent run" in w for w in st.warnings)
    assert st.live is not None and st.live.knobs["PriorityWeightAge"] == "1000"


def test_loop_warnings_name_a_dead_loop_an_overdue_round_and_an_old_reading():
    now = 100_000.0
    gone = Heartbeat(now - 50, 4242, "h", 30.0, now - 500)
    got = loop_warnings(now, gone, False, next_round=now - 200, period=600.0,
                        live=LiveReading(now - 7200, {}))
    assert got == ("no `agent run` is alive: pid 4242 on h was last seen 50 s ago",
                   "a round is overdue: it was due 3.3 min ago",
                   "Slurm's settings were last read 2.0 h ago")
    fine = loop_warnings(now, gone, True, next_round=now - 30, period=600.0,
                         live=LiveReading(now - 30, {}))
    assert fine == ()


def test_a_stale_slurm_down_block_clears_once_slurm_answers(tmp_path):
    agent, fake = make(tmp_path)
    agent.step()
    fake.update(down=True)
    out = agent.step()
    assert out.action is Action.BLOCKED and agent.status().blocked.startswith("Slurm does not answer")
    fake.update(down=False)
    agent.view.live_values()  # what `agent run` does at each poll, and every action
    st = agent.status()
    assert st.blocked == "" and st.live is not None
    # a block that needs an operator stays
    fake.hand_edit("PriorityWeightAge", "7")
    assert agent.step().action is Action.BLOCKED
    agent.view.live_values()
    assert agent.status().blocked.startswith("hand edit")


def test_a_shadowed_setting_said_of_an_older_running_revision_is_not_shown(tmp_path):
    """The page kept "X in slurm.conf does not take effect: the agent's include file sets ...
    (revision 4)" after an adopt or approve made another revision run, until the next round."""
    from autosched.live.records import RevisionKind
    from autosched.live.status import read_status
    from autosched.live.store import RevisionStore

    store = RevisionStore(tmp_path / "s")
    said = ["bf_window=2880 in slurm.conf does not take effect: the agent's include file sets "
            "bf_window=1440 (revision 1); change it through the agent"]
    store.record_round({"action": "wait", "why": "", "shadowed": said}, when=1.0)
    store.create({"bf_window": 2880}, kind=RevisionKind.BASELINE, trigger="baseline",
                 actor="agent")  # applied after that round looked
    assert read_status(store).shadowed == ()
    store.record_round({"action": "wait", "why": "", "shadowed": said})  # a round since: shown
    assert read_status(store).shadowed == tuple(said)
