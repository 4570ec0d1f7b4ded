"""The agent's twin against the real test cluster (60/40 shares, two tiered partitions with their
own billing): its ClusterSpec is the one `autosched simulate --slurm-assoc … --slurm-partitions …`
builds from the same listings, its observed trace carries every job's limit, user, account and
partition, and bf_window - a knob the agent tunes and writes - changes its simulated outcome."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from autosched.associations import Association, read_associations
from autosched.cluster import parse_cluster, read_slurm_partitions
from autosched.live.agent import AgentSettings, init_agent
from autosched.live.history import observation
from autosched.live.twin import twin_jobs
from autosched.policies import get_policy
from autosched.sim import Simulator
from autosched.space import dump_config
from autosched.trace.io import write_trace
from conftest import script_module

pytestmark = pytest.mark.slurm
SRC = str(Path(__file__).resolve().parents[1] / "src")
AUTOSCHED = str(Path(sys.executable).parent / "autosched")
# the partitions of scripts/slurm/slurm.conf.in as `simulate --slurm-partitions` takes them
PARTITIONS_CSV = ('partition,nodes,priority_tier,billing_weights\n'
                  'gpu,0-3,1,"CPU=1.0,GRES/gpu=4.0"\nurgent,0-1,2,"CPU=2.0,GRES/gpu=8.0"\n')


@pytest.fixture
def agent(slurm_testbed, tmp_path):
    bed = slurm_testbed
    os.environ["SLURM_CONF"] = str(bed.conf)
    return init_agent(tmp_path / "state", AgentSettings(
        connector={"kind": "slurm", "slurm_conf": str(bed.conf), "include": str(bed.include),
                   "timeout": 10.0, "retries": 1, "backoff": 0.5},
        period=60, history=3600, min_jobs=1000, budget=4, model="replay"))


def cli(bed, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AUTOSCHED, *args], env=dict(bed.env, PYTHONPATH=SRC), capture_output=True,
                          text=True, timeout=120)


def wait_in_sacct(agent, ids: list[int], timeout: float = 60.0):
    """The agent's history once every job of `ids` has finished in it."""
    deadline = time.monotonic() + timeout
    while True:
        jobs = agent.view.jobs(time.time())
        done = set(jobs.job_id[jobs.finished].tolist())
        if all(str(j) in done for j in ids) or time.monotonic() > deadline:
            return jobs
        time.sleep(1.0)


def test_the_agents_cluster_spec_is_the_one_simulate_builds(slurm_testbed, agent, tmp_path):
    bed = slurm_testbed
    assoc = tmp_path / "assoc.txt"
    assoc.write_text(bed.run("sacctmgr", "-P", "show", "assoc", "format=Account,User,ParentName,Share").stdout)
    parts = tmp_path / "parts.csv"
    parts.write_text(PARTITIONS_CSV)
    # what simulate.py does with --cluster 4x8,CPUs=8,DefCpuPerGPU=0 --slurm-assoc assoc.txt
    # --slurm-partitions parts.csv (the nodes' 8 CPUs; no DefCpuPerGPU: one CPU a job, one task)
    simulated = replace(parse_cluster("4x8,CPUs=8,DefCpuPerGPU=0"), associations=read_associations(assoc),
                        slurm_partitions=read_slurm_partitions(parts))
    setup = agent.connector.setup()
    assert setup.cluster_spec() == simulated
    shares = {(a.account, a.user): a.shares for a in setup.associations}
    assert shares[("physics", "")] == 60 and shares[("chemistry", "")] == 40
    assert shares[("physics", "alice")] == 1 and Association("root") in setup.associations
    assert setup.warnings() == [] and setup.priority_flags == ()
    out = cli(bed, "agent", "twin", "--state", str(agent.state_dir), "--json")
    assert out.returncode == 0, out.stderr
    view = json.loads(out.stdout)
    assert view["partitions"] == [
        {"name": "gpu", "nodes": ["n1", "n2", "n3", "n4"], "priority_tier": 1,
         "billing_weights": {"CPU": 1.0, "GRES/gpu": 4.0}},
        {"name": "urgent", "nodes": ["n1", "n2"], "priority_tier": 2,
         "billing_weights": {"CPU": 2.0, "GRES/gpu": 8.0}}]
    assert {"account": "physics", "user": None, "parent": "root", "shares": 60} in view["associations"]
    assert {"account": "chemistry", "user": "bob", "parent": "chemistry", "shares": 1} in view["associations"]
    assert view["priority_flags"] == []


