"""How the agent reads Slurm's client commands when they misbehave, with fake `scontrol`,
`sacct`, `squeue` and `sacctmgr` first on PATH (the real cluster's hostile job names are in
test_live_slurm_hostile.py): output that never ends is cut at a cap, bytes that are not UTF-8
are read, a fake cluster's state file that is not one is named, and a symbolic link loop given to
`agent init` is one line. Each ends in a result or one `error:` line with exit code 2."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from autosched.live.errors import LiveError
from autosched.live.fake import FakeConnector
from autosched.live.history import read_jobs
from autosched.live.slurm import MAX_OUTPUT_BYTES, OutputTooLarge, SlurmRunner
from live_helpers import HEADER, PINNED_NOW, contended, row
from service_kit import AUTOSCHED, SRC

CONFIG = "ClusterName=test\nPriorityWeightAge=1000\nSchedulerParameters=bf_window=1440\n"
NODES = "NodeName=n1 Gres=gpu:8 Partitions=gpu\n"
PARTS = "PartitionName=gpu Default=YES PriorityTier=1\n"
ASSOC = "Account|User|Par Name|Share\n"
QOS = "Name|Priority\nnormal|0\n"


def fake_slurm(tmp_path: Path, **override: str) -> dict[str, str]:
    """A bin directory of fake Slurm clients, each printing a fixed text (or running the shell
    line in `override`, keyed by what it answers: config, node, partition, assoc, qos, sacct,
    squeue); returns the environment that puts it first on PATH with a slurm.conf."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    texts = {"config": CONFIG, "node": NODES, "partition": PARTS, "assoc": ASSOC, "qos": QOS,
             "sacct": HEADER + "\n", "squeue": "", "reconfigure": ""}
    data = tmp_path / "out"
    data.mkdir()
    for k, text in texts.items():
        (data / k).write_text(text)

    def line(key: str) -> str:
        return override.get(key, f"cat {data / key}")

    scripts = {
        # (reconfigure first: it holds "config")
        "scontrol": f'case "$*" in *reconfigure*) {line("reconfigure")};; *config*) '
                    f'{line("config")};; *node*) {line("node")};; *partition*) '
                    f'{line("partition")};; esac',
        "sacctmgr": f'case "$*" in *assoc*) {line("assoc")};; *qos*) {line("qos")};; esac',
        "sacct": line("sacct"), "squeue": line("squeue")}
    for name, body in scripts.items():
        p = bin_dir / name
        p.write_text(f"#!/bin/sh\n{body}\n")
        p.chmod(0o755)
    conf = tmp_path / "slurm.conf"
    conf.write_text(f"ClusterName=test\nInclude {tmp_path / 'autosched.conf'}\n")
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_CONF": str(conf),
            "PYTHONPATH": SRC}


def autosched(env: dict[str, str], *args: str, limit_kb: int | None = None,
              timeout: float = 120) -> subprocess.CompletedProcess[str]:
    argv = [AUTOSCHED, *args]
    if limit_kb is not None:  # a bound on the process's memory: a runaway read ends in MemoryError
        argv = ["sh", "-c", f'ulimit -v {limit_kb}; exec "$@"', "sh", *argv]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def init(env: dict[str, str], state: Path) -> None:
    r = autosched(env, "agent", "init", "--state", str(state), "--timeout", "20")
    assert r.returncode == 0, r.stderr


def test_a_command_that_keeps_printing_is_stopped_at_its_cap(tmp_path):
    """`scontrol show node` printing forever: the twin's read stops at 64 MiB with one line
    naming the command, in a process held to 1.5 GB (before, it grew to 5 GB in 30 s)."""
    env = fake_slurm(tmp_path, node='exec yes "NodeName=n1 Gres=gpu:8 Partitions=gpu"')
    init(env, tmp_path / "st")
    r = autosched(env, "agent", "twin", "--state", str(tmp_path / "st"), limit_kb=1_500_000)
    assert r.returncode == 2, r.stderr
    assert r.stderr == (f"error: `scontrol show node -o` printed more than {MAX_OUTPUT_BYTES:,} "
                        "bytes, more than it prints on any cluster autosched can tune; stopped it\n")


