"""`autosched workload fit | sample | evaluate | models` through typer's CliRunner."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from autosched.cli import app
from autosched.trace import Trace, load_trace, write_trace

DAY = 86400.0
runner = CliRunner()


@pytest.fixture()
def trace_file(tmp_path):
    rng = np.random.default_rng(0)
    n = 400
    tr = Trace.from_columns({"job_id": [f"j{i}" for i in range(n)], "submit_time": np.sort(rng.uniform(0, 10 * DAY, n)),
                             "num_gpus": rng.choice([1, 2, 4], n), "duration": rng.lognormal(7, 1, n),
                             "vc": rng.choice(["a", "b"], n)})
    path = tmp_path / "t.csv"
    write_trace(tr, path)
    return path


def run(*args: str):
    return runner.invoke(app, ["workload", *args])


def error_line(res) -> str:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert "Traceback" not in res.output
    return lines[0]


def test_fit_then_sample_is_reproducible(trace_file, tmp_path):
    model = tmp_path / "m.npz"
    res = run("fit", str(trace_file), "--until", "7d", "--model", "stat", "--set", "half_life=3", "--out", str(model), "--json")
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout)
    assert info["model"] == "stat" and info["params"]["half_life"] == 3.0 and info["history_end"] == 7 * DAY
    outs = []
    for name in ("a.csv", "b.csv"):
        res = run("sample", str(model), "--start", "7d", "--horizon", "2d", "--seed", "4", "--out", str(tmp_path / name))
        assert res.exit_code == 0, res.output
        outs.append(load_trace(tmp_path / name)[0])
    assert outs[0].equals(outs[1]) and len(outs[0]) > 0
    assert outs[0].start >= 7 * DAY and outs[0].end < 9 * DAY


def test_fit_with_history_window(trace_file, tmp_path):
    res = run("fit", str(trace_file), "--until", "7d", "--history", "2d", "--model", "replay", "--out", str(tmp_path / "m.npz"), "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["history_start"] >= 5 * DAY


def test_fit_says_when_its_jobs_were_submitted_not_only_its_window(trace_file, tmp_path):
    """`--until 367d` on a 10-day trace said "jobs submitted 0.00d to 367.00d"."""
    res = run("fit", str(trace_file), "--until", "367d", "--model", "replay", "--out",
              str(tmp_path / "m.npz"))
    assert res.exit_code == 0, res.output
    tr = load_trace(trace_file)[0]
    first, last = tr.submit_time.min() / DAY, tr.submit_time.max() / DAY
    assert f"jobs submitted {first:.2f}d to {last:.2f}d (history window " in res.output
    assert "to 367.00d)" in res.output


def test_bad_input_gives_one_line_errors(trace_file, tmp_path):
    model = tmp_path / "m.npz"
    msg = error_line(run("fit", str(trace_file), "--until", "7d", "--model", "arima", "--out", str(model)))
    assert "unknown workload model 'arima'" in msg and "replay, stat, hybrid, neural" in msg
    msg = error_line(run("fit", str(trace_file), "--until", "1s", "--out", str(model)))
    assert "history to fit on is empty" in msg and str(trace_file) in msg
    msg = error_line(run("fit", str(trace_file), "--until", "-1d", "--out", str(model)))
    assert msg == "error: --until must be >= 0 (got '-1d'): times count from the trace's origin"
    msg = error_line(run("fit", str(trace_file), "--until", "soon", "--out", str(model)))
    assert "--until" in msg and "'soon'" in msg
    msg = error_line(run("fit", str(trace_file), "--until", "7d", "--set", "half_life=0", "--out", str(model)))
    assert "half_life" in msg
    msg = error_line(run("fit", str(tmp_path / "nope.csv"), "--until", "7d", "--out", str(model)))
    assert "no such file" in msg
    assert not model.exists()
    assert run("fit", str(trace_file), "--until", "7d", "--out", str(model)).exit_code == 0
    for horizon in ("0", "-2d"):
        msg = error_line(run("sample", str(model), "--start", "7d", "--horizon", horizon, "--out", str(tmp_path / "o.csv")))
        assert msg == f"error: --horizon must be > 0 (got '{horizon}')"
    msg = error_line(run("sample", str(tmp_path / "missing.npz"), "--start", "7d", "--out", str(tmp_path / "o.csv")))
    assert "no such model file" in msg
    assert not (tmp_path / "o.csv").exists()


def test_evaluate_json_and_report(trace_file, tmp_path):
    res = run("evaluate", str(trace_file), "--cluster", "2x8", "--policy", "fifo", "--history", "5d", "--horizon", "2d",
              "--step", "2d", "--first", "5d", "--models", "replay,stat:half_life=3", "--samples", "2", "--panel", "1",
              "--report", str(tmp_path / "rep"), "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"replay", "stat:half_life=3", "dropped"}
    dropped = out.pop("dropped")  # the load report: nothing dropped from this clean trace
    assert dropped["dropped"] == 0 and dropped["kept"] == dropped["rows"] > 0
    for entry in out.values():
        for key in ("spearman_mean", "regret_mean", "ks_interarrival_mean"):
            assert key in entry
        # Origins 5 d and 7 d; 9 d + 2 d would pass the last job (just before 10 d).
        assert entry["per_origin"]["origin"] == [5 * DAY, 7 * DAY]
    assert "vs_replay" in out["stat:half_life=3"]
    assert (tmp_path / "rep" / "index.html").stat().st_size > 1000
    data = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert len(data["reals"]) == 2 and len(data["configs"]) == 2


def test_evaluate_bad_input(trace_file):
    base = [str(trace_file), "--cluster", "2x8", "--policy", "fifo"]
    assert "no origin has 21 days of history" in error_line(run("evaluate", *base))
    assert "unknown workload model" in error_line(run("evaluate", *base, "--models", "replay,foo"))
    assert error_line(run("evaluate", *base, "--horizon", "0")) == "error: --horizon must be > 0 (got '0')"
    assert "unknown policy" in error_line(run("evaluate", str(trace_file), "--cluster", "2x8", "--policy", "nope"))


def test_models_lists_every_model():
    res = run("models", "--json")
    assert res.exit_code == 0
    assert {"replay", "stat", "neural"} <= set(json.loads(res.stdout))
