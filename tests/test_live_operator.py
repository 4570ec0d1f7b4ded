"""An operator's intent is never lost in silence, with the fake connector: an approve or a
rollback over a hand edit is refused naming each value, or forced and recorded."""

from __future__ import annotations

import re

import pytest

from autosched.live.errors import ActionNotAllowed, LiveError
from autosched.live.records import LiveOverride, RevisionState
from live_helpers import make


def _applied(agent, fake, **knobs):
    p = agent.store.create(dict(agent.view.running_or_baseline().config, **knobs), trigger="manual",
                           actor="t")
    return agent.approve(p.id, "operator:alice")


def test_a_rollback_over_a_hand_edit_is_refused_naming_the_live_and_the_expected_value(tmp_path):
    agent, fake = make(tmp_path)
    _applied(agent, fake, PriorityWeightAge=5)
    fake.hand_edit("PriorityWeightAge", "7")
    with pytest.raises(ActionNotAllowed, match=r"PriorityWeightAge is 7 live, 5 in revision 2.*"
                                               r"--force"):
        agent.rollback(None, "operator:bob")
    assert fake.state()["live"]["PriorityWeightAge"] == "7"  # nothing written
    assert agent.store.running().id == 2 and agent.store.newest_id() == 2


def test_a_forced_rollback_records_the_discarded_live_values(tmp_path):
    agent, fake = make(tmp_path)
    _applied(agent, fake, PriorityWeightAge=5)
    fake.hand_edit("PriorityWeightAge", "7")
    fake.hand_edit("PriorityWeightFairshare", "123")
    back = agent.rollback(None, "operator:bob", force=True)
    assert back.state is RevisionState.APPLIED
    assert fake.state()["live"]["PriorityWeightAge"] == "1000"
    assert back.overridden == (LiveOverride("PriorityWeightAge", "7", "5"),
                               LiveOverride("PriorityWeightFairshare", "123", "10000"))
    assert "discarding PriorityWeightAge=7, PriorityWeightFairshare=123" in back.events[-1].note
    again = agent.store.get(back.id)  # read back from the store
    assert again.overridden == back.overridden
    assert again.to_dict()["overridden"][0] == {"setting": "PriorityWeightAge", "live": "7",
                                                "expected": "5"}


def test_an_approve_over_a_hand_edit_is_refused_or_forced_and_recorded(tmp_path):
    agent, fake = make(tmp_path)
    base = agent.view.running_or_baseline()
    p = agent.store.create(dict(base.config, PriorityWeightAge=5), trigger="manual", actor="t")
    fake.hand_edit("PriorityWeightJobSize", "42")
    with pytest.raises(ActionNotAllowed, match="PriorityWeightJobSize is 42 live, 1000 in revision 1"):
        agent.approve(p.id, "operator:alice")
    assert agent.store.get(p.id).state is RevisionState.PROPOSED
    done = agent.approve(p.id, "operator:alice", force=True)
    assert done.state is RevisionState.APPLIED
    assert done.overridden == (LiveOverride("PriorityWeightJobSize", "42", "1000"),)
    assert fake.state()["live"]["PriorityWeightJobSize"] == "1000"


def test_without_a_hand_edit_nothing_is_recorded_as_overridden(tmp_path):
    agent, fake = make(tmp_path)
    rev = _applied(agent, fake, PriorityWeightAge=5)
    assert rev.overridden == ()
    back = agent.rollback(None, "operator:bob", force=True)
    assert back.overridden == () and "hand edit" not in back.events[-1].note


def test_a_round_reports_a_managed_setting_slurm_conf_sets_and_the_include_shadows(tmp_path):
    agent, fake = make(tmp_path)
    out = agent.step()
    assert out.shadowed == () and agent.status().shadowed == ()
    agent.reject(out.revision, "operator:alice")
    _applied(agent, fake, PriorityWeightAge=5)  # the include file now sets every managed knob
    base = fake.state()["base"]
    fake.update(base={**base, "PriorityWeightFairshare": "50000"})  # an edit of slurm.conf
    out = agent.step()
    # PriorityWeightAge: slurm.conf kept its 1000 while the agent changed it (to 5): every
    # applied change's, not news; fair share: slurm.conf was edited since the agent began
    want = ("PriorityWeightFairshare=50000 in slurm.conf does not take effect: the agent's "
            "include file sets PriorityWeightFairshare=10000 (revision 3); change it through "
            "the agent",)
    assert out.shadowed == want
    assert agent.store.last_round().shadowed == tuple(want)
    assert agent.status().shadowed == want


