"""A test bed replays jobs N times faster than their own time: the agent's workload model then
fits and samples on the jobs' clock (`ModelSource(time_scale=N)`, `agent init --time-scale N`)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from autosched.adapt import ModelSource
from autosched.adapt.errors import AdaptError
from autosched.adapt.observe import Observation
from autosched.data import sample_path
from autosched.live.errors import LiveError
from autosched.live.settings import SETTINGS_FILE, AgentSettings
from autosched.trace import Trace
from autosched.trace.io import load_trace
from autosched.trace.table import TraceError

DAY = 86400.0
FAKE = {"kind": "fake", "directory": "/x"}


def test_stretched_by_hand():
    tr = Trace.from_columns({"job_id": ["a", "b"], "submit_time": [100.0, 130.0], "num_gpus": [1, 2],
                             "duration": [10.0, 20.0], "time_limit": [60.0, math.nan],
                             "attained": [0.0, 8.0], "age": [0.0, 5.0]})
    s = tr.stretched(2.0, origin=100.0)
    assert s.submit_time.tolist() == [100.0, 160.0]  # 30 s after the origin becomes 60 s
    assert s.duration.tolist() == [20.0, 40.0]
    assert s.time_limit[0] == 120.0 and math.isnan(s.time_limit[1])  # no limit stays none
    assert s.attained.tolist() == [0.0, 16.0] and s.age.tolist() == [0.0, 10.0]
    assert s.num_gpus.tolist() == [1, 2] and list(s.job_id) == ["a", "b"]
    assert s.stretched(0.5, origin=100.0).equals(tr)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(TraceError, match="time factor"):
            tr.stretched(bad, origin=0.0)


def _observation(history: Trace, start: float, now: float) -> Observation:
    n = len(history)
    return Observation(now=now, start=start, history=history, finished=np.ones(n, bool),
                       end=np.full(n, math.nan), backlog=history.take(np.arange(0)), imputed=0)


@pytest.fixture(scope="module")
def two_days() -> tuple[Trace, float, float]:
    trace = load_trace(sample_path())[0]
    start = trace.start + 3 * DAY
    now = start + 2 * DAY
    return trace.window(start, now), start, now


@pytest.mark.parametrize("level_sd", [0.0, 0.3])
def test_the_model_on_a_compressed_history_samples_what_it_samples_uncompressed(two_days, level_sd):
    history, start, now = two_days
    c = 128.0  # a power of two: compressing and stretching back are exact in floating point
    fast = history.stretched(1 / c, now)
    real = ModelSource("stat", samples=2, level_sd=level_sd).workloads(
        _observation(history, start, now), DAY, seed=3)
    scaled = ModelSource("stat", samples=2, time_scale=c, level_sd=level_sd).workloads(
        _observation(fast, now - (now - start) / c, now), DAY / c, seed=3)
    assert len(real) == len(scaled) == 2 and all(len(w) > 50 for w in real)
    for r, s in zip(real, scaled):
        assert s.equals(r.stretched(1 / c, now))
    # Without the scale, the same model reads the compressed history at face value: a VC's jobs
    # a trace hour apart are 28 s apart, one 60 s burst, and hours of the day are minutes.
    plain = ModelSource("stat", samples=2).workloads(
        _observation(fast, now - (now - start) / c, now), DAY / c, seed=3)
    assert not any(p.equals(r.stretched(1 / c, now)) for p, r in zip(plain, real))


def test_the_agent_settings_carry_the_scale_to_its_model(tmp_path):
    s = AgentSettings(connector=FAKE, time_scale=120.0, period=720.0, history=1440.0)
    assert s.model_source().time_scale == 120.0
    assert AgentSettings(connector=FAKE).model_source().time_scale == 1.0
    s.save(tmp_path)
    assert json.loads((tmp_path / SETTINGS_FILE).read_text())["time_scale"] == 120.0
    assert AgentSettings.load(tmp_path) == s
    for bad in (0.5, 0.0, -3.0, 200_000.0):
        with pytest.raises(AdaptError, match=r"time scale .*must be in \[1, 100,000\]"):
            AgentSettings(connector=FAKE, period=60.0, history=60.0, time_scale=bad)
    with pytest.raises(AdaptError, match="time scale nan: must be finite"):
        AgentSettings(connector=FAKE, period=60.0, history=60.0, time_scale=math.nan)
    with pytest.raises(AdaptError, match="time scale"):
        ModelSource("stat", time_scale=0.1)
    # the period and history, on the jobs' clock, within what one model sample may span
    assert AgentSettings(connector=FAKE, period=720.0, history=1440.0, time_scale=120.0)
    with pytest.raises(LiveError, match=r"^period of 86400 s at time scale 1440 is 1,440 days of the jobs' time, "
                                        r"beyond the 366-day limit; give the period and history in the test bed"):
        AgentSettings(connector=FAKE, time_scale=1440.0)
    with pytest.raises(LiveError, match=r"^history of 604800 s at time scale 120 is 840 days"):
        AgentSettings(connector=FAKE, period=720.0, time_scale=120.0)


def test_agent_init_takes_the_scale_and_refuses_a_bad_one(tmp_path):
    from typer.testing import CliRunner

    from autosched.cli import build_app
    from autosched.live.fake import FakeConnector

    FakeConnector.create(tmp_path / "f")
    run = CliRunner().invoke
    r = run(build_app(), ["agent", "init", "--state", str(tmp_path / "bad"), "--fake", str(tmp_path / "f"),
                          "--time-scale", "0.5"])
    assert r.exit_code == 2 and r.output.startswith("error: ") and "time scale 0.5: must be in [1, 100,000]" in r.output
    assert not (tmp_path / "bad" / SETTINGS_FILE).exists()
    r = run(build_app(), ["agent", "init", "--state", str(tmp_path / "s"), "--fake", str(tmp_path / "f"),
                          "--time-scale", "120", "--period", "720", "--history", "1440"])
    assert r.exit_code == 0, r.output
    assert AgentSettings.load(tmp_path / "s").time_scale == 120.0


def test_a_round_records_the_clock_its_model_ran_on(tmp_path):
    import sqlite3

    from typer.testing import CliRunner

    from autosched.cli import build_app
    from autosched.live.fake import FakeConnector
    from live_helpers import PINNED_NOW, contended

    fake = FakeConnector.create(tmp_path / "fake", sacct=contended(PINNED_NOW), nodes=1, gpus_per_node=8)
    fake.update(clock=PINNED_NOW)
    st = str(tmp_path / "state")
    run = CliRunner().invoke
    r = run(build_app(), ["agent", "init", "--state", st, "--fake", str(tmp_path / "fake"), "--period", "10m",
                          "--history", "1h", "--min-jobs", "10", "--budget", "4", "--samples", "1",
                          "--validation-samples", "2", "--time-scale", "60"])
    assert r.exit_code == 0, r.output
    r = run(build_app(), ["agent", "step", "--state", st])
    assert r.exit_code == 0, r.output
    with sqlite3.connect(tmp_path / "state" / "state.db") as db:
        summaries = [json.loads(s) for (s,) in db.execute("SELECT summary FROM rounds")]
    # a round that proposed nothing keeps its evidence; a proposal's is its revision's
    from autosched.live.agent import open_agent

    store = open_agent(tmp_path / "state").store
    models = [s["evidence"]["model"] for s in summaries if s.get("evidence")]
    models += [store.get(s["revision"]).evidence.model for s in summaries if "revision" in s]
    assert models == ["stat at time scale 60"]
