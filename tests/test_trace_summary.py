"""`summarize` on a tiny trace whose figures are worked out by hand."""

from __future__ import annotations

import json

import pytest

from autosched.trace import Trace, summarize

# a: 1 GPU x 30 s; b: 2 x 600 s (exactly 10 min: the "10m-1h" bucket); c: 8 x 7,200 s; d: 64 x 90,000 s
TINY = Trace.from_columns({
    "job_id": ["a", "b", "c", "d"], "submit_time": [0, 3600, 7200, 86400], "num_gpus": [1, 2, 8, 64],
    "duration": [30, 600, 7200, 90000], "vc": ["A", "A", "B", "C"], "status": ["ok", "ok", "failed", "ok"],
    "user": ["u", "u", "v", "u"]}, source="tiny")
GPU_S = 30 + 1200 + 57600 + 5760000  # 5,818,830


def test_totals_and_mixes():
    s = summarize(TINY)
    assert (s.jobs, s.span_days, s.max_gpus, s.users) == (4, 1.0, 64, 2)
    assert s.gpu_hours == pytest.approx(GPU_S / 3600)
    assert s.median_duration == (600 + 7200) / 2 and s.mean_duration == (30 + 600 + 7200 + 90000) / 4
    assert s.offered_load is None and s.cluster is None
    assert [(b.label, b.jobs) for b in s.sizes] == [("1", 1), ("2", 1), ("3-4", 0), ("5-8", 1), ("9-16", 0),
                                                    ("17-32", 0), ("33-64", 1), (">64", 0)]
    assert [(b.label, b.jobs) for b in s.durations] == [("<1m", 1), ("1-10m", 0), ("10m-1h", 1), ("1-6h", 1),
                                                        ("6-24h", 0), (">1d", 1)]
    big = s.sizes[6]
    assert big.job_share == 0.25 and big.gpu_hours == pytest.approx(1600) and big.gpu_hour_share == pytest.approx(5760000 / GPU_S)
    assert s.statuses == (("ok", 3), ("failed", 1))


def test_offered_load_on_a_uniform_cluster():
    s = summarize(TINY, cluster="4x8 (32 GPUs)", cluster_gpus=32)
    assert s.cluster_gpus == 32 and s.cluster == "4x8 (32 GPUs)"
    assert s.offered_load == pytest.approx(GPU_S / (32 * 86400))
    assert all(v.gpus is None and v.offered_load is None for v in s.vcs)


def test_per_vc_load_on_a_vc_cluster():
    s = summarize(TINY, cluster="2 VCs", cluster_gpus=24, vc_gpus={"A": 8, "B": 16})
    assert s.offered_load == pytest.approx(GPU_S / (24 * 86400))
    rows = [(v.vc, v.jobs, v.gpus) for v in s.vcs]
    assert rows == [("C", 1, None), ("B", 1, 16), ("A", 2, 8)]  # largest GPU-hours first
    by_vc = {v.vc: v for v in s.vcs}
    assert by_vc["A"].offered_load == pytest.approx(1230 / (8 * 86400))
    assert by_vc["B"].offered_load == pytest.approx(57600 / (16 * 86400))
    assert by_vc["C"].offered_load is None
    assert sum(v.share for v in s.vcs) == pytest.approx(1.0)
    json.dumps(s.to_dict())  # plain data all the way down


def test_one_job_and_no_jobs():
    one = TINY.take([0])
    s = summarize(one, cluster="1x8 (8 GPUs)", cluster_gpus=8)
    assert s.span_days == 0 and s.offered_load is None and s.jobs == 1
    empty = summarize(TINY.take([]))
    assert empty.jobs == 0 and empty.gpu_hours == 0 and empty.vcs == () and empty.max_gpus == 0
    assert all(b.jobs == 0 and b.gpu_hour_share == 0 for b in empty.sizes)


def test_the_cli_passes_the_clusters_figures(tmp_path):
    """`autosched trace inspect --cluster` turns a VC cluster into the plain values `summarize`
    takes: a VC file of A: 1 node, B: 2 nodes of 8 GPUs gives 24 GPUs, A 8 and B 16."""
    from typer.testing import CliRunner

    from autosched.cli import app
    from autosched.trace import write_trace

    trace, vcs = tmp_path / "tiny.csv", tmp_path / "vcs.csv"
    write_trace(TINY.take([0, 1, 2]), trace)
    vcs.write_text("vc,nodes\nA,1\nB,2\n")
    r = CliRunner().invoke(app, ["trace", "inspect", str(trace), "--cluster", str(vcs), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["cluster_gpus"] == 24 and "2 VCs" in s["cluster"]
    assert {v["vc"]: v["gpus"] for v in s["vcs"]} == {"A": 8, "B": 16}
    assert s["vcs"][1]["offered_load"] == pytest.approx(1230 / (8 * 7200))  # A: 30 + 1,200 GPU-s over 2 h
