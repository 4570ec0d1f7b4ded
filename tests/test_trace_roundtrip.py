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
        # within the loaders' bounds (docs/traces.md): unique ids that are not blank, submit >= 0,
        # duration <= a year
        "job_id": draw(st.lists(TEXT.filter(str.strip), min_size=n, max_size=n, unique=True)),
        "submit_time": draw(st.lists(st.floats(0, 1e9, allow_nan=False), min_size=n, max_size=n)),
        "num_gpus": draw(st.lists(st.integers(1, 1024), min_size=n, max_size=n)),
        "duration": draw(st.lists(st.floats(1e-3, 3e7), min_size=n, max_size=n)),
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


# Cells numpy and Python might read differently: signs, exponents, spaces, underscores,
# hex, non-ASCII digits, special values and junk.
NUMBERISH = st.one_of(
    st.integers(-5, 5000).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from([" 12 ", "+3", "1e3", "1_000", "0x10", "٣", "nan", "-inf", "", " ", "2.0", "2.5",
                     "1e400", "0", "-0", "abc"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cells=st.lists(st.tuples(NUMBERISH, NUMBERISH, NUMBERISH), min_size=1, max_size=6),
       cpus=st.one_of(st.none(), st.lists(st.sampled_from(["4", "", "x", "2.0", "-1", "inf", "nan", "1e300", "2.7"]), min_size=6, max_size=6)))
def test_the_array_fast_path_keeps_and_drops_exactly_what_the_row_parser_does(monkeypatch, cells, cpus):
    """Canonical CSV is read column-wise when every row is clean; the row-by-row parser is the
    reference (it names each dropped row), so both must agree on every input."""
    import autosched.trace.formats as formats

    header = "job_id,submit_time,num_gpus,duration" + (",num_cpus" if cpus else "")
    lines = [header] + [f"j{i},{t},{g},{d}" + (f",{cpus[i]}" if cpus else "")
                        for i, (t, g, d) in enumerate(cells)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.csv"
        path.write_text("\n".join(lines) + "\n")
        fast, fast_report = load_trace(path)
        with monkeypatch.context() as m:
            m.setattr(formats, "_canonical_clean", lambda *a: None)
            slow, slow_report = load_trace(path)
    assert fast_report.dropped == slow_report.dropped
    for c, a in slow.columns().items():
        assert np.array_equal(getattr(fast, c), a), c

