"""The kill switch needs the store only, and a file when the store cannot be written: freeze and
unfreeze from the CLI and the API while the agent's settings cannot be loaded (a plugin policy
missing from the path, an unknown key), the stop file (by hand, and when the disk is full, with
"no space left" said as such), and the audit record's rules for who acts and why, the same on the
command line as in the API."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from autosched.live.store import STOP_FILE, RevisionStore
from service_kit import AUTH, AUTOSCHED, SRC, call, make_app, seed, serve_in_thread

ENV = {**os.environ, "PYTHONPATH": SRC}


def agent(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AUTOSCHED, "agent", *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV, stdin=subprocess.DEVNULL)


def _break_settings(state: Path, how: str) -> None:
    """settings.json as a process without the plugin, or after a hand edit, reads it."""
    path = state / "settings.json"
    data = json.loads(path.read_text())
    if how == "plugin not on the path":
        data["loop"]["policy"] = "mfplug:MyMF"
    else:
        data["oops"] = 1
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("how", ["plugin not on the path", "unknown key"])
def test_freeze_and_unfreeze_need_the_store_only(tmp_path, how):
    """`agent freeze` and POST /api/freeze loaded all of settings.json and refused (exit 2, 503)
    while the loop went on."""
    state = tmp_path / "state"
    store = seed(state)
    _break_settings(state, how)
    assert agent("status", "--state", str(state)).returncode == 2  # what needs the settings
    r = agent("freeze", "--state", str(state), "--reason", "stop now", "--actor", "operator:ann")
    assert (r.returncode, r.stdout, r.stderr) == (0, "agent frozen\n", "")
    flags = store.flags()
    assert (flags.frozen, flags.frozen_by, flags.frozen_reason) == (True, "operator:ann", "stop now")
    r = agent("unfreeze", "--state", str(state))
    assert r.returncode == 0 and not store.flags().frozen
    with serve_in_thread(make_app(state)) as url:
        status, body = call(url, "POST", "/api/freeze", b'{"reason": "api"}', AUTH)
        assert status == 200 and json.loads(body)["frozen"] is True, body
        assert store.flags().frozen_reason == "api"
        status, body = call(url, "POST", "/api/unfreeze", b"{}", AUTH)
        assert status == 200 and not store.flags().frozen


def test_the_stop_file_freezes_and_unfreeze_removes_it(tmp_path):
    state = tmp_path / "state"
    store = seed(state)
    (state / STOP_FILE).touch()  # by hand: no database write
    flags = store.flags()
    assert flags.frozen and flags.frozen_by == "the stop file"
    assert flags.frozen_reason == f"{state / STOP_FILE} exists; `agent unfreeze` removes it"
    r = agent("step", "--state", str(state))
    assert r.returncode == 3 and r.stdout.startswith("frozen: frozen by the stop file"), r.stdout
    assert "FROZEN by the stop file" in agent("status", "--state", str(state)).stdout
    r = agent("approve", "2", "--state", str(state))
    assert r.returncode == 2 and "the agent is frozen by the stop file" in r.stderr
    r = agent("unfreeze", "--state", str(state))
    assert r.returncode == 0 and not (state / STOP_FILE).exists() and not store.flags().frozen


def test_an_apply_refuses_a_freeze_stored_after_the_round_looked(tmp_path):
    """The check is in the apply's own transaction: a freeze stored between a round's look and
    its apply stops the apply (the round applied 0.1 s and 0.8 s after a freeze)."""
    from autosched.live.errors import Frozen

    store = seed(tmp_path / "state")
    store.freeze("operator:ann", "mid-round")
    with pytest.raises(Frozen, match="the agent is frozen by operator:ann: mid-round"):
        store.begin_apply(2, actor="agent:auto", previous={})
    assert store.open_apply() is None
    store.unfreeze("operator:ann")
    (tmp_path / "state" / STOP_FILE).touch()
    with pytest.raises(Frozen, match="frozen by the stop file"):
        store.begin_apply(2, actor="agent:auto", previous={})
    # an operator's rollback is allowed while frozen: how one gets back to a known state
    assert store.begin_apply(2, actor="operator:ann", previous={}, while_frozen=True).rev_id == 2


def test_a_freeze_on_a_mistyped_state_begins_no_store(tmp_path):
    r = agent("freeze", "--state", str(tmp_path / "nothing"))
    assert r.returncode == 2 and r.stderr == (f"error: {tmp_path / 'nothing' / 'settings.json'}: "
                                              "no agent here (initialise the state directory "
                                              "first)\n")
    assert not (tmp_path / "nothing").exists()


@pytest.fixture
def full_disk(tmp_path):
    """A 2 MB tmpfs holding an agent's state, then filled to the last byte."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        seed(mnt / "state")
        fd = os.open(mnt / "fill", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass  # ENOSPC: full
        finally:
            os.close(fd)
        yield mnt / "state"
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_full_disk_is_said_and_the_freeze_falls_back_to_the_stop_file(full_disk):
    """A full state disk gave "disk I/O error" and no way to freeze."""
    state = full_disk
    r = agent("reject", "2", "--state", str(state))
    assert r.returncode == 2
    assert r.stderr == (f"error: {state / 'state.db'}: no space left on the device of {state} "
                        "(SQLite: disk I/O error); free some space and try again\n")
    r = agent("freeze", "--state", str(state), "--reason", "disk full")
    assert r.returncode == 0 and r.stdout == "agent frozen\n"
    assert r.stderr.startswith(f"warning: {state / 'state.db'}: no space left on the device")
    assert r.stderr.rstrip().endswith(f"frozen with the stop file {state / STOP_FILE} instead "
                                      "(every round and apply checks it; `agent unfreeze` "
                                      "removes it)")
    assert (state / STOP_FILE).exists()
    (state.parent / "fill").unlink()  # space again: the store reads the stop file
    flags = RevisionStore(state).flags()
    assert flags.frozen and flags.frozen_by in ("operator:" + os.environ.get("USER", "root"),
                                                "the stop file")
    r = agent("unfreeze", "--state", str(state))
    assert r.returncode == 0 and not (state / STOP_FILE).exists()


@pytest.mark.parametrize("args, message", [
    (["--actor", "   "], "actor '   ': use NAME or KIND:NAME"),
    (["--actor", ""], "actor '': use NAME or KIND:NAME"),
    (["--actor", 'evil\n{"event":"fake"}'], "use NAME or KIND:NAME"),
    (["--actor", "x" * 100_000], "use NAME or KIND:NAME"),
    (["--reason", "two\nlines"], "reason 'two\\nlines': one line without control characters"),
    (["--reason", "r" * 1001], "at most 1,000 characters (got 1,001)"),
])
def test_the_clis_actor_and_reason_follow_the_apis_rules(tmp_path, args, message):
    """Each was recorded before: a blank actor, a newline that forged a line of `agent status`,
    a 100 KB name that grew the page to 111 KB."""
    state = tmp_path / "state"
    store = seed(state)
    for command in (["freeze"], ["reject", "2"]):
        if args[0] == "--reason" or command == ["freeze"]:
            r = agent(*command, "--state", str(state), *args)
            assert r.returncode == 2 and message in r.stderr, r.stderr
            assert len(r.stderr.splitlines()) == 1
    assert not store.flags().frozen and store.get(2).state.value == "proposed"


def test_the_api_refuses_a_reason_with_a_newline(tmp_path):
    state = tmp_path / "state"
    store = seed(state)
    with serve_in_thread(make_app(state)) as url:
        status, _ = call(url, "POST", "/api/freeze", json.dumps({"reason": "a\nb"}).encode(),
                         AUTH)
        assert status == 422 and not store.flags().frozen


def test_settings_with_a_webhook_are_readable_by_their_owner_only(tmp_path):
    from autosched.live.agent import AgentSettings, init_agent
    from autosched.live.fake import FakeConnector

    FakeConnector.create(tmp_path / "fake")
    spec = {"kind": "fake", "directory": str(tmp_path / "fake")}
    old = os.umask(0o022)
    try:
        init_agent(tmp_path / "a", AgentSettings(connector=spec,
                                                 notify="http://127.0.0.1:9/secret-token-path"))
        init_agent(tmp_path / "b", AgentSettings(connector=spec))
    finally:
        os.umask(old)
    assert (tmp_path / "a" / "settings.json").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "b" / "settings.json").stat().st_mode & 0o777 == 0o644


