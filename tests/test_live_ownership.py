"""Who owns the state directory and the include file: one `agent run` per state directory (a
second refuses, naming the first), `agent init` refuses while a loop holds the store (it went on
with the settings it read at its start while the page showed the new ones), a second agent's
writes to a shared include file are named as such, a value Slurm accepts beyond autosched's range
gets a way out at `adopt`, and a retried approve of an interrupted revision says what happened.
On the fake connector, with real processes where the finding needs them."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from autosched.live.agent import AgentSettings, init_agent
from autosched.live.errors import ActionNotAllowed, LiveError
from autosched.live.round import Action
from live_helpers import leave_an_apply_open, make
from service_kit import AUTOSCHED, SRC, seed

ENV = {**os.environ, "PYTHONPATH": SRC}


def _run_loop(state) -> subprocess.Popen[str]:
    """`agent run` in its own process, once it holds the state directory (its first round
    logged)."""
    proc = subprocess.Popen([AUTOSCHED, "agent", "run", "--state", str(state), "--poll", "600"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the first round's JSON line: the lock is held by then
    assert '"event": "round"' in line, (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)


def test_one_loop_per_state_directory_and_no_init_under_it(tmp_path):
    """Two `agent run` on one state directory both ran every round (two tunings, two outcomes of
    one revision); `agent init` under a running loop changed the page, not the loop."""
    state = tmp_path / "state"
    seed(state)
    first = _run_loop(state)
    try:
        r = subprocess.run([AUTOSCHED, "agent", "run", "--state", str(state), "--rounds", "1"],
                           capture_output=True, text=True, env=ENV, timeout=120)
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr == (f"error: {state / 'run.lock'}: another `agent run` (pid {first.pid} on "
                            f"{os.uname().nodename}) runs on this state directory; one loop per "
                            "state directory: stop it first\n")
        r = subprocess.run([AUTOSCHED, "agent", "init", "--state", str(state), "--fake",
                            str(tmp_path / "fake"), "--auto"], capture_output=True, text=True,
                           env=ENV, timeout=120)
        assert r.returncode == 2 and r.stderr.startswith(
            f"error: {state}: `agent run` (pid {first.pid} on ")
        assert "stop it, init, then start it again" in r.stderr
        assert AgentSettings.load(state).mode == "propose"  # nothing written
    finally:
        _stop(first)
    # the loop is gone (its lock with it, as after kill -9): init and a new loop go ahead
    r = subprocess.run([AUTOSCHED, "agent", "init", "--state", str(state), "--fake",
                        str(tmp_path / "fake"), "--auto"], capture_output=True, text=True,
                       env=ENV, timeout=120)
    assert r.returncode == 0, r.stderr
    second = _run_loop(state)
    second.kill()  # SIGKILL: the kernel releases the lock
    second.wait(30)
    third = _run_loop(state)
    _stop(third)


def test_a_second_agents_writes_to_a_shared_include_file_are_named(tmp_path):
    """Two state directories on one include file: the old agent called the new one's changes
    "a hand edit", and the include file did not say which store wrote it."""
    a, fake = make(tmp_path / "a")
    base = a.view.running_or_baseline()
    b = init_agent(tmp_path / "b", a.settings)  # the same fake cluster, another store
    b.view.running_or_baseline()
    p = b.store.create(dict(base.config, PriorityWeightAge=4321), trigger="manual", actor="t")
    b.approve(p.id, "operator:bob")
    assert f"# store: {b.store.path}" in fake.include.read_text()
    out = a.step()
    assert out.action is Action.BLOCKED and out.why.startswith(
        "hand edit: PriorityWeightAge is 4321 live, 1000 in revision 1")
    assert (f"; the include file was last written by the agent whose store is "
                            f"{b.store.path}, not this one: two agents share it (give each its "
                            "own include file)") in out.why


def test_adopt_says_the_way_out_of_a_value_beyond_autoscheds_range(tmp_path):
    """PriorityWeightJobSize=99999999 is valid in Slurm (weights go to 2**32 - 1): the round was
    blocked as a hand edit, and adopt failed naming only the range."""
    agent, fake = make(tmp_path)
    agent.step()
    fake.hand_edit("PriorityWeightJobSize", "99999999")
    assert agent.step().action is Action.BLOCKED
    with pytest.raises(ActionNotAllowed) as e:
        agent.adopt("operator:ann")
    assert str(e.value) == (
        "cannot adopt the live settings: scontrol show config: knob 'PriorityWeightJobSize': "
        "99999999 is outside its range [0, 100000], the range autosched tunes; set it inside "
        "that range (in the include file, then `scontrol reconfigure`) and adopt, or undo the "
        "edit")
    fake.hand_edit("PriorityWeightJobSize", "99999")
    assert agent.adopt("operator:ann").config["PriorityWeightJobSize"] == 99999


def test_a_retried_approve_of_an_interrupted_apply_says_what_happened(tmp_path):
    """kill -9 of `agent approve 5` mid-apply, then `agent approve 5` again: it reconfigured
    Slurm back and said only "revision 5 is failed; only a proposed revision can be
    approved"."""
    agent, fake = make(tmp_path)
    base = agent.view.running_or_baseline()
    p = agent.store.create(dict(base.config, PriorityWeightAge=5), trigger="manual", actor="t")
    leave_an_apply_open(agent, p.id)
    with pytest.raises(ActionNotAllowed) as e:
        agent.approve(p.id, "operator:again")
    said = str(e.value)
    assert said.startswith(f"revision {p.id} is failed: its apply was interrupted (interrupted: "
                           "the process applying it (pid ")
    assert "the settings before it were restored just now, by this command, and Slurm runs " \
           "them" in said
    assert "the agent proposes again at its next round" in said
    time.sleep(0)
    with pytest.raises(ActionNotAllowed, match="were restored since, and Slurm runs them"):
        agent.approve(p.id, "operator:again")


