"""What any cluster user can type reaches the agent through Slurm's own output: job names with
`|`, a newline that carries a whole forged row, a tab, bytes that are not UTF-8, and the longest
name sbatch takes. Against a real slurmctld + slurmdbd (the `testbed` cluster): the history the
agent fits and judges on holds exactly the jobs `sacct -X` lists, each as Slurm recorded it, and
no command stops on them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from autosched.live.agent import init_agent
from autosched.live.history import HISTORY_FILE, read_jobs
from autosched.live.slurm import SACCT_FIELDS, SlurmConnector, slurm_stamp
from live_helpers import slurm_settings

pytestmark = pytest.mark.slurm
SRC = str(Path(__file__).resolve().parents[1] / "src")
AUTOSCHED = str(Path(sys.executable).parent / "autosched")

# carol's 32-GPU physics job that never ran, as a row of sacct's columns: put after a newline
# in a job name, sacct --parsable2 prints it as a line of its own
FAKE_JOB = {"JobID": "4242", "Submit": "2026-12-06T00:00:00", "Start": "2026-12-06T00:00:01",
            "End": "2026-12-06T00:05:00", "AllocTRES": "billing=1,cpu=1,gres/gpu=32,node=4",
            "ReqTRES": "billing=1,cpu=1,gres/gpu=32,node=4", "User": "carol", "Account": "physics",
            "Partition": "gpu", "State": "COMPLETED", "JobName": "x", "NCPUS": "1",
            "Timelimit": "00:05:00"}
# the columns autosched read before, JobName among them
OLD_FIELDS = ("JobID", "Submit", "Start", "End", "AllocTRES", "ReqTRES", "User", "Account",
              "Partition", "State", "JobName", "NCPUS", "Timelimit")
FORGED = "|".join(FAKE_JOB[f] for f in SACCT_FIELDS)
FORGED_OLD = "|".join(FAKE_JOB[f] for f in OLD_FIELDS)
NAMES: dict[str, bytes] = {
    "forged row": b"inj\n" + FORGED.encode(),
    "forged row, old columns": b"inj\n" + FORGED_OLD.encode(),
    "pipes": b"a|b|c",
    "tab": b"t\tab",
    "latin-1": b"r\xe9sum\xe9",
    "longest": b"y" * 1024,  # sbatch refuses a longer name ("parameter too long")
}


def _sbatch(bed, name: bytes, *extra: str) -> int:
    """bob submits a 1-GPU `sleep 1` named `name` (bytes: a name need not be UTF-8)."""
    argv = [b"runuser", b"-u", b"bob", b"--", b"sbatch", b"--parsable", b"--chdir=/tmp",
            b"-o", b"/dev/null", b"-A", b"chemistry", b"--gres=gpu:1", b"-t", b"5",
            *(e.encode() for e in extra), b"-J", name, b"--wrap", b"sleep 1"]
    out = subprocess.run(argv, env=bed.env, cwd="/tmp", capture_output=True, timeout=30, check=True)
    return int(out.stdout.decode().strip().split(";")[0])


def _sacct_ids(bed, since: float) -> set[str]:
    """JobIDs as `sacct -X` lists them (one column, nothing a user typed)."""
    out = bed.run("sacct", "-a", "-X", "-n", "--parsable2", "-o", "JobID", "-S",
                  slurm_stamp(since)).stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


@pytest.fixture
def hostile_jobs(slurm_testbed):
    """bob's finished jobs with every hostile name; yields (since, their ids)."""
    bed = slurm_testbed
    since = time.time() - 5
    done = {_sbatch(bed, name) for name in NAMES.values()}
    deadline = time.time() + 90
    while not done <= {int(j) for j in _finished(bed, since)}:
        assert time.time() < deadline, "the hostile jobs did not finish"
        time.sleep(1)
    return since, {str(j) for j in done}


@pytest.fixture
def held_latin1(slurm_testbed):
    """bob's job with a Latin-1 name, held in the queue (squeue prints the name's bytes raw)."""
    held = _sbatch(slurm_testbed, NAMES["latin-1"], "-H")
    try:
        yield str(held)
    finally:
        slurm_testbed.run("scancel", str(held))


def _finished(bed, since: float) -> list[str]:
    out = bed.run("sacct", "-a", "-X", "-n", "--parsable2", "-o", "JobID,State", "-S",
                  slurm_stamp(since)).stdout
    return [j for j, _, st in (line.partition("|") for line in out.splitlines())
            if st.strip() == "COMPLETED"]