def test_own_settings_read_slurm_conf_and_its_includes_but_not_the_agents(tmp_path):
    from autosched.live.slurmconf import own_settings

    (tmp_path / "site.conf").write_text("PriorityWeightAge=11\n")
    (tmp_path / "autosched.conf").write_text("PriorityWeightAge=99\nSchedulerParameters=x\n")
    (tmp_path / "slurm.conf").write_text(
        "# a comment\nClusterName=c  # trailing comment\nPriorityWeightAge=10\n"
        "Include site.conf\n"
        "NodeName=n1 CPUs=8 Gres=gpu:8\n"
        'PartitionName=gpu Nodes=ALL TRESBillingWeights="CPU=1.0,GRES/gpu=4.0"\n'
        "SchedulerParameters=bf_window=1440,default_queue_depth=200\n"
        f"Include {tmp_path / 'autosched.conf'}\n")
    got = own_settings(tmp_path / "slurm.conf", tmp_path / "autosched.conf")
    assert got == {"ClusterName": "c", "PriorityWeightAge": "11",
                   "SchedulerParameters": "bf_window=1440,default_queue_depth=200"}


def test_a_proposal_changes_only_knobs_that_carry_gain_and_says_each_ones_share(tmp_path):
    agent, _ = make(tmp_path)
    out = agent.step()
    rev = agent.store.get(out.revision)
    ev = rev.evidence
    assert set(ev.knob_shares) == set(rev.diff) and rev.diff
    assert all(isinstance(v, float) for v in ev.knob_shares.values())
    assert not set(ev.dropped_knobs) & set(rev.diff)
    # each kept knob carries some of the gain: putting it back alone loses some
    assert all(v > 0 for v in ev.knob_shares.values())


def test_status_and_page_show_each_proposed_knobs_share_of_the_gain(tmp_path):
    from autosched.live.records import Evidence
    from autosched.service import page

    agent, _ = make(tmp_path)
    base = agent.view.running_or_baseline()
    agent.store.create(dict(base.config, PriorityWeightAge=5, PriorityWeightJobSize=7),
                       trigger="manual", actor="t",
                       evidence=Evidence(predicted_gain=0.1, knob_shares={
                           "PriorityWeightAge": 0.75, "PriorityWeightJobSize": 0.25},
                           dropped_knobs=["bf_window"]))
    st = agent.status()
    html = page.render(st, agent.store.history(), [], state_dir="s")
    assert '<td data-label="share of the gain" class=share>75%</td>' in html
    assert '<td data-label="share of the gain" class=share>25%</td>' in html
    assert "left as they run (no share of the gain)</dt><dd>bf_window" in html
    from typer.testing import CliRunner

    from autosched.cli import build_app
    out = CliRunner().invoke(build_app(), ["agent", "status", "--state", str(agent.state_dir)]).output
    pending = out[out.index("pending: "):].splitlines()[:4]
    assert pending[1:] == ["  PriorityWeightAge: 1000 -> 5  (75% of the gain)",
                           "  PriorityWeightJobSize: 1000 -> 7  (25% of the gain)",
                           "  left as they run (no share of the gain): bf_window"]


