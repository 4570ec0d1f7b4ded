"""An operator's settings are never lost in silence, against a real slurmctld (the `testbed`
cluster): an approve or a rollback over a hand edit is refused or forced and recorded; every
write and every round carry slurm.conf's own SchedulerParameters entries into the include file,
and a round reports a managed setting slurm.conf sets that the include file shadows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autosched.live.agent import init_agent
from autosched.live.errors import ActionNotAllowed
from autosched.live.records import LiveOverride, RevisionKind
from live_helpers import show_config, slurm_settings

pytestmark = pytest.mark.slurm
SRC = str(Path(__file__).resolve().parents[1] / "src")
AUTOSCHED = str(Path(sys.executable).parent / "autosched")


@pytest.fixture
def bed_agent(slurm_testbed, tmp_path):
    """An agent on the testbed; slurm.conf and the include file are put back afterwards."""
    bed = slurm_testbed
    conf, include = bed.conf.read_text(), bed.include.read_text()
    os.environ["SLURM_CONF"] = str(bed.conf)
    a = init_agent(tmp_path / "state", slurm_settings(bed))
    a.step()  # records the baseline
    yield a
    bed.conf.write_text(conf)
    bed.include.write_text(include)
    bed.reconfigure()


def _approve(agent, **knobs):
    p = agent.store.create(dict(agent.store.running().config, **knobs), trigger="manual",
                           actor="test")
    return agent.approve(p.id, "operator:test")


def _hand_edit(bed, name: str, value: str) -> None:
    lines = bed.include.read_text().splitlines()
    bed.include.write_text("\n".join(f"{name}={value}" if line.startswith(name + "=") else line
                                     for line in lines) + "\n")
    bed.reconfigure()


def test_a_rollback_over_a_hand_edit_is_refused_then_forced_and_recorded(slurm_testbed,
                                                                          bed_agent):
    bed, agent = slurm_testbed, bed_agent
    _approve(agent, PriorityWeightAge=1234)
    _hand_edit(bed, "PriorityWeightAge", "7")
    assert show_config(bed, "PriorityWeightAge") == "7"
    with pytest.raises(ActionNotAllowed, match="PriorityWeightAge is 7 live, 1234 in revision 2"):
        agent.rollback(None, "operator:test")
    assert show_config(bed, "PriorityWeightAge") == "7"
    env = dict(bed.env, PYTHONPATH=SRC)
    res = subprocess.run([AUTOSCHED, "agent", "rollback", "--state", str(agent.state_dir)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "PriorityWeightAge is 7 live, 1234 in revision 2" in res.stderr
    res = subprocess.run([AUTOSCHED, "agent", "rollback", "--force", "--state",
                          str(agent.state_dir)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert "discarded the hand-set PriorityWeightAge=7 (the running revision had 1234)" in res.stdout
    assert show_config(bed, "PriorityWeightAge") == "1000"
    back = agent.store.running()
    assert back.kind is RevisionKind.ROLLBACK
    assert back.overridden == (LiveOverride("PriorityWeightAge", "7", "1234"),)


def test_writes_and_rounds_carry_slurm_confs_own_scheduler_parameters(slurm_testbed, bed_agent):
    bed, agent = slurm_testbed, bed_agent
    _approve(agent, PriorityWeightAge=1234)
    assert "SchedulerParameters=" in bed.include.read_text()
    conf = bed.conf.read_text()
    edited = conf.replace("SchedulerParameters=bf_window=1440,bf_interval=30,bf_resolution=60",
                          "SchedulerParameters=bf_window=1440,bf_interval=30,bf_resolution=60,"
                          "default_queue_depth=200,bf_max_job_user=4")
    edited = edited.replace("PriorityWeightFairshare=10000", "PriorityWeightFairshare=50000")
    assert edited != conf
    bed.conf.write_text(edited)
    bed.reconfigure()
    # the include file's full line shadows slurm.conf's: the new entries are not live yet
    assert "default_queue_depth" not in show_config(bed, "SchedulerParameters")
    out = agent.step()
    params = show_config(bed, "SchedulerParameters").split(",")
    assert {"default_queue_depth=200", "bf_max_job_user=4"} <= set(params)
    assert len(out.merged) == 1 and "default_queue_depth=200,bf_max_job_user=4" in out.merged[0]
    assert agent.store.last_round().merged == out.merged
    fair = [s for s in out.shadowed if s.startswith("PriorityWeightFairshare")]
    assert fair == ["PriorityWeightFairshare=50000 in slurm.conf does not take effect: the agent's "
                    "include file sets PriorityWeightFairshare=10000 (revision 2); change it "
                    "through the agent"]
    assert show_config(bed, "PriorityWeightFairShare") == "10000"
    assert fair[0] in agent.status().shadowed
    assert agent.step().merged == ()  # nothing more to carry: nothing written
    # a write (an approve) carries slurm.conf's entries as they are now
    bed.conf.write_text(edited.replace(",bf_max_job_user=4", ""))
    _approve(agent, PriorityWeightAge=1235)
    params = show_config(bed, "SchedulerParameters").split(",")
    assert "default_queue_depth=200" in params and not any(
        p.startswith("bf_max_job_user") for p in params)
    assert show_config(bed, "PriorityWeightAge") == "1235"


def test_a_freeze_answers_at_once_while_slurmctld_is_down_and_a_rollback_waits_on_it(
        slurm_testbed, bed_agent):
    import time

    from autosched.client import Client, ServiceError
    from autosched.service.serve import serve_in_process
    from service_kit import rollback_in_background

    bed, agent = slurm_testbed, bed_agent
    _approve(agent, PriorityWeightAge=1234)
    token = "t" * 32
    (agent.state_dir / "tok").write_text(token)
    (agent.state_dir / "tok").chmod(0o600)
    with serve_in_process(agent.state_dir, "--token-file", str(agent.state_dir / "tok"),
                          src=SRC) as (url, _):
        c = Client(url, token)
        bed.stop_slurmctld()
        try:
            t, done = rollback_in_background(c)
            time.sleep(0.5)  # the rollback is reading Slurm, which does not answer
            t0 = time.monotonic()
            flags = c.freeze("slurmctld is down")
            took = time.monotonic() - t0
            in_flight = t.is_alive()
            t.join(120)
        finally:
            bed.start_slurmctld()
    assert flags["frozen"] and took < 1.0, took
    print(f"freeze answered in {took:.3f} s; the rollback was in flight: {in_flight}")
    assert isinstance(done[0], ServiceError) and "503" in str(done[0])
    assert agent.store.running().config["PriorityWeightAge"] == 1234


def test_agent_status_only_reads_a_round_reconciles(slurm_testbed, bed_agent):
    import sqlite3

    bed, agent = slurm_testbed, bed_agent
    base = agent.store.running()
    p = agent.store.create(dict(base.config, PriorityWeightAge=4321), trigger="manual",
                           actor="test")
    before = bed.include.read_text()
    intent = agent.store.begin_apply(p.id, actor="test", previous=agent.connector.snapshot())
    # what a process killed between writing and reconfiguring leaves: the file new, Slurm old
    bed.include.write_text(before + "PriorityWeightAge=4321\n")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with sqlite3.connect(agent.store.path) as db:
        db.execute("UPDATE applies SET pid = ? WHERE seq = ?", (dead.pid, intent.seq))
    env = dict(bed.env, PYTHONPATH=SRC)
    for cmd in (["status"], ["status", "--json"]):
        res = subprocess.run([AUTOSCHED, "agent", *cmd, "--state", str(agent.state_dir)],
                             env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
    assert bed.include.read_text().endswith("PriorityWeightAge=4321\n")  # not restored
    assert agent.store.open_apply() is not None
    bed.reconfigure()  # (Slurm re-reads the file the killed apply wrote, as any reconfigure would)
    assert show_config(bed, "PriorityWeightAge") == "4321"
    agent.step()  # a round reconciles: the file before, Slurm reconfigured
    assert agent.store.open_apply() is None and bed.include.read_text() == before
    assert show_config(bed, "PriorityWeightAge") == "1000"
    st = agent.status()
    assert st.live is not None and st.live.knobs["PriorityWeightAge"] == "1000"


def test_a_hand_edit_of_the_include_files_scheduler_parameters_is_kept(slurm_testbed, bed_agent):
    """`sched_interval=45` added by hand to the include file's SchedulerParameters (and a copied
    entry's value changed) was removed by the next round, even a "wait" one, and slurmctld
    reconfigured, though the file's own header says a hand edit blocks the agent."""
    bed, agent = slurm_testbed, bed_agent
    _approve(agent, PriorityWeightAge=1234)  # the agent writes its SchedulerParameters line
    text = bed.include.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("SchedulerParameters="))
    bed.include.write_text(text.replace(line, line + ",sched_interval=45"))
    bed.reconfigure()
    assert "sched_interval=45" in show_config(bed, "SchedulerParameters")
    out = agent.step()
    assert out.merged == () and "sched_interval=45" in show_config(bed, "SchedulerParameters"), out
    assert "sched_interval=45" in bed.include.read_text()
    # the next write (an approve) keeps it too, named as kept
    _approve(agent, PriorityWeightAge=1235)
    assert "sched_interval=45" in show_config(bed, "SchedulerParameters").split(",")
    assert any(ln.startswith("# kept from this file's SchedulerParameters") and
               "sched_interval" in ln for ln in bed.include.read_text().splitlines())
    assert show_config(bed, "PriorityWeightAge") == "1235"


