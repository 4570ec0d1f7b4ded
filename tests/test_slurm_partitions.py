"""Slurm partitions in multifactor: a job runs only on its partition's nodes, higher
PriorityTier goes first, and the main scheduler goes on past a partition whose top job does not
fit. The trace's `partition` column (canonical CSV, sacct). Expected times worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autosched.cluster import ClusterError, ClusterSpec, SlurmPartition, parse_cluster, read_slurm_partitions
from autosched.errors import SimulationError
from autosched.policies import get_policy
from autosched.sim import Simulator
from autosched.trace import load_trace, write_trace
from simkit import make_trace, starts

# No priority factor: ties go by submission, so only tiers and partitions order the jobs.
FLAT = {"PriorityWeightAge": 0, "PriorityWeightFairshare": 0, "PriorityWeightJobSize": 0,
        "PriorityCalcPeriod": 1, "placement": "first_fit", "bf_resolution": 1}


def run(jobs, parts, names, limits, config, nodes=2, gpn=4):
    trace = make_trace(jobs).replace(time_limit=np.asarray(limits, dtype=float),
                                     partition=np.asarray(names, dtype=object))
    spec = ClusterSpec.uniform_nodes(nodes, gpn, slurm_partitions=parts)
    return Simulator(trace, spec, get_policy("multifactor")({**FLAT, **config}), record_segments=True).run()


def nodes_of(sim):
    out: dict[int, set[int]] = {}
    for j, _, _, alloc in sim.segments:
        out.setdefault(j, set()).update(n for n, _ in alloc)
    return out


@pytest.mark.parametrize("tiers, expected", [
    # b's tier is higher: its 8-GPU job goes first and takes both nodes; a's job waits for its end.
    ((1, 2), [100, 0]),
    # equal tiers: by submission; a's job takes node 0 and b's 8-GPU job waits.
    ((1, 1), [0, 100]),
])
def test_a_higher_priority_tier_goes_first(tiers, expected):
    parts = (SlurmPartition("a", (0,), tiers[0]), SlurmPartition("b", (0, 1), tiers[1]))
    sim = run([(0, 4, 100), (0, 8, 100)], parts, ["a", "b"], [200, 200], {"backfill": False})
    assert starts(sim) == expected


def test_a_job_runs_only_on_its_partitions_nodes():
    # Three 4-GPU jobs of partition a (node 0 only) run one after another although node 1 is
    # free all along: 0, 100, 200 (each end runs the main scheduler at once: 3 s passed).
    parts = (SlurmPartition("a", (0,)), SlurmPartition("b", (0, 1)))
    sim = run([(0, 4, 100)] * 3, parts, ["a"] * 3, [100] * 3, {"backfill": False})
    assert starts(sim) == [0, 100, 200]
    assert nodes_of(sim) == {0: {0}, 1: {0}, 2: {0}}


def test_the_main_scheduler_goes_on_in_another_partition():
    # j0 (a = node 0) runs 0-100. At 10 (3 s after the last pass) j1 (a) does not fit: node 0
    # leaves the pass, but j2 (c = node 1) is in another partition and starts at 10. With one
    # partition the pass would stop at j1 (sched/builtin: no backfill here).
    parts = (SlurmPartition("a", (0,)), SlurmPartition("c", (1,)))
    sim = run([(0, 4, 100), (10, 4, 100), (10, 4, 100)], parts, ["a", "a", "c"], [100] * 3, {"backfill": False})
    assert starts(sim) == [0, 100, 10]


def test_backfill_plans_on_the_partitions_nodes():
    # Partition b = node 1. j0 (b, 2 GPUs) runs 0-100 (limit 100). j1 (b, 4 GPUs, t=5) is the
    # top job: reserved on node 1 from 100. j2 (b, 1 GPU, runs 30, limit 60, t=5): the main pass
    # at 5 skips it (node 1 is out after j1); the backfill cycle at 30 starts it on node 1 for
    # [30, 90), before j1's reservation, although node 0 (partition a) is empty.
    parts = (SlurmPartition("a", (0,)), SlurmPartition("b", (1,)))
    sim = run([(0, 2, 100), (5, 4, 100), (5, 1, 30)], parts, ["b", "b", "b"], [100, 100, 60],
              {"backfill": True, "bf_interval": 30})
    assert starts(sim) == [0, 100, 30]
    assert nodes_of(sim) == {0: {1}, 1: {1}, 2: {1}}


def test_a_job_without_a_partition_goes_to_the_first_one():
    parts = (SlurmPartition("a", (1,)), SlurmPartition("b", (0, 1)))
    sim = run([(0, 4, 10)], parts, [""], [60], {})
    assert nodes_of(sim) == {0: {1}}


def test_an_unknown_partition_is_refused():
    parts = (SlurmPartition("a", (0,)),)
    with pytest.raises(SimulationError, match="job in row 0 of the trace: partition 'zz' is not one of"):
        run([(0, 1, 10)], parts, ["zz"], [60], {})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_job_stays_in_its_partition_and_no_gpu_is_double_booked(data):
    n = data.draw(st.integers(1, 8))
    parts = (SlurmPartition("a", (0,), data.draw(st.integers(0, 2))),
             SlurmPartition("b", (0, 1), data.draw(st.integers(0, 2))),
             SlurmPartition("c", (2,), 1))
    names = data.draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=n, max_size=n))
    jobs = [(data.draw(st.integers(0, 100)), 0, data.draw(st.integers(1, 200))) for _ in range(n)]
    jobs = sorted(jobs)
    jobs = [(s, data.draw(st.integers(1, 8 if nm == "b" else 4)), d) for (s, _, d), nm in zip(jobs, names)]
    limits = [data.draw(st.integers(1, 300)) for _ in range(n)]
    cfg = {"backfill": data.draw(st.booleans()), "bf_interval": data.draw(st.sampled_from([1, 7, 30])),
           "placement": data.draw(st.sampled_from(["first_fit", "consolidate", "spread"]))}
    sim = run(jobs, parts, names, limits, cfg, nodes=3)
    allowed = {p.name: set(p.nodes) for p in parts}
    for j, used in nodes_of(sim).items():
        assert used <= allowed[names[j]]
    events = sorted([(b, g) for j, b, e, alloc in sim.segments for _, g in alloc]
                    + [(e, -g) for j, b, e, alloc in sim.segments for _, g in alloc], key=lambda x: (x[0], x[1]))
    busy = 0
    for _, g in events:
        busy += g
        assert busy <= 12


# ------------------------------------------------------------------------ cluster and trace


def test_partitions_read_from_a_file(tmp_path):
    path = tmp_path / "parts.csv"
    path.write_text("partition,nodes,priority_tier\nhi,0-1,2\nall,\"0-3,5\",1\n")
    assert read_slurm_partitions(path) == (SlurmPartition("hi", (0, 1), 2),
                                           SlurmPartition("all", (0, 1, 2, 3, 5), 1))


@pytest.mark.parametrize("text, message", [
    ("name,nodes\nx,0\n", "line 1: need columns 'partition' and 'nodes'; found name, nodes$"),
    # a quoted header cell may span lines; the message stays one line
    ('"part\nition",nodes\nx,0\n', r"found 'part\\nition', nodes$"),
    ("partition,nodes\nx,a-b\n", "line 2, column 'nodes': not node numbers"),
    ("partition,nodes,priority_tier\nx,0,high\n", "line 2, column 'priority_tier': not an integer"),
    # Slurm's PriorityTier stops at 65,533; 2**32 swamped the priority and changed avg JCT
    ("partition,nodes,priority_tier\nx,0,65534\n",
     r"line 2, column 'priority_tier': must be in \[0, 65,533\], as Slurm's PriorityTier \(got 65534\)"),
    ("partition,nodes,priority_tier\nx,0,4294967296\n", r"\(got 4294967296\)"),
])
def test_bad_partition_files_name_line_and_rule(tmp_path, text, message):
    path = tmp_path / "parts.csv"
    path.write_text(text)
    with pytest.raises(ClusterError, match=message):
        read_slurm_partitions(path)


def test_partition_nodes_must_exist_and_the_cluster_be_uniform(tmp_path):
    with pytest.raises(ClusterError, match=r"Slurm partition 'x': nodes must be numbers in \[0, 1\]"):
        ClusterSpec.uniform_nodes(2, 4, slurm_partitions=(SlurmPartition("x", (2,)),))
    vcs = tmp_path / "vcs.csv"
    vcs.write_text("vc,nodes\nv1,2\n")
    with pytest.raises(ClusterError, match="need a uniform cluster"):
        parse_cluster(str(vcs), slurm_partitions=(SlurmPartition("x", (0,)),))


def test_the_partition_column_round_trips(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_time,num_gpus,duration,partition\na,0,1,10,hi\nb,5,2,20,\n")
    trace, _ = load_trace(path)
    assert trace.partition.tolist() == ["hi", ""]
    for suffix in (".csv", ".parquet"):
        out = tmp_path / f"back{suffix}"
        write_trace(trace, out)
        assert load_trace(out)[0].partition.tolist() == ["hi", ""]


def test_sacct_partition_gives_the_partition_column(tmp_path):
    path = tmp_path / "sacct.txt"
    path.write_text("JobID|Submit|Start|End|AllocTRES|Partition\n"
                    "1|2026-01-01T00:00:00|2026-01-01T00:00:05|2026-01-01T00:01:00|gres/gpu=2|hi\n")
    trace, _ = load_trace(path, format="slurm")
    assert trace.partition.tolist() == ["hi"] and trace.vc.tolist() == ["hi"]


def test_simulate_takes_partitions_and_the_association_tree(tmp_path):
    # The first test's case through the CLI: b's tier 2 job starts first, a's at b's end.
    from typer.testing import CliRunner

    from autosched.cli import build_app

    (tmp_path / "t.csv").write_text("job_id,submit_time,num_gpus,duration,time_limit,partition,user,account\n"
                                    "a,0,4,100,200,a,u1,P\nb,0,8,100,200,b,u2,C\n")
    (tmp_path / "p.csv").write_text("partition,nodes,priority_tier\na,0,1\nb,0-1,2\n")
    (tmp_path / "a.txt").write_text("Account|User|ParentName|Share\nroot|||1\nroot|root||1\nP||root|1\n"
                                    "P|u1||1\nC||root|1\nC|u2||1\n")
    args = ["simulate", str(tmp_path / "t.csv"), "-c", "2x4", "-p", "multifactor",
            "--slurm-partitions", str(tmp_path / "p.csv"), "--slurm-assoc", str(tmp_path / "a.txt"),
            "--jobs-out", str(tmp_path / "jobs.csv"), "--json"]
    r = CliRunner().invoke(build_app(), args)
    assert r.exit_code == 0, r.output
    lines = (tmp_path / "jobs.csv").read_text().splitlines()
    assert [ln.split(",")[2] for ln in lines[1:]] == ["100.0", "0.0"]
    (tmp_path / "p.csv").write_text("partition,nodes\na,0-5\n")
    r = CliRunner().invoke(build_app(), args)
    assert r.exit_code == 2 and "error: Slurm partition 'a': nodes must be numbers in [0, 1]" in r.output


@pytest.mark.parametrize("billing, first", [
    # Slurm bills a job by its partition's TRESBillingWeights: u1's 50 s in p2 (10 per GPU-s)
    # is 2000, u2's 100 s in p1 (1 per GPU-s) 400; at the recalculation at 180 u2 has used
    # less, so Fair Tree ranks u2 first and j3 starts at 200, j2 when it ends.
    (({"GRES/gpu": 1.0}, {"GRES/gpu": 10.0}), "j3"),
    # Without partition weights the knobs bill both alike (1 per GPU-s): u1 200, u2 400.
    (({}, {}), "j2"),
])
def test_a_job_is_billed_by_its_partitions_weights(billing, first):
    parts = tuple(SlurmPartition(n, (0,), 1, tuple(b.items())) for n, b in zip(("p1", "p2"), billing))
    trace = make_trace([(0, 4, 50), (0, 4, 100), (200, 4, 100), (200, 4, 100)]).replace(
        user=np.asarray(["u1", "u2", "u1", "u2"], dtype=object),
        account=np.asarray(["A", "B", "A", "B"], dtype=object),
        partition=np.asarray(["p2", "p1", "p1", "p1"], dtype=object),
        time_limit=np.full(4, 1000.0))
    spec = ClusterSpec.uniform_nodes(1, 4, slurm_partitions=parts)
    config = {**FLAT, "PriorityWeightFairshare": 10000, "PriorityDecayHalfLife": 60 * 86400.0,
              "backfill": False, "TRESBillingWeights.GRES/gpu": 1.0, "TRESBillingWeights.CPU": 0.0}
    sim = Simulator(trace, spec, get_policy("multifactor")(config)).run()
    expected = {"j2": [0, 50, 200, 300], "j3": [0, 50, 300, 200]}[first]
    assert starts(sim) == expected


def test_billing_weights_from_the_partition_file(tmp_path):
    path = tmp_path / "parts.csv"
    path.write_text('partition,nodes,priority_tier,billing_weights\n'
                    'gpu,0-3,1,"CPU=1.0,GRES/gpu=4.0"\nhi,0-1,2,\n')
    assert read_slurm_partitions(path) == (
        SlurmPartition("gpu", (0, 1, 2, 3), 1, (("CPU", 1.0), ("GRES/gpu", 4.0))),
        SlurmPartition("hi", (0, 1), 2, ()))
    path.write_text('partition,nodes,billing_weights\ngpu,0,"CPU=x"\n')
    with pytest.raises(ClusterError, match=r"line 2, column 'billing_weights': 'CPU=x' is not TRES=WEIGHT"):
        read_slurm_partitions(path)
    path.write_text('partition,nodes,billing_weights\ngpu,0,"CPU=1,cpu=2"\n')
    with pytest.raises(ClusterError, match="TRES 'cpu' is weighted twice"):
        read_slurm_partitions(path)


def test_nodes_outside_the_cluster_are_named_as_ranges():
    """`0-99` on 16 nodes printed all hundred node numbers."""
    with pytest.raises(ClusterError, match=r"^Slurm partition 'x': nodes must be numbers in "
                                           r"\[0, 15\] \(got 16-99 outside\)$"):
        ClusterSpec.uniform_nodes(16, 8, slurm_partitions=(SlurmPartition("x", tuple(range(100))),))
