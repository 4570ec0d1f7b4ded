"""The simulate and policies commands, end to end through the CLI."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autosched.cli import app

runner = CliRunner()


@pytest.fixture()
def tiny(tmp_path):
    # Two 1-GPU jobs of 100 s on one 1-GPU node: FIFO runs them back to back.
    f = tmp_path / "tiny.csv"
    f.write_text("job_id,submit_time,num_gpus,duration\na,0,1,100\nb,0,1,100\n")
    return f


def test_simulate_json_hand_worked(tiny):
    r = runner.invoke(app, ["simulate", str(tiny), "--cluster", "1x1", "--json"])
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)
    # JCTs 100 and 200: average 150, queueing 0 and 100, makespan 200, GPU busy all the time.
    assert m["jobs"] == 2 and m["avg_jct"] == 150 and m["avg_queue"] == 50 and m["makespan"] == 200
    assert m["utilization"] == 1.0 and m["preemptions"] == 0
    for key in ("median_jct", "p95_jct", "p99_jct", "p99_queue"):
        assert key in m


def test_config_file_round_trip(tiny, tmp_path):
    cfg = tmp_path / "best.json"
    cfg.write_text(json.dumps({"policy": "tiresias", "knobs": {"queues": 2, "threshold": 500}}))
    r = runner.invoke(app, ["simulate", str(tiny), "-c", "1x1", "--config", str(cfg), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["policy"] == "tiresias" and out["config"]["queues"] == 2 and out["config"]["threshold"] == 500


@pytest.mark.parametrize("args, message", [
    (["--cluster", "1x1", "--policy", "nope"], "unknown policy 'nope'"),
    (["--cluster", "1x1", "--set", "bogus=1"], "unknown knob 'bogus'"),
    (["--cluster", "1x1", "--set", "backfill=maybe"], "is not a boolean"),
    (["--cluster", "1x1", "-p", "tiresias", "--set", "queues=99"], "outside its range [1, 6]"),
    (["--cluster", "banana"], "neither NODESxGPUS"),
    ([], "--cluster is required"),
])
def test_bad_input_is_one_clear_line(tiny, args, message):
    r = runner.invoke(app, ["simulate", str(tiny), *args])
    assert r.exit_code == 2
    assert message in r.output
    assert "Traceback" not in r.output


def test_missing_trace(tmp_path):
    r = runner.invoke(app, ["simulate", str(tmp_path / "none.csv"), "-c", "1x1"])
    assert r.exit_code == 2 and "no such file" in r.output


def test_jobs_out(tiny, tmp_path):
    out = tmp_path / "jobs.csv"
    r = runner.invoke(app, ["simulate", str(tiny), "-c", "1x1", "--jobs-out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    lines = out.read_text().splitlines()
    assert lines[0].startswith("job_id,submit,first_start,end,jct,queue")
    assert lines[2].split(",")[:5] == ["b", "0.0", "100.0", "200.0", "200.0"]


def test_policies_lists_every_knob():
    from autosched.policies import POLICIES

    r = runner.invoke(app, ["policies", "--json"])
    assert r.exit_code == 0
    listed = json.loads(r.stdout)
    assert set(listed) == set(POLICIES)
    for name, cls in POLICIES.items():
        assert list(listed[name]["knobs"]) == list(cls.space.names)
        assert "placement" in listed[name]["knobs"]
