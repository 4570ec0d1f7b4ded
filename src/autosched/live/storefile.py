"""The store's file: one SQLite database, ``state.db`` in the agent's state directory, shared by
every process that acts on the cluster (the agent's loop, ``autosched agent ...`` commands, the
HTTP service). The tables on it are kept by `RoundLog` (live/roundlog.py) and `RevisionStore`
(live/store.py); this module opens it, checks it is the agent's, and brings its schema up to date.

Concurrency: WAL (readers never wait for the writer), a busy timeout, and ``BEGIN IMMEDIATE`` for
every write that first checks a state, so that check-then-append is atomic across processes. Each
call opens its own short connection, which keeps the store safe to use from several threads too.

The schema is versioned (``PRAGMA user_version``): a store written by an older version is brought
up to date when it is opened, in one transaction (a process killed midway leaves it as it was).
A store is marked as autosched's (``PRAGMA application_id``); an SQLite database of something else
in its place is refused, never adopted (no table is created in it), as tuning refuses a study
file that is another program's database.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import LiveError

BUSY_TIMEOUT_S = 30.0
APPLICATION_ID = 0x61757473  # "auts": PRAGMA application_id of a revision store
# Tables a store has always had: a database with tables but not these is someone else's.
_CORE_TABLES = frozenset({"revisions", "events"})

# The schema as the first version wrote it; `_MIGRATIONS` bring it to this version's.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS revisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    config TEXT NOT NULL,
    diff TEXT NOT NULL,
    parent INTEGER REFERENCES revisions(id),
    trigger TEXT NOT NULL,
    evidence TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    rev_id INTEGER NOT NULL REFERENCES revisions(id),
    time REAL NOT NULL,
    state TEXT NOT NULL,
    actor TEXT NOT NULL,
    note TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_rev ON events(rev_id, seq);
CREATE TABLE IF NOT EXISTS outcomes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    rev_id INTEGER NOT NULL REFERENCES revisions(id),
    time REAL NOT NULL,
    outcome TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS flags (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    kind TEXT NOT NULL,          -- 'freeze', 'unfreeze' or 'block' (note '' clears a block)
    actor TEXT NOT NULL,
    note TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS applies (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    rev_id INTEGER NOT NULL REFERENCES revisions(id),
    phase TEXT NOT NULL,         -- 'begin' (write-ahead intent) or 'end'
    begin_seq INTEGER,           -- for 'end': the intent it closes
    pid INTEGER NOT NULL,
    host TEXT NOT NULL,
    actor TEXT NOT NULL,
    previous TEXT NOT NULL,      -- JSON: what to restore (e.g. the include file's old text)
    note TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS rounds (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    summary TEXT NOT NULL
);
"""

# Schema version N is reached by running _MIGRATIONS[N - 1]'s statements, each version in one
# transaction together with its `user_version`. Written once, never edited: stores in the field
# were brought up to date by exactly these statements.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: a revision records its kind; rows written before it get the kind their trigger named
    # (the only place a kind is ever read from a trigger).
    ("ALTER TABLE revisions ADD COLUMN kind TEXT",
     "UPDATE revisions SET kind = CASE WHEN trigger = 'baseline' THEN 'baseline' "
     "WHEN trigger = 'adopted' THEN 'adopted' WHEN trigger LIKE 'rollback%' THEN 'rollback' "
     "ELSE 'proposal' END"),
    # 2: the controller's memory between rounds (JSON, newest wins)
    ("CREATE TABLE memory (seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, "
     "round_seq INTEGER NOT NULL REFERENCES rounds(seq), memory TEXT NOT NULL)",),
    # 3: who approved a revision and the include file's diff as it was written (and confirmed)
    ("CREATE TABLE approvals (seq INTEGER PRIMARY KEY AUTOINCREMENT, rev_id INTEGER NOT NULL "
     "REFERENCES revisions(id), time REAL NOT NULL, actor TEXT NOT NULL, include_diff TEXT NOT "
     "NULL, confirmed INTEGER NOT NULL)",),
    # 4: the hand-set live values an apply overwrote (with force); what the agent last read of
    # Slurm's settings; the heartbeat of `agent run`
    ("ALTER TABLE applies ADD COLUMN overridden TEXT NOT NULL DEFAULT '[]'",
     "CREATE TABLE observations (seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, "
     "knobs TEXT NOT NULL)",
     "CREATE TABLE heartbeats (seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, "
     "pid INTEGER NOT NULL, host TEXT NOT NULL, poll REAL NOT NULL, started REAL NOT NULL)"),
)
SCHEMA_VERSION = len(_MIGRATIONS)


