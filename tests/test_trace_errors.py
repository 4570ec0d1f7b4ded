"""Malformed files give one clear line naming the file (and line/column where it applies);
unusable rows are dropped with a summary, or are an error in strict mode."""

from __future__ import annotations

import gzip
import re

import pytest

from autosched.trace import TraceError, load_trace
from conftest import FIXTURES

CANON = "job_id,submit_time,num_gpus,duration\n"


def _error(path, **kw) -> str:
    with pytest.raises(TraceError) as e:
        load_trace(path, **kw)
    message = str(e.value)
    assert "\n" not in message and message.startswith(str(path))
    return message


def test_missing_empty_and_directory(tmp_path):
    assert _error(tmp_path / "nope.csv") == f"{tmp_path / 'nope.csv'}: no such file"
    assert _error(tmp_path) == f"{tmp_path}: is a directory, not a trace file"
    (tmp_path / "empty.csv").write_text("")
    assert _error(tmp_path / "empty.csv") == f"{tmp_path / 'empty.csv'}: the file is empty"
    (tmp_path / "blank.csv").write_text("\n  \n")
    assert _error(tmp_path / "blank.csv").endswith(": the file is empty")


def test_binary_and_damaged_gzip(tmp_path):
    (tmp_path / "img.csv").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    assert "a binary file, not a text trace" in _error(tmp_path / "img.csv")
    (tmp_path / "noise.csv").write_bytes(bytes(range(128, 256)) * 8)
    assert "a binary file" in _error(tmp_path / "noise.csv")
    good = gzip.compress(b"job_id,submit_time,num_gpus,duration\n" + b"1,0,1,5\n" * 5000)
    (tmp_path / "cut.csv.gz").write_bytes(good[: len(good) // 2])
    assert "damaged gzip file" in _error(tmp_path / "cut.csv.gz")


def test_unknown_header(tmp_path):
    (tmp_path / "t.csv").write_text("when,what\n1,2\n")
    message = _error(tmp_path / "t.csv")
    assert "cannot tell the trace format from its first line 'when,what'" in message
    assert "give its format, one of: canonical, philly, itp, helios, philly-json, slurm, parquet" in message


def test_a_canonical_header_with_a_column_missing_or_unknown_is_named(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_time,duration\na,0,10\n")
    assert _error(path) == (
        f"{path}: line 1 (header): a canonical trace, but missing column(s) num_gpus; the canonical "
        "columns are job_id, submit_time, num_gpus, duration, user, vc, status, num_cpus, name, time_limit, "
        "account, partition, attained, age (give the format canonical to read it with unknown columns left out)")
    path.write_text("job_id,submit_time,num_gpus,duration,gpu_type\na,0,1,10,v100\n")
    assert "a canonical trace, but column(s) gpu_type not in it;" in _error(path)
    # read as canonical, the unknown column is left out with a note, not in silence
    trace, report = load_trace(path, format="canonical")
    assert trace.job_id.tolist() == ["a"]
    assert report.notes == ["column(s) not in the canonical format, not read: gpu_type"]
    assert "note: column(s) not in the canonical format, not read: gpu_type" in report.summary()


def test_detected_format_with_missing_columns(tmp_path):
    (tmp_path / "t.txt").write_text("JobID|User|Submit\n1|a|2024-01-01T00:00:00\n")
    assert _error(tmp_path / "t.txt") == (
        f"{tmp_path / 't.txt'}: line 1 (header): missing column(s) start, end, alloctres; found jobid, user, submit")


@pytest.mark.parametrize("text, where", [
    # column 16 is the '"' of "user", where a ',' was due
    ('[{"jobid": "a", "attempts": []},\n {"jobid": "b" "user": "x"}]', "line 2, column 16: bad JSON: Expecting ',' delimiter"),
    ('[{"jobid": "a"}\n {"jobid": "b"}]', "line 2, column 2: bad JSON: expected ',' or ']' after a job"),
    ('[{"jobid": "a"},\n]', "line 2, column 1: bad JSON: Expecting value"),
    ('[{"jobid": "a"}] trailing', "line 1, column 18: bad JSON: extra data after the list of jobs"),
    ('[{"jobid": "a"}', "line 1, column 16: bad JSON: expected ',' or ']' after a job"),
])
def test_bad_json_names_line_and_column(tmp_path, text, where):
    path = tmp_path / "log.json"
    path.write_text(text)
    assert _error(path) == f"{path}: {where}"


def test_json_that_is_not_a_list(tmp_path):
    path = tmp_path / "log.json"
    path.write_text('{"jobid": "a"}')
    assert _error(path, format="philly-json") == f"{path}: line 1, column 1: expected a JSON list of jobs ('[')"


def test_bad_rows_are_dropped_with_a_summary(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(CANON + "a,0,1,10\nb,x,1,10\nc,5,0,10\nd,6,1,-3\ne,7,1\nf,8,2.5,10\ng,9,1,10\n")
    trace, report = load_trace(path)
    assert trace.job_id.tolist() == ["a", "g"]
    assert (report.rows, report.kept, report.dropped) == (7, 2, 5)
    assert {d.rule: d.examples for d in report.drops.values()} == {
        "time is not a number": ["line 3 (got 'x')"],
        "job requests no GPUs (must be >= 1)": ["line 4 (got '0')"],
        "duration is not positive": ["line 5 (got '-3')"],
        "row has 3 cells, header has 4": ["line 6"],
        "GPU count is not a whole number": ["line 7 (got '2.5')"],
    }
    summary = report.summary()
    assert summary.startswith(f"{path}: read 7 rows (canonical), kept 2, dropped 5:")
    assert "1 × column 'num_gpus': job requests no GPUs (must be >= 1); e.g. line 4 (got '0')" in summary


def test_history_cells_are_checked_where_the_file_has_them(tmp_path):
    # the file's own lines, not positions after sorting; an empty cell is no history (0)
    path = tmp_path / "t.csv"
    path.write_text("job_id,submit_time,num_gpus,duration,attained,age\n"
                    "a,100,1,10,0,5\nb,x,1,10,0,0\nc,50,1,10,,\nd,10,1,100,-1,0\ne,20,1,10,3,zz\n")
    trace, report = load_trace(path)
    assert trace.job_id.tolist() == ["c", "a"]
    assert trace.attained.tolist() == [0.0, 0.0] and trace.age.tolist() == [0.0, 5.0]
    assert {(d.column, d.rule): d.examples for d in report.drops.values()} == {
        ("submit_time", "time is not a number"): ["line 3 (got 'x')"],
        ("attained", "not a number of seconds >= 0 (empty = 0)"): ["line 5 (got '-1')"],
        ("age", "not a number of seconds >= 0 (empty = 0)"): ["line 6 (got 'zz')"],
    }
    strict = tmp_path / "strict.csv"
    strict.write_text("job_id,submit_time,num_gpus,duration,attained\na,100,1,10,0\nd,10,1,100,-1\n")
    assert "line 3, column 'attained'" in _error(strict, strict=True)
    clean = tmp_path / "clean.csv"  # every cell a number: read at array speed, the same values
    clean.write_text("job_id,submit_time,num_gpus,duration,attained,age\na,100,1,10,0,5\nc,50,1,10,7.5,0\n")
    fast, _ = load_trace(clean)
    assert fast.attained.tolist() == [7.5, 0.0] and fast.age.tolist() == [0.0, 5.0]


def test_a_row_breaking_two_rules_is_counted_once(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(CANON + "a,x,0,10\nb,1,1,1\n")
    _, report = load_trace(path)
    assert (report.rows, report.kept, report.dropped) == (2, 1, 1)
    assert [d.rule for d in report.drops.values()] == ["time is not a number"]


def test_itp_short_row_is_dropped_not_a_crash(tmp_path):
    path = tmp_path / "itp.csv"
    path.write_text("job_id,submission_time,duration,num_gpu\nu1,10,100,8\nu2,20\n")
    trace, report = load_trace(path)
    assert trace.job_id.tolist() == ["u1"]
    assert [d.examples for d in report.drops.values()] == [["line 3"]]


@pytest.mark.parametrize("name, message", [
    ("philly_cluster_job_log.json",
     "line 30 (jobid job_never_ran), column 'attempts': job has no scheduling attempt (it never ran)"),
    ("helios_cluster_log.csv", "line 5, column 'gpu_num': job requests no GPUs (must be >= 1) (got '0')"),
    ("slurm_sacct.txt", "line 14, column 'Start': job never started (Start is Unknown/None) (got 'Unknown')"),
])
def test_strict_mode_raises_on_the_first_bad_row(name, message):
    path = FIXTURES / name
    with pytest.raises(TraceError, match=re.escape(f"{path}: {message}")):
        load_trace(path, strict=True)


def test_strict_mode_passes_a_clean_file(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(CANON + "a,0,1,10\n")
    trace, report = load_trace(path, strict=True)
    assert len(trace) == 1 and report.dropped == 0


def test_parquet_is_recognised_by_its_bytes_and_a_fake_one_is_refused(tmp_path):
    from autosched.trace import write_trace

    trace, _ = load_trace(FIXTURES / "helios_cluster_log.csv")
    hidden = tmp_path / "jobs.csv"  # Parquet under a CSV name
    write_trace(trace, tmp_path / "jobs.parquet")
    (tmp_path / "jobs.parquet").rename(hidden)
    back, report = load_trace(hidden)
    assert report.format == "parquet" and back.equals(trace)
    fake = tmp_path / "fake.parquet"
    fake.write_text(CANON + "a,0,1,10\n")
    assert _error(fake).startswith(f"{fake}: not a readable Parquet file")


def test_a_csv_in_latin1_is_not_called_binary(tmp_path):
    """One Latin-1 byte in a small CSV was "a binary file ... (for Parquet, name it .parquet)"."""
    from autosched.trace import load_trace
    from autosched.trace.table import TraceError

    p = tmp_path / "t.csv"
    p.write_bytes(b"job_id,submit_time,num_gpus,duration,user\na,0,1,10,r\xe9sum\xe9\n")
    # the header is 42 bytes with its newline, then "a,0,1,10,r": 0xe9 is byte 52
    with pytest.raises(TraceError, match=r"t\.csv: not UTF-8 text \(byte 0xe9 at offset 52\); "
                                         r"save it as UTF-8$"):
        load_trace(p)
