"""The agent's twin of a live cluster (`autosched.live.twin`): the setup read from Slurm's own
output (the test cluster's, copied here), the ClusterSpec made from it, the warnings, what changed
between two setups, the jobs the twin can place, the fake connector's setup, and the agent
tuning on the setup's spec. Expectations worked out by hand."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autosched.associations import Association
from autosched.cluster import ClusterSpec, SlurmPartition
from autosched.live.errors import LiveError
from autosched.live.fake import FakeConnector
from autosched.live.history import read_jobs
from autosched.live.slurm import parse_nodes, parse_show_config, setup_from_slurm
from autosched.live.twin import (
    ClusterSetup,
    PartitionSetup,
    setup_changes,
    trace_columns,
    twin_jobs,
    twin_view,
)
from live_helpers import HEADER, row

# What the test cluster (scripts/slurm/slurm.conf.in) prints, cut to the fields read.
PARTITIONS = (
    "PartitionName=gpu AllowGroups=ALL Default=YES QoS=N/A Nodes=n[1-4] PriorityJobFactor=1 "
    "PriorityTier=1 State=UP TRES=cpu=32,mem=16G,node=4,billing=160,gres/gpu=32 "
    "TRESBillingWeights=CPU=1.0,GRES/gpu=4.0\n"
    "PartitionName=urgent AllowGroups=ALL Default=NO QoS=N/A Nodes=n[1-2] PriorityJobFactor=1 "
    "PriorityTier=2 State=UP TRES=cpu=16,mem=8G,node=2,billing=160,gres/gpu=16 "
    "TRESBillingWeights=CPU=2.0,GRES/gpu=8.0\n")
NODES = "".join(f"NodeName=n{k} Arch=x86_64 CPUTot=8 Gres=gpu:8 State=IDLE Partitions=gpu{',urgent' if k < 3 else ''}  "
                f"BootTime=2026-12-04T08:04:46\n" for k in range(1, 5))
CONFIG = "ClusterName             = testcluster\nPriorityFlags           = \n" + """PriorityWeightAge       = 1000
PriorityWeightAssoc     = 0
PriorityWeightFairShare = 10000
PriorityWeightPartition = 1000
PriorityWeightQOS       = 0
"""
ASSOC = """Account|User|ParentName|Share
root|||1
root|root||1
chemistry||root|40
chemistry|alice||1
chemistry|bob||1
physics||root|60
physics|alice||1
physics|carol||1
"""
QOS = "Name|Priority\nnormal|0\n"


def cluster_of_testbed(config: str = CONFIG, qos: str = QOS, assoc: str = ASSOC,
                  partitions: str = PARTITIONS, nodes: str = NODES) -> ClusterSetup:
    return setup_from_slurm(parse_show_config(config), parse_nodes(nodes), parse_nodes(partitions),
                            assoc, qos)


def test_the_test_clusters_setup_read_from_slurms_output():
    s = cluster_of_testbed()
    assert s.nodes == (("n1", 8), ("n2", 8), ("n3", 8), ("n4", 8))
    assert s.partitions == (
        PartitionSetup("gpu", ("n1", "n2", "n3", "n4"), 1, (("CPU", 1.0), ("GRES/gpu", 4.0)), 1, True),
        PartitionSetup("urgent", ("n1", "n2"), 2, (("CPU", 2.0), ("GRES/gpu", 8.0)), 1, False))
    assert s.associations == (
        Association("root", "", "", 1), Association("root", "root", "root", 1),
        Association("chemistry", "", "root", 40), Association("chemistry", "alice", "chemistry", 1),
        Association("chemistry", "bob", "chemistry", 1), Association("physics", "", "root", 60),
        Association("physics", "alice", "physics", 1), Association("physics", "carol", "physics", 1))
    assert s.priority_flags == () and s.qos == (("normal", 0),)
    assert dict(s.weights) == {"PriorityWeightQOS": 0, "PriorityWeightPartition": 1000,
                               "PriorityWeightAssoc": 0}
    assert s.warnings() == []
    # what `simulate --cluster 4x8 --slurm-assoc … --slurm-partitions …` builds from the same
    # listings (a partitions CSV "gpu,0-3,1,CPU=1.0,GRES/gpu=4.0" and "urgent,0-1,2,…")
    # (the node's 8 CPUs; no DefCpuPerGPU: a job that asks for no CPUs gets one, one task)
    assert s.cluster_spec() == ClusterSpec.uniform_nodes(4, 8, associations=s.associations, slurm_partitions=(
        SlurmPartition("gpu", (0, 1, 2, 3), 1, (("CPU", 1.0), ("GRES/gpu", 4.0))),
        SlurmPartition("urgent", (0, 1), 2, (("CPU", 2.0), ("GRES/gpu", 8.0)))), node_cpus=8, def_cpu_per_gpu=0.0)
    assert (s.cpus, s.def_cpu_per_gpu, s.def_mem_per_gpu) == (8, None, None)
    assert s.pinned(["PriorityFlags", "placement"]) == {"PriorityFlags": "FAIR_TREE"}


def test_the_twin_sizes_jobs_by_slurms_job_defaults():
    # slurm.conf's DefCpuPerGPU=2 and DefMemPerGPU=300 (as `scontrol show config` prints them:
    # the test cluster with the keys added); 8 CPUs and 4096 MB a node
    nodes = NODES.replace("CPUTot=8", "CPUTot=8 RealMemory=4096")
    s = cluster_of_testbed(config=CONFIG + "JobDefaults             = DefCpuPerGPU=2,DefMemPerGPU=300\n", nodes=nodes)
    assert (s.cpus, s.memory, s.def_cpu_per_gpu, s.def_mem_per_gpu) == (8, 4096, 2.0, 300.0)
    spec = s.cluster_spec()
    assert (spec.cpus_per_node, spec.cpus_per_gpu) == (8, 2.0)
    # 2 CPUs for each of 8 GPUs is 16, more than the node's 8; 300 MB x 8 = 2400 MB fits in 4096
    assert s.warnings() == ["DefCpuPerGPU=2 asks 16 CPUs for a node's 8 GPUs, which has 8: Slurm fills a node's "
                            "CPUs before its GPUs, the twin places by GPUs alone"]
    # the default partition's own JobDefaults win for its jobs
    parts = PARTITIONS.replace("TRESBillingWeights=CPU=1.0,GRES/gpu=4.0", "TRESBillingWeights=CPU=1.0,GRES/gpu=4.0 "
                               "JobDefaults=DefCpuPerGPU=1", 1)
    own = cluster_of_testbed(config=CONFIG + "JobDefaults             = DefCpuPerGPU=2\n", partitions=parts)
    assert own.def_cpu_per_gpu == 1.0 and own.warnings() == []
    assert ClusterSetup.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    # a setup recorded before the twin read them: none
    old = {k: v for k, v in s.to_dict().items() if k not in ("cpus", "memory", "def_cpu_per_gpu", "def_mem_per_gpu")}
    assert (ClusterSetup.from_dict(old).cpus, ClusterSetup.from_dict(old).def_cpu_per_gpu) == (0, None)


def test_the_twin_sizes_a_job_by_what_it_asked_for_and_the_clusters_def_cpu_per_gpu():
    # as the test cluster's sacct shows `--gres=gpu:N` jobs with DefCpuPerGPU=1: ReqTRES one CPU,
    # the allocation N (and NCPUS N once started, 1 while waiting). The agent reads the request;
    # the twin gives each job DefCpuPerGPU's CPUs (job size, billing), and its TRES factor weighs
    # the one CPU asked for, as sprio showed
    def sized(job_id: str, gpus: int, start: float | None) -> str:
        asked = f"billing={4 * gpus + 1},cpu=1,gres/gpu={gpus},mem=512M,node=1"
        given = f"billing={5 * gpus},cpu={gpus},gres/gpu={gpus},mem={512 * gpus}M,node=1"
        cpus = gpus if start is not None else 1
        cells = row(job_id, 1000.0, start, None, gpus, cpus=cpus).split("|")
        cells[4], cells[5] = (given if start is not None else ""), asked
        return "|".join(cells)

    jobs = read_jobs("\n".join([HEADER, sized("1", 8, 1010.0), sized("2", 4, None), sized("3", 1, None)]) + "\n")
    assert jobs.cpus.tolist() == [1, 1, 1]
    spec = replace(ClusterSpec.uniform_nodes(4, 8, node_cpus=8), def_cpu_per_gpu=1.0)
    assert spec.job_cpus(jobs.gpus, jobs.cpus).tolist() == [8, 4, 1]


def test_default_partition_first_and_slurms_default_billing():
    # urgent is listed first but gpu is the default: a job without a partition goes to gpu, the
    # spec's first. A partition without TRESBillingWeights bills CPUs, as Slurm does.
    parts = PARTITIONS.split("\n")
    text = parts[1].replace(" TRESBillingWeights=CPU=2.0,GRES/gpu=8.0", "") + "\n" + parts[0] + "\n"
    s = cluster_of_testbed(partitions=text)
    assert [p.name for p in s.partitions] == ["urgent", "gpu"]
    assert [p.name for p in s.cluster_spec().slurm_partitions] == ["gpu", "urgent"]
    assert s.partitions[0].billing_weights == (("CPU", 1.0),)



def test_billing_knobs_are_unused_only_where_every_partition_bills_by_its_own_weights():
    fixed = ["placement", "PriorityFlags", "TRESBillingWeights.GRES/gpu", "TRESBillingWeights.CPU"]
    assert cluster_of_testbed().unused_knobs(fixed) == ("TRESBillingWeights.GRES/gpu",
                                                       "TRESBillingWeights.CPU")
    # one pool (the fake's default), or a partition without weights: the knobs bill its jobs
    pool = ClusterSetup((("n1", 8),))
    assert pool.unused_knobs(fixed) == ()
    unbilled = replace(pool, partitions=(PartitionSetup("gpu", ("n1",), 1, (), 1, True),))
    assert unbilled.unused_knobs(fixed) == ()
    assert cluster_of_testbed().unused_knobs(["placement"]) == ()

def test_what_the_twin_leaves_out_is_said():
    config = CONFIG.replace("PriorityWeightQOS       = 0", "PriorityWeightQOS       = 500").replace(
        "PriorityFlags           = ", "PriorityFlags           = NO_FAIR_TREE,MAX_TRES")
    qos = "Name|Priority\nnormal|0\nhigh|100\n"
    parts = PARTITIONS.replace("CPU=2.0,GRES/gpu=8.0", "CPU=2.0,Mem=0.25G,GRES/gpu=8.0").replace(
        "PriorityJobFactor=1 PriorityTier=2", "PriorityJobFactor=5 PriorityTier=2")
    parts += "PartitionName=cpu Default=NO Nodes=c1 PriorityTier=1\n"
    nodes = NODES.replace("NodeName=n4 Arch=x86_64 CPUTot=8 Gres=gpu:8", "NodeName=n4 Arch=x86_64 CPUTot=8 Gres=gpu:4")
    nodes += "NodeName=c1 Gres=(null) Partitions=cpu\n"
    s = cluster_of_testbed(config=config, qos=qos, partitions=parts, nodes=nodes)
    assert s.warnings() == [
        "partition urgent: the twin bills only CPUs and GPUs; the weights of Mem are left out",
        "partition cpu has no GPU nodes: left out of the twin",
        "the twin leaves out the QOS factor: PriorityWeightQOS=500 and the QOS priorities differ "
        "(normal=0, high=100); jobs of a higher-priority QOS start earlier on the cluster than in the twin",
        "the twin leaves out the partition factor: PriorityWeightPartition=1000 and PriorityJobFactor "
        "differs (gpu=1, urgent=5)",
        "the twin does not model PriorityFlags MAX_TRES",
        "nodes have 4 to 8 GPUs; the twin gives every node 8 (the most common count)"]
    assert s.pinned(["PriorityFlags"]) == {"PriorityFlags": "NO_FAIR_TREE"}
    # one QOS priority, or no weight: nothing to say about QOS
    assert not any("QOS" in w for w in cluster_of_testbed(config=config).warnings())
    assert not any("QOS" in w for w in cluster_of_testbed(qos=qos).warnings())


def test_an_association_tree_the_twin_cannot_model_is_left_out_with_a_note():
    s = cluster_of_testbed(assoc=ASSOC.replace("physics|carol||1", "physics|carol||parent"))
    assert s.associations == ()
    assert len(s.warnings()) == 1 and "fairshare=parent is not modelled" in s.warnings()[0]
    assert s.cluster_spec().associations == ()


def test_setup_round_trips_through_json():
    s = cluster_of_testbed()
    assert ClusterSetup.from_dict(s.to_dict()) == s
    with pytest.raises(LiveError, match="not a cluster setup"):
        ClusterSetup.from_dict({"nodes": [{"name": "n1"}]})
    with pytest.raises(LiveError, match="partition 'x' has no GPU nodes of the cluster"):
        replace(s, partitions=(PartitionSetup("x", ("n9",)),))


def test_what_changed_between_two_setups():
    s = cluster_of_testbed()
    biology = ASSOC + "biology||root|20\nbiology|dave||1\n"
    shares = ASSOC.replace("physics||root|60", "physics||root|50")
    t = cluster_of_testbed(assoc=biology.replace("physics||root|60", "physics||root|50"),
                      partitions=PARTITIONS.replace("PriorityTier=2", "PriorityTier=3").replace(
                          "CPU=1.0,GRES/gpu=4.0", "CPU=1.0,GRES/gpu=2.0"))
    assert setup_changes(s, t) == [
        "partition gpu: TRESBillingWeights CPU=1,GRES/gpu=4 -> CPU=1,GRES/gpu=2",
        "partition urgent: PriorityTier 2 -> 3",
        "account biology added (shares 20, parent root)",
        "account physics: shares 60 -> 50",
        "user dave in biology added (shares 1)"]
    assert setup_changes(s, cluster_of_testbed(assoc=shares)) == ["account physics: shares 60 -> 50"]
    assert setup_changes(t, s)[2:] == ["account biology removed", "account physics: shares 50 -> 60",
                                       "user dave in biology removed"]
    assert setup_changes(None, s) == [] and setup_changes(s, cluster_of_testbed()) == []
    gone = cluster_of_testbed(nodes=NODES.replace("Gres=gpu:8 State=IDLE Partitions=gpu  ", "Gres=gpu:4 State=IDLE Partitions=gpu  "))
    assert setup_changes(s, gone) == ["node n3: GPUs 8 -> 4", "node n4: GPUs 8 -> 4"]


@st.composite
def setups(draw):
    shares = draw(st.lists(st.integers(0, 100), min_size=1, max_size=3))
    accounts = [Association("root")] + [Association(f"a{k}", "", "root", s) for k, s in enumerate(shares)]
    users = [Association(f"a{k}", u, f"a{k}", draw(st.integers(1, 5)))
             for k in range(len(shares)) for u in draw(st.sets(st.sampled_from("xyz"), max_size=2))]
    n = draw(st.integers(1, 4))
    nodes = tuple((f"n{k}", draw(st.sampled_from([4, 8]))) for k in range(n))
    parts = tuple(PartitionSetup(f"p{k}", tuple(sorted(draw(st.sets(st.sampled_from([m for m, _ in nodes]), min_size=1)))),
                                 draw(st.integers(0, 3)), (("GRES/gpu", float(draw(st.integers(0, 9)))),))
                  for k in range(draw(st.integers(0, 2))))
    return ClusterSetup(nodes, parts, tuple(accounts + users),
                        tuple(sorted(draw(st.sets(st.sampled_from(["NO_FAIR_TREE", "MAX_TRES"]))))))


@settings(max_examples=60, deadline=None)
@given(setups(), setups())
def test_changes_are_empty_exactly_when_the_setups_are_equal(a, b):
    # (generated in one canonical order: a listing in another order is the same setup to
    # setup_changes, and different to ==)
    assert ClusterSetup.from_dict(a.to_dict()) == a
    assert (setup_changes(a, b) == []) == (a == b)
    assert setup_changes(a, a) == []


def _jobs(rows_):
    return read_jobs("\n".join([HEADER, *rows_]) + "\n")


def test_the_twin_leaves_out_jobs_it_cannot_place():
    s = cluster_of_testbed()
    jobs = _jobs([
        row("1", 1000, 1010, 1100, 8),  # alice/physics in gpu (live_helpers' row)
        row("2", 1000, 1010, 1100, 24).replace("|gpu|", "|urgent|"),  # urgent has 16 GPUs
        row("3", 1000, 1010, 1100, 2).replace("|gpu|", "|debug|"),  # no such partition
        row("4", 1000, 1010, 1100, 2).replace("|alice|physics|", "|bob|physics|"),  # not in the tree
        row("5", 1000, 1010, 1100, 999_999),
    ])
    kept, dropped = twin_jobs(jobs, s)
    assert kept.job_id.tolist() == ["1"]
    assert dropped == {"partition not in the cluster's setup": 1,
                       "association (account/user) not in the cluster's tree": 1,
                       "more GPUs than its partition has": 2}
    # one pool, no tree (the fake's default): only the cluster's size counts
    pool = ClusterSetup((("n1", 8),))
    kept, dropped = twin_jobs(jobs, pool)
    assert kept.job_id.tolist() == ["1", "3", "4"]
    assert dropped == {"more GPUs than its partition has": 2}


def test_twin_view_counts_the_columns_jobs_carry():
    jobs = _jobs([row("1", 1000, 1010, 1100, 8), row("2", 1000, 1010, 1100, 2)])
    from autosched.live.history import observation

    obs, _ = observation(jobs, 2000.0, 3600.0)
    assert trace_columns(obs.history) == {"time_limit": 2, "user": 2, "account": 2, "partition": 2}
    view = twin_view(cluster_of_testbed(), obs.history)
    assert view["jobs"] == 2 and view["priority_flags"] == []
    assert view["partitions"][1] == {"name": "urgent", "nodes": ["n1", "n2"], "priority_tier": 2,
                                     "billing_weights": {"CPU": 2.0, "GRES/gpu": 8.0}}
    assert view["associations"][:3] == [
        {"account": "root", "user": None, "parent": None, "shares": 1},
        {"account": "root", "user": "root", "parent": "root", "shares": 1},
        {"account": "chemistry", "user": None, "parent": "root", "shares": 40}]
    assert set(view) == {"partitions", "associations", "priority_flags", "jobs", "trace_columns", "warnings"}


def test_the_fake_connector_has_a_setup(tmp_path):
    fake = FakeConnector.create(tmp_path / "f", nodes=2, gpus_per_node=4)
    assert fake.setup() == ClusterSetup((("n1", 4), ("n2", 4)))
    assert fake.setup().cluster_spec() == ClusterSpec.uniform_nodes(2, 4)  # one pool, as before
    s = cluster_of_testbed()
    fake.set_setup(s)
    assert FakeConnector(tmp_path / "f").setup() == s
    fake.update(down=True)
    from autosched.live.errors import SlurmUnavailable

    with pytest.raises(SlurmUnavailable):
        fake.setup()


def test_the_agent_tunes_on_the_connectors_setup(tmp_path):
    # the fake's setup: a partition with its own billing, 60/30/10 shares (contended's jobs are
    # charged to an account named as their user); the agent's Controller simulates exactly that
    # spec, and pins PriorityFlags to the cluster's
    from autosched.live.agent import AgentSettings, init_agent
    from autosched.live.round import Action
    from live_helpers import PINNED_NOW, contended

    now = PINNED_NOW
    fake = FakeConnector.create(tmp_path / "fake", sacct=contended(now), nodes=1, gpus_per_node=8)
    setup = ClusterSetup((("n1", 8),), (PartitionSetup("gpu", ("n1",), 1, (("GRES/gpu", 4.0),), 1, True),),
                         (Association("root"),
                          *(Association(a, "", "root", s) for a, s in (("alice", 60), ("bob", 30), ("carol", 10))),
                          *(Association(a, a, a) for a in ("alice", "bob", "carol"))),
                         ("NO_FAIR_TREE",))
    fake.set_setup(setup)
    fake.update(clock=now)
    agent = init_agent(tmp_path / "state", AgentSettings(
        connector={"kind": "fake", "directory": str(tmp_path / "fake")}, period=3600,
        history=4 * 3600, min_jobs=5, budget=3, model="replay"))
    built = []
    new_controller = agent.tuning.new_controller
    agent.tuning.new_controller = lambda running, s: built.append(new_controller(running, s)) or built[-1]
    out = agent.step()
    assert out.action in (Action.PROPOSED, Action.NONE) and out.history.jobs == 60, out
    assert [c.cluster for c in built] == [setup.cluster_spec()]
    assert built[0].running["PriorityFlags"] == "NO_FAIR_TREE"


def test_fake_setup_is_one_pool_so_existing_tests_see_the_same_cluster(tmp_path):
    fake = FakeConnector.create(tmp_path / "f")
    assert fake.setup().cluster_spec() == ClusterSpec.uniform_nodes(4, 8)
    assert np.array_equal([g for _, g in fake.setup().nodes], [8, 8, 8, 8])


def test_agent_twin_prints_what_the_twin_models(tmp_path):
    from typer.testing import CliRunner

    from autosched.cli import build_app
    from live_helpers import PINNED_NOW, contended

    fake = FakeConnector.create(tmp_path / "fake", sacct=contended(PINNED_NOW), nodes=4, gpus_per_node=8)
    fake.update(clock=PINNED_NOW)
    # contended's jobs are charged to accounts named as their users: a tree with two of them,
    # so carol's 20-odd jobs are left out and said so
    fake.set_setup(cluster_of_testbed(assoc="Account|User|ParentName|Share\nroot|||1\nroot|root||1\n"
                                       "alice||root|60\nalice|alice||1\nbob||root|40\nbob|bob||1\n"))
    runner = CliRunner()
    st = str(tmp_path / "state")
    r = runner.invoke(build_app(), ["agent", "init", "--state", st, "--fake", str(tmp_path / "fake"),
                                    "--history", "1h"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(build_app(), ["agent", "twin", "--state", st, "--json"])
    assert r.exit_code == 0, r.output
    view = json.loads(r.output)
    carol = contended(PINNED_NOW).count("|carol|carol|")
    assert view["jobs"] == 60 - carol and carol > 0
    assert view["trace_columns"] == {c: 60 - carol for c in ("time_limit", "user", "account", "partition")}
    assert view["warnings"] == [f"{carol} job(s) of the history left out of the twin: association "
                                "(account/user) not in the cluster's tree"]
    assert [p["name"] for p in view["partitions"]] == ["gpu", "urgent"]
    r = runner.invoke(build_app(), ["agent", "twin", "--state", st])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0] == "twin of slurm cluster testcluster: 4x8 (32 GPUs), CPUs=8, DefCpuPerGPU=0"
    assert "  gpu (default): nodes n1,n2,n3,n4, PriorityTier 1, billing CPU=1,GRES/gpu=4" in lines
    assert "  account alice under root: 60" in lines and "  user bob in bob: 1" in lines
    assert f"history: {60 - carol} jobs in the window; carrying time_limit {60 - carol}, user " \
           f"{60 - carol}, account {60 - carol}, partition {60 - carol}" in lines
    assert not (tmp_path / "state" / "history.sacct").exists()  # it wrote nothing
