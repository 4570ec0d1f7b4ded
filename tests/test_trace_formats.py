"""Each loader on a small hand-written fixture; every expected value worked out by hand from the
fixture's rows (see the comments)."""

from __future__ import annotations

import gzip
import shutil

import numpy as np
import pytest

from autosched.trace import TraceError, load_trace
from autosched.trace.formats import detect_format
from conftest import FIXTURES


def test_philly_json_attempts_are_summed_and_gpus_are_the_largest_attempt():
    trace, report = load_trace(FIXTURES / "philly_cluster_job_log.json")
    assert report.format == "philly-json"
    # sorted by submit; times from 00:00 of 2017-10-06, the first submit's day
    assert trace.job_id.tolist() == ["job_earliest", "application_1506638472019_14199", "job_two_nodes",
                                     "job_shrunk_retry"]
    # 23:59:59 of day 0; 01:11:39 and 02:00:00 of day 1; 09:59:00 of day 2
    assert trace.submit_time.tolist() == [86399, 86400 + 4299, 86400 + 7200, 2 * 86400 + 35940]
    # one GPU; 8 GPUs on one server; 2 servers x 8; attempts of 4 then 2 GPUs -> 4
    assert trace.num_gpus.tolist() == [1, 8, 16, 4]
    # 10 s; 74 s + (2 days 5:39:42 = 193,182 s); 1 h; 600 s + 1,800 s (the 10-min gap is not run time)
    assert trace.duration.tolist() == [10, 74 + 193182, 3600, 2400]
    assert trace.status.tolist() == ["Pass", "Pass", "Killed", "Failed"]
    assert trace.user.tolist() == ["u5", "ce2f4c", "u2", "u3"]
    assert trace.vc.tolist() == ["103959", "ee9e8c", "11cb48", "6214e9"]
    assert (report.rows, report.kept, report.dropped) == (8, 4, 4)
    rules = {d.rule: d.examples for d in report.drops.values()}
    assert rules["job has no scheduling attempt (it never ran)"] == ["line 30 (jobid job_never_ran)"]
    assert rules["job was still running when the log was cut (last attempt has no end_time)"] == [
        "line 31 (jobid job_still_running)"]
    assert rules["an attempt has no usable start_time/end_time (logging error)"] == [
        "line 33 (jobid job_logging_error) (got 'attempt 1: None')"]
    assert rules["job requests no GPUs (must be >= 1)"] == ["line 38 (jobid job_no_gpus) (got 0)"]
    assert any("different GPU counts" in n and n.startswith("1 job") for n in report.notes)


def test_helios_cluster_log():
    trace, report = load_trace(FIXTURES / "helios_cluster_log.csv")
    assert report.format == "helios"
    assert trace.job_id.tolist() == ["1425518", "1425511", "1425512", "1425513", "1425515"]
    # from 2020-06-08 00:00: 23:00:00 on day 0; 18:41:01, 18:41:27, 18:41:28, 19:00:00 on day 1
    assert trace.submit_time.tolist() == [82800, 86400 + 67261, 86400 + 67287, 86400 + 67288, 86400 + 68400]
    assert trace.num_gpus.tolist() == [1, 1, 4, 1, 16]
    assert trace.duration.tolist() == [3600, 36848, 249, 675233, 7200]
    assert trace.num_cpus.tolist() == [2, 1, 16, 1, 64]
    assert trace.status.tolist() == ["TIMEOUT", "COMPLETED", "FAILED", "CANCELLED", "COMPLETED"]
    assert trace.vc.tolist() == ["vcJkd", "vcJkd", "vchbv", "vcpDC", "vchbv"]
    assert trace.gpu_seconds() == 3600 + 36848 + 4 * 249 + 675233 + 16 * 7200
    assert (report.rows, report.kept) == (8, 5)
    drops = {d.column: (d.rule, d.examples) for d in report.drops.values()}
    assert drops == {
        "gpu_num": ("job requests no GPUs (must be >= 1)", ["line 5 (got '0')"]),
        "duration": ("duration is not positive", ["line 7 (got '0')"]),
        "submit_time": ("time is not of the form YYYY-MM-DD HH:MM:SS", ["line 8 (got '06/09/2020 19:20')"]),
    }


