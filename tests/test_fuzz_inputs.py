"""No traceback on any input: every loader and every file-reading option of the command
line, fed random bytes, cut-off real files and files of the wrong kind, either works or fails with
one line of the project's own error class (`AutoschedError`; ``error: ...`` and exit code 2 on
the command line)."""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autosched.cli import app
from autosched.cluster import parse_cluster
from autosched.errors import AutoschedError
from autosched.space import read_config_file
from autosched.trace import load_trace
from autosched.trace.formats import format_names
from autosched.workload import get_model, load_model
from conftest import FIXTURES

runner = CliRunner()
CANON = b"job_id,submit_time,num_gpus,duration,vc\n" + b"".join(
    f"j{i},{i * 600},{1 + i % 4},{100 + 37 * i},vc{i % 2}\n".encode() for i in range(60))


def _valid_files() -> dict[str, bytes]:
    """One good file of each kind a command reads (traces of each format, a cluster file, a config
    and a fitted model); fuzzing cuts and mixes them."""
    files = {name: (FIXTURES / name).read_bytes() for name in
             ("helios_cluster_log.csv", "philly_cluster_job_log.json", "slurm_sacct.txt")}
    files["canonical.csv"] = CANON
    files["canonical.csv.gz"] = gzip.compress(CANON)
    files["vcs.csv"] = b"vc,nodes,gpus_per_node\nvc0,2,8\nvc1,1,8\n"
    files["config.json"] = json.dumps({"policy": "tiresias", "knobs": {"queues": 2}}).encode()
    with tempfile.TemporaryDirectory() as tmp:
        trace, _ = load_trace(_write(Path(tmp) / "t.csv", CANON))
        get_model("stat")().fit(trace).save(Path(tmp) / "m.npz")
        files["model.npz"] = (Path(tmp) / "m.npz").read_bytes()
        from autosched.trace import write_trace

        write_trace(trace, Path(tmp) / "t.parquet")
        files["trace.parquet"] = (Path(tmp) / "t.parquet").read_bytes()
    return files


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


VALID = _valid_files()


@st.composite
def hostile_bytes(draw) -> bytes:
    """Random bytes, a real file cut anywhere, a real file with bytes flipped, or two spliced."""
    kind = draw(st.sampled_from(["random", "cut", "flip", "splice", "text"]))
    if kind == "random":
        return draw(st.binary(max_size=600))
    if kind == "text":
        return draw(st.text(max_size=300)).encode("utf-8", "surrogatepass")
    base = VALID[draw(st.sampled_from(sorted(VALID)))]
    if kind == "cut":
        return base[: draw(st.integers(0, len(base)))]
    if kind == "flip":
        data = bytearray(base)
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
        return bytes(data)
    other = VALID[draw(st.sampled_from(sorted(VALID)))]
    return base[: draw(st.integers(0, len(base)))] + other[draw(st.integers(0, len(other))):]


def _one_line_or_ok(call) -> None:
    try:
        call()
    except AutoschedError as e:
        assert str(e) and "\n" not in str(e), repr(str(e))


FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("suffix", [".csv", ".txt", ".json", ".gz", ".parquet"])
@pytest.mark.parametrize("fmt", [None, *format_names()])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=hostile_bytes(), strict=st.booleans())
def test_trace_loader_never_crashes(tmp_path, suffix, fmt, data, strict):
    path = _write(tmp_path / f"t{suffix}", data)
    _one_line_or_ok(lambda: load_trace(path, format=fmt, strict=strict))


@FUZZ
@given(data=hostile_bytes())
@example(data=b'"ob_id,submit_time\nj0,0,1,100,vc0\n')  # found: a quoted header cell spanning lines
def test_cluster_file_loader_never_crashes(tmp_path, data):
    path = _write(tmp_path / "vcs.csv", data)
    _one_line_or_ok(lambda: parse_cluster(str(path)))


@FUZZ
@given(data=hostile_bytes())
def test_model_loader_never_crashes(tmp_path, data):
    path = _write(tmp_path / "m.npz", data)

    def load_and_sample():
        model = load_model(path)
        model.sample(0.0, 86400.0, 0)

    _one_line_or_ok(load_and_sample)


def _fitted_models() -> dict[str, dict]:
    """The arrays of a fitted model file of each kind that saves arrays (neural needs torch)."""
    import numpy as np

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        trace, _ = load_trace(_write(Path(tmp) / "t.csv", CANON))
        for kind in ("stat", "replay", "hybrid"):
            get_model(kind)().fit(trace).save(Path(tmp) / "m.npz")
            with np.load(Path(tmp) / "m.npz", allow_pickle=False) as z:
                out[kind] = {k: z[k] for k in z.files}
    return out


MODELS = _fitted_models()
ODD_NUMBERS = st.sampled_from([float("nan"), float("inf"), -float("inf"), 0.0, -1.0, 0.5, 1e300, -1e300, 1e12,
                               2.0**63, 3.0]) | st.floats() | st.integers(-(2**63), 2**63 - 1)


