"""Safety controls act at once, with the fake connector: SIGTERM stops `agent run` within seconds
even mid-round (a search is given up; an apply completes first); a freeze never waits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autosched.live.records import RevisionState
from live_helpers import make

SRC = str(Path(__file__).resolve().parents[1] / "src")
AUTOSCHED = str(Path(sys.executable).parent / "autosched")


def _run(state: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([AUTOSCHED, "agent", "run", "--state", str(state)],
                            env={**os.environ, "PYTHONPATH": SRC}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for(what, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _stop(proc: subprocess.Popen[str]) -> tuple[float, str]:
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return time.monotonic() - t0, out


def test_sigterm_mid_search_gives_the_round_up_within_seconds(tmp_path):
    agent, fake = make(tmp_path, budget=5000)
    proc = _run(agent.state_dir)
    try:
        _wait_for(lambda: "sacct" in (fake.state().get("calls") or []))
        time.sleep(1.5)  # well into the search: 5000 trials take minutes
        assert proc.poll() is None
        took, out = _stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 5.0, took
    lines = [json.loads(line) for line in out.splitlines()]
    assert any("stopped: stop asked while the round read or tuned" in (x.get("message") or "")
               for x in lines), lines
    assert agent.store.rounds() == [] and agent.store.pending() is None
    assert agent.store.open_apply() is None


def test_sigterm_mid_apply_lets_the_apply_complete_then_stops(tmp_path):
    agent, fake = make(tmp_path, mode="auto")
    fake.update(apply_delay=3.0)  # between writing the include file and reconfiguring
    proc = _run(agent.state_dir)
    try:
        _wait_for(lambda: fake.include.exists())
        took, _ = _stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 3.0 + 5.0, took
    assert agent.store.open_apply() is None
    running = agent.store.running()
    assert running.id == 2 and running.state is RevisionState.APPLIED
    want = agent.space.to_settings(agent.space.full(running.config))
    assert {k: fake.state()["live"][k] for k in want} == want
    assert agent.store.last_round().action == "applied"


def test_a_freeze_answers_at_once_while_a_rollback_is_stuck_on_slurm(tmp_path):
    from autosched.client import Client
    from autosched.live.fake import FakeConnector
    from service_kit import TOKEN, make_app, rollback_in_background, seed, serve_in_thread

    state = tmp_path / "state"
    store = seed(state)
    fake = FakeConnector(tmp_path / "fake")
    with serve_in_thread(make_app(state)) as url:
        c = Client(url, TOKEN)
        c.approve(2)
        fake.update(apply_delay=20.0)  # the rollback's apply hangs on "Slurm"
        t, done = rollback_in_background(c)
        _wait_for(lambda: store.open_apply() is not None)
        t0 = time.monotonic()
        flags = c.freeze("stop everything")
        took = time.monotonic() - t0
        assert flags["frozen"] and took < 1.0, took
        # the CLI does not wait either: it ends while the rollback still hangs (its own start-up
        # takes seconds on a loaded machine, so no bound on its time beyond that)
        res = subprocess.run([AUTOSCHED, "agent", "unfreeze", "--state", str(state)],
                             env={**os.environ, "PYTHONPATH": SRC}, capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert store.open_apply() is not None, "the rollback ended before the CLI's unfreeze"
        t.join(60)
    assert isinstance(done[0], dict) and done[0]["state"] == "applied"


def test_a_stop_asked_while_the_judge_replays_gives_the_round_up(tmp_path, monkeypatch):
    """The judge's five replays of a period take minutes on a busy cluster and write nothing: a
    stop asked meanwhile gives the round up at once, the change left unjudged."""
    import autosched.live.judge as judge
    from autosched.live.stopping import RoundAbandoned
    from live_helpers import SMALL_FIRST, apply_change, period_rows

    agent, fake = make(tmp_path)
    at = apply_change(agent, SMALL_FIRST)
    fake.update(sacct=period_rows(int(at), small_first=True), clock=at + 700)
    rounds_before = agent.store.rounds()
    replayed = []

    def replay_then_stop(*args, **kwargs):
        agent.request_stop()  # as the SIGTERM handler does, mid-replay
        replayed.append(True)
        return real(*args, **kwargs)

    real = judge.counterfactual
    monkeypatch.setattr(judge, "counterfactual", replay_then_stop)
    with pytest.raises(RoundAbandoned):
        agent.step()
    assert replayed == []  # request_stop raised: the replay did not go on
    assert agent.store.running().id == 2 and agent.store.running().outcome is None
    assert agent.store.rounds() == rounds_before
