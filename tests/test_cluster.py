"""Cluster specs: parsing, partitions and what the cluster can never run."""

from __future__ import annotations

import numpy as np
import pytest

from autosched.cluster import ClusterError, fit_to_cluster, parse_cluster
from autosched.trace import Trace, TraceError


def _trace(gpus, vcs=None):
    n = len(gpus)
    return Trace.from_columns({"job_id": [str(i) for i in range(n)], "submit_time": list(range(n)),
                               "num_gpus": gpus, "duration": [10.0] * n, "vc": vcs}, source="t.csv")


def test_uniform_spec():
    c = parse_cluster("32x8")
    assert (c.nodes, c.gpus_per_node, c.gpus, c.uniform) == (32, 8, 256, True)
    assert parse_cluster(" 4 X 2 ").gpus == 8


@pytest.mark.parametrize("bad", ["32", "0x8", "x8", "no_such_file.csv"])
def test_bad_uniform_spec(bad):
    with pytest.raises(ClusterError):
        parse_cluster(bad)


def test_philly_vc_file(shared_traces):
    c = parse_cluster(str(shared_traces / "philly" / "philly_vc_nodes.csv"))
    assert c.nodes == 352 and c.gpus == 2816 and not c.uniform
    assert dict(c.vc_nodes)["6214e9"] == 64


def test_vc_file_errors(tmp_path):
    f = tmp_path / "vcs.csv"
    f.write_text("vc,nodes\na,2\na,3\n")
    with pytest.raises(ClusterError, match=r"line 3, column 'vc': VC 'a' appears twice"):
        parse_cluster(str(f))
    f.write_text("vc,nodes\na,two\n")
    with pytest.raises(ClusterError, match=r"line 2, column 'nodes': node count is not an integer"):
        parse_cluster(str(f))
    f.write_text("name,size\n")
    with pytest.raises(ClusterError, match="need columns 'vc' and 'nodes'"):
        parse_cluster(str(f))
    f.write_text("nodes,vc\n3\n")  # a short row: its vc cell is missing
    with pytest.raises(ClusterError, match=r"line 2, column 'vc': missing cell \(the row has 1 of 2 columns\)$"):
        parse_cluster(str(f))


def test_an_empty_or_empty_sized_spec_is_named():
    with pytest.raises(ClusterError, match="^cluster spec is empty: give NODESxGPUS"):
        parse_cluster("")
    with pytest.raises(ClusterError, match="^cluster 0x8: a cluster needs at least one node"):
        parse_cluster("0x8")


def test_fit_drops_unknown_vc_and_oversized_jobs(tmp_path):
    f = tmp_path / "vcs.csv"
    f.write_text("vc,nodes,gpus_per_node\na,1,4\nb,2,4\n")
    c = parse_cluster(str(f))
    t = _trace([4, 5, 8, 1], ["a", "a", "b", "zz"])
    kept, report = fit_to_cluster(t, c)
    assert kept.job_id.tolist() == ["0", "2"]
    assert report.dropped == 2
    text = report.summary()
    assert "more GPUs than its partition has (4)" in text and "VC is not in the cluster spec" in text
    with pytest.raises(TraceError, match=r"job '1', column 'num_gpus'"):
        fit_to_cluster(t, c, strict=True)


def test_uniform_ignores_vcs():
    t = _trace([1, 2], ["a", "b"])
    assert np.all(parse_cluster("1x2").partition_of(t) == 0)


def test_node_shape_gives_jobs_cpus_per_gpu():
    # 11x8 with 40 CPUs a node: 5 CPUs per GPU; a job with its own count keeps it; 0 = not known.
    spec = parse_cluster("11x8, CPUs=40")
    assert (spec.cpus_per_node, spec.cpus_per_gpu) == (40, 5.0)
    assert spec.job_cpus(np.array([1, 8, 16]), np.array([0, 0, 3])).tolist() == [5, 40, 3]
    assert spec.describe() == "11x8 (88 GPUs), CPUs=40"
    # no CPUs given: as many as GPUs, one per GPU; the description is the one it always was
    plain = parse_cluster("32x8")
    assert plain.job_cpus(np.array([1, 8]), None).tolist() == [1, 8]
    assert plain.describe() == "32x8 (256 GPUs)"
    assert "1 CPU(s) per GPU (the node shape: 8 CPUs, 8 GPUs)" == plain.cpu_rule()
    # DefCpuPerGPU=0: one CPU per node a job spans (sbatch's default of one task)
    node = parse_cluster("4x8,DefCpuPerGPU=0")
    assert node.job_cpus(np.array([1, 8, 16]), None).tolist() == [1, 1, 2]
    assert node.cpu_rule().startswith("one CPU per node")
    # DefCpuPerGPU=2.5 on 8-CPU nodes: rounded, at least one
    assert parse_cluster("2x8,DefCpuPerGPU=2.5").job_cpus(np.array([1, 2]), None).tolist() == [2, 5]
    # a set DefCpuPerGPU also sizes a job whose count (sacct's request: one CPU) is below it; the
    # node shape's rule and DefCpuPerGPU=0 keep a job's own count
    assert parse_cluster("4x8,CPUs=8,DefCpuPerGPU=1").job_cpus(np.array([1, 4, 8, 2]), np.array([1, 1, 1, 6])).tolist() \
        == [1, 4, 8, 6]
    assert parse_cluster("4x8,CPUs=8").job_cpus(np.array([4, 8]), np.array([1, 1])).tolist() == [1, 1]
    assert node.job_cpus(np.array([4, 8]), np.array([1, 3])).tolist() == [1, 3]
    # what a job asked for (the TRES factor): its count; where DefCpuPerGPU is set, one CPU per
    # node without one; under the node shape's rule, what it is given
    sized = parse_cluster("4x8,CPUs=8,DefCpuPerGPU=1")
    assert sized.asked_cpus(np.array([1, 8, 16, 2]), np.array([0, 0, 0, 6])).tolist() == [1, 1, 2, 6]
    assert plain.asked_cpus(np.array([1, 8, 2]), np.array([0, 0, 6])).tolist() == [1, 8, 6]
    assert node.asked_cpus(np.array([1, 8, 16]), None).tolist() == [1, 1, 2]


@pytest.mark.parametrize("bad", ["11x8,CPUs=0", "11x8,CPUs=4.5", "11x8,Mem=40", "11x8,CPUs", "11x8,DefCpuPerGPU=-1"])
def test_bad_node_shape_is_named(bad):
    with pytest.raises(ClusterError, match="cluster spec"):
        parse_cluster(bad)
