"""The optional trace columns time_limit (s) and account: read from sacct and canonical files,
written back unchanged."""

import math

import numpy as np
import pytest

from autosched.trace.io import load_trace, write_trace
from autosched.trace.slurm import slurm_duration

SACCT = ("JobID|User|Account|Partition|Submit|Start|End|State|Timelimit|AllocTRES\n"
         "1|alice|physics|gpu|2024-03-01T00:00:00|2024-03-01T00:00:05|2024-03-01T00:01:05|COMPLETED|05:00|gres/gpu=2\n"
         "1.batch|||gpu|2024-03-01T00:00:05|2024-03-01T00:00:05|2024-03-01T00:01:05|COMPLETED||gres/gpu=2\n"
         "2|bob|chemistry|gpu|2024-03-01T00:00:10|2024-03-01T00:00:20|2024-03-01T00:02:20|TIMEOUT|00:02:00|gres/gpu=8\n"
         "3|carol|physics|gpu|2024-03-01T00:00:30|2024-03-01T00:00:30|2024-03-01T00:00:40|COMPLETED|UNLIMITED|gres/gpu=1\n"
         "4|carol|physics|gpu|2024-03-01T00:00:31|2024-03-01T00:00:31|2024-03-01T00:00:41|COMPLETED|1-02:03:04|gres/gpu=1\n"
         "5|carol|physics|gpu|2024-03-01T00:00:32|2024-03-01T00:00:32|2024-03-01T00:00:42|COMPLETED|Partition_Limit|gres/gpu=1\n")


@pytest.mark.parametrize("text, seconds", [
    ("5", 300), ("05:30", 330), ("01:00:00", 3600), ("2-03", 2 * 86400 + 3 * 3600),
    ("2-03:04", 2 * 86400 + 3 * 3600 + 240), ("1-00:00:01", 86401),
])
def test_slurm_time_limit_formats(text, seconds):
    assert slurm_duration(text) == seconds


@pytest.mark.parametrize("text", ["UNLIMITED", "Partition_Limit", "", "  ", "0", "1:2:3:4", "abc", "-5",
                                  "36501-00:00:00"])  # beyond 100 years: no limit
def test_no_limit_is_nan(text):
    assert math.isnan(slurm_duration(text))


def test_sacct_time_limit_and_account(tmp_path):
    path = tmp_path / "sacct.txt"
    path.write_text(SACCT)
    trace, _ = load_trace(path)
    lim = trace.time_limit.tolist()
    assert lim[:2] == [300.0, 120.0] and math.isnan(lim[2]) and lim[3] == 93784.0 and math.isnan(lim[4])
    assert trace.account.tolist() == ["physics", "chemistry", "physics", "physics", "physics"]


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".parquet"])
def test_time_limit_and_account_round_trip(tmp_path, suffix):
    src = tmp_path / "sacct.txt"
    src.write_text(SACCT)
    trace, _ = load_trace(src)
    out = tmp_path / f"t{suffix}"
    write_trace(trace, out)
    back, report = load_trace(out)
    np.testing.assert_array_equal(back.time_limit, trace.time_limit)  # treats NaN == NaN
    assert back.account.tolist() == trace.account.tolist()
    assert report.dropped == 0


def test_canonical_time_limit_cells(tmp_path):
    path = tmp_path / "t.csv"
    # e: 1e300 s was kept and written back by `trace limits` as a 301-digit integer; f: the bound
    path.write_text("job_id,submit_time,num_gpus,duration,time_limit\n"
                    "a,0,1,10,60\nb,1,1,10,\nc,2,1,10,-3\nd,3,1,10,soon\ne,4,1,10,1e300\n"
                    "f,5,1,10,3153600000\n")
    trace, report = load_trace(path)
    assert trace.job_id.tolist() == ["a", "b", "f"]
    assert trace.time_limit[0] == 60 and math.isnan(trace.time_limit[1])
    assert report.dropped == 3
    assert {d.column for d in report.drops.values()} == {"time_limit"}


def test_parquet_time_limit_beyond_the_bound_is_dropped(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"job_id": ["a", "b"], "submit_time": [0.0, 1.0], "num_gpus": [1, 1],
                             "duration": [10.0, 10.0], "time_limit": [60.0, 1e300]}), path)
    trace, report = load_trace(path)
    assert trace.job_id.tolist() == ["a"] and report.dropped == 1
    assert [d.rule for d in report.drops.values()] == [
        "time limit is not a number of seconds in (0, 3,153,600,000] (NaN = none)"]