def test_runner_cap_kills_what_the_command_started(tmp_path):
    """The cap ends the command's whole process group: a child it forked stops printing too."""
    pidfile = tmp_path / "pid"
    r = SlurmRunner(timeout=20, retries=0)
    with pytest.raises(OutputTooLarge):
        r.run(["sh", "-c", f"yes x & echo $! > {pidfile}; wait"])
    pid = int(pidfile.read_text())
    # SIGKILLed with its group: gone, or a zombie of its reaped parent
    assert not os.path.exists(f"/proc/{pid}") or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_bytes_that_are_not_utf8_are_read_and_a_history_row_with_them_counted(tmp_path):
    """A Latin-1 ClusterName from `scontrol show config` and a Latin-1 row from sacct: the twin
    is read (the name with U+FFFD), the row skipped and counted as not UTF-8."""
    data = tmp_path / "latin"
    data.mkdir()
    (data / "config").write_bytes(b"ClusterName=r\xe9sum\xe9\nPriorityWeightAge=1000\n")
    now = PINNED_NOW
    good = row("1", now - 600, now - 590, now - 500, 2)
    (data / "sacct").write_bytes(f"{HEADER}\n{good}\n".encode()
                                 + row("2", now - 600, now - 590, now - 500, 2).encode()
                                 .replace(b"alice", b"al\xefce") + b"\n")
    env = fake_slurm(tmp_path, config=f"cat {data / 'config'}", sacct=f"cat {data / 'sacct'}")
    init(env, tmp_path / "st")
    r = autosched(env, "agent", "twin", "--state", str(tmp_path / "st"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("twin of slurm cluster r\ufffdsum\ufffd: ")
    assert "warning: 1 malformed sacct row(s) skipped" in r.stdout
    runner = SlurmRunner(timeout=10, retries=0)
    text = runner.run(["cat", str(data / "sacct")])
    jobs = read_jobs(text)
    assert jobs.job_id.tolist() == ["1"] and jobs.malformed == 1
    assert [d.rule for d in jobs.report.drops.values()] == ["row is not UTF-8 text"]


def test_a_clock_before_the_history_counts_every_row_from_the_future(tmp_path):
    """With the fake clock at 0, every job was submitted 56 years after now: each is a
    malformed row, counted (not "0 malformed" over a history of none)."""
    fake = FakeConnector.create(tmp_path / "fk", sacct=contended(PINNED_NOW), nodes=1)
    fake.update(clock=0)
    env = {**os.environ, "PYTHONPATH": SRC}
    r = autosched(env, "agent", "init", "--state", str(tmp_path / "st"), "--fake",
                  str(tmp_path / "fk"), "--period", "10m", "--history", "1h", "--min-jobs", "10",
                  "--model", "replay")
    assert r.returncode == 0, r.stderr
    r = autosched(env, "agent", "step", "--state", str(tmp_path / "st"))
    assert r.returncode == 5, r.stderr
    assert "history: 0 jobs (0 finished), 60 malformed sacct rows skipped" in r.stdout
    # a job submitted during the round's own reads (seconds after its now) is no fault
    text = contended(PINNED_NOW)
    assert read_jobs(text, until=PINNED_NOW).malformed == 0 < len(read_jobs(text))
    # jobs come every 1,100/60 s from now - 1,200 s: 11 by now - 1,000, 49 after
    jobs = read_jobs(text, until=PINNED_NOW - 1000)
    assert jobs.malformed == 49 and [d.rule for d in jobs.report.drops.values()] == [
        "submitted after now (a future date)"]


@pytest.mark.parametrize("content, why", [
    ("garbage", "not a fake cluster's state: Expecting value"),
    ("{}", "not a fake cluster's state: base, live, down, fail_reconfigure, ignore, setup, sacct "
           "missing or of the wrong type"),
    ('{"base": 1}', "base, live, down"),
])
def test_a_fake_clusters_state_that_is_not_one_is_named(tmp_path, content, why):
    FakeConnector.create(tmp_path / "fk", sacct=contended(PINNED_NOW), nodes=1)
    env = {**os.environ, "PYTHONPATH": SRC}
    r = autosched(env, "agent", "init", "--state", str(tmp_path / "st"), "--fake",
                  str(tmp_path / "fk"))
    assert r.returncode == 0, r.stderr
    (tmp_path / "fk" / "fake.json").write_text(content)
    r = autosched(env, "agent", "step", "--state", str(tmp_path / "st"))
    assert r.returncode == 2 and r.stderr.startswith(f"error: {tmp_path / 'fk' / 'fake.json'}: ")
    assert why in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


@pytest.mark.parametrize("option", ["--fake", "--slurm-conf", "--seed-history", "--include"])
def test_a_symlink_loop_given_to_init_is_one_line(tmp_path, option):
    loop = tmp_path / "selfloop"
    loop.symlink_to("selfloop")
    env = fake_slurm(tmp_path)
    r = autosched(env, "agent", "init", "--state", str(tmp_path / "st"), option, str(loop))
    assert r.returncode == 2
    assert r.stderr == f"error: {loop}: too many levels of symbolic links\n"
    assert not (tmp_path / "st").exists()


def test_runner_errors_stay_typed(tmp_path):
    r = SlurmRunner(timeout=10, retries=0)
    assert r.run(["printf", "a\\351b"]) == "a\ufffdb"
    with pytest.raises(LiveError, match=r"failed \(exit 3\): last"):
        r.run(["sh", "-c", "echo first >&2; echo last >&2; exit 3"])


def test_a_failure_says_slurms_own_words_and_a_restore_what_is_back(tmp_path):
    """"`scontrol show config` failed (exit 1): exit status 1" lost Slurm's message (printed on
    stdout); "restoring the previous ... also failed" was said when only the reconfigure had."""
    from autosched.live.slurm import SlurmConnector

    r = SlurmRunner(timeout=10, retries=0)
    with pytest.raises(LiveError, match=r"failed \(exit 1\): slurm_load_ctl_conf error: Zero Bytes"):
        r.run(["sh", "-c", "echo 'slurm_load_ctl_conf error: Zero Bytes'; exit 1"])
    env = fake_slurm(tmp_path, reconfigure="echo 'scontrol: error: no answer' >&2; exit 1")
    os.environ["PATH"], old = env["PATH"], os.environ["PATH"]
    try:
        inc = tmp_path / "autosched.conf"
        conn = SlurmConnector(inc, env["SLURM_CONF"], SlurmRunner(env["SLURM_CONF"], retries=0))
        with pytest.raises(LiveError) as e:
            conn.restore({"include": "PriorityWeightAge=7\n"})
    finally:
        os.environ["PATH"] = old
    assert str(e.value) == (f"{inc} is back as it was, but Slurm has not re-read it: `scontrol "
                            "reconfigure` failed (exit 1): scontrol: error: no answer")
    assert inc.read_text() == "PriorityWeightAge=7\n"
