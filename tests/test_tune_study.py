"""Studies: what a study file is for, one run at a time, reproducible parallel runs, resume without
repeats. The concurrency and kill -9 cases run real `autosched tune` processes on real files."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from autosched.cli import app
from autosched.cluster import ClusterSpec
from autosched.policies.base import Policy
from autosched.space import Bool, Categorical, ConfigSpace
from autosched.tune import ExecutionConfig, Objective, SearchConfig, StudyError, TuneError, Tuner, trace_digest
from autosched.tune.study import StudyLock
from tune_doubles import CLUSTER, TRACE, Knobby, known_sim, metrics_of

TESTS = Path(__file__).resolve().parent
AUTOSCHED = Path(sys.executable).with_name("autosched")
runner = CliRunner()

# The 12-job trace of test_tune_cli.py: 1 node x 4 GPUs, enough contention that knobs matter.
ROWS = [(0, 2, 3000), (10, 4, 600), (20, 1, 100), (30, 2, 8000), (40, 1, 50), (50, 4, 2000),
        (60, 1, 400), (70, 2, 300), (80, 1, 9000), (90, 3, 700), (100, 1, 20), (110, 2, 1500)]


def csv_of(rows) -> str:
    return "job_id,submit_time,num_gpus,duration\n" + "\n".join(
        f"j{i},{t},{g},{d}" for i, (t, g, d) in enumerate(rows)) + "\n"


@pytest.fixture
def traces(tmp_path):
    a = tmp_path / "a.csv"
    a.write_text(csv_of(ROWS))
    b = tmp_path / "b.csv"  # the same jobs but one: job 3 runs 4000 s instead of 8000 s
    b.write_text(csv_of([r if i != 3 else (30, 2, 4000) for i, r in enumerate(ROWS)]))
    return a, b


def tuner(study=None, **kw) -> Tuner:
    objective, simulator = kw.pop("objective", Objective()), kw.pop("simulator", known_sim)
    cluster = kw.pop("cluster", CLUSTER)
    search = SearchConfig(**{k: kw.pop(k) for k in list(kw) if k in SearchConfig.__dataclass_fields__})
    return Tuner(Knobby, cluster, objective, search, ExecutionConfig(study=study, **kw), simulator=simulator)


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent / "src"), str(TESTS), e.get("PYTHONPATH", "")])
    return e


# ------------------------------------------------------------------------------ identity

def test_trace_digest_is_the_content_not_the_label():
    same_jobs = TRACE.replace()
    assert trace_digest(same_jobs) == trace_digest(TRACE)
    relabelled = type(TRACE).from_columns(TRACE.columns(), source="elsewhere.csv")
    assert trace_digest(relabelled) == trace_digest(TRACE)
    longer = TRACE.replace(duration=TRACE.duration * [1.0, 1.5])
    assert trace_digest(longer) != trace_digest(TRACE)
    other_ids = TRACE.replace(job_id=TRACE.job_id[::-1].copy())
    assert trace_digest(other_ids) != trace_digest(TRACE)


def test_a_study_refuses_other_workloads_and_other_clusters(tmp_path):
    study = tmp_path / "s.db"
    first = tuner(study, budget=4, screening=False).tune([TRACE])
    other = TRACE.replace(duration=TRACE.duration * [1.0, 1.5])
    with pytest.raises(StudyError, match=r"another problem \(workloads: 2 jobs sha256 \w+ in the study, 2 jobs"):
        tuner(study, budget=4, screening=False).tune([other])
    with pytest.raises(StudyError, match=r"cluster: 1x8 \(8 GPUs\) in the study, 2x8 \(16 GPUs\) now"):
        tuner(study, budget=4, screening=False, cluster=ClusterSpec.uniform_nodes(2, 8)).tune([TRACE])
    with pytest.raises(StudyError, match="cluster: its properties"):
        tuner(study, budget=4, screening=False,
              cluster=ClusterSpec.uniform_nodes(1, 8, restart_overhead=(0.0, 0.0))).tune([TRACE])
    with pytest.raises(StudyError, match="workloads: 2 jobs .* in the study, 2 jobs .*, 2 jobs .* now"):
        tuner(study, budget=4, screening=False).tune([TRACE, TRACE])
    # the same problem again is a resume: the stored trials come back, none is re-run
    again = tuner(study, budget=4, screening=False).tune([TRACE])
    key = lambda r: [(t.number, t.config, t.value) for t in r.trials]  # noqa: E731
    assert key(again) == key(first)
    # another study name in the same file is another study
    fresh = tuner(study, budget=2, screening=False, study_name="other").tune([other])
    assert len(fresh.trials) == 2


def test_reusing_a_study_with_another_trace_is_refused_on_the_command_line(traces, tmp_path):
    a, b = traces
    study = tmp_path / "s.db"
    base = ["--cluster", "1x4", "--budget", "4", "--no-screening", "--study", str(study), "--json"]
    first = runner.invoke(app, ["tune", str(a), *base])
    assert first.exit_code == 0, first.output
    res = runner.invoke(app, ["tune", str(b), *base])
    assert res.exit_code == 2
    assert res.output.startswith(f"error: study {study} was made for another problem (workloads: 12 jobs sha256 ")
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
    assert "--" not in res.output.split("(", 1)[1]  # library messages do not name flags
    again = runner.invoke(app, ["tune", str(a), *base])  # the right trace still resumes it
    assert again.exit_code == 0 and json.loads(again.stdout)["trials"] == json.loads(first.stdout)["trials"]


def test_a_study_of_an_older_version_without_workloads_is_not_reused(tmp_path):
    study = tmp_path / "s.db"
    tuner(study, budget=2, screening=False).tune([TRACE])
    s = optuna.load_study(study_name="autosched", storage=f"sqlite:///{study}")
    s.set_user_attr("problem", {"policies": ["knobby"], "objective": Objective().to_dict(), "cluster": "1x8"})
    with pytest.raises(StudyError, match="older autosched that did not record its workloads"):
        tuner(study, budget=2, screening=False).tune([TRACE])


# ------------------------------------------------------------------------------ the file

def _not_sqlite(p: Path) -> Path:
    p.write_text("job_id,submit_time\n1,2\n")
    return p


def _other_sqlite(p: Path) -> Path:
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE accounts (name TEXT)")
    con.commit()
    con.close()
    return p


@pytest.mark.parametrize("make, msg", [
    (lambda d: d, "is a directory; a study is one SQLite file"),
    (lambda d: _not_sqlite(d / "notes.csv"), "not an SQLite file"),
    (lambda d: _other_sqlite(d / "app.db"), "an SQLite database of something else (tables accounts)"),
    (lambda d: Path("/proc/autosched-study.db"), "cannot create or open it"),
])
def test_a_path_that_is_not_a_study_is_a_one_line_error(tmp_path, traces, make, msg):
    path = make(tmp_path)
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(StudyError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        tuner(path, budget=2, screening=False).tune([TRACE])
    res = runner.invoke(app, ["tune", str(traces[0]), "--cluster", "1x4", "--budget", "2", "--no-screening",
                              "--study", str(path)])
    assert res.exit_code == 2 and res.output.startswith(f"error: study {path}") and msg in res.output
    assert len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output
    if before is not None:
        assert path.read_bytes() == before  # left as it was


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through file permissions")
def test_an_unwritable_study_is_a_one_line_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(StudyError, match="cannot write in its folder"):
            tuner(ro / "s.db", budget=2, screening=False).tune([TRACE])
    finally:
        ro.chmod(0o700)
    done = tmp_path / "s.db"
    tuner(done, budget=2, screening=False).tune([TRACE])
    done.chmod(0o400)
    with pytest.raises(StudyError, match="cannot be written"):
        tuner(done, budget=2, screening=False).tune([TRACE])


def test_the_lock_names_its_holder_and_goes_with_it(tmp_path):
    study = tmp_path / "s.db"
    with StudyLock(study) as lock:
        assert lock.path.read_text() == f"{os.getpid()}\n"
        with pytest.raises(StudyError, match=f"study {study} is in use by PID {os.getpid()}"):
            with StudyLock(study):
                pass
        with pytest.raises(StudyError, match="in use by PID"):
            tuner(study, budget=2, screening=False).tune([TRACE])
    assert not lock.path.exists()
    with StudyLock(study):  # free again
        pass


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_the_lock_is_on_the_file_not_on_the_name(tmp_path, link):
    """Was: two runs on one study through a link were not locked out (the lock was `PATH.lock`
    of the path as typed); the second crashed and the first reported 39 of 40 trials."""
    study = tmp_path / "s.db"
    tuner(study, budget=2, screening=False).tune([TRACE])
    other = tmp_path / "elsewhere" / "other.db"
    other.parent.mkdir()
    (other.symlink_to if link == "symlink" else other.hardlink_to)(study)
    # (the holder's PID is beside the real path: a hard link's other name does not find it)
    holder = f"PID {os.getpid()}" if link == "symlink" else "another process"
    with StudyLock(study):
        with pytest.raises(StudyError, match=f"^study {other} is in use by {holder} "):
            tuner(other, budget=4, screening=False).tune([TRACE])
    with StudyLock(other):
        with pytest.raises(StudyError, match=f"^study {study} is in use by {holder} "):
            tuner(study, budget=4, screening=False).tune([TRACE])
    assert len(tuner(other, budget=4, screening=False).tune([TRACE]).trials) == 4  # free again, and resumed


def test_a_run_that_fails_before_writing_leaves_no_empty_study(tmp_path):
    study = tmp_path / "new.db"
    with StudyLock(study):
        assert study.exists() and study.stat().st_size == 0  # created to be locked
    assert not study.exists()


_FULL = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
if {limit} >= 0:
    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
from autosched.cli import main
main()
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs POSIX resource limits")
def test_a_study_whose_disk_fills_up_is_one_line_and_resumes(traces, tmp_path):
    """Was: optuna's `StorageInternalError` traceback. The limit on file size stands in for a
    full filesystem (SQLite gets an error for a write it cannot make)."""
    a, _ = traces
    study = tmp_path / "s.db"
    args = ["tune", str(a), "--cluster", "1x4", "--no-screening", "--study", str(study), "--json"]
    res = subprocess.run([sys.executable, "-c", _FULL.format(limit=-1), *args, "--budget", "3"], env=env(),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    limit = study.stat().st_size + 4096  # room for a trial or two, not for 200
    res = subprocess.run([sys.executable, "-c", _FULL.format(limit=limit), *args, "--budget", "200"], env=env(),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr
    assert res.stderr == (f"error: study {study}: writing to the study failed (disk I/O error); what it stored is "
                          "kept, and a new run resumes it\n")
    done = len([t for t in _check_store(study) if t.state == optuna.trial.TrialState.COMPLETE])
    assert 3 <= done < 200
    res = subprocess.run([sys.executable, "-c", _FULL.format(limit=-1), *args, "--budget", str(done + 2)], env=env(),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)["trials"]) == done + 2


# ------------------------------------------------------------------------------ two real runs

def _tune_proc(trace: Path, study: Path, budget: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([str(AUTOSCHED), "tune", str(trace), "--cluster", "1x4", "--budget", str(budget),
                             "--no-screening", "--study", str(study), "--json", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())


def _wait_for_trials(study: Path, n: int, proc: subprocess.Popen, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        try:
            s = optuna.load_study(study_name="autosched", storage=f"sqlite:///{study}")
            done = len(s.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
            if done >= n:
                return done
        except Exception:  # noqa: BLE001 - not created yet
            pass
        time.sleep(0.2)
    raise AssertionError("the tuning run did not get going")


def _check_store(study: Path) -> list[optuna.trial.FrozenTrial]:
    """The store is sound: trial numbers 0..n-1 once each, and no config simulated twice."""
    s = optuna.load_study(study_name="autosched", storage=f"sqlite:///{study}")
    trials = s.get_trials()
    assert [t.number for t in trials] == list(range(len(trials)))
    simulated = [json.dumps(t.user_attrs["config"], sort_keys=True) for t in trials
                 if t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs.get("repeat_of") is None]
    assert len(simulated) == len(set(simulated))
    return trials


@pytest.mark.skipif(not AUTOSCHED.exists(), reason="the autosched script is not installed beside python")
def test_two_tune_processes_on_one_fresh_study(traces, tmp_path):
    """Started together on a file that does not exist yet: one runs, the other is refused at once
    naming the first's PID; after the first is killed (-9), a new run resumes the study."""
    a, _ = traces
    study = tmp_path / "s.db"
    procs = [_tune_proc(a, study, 100_000), _tune_proc(a, study, 100_000)]
    try:
        deadline = time.monotonic() + 120
        while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        refused = [p for p in procs if p.poll() is not None]
        assert len(refused) == 1, "neither run was refused"
        (loser,), (winner,) = refused, [p for p in procs if p is not refused[0]]
        err = loser.stderr.read()
        assert loser.returncode == 2, err
        assert err == f"error: study {study} is in use by PID {winner.pid} (another tuning run); " \
                      "wait for it to finish, or use another study file\n"
        n = _wait_for_trials(study, 5, winner)
        # a third run while the winner works on an existing study: refused too, the store untouched
        third = _tune_proc(a, study, 10)
        procs.append(third)
        assert third.wait(60) == 2 and f"in use by PID {winner.pid}" in third.stderr.read()
        winner.send_signal(signal.SIGKILL)
        winner.wait()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()  # reaps it and closes its pipes
    kept = [t for t in _check_store(study) if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(kept) >= n
    resumed = _tune_proc(a, study, len(kept) + 4)
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    res = json.loads(out)
    assert len(res["trials"]) == len(kept) + 4
    before = {t.number: t.user_attrs["config"] for t in kept}
    assert {t["number"]: t["config"] for t in res["trials"] if t["number"] in before} == before
    _check_store(study)


# ------------------------------------------------------------------------------ reproducible

def jittery_sim(trace, cluster, policy):
    """known_sim after a random pause: trials finish in a random order, as on a busy machine."""
    time.sleep(random.random() * 0.04)
    return known_sim(trace, cluster, policy)


def test_parallel_tuning_is_reproducible_for_a_seed_and_worker_count():
    def run(sim):
        res = tuner(budget=24, seed=3, screening=False, workers=2, simulator=sim).tune([TRACE])
        return [(t.number, t.config, t.value) for t in res.trials], res.best_config

    first = run(jittery_sim)
    assert run(jittery_sim) == first
    assert run(known_sim) == first  # whatever order the workers finish in


@pytest.mark.skipif(not AUTOSCHED.exists(), reason="the autosched script is not installed beside python")
def test_tune_with_two_workers_gives_the_same_best_on_every_run(traces):
    a, _ = traces
    outs = []
    for _ in range(2):
        p = subprocess.run([str(AUTOSCHED), "tune", str(a), "--cluster", "1x4", "--budget", "16", "--workers", "2",
                            "--seed", "3", "--json"], capture_output=True, text=True, env=env(), timeout=300)
        assert p.returncode == 0, p.stderr
        d = json.loads(p.stdout)
        outs.append((d["best_config"], d["best_value"], [t["config"] for t in d["trials"]]))
    assert outs[0] == outs[1]


# ------------------------------------------------------------------------------ no repeats

class Small(Policy):
    name = "small"
    summary = "test double: four configs in all"
    space = ConfigSpace([Bool("x", "", default=False), Categorical("y", "", choices=("p", "q"), default="p")])


SIMULATED: list[dict] = []


def counting_sim(trace, cluster, policy):
    SIMULATED.append(dict(policy.config))
    return metrics_of({"a": 0.5 if policy.config["x"] else 0.2, "c": 1 if policy.config["y"] == "p" else 3}), {}


def test_a_config_the_study_has_is_not_simulated_again(tmp_path):
    study = tmp_path / "s.db"
    SIMULATED.clear()

    def small(budget):
        search = SearchConfig(budget=budget, seed=0, sampler="random", screening=False)
        return Tuner(Small, CLUSTER, Objective(), search, ExecutionConfig(study=study),
                     simulator=counting_sim).tune([TRACE])

    res = small(10)
    assert len(res.trials) == 10
    assert len(SIMULATED) == len({json.dumps(c, sort_keys=True) for c in SIMULATED}) <= 4
    by_number = {t.number: t for t in res.trials}
    repeats = [t for t in res.trials if t.repeat_of is not None]
    assert len(repeats) == 10 - len(SIMULATED)
    for t in repeats:  # same config, same result, from an earlier trial that ran it; no simulation
        first = by_number[t.repeat_of]
        assert first.number < t.number and first.repeat_of is None
        assert (t.config, t.value, t.metrics, t.attempts) == (first.config, first.value, first.metrics, 0)
    assert res.cost["simulations"] == len(SIMULATED)
    ran = len(SIMULATED)
    resumed = small(16)  # a resumed study: the configs it has are not simulated again
    assert len(resumed.trials) == 16 and len(SIMULATED) == ran + (4 - ran)
    assert resumed.best_config == {"x": False, "y": "p"}


_RUNNER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from tune_doubles import CLUSTER, TRACE, Knobby, slower_sim
    from autosched.tune import ExecutionConfig, SearchConfig, Tuner
    Tuner(Knobby, CLUSTER, None, SearchConfig(budget=200, screening=False, seed=5),
          ExecutionConfig(study={study!r}, workers={workers}), simulator=slower_sim).tune([TRACE])
""")


@pytest.mark.parametrize("workers", [1, 2])
def test_after_kill_9_the_resumed_run_repeats_no_config(tmp_path, workers):
    """Killed during the random start-up phase: the resumed run must not replay the random
    stream of the killed one (Knobby's float knobs make an exact repeat otherwise impossible)."""
    study = tmp_path / "s.db"
    proc = subprocess.Popen([sys.executable, "-c", _RUNNER.format(tests=str(TESTS), study=str(study), workers=workers)],
                            env=env(), stderr=subprocess.PIPE, text=True)
    try:
        # 2 of the 10 random start-up trials; at 0.5 s a simulation the run needs 2 s more to
        # leave the start-up phase (it once did, with 0.15 s, while a loaded machine polled)
        _wait_for_trials(study, 2, proc)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    trials = _check_store(study)
    finished = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(finished) < 10  # still in the start-up phase (10 random trials)
    res = tuner(study, budget=len(finished) + 8, seed=5, screening=False, workers=workers).tune([TRACE])
    configs = [json.dumps(t.config, sort_keys=True) for t in res.trials]
    assert len(configs) == len(set(configs)) == len(finished) + 8
    assert all(t.repeat_of is None for t in res.trials)
    _check_store(study)
    # the interrupted trials are kept as such, not counted, and their configs were asked again
    s = optuna.load_study(study_name="autosched", storage=f"sqlite:///{study}")
    interrupted = [t for t in s.get_trials() if t.user_attrs.get("interrupted")]
    assert all(t.state == optuna.trial.TrialState.FAIL for t in interrupted)
    assert all(t.number not in {r.number for r in res.trials} for t in interrupted)
    asked_again = {json.dumps(t.user_attrs["config"], sort_keys=True) for t in interrupted if "config" in t.user_attrs}
    assert asked_again <= set(configs)


def test_settings_are_checked_once_where_they_are_declared():
    with pytest.raises(TuneError, match=r"budget must be at least 1 trial \(got 0\)"):
        SearchConfig(budget=0)
    with pytest.raises(TuneError, match="patience must be at least 1"):
        SearchConfig(patience=0)
    with pytest.raises(TuneError, match=r"trial timeout must be positive \(got -1 s\)"):
        ExecutionConfig(trial_timeout=-1)
    assert ExecutionConfig(study="x.db").study == Path("x.db")


_HANGING = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from tune_doubles import CLUSTER, TRACE, Knobby, hanging_sim
    from autosched.tune import ExecutionConfig, SearchConfig, Tuner
    Tuner(Knobby, CLUSTER, None, SearchConfig(budget=10, screening=False),
          ExecutionConfig(study={study!r}, workers=2), simulator=hanging_sim).tune([TRACE])
""")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has ended (nobody may reap it in a container)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_a_killed_run_leaves_no_worker_running_and_the_study_free(tmp_path):
    study, markers = tmp_path / "s.db", tmp_path / "markers"
    markers.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", _HANGING.format(tests=str(TESTS), study=str(study))],
                            env={**env(), "AUTOSCHED_TEST_MARKERS": str(markers)})
    try:
        deadline = time.monotonic() + 120
        while len(list(markers.iterdir())) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None
            time.sleep(0.1)
        workers = [int(p.name) for p in markers.iterdir()]
        assert len(workers) == 2 and all(_alive(w) for w in workers)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 60
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers), "the workers outlived their killed run"
    with StudyLock(study):  # and nothing holds the study
        pass


def test_a_schema_created_by_a_concurrent_opener_is_not_an_error(tmp_path, monkeypatch):
    # A reader opening the same new file at the same moment (the tests' own load_study polling
    # did) creates Optuna's tables between the tuner's check and its CREATE TABLE: SQLite says
    # "table studies already exists". The schema is then there; the tuner opens it again.
    import sqlalchemy.exc

    from autosched.tune import tuner

    real, calls = optuna.storages.RDBStorage, []

    def racing(url, **kw):
        calls.append(url)
        if len(calls) == 1:
            real(url, **kw)  # the other process wins the race and creates the schema
            raise sqlalchemy.exc.OperationalError("CREATE TABLE studies", {},
                                                  Exception("table studies already exists"))
        return real(url, **kw)

    monkeypatch.setattr(optuna.storages, "RDBStorage", racing)
    storage = tuner._storage(tmp_path / "s.db")
    assert len(calls) == 2 and storage.get_all_studies() == []
    # the same race, lost at the schema-version row (seen in CI: two runs on one fresh study)
    calls.clear()

    def racing_version(url, **kw):
        calls.append(url)
        if len(calls) == 1:
            real(url, **kw)
            raise sqlalchemy.exc.IntegrityError("INSERT INTO alembic_version", {}, Exception(
                "UNIQUE constraint failed: alembic_version.version_num"))
        return real(url, **kw)

    monkeypatch.setattr(optuna.storages, "RDBStorage", racing_version)
    assert tuner._storage(tmp_path / "s3.db").get_all_studies() == [] and len(calls) == 2
    # any other operational error still says which file cannot be opened
    monkeypatch.setattr(optuna.storages, "RDBStorage", lambda url, **kw: (_ for _ in ()).throw(
        sqlalchemy.exc.OperationalError("x", {}, Exception("disk I/O error"))))
    with pytest.raises(StudyError, match=r"s2\.db: cannot be opened as a study \(.*disk I/O error"):
        tuner._storage(tmp_path / "s2.db")


# The knob-space digests stored in studies (and in oracle cache keys) by earlier versions: a
# refactor of the Knob classes must not make an unchanged space read as changed. A knob really
# added, removed or re-ranged must change its policy's digest, and this table with it (multifactor
# changed when its bf_ knobs got search ranges and its space declared how to search it: weights,
# archetypes, secondary knobs; it was 81f3a06233a7792a; then 30544121b1912f3d until its archetypes
# gained small first with a day's age and two backfill corners, which its searches try first).
STORED_DIGESTS = {"fifo": "7777c155edf2936d", "sjf": "5c0aa57d7e110659", "srtf": "5c0aa57d7e110659",
                  "tiresias": "36c3e32d5c6ad57f", "qssf": "f8179cd48f9c7a34", "multifactor": "97f8d2c841616050"}


def test_space_digests_match_the_ones_stored_studies_carry():
    from autosched.policies import POLICIES
    from autosched.tune.study import _space_digest

    assert {name: _space_digest(p) for name, p in POLICIES.items()} == STORED_DIGESTS


def test_space_digest_changes_when_a_knob_changes():
    from dataclasses import replace

    from autosched.policies import get_policy
    from autosched.space import ConfigSpace
    from autosched.tune.study import _space_digest

    base = get_policy("tiresias")
    knobs = list(base.space)
    wider = type("T", (base,), {"space": ConfigSpace([*knobs[:2], replace(knobs[2], high=knobs[2].high * 2), *knobs[3:]])})
    assert _space_digest(wider) != _space_digest(base)