@FUZZ
@given(kind=st.sampled_from(sorted(MODELS)), data=st.data(), value=ODD_NUMBERS, everywhere=st.booleans())
def test_a_model_file_with_any_value_anywhere_samples_within_the_bounds_or_is_one_line(tmp_path, kind, data, value,
                                                                                       everywhere):
    """One array of a real model file given an odd value (at one index, or in every cell): the
    model either refuses to load in one line, or its samples keep the bounds every trace row
    keeps (GPUs in [1, 1,000,000], durations in (0, 1 year], submit times in the period)."""
    import numpy as np

    from autosched.trace.report import MAX_DURATION, MAX_GPUS

    arrays = dict(MODELS[kind])
    name = data.draw(st.sampled_from(sorted(k for k in arrays if k != "__header__")))
    a = arrays[name].astype(np.float64) if isinstance(value, float) else arrays[name].astype(object).copy()
    index = data.draw(st.integers(0, a.size - 1))
    if everywhere:
        a[...] = value
    else:
        a.flat[index] = value
    try:
        arrays[name] = a.astype(arrays[name].dtype) if a.dtype == object else a
    except OverflowError:
        arrays[name] = a.astype(np.float64)
    path = tmp_path / "m.npz"
    with open(path, "wb") as f:
        np.savez_compressed(f, **arrays)

    try:
        trace = load_model(path).sample(2 * 86400.0, 86400.0, 0)
    except AutoschedError as e:
        assert str(e) and "\n" not in str(e)
        return
    assert np.all((trace.num_gpus >= 1) & (trace.num_gpus <= MAX_GPUS))
    assert np.all((trace.duration > 0) & (trace.duration <= MAX_DURATION))
    assert np.all((trace.submit_time >= 2 * 86400.0) & (trace.submit_time < 3 * 86400.0))


@FUZZ
@given(data=hostile_bytes())
def test_config_loader_never_crashes(tmp_path, data):
    from autosched.policies import get_policy

    path = _write(tmp_path / "c.json", data)

    def read_and_validate():
        name, knobs = read_config_file(path)
        cls = get_policy(name or "tiresias")
        cls.space.validate(knobs)

    _one_line_or_ok(read_and_validate)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                           max_leaves=8)


@FUZZ
@given(knobs=st.dictionaries(st.sampled_from(["queues", "threshold", "starvation", "backfill", "x"]), JSON_VALUES,
                             max_size=4), policy=JSON_VALUES | st.sampled_from(["tiresias", "fifo", "qssf"]))
def test_config_of_wrong_types_never_crashes(tmp_path, knobs, policy):
    """Wrong types inside a well-formed config: bools, lists, nulls, huge and non-finite numbers."""
    from autosched.policies import get_policy

    path = tmp_path / "c.json"
    path.write_text(json.dumps({"policy": policy, "knobs": knobs}))

    def read_and_validate():
        name, values = read_config_file(path)
        get_policy(name or "tiresias").space.validate(values)

    _one_line_or_ok(read_and_validate)


# ------------------------------------------------------------------ the command line, file by file

def _cli_ok_or_one_line(args: list[str]) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code in (0, 1, 2), (res.exit_code, res.output)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exc_info
    if res.exit_code != 0:
        errors = [line for line in res.output.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, res.output


CLI_FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("option", ["trace", "--cluster", "--config", "--warm-start", "model", "until"])
@CLI_FUZZ
@given(data=hostile_bytes())
def test_every_file_option_fails_in_one_line(tmp_path, option, data):
    trace = _write(tmp_path / "t.csv", CANON)
    bad = _write(tmp_path / "bad.bin", data)
    if option == "trace":
        args = ["simulate", str(bad), "--cluster", "2x8", "--json"]
    elif option == "--cluster":
        args = ["simulate", str(trace), "--cluster", str(bad), "--json"]
    elif option == "--config":
        args = ["simulate", str(trace), "--cluster", "2x8", "--config", str(bad), "--json"]
    elif option == "--warm-start":  # fails before tuning when the file is bad; a good one tunes 1 trial
        args = ["tune", str(trace), "--cluster", "2x8", "--budget", "1", "--no-screening", "--warm-start", str(bad),
                "--json"]
    elif option == "model":
        args = ["workload", "sample", str(bad), "--start", "0", "--horizon", "1d", "--out", str(tmp_path / "o.csv")]
    else:
        args = ["workload", "fit", str(bad), "--until", "1d", "--out", str(tmp_path / "m.npz")]
    _cli_ok_or_one_line(args)


@pytest.mark.parametrize("column, values, message", [
    ("num_gpus", ["1", "two"], "column 'num_gpus' is not numeric (type object)"),
    ("duration", [[1.0], [2.0]], "column 'duration' is not numeric (type list<element: double>; a cell holds one value)"),
    ("job_id", [["a"], ["b"]], "column 'job_id' is not text (type list<element: string>; a cell holds one value)"),
    ("num_gpus", [1.5, 2.0], None),  # dropped: not a whole number
    ("submit_time", [None, 1.0], None),  # dropped: not finite
])
def test_parquet_columns_of_the_wrong_type(tmp_path, column, values, message):
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {"job_id": ["a", "b"], "submit_time": [0.0, 1.0], "num_gpus": [1, 2], "duration": [5.0, 6.0]}
    cols[column] = values
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(cols), path)
    if message is None:
        trace, report = load_trace(path)
        assert len(trace) == 1 and report.dropped == 1
        return
    with pytest.raises(AutoschedError) as e:
        load_trace(path)
    assert str(e.value) == f"{path}: {message}"