class StoreFile:
    """``state_dir/state.db``, opened (created, or brought up to date) when made."""

    def __init__(self, state_dir: Path | str) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / "state.db"
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self.check_ours()
            with self._connect() as db:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(_SCHEMA)
            self._migrate()
        except sqlite3.Error as e:
            raise store_error(self.path, e) from None
        except OSError as e:
            raise LiveError(f"{self.path}: cannot open the revision store: {e}") from None

    def check_ours(self) -> None:
        """Raise `LiveError` when ``state.db`` is an SQLite database of something else: another
        program's application id, or tables without the store's own. A missing or empty file
        (a new store) and a store of any version pass; nothing is written."""
        if not self.path.exists():
            return
        with self._connect() as db:
            app_id = db.execute("PRAGMA application_id").fetchone()[0]
            tables = {r[0] for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
        if app_id not in (0, APPLICATION_ID) or (tables and not _CORE_TABLES <= tables):
            shown = ", ".join(sorted(tables)[:4]) or "none"
            raise LiveError(f"{self.path}: an SQLite database of something else (application id "
                            f"{app_id}, tables {shown}), not the agent's revision store; it is "
                            "left as it is (move it away, or give another state directory)")

    def _migrate(self) -> None:
        """Bring the schema to `SCHEMA_VERSION`, all steps in one transaction (another process
        opening the store at the same moment waits, then finds nothing left to do)."""
        with self._write() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise LiveError(f"{self.path}: written by a newer autosched (schema {version}; "
                                f"this one knows up to {SCHEMA_VERSION})")
            for statements in _MIGRATIONS[version:]:
                for sql in statements:
                    db.execute(sql)
            if version < SCHEMA_VERSION:
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            if db.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                db.execute(f"PRAGMA application_id = {APPLICATION_ID}")

    # -- connection -----------------------------------------------------------------------
    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as e:
            raise store_error(self.path, e) from None
        try:
            db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            db.execute("PRAGMA synchronous=FULL")  # a committed event survives a power cut
            db.execute("PRAGMA foreign_keys=ON")
            yield db
        except sqlite3.DatabaseError as e:  # OperationalError too
            raise store_error(self.path, e) from None
        finally:
            db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken before reading so that check-then-append is atomic."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")


# What SQLite says of a file that is not (or no longer) a whole store: written over in place,
# truncated, or a page damaged
_DAMAGED = ("file is not a database", "database disk image is malformed", "no such table")
_NO_ROOM = ("disk i/o error", "database or disk is full")


def store_error(path: Path, e: sqlite3.Error) -> LiveError:
    """One `LiveError` naming the store for what SQLite raised: a damaged store, a full disk
    (SQLite says "disk I/O error" when its journal cannot grow: the device's free space says
    which), or SQLite's own words."""
    text = str(e)
    if any(d in text.lower() for d in _DAMAGED):
        return LiveError(f"{path}: the store cannot be read ({text}): it was damaged or written "
                         "over in place; put a backup of it back, or move it away to begin a new "
                         "store")
    if any(d in text.lower() for d in _NO_ROOM) and no_space_left(path.parent):
        return LiveError(f"{path}: no space left on the device of {path.parent} (SQLite: "
                         f"{text}); free some space and try again")
    return LiveError(f"{path}: {text}")


def no_space_left(directory: Path, need: int = 1 << 20) -> bool:
    """Whether the file system of `directory` has less than `need` bytes free for its user."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < need


def json_object(text: str) -> dict[str, Any]:
    try:
        d = json.loads(text)
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}