def test_helios_without_duration_column_uses_end_minus_start(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("job_id,vc,gpu_num,submit_time,start_time,end_time\n"
                    "7,vcA,2,2020-06-09 10:00:00,2020-06-09 10:01:00,2020-06-09 11:01:30\n")
    trace, _ = load_trace(path)
    assert trace.duration.tolist() == [3630] and trace.submit_time.tolist() == [36000]


def test_slurm_steps_are_folded_into_their_jobs():
    trace, report = load_trace(FIXTURES / "slurm_sacct.txt")
    assert report.format == "slurm"
    assert trace.job_id.tolist() == ["999", "1001", "1002", "1003", "1004", "2000_1", "2000_2"]
    # from 2024-01-01 00:00: 23:59:00 on day 0, then 03:04:05, 04:00, 05:00, 06:00, 08:00, 08:00 on day 1
    assert trace.submit_time.tolist() == [86340, 86400 + 11045, 86400 + 14400, 86400 + 18000, 86400 + 21600,
                                          86400 + 28800, 86400 + 28800]
    # 1002: gres/gpu=16 wins over its typed twin (not 32); 1003: typed only, a100=1 + v100=2;
    # 1004: the job row lists no GPU, its step 1004.0 has gres/gpu=1
    assert trace.num_gpus.tolist() == [1, 2, 16, 3, 1, 1, 1]
    # End - Start of the job's own row (not of its steps: 1001.0 ran 7,180 s)
    assert trace.duration.tolist() == [30, 7200, 1800, 60, 3600, 600, 1200]
    assert trace.status.tolist() == ["COMPLETED", "COMPLETED", "FAILED", "CANCELLED", "COMPLETED", "COMPLETED",
                                     "COMPLETED"]
    assert trace.user.tolist() == ["alice", "alice", "bob", "carol", "dave", "erin", "erin"]
    assert trace.vc.tolist() == ["gpu", "gpu", "a100", "a100", "gpu", "gpu", "gpu"]
    assert trace.name.tolist() == ["early", "train", "big", "typed", "stepgpu", "arr", "arr"]
    assert trace.num_cpus.tolist() == [1, 8, 64, 4, 4, 2, 2]
    # 11 jobs after folding 7 step rows; 2000_[3-5] and 1005 never started, 1006 runs, 1007 is CPU-only
    assert (report.rows, report.kept, report.dropped) == (11, 7, 4)
    drops = {d.rule: (d.column, d.count, d.examples) for d in report.drops.values()}
    assert drops == {
        "job never started (Start is Unknown/None)": ("Start", 2, ["line 14 (got 'Unknown')", "line 15 (got 'None')"]),
        "job has not ended (End is Unknown; still running?)": ("End", 1, ["line 16 (got 'Unknown')"]),
        "job has no GPUs (no gres/gpu in AllocTRES)": ("AllocTRES", 1,
                                                       ["line 17 (got 'billing=16,cpu=16,mem=32G,node=1')"]),
    }
    assert "7 job-step row(s)" in report.notes[0]


def test_slurm_parsable_with_trailing_bar_and_orphan_step(tmp_path):
    path = tmp_path / "sacct.txt"
    path.write_text("JobID|Submit|Start|End|State|AllocTRES|\n"
                    "5|2024-03-01T00:00:10|2024-03-01T00:00:20|2024-03-01T00:01:20|COMPLETED|gres/gpu=4|\n"
                    "6.batch|2024-03-01T00:00:10|2024-03-01T00:00:20|2024-03-01T00:01:20|COMPLETED|gres/gpu=1|\n"
                    "5|2024-03-01T00:00:10|2024-03-01T00:02:00|2024-03-01T00:03:00|COMPLETED|gres/gpu=8|\n")
    trace, report = load_trace(path)
    # the requeued job 5 is listed twice: the last row is kept
    assert trace.job_id.tolist() == ["5"] and trace.num_gpus.tolist() == [8] and trace.duration.tolist() == [60]
    assert [(d.column, d.rule, d.examples) for d in report.drops.values()] == [
        ("JobID", "job step without its job's own row", ["line 3 (job 6)"])]
    assert any("listed more than once" in n for n in report.notes)


@pytest.mark.parametrize("name, fmt", [("philly_cluster_job_log.json", "philly-json"),
                                        ("helios_cluster_log.csv", "helios"), ("slurm_sacct.txt", "slurm")])
def test_detection_and_gzip(tmp_path, name, fmt):
    plain = FIXTURES / name
    assert detect_format(plain, plain.read_text()).name == fmt
    packed = tmp_path / (name + ".gz")
    with open(plain, "rb") as src, gzip.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    a, _ = load_trace(plain)
    b, report = load_trace(packed)
    assert report.format == fmt and a.equals(b)


def test_format_override_beats_detection(tmp_path):
    # a Helios file with a made-up extra column still loads; forcing another format names what is missing
    path = tmp_path / "x.csv"
    shutil.copy(FIXTURES / "helios_cluster_log.csv", path)
    with pytest.raises(TraceError, match=r"x.csv: line 1 \(header\): missing column\(s\) submission_time, num_gpu"):
        load_trace(path, format="itp")
    with pytest.raises(TraceError, match="unknown trace format 'nope'"):
        load_trace(path, format="nope")


def test_canonical_optional_columns_are_not_mixed_up(tmp_path):
    # regression: a num_cpus value once leaked into the other optional columns
    path = tmp_path / "c.csv"
    path.write_text("job_id,submit_time,num_gpus,duration,user,vc,num_cpus\na,0,1,5,ann,v1,4\nb,1,2,6,bob,v2,\n")
    trace, _ = load_trace(path)
    assert trace.user.tolist() == ["ann", "bob"] and trace.vc.tolist() == ["v1", "v2"]
    assert trace.num_cpus.tolist() == [4, 0]
    assert np.array_equal(trace.num_gpus, [1, 2])


def test_slurm_cpus_are_what_a_job_asked_for(tmp_path):
    # DefCpuPerGPU=1: 1101 asked for GPUs alone (ReqTRES cpu=1) and was given 2; 1102 asked for
    # 6 CPUs; 1103's request lists no CPU count, so its allocation stands
    path = tmp_path / "sacct.txt"
    path.write_text("JobID|Submit|Start|End|AllocCPUS|ReqTRES|AllocTRES\n"
                    "1101|2024-01-01T00:00:00|2024-01-01T00:00:10|2024-01-01T00:01:10|2|"
                    "billing=1,cpu=1,gres/gpu=2,node=1|cpu=2,gres/gpu=2,node=1\n"
                    "1102|2024-01-01T00:00:01|2024-01-01T00:00:10|2024-01-01T00:01:10|6|"
                    "cpu=6,gres/gpu=1|cpu=6,gres/gpu=1\n"
                    "1103|2024-01-01T00:00:02|2024-01-01T00:00:10|2024-01-01T00:01:10|4|"
                    "gres/gpu=4|cpu=4,gres/gpu=4\n")
    trace, _ = load_trace(path)
    assert trace.num_cpus.tolist() == [1, 6, 4]
