"""What a hostile but fair new user found, case by case, through the real command line:
outputs that would destroy files, limits, drops in --json, and crashes. Each case ends in a result
or in one line ``error: ...`` with exit code 2, never a traceback. (The study cases are the
tuner's: tests/test_tune*.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from autosched.cli import app
from autosched.trace import Trace, load_trace, write_trace
from autosched.workload import get_model
from device_kit import own_null_device

runner = CliRunner()
DAY = 86400.0
SRC = Path(__file__).resolve().parents[1] / "src"


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
    line = error_line(cli("simulate", path, "--cluster", "2x8", "--strict"))
    assert rule in line and "is kept" not in line  # strict keeps no row of a bad file


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
    ("1e300", "error: --start '1e300' is beyond the bound on times (3,153,600,000 s, 100 years)"),
    ("-1d", "error: --start must be >= 0 (got '-1d'): times count from the trace's origin"),
])
def test_a_sample_starts_within_the_bounds_on_submit_times(model, tmp_path, start, message):
    """Was: 0 jobs "in [11574074074074075286836787544866678821745987056604175023500816899304269782...d)"."""
    assert error_line(cli("workload", "sample", model, "--start", start, "--out", tmp_path / "o.csv")) == message


@pytest.mark.parametrize("args, message", [
    (["workload", "evaluate", "{trace}", "--cluster", "2x8", "--history", "1d", "--horizon", "100000d"],
     "error: --horizon of 100,000 days is beyond the 366-day limit"),
    (["run", "{trace}", "--cluster", "2x8", "--period", "100000d"],
     "error: period of 100,000 days is beyond the 366-day limit of one workload sample"),
])
def test_horizons_of_evaluate_and_run_are_bounded_up_front(trace, args, message):
    assert error_line(cli(*[a.format(trace=trace) for a in args])) == message


def test_a_huge_horizon_fails_at_once(model, tmp_path):
    line = error_line(cli("workload", "sample", model, "--start", "0", "--horizon", "100000d", "--out", tmp_path / "o.csv"))
    assert line == "error: --horizon of 100,000 days is beyond the 366-day limit"
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


# ------------------------------------------------- round 3: the cases of the 338 hostile ones
#
# Each case is the command line a hostile user typed, and the one error line it must give now
# (before, it destroyed a file, ran out of memory, or printed a traceback).

@pytest.fixture()
def slurm_etc(tmp_path, monkeypatch):
    """A slurm.conf that includes a folder of files by wildcard and the agent's include file, with
    a gres.conf beside it: every file Slurm's commands read. No Slurm runs: each case must fail
    before sacct is called."""
    etc = tmp_path / "etc"
    (etc / "slurm.d").mkdir(parents=True)
    agent = tmp_path / "state" / "autosched.conf"
    agent.parent.mkdir()
    (etc / "slurm.conf").write_text(f"ClusterName=c\nInclude slurm.d/*.conf\ninclude {agent}  # the agent's\n")
    (etc / "slurm.d" / "nodes.conf").write_text("NodeName=n1 Gres=gpu:4\n")
    (etc / "gres.conf").write_text("Name=gpu File=/dev/nvidia[0-3]\n")
    agent.write_text("PriorityWeightAge=1000\n")
    monkeypatch.setenv("SLURM_CONF", str(etc / "slurm.conf"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-slurm-here"))  # a call to sacct would fail otherwise
    return etc, agent


@pytest.mark.parametrize("victim", ["etc/slurm.conf", "etc/slurm.d/nodes.conf", "state/autosched.conf",
                                    "etc/gres.conf"])
@pytest.mark.parametrize("through", ["env", "option"])
def test_slurm_history_never_writes_a_file_slurm_reads(tmp_path, slurm_etc, victim, through):
    """Was: `slurm history --out $SLURM_CONF` replaced the cluster's slurm.conf with a CSV."""
    etc, _ = slurm_etc
    files = [etc / "slurm.conf", etc / "slurm.d" / "nodes.conf", etc / "gres.conf", tmp_path / "state" / "autosched.conf"]
    before = {p: p.read_bytes() for p in files}
    conf = ["--slurm-conf", etc / "slurm.conf"] if through == "option" else []
    line = error_line(cli("slurm", "history", *conf, "--out", tmp_path / victim))
    assert line == f"error: {tmp_path / victim}: is an input of this command; refusing to overwrite it"
    assert {p: p.read_bytes() for p in files} == before


