"""`autosched agent ...` and `autosched slurm history` through the CLI (CliRunner), on the fake
connector; the same commands run against the real cluster in docs/slurm.md's transcript and in
test_live_slurm.py."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from autosched.cli import build_app
from autosched.live.fake import FakeConnector
from live_helpers import PINNED_NOW, contended

runner = CliRunner()


def cli(*args):
    return runner.invoke(build_app(), list(args))


def test_init_step_status_approve_rollback_freeze(tmp_path):
    now = PINNED_NOW  # the clock is pinned where the history ends (see test_live_agent.make)
    fake = FakeConnector.create(tmp_path / "fake", sacct=contended(now), nodes=1,
                                gpus_per_node=8)
    fake.update(clock=now)
    st = str(tmp_path / "state")
    r = cli("agent", "init", "--state", st, "--fake", str(tmp_path / "fake"), "--period", "10m",
            "--history", "1h", "--min-jobs", "10", "--budget", "12", "--model", "replay",
            "--margin", "0")
    assert r.exit_code == 0, r.output
    assert "manages PriorityWeightAge, PriorityMaxAge" in r.output
    assert ("fixed in live mode (no Slurm setting): placement=consolidate, PriorityFlags=FAIR_TREE, "
            "TRESBillingWeights.GRES/gpu=1.0, TRESBillingWeights.CPU=0.0, backfill=True, reserve_after=21600.0, "
            "sched_interval=60, default_queue_depth=100, batch_sched_delay=3") in " ".join(r.output.split())
    r = cli("agent", "step", "--state", st)
    assert r.exit_code == 0 and r.output.startswith("proposed: gain +"), r.output
    r = cli("agent", "status", "--state", st)
    assert "running: revision 1 (baseline)" in r.output and "pending: revision 2 (period)" in r.output
    d = json.loads(cli("agent", "status", "--state", st, "--json").output)
    assert d["pending"]["id"] == 2 and d["pending"]["state"] == "proposed"
    r = cli("agent", "approve", "2", "--state", st, "--actor", "operator:alice")
    assert r.exit_code == 0 and r.output.startswith("revision 2 applied: "), r.output
    assert fake.include.exists()
    r = cli("agent", "approve", "2", "--state", st)
    assert r.exit_code == 2
    assert r.output.strip() == "error: revision 2 is applied; only a proposed revision can be approved"
    r = cli("agent", "rollback", "--state", st)
    assert r.exit_code == 0 and r.output.startswith("revision 3 (rollback to 1) applied"), r.output
    assert cli("agent", "freeze", "--state", st, "--reason", "drill").exit_code == 0
    r = cli("agent", "step", "--state", st)
    assert r.output.startswith("frozen: frozen by operator:") and r.exit_code == 3
    assert "FROZEN by operator:" in cli("agent", "status", "--state", st).output
    assert cli("agent", "unfreeze", "--state", st).exit_code == 0
    assert cli("agent", "reject", "9", "--state", st).output.startswith("error: no revision 9")


def test_errors_are_one_line(tmp_path):
    r = cli("agent", "status", "--state", str(tmp_path / "none"))
    assert r.exit_code == 2 and r.output.startswith("error: ") and "no agent here" in r.output
    r = cli("agent", "init", "--state", str(tmp_path / "s"), "--fake", str(tmp_path / "f"))
    assert r.exit_code == 2 and "no fake cluster here" in r.output
    FakeConnector.create(tmp_path / "f")
    r = cli("agent", "init", "--state", str(tmp_path / "s"), "--fake", str(tmp_path / "f"),
            "--period", "10")
    assert r.exit_code == 2 and "at least 60 s" in r.output


def test_init_without_the_include_line_says_what_to_add_and_writes_nothing(tmp_path):
    """A refused init leaves nothing behind (it used to write settings.json and state.db, and
    `step` then proposed); the Include line must be the last setting line of slurm.conf."""
    conf, inc = tmp_path / "slurm.conf", tmp_path / "autosched.conf"
    conf.write_text("ClusterName=x\n")
    r = cli("agent", "init", "--state", str(tmp_path / "s"), "--slurm-conf", str(conf))
    assert r.exit_code == 2
    assert r.output == (f"error: {conf} has no line `Include {inc}`: add it as the last line of slurm.conf, "
                        "then run `scontrol reconfigure`\n")
    assert not (tmp_path / "s").exists() and not inc.exists()
    conf.write_text(f"ClusterName=x\nInclude {inc}\nPriorityWeightAge=5  # after the Include: it wins\n\n# end\n")
    r = cli("agent", "init", "--state", str(tmp_path / "s"), "--slurm-conf", str(conf))
    assert r.exit_code == 2 and not (tmp_path / "s").exists() and not inc.exists()
    assert r.output == (f"error: {conf}: line 3 (`PriorityWeightAge=5  # after the Include: it wins`) comes after "
                        f"`Include {inc}` (line 2) and would override the agent's settings; make the Include line "
                        "the last setting line of slurm.conf, then run `scontrol reconfigure`\n")
    conf.write_text(f"ClusterName=x\nInclude {inc}\n\n# comments and blank lines may follow\n")
    r = cli("agent", "init", "--state", str(tmp_path / "s"), "--slurm-conf", str(conf))
    assert r.exit_code == 0, r.output
    assert inc.read_text().startswith("# Managed by autosched") and (tmp_path / "s" / "settings.json").exists()


def test_init_saves_whether_the_backlog_keeps_its_past(tmp_path):
    """`agent init` saves the choice; the default is the simulator's (`observe.BACKLOG_HISTORY`),
    which the help states; a state saved before the field existed loads with the default."""
    import inspect

    from autosched.adapt.observe import BACKLOG_HISTORY
    from autosched.cli.agent_cmd import init_cmd
    from autosched.live.settings import SETTINGS_FILE, AgentSettings

    FakeConnector.create(tmp_path / "fake", sacct=contended(PINNED_NOW), nodes=1, gpus_per_node=8)
    for flags, want in (([], BACKLOG_HISTORY), (["--no-backlog-history"], False), (["--backlog-history"], True)):
        st = tmp_path / f"state{len(flags)}{want}"
        r = cli("agent", "init", "--state", str(st), "--fake", str(tmp_path / "fake"), *flags)
        assert r.exit_code == 0, r.output
        assert AgentSettings.load(st).backlog_history is want
    saved = json.loads((st / SETTINGS_FILE).read_text())
    del saved["loop"]["backlog_history"]
    (st / SETTINGS_FILE).write_text(json.dumps(saved))
    assert AgentSettings.load(st).backlog_history is BACKLOG_HISTORY
    assert inspect.signature(init_cmd).parameters["backlog_history"].default.default is BACKLOG_HISTORY


def test_auto_mode_refuses_single_replay_evidence(tmp_path):
    FakeConnector.create(tmp_path / "fake", sacct=contended(PINNED_NOW), nodes=1, gpus_per_node=8)
    r = cli("agent", "init", "--state", str(tmp_path / "state"), "--fake", str(tmp_path / "fake"), "--auto",
            "--model", "replay")
    assert r.exit_code == 2 and r.output.startswith("error: auto mode applies a change only on evidence with a "
                                                    "spread; --model replay gives one workload"), r.output
    assert not (tmp_path / "state").exists()  # a refused init writes nothing


def test_step_exits_with_a_code_that_says_why_it_did_not_go_on(tmp_path):
    """0 a round that ran, 3 frozen, 4 blocked by something temporary (retried), 5 blocked until
    someone acts, 6 a failure (here: an apply in auto mode that Slurm did not take)."""
    fake = FakeConnector.create(tmp_path / "fake", sacct=contended(PINNED_NOW), nodes=1, gpus_per_node=8)
    fake.update(clock=PINNED_NOW)
    st = str(tmp_path / "state")
    assert cli("agent", "init", "--state", st, "--fake", str(tmp_path / "fake"), "--period", "10m",
               "--history", "1h", "--min-jobs", "10", "--budget", "12", "--model", "hybrid", "--time-scale", "60",
               "--samples", "2", "--validation-samples", "4", "--max-validation-samples", "4", "--margin", "0",
               "--noise-k", "0", "--persistence", "0", "--auto").exit_code == 0  # (as live_helpers.agent_on)
    fake.update(down=True)
    r = cli("agent", "step", "--state", st)
    assert r.exit_code == 4 and r.output.startswith("blocked: Slurm does not answer: ")
    assert r.output.endswith("retry in 30 s\n")
    d = json.loads(cli("agent", "step", "--state", st, "--json").output)
    assert d["action"] == "blocked" and d["retry_after"] == 60.0  # the back-off doubles
    fake.update(down=False)
    assert cli("agent", "freeze", "--state", st).exit_code == 0
    assert cli("agent", "step", "--state", st).exit_code == 3
    assert cli("agent", "unfreeze", "--state", st).exit_code == 0
    fake.update(fail_reconfigure=True)
    r = cli("agent", "step", "--state", st)
    assert r.exit_code == 6 and r.output.startswith("apply failed: "), r.output
    fake.update(fail_reconfigure=False)
    fake.hand_edit("PriorityWeightAge", "7")
    r = cli("agent", "step", "--state", st)
    assert r.exit_code == 5 and r.output.startswith("blocked: hand edit: PriorityWeightAge is 7 live")
    assert cli("agent", "adopt", "--state", st).exit_code == 0
    r = cli("agent", "step", "--state", st)
    assert r.exit_code == 0 and r.output.startswith("wait: "), r.output