def test_the_observed_trace_has_the_limits_and_bf_window_changes_the_outcome(slurm_testbed, agent, tmp_path):
    bed = slurm_testbed
    # J1 holds 3 nodes for 40 s; J2 wants all 4; J3 (8 GPUs, limit 5 min, a lower priority
    # than J2: same association, younger, smaller) could run on the fourth. With Slurm's
    # bf_window (1440 min) backfill reserves the nodes for J2 at J1's limit (3 min), which J3's
    # limit overlaps: J3 waits for J2. With bf_window=1 min that reservation lies beyond the
    # window, and J3 starts at the next backfill cycle, while J1 still runs. Submissions 1.5 s
    # apart: sacct keeps whole seconds, and jobs of one second arrive together in the twin.
    # (--gres is per node: a job of more than one node's GPUs asks --gpus.) J4, in urgent, runs
    # first and alone: pending beside them, its tier would push J2's reservation later.
    j4 = bed.sbatch(2, 1, time_limit="7", user="carol", partition="urgent", name="tw-4")
    time.sleep(4.0)
    j1 = bed.sbatch(0, 40, time_limit="3", name="tw-1", extra=["--gpus=24"])
    time.sleep(1.5)
    j2 = bed.sbatch(0, 5, time_limit="3", name="tw-2", extra=["--gpus=32"])
    time.sleep(1.5)
    j3 = bed.sbatch(8, 5, time_limit="5", name="tw-3")
    ids = [j1, j2, j3, j4]
    jobs = wait_in_sacct(agent, ids, timeout=150)
    now = time.time()
    setup = agent.connector.setup()
    kept, dropped = twin_jobs(jobs, setup)
    assert dropped == {}
    obs, _ = observation(kept, now, agent.settings.history)
    h = obs.history
    mine = np.isin(h.job_id, [str(j) for j in ids])
    tr = h.take(mine)
    by_id = {j: i for i, j in enumerate(tr.job_id.tolist())}
    assert [tr.time_limit[by_id[str(j)]] for j in ids] == [180.0, 180.0, 300.0, 420.0]
    assert [tr.user[by_id[str(j)]] for j in ids] == ["alice", "alice", "alice", "carol"]
    assert [tr.account[by_id[str(j)]] for j in ids] == ["physics"] * 4
    assert [tr.partition[by_id[str(j)]] for j in ids] == ["gpu", "gpu", "gpu", "urgent"]
    # every job of the window carries them (what `agent twin` counts)
    out = json.loads(cli(bed, "agent", "twin", "--state", str(agent.state_dir), "--json").stdout)
    assert out["jobs"] >= 4 and out["trace_columns"] == {c: out["jobs"] for c in
                                                         ("time_limit", "user", "account", "partition")}
    # the real cluster (bf_window=1440) ran J3 after J2 started
    real = {j: jobs.start[list(jobs.job_id).index(str(j))] for j in ids}
    timeline = bed.run("sacct", "-a", "-X", "-P", "-j", ",".join(map(str, ids)), "-o",
                       "JobID,Submit,Start,End,AllocTRES,Priority").stdout
    assert real[j3] >= real[j2], timeline

    # the agent's model: its spec, its running config (the live values, PriorityFlags pinned)
    live = agent.space.from_settings(agent.view.live_values())
    config = {**agent.space.full(live), **setup.pinned(agent.space.fixed), "placement": "first_fit"}
    assert config["bf_window"] == 1440 and config["bf_interval"] == 30
    spec = setup.cluster_spec()

    def simulate(**knobs):
        sim = Simulator(tr.take(np.asarray([by_id[str(j)] for j in ids[:3]])), spec,
                        get_policy("multifactor")({**config, **knobs})).run()
        assert sim.policies[0].backfill_kind == "Slurm time-limit backfill"
        return sim.records()

    wide, narrow = simulate(), simulate(bf_window=1)
    s_wide, s_narrow = wide.first_start, narrow.first_start
    assert s_wide[2] >= s_wide[1]  # as on the real cluster: J3 after J2
    assert s_narrow[2] < s_narrow[1] and s_narrow[2] < s_wide[2]  # J3 backfilled while J1 runs
    assert narrow.jct.mean() < wide.jct.mean()

    # and `autosched simulate` on the same trace with the same listings gives the same outcome
    csv_ = tmp_path / "three.csv"
    write_trace(tr.take(np.asarray([by_id[str(j)] for j in ids[:3]])), csv_)
    (tmp_path / "assoc.txt").write_text(bed.run("sacctmgr", "-P", "show", "assoc",
                                                "format=Account,User,ParentName,Share").stdout)
    (tmp_path / "parts.csv").write_text(PARTITIONS_CSV)
    (tmp_path / "config.json").write_text(dump_config("multifactor", {**config, "bf_window": 1}))
    res = cli(bed, "simulate", str(csv_), "--cluster", "4x8", "--policy", "multifactor",
              "--config", str(tmp_path / "config.json"), "--slurm-assoc", str(tmp_path / "assoc.txt"),
              "--slurm-partitions", str(tmp_path / "parts.csv"), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["avg_jct"] == pytest.approx(float(narrow.jct.mean()))


def test_each_round_reads_the_setup_and_status_shows_what_changed(slurm_testbed, agent):
    # an operator gives physics 70 shares and adds an account between two rounds: the second
    # round records both, and `agent status` shows them (every round stops at "too little
    # history": the agent's min_jobs is 1000, so nothing is proposed)
    bed = slurm_testbed
    first = agent.step()
    assert first.setup == agent.connector.setup() and first.setup_changes == ()
    assert first.why.startswith("too little history")
    try:
        bed.run("sacctmgr", "-i", "modify", "account", "where", "name=physics", "set", "fairshare=70")
        bed.run("sacctmgr", "-i", "add", "account", "biology", "parent=root", "fairshare=5")
        second = agent.step()
        changes = ["account biology added (shares 5, parent root)", "account physics: shares 60 -> 70"]
        assert list(second.setup_changes) == changes
        out = cli(bed, "agent", "status", "--state", str(agent.state_dir), "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["twin"]["changes"] == changes
        text = cli(bed, "agent", "status", "--state", str(agent.state_dir)).stdout.splitlines()
        assert "  changed: account physics: shares 60 -> 70" in text
    finally:
        bed.run("sacctmgr", "-i", "modify", "account", "where", "name=physics", "set", "fairshare=60")
        bed.run("sacctmgr", "-i", "delete", "account", "biology", check=False)
    assert agent.step().setup_changes == ("account biology removed", "account physics: shares 70 -> 60")


def test_the_closed_loops_copy_of_the_testbeds_tree_is_the_testbeds(slurm_testbed):
    # the closed-loop harness replays windows that have not run on a cluster yet with its own copy
    # of the test cluster's association tree; it must be the tree the testbed really configures
    cb = script_module("benchmarks/closed_loop_blocks.py")
    real = slurm_testbed.run("sacctmgr", "-P", "-n", "show", "assoc",
                             "format=Cluster,Account,User,ParentName,Share").stdout
    assert sorted(real.split()) == sorted(cb.TESTBED_ASSOC.split()[1:])
