"""`autosched tune` end to end: the saved best config gives best_value again under `simulate`."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autosched.cli import app

runner = CliRunner()

# 12 jobs on 1 node x 4 GPUs: enough contention that the knobs change the result.
CSV = "job_id,submit_time,num_gpus,duration\n" + "\n".join(
    f"j{i},{t},{g},{d}" for i, (t, g, d) in enumerate([
        (0, 2, 3000), (10, 4, 600), (20, 1, 100), (30, 2, 8000), (40, 1, 50), (50, 4, 2000),
        (60, 1, 400), (70, 2, 300), (80, 1, 9000), (90, 3, 700), (100, 1, 20), (110, 2, 1500)]))


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "tiny.csv"
    path.write_text(CSV + "\n")
    return path


def test_best_config_round_trips_through_simulate(trace, tmp_path):
    best = tmp_path / "best.json"
    res = runner.invoke(app, ["tune", str(trace), "--cluster", "1x4", "--policy", "tiresias", "--budget", "8",
                              "--no-screening", "--seed", "1", "--json", "--out", str(best)])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    for key in ("best_config", "best_value", "default_value", "trials", "screened_knobs"):
        assert key in out
    assert len(out["trials"]) == 8
    assert out["best_value"] <= out["default_value"]
    saved = json.loads(best.read_text())
    assert saved == {"policy": "tiresias", "knobs": out["best_config"]}
    sim = runner.invoke(app, ["simulate", str(trace), "--cluster", "1x4", "--config", str(best), "--json"])
    assert sim.exit_code == 0, sim.output
    assert json.loads(sim.stdout)["avg_jct"] == pytest.approx(out["best_value"], rel=1e-12)


def test_report_has_the_four_parts(trace, tmp_path):
    rep = tmp_path / "rep"
    res = runner.invoke(app, ["tune", str(trace), "--cluster", "1x4", "--budget", "24", "--report", str(rep)])
    assert res.exit_code == 0, res.output
    html = (rep / "index.html").read_text()
    for part in ("Convergence", "Knob importance", "Causal graph", "Best vs default"):
        assert part in html
    assert html.count("<img") == 3
    data = json.loads((rep / "report.json").read_text())
    assert data["screening"]["samples"] == 12
    assert "frozen" in res.output or "searched" in res.output


@pytest.mark.parametrize("args, msg", [
    (["--objective", "jct"], "unknown metric 'jct'"),
    (["--constraint", "p99_queue<6h"], "expected METRIC<=VALUE"),
    (["--policy", "nosuch"], "unknown policy 'nosuch'"),
    (["--sampler", "cma"], "sampler 'cma'"),
    (["--budget", "0"], "budget must be at least 1 trial (got 0)"),  # (the last --budget counts)
    (["--policy", "fifo,fifo"], "policy listed twice: fifo, fifo"),
])
def test_bad_options_are_one_line_errors(trace, args, msg):
    res = runner.invoke(app, ["tune", str(trace), "--cluster", "1x4", "--budget", "3", *args])
    assert res.exit_code == 2
    assert msg in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output  # (was: a second line "error: 2")


def test_warm_start_file_with_an_unknown_knob_is_a_clear_error(trace, tmp_path):
    bad = tmp_path / "warm.json"
    bad.write_text('{"policy": "tiresias", "knobs": {"queues": 2, "nope": 1}}')
    res = runner.invoke(app, ["tune", str(trace), "--cluster", "1x4", "--budget", "3", "--warm-start", str(bad)])
    assert res.exit_code == 2
    assert "unknown knob(s) nope" in res.output and "Traceback" not in res.output
