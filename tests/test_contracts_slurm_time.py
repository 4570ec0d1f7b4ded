"""One parser of Slurm times (`autosched.trace.slurm.slurm_seconds`), worked by hand: a job's
Timelimit as sacct prints it reads the same in the trace loader and in the live agent's history,
and a zero limit is no limit (Slurm: "a time limit of zero requests that no time limit be
imposed"); the export layer's converter reads the same strings."""

from __future__ import annotations

import math

import pytest

from autosched.export import slurm as export_slurm
from autosched.live.history import read_jobs
from autosched.trace.io import load_trace
from autosched.trace.slurm import slurm_duration, slurm_seconds
from live_helpers import HEADER, PINNED_NOW, row

# text -> seconds, by hand; None: not a time
CASES = [
    ("0", 0.0),
    ("UNLIMITED", None),
    ("1-02:03:04", 86400 + 2 * 3600 + 3 * 60 + 4.0),  # 93784
    ("30", 30 * 60.0),  # a bare number is minutes
    ("05:00", 5 * 60.0),  # MM:SS
]


@pytest.mark.parametrize("text, seconds", CASES)
def test_slurm_seconds_by_hand(text, seconds):
    assert slurm_seconds(text) == seconds
    assert export_slurm.slurm_seconds is slurm_seconds  # one parser, not a copy


@pytest.mark.parametrize("text, seconds", CASES + [("00:00:00", 0.0), ("0-0", 0.0)])
def test_a_time_limit_of_zero_or_none_is_no_limit(text, seconds):
    limit = slurm_duration(text)
    if seconds:
        assert limit == seconds
    else:
        assert math.isnan(limit)


def test_the_trace_loader_and_the_live_history_read_the_same_limits(tmp_path):
    t = PINNED_NOW - 3600
    limits = ["0", "UNLIMITED", "1-02:03:04", "30", "05:00", "00:00:00", "0-0"]
    text = "\n".join([HEADER] + [row(str(i + 1), t + i, t + i, t + i + 60, 1, limit=lim)
                                 for i, lim in enumerate(limits)]) + "\n"
    jobs = read_jobs(text)
    path = tmp_path / "sacct.txt"
    path.write_text(text)
    trace, _ = load_trace(path, format="slurm")
    want = [math.nan, math.nan, 93784.0, 1800.0, 300.0, math.nan, math.nan]
    for got in (list(jobs.time_limit), trace.time_limit.tolist()):
        assert len(got) == len(want)
        assert all((math.isnan(g) and math.isnan(w)) or g == w for g, w in zip(got, want)), got