def test_a_setting_after_the_include_line_is_named_not_blamed_on_the_include(slurm_testbed,
                                                                           bed_agent):
    """`PriorityWeightAge=1000` appended to slurm.conf after the Include line was reported as a
    hand edit of the include file (which said 1679)."""
    bed, agent = slurm_testbed, bed_agent
    _approve(agent, PriorityWeightAge=1679)
    bed.conf.write_text(bed.conf.read_text() + "PriorityWeightAge=1000\n")
    bed.reconfigure()
    out = agent.step()
    assert out.action.value == "blocked"
    assert out.why.startswith("hand edit: PriorityWeightAge is 1000 live, 1679 in revision 2: "
                              f"{bed.conf}: line ")
    assert "comes after `Include" in out.why and "would override the agent's settings" in out.why


def test_a_value_slurm_conf_kept_while_the_agent_changed_it_is_no_warning(slurm_testbed,
                                                                          bed_agent):
    """After every approved change of a setting slurm.conf also sets, a permanent "does not take
    effect ... change it through the agent" warning followed, though the operator did."""
    agent = bed_agent
    _approve(agent, PriorityWeightAge=4321)
    out = agent.step()
    assert not [s for s in out.shadowed if s.startswith("PriorityWeightAge")], out.shadowed
    assert agent.status().shadowed == out.shadowed