def test_the_include_keeps_an_operators_own_scheduler_parameters_at_every_write(tmp_path):
    from autosched.live.slurm import SlurmConnector

    inc, conf = tmp_path / "autosched.conf", tmp_path / "slurm.conf"
    conf.write_text("SchedulerParameters=bf_window=1440,default_queue_depth=200\n"
                    f"Include {inc}\n")
    # the include as the operator had it before the agent: its line replaces slurm.conf's whole
    inc.write_text("SchedulerParameters=bf_interval=1,sched_interval=60,bf_max_job_user=4,"
                   "default_queue_depth=50\n")
    slurm = SlurmConnector(inc, conf)
    want = {"bf_interval": "5", "bf_window": "60"}
    # Slurm runs default_queue_depth=50; carrying slurm.conf's 200 would change it in silence
    with pytest.raises(LiveError, match=re.escape(
            f"{inc}: its SchedulerParameters line, which Slurm runs, sets default_queue_depth=50 "
            "(slurm.conf: default_queue_depth=200); the agent's line would carry slurm.conf's "
            "value. Remove the entry from one of the two files")):
        slurm.render(want)
    inc.write_text("SchedulerParameters=bf_interval=1,sched_interval=60,bf_max_job_user=4,"
                   "default_queue_depth=200\n")  # the same value in both: no change
    # slurm.conf's own entries first, then the include's own entries that neither slurm.conf nor
    # the agent sets, then the managed ones (bf_interval: the agent's, its change recorded)
    line = ("SchedulerParameters=default_queue_depth=200,sched_interval=60,bf_max_job_user=4,"
            "bf_interval=5,bf_window=60")
    text = slurm.render(want)
    assert text.splitlines()[-4:] == [
        "# kept from this file's SchedulerParameters (slurm.conf does not set them): "
        "sched_interval,bf_max_job_user",
        "# copied from slurm.conf's SchedulerParameters: default_queue_depth=200",
        "# autosched manages these SchedulerParameters entries: bf_interval,bf_window", line]
    inc.write_text(text)
    assert slurm.render(want).splitlines()[-1] == line  # kept at the next write too
    # an entry slurm.conf drops goes (it was slurm.conf's, not the include's own)
    conf.write_text(f"SchedulerParameters=bf_window=1440\nInclude {inc}\n")
    assert slurm.render(want).splitlines()[-1] == (
        "SchedulerParameters=sched_interval=60,bf_max_job_user=4,bf_interval=5,bf_window=60")


def test_a_round_that_cannot_tune_is_a_block_told_once(tmp_path):
    """A bound that broke tuning failed every round with no banner, no notice and
    `autosched_blocked` at 0."""
    from autosched.service import metrics
    from autosched.tune import TuneError

    agent, _ = make(tmp_path)
    told = []
    agent.sinks.append(told.append)

    def broken(*args, **kwargs):
        raise TuneError("knob 'PriorityWeightFairshare': 0 is outside its range [5000, 35000]")

    agent.tuning.run = broken  # type: ignore[method-assign]
    for _ in range(2):
        out = agent.step()
        assert out.action.value == "tuning failed" and out.exit_code == 6
    why = "tuning failed: knob 'PriorityWeightFairshare': 0 is outside its range [5000, 35000]"
    assert out.why == why and agent.status().blocked == why
    assert "\nautosched_blocked 1\n" in metrics.render(agent.status(), {})
    from autosched.live.notify import notice

    assert [notice(a) for a in told if a.kind.value == "round"] == ["tuning_failed", None]
    del agent.tuning.run  # the next round tunes: the block is lifted
    assert agent.step().action.value == "proposed" and agent.status().blocked == ""


def test_the_page_and_status_show_the_bounds_the_step_and_the_verdict(tmp_path):
    from typer.testing import CliRunner

    from autosched.cli import build_app
    from autosched.service import page

    agent, _ = make(tmp_path, mode="auto", max_step=0.25,
                    bounds={"PriorityWeightAge": [2000.0, 3000.0]})
    html = page.render(agent.status(), agent.store.history(), [], state_dir="s")
    assert ("<span id=limits class=muted>(PriorityWeightAge in [2000, 3000]; at most 25% of a "
            "knob's range per round)</span>") in html
    r = CliRunner().invoke(build_app(), ["agent", "status", "--state", str(agent.state_dir)])
    assert "bound: PriorityWeightAge in [2000, 3000]\nmax step: 25% of a knob's range per " \
           "round\n" in r.output
    # init again: it says the store is kept and what bounds hold
    r = CliRunner().invoke(build_app(), ["agent", "init", "--state", str(agent.state_dir),
                                         "--fake", str(tmp_path / "fake"), "--bound",
                                         "PriorityWeightAge=1:2"])
    assert r.exit_code == 0, r.output
    assert f"agent re-initialised in {agent.state_dir}" in r.output
    assert "its store is kept: 0 revision(s)" in r.output  # (no round ran: no baseline yet)
    assert "bound: PriorityWeightAge in [1, 2] (in propose and auto mode)" in r.output
