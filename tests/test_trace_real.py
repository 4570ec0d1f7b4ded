"""Loaders on the real traces in ../shared/traces (figures from PROVENANCE.md there)."""

from __future__ import annotations

import numpy as np
import pytest

from autosched.cluster import fit_to_cluster, parse_cluster
from autosched.trace import load_trace, summarize


def test_philly_2day_slice(shared_traces):
    trace, report = load_trace(shared_traces / "philly" / "slices" / "philly_2017-10-02_2d.csv")
    assert report.format == "canonical" and report.dropped == 0
    assert len(trace) == 1682
    assert round(trace.gpu_seconds() / 3600) == 12328
    assert trace.vc is not None and trace.submit_time[0] == 0


@pytest.fixture(scope="module")
def philly_full(shared_traces):
    return load_trace(shared_traces / "philly" / "philly_jobs_sia.csv")


def test_full_philly_per_job_csv(philly_full):
    trace, report = philly_full
    assert report.format == "philly" and (report.rows, report.kept) == (82247, 82247)
    assert round(trace.gpu_seconds() / 3600) == 978078
    sizes = dict(zip(*np.unique(trace.num_gpus, return_counts=True)))
    assert (sizes[1], sizes[2], sizes[4], sizes[8], sizes[128]) == (76627, 1818, 1870, 1643, 3)
    assert np.median(trace.duration) == 1144
    # 2017-09-04 10:30:41 is the first stamp; times count from that day's midnight
    assert trace.submit_time[0] == 10 * 3600 + 30 * 60 + 41
    vcs = dict(zip(*np.unique(trace.vc.astype(str), return_counts=True)))
    assert vcs["6214e9"] == 41226 and len(vcs) == 15


def test_full_philly_on_its_vcs(shared_traces, philly_full):
    trace, report = philly_full
    cluster = parse_cluster(str(shared_traces / "philly" / "philly_vc_nodes.csv"))
    fitted, report = fit_to_cluster(trace, cluster, report=report)
    # the 4 VCs missing from the node table hold 18 jobs; every job fits its VC (8 GPUs x >= 8 nodes)
    assert len(fitted) == 82247 - 18
    assert report.drops["vc", "VC is not in the cluster spec " + str(shared_traces / "philly" / "philly_vc_nodes.csv")].count == 18
    s = summarize(fitted, cluster=cluster.describe(), cluster_gpus=cluster.gpus)
    assert s.cluster_gpus == 2816
    assert s.offered_load == pytest.approx(fitted.gpu_seconds() / (2816 * (fitted.end - fitted.start)))


@pytest.mark.parametrize("name, jobs, gpu_hours, max_gpus", [
    ("cluster01.csv", 1595, 22740, 64), ("cluster05.csv", 3629, 14303, 8), ("cluster07.csv", 12699, 366800, 16)])
def test_itp_clusters(shared_traces, name, jobs, gpu_hours, max_gpus):
    trace, report = load_trace(shared_traces / "microsoft-itp-elasticflow" / name)
    assert report.format == "itp" and report.dropped == 0
    assert len(trace) == jobs
    assert round(trace.gpu_seconds() / 3600) == gpu_hours
    assert trace.num_gpus.max() == max_gpus


def test_cluster01_submit_range(shared_traces):
    trace, _ = load_trace(shared_traces / "microsoft-itp-elasticflow" / "cluster01.csv")
    assert (trace.start, trace.end) == (1932025, 4848400)
    assert summarize(trace).span_days == pytest.approx((4848400 - 1932025) / 86400)
