"""Canonical CSV and Parquet: writing a trace and reading it back gives the same trace."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autosched.trace import Trace, load_trace, write_trace

# text a real trace may hold: commas, quotes, spaces, non-ASCII; not NUL or line breaks
TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=8)


@st.composite
def traces(draw) -> Trace:
    n = draw(st.integers(1, 12))
    cols = {
        "job_id": draw(st.lists(TEXT, min_size=n, max_size=n)),
        "submit_time": draw(st.lists(st.floats(-1e9, 1e9, allow_nan=False), min_size=n, max_size=n)),
        "num_gpus": draw(st.lists(st.integers(1, 1024), min_size=n, max_size=n)),
        "duration": draw(st.lists(st.floats(1e-3, 1e8), min_size=n, max_size=n)),
    }
    for name in ("user", "vc", "status", "name"):
        if draw(st.booleans()):
            cols[name] = draw(st.lists(TEXT, min_size=n, max_size=n))
    if draw(st.booleans()):
        cols["num_cpus"] = draw(st.lists(st.integers(0, 512), min_size=n, max_size=n))
    return Trace.from_columns(cols)


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".parquet"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=traces())
def test_write_then_read_gives_the_same_trace(suffix, trace):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"t{suffix}"
        write_trace(trace, path)
        back, report = load_trace(path, strict=True)
    assert report.dropped == 0
    assert back.equals(trace), (trace.columns(), back.columns())


def test_equals_sees_a_changed_value():
    a = Trace.from_columns({"job_id": ["x", "y"], "submit_time": [0, 1], "num_gpus": [1, 2], "duration": [5, 6]})
    assert a.equals(a.replace(duration=np.array([5.0, 6.0])))
    assert not a.equals(a.replace(duration=np.array([5.0, 6.5])))
    assert not a.equals(a.replace(vc=np.array(["p", "q"], dtype=object)))


def test_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    import autosched.trace.io as trace_io

    def half_write(trace, path, compress=False):
        path.write_text("job_id,submit")
        raise OSError("disk full")

    monkeypatch.setattr(trace_io, "_write_csv", half_write)
    path = tmp_path / "t.csv"
    path.write_text("old\n")
    one = Trace.from_columns({"job_id": ["x"], "submit_time": [0], "num_gpus": [1], "duration": [1]})
    with pytest.raises(OSError, match="disk full"):
        write_trace(one, path)
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["t.csv"]
