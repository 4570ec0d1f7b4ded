"""The live layer against a real slurmctld (the `testbed` cluster: 4 nodes x 8 fake GPUs,
slurmdbd + MariaDB): history import, cluster, live values, approve -> `scontrol show config` and
`sprio -w`, rollback, hand edit, freeze, Slurm down, a value that does not take effect, and
kill -9 at random points of a real `autosched agent approve` process."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autosched.live.agent import init_agent, start_agent
from autosched.live.errors import ActionNotAllowed, ApplyFailed, SlurmUnavailable
from autosched.live.history import read_jobs
from autosched.live.records import Evidence, RevisionKind, RevisionState
from autosched.live.round import Action
from autosched.live.slurm import SlurmConnector, SlurmRunner
from live_helpers import show_config, slurm_settings

pytestmark = pytest.mark.slurm
SRC = str(Path(__file__).resolve().parents[1] / "src")
AUTOSCHED = str(Path(sys.executable).parent / "autosched")


@pytest.fixture
def agent(slurm_testbed, tmp_path):
    """An agent on the testbed; the include file is put back as it was afterwards."""
    before = slurm_testbed.include.read_text()
    os.environ["SLURM_CONF"] = str(slurm_testbed.conf)
    a = init_agent(tmp_path / "state", slurm_settings(slurm_testbed))
    yield a
    slurm_testbed.include.write_text(before)
    slurm_testbed.reconfigure()


def sprio_weights(bed) -> dict[str, str]:
    head, weights = bed.run("sprio", "-w", "-o", "%A|%F|%J").stdout.strip().splitlines()[:2]
    return dict(zip(head.split("|"), (w.strip() for w in weights.split("|"))))


def test_sbatch_jobs_appear_in_the_history_with_their_gpus_and_times(slurm_testbed):
    bed = slurm_testbed
    t0 = time.time()
    ids = {bed.sbatch(g, 1, user=u, account=a): (g, u, a)
           for g, u, a in ((1, "alice", "physics"), (3, "bob", "chemistry"), (8, "carol", "physics"))}
    held = bed.sbatch(2, 1, user="bob", account="chemistry", begin="now+1hour")
    try:
        conn = SlurmConnector(bed.include, bed.conf)
        deadline = time.time() + 60
        while True:
            jobs = read_jobs(conn.sacct_rows(t0 - 60, time.time() + 5))
            got = {j: i for i, j in enumerate(jobs.job_id.tolist())}
            if all(str(k) in got and jobs.finished[got[str(k)]] for k in ids) or time.time() > deadline:
                break
            time.sleep(1)
        t1 = time.time()
        for job, (g, u, a) in ids.items():
            i = got[str(job)]
            assert jobs.finished[i], job
            assert (jobs.gpus[i], jobs.user[i], jobs.account[i], jobs.partition[i]) == (g, u, a, "gpu")
            # sacct keeps whole seconds
            assert t0 - 1 <= jobs.submit[i] <= jobs.start[i] <= jobs.end[i] <= t1 + 1
            assert jobs.duration[i] == jobs.end[i] - jobs.start[i] and 1 <= jobs.duration[i] <= 5
            assert jobs.time_limit[i] == 300.0  # -t 5
        i = got[str(held)]  # pending: known with its requested GPUs, not finished
        assert not jobs.finished[i] and jobs.gpus[i] == 2 and jobs.user[i] == "bob"
        assert jobs.malformed == 0
    finally:
        bed.run("scancel", str(held))


def test_cluster_and_live_values(slurm_testbed):
    conn = SlurmConnector(slurm_testbed.include, slurm_testbed.conf)
    c = conn.setup().cluster_spec()
    assert (c.nodes, c.gpus_per_node, c.uniform) == (4, 8, True)
    assert [(p.name, p.nodes, p.priority_tier) for p in c.slurm_partitions] == [
        ("gpu", (0, 1, 2, 3), 1), ("urgent", (0, 1), 2)]
    live = conn.live_values()
    assert live["PriorityWeightAge"] == "1000" and live["PriorityMaxAge"] == "7-00:00:00"
    assert live["PriorityWeightFairshare"] == "10000" and live["PriorityFavorSmall"] == "No"
    assert live["bf_window"] == "1440" and live["PriorityCalcPeriod"] == "00:01:00"


def test_approve_shows_in_show_config_and_sprio_and_rollback_restores(slurm_testbed, agent):
    bed = slurm_testbed
    # a setting autosched does not manage, already in its file: rewriting must keep it
    bed.include.write_text(bed.include.read_text() + "PriorityWeightQOS=7\n")
    bed.reconfigure()
    out = agent.step()
    assert out.action is Action.BLOCKED and out.why.startswith("too little history")
    base = agent.store.running()
    assert base.kind is RevisionKind.BASELINE and base.config["PriorityWeightAge"] == 1000
    p = agent.store.create(dict(base.config, PriorityWeightAge=4321, PriorityWeightJobSize=2345,
                                PriorityMaxAge=7200.0), trigger="manual", actor="test")
    agent.approve(p.id, "operator:test")
    assert show_config(bed, "PriorityWeightAge") == "4321" and show_config(bed, "PriorityMaxAge") == "02:00:00"
    assert sprio_weights(bed)["AGE"] == "4321" and sprio_weights(bed)["JOBSIZE"] == "2345"
    text = bed.include.read_text()
    assert "PriorityWeightAge=4321\n" in text and "\nPriorityWeightQOS=7\n" in text
    assert show_config(bed, "PriorityWeightQOS") == "7"  # not managed: unchanged
    back = agent.rollback(None, "operator:test")
    assert back.trigger == f"rollback to {base.id}"
    assert show_config(bed, "PriorityWeightAge") == "1000" and show_config(bed, "PriorityMaxAge") == "7-00:00:00"
    assert sprio_weights(bed)["AGE"] == "1000"
    assert agent.store.get(p.id).state is RevisionState.ROLLED_BACK


def test_a_judged_round_records_the_three_figures(slurm_testbed, agent):
    """A change applied, sleep jobs run through sbatch, then the round one period on (its clock
    moved on: `step(now=...)`) replays the period from sacct in the twin and records the predicted
    gain, the counterfactual gain and the twin error."""
    bed = slurm_testbed
    agent.step()  # records the baseline
    base = agent.store.running()
    p = agent.store.create(dict(base.config, PriorityWeightAge=10, PriorityWeightJobSize=5000,
                                PriorityFavorSmall=True), trigger="manual", actor="test",
                           evidence=Evidence(predicted_gain=0.05))
    agent.approve(p.id, "operator:test")
    at = agent.store.get(p.id).applied_at
    time.sleep(1.5)  # sacct's whole seconds: every job is submitted after the change
    ids = [bed.sbatch(g, 2, user=u, account=a) for g, u, a in
           [(8, "alice", "physics"), (8, "bob", "chemistry"), (4, "alice", "physics"),
            (8, "bob", "chemistry"), (2, "alice", "physics"), (8, "alice", "physics")]]
    bed.wait_all_done(60)
    agent.step(now=at + agent.settings.period + 1)
    o = agent.store.get(p.id).outcome
    assert o is not None and o.predicted_gain == 0.05, o
    assert o.counterfactual_gain is not None and o.twin_error is not None and o.twin_error >= 0, o
    # every job of the period is judged (with any the cluster still held queued from earlier)
    assert o.realized["jobs"] >= len(ids) and o.simulated_old["jobs"] == o.realized["jobs"]
    assert o.verdict.startswith(("kept: ", "worse: ", "twin not trusted: ")), o.verdict
    st = agent.status()
    assert (st.judged.revision, st.judged.counterfactual_gain, st.judged.twin_error) == (
        p.id, o.counterfactual_gain, o.twin_error)


def test_hand_edit_blocks_and_freeze_stops_the_agent(slurm_testbed, agent):
    bed = slurm_testbed
    agent.step()  # records the baseline
    bed.include.write_text(bed.include.read_text() + "PriorityWeightAge=17\n")  # by hand
    bed.reconfigure()
    out = agent.step()
    assert out.action is Action.BLOCKED and out.retry_after is None
    assert out.why.startswith("hand edit: PriorityWeightAge is 17 live, 1000 in revision 1")
    p = agent.store.create(dict(agent.store.running().config, PriorityWeightJobSize=5),
                           trigger="manual", actor="test")
    with pytest.raises(ActionNotAllowed, match="PriorityWeightAge is 17 live"):
        agent.approve(p.id, "operator:test")
    assert show_config(bed, "PriorityWeightJobSize") == "1000"
    adopted = agent.adopt("operator:test")
    assert adopted.config["PriorityWeightAge"] == 17 and agent.status().blocked == ""
    agent.freeze("operator:test", "drill")
    assert agent.step().action is Action.FROZEN
    q = agent.store.create(dict(adopted.config, PriorityWeightJobSize=5), trigger="manual",
                           actor="test")
    with pytest.raises(ActionNotAllowed, match="frozen by operator:test: drill"):
        agent.approve(q.id, "operator:test")
    assert show_config(bed, "PriorityWeightJobSize") == "1000"
    agent.unfreeze("operator:test")
    agent.approve(q.id, "operator:test")
    assert show_config(bed, "PriorityWeightJobSize") == "5" and show_config(bed, "PriorityWeightAge") == "17"


def test_a_value_that_does_not_take_effect_is_restored_and_failed(slurm_testbed, agent, tmp_path):
    bed = slurm_testbed
    agent.step()
    # an include file slurm.conf does not include: the write works, Slurm never sees it
    stray = bed.include.parent / "not-included.conf"
    stray.write_text("# before\n")
    conn = SlurmConnector(stray, bed.conf)
    with pytest.raises(ApplyFailed, match=r"PriorityWeightAge=1000 \(wanted '999'\).*restored"):
        conn.apply({"PriorityWeightAge": "999"})
    assert stray.read_text() == "# before\n"
    assert conn.check_include_line() == (f"{bed.conf} has no line `Include {stray}`: add it as the last line "
                                         "of slurm.conf, then run `scontrol reconfigure`")
    assert SlurmConnector(bed.include, bed.conf).check_include_line() is None
    stray.unlink()


def test_slurmctld_down_blocks_and_nothing_is_applied(slurm_testbed, agent):
    bed = slurm_testbed
    agent.step()
    p = agent.store.create(dict(agent.store.running().config, PriorityWeightAge=2222),
                           trigger="manual", actor="test")
    before = bed.include.read_text()
    bed.stop_slurmctld()
    try:
        out = agent.step()
        assert out.action is Action.BLOCKED and out.why.startswith("Slurm does not answer: `")
        assert "scontrol show config" in out.why and out.retry_after == 30.0
        with pytest.raises(SlurmUnavailable, match="scontrol show config"):
            agent.approve(p.id, "operator:test")
        assert bed.include.read_text() == before
        assert agent.store.get(p.id).state is RevisionState.PROPOSED
        assert agent.status().blocked.startswith("Slurm does not answer")
    finally:
        bed.start_slurmctld()
    agent.approve(p.id, "operator:test")
    assert show_config(bed, "PriorityWeightAge") == "2222"


def test_kill_9_at_any_point_of_an_apply_leaves_old_or_new(slurm_testbed, agent, tmp_path):
    bed = slurm_testbed
    agent.step()
    original = bed.include.read_text()
    env = dict(bed.env, PYTHONPATH=SRC)
    rng = random.Random(7)
    outcomes = set()
    for n in range(6):
        running = agent.store.running()
        p = agent.store.create(dict(running.config, PriorityWeightAge=3000 + n), trigger="manual",
                               actor="test")
        proc = subprocess.Popen([AUTOSCHED, "agent", "approve", str(p.id), "--state",
                                 str(agent.state_dir)], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 1.5))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        again = start_agent(agent.state_dir)  # reconciles on start
        assert again.store.open_apply() is None
        now_running = again.store.running()
        state = again.store.get(p.id).state
        outcomes.add(state)
        assert state in (RevisionState.APPLIED, RevisionState.FAILED, RevisionState.PROPOSED)
        assert now_running.id == (p.id if state is RevisionState.APPLIED else running.id)
        # the include file, slurmctld and the store agree
        assert again.view.hand_edits(now_running) == ""
        text = bed.include.read_text()
        assert f"PriorityWeightAge={now_running.config['PriorityWeightAge']}\n" in text or (
            now_running.kind is RevisionKind.BASELINE and text == original)
        if state is RevisionState.PROPOSED:
            again.reject(p.id, "test")
    # which of old/new each kill hit varies with the machine's speed
    print("kill -9 outcomes:", sorted(s.value for s in outcomes))


def test_slurm_history_exports_a_trace_the_loader_reads(slurm_testbed, tmp_path):
    bed = slurm_testbed
    job = bed.sbatch(4, 1, user="carol", account="physics")
    bed.wait_all_done(timeout=60)
    deadline = time.time() + 30
    while True:
        res = subprocess.run([AUTOSCHED, "slurm", "history", "--since", "1h", "--out",
                              str(tmp_path / "h.txt")], env=bed.env, capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 0, res.stderr
        jobs = read_jobs((tmp_path / "h.txt").read_text())
        if str(job) in jobs.job_id.tolist() and jobs.finished[jobs.job_id.tolist().index(str(job))]:
            break
        assert time.time() < deadline, "slurmdbd never recorded the job"
        time.sleep(1)
    assert res.stdout.startswith(f"{tmp_path / 'h.txt'}: ") and "malformed" in res.stdout
    res = subprocess.run([AUTOSCHED, "slurm", "history", "--since", "1h", "--out",
                          str(tmp_path / "h.csv")], env=bed.env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    from autosched.trace import load_trace

    trace, _ = load_trace(tmp_path / "h.csv")
    i = trace.job_id.tolist().index(str(job))
    assert trace.num_gpus[i] == 4 and trace.user[i] == "carol"


def test_bf_parameters_merge_into_scheduler_parameters(slurm_testbed):
    bed = slurm_testbed
    before = bed.include.read_text()
    conn = SlurmConnector(bed.include, bed.conf)
    try:
        conn.apply({"bf_window": "2880", "bf_continue": ""}, header="test")
        params = show_config(bed, "SchedulerParameters").split(",")
        # managed entries changed or added, the others (bf_interval, bf_resolution) kept
        assert sorted(params) == sorted(["bf_window=2880", "bf_interval=30", "bf_resolution=60",
                                         "bf_continue"])
        conn.apply({"bf_window": "1440"})  # bf_continue no longer managed -> dropped from ours
        assert sorted(show_config(bed, "SchedulerParameters").split(",")) == sorted(
            ["bf_window=1440", "bf_interval=30", "bf_resolution=60"])
        assert bed.include.read_text().count("SchedulerParameters=") == 1
    finally:
        bed.include.write_text(before)
        bed.reconfigure()
    assert show_config(bed, "SchedulerParameters") == "bf_window=1440,bf_interval=30,bf_resolution=60"


# -- what a round makes of Slurm's failures (live/failures.py; on the fake: test_live_failures.py)


def test_slurmctld_stopping_between_two_reads_of_the_first_round_blocks_it(slurm_testbed, agent):
    """The first round reads the live settings, then (recording the baseline) reads them again:
    slurmctld stops in between. The round is blocked and retried in 30 s, nothing recorded as
    running; once slurmctld is back the next round records the baseline."""
    bed = slurm_testbed

    class StopsAfterOneRead(SlurmConnector):
        reads = 0

        def live_values(self):
            got = super().live_values()
            self.reads += 1
            if self.reads == 1:
                bed.stop_slurmctld()
            return got

    conn = StopsAfterOneRead(bed.include, bed.conf, SlurmRunner(str(bed.conf), timeout=5.0,
                                                                retries=1, backoff=0.5))
    first = start_agent(agent.state_dir, connector=conn)
    try:
        out = first.step()
        assert out.action is Action.BLOCKED and out.why.startswith("Slurm does not answer: `"), out
        assert "scontrol show config" in out.why and out.retry_after == 30.0
        assert first.store.running() is None and first.status().blocked == out.why
    finally:
        bed.start_slurmctld()
    first.step()  # too little history (min_jobs 1000), but the baseline is recorded
    assert first.store.running().kind is RevisionKind.BASELINE and conn.reads == 3


def test_an_error_of_scontrol_the_runner_does_not_know_blocks_and_the_loop_goes_on(slurm_testbed, agent, tmp_path):
    """A slurm.conf that scontrol refuses to parse (a key it does not know): its error is none of
    the runner's "Slurm is down" words. Each round is blocked saying so, and `run` goes on a
    period later."""
    bed = slurm_testbed
    broken = tmp_path / "slurm.conf"
    broken.write_text(bed.conf.read_text() + "\nNoSuchSlurmKey=1\n")
    conn = SlurmConnector(bed.include, broken, SlurmRunner(str(broken), timeout=5.0, retries=0))
    a = start_agent(agent.state_dir, connector=conn)
    sleeps = []
    out = a.run(rounds=2, poll=10_000, sleep=sleeps.append, clock=lambda: 0.0 if not sleeps else 1e9)
    assert [o.action for o in out] == [Action.BLOCKED] * 2
    assert out[0].why.startswith("cannot read the live settings: `scontrol show config` failed "
                                 "(exit 1): "), out[0].why
    assert [o.retry_after for o in out] == [None, None] and sleeps == [60.0]
    assert a.store.running() is None


def test_a_guard_rollback_meeting_a_stopped_slurmctld_is_tried_again_in_30_s(slurm_testbed, agent):
    """The running change was judged worse (its outcome recorded by hand): the guard's rollback
    finds slurmctld gone between its hand-edit check and the reconfigure. The include file is put
    back, the rollback failed, and the round says to try again in 30 s (a temporary failure),
    not a period on; with slurmctld back, the next round rolls back."""
    from autosched.live.records import JudgedOutcome

    bed = slurm_testbed
    agent.step()
    p = agent.store.create(dict(agent.store.running().config, PriorityWeightAge=4321),
                           trigger="manual", actor="test")
    agent.approve(p.id, "operator:test")
    agent.store.record_outcome(p.id, JudgedOutcome("avg_jct", 0.1, "worse: by hand; rolled back",
                                                   counterfactual_gain=-0.5, twin_error=0.0))
    before = bed.include.read_text()

    class StopsBeforeApply(SlurmConnector):
        stop = True

        def apply(self, settings, header=""):
            if self.stop:
                self.stop = False
                bed.stop_slurmctld()
            return super().apply(settings, header)

    conn = StopsBeforeApply(bed.include, bed.conf, SlurmRunner(str(bed.conf), timeout=5.0,
                                                               retries=1, backoff=0.5))
    a = start_agent(agent.state_dir, connector=conn)
    try:
        out = a.step()
        assert out.action is Action.ROLLBACK_FAILED and out.retry_after == 30.0, out
        assert "scontrol reconfigure" in out.why and bed.include.read_text() == before
        assert a.store.running().id == p.id
        assert a.store.get(p.id + 1).state is RevisionState.FAILED
    finally:
        bed.start_slurmctld()
    out = a.step()
    assert out.action is Action.ROLLED_BACK and a.store.running().config == agent.store.get(1).config
    assert show_config(bed, "PriorityWeightAge") == str(agent.store.get(1).config["PriorityWeightAge"])