def test_job_names_can_neither_forge_nor_hide_rows(slurm_testbed, hostile_jobs):
    bed = slurm_testbed
    since, done = hostile_jobs
    jobs = read_jobs(SlurmConnector(bed.include, bed.conf).sacct_rows(since, time.time() + 5))
    ids = set(jobs.job_id.tolist())
    # exactly the jobs Slurm has (sacct -X: one column of job ids)
    assert ids == _sacct_ids(bed, since) and done <= ids
    assert "4242" not in ids and jobs.malformed == 0
    for k, j in enumerate(jobs.job_id.tolist()):
        if j in done:
            assert (jobs.user[k], jobs.account[k], jobs.gpus[k], jobs.finished[k]) == (
                "bob", "chemistry", 1, True)


def test_a_queued_job_named_in_latin1_is_read(slurm_testbed, hostile_jobs, held_latin1):
    bed, held = slurm_testbed, held_latin1
    since, done = hostile_jobs
    jobs = read_jobs(SlurmConnector(bed.include, bed.conf).sacct_rows(since, time.time() + 5))
    ids = set(jobs.job_id.tolist())
    # exactly the jobs Slurm has (sacct -X: one column of job ids), the held one from squeue
    assert ids == _sacct_ids(bed, since) | {held} and done | {held} <= ids
    assert "4242" not in ids and jobs.malformed == 0
    for k, j in enumerate(jobs.job_id.tolist()):
        if j in done | {held}:
            assert (jobs.user[k], jobs.account[k], jobs.gpus[k]) == ("bob", "chemistry", 1)
            assert jobs.finished[k] == (j != held)


def test_agent_step_and_slurm_history_keep_only_real_jobs(slurm_testbed, hostile_jobs,
                                                          held_latin1, tmp_path):
    bed, held = slurm_testbed, held_latin1
    since, done = hostile_jobs
    before = bed.include.read_text()
    try:
        init_agent(tmp_path / "st", slurm_settings(bed))
        env = dict(bed.env, PYTHONPATH=SRC)
        step = subprocess.run([AUTOSCHED, "agent", "step", "--state", str(tmp_path / "st")],
                              env=env, capture_output=True, text=True, timeout=120)
        assert step.returncode == 5 and "Traceback" not in step.stderr, step.stderr
        assert "too little history" in step.stdout and "0 malformed sacct rows" in step.stdout
        cached = (tmp_path / "st" / HISTORY_FILE).read_text().splitlines()
        assert not [line for line in cached if line.startswith("4242|")]
        assert done | {held} <= {line.split("|", 1)[0] for line in cached[1:]}
        for out in ("h.csv", "h.txt"):
            got = subprocess.run([AUTOSCHED, "slurm", "history", "--since", "1h", "--out",
                                  str(tmp_path / out)], env=env, capture_output=True, text=True,
                                 timeout=120)
            assert got.returncode == 0 and "Traceback" not in got.stderr, got.stderr
            rows = (tmp_path / out).read_text().splitlines()
            assert not [r for r in rows if r.startswith("4242")], out
            assert "0 malformed sacct row(s) skipped" in got.stdout
        # the .txt keeps the held job's row: nothing says it was dropped
        assert held in {r.split("|", 1)[0] for r in (tmp_path / "h.txt").read_text().splitlines()}
        assert "never started" not in got.stderr and "dropped" not in got.stderr
    finally:
        bed.include.write_text(before)
        bed.reconfigure()


def test_a_cache_fetched_with_other_columns_is_fetched_again(slurm_testbed, hostile_jobs,
                                                             tmp_path):
    """An agent that ran an older autosched has JobName in its history.sacct, with the rows a
    name forged: the cache is not merged into but fetched again."""
    bed = slurm_testbed
    since, done = hostile_jobs
    before = bed.include.read_text()
    try:
        agent = init_agent(tmp_path / "st", slurm_settings(bed))
        old = "|".join(OLD_FIELDS) + "\n" + FORGED_OLD + "\n"
        (tmp_path / "st" / HISTORY_FILE).write_text(old)
        (tmp_path / "st" / "fetched.json").write_text(f'{{"until": {time.time() - 1}}}')
        jobs = agent.view.jobs(time.time())
        assert "4242" not in jobs.job_id.tolist() and done <= set(jobs.job_id.tolist())
        assert "4242|" not in (tmp_path / "st" / HISTORY_FILE).read_text()
    finally:
        bed.include.write_text(before)
        bed.reconfigure()
