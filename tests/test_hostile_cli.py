"""What a hostile but fair new user found (issue 12), case by case, through the real command line:
outputs that would destroy files, limits, drops in --json, and crashes. Each case ends in a result
or in one line ``error: ...`` with exit code 2, never a traceback. (The study cases are the
tuner's: tests/test_tune*.)"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from autosched.cli import app
from autosched.trace import Trace, load_trace, write_trace
from autosched.workload import get_model
from test_outputs import own_null_device

runner = CliRunner()
DAY = 86400.0


@pytest.fixture()
def trace(tmp_path):
    rng = np.random.default_rng(1)
    n = 120
    tr = Trace.from_columns({"job_id": [f"j{i}" for i in range(n)],
                             "submit_time": np.sort(rng.uniform(0, 3 * DAY, n)).round(),
                             "num_gpus": rng.choice([1, 2, 4], n), "duration": rng.lognormal(7, 1, n).round() + 1})
    path = tmp_path / "t.csv"
    write_trace(tr, path)
    return path


@pytest.fixture()
def model(tmp_path, trace):
    path = tmp_path / "m.npz"
    get_model("stat")().fit(load_trace(trace)[0]).save(path)
    return path


def cli(*args) -> "object":
    return runner.invoke(app, [str(a) for a in args])


def error_line(res) -> str:
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exc_info
    lines = [ln for ln in res.output.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    return lines[0]


# ----------------------------------------------------------------------------------- outputs

@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_jobs_out_that_is_not_a_regular_file_is_refused_before_the_work(tmp_path, trace, kind):
    out = tmp_path / "x.csv"
    if kind == "fifo":
        os.mkfifo(out)
    elif kind == "device":  # `mknod x.csv c 1 3`, as in the issue (never a link to the real /dev/null)
        own_null_device(out)
    else:
        out.mkdir()
    line = error_line(cli("simulate", trace, "--cluster", "2x8", "--jobs-out", out))
    assert line.startswith(f"error: {out}: is a") and "not a regular file" in line
    assert {"fifo": out.is_fifo, "device": out.is_char_device, "directory": out.is_dir}[kind]()


def _same(path, before: bytes) -> bool:
    return path.read_bytes() == before


def test_no_output_may_overwrite_an_input_of_the_same_command(tmp_path, trace, model):
    config = tmp_path / "c.json"
    config.write_text('{"policy": "fifo", "knobs": {}}')
    study = tmp_path / "s.db"
    study.write_bytes(b"")
    saved = {p: p.read_bytes() for p in (trace, model, config)}
    cases = [
        (["simulate", trace, "--cluster", "2x8", "--jobs-out", trace], trace),
        (["simulate", trace, "--cluster", "2x8", "--config", config, "--jobs-out", config], config),
        (["trace", "convert", trace, trace], trace),
        (["trace", "convert", trace, tmp_path / "." / "t.csv"], trace),
        (["workload", "fit", trace, "--until", "2d", "--out", trace], trace),
        (["workload", "sample", model, "--start", "0", "--out", model], model),
        (["tune", trace, "--cluster", "2x8", "--budget", "1", "--out", trace], trace),
        (["tune", trace, "--cluster", "2x8", "--budget", "1", "--warm-start", config, "--out", config], config),
        (["tune", trace, "--cluster", "2x8", "--budget", "1", "--study", study, "--out", study], study),
    ]
    for args, victim in cases:
        line = error_line(cli(*args))
        assert line.endswith("is an input of this command; refusing to overwrite it"), (args, line)
    assert all(_same(p, b) for p, b in saved.items()) and study.read_bytes() == b""


def test_dash_streams_where_a_command_streams_one_output(trace, model):
    res = runner.invoke(app, ["trace", "convert", str(trace), "-"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0] == "job_id,submit_time,num_gpus,duration"
    assert len(res.stdout.splitlines()) == 121
    res = runner.invoke(app, ["workload", "sample", str(model), "--start", "3d", "--horizon", "1d", "--out", "-"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("job_id,submit_time,num_gpus,duration\n")
    assert error_line(cli("simulate", trace, "--cluster", "2x8", "--jobs-out", "-")).endswith(
        "'-' (standard output) is not accepted for this output; give a file name")


def test_output_errors_name_the_users_path(tmp_path, trace):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    out = blocker / "jobs.csv"
    line = error_line(cli("simulate", trace, "--cluster", "2x8", "--jobs-out", out))
    assert line.startswith(f"error: {out}: cannot write") and ".tmp" not in line


# ---------------------------------------------------------------------------- limits and drops

def test_drops_are_in_json_and_on_stderr_with_their_rules(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("job_id,submit_time,num_gpus,duration\n"
                    "a,0,1,100\n"
                    "g,50,1,100\n"
                    "b,10,1,1e300\n"         # longer than a year
                    "c,5,1,50\n"             # out of order: sorted, noted
                    "a,20,1,60\n"            # duplicate id: the first row is kept
                    "d,-5,1,60\n"            # negative submit time
                    "e,4e9,1,60\n"           # beyond 100 years
                    "f,30,2000000,60\n")     # more GPUs than any cluster
    res = runner.invoke(app, ["simulate", str(path), "--cluster", "2x8", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["jobs"] == 3
    dropped = out["dropped"]
    assert (dropped["rows"], dropped["kept"], dropped["dropped"]) == (8, 3, 5)
    rules = {d["rule"]: (d["column"], d["count"], d["examples"]) for d in dropped["drops"]}
    assert rules == {
        "GPU count is beyond any cluster (must be <= 1,000,000)": ("num_gpus", 1, ["line 9 (got '2000000')"]),
        "submit time is negative (must be >= 0)": ("submit_time", 1, ["job 'd' (got -5.0)"]),
        "submit time is beyond 100 years (must be <= 3,153,600,000 s)": ("submit_time", 1, ["job 'e' (got 4000000000.0)"]),
        "duration is longer than a year (must be <= 31,536,000 s)": ("duration", 1, ["job 'b' (got 1e+300)"]),
        "job id appears more than once (the first row is kept)": ("job_id", 1, ["job 'a'"]),
    }
    assert dropped["notes"] == ["rows are not in submit-time order (1 step(s) back); jobs are sorted by submit time, ties in file order"]
    assert "dropped 5:" in res.stderr and "job id appears more than once" in res.stderr


@pytest.mark.parametrize("row, rule", [
    ("b,10,1,1e300", "duration is longer than a year"),
    ("a,10,1,60", "job id appears more than once"),
    ("b,-1,1,60", "submit time is negative"),
])
def test_strict_makes_the_first_bad_row_an_error(tmp_path, row, rule):
    path = tmp_path / "bad.csv"
    path.write_text(f"job_id,submit_time,num_gpus,duration\na,0,1,100\n{row}\n")
    assert rule in error_line(cli("simulate", path, "--cluster", "2x8", "--strict"))


def test_a_1e300_duration_never_reaches_a_model_or_a_sample(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_time,num_gpus,duration\n"
                    + "".join(f"j{i},{i * 600},1,{1e300 if i == 3 else 100 + i}\n" for i in range(50)))
    res = cli("workload", "fit", path, "--until", "1d", "--out", tmp_path / "m.npz")
    assert res.exit_code == 0, res.output
    res = cli("workload", "sample", tmp_path / "m.npz", "--start", "1d", "--horizon", "1d", "--out", tmp_path / "s.csv")
    assert res.exit_code == 0, res.output
    assert load_trace(tmp_path / "s.csv")[0].duration.max() < 1000


@pytest.mark.parametrize("spec, message", [
    ("16x99999999", "99,999,999 GPUs per node is beyond any machine (must be <= 1,024)"),
    ("1000001x1", "1,000,001 GPUs is beyond any cluster (must be <= 1,000,000)"),
])
def test_cluster_size_is_bounded(trace, spec, message):
    assert error_line(cli("simulate", trace, "--cluster", spec)) == f"error: {spec}: {message}"


def test_a_json_true_is_not_an_integer_knob(tmp_path, trace):
    config = tmp_path / "c.json"
    config.write_text('{"policy": "tiresias", "knobs": {"queues": true}}')
    assert error_line(cli("simulate", trace, "--cluster", "2x8", "--config", config)) == \
        "error: knob 'queues': True is not an integer"


@pytest.mark.parametrize("start, message", [
    ("1e300", "error: stat: start 1e+300 is beyond the bound on submit times (3,153,600,000 s, 100 years)"),
    ("-1d", "error: --start must be >= 0 (got '-1d'): submit times count from the trace's origin"),
])
def test_a_sample_starts_within_the_bounds_on_submit_times(model, tmp_path, start, message):
    """Was: 0 jobs "in [11574074074074075286836787544866678821745987056604175023500816899304269782...d)"."""
    assert error_line(cli("workload", "sample", model, "--start", start, "--out", tmp_path / "o.csv")) == message


@pytest.mark.parametrize("args, message", [
    (["workload", "evaluate", "{trace}", "--cluster", "2x8", "--history", "1d", "--horizon", "100000d"],
     "error: horizon of 100,000 days is beyond the 366-day limit of one sample"),
    (["run", "{trace}", "--cluster", "2x8", "--period", "100000d"],
     "error: period of 100,000 days is beyond the 366-day limit of one workload sample"),
])
def test_horizons_of_evaluate_and_run_are_bounded_up_front(trace, args, message):
    assert error_line(cli(*[a.format(trace=trace) for a in args])) == message


def test_a_huge_horizon_fails_at_once(model, tmp_path):
    line = error_line(cli("workload", "sample", model, "--start", "0", "--horizon", "100000d", "--out", tmp_path / "o.csv"))
    assert "horizon of 100,000 days is beyond the 366-day limit of one sample" in line
    assert not (tmp_path / "o.csv").exists()


# ---------------------------------------------------------------------------------- crashes

def test_run_with_empty_periods_works(shared_traces):
    """Was `TypeError: Metrics.__init__() missing ... 'fairness'` (a period with no jobs)."""
    t = shared_traces / "philly" / "slices" / "philly_2017-10-02_2d.csv"
    res = cli("run", t, "--cluster", "16x8", "--period", "1m", "--history", "12h", "--strategies", "default",
              "--no-screening", "--json")
    assert res.exit_code == 0, res.output
    periods = json.loads(res.stdout)["strategies"]["default"]["periods"]
    assert any(p["jobs"] == 0 for p in periods) and sum(p["jobs"] for p in periods) == 1682


def test_non_utf8_config_and_warm_start(tmp_path, trace):
    bad = tmp_path / "c.json"
    bad.write_bytes(b'\xff\xfe{"knobs": {}}')
    expected = f"error: {bad}: not a UTF-8 text file (invalid start byte at byte 0); expected a JSON config"
    assert error_line(cli("simulate", trace, "--cluster", "2x8", "--config", bad)) == expected
    assert error_line(cli("tune", trace, "--cluster", "2x8", "--budget", "1", "--warm-start", bad)) == expected


@pytest.mark.parametrize("args", [
    ["tune", "{trace}", "--cluster", "2x8", "--budget", "1", "--report", "{tmp}/rep", "--out", "{tmp}/best.json"],
    ["workload", "evaluate", "{trace}", "--cluster", "2x8", "--history", "1d", "--horizon", "1d", "--report", "{tmp}/rep"],
])
def test_report_without_matplotlib_fails_before_the_work(monkeypatch, tmp_path, trace, args):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed: import fails
    line = error_line(cli(*[a.format(trace=trace, tmp=tmp_path) for a in args]))
    assert line == "error: --report needs matplotlib, which is not installed: pip install 'autosched[report]'"
    assert not (tmp_path / "best.json").exists() and not (tmp_path / "rep").exists()


def test_run_neural_without_torch_fails_before_the_work(monkeypatch, trace):
    monkeypatch.setitem(sys.modules, "torch", None)
    line = error_line(cli("run", trace, "--cluster", "2x8", "--period", "1d", "--model", "neural"))
    assert line == "error: --model neural needs torch, which is not installed: pip install 'autosched[neural]'"


def test_workload_sample_on_bad_model_files_and_seeds(tmp_path, trace, model):
    cut = tmp_path / "cut.npz"
    cut.write_bytes(model.read_bytes()[:300])
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    out = tmp_path / "o.csv"
    line = error_line(cli("workload", "sample", cut, "--start", "0", "--out", out))
    assert line.startswith(f"error: {cut}: not a workload model file written by autosched `workload fit`, or it is damaged")
    assert error_line(cli("workload", "sample", empty, "--start", "0", "--out", out)) == \
        f"error: {empty}: the file is empty; not a workload model file written by autosched `workload fit`"
    line = error_line(cli("workload", "sample", trace, "--start", "0", "--out", out))
    assert line == f"error: {trace}: not a workload model file written by autosched `workload fit` (it is not an .npz archive)"
    assert "pickle" not in line
    assert not out.exists()


@pytest.mark.parametrize("args", [
    ["workload", "sample", "{model}", "--start", "0", "--out", "{tmp}/o.csv"],
    ["workload", "evaluate", "{trace}", "--cluster", "2x8", "--history", "1d", "--horizon", "1d"],
    ["tune", "{trace}", "--cluster", "2x8", "--budget", "1"],
    ["run", "{trace}", "--cluster", "2x8", "--period", "1d", "--history", "1d"],
])
@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_seeds_out_of_range_fail_before_the_work(tmp_path, trace, model, args, seed):
    """Were NumPy tracebacks (`expected non-negative integer`, `Seed must be between 0 and 2**32 - 1`)."""
    res = cli(*[a.format(trace=trace, model=model, tmp=tmp_path) for a in args], "--seed", seed)
    assert error_line(res) == f"error: --seed must be in [0, 4294967295] (got {seed})"


@pytest.mark.parametrize("args", [
    ["tune", "{trace}", "--cluster", "2x8", "--budget", "1", "--report", "{trace}"],
    ["run", "{trace}", "--cluster", "2x8", "--period", "1d", "--history", "1d", "--report", "{trace}"],
    ["workload", "evaluate", "{trace}", "--cluster", "2x8", "--history", "1d", "--horizon", "1d", "--report", "{trace}"],
])
def test_a_report_directory_that_is_a_file_fails_before_the_work(trace, args):
    before = trace.read_bytes()
    line = error_line(cli(*[a.format(trace=trace) for a in args]))
    assert line == f"error: {trace}: is not a directory; a report is a directory (index.html, report.json)"
    assert trace.read_bytes() == before


@pytest.mark.parametrize("args, what", [
    (["simulate", "{fifo}", "--cluster", "2x8"], "trace file"),
    (["simulate", "{trace}", "--cluster", "{fifo}"], "CSV of vc,nodes"),
    (["simulate", "{trace}", "--cluster", "2x8", "--config", "{fifo}"], "JSON config"),
    (["workload", "sample", "{fifo}", "--start", "0", "--out", "{tmp}/o.csv"], "model file (.npz)"),
])
def test_an_input_that_is_a_fifo_is_refused_instead_of_blocking(tmp_path, trace, args, what):
    """Opening a FIFO with no writer blocks for ever (and a trace is read twice: head, then rows)."""
    import threading

    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    # A writer that opens and closes at once: code that wrongly opens the FIFO gets an empty read
    # (and fails this test) instead of hanging it.
    writer = threading.Thread(target=lambda: open(fifo, "wb").close(), daemon=True)
    writer.start()
    try:
        line = error_line(cli(*[a.format(fifo=fifo, trace=trace, tmp=tmp_path) for a in args]))
    finally:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets the writer's open return
        writer.join(timeout=30)
    assert line == f"error: {fifo}: is a FIFO (named pipe), not a regular file; expected a {what}"


def test_metrics_of_a_period_without_jobs():
    """The root of the `run --period 1m` TypeError: no jobs gave a Metrics one field short."""
    from autosched.sim.engine import JobRecords
    from autosched.sim.metrics import compute_metrics

    empty = np.zeros(0)
    m = compute_metrics(JobRecords(*([empty] * 8)), 16)
    assert m.to_dict() == {"jobs": 0, "avg_jct": 0.0, "median_jct": 0.0, "p95_jct": 0.0, "p99_jct": 0.0,
                           "avg_queue": 0.0, "p99_queue": 0.0, "avg_slowdown": 0.0, "makespan": 0.0,
                           "utilization": 0.0, "preemptions": 0, "fairness": 1.0}


@pytest.mark.parametrize("knob, value", [("queues", True), ("queues", False), ("threshold", True),
                                         ("queues", 1e400), ("queues", float("nan")), ("threshold", "inf")])
def test_numeric_knobs_take_numbers_only(knob, value):
    """JSON `true` was taken as 1 (bool is an int in Python); a huge or non-finite value overflowed."""
    from autosched.errors import InputError
    from autosched.policies import get_policy

    with pytest.raises(InputError, match=rf"knob '{knob}': .* (is not an integer|is not a number|is outside its range)"):
        get_policy("tiresias").space.validate({knob: value})
