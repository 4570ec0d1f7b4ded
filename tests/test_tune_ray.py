"""The Ray executor runs the same trials as the local one (one worker, same seed)."""

from __future__ import annotations

import pytest

from autosched.cluster import ClusterSpec
from autosched.trace.table import Trace
from autosched.tune import ExecutionConfig, Objective, SearchConfig, Tuner

ray = pytest.importorskip("ray")

TRACE = Trace.from_columns({
    "job_id": [f"j{i}" for i in range(8)],
    "submit_time": [0, 10, 20, 30, 40, 50, 60, 70],
    "num_gpus": [2, 4, 1, 2, 1, 4, 1, 3],
    "duration": [3000, 600, 100, 8000, 50, 2000, 400, 700],
})
CLUSTER = ClusterSpec.uniform_nodes(1, 4)


def run(executor: str):
    tuner = Tuner("tiresias", CLUSTER, Objective("avg_jct"),
                  SearchConfig(budget=14, seed=3, screening=True, initial_design=8),
                  ExecutionConfig(workers=1, executor=executor))
    return tuner.tune([TRACE])


def test_ray_executor_runs_the_same_trials_as_local():
    local = run("local")
    on_ray = run("ray")
    assert not ray.is_initialized()  # the executor shut down the instance it started
    key = lambda r: [(t.number, t.state, t.config, t.value) for t in r.trials]  # noqa: E731
    assert key(on_ray) == key(local)
    assert on_ray.screened_knobs == local.screened_knobs
    assert on_ray.best_config == local.best_config


def test_a_trial_whose_ray_worker_dies_is_retried_once(tmp_path, monkeypatch):
    """The worker process exits in the middle of the first attempt of each trial (as a node
    running out of memory would end it); the retry on a fresh worker completes it."""
    import tune_doubles as doubles

    ray.cloudpickle.register_pickle_by_value(doubles)  # the workers cannot import tests/
    monkeypatch.setenv("AUTOSCHED_TEST_MARKERS", str(tmp_path))  # inherited by the workers
    tuner = Tuner(doubles.Knobby, doubles.CLUSTER, Objective(), SearchConfig(budget=2, seed=0, screening=False),
                  ExecutionConfig(workers=1, executor="ray"), simulator=doubles.dies_once_sim)
    res = tuner.tune([doubles.TRACE])
    assert [t.state for t in res.trials] == ["complete"] * 2
    assert [t.attempts for t in res.trials] == [2] * 2


def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # bound, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_ray_address_where_nothing_listens_is_refused_at_once():
    from autosched.tune import TuneError
    from autosched.tune.executor import check_ray_address

    port = _closed_port()
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(TuneError, match="nothing answers there"):
            check_ray_address(address)
    with pytest.raises(TuneError, match="expected HOST:PORT"):
        check_ray_address("localhost")
    check_ray_address("auto")  # left to Ray
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_ray_address(f"127.0.0.1:{s.getsockname()[1]}")  # something answers: no error


def test_tune_with_a_dead_ray_address_says_so_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from autosched.cli import app
    from autosched.trace import write_trace

    path = tmp_path / "t.csv"
    write_trace(TRACE, path)
    r = CliRunner().invoke(app, ["tune", str(path), "--cluster", "1x4", "--budget", "2", "--executor", "ray",
                                 "--address", f"127.0.0.1:{_closed_port()}"])
    assert r.exit_code == 2, r.output
    assert "nothing answers there" in r.output and len(r.output.strip().splitlines()) == 1
    assert not ray.is_initialized()
