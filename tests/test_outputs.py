"""The one rule for outputs (autosched.atomic): only regular files are written, never an
input of the same command; errors name the user's path; a write killed with SIGKILL leaves the old
file whole, and the next write to the same target removes the killed writer's temporary file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autosched.atomic import OutputError, atomic_path, check_output, output_scope, protect_inputs, write_text_atomic, writer_tag
from autosched.errors import AutoschedError
from device_kit import own_null_device

SRC = Path(__file__).resolve().parents[1] / "src"


def test_a_fifo_a_device_and_a_directory_are_refused_and_left_alone(tmp_path):
    fifo = tmp_path / "x.csv"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match=r"x\.csv: is a FIFO \(named pipe\), not a regular file"):
        write_text_atomic(fifo, "data")
    assert fifo.is_fifo()
    with pytest.raises(OutputError, match=r": is a directory, not a regular file"):
        write_text_atomic(tmp_path, "data")
    device = own_null_device(tmp_path / "null")
    link = tmp_path / "null.csv"  # a link to a device: written through, so refused
    link.symlink_to(device)
    for out in (device, link):
        with pytest.raises(OutputError, match=rf"{out.name}: is a device, not a regular file"):
            write_text_atomic(out, "data")
    assert device.is_char_device()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null", "null.csv", "x.csv"]  # no temp left


def test_an_input_of_the_command_is_never_overwritten(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("precious")
    hard = tmp_path / "hard.csv"
    os.link(trace, hard)
    link = tmp_path / "link.csv"
    link.symlink_to(trace)
    with output_scope():
        protect_inputs(trace, None, "-")
        for out in (trace, hard, link, tmp_path / "." / "trace.csv"):
            with pytest.raises(OutputError, match="is an input of this command; refusing to overwrite it"):
                write_text_atomic(out, "clobbered")
        write_text_atomic(tmp_path / "other.csv", "fine")
    assert trace.read_text() == "precious"
    write_text_atomic(trace, "now allowed")  # outside the command's scope the guard is gone
    assert trace.read_text() == "now allowed"


def test_dash_is_refused_where_a_command_does_not_stream(tmp_path):
    with pytest.raises(OutputError, match="'-' \\(standard output\\) is not accepted"):
        check_output("-")


def test_errors_name_the_users_path_not_the_temporary(tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("a file, not a directory")
    out = blocker / "out.csv"
    with pytest.raises(OutputError) as e:
        write_text_atomic(out, "x")
    assert str(e.value).startswith(f"{out}: cannot write") and ".tmp" not in str(e.value)
    target = tmp_path / "out.csv"
    with pytest.raises(OutputError) as e, atomic_path(target) as tmp:
        tmp.write_text("half")
        raise OSError(28, "No space left on device", str(tmp))
    assert str(e.value) == f"{target}: cannot write (No space left on device)"
    assert isinstance(e.value, AutoschedError) and isinstance(e.value, OSError)
    assert list(tmp_path.iterdir()) == [blocker]


def test_a_stale_temp_of_a_dead_writer_is_removed_and_a_live_ones_kept(tmp_path):
    target = tmp_path / "out.csv"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)  # exited and reaped: no process has this PID now (or soon)
    stale = tmp_path / f".out.csv.{writer_tag(dead_pid)}.abc123.tmp"
    live = tmp_path / f".out.csv.{writer_tag(os.getppid())}.def456.tmp"  # our parent runs
    remote = tmp_path / f".out.csv.{dead_pid}@elsewhere.ghi789.tmp"  # another host's writer (NFS)
    other = tmp_path / ".out.csv.notapid.tmp"  # not named by autosched: left alone
    for p in (stale, live, remote, other):
        p.write_text("half")
    write_text_atomic(target, "whole")
    assert target.read_text() == "whole"
    assert not stale.exists() and live.exists() and remote.exists() and other.exists()


WRITER = textwrap.dedent("""
    import sys, time
    from autosched.atomic import atomic_path
    with atomic_path(sys.argv[1]) as tmp:
        with open(tmp, "w") as f:
            f.write("half of the new content\\n" * 1000)
            f.flush()
            print("writing", flush=True)
            time.sleep(60)  # killed here
""")


def test_kill_9_mid_write_keeps_the_old_file_and_the_next_write_cleans_up(tmp_path):
    target = tmp_path / "best.json"
    target.write_text("old and whole\n")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "writing"  # blocks until the temp file is half written
        temps = list(tmp_path.glob(".best.json.*.tmp"))
        assert [t.name.split(".")[3] for t in temps] == [writer_tag(proc.pid)]  # the writer's PID is in the name
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert target.read_text() == "old and whole\n"
    assert temps[0].exists()  # what the killed write left behind
    # the next write (another process, as a user would run the command again) removes it
    subprocess.run([sys.executable, "-c", "import sys; from autosched.atomic import write_text_atomic; "
                    "write_text_atomic(sys.argv[1], 'new\\n')", str(target)], env=env, check=True, timeout=60)
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.json"]
