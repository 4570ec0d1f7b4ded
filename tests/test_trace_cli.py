"""`autosched trace inspect` and `autosched trace convert` through typer's CliRunner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autosched.cli import app
from autosched.trace import load_trace
from conftest import FIXTURES

runner = CliRunner()  # click 8.2+: result.stdout and result.stderr are kept apart


def test_inspect_json_is_one_object_with_the_drop_report():
    result = runner.invoke(app, ["trace", "inspect", str(FIXTURES / "slurm_sacct.txt"), "--json", "--cluster", "2x8"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["jobs"], out["cluster_gpus"]) == (7, 16)
    assert out["gpu_hours"] == pytest.approx(48810 / 3600)
    # span 2024-01-01T23:59 -> 2024-01-02T08:00 = 28,860 s; the 16-GPU job fits 2 nodes of 8
    assert out["offered_load"] == pytest.approx(48810 / (16 * 28860))
    assert out["load_report"]["dropped"] == 4 and out["load_report"]["format"] == "slurm"
    assert {d["column"] for d in out["load_report"]["drops"]} == {"Start", "End", "AllocTRES"}


def test_inspect_states_how_jobs_are_sized_in_cpus(tmp_path):
    # sacct gives every kept job its CPUs: none is sized by the cluster's rule
    result = runner.invoke(app, ["trace", "inspect", str(FIXTURES / "slurm_sacct.txt"), "--json", "--cluster", "2x8"])
    cpus = json.loads(result.stdout)["cpus"]
    assert (cpus["jobs_with_cpus"], cpus["jobs_given_cpus"]) == (7, 0)
    # a trace without CPU counts: 40 CPUs and 8 GPUs a node give each job 5 per GPU
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,num_gpus,duration\na,0,1,10\nb,5,8,10\n")
    result = runner.invoke(app, ["trace", "inspect", str(trace), "--cluster", "2x8,CPUs=40"])
    assert result.exit_code == 0, result.output
    assert "none in the trace: each job gets 5 CPU(s) per GPU (the node shape: 40 CPUs, 8 GPUs)" in result.stdout
    result = runner.invoke(app, ["trace", "inspect", str(trace), "--json", "--cluster", "2x8,DefCpuPerGPU=0"])
    cpus = json.loads(result.stdout)["cpus"]
    assert (cpus["jobs_given_cpus"], cpus["cpus_per_gpu"]) == (2, 0.0) and cpus["rule"].startswith("one CPU per node")


def test_inspect_with_a_too_small_cluster_drops_and_reports():
    result = runner.invoke(app, ["trace", "inspect", str(FIXTURES / "slurm_sacct.txt"), "--json", "--cluster", "1x8"])
    out = json.loads(result.stdout)
    assert out["jobs"] == 6  # job 1002 (16 GPUs) cannot run on 8
    assert any(d["rule"] == "job needs more GPUs than its partition has (8)" and d["examples"] == ["job '1002' (got 16)"]
               for d in out["load_report"]["drops"])


def test_inspect_table_output():
    result = runner.invoke(app, ["trace", "inspect", str(FIXTURES / "helios_cluster_log.csv")])
    assert result.exit_code == 0, result.output
    text = result.stdout
    for piece in ("(helios)", "GPUs per job", "duration", "per virtual cluster", "vchbv",
                  "read 8 rows (helios), kept 5, dropped 3", "offered load"):
        assert piece in text


@pytest.mark.parametrize("args, message", [
    (["trace", "inspect", "/no/such/trace.csv"], "error: /no/such/trace.csv: no such file"),
    (["trace", "inspect", "{fix}/helios_cluster_log.csv", "--cluster", "banana"],
     "error: cluster spec 'banana' is neither NODESxGPUS"),
    (["trace", "inspect", "{fix}/helios_cluster_log.csv", "--strict"],
     "error: {fix}/helios_cluster_log.csv: line 5, column 'gpu_num': job requests no GPUs (must be >= 1) (got '0')"),
    (["trace", "inspect", "{fix}/helios_cluster_log.csv", "--format", "slurm"],
     "error: {fix}/helios_cluster_log.csv: line 1 (header): missing column(s)"),
    (["trace", "convert", "{fix}/helios_cluster_log.csv", "out.txt"], "error: out.txt: the output name must end in"),
])
def test_bad_input_exits_2_with_one_line(args, message):
    args = [a.replace("{fix}", str(FIXTURES)) for a in args]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message.replace("{fix}", str(FIXTURES)) in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_bad_json_names_line_and_column(tmp_path):
    path = tmp_path / "log.json"
    path.write_text('[\n  {"jobid": "a",, "attempts": []}\n]')
    result = runner.invoke(app, ["trace", "inspect", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {path}: line 2, column 17: bad JSON: Expecting property name enclosed in double quotes"


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_convert_to_canonical(tmp_path, suffix):
    out = tmp_path / f"slurm{suffix}"
    result = runner.invoke(app, ["trace", "convert", str(FIXTURES / "slurm_sacct.txt"), str(out)])
    assert result.exit_code == 0, result.stderr
    assert f"wrote 7 jobs to {out}" in result.stderr and "dropped 4" in result.stderr
    original, _ = load_trace(FIXTURES / "slurm_sacct.txt")
    back, report = load_trace(out)
    assert report.format == ("canonical" if suffix == ".csv" else "parquet")
    assert back.equals(original)


@pytest.mark.parametrize("command", ["convert", "limits"])
def test_no_job_to_write_fails_and_writes_nothing(tmp_path, command):
    empty, dropped = tmp_path / "empty.csv", tmp_path / "dropped.csv"
    empty.write_text("job_id,submit_time,num_gpus,duration\n")
    dropped.write_text("job_id,submit_time,num_gpus,duration\na,0,0,10\n")
    for path, why in ((empty, "no rows"), (dropped, "every row was dropped")):
        out = tmp_path / "out.csv"
        args = [str(path), str(out)] if command == "convert" else [str(path), "--out", str(out)]
        result = runner.invoke(app, ["trace", command, *args])
        assert result.exit_code == 2, result.stderr
        assert f"error: {path}: no jobs to write ({why}); nothing written" in result.stderr
        assert not out.exists()
    assert "dropped 1" in result.stderr  # what was dropped is said first
