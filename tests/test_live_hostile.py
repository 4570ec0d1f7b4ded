"""Hostile inputs of the live layer, through the real command line: a slurm.conf that is a FIFO or
not text, a store row that cannot be read, another program's database in place of the store.
Each ends in one line naming the file (or the revision) with exit code 2, never a hang or a
traceback; nothing the agent keeps is changed."""

from __future__ import annotations

import os
import sqlite3
import subprocess

import pytest

from autosched.live.store import RevisionState, RevisionStore
from service_kit import AUTOSCHED, SRC, seed

ENV = {**os.environ, "PYTHONPATH": SRC}


def agent(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`autosched agent ARGS` in its own process (a hang is a failure after `timeout` s)."""
    return subprocess.run([AUTOSCHED, "agent", *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV, stdin=subprocess.DEVNULL)


@pytest.fixture
def conf_dir(tmp_path):
    """A slurm.conf that includes autosched.conf beside it, in its own directory."""
    d = tmp_path / "etc"
    d.mkdir()
    (d / "slurm.conf").write_text(f"ClusterName=test\nInclude {d / 'autosched.conf'}\n")
    return d


def test_init_refuses_a_fifo_slurm_conf_at_once(tmp_path, conf_dir):
    fifo = conf_dir / "fifo.conf"
    os.mkfifo(fifo)
    r = agent("init", "--state", str(tmp_path / "s"), "--slurm-conf", str(fifo),
              "--include", str(conf_dir / "autosched.conf"))
    assert r.returncode == 2
    assert r.stderr == (f"error: {fifo}: is a FIFO (named pipe), not a regular file; expected a "
                        "slurm.conf\n")


def test_init_refuses_a_slurm_conf_that_is_not_utf8(tmp_path, conf_dir):
    bad = conf_dir / "slurm.conf"
    bad.write_bytes(b"ClusterName=test\n\xff\xfe\nInclude " + str(conf_dir / "autosched.conf")
                    .encode() + b"\n")
    r = agent("init", "--state", str(tmp_path / "s"), "--slurm-conf", str(bad))
    assert r.returncode == 2
    assert r.stderr == f"error: {bad}: not UTF-8 text (byte 17); expected a slurm.conf\n"


def test_step_says_which_slurm_conf_is_not_a_file(tmp_path, conf_dir):
    """slurm.conf replaced by a FIFO after init: no Slurm command is run (one would block on it,
    or fail in its own words), the round is blocked (exit 5: not something time ends, so `agent
    run` goes on a period later) and says which file."""
    conf = conf_dir / "slurm.conf"
    r = agent("init", "--state", str(tmp_path / "s"), "--slurm-conf", str(conf))
    assert r.returncode == 0, r.stderr
    conf.unlink()
    os.mkfifo(conf)
    r = agent("step", "--state", str(tmp_path / "s"))
    assert r.returncode == 5, r.stderr
    assert r.stdout == (f"blocked: cannot read the live settings: {conf}: is a FIFO (named pipe), "
                        "not a regular file; expected a slurm.conf\n")
    store = RevisionStore(tmp_path / "s")
    assert store.history() == []  # no baseline recorded from a blind read
    assert store.flags().blocked == r.stdout[len("blocked: "):-1]


def _poke(store: RevisionStore, sql: str) -> None:
    with sqlite3.connect(store.path) as db:
        db.execute(sql)


@pytest.mark.parametrize("sql, why", [
    ("UPDATE revisions SET config = '{not json' WHERE id = 2",
     "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
    ("INSERT INTO events (rev_id, time, state, actor, note) VALUES (2, 1, 'bogus', 'x', '')",
     "'bogus' is not a valid RevisionState"),
])
@pytest.mark.parametrize("command", [["status"], ["status", "--json"], ["approve", "2"],
                                     ["reject", "2"]])
def test_an_unreadable_revision_row_is_one_line_naming_it(tmp_path, sql, why, command):
    store = seed(tmp_path / "state")
    _poke(store, sql)
    r = agent(*command, "--state", str(tmp_path / "state"))
    assert r.returncode == 2, r.stdout
    assert r.stderr == f"error: {store.path}: revision 2 cannot be read: {why}\n"


def test_a_foreign_database_is_refused_not_adopted(tmp_path):
    path = tmp_path / "s" / "state.db"
    path.parent.mkdir()
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
        db.execute("INSERT INTO customers VALUES (1, 'ada')")
    with pytest.raises(Exception, match=r"state.db: an SQLite database of something else "
                                        r"\(application id 0, tables customers\)"):
        RevisionStore(tmp_path / "s")
    with sqlite3.connect(path) as db:
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["customers"]
        assert db.execute("PRAGMA application_id").fetchone()[0] == 0
    # another program's application id, even with tables named like ours
    other = tmp_path / "o" / "state.db"
    other.parent.mkdir()
    with sqlite3.connect(other) as db:
        db.execute("PRAGMA application_id = 42")
        db.execute("CREATE TABLE revisions (id INTEGER)")
        db.execute("CREATE TABLE events (id INTEGER)")
    with pytest.raises(Exception, match=r"application id 42, tables events, revisions"):
        RevisionStore(tmp_path / "o")


def test_a_store_is_marked_as_ours_and_reopens(tmp_path):
    from autosched.live.storefile import APPLICATION_ID

    store = seed(tmp_path / "state")
    with sqlite3.connect(store.path) as db:
        assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert [r.id for r in RevisionStore(tmp_path / "state").history()] == [2, 1]
    # a store of an earlier version (application id 0, our tables) is adopted and marked
    with sqlite3.connect(store.path) as db:
        db.execute("PRAGMA application_id = 0")
    assert [r.id for r in RevisionStore(tmp_path / "state").history()] == [2, 1]
    with sqlite3.connect(store.path) as db:
        assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    # an empty file (as `touch state.db` leaves) is a new store
    empty = tmp_path / "new" / "state.db"
    empty.parent.mkdir()
    empty.touch()
    assert RevisionStore(empty.parent).history() == []


def test_a_huge_revision_id_is_no_revision(tmp_path):
    from autosched.live.errors import UnknownRevision

    store = seed(tmp_path / "state")
    for rev_id in (10**20, 2**63, 0, -1):
        with pytest.raises(UnknownRevision, match=f"no revision {rev_id} in "):
            store.get(rev_id)
    assert store.get(2**0 + 1).id == 2
    assert [r.id for r in store.history(10**20)] == [2, 1]


def test_round_counts_by_action(tmp_path):
    store = RevisionStore(tmp_path / "s")
    assert store.round_counts() == {}
    for action in ("proposed", "wait", "wait", "blocked"):
        store.record_round({"action": action, "why": ""})
    store.record_round({"why": "no action key"})
    with sqlite3.connect(store.path) as db:
        db.execute("INSERT INTO rounds (time, summary) VALUES (1, 'not json')")
    assert store.round_counts() == {"proposed": 1, "wait": 2, "blocked": 1, "": 2}


def test_a_round_refuses_a_store_that_status_refuses(tmp_path):
    """A revision whose newest event has a state the store does not know: `agent status` named
    it, but `agent step` went on and proposed revision 3, beside revision 2."""
    store = seed(tmp_path / "state")
    store.transition(2, RevisionState.REJECTED, actor="operator:x")
    _poke(store, "INSERT INTO events (rev_id, time, state, actor, note) VALUES "
                 "(2, 9e9, 'bogus_state', 'x', '')")
    r = agent("step", "--state", str(tmp_path / "state"))
    assert r.returncode == 5, (r.stdout, r.stderr)
    assert r.stdout.startswith(f"blocked: cannot read the revision store: {store.path}: revision "
                               "2 cannot be read: 'bogus_state' is not a valid RevisionState")
    assert store.newest_id() == 2  # nothing proposed beside it