def test_init_refuses_under_a_loop_in_this_process_too(tmp_path):
    from autosched.live.loop import run_lock

    agent, _ = make(tmp_path)
    with run_lock(agent.state_dir):
        with pytest.raises(LiveError, match="runs on this state directory with the settings it "
                                            "read at its start"):
            init_agent(agent.state_dir, agent.settings)
    init_agent(agent.state_dir, agent.settings)


def test_a_rollback_to_the_running_config_is_refused(tmp_path):
    """`rollback 4` while a copy of revision 4's config ran made a "no change" revision."""
    agent, _ = make(tmp_path)
    base = agent.view.running_or_baseline()
    p = agent.store.create(dict(base.config, PriorityWeightAge=5), trigger="manual", actor="t")
    agent.approve(p.id, "operator:a")
    agent.rollback(None, "operator:a")  # revision 3: revision 1's config again
    with pytest.raises(ActionNotAllowed, match=r"^revision 1's config already runs \(revision 3 "
                                               r"has the same\); there is nothing to roll back$"):
        agent.rollback(1, "operator:a")
    assert agent.store.newest_id() == 3


def test_init_on_a_file_says_so(tmp_path):
    from typer.testing import CliRunner

    from autosched.cli import build_app
    from autosched.live.fake import FakeConnector

    FakeConnector.create(tmp_path / "fk")
    (tmp_path / "afile").write_text("x")
    r = CliRunner().invoke(build_app(), ["agent", "init", "--state", str(tmp_path / "afile"),
                                         "--fake", str(tmp_path / "fk")])
    assert r.exit_code == 2 and r.output == (f"error: {tmp_path / 'afile'}: is a file, not a "
                                             "directory; an agent's state is a directory\n")
    r = CliRunner().invoke(build_app(), ["agent", "init", "--state", str(tmp_path / "s"),
                                         "--fake", str(tmp_path / "fk"), "--bound", "=1:2"])
    assert r.exit_code == 2 and r.output == "error: bound '=1:2': use KNOB=LO:HI\n"


def test_a_round_said_with_its_action_once():
    from autosched.cli.agent_cmd import _said

    assert _said("tuning failed", "tuning failed: knob x") == "tuning failed: knob x"
    assert _said("blocked", "Slurm does not answer") == "blocked: Slurm does not answer"


def test_a_json_log_that_cannot_be_written_is_said_once(capsys):
    """`agent run > /dev/full` exited 0 and lost its JSON log without a word."""
    import errno
    import io

    from autosched.live.events_log import JsonLog

    class Full(io.StringIO):  # as a stream on /dev/full behaves
        def write(self, s: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

    log = JsonLog(Full())
    log.message("one")
    log.message("two")
    assert log.lost == 2
    assert capsys.readouterr().err == ("warning: the JSON log cannot be written (No space left "
                                       "on device); its lines are lost until it can\n")


def test_a_hand_edit_of_a_time_says_both_values_in_one_unit(tmp_path):
    """"PriorityCalcPeriod is 00:05:00 live, 1 in revision 5" mixed Slurm's two spellings."""
    agent, fake = make(tmp_path)
    agent.step()
    fake.hand_edit("PriorityMaxAge", "14-0")
    out = agent.step()
    assert out.why.startswith("hand edit: PriorityMaxAge is 14-0 (1,209,600 s) live, 7-0 "
                              "(604,800 s) in revision 1"), out.why