def test_a_legacy_file_with_both_spellings_of_a_setting_is_refused():
    from autosched.live.errors import LiveError
    from autosched.live.settings import AgentSettings

    flat = {"connector": {"kind": "fake", "directory": "/x"}, "margin": 0.0, "guard_margin": 0.5}
    with pytest.raises(LiveError, match=r"^s.json: margin and guard_margin are two spellings of "
                                        r"one setting; keep one$"):
        AgentSettings.from_json(flat, "s.json")
    one = {k: v for k, v in flat.items() if k != "margin"}
    assert AgentSettings.from_json(one, "s.json").guard_margin == 0.5


@pytest.mark.parametrize("how", ["store", "stop file"])
def test_a_freeze_stored_while_an_auto_round_tunes_stops_its_apply(tmp_path, how):
    """Frozen 2.0 s and 2.6 s into an auto round (through the API), both rounds still applied and
    reconfigured slurmctld after the freeze was stored: the apply never looked again."""
    from autosched.live.killswitch import KillSwitch
    from autosched.live.round import Action
    from live_helpers import make

    agent, fake = make(tmp_path, mode="auto")
    tune = agent.tuning.run

    def tune_then_freeze(*args, **kwargs):
        got = tune(*args, **kwargs)
        if how == "store":  # what another process's `agent freeze` or POST /api/freeze does
            KillSwitch(agent.state_dir).freeze("operator:carol", "mid-round")
        else:
            (agent.state_dir / STOP_FILE).touch()
        return got

    agent.tuning.run = tune_then_freeze  # type: ignore[method-assign]
    include_before = fake.include.read_text() if fake.include.exists() else None
    live_before = fake.live_values()
    out = agent.step()
    assert out.action is Action.FROZEN and out.exit_code == 3, out
    assert out.why.startswith(f"revision {out.revision} not applied: the agent is frozen by ")
    assert fake.live_values() == live_before  # Slurm was not reconfigured
    assert (fake.include.read_text() if fake.include.exists() else None) == include_before
    rev = agent.store.get(out.revision)
    assert rev.state.value == "rejected" and rev.applied_at is None
    assert agent.store.running().id == 1


def test_an_apply_the_store_cannot_record_is_put_back_at_once(tmp_path):
    """The disk filled up mid-approve, after the include file changed: Slurm ran revision 2 while
    the store still showed it proposed, until a later round restored revision 1."""
    from autosched.live.errors import LiveError
    from autosched.live.records import RevisionState
    from live_helpers import make

    agent, fake = make(tmp_path)
    base = agent.view.running_or_baseline()
    p = agent.store.create(dict(base.config, PriorityWeightAge=5), trigger="manual", actor="t")
    before = fake.live_values()
    end_apply = agent.store.end_apply

    def full(intent, *, state, **kw):
        if state is RevisionState.APPLIED:
            raise LiveError(f"{agent.store.path}: no space left on the device")
        return end_apply(intent, state=state, **kw)

    agent.store.end_apply = full  # type: ignore[method-assign]
    with pytest.raises(LiveError, match=f"no space left on the device; revision {p.id} could not "
                                        "be recorded, so the previous settings were put back$"):
        agent.approve(p.id, "operator:alice")
    assert fake.live_values() == before  # Slurm and the store agree: revision 1 runs
    agent.store.end_apply = end_apply  # type: ignore[method-assign]
    assert agent.store.running().id == 1