@pytest.mark.parametrize("args, message", [
    (["--out", "{tmp}/adir/"], "error: {tmp}/adir/: ends in '/', so it names a directory; give the name of the file to write"),
    (["--out", "{tmp}"], "error: {tmp}: is a directory, not a regular file; autosched writes only regular files"),
    (["--since", "-1d", "--out", "{tmp}/h.csv"], "error: --since must be > 0 (got '-1d')"),
    (["--since", "0", "--out", "{tmp}/h.csv"], "error: --since must be > 0 (got '0')"),
    (["--since", "3000000d", "--out", "{tmp}/h.csv"], "error: --since of 3,000,000 days is beyond the 366-day limit"),
    (["--timeout", "nan", "--out", "{tmp}/h.csv"], "error: --timeout 'nan' is not a length of time; use seconds or a "
     "number with a unit s, m, h, d or w (e.g. 3600, 12h, 21d)"),
    (["--timeout", "-5", "--out", "{tmp}/h.csv"], "error: --timeout must be > 0 (got '-5')"),
])
def test_slurm_history_options_are_checked_before_sacct(tmp_path, slurm_etc, args, message):
    """Was: `--out adir/` wrote a file named `adir`; `--since -1d` asked sacct for a start after
    the end."""
    line = error_line(cli("slurm", "history", *[a.format(tmp=tmp_path) for a in args]))
    assert line == message.format(tmp=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["etc", "state"]


@pytest.mark.parametrize("args, message", [
    # a length of time: > 0 and at most 366 days (`timeparse.MAX_LENGTH`), whatever the command
    (["workload", "fit", "{trace}", "--until", "2d", "--history", "400d", "--out", "{tmp}/fit.npz"],
     "error: --history of 400 days is beyond the 366-day limit"),
    (["workload", "sample", "{model}", "--start", "3d", "--horizon", "3000000d", "--out", "{tmp}/o.csv"],
     "error: --horizon of 3,000,000 days is beyond the 366-day limit"),
    (["workload", "evaluate", "{trace}", "--cluster", "2x8", "--history", "1d", "--horizon", "1d", "--step", "400d"],
     "error: --step of 400 days is beyond the 366-day limit"),
    (["workload", "evaluate", "{trace}", "--cluster", "2x8", "--history", "100000d"],
     "error: --history of 100,000 days is beyond the 366-day limit"),
    (["workload", "evaluate", "{trace}", "--cluster", "2x8", "--history", "1d", "--horizon", "1d", "--max-duration", "1e9"],
     "error: --max-duration of 11,574.1 days is beyond the 365-day limit"),
    # a time: in [0, 100 years], and with the trace at hand, within 366 days of its last submission
    (["workload", "fit", "{trace}", "--until", "3000000d", "--out", "{tmp}/fit.npz"],
     "error: --until '3000000d' is beyond the bound on times (3,153,600,000 s, 100 years)"),
    (["workload", "fit", "{trace}", "--until", "10000d", "--out", "{tmp}/fit.npz"],
     "error: --until of 10,000 days is {after} days after the last submission (at {last} days); the limit is 366 days"),
    (["workload", "evaluate", "{trace}", "--cluster", "2x8", "--history", "1d", "--horizon", "1d", "--first", "-1d"],
     "error: --first must be >= 0 (got '-1d'): times count from the trace's origin"),
    # and what a time option leads to: one origin per step, each fitting and simulating everything
    (["workload", "evaluate", "{trace}", "--cluster", "2x8", "--history", "1d", "--horizon", "1d", "--step", "1s"],
     "error: a step of 1 s gives {origins:,} origins in the trace, more than the limit of 1,000; use a longer step, "
     "or fewer origins between the first and the last"),
])
def test_every_time_option_is_bounded(tmp_path, trace, model, args, message):
    """Was: `workload fit --until 3000000d` on a 2-day trace grew to 23.9 GB (and `--until
    100000d` took 60 s and 1.3 GB): the model counted every hour up to --until."""
    jobs = load_trace(trace)[0]
    # one origin a second, from a day after the first job to a day before the last
    origins = int(np.floor((jobs.end - DAY) - (jobs.start + DAY) + 1e-9)) + 1
    line = error_line(cli(*[a.format(trace=trace, model=model, tmp=tmp_path) for a in args]))
    assert line == message.format(after=f"{(10000 * DAY - jobs.end) / DAY:,.6g}", last=f"{jobs.end / DAY:,.6g}",
                                  origins=origins)
    assert not (tmp_path / "fit.npz").exists() and not (tmp_path / "o.csv").exists()


def test_a_fit_window_far_past_its_jobs_is_refused_by_the_model_itself(trace):
    """The bound holds for every caller of `fit` (run, the agent, Python), not only the CLI."""
    from autosched.workload import WorkloadError

    history = load_trace(trace)[0]
    with pytest.raises(WorkloadError, match=r"^stat: the history window \[0, 400\] days reaches 39[67]\.\d+ days beyond "
                                            r"its jobs .*; the limit is 366 days$"):
        get_model("stat")().fit(history, 0.0, 400 * DAY)
    get_model("stat")().fit(history, 0.0, history.end + 366 * DAY)  # at the bound: fine


@pytest.mark.parametrize("args", [
    ["trace", "convert", "{trace}", "{tmp}/adir/"],
    ["workload", "fit", "{trace}", "--until", "2d", "--out", "{tmp}/adir/"],
    ["workload", "sample", "{model}", "--start", "3d", "--out", "{tmp}/adir/"],
])
def test_an_output_ending_in_a_slash_is_a_directory_not_a_file_name(tmp_path, trace, model, args):
    """Was: `--out adir/` wrote a file named `adir` (pathlib drops the slash)."""
    line = error_line(cli(*[a.format(trace=trace, model=model, tmp=tmp_path) for a in args]))
    assert line == f"error: {tmp_path}/adir/: ends in '/', so it names a directory; give the name of the file to write"
    assert not (tmp_path / "adir").exists()


HEAD = "job_id,submit_time,num_gpus,duration\n"


def _report(path) -> dict:
    res = runner.invoke(app, ["trace", "inspect", str(path), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["load_report"]


def test_an_unterminated_quote_is_an_error_naming_its_row(tmp_path):
    """Was: `read 1 rows, kept 1` for 29: the rest of the file became one cell of row 2."""
    path = tmp_path / "t.csv"
    path.write_text(HEAD + "j0,0,1,100\n" + 'j1,10,1,"100\n' + "".join(f"j{i},{10 * i},1,100\n" for i in range(2, 29)))
    line = error_line(cli("trace", "inspect", path))
    assert line == (f"error: {path}: line 3: a quote in this row is never closed, so the rest of the file (28 lines) "
                    "would be one cell; close it or remove it")
    # a quoted cell that spans lines and is closed is a cell like any other
    path.write_text("job_id,submit_time,num_gpus,duration,name\n" + 'j0,0,1,100,"two\nlines"\n' + "j1,5,1,100,x\n")
    assert _report(path)["kept"] == 2


def test_every_dropped_row_is_counted_under_its_own_column(tmp_path):
    """Were: a job id in 3 rows counted once (read 5 = kept 2 + dropped 2, and --json said 2); a
    bad duration reported under `submit_time`, the column where the rule was first broken."""
    path = tmp_path / "t.csv"
    path.write_text(HEAD + "a,0,1,10\na,1,1,10\na,2,1,10\nb,x,1,10\nc,4,1,y\nd,5,1,10\n")
    report = _report(path)
    assert (report["rows"], report["kept"], report["dropped"]) == (6, 2, 4)
    assert report["rows"] == report["kept"] + report["dropped"]
    assert [(d["column"], d["rule"], d["count"], d["examples"]) for d in report["drops"]] == [
        ("submit_time", "time is not a number", 1, ["line 5 (got 'x')"]),
        ("duration", "time is not a number", 1, ["line 6 (got 'y')"]),
        ("job_id", "job id appears more than once (the first row is kept)", 2, ["job 'a'", "job 'a'"]),
    ]


def test_a_header_naming_a_column_twice_is_an_error_on_line_1(tmp_path):
    """Was: the second `duration` column was ignored without a word."""
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_time,num_gpus,duration,Duration\na,0,1,10,99999\n")
    assert error_line(cli("trace", "inspect", path)) == \
        f"error: {path}: line 1 (header): column 'duration' appears twice (columns 4 and 5); name each column once"


@pytest.mark.parametrize("ids", [["a", None, None, "b"], [1, None, None, 2]])
def test_parquet_null_job_ids_are_dropped_as_in_the_converted_csv(tmp_path, ids):
    """Was: every null id kept from Parquet (as 'None', or as 'nan' beside '1.0' for integer ids),
    one of them after `trace convert` (the copies of 'None' were duplicates)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"job_id": ids, "submit_time": [0.0, 1.0, 2.0, 3.0], "num_gpus": [1, 1, 1, 1],
                             "duration": [5.0, 5.0, 5.0, 5.0]}), path)
    report = _report(path)
    assert (report["rows"], report["kept"]) == (4, 2)
    assert report["drops"] == [{"rule": "job id is empty", "column": "job_id", "count": 2,
                                "examples": ["a job submitted at 1 s", "a job submitted at 2 s"]}]
    res = cli("trace", "convert", path, tmp_path / "t.csv")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "t.csv").read_text() == f"{HEAD}{ids[0]},0,1,5\n{ids[3]},3,1,5\n"
    assert _report(tmp_path / "t.csv")["kept"] == 2


def test_a_parquet_job_id_that_is_a_list_is_one_line(tmp_path):
    """Was: a traceback (`TypeError: unhashable type: 'numpy.ndarray'`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"job_id": [["a"], ["b"]], "submit_time": [0.0, 1.0], "num_gpus": [1, 1],
                             "duration": [5.0, 5.0]}), path)
    assert error_line(cli("trace", "inspect", path)) == \
        f"error: {path}: column 'job_id' is not text (type list<element: string>; a cell holds one value)"


def _edited_model(src, dst, name, value):
    arrays = dict(np.load(src, allow_pickle=False))
    a = arrays[name].astype(np.float64) if isinstance(value, float) else arrays[name].copy()
    a[...] = value
    arrays[name] = a
    with open(dst, "wb") as f:
        np.savez_compressed(f, **arrays)
    return dst


@pytest.mark.parametrize("kind", ["stat", "replay", "hybrid"])
@pytest.mark.parametrize("array, value, rule", [
    ("d", float("nan"), "durations (s) are finite numbers in (0, 31,536,000]"),
    ("d", 0.0, "durations (s) are finite numbers in (0, 31,536,000]"),
    ("d", -5.0, "durations (s) are finite numbers in (0, 31,536,000]"),
    ("d", 1e300, "durations (s) are finite numbers in (0, 31,536,000]"),
    ("g", 0, "GPU counts are whole numbers in [1, 1,000,000]"),
    ("g", -1, "GPU counts are whole numbers in [1, 1,000,000]"),
    ("g", 10**12, "GPU counts are whole numbers in [1, 1,000,000]"),
    ("g", float("nan"), "GPU counts are whole numbers in [1, 1,000,000]"),
])
def test_a_model_file_with_values_past_the_bounds_is_refused_at_load(tmp_path, trace, kind, array, value, rule):
    """Were: `lam value too large`, `AssertionError` and `IndexError` tracebacks, or samples with
    1e300-second jobs and 10^12 GPUs (past the bounds every trace row keeps)."""
    good = tmp_path / f"{kind}.npz"
    get_model(kind)().fit(load_trace(trace)[0]).save(good)
    bad = _edited_model(good, tmp_path / "bad.npz", array, value)
    line = error_line(cli("workload", "sample", bad, "--start", "3d", "--horizon", "1d", "--out", tmp_path / "o.csv"))
    shown = f"{float(value):g}"
    assert line == f"error: {bad}: array '{array}' holds {shown} at index 0; {rule}"
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize("array, value, message", [
    ("beta", float("nan"), "array 'beta' holds nan at index 0; parameters are finite numbers"),
    ("bt", float("inf"), "array 'bt' holds inf at index 0; times (s) are finite numbers in [-3,153,600,000, 3,153,600,000]"),
    ("offset", -1.0, "array 'offset' holds -1 at index 0; offsets in a batch (s) are finite numbers in [0, 3,153,600,000]"),
    ("ptr", 7, "array 'ptr' does not split the 120 jobs into {batches} batches"),
    ("vc", 5, "array 'vc' holds code 5, but there are only 2 VC names"),
])
def test_a_stat_model_file_is_checked_as_a_whole(tmp_path, array, value, message):
    rng = np.random.default_rng(2)
    tr = Trace.from_columns({"job_id": [f"j{i}" for i in range(120)], "submit_time": np.sort(rng.uniform(0, 3 * DAY, 120)),
                             "num_gpus": rng.choice([1, 2], 120), "duration": rng.uniform(10, 1000, 120),
                             "vc": rng.choice(["x", "y"], 120)})
    fitted = get_model("stat")().fit(tr)
    fitted.save(tmp_path / "m.npz")
    bad = _edited_model(tmp_path / "m.npz", tmp_path / "bad.npz", array, value)
    line = error_line(cli("workload", "sample", bad, "--start", "3d", "--horizon", "1d", "--out", tmp_path / "o.csv"))
    assert line == f"error: {bad}: " + message.format(batches=len(fitted.bt))


def test_samples_keep_the_trace_bounds():
    """A model built in code from values past the bounds is refused at its sample rather than
    writing them into it; jitter never takes a year-long job past the bound on durations."""
    from autosched.trace.report import MAX_DURATION
    from autosched.workload import WorkloadError

    year = Trace.from_columns({"job_id": [f"j{i}" for i in range(200)], "submit_time": np.arange(200) * 600.0,
                               "num_gpus": np.ones(200, dtype=int), "duration": np.full(200, float(MAX_DURATION))})
    stat = get_model("stat")(duration_jitter=2.0).fit(year)
    sample = stat.sample(200 * 600.0, DAY, 0)
    assert len(sample) > 10 and sample.duration.max() == MAX_DURATION and sample.duration.min() < MAX_DURATION
    stat.g = np.full_like(stat.g, 10**12)  # as a model file edited by hand would have it
    with pytest.raises(WorkloadError, match=r"^stat-0: a sampled job breaks the trace bounds \(array 'num_gpus' holds "
                                            r"1e\+12 at index 0; GPU counts are whole numbers in \[1, 1,000,000\]\)$"):
        stat.sample(200 * 600.0, DAY, 0)


# ------------------------------------------------------------- standard output and error

MAIN = "from autosched.cli import main; main()"  # the installed `autosched` script's body


def _run(args, stdout=subprocess.PIPE, close=()):
    """`autosched ARGS` in a new process, with descriptors in `close` closed (as `2>&-` does)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))

    def closing():
        for fd in close:
            os.close(fd)

    return subprocess.run([sys.executable, "-c", MAIN, *map(str, args)], stdout=stdout, stderr=subprocess.PIPE,
                          preexec_fn=closing, env=env, timeout=300)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [
    ["trace", "convert", "{trace}", "-"],
    ["workload", "sample", "{model}", "--start", "3d", "--horizon", "1d", "--out", "-"],
    ["simulate", "{trace}", "--cluster", "2x8", "--json"],
    ["simulate", "{trace}", "--cluster", "2x8"],
])
def test_stdout_on_a_full_device_is_one_line(trace, model, args):
    """Was: an OSError traceback (`[Errno 28] No space left on device`)."""
    with open("/dev/full", "wb") as full:
        res = _run([a.format(trace=trace, model=model) for a in args], stdout=full)
    assert res.returncode == 2
    assert res.stderr.decode().splitlines()[-1] == "error: standard output: cannot write (No space left on device)"
    assert b"Traceback" not in res.stderr and res.stderr.count(b"error: ") == 1


def test_a_closed_stdout_is_one_line(trace):
    res = _run(["simulate", trace, "--cluster", "2x8", "--json"], close=(1,))
    assert (res.returncode, res.stderr) == (2, b"error: standard output: cannot write (it is closed)\n")


def test_a_message_lost_from_a_closed_stderr_is_an_exit_code(tmp_path, trace):
    """Was: with stderr closed (`2>&-`) the drop report was lost and the run said 0. Now a run
    that had something to say on stderr and could not exits 2; one with nothing to say, 0. And a
    file opened after stderr was closed is not written to as if it were stderr."""
    bad = tmp_path / "bad.csv"
    bad.write_text(HEAD + "a,0,1,100\nb,1,1,-5\n")
    res = _run(["simulate", bad, "--cluster", "2x8", "--json", "--jobs-out", tmp_path / "jobs.csv"], close=(2,))
    assert res.returncode == 2  # the drop report (1 row dropped) could not be shown
    assert json.loads(res.stdout)["dropped"]["dropped"] == 1
    assert (tmp_path / "jobs.csv").read_text().startswith("job_id,")  # no stderr text inside
    res = _run(["simulate", trace, "--cluster", "2x8", "--json"], close=(2,))
    assert res.returncode == 0 and json.loads(res.stdout)["jobs"] == 120


def test_a_reader_that_stops_early_is_not_an_error(trace):
    """`autosched trace convert t.csv - | head -2` ends quietly, as before."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", MAIN, "trace", "convert", str(trace), "-"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    first = proc.stdout.readline()
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert first == b"job_id,submit_time,num_gpus,duration\r\n"  # (CSV rows end in CRLF, RFC 4180)
    assert proc.returncode == 0 and b"Traceback" not in err and b"error" not in err
