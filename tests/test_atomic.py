"""Every file autosched writes is replaced whole or not at all: a write that fails midway leaves
the file that was there before, and no temporary file behind."""

from __future__ import annotations

import pytest

from autosched.atomic import atomic_path, write_text_atomic
from autosched.sim.records_io import write_records
from autosched.trace import load_trace, write_trace
from simkit import make_trace, run


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half of the new")
        raise RuntimeError("disk full")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    write_text_atomic(path, "new")
    assert path.read_text() == "new" and len(list(tmp_path.iterdir())) == 1


@pytest.mark.parametrize("name", ["t.csv", "t.csv.gz", "t.parquet"])
def test_write_trace_fails_whole(tmp_path, monkeypatch, name):
    good = make_trace([(0, 1, 10), (5, 2, 20)])
    path = tmp_path / name
    write_trace(good, path)
    bad = make_trace([(0, 1, 10)])

    def broken(trace, tmp, **kwargs):  # writes part of the file, then the disk fills up
        tmp.write_text("job_id,submit_time\n")
        raise OSError("no space left on device")

    import autosched.trace.io as io

    monkeypatch.setattr(io, "_write_parquet" if name.endswith("parquet") else "_write_csv", broken)
    with pytest.raises(OSError):
        write_trace(bad, path)
    again, _ = load_trace(path)
    assert list(again.job_id) == list(good.job_id)
    assert len(list(tmp_path.iterdir())) == 1


def test_jobs_out_is_atomic_too(tmp_path, monkeypatch):
    sim = run([(0, 1, 10)], "fifo")
    path = tmp_path / "jobs.csv"
    path.write_text("previous run\n")
    import csv

    monkeypatch.setattr(csv, "writer", lambda f: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        write_records(sim.records(), sim.trace, path)
    assert path.read_text() == "previous run\n"
    assert len(list(tmp_path.iterdir())) == 1


def test_permissions_follow_the_old_file_and_links_are_written_through(tmp_path):
    import os
    import stat

    target = tmp_path / "real.json"
    target.write_text("old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_text_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    fresh = tmp_path / "fresh.txt"
    write_text_atomic(fresh, "x")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~mask
