"""The revision store: every proposal and revision of the live config, append-only, in SQLite.

One file, ``state.db`` in the agent's state directory, shared by every process that acts on the
cluster (the agent's loop, ``autosched agent ...`` commands, the HTTP service). Nothing is ever
updated in place: a revision is written once, and each change of its state is a new event row;
freeze/unfreeze, "blocked" notes, outcomes and apply intents are rows too, the newest winning.
So a process killed at any moment leaves rows that are either fully there (one transaction) or
absent, and the history of who did what stays readable.

Concurrency: WAL (readers never wait for the writer), a busy timeout, and ``BEGIN IMMEDIATE`` for
every write that first checks a state (approve only a proposal, one apply at a time), so two
processes cannot both act on the same proposal. Each call opens its own short connection, which
keeps the store safe to use from several threads too.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

from ..jsonable import jsonable
from .errors import ActionNotAllowed, LiveError, UnknownRevision

BUSY_TIMEOUT_S = 30.0

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


class RevisionState(str, Enum):
    """The state of a revision; the values are what JSON and the status page show."""

    PROPOSED = "proposed"
    APPLIED = "applied"
    REJECTED = "rejected"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


@dataclass(frozen=True)
class Event:
    """One append-only state change of a revision."""

    time: float  # unix seconds
    state: RevisionState
    actor: str  # "operator:alice", "agent:auto", "agent:guard", "service:token", ...
    note: str  # why

    def to_dict(self) -> dict[str, Any]:
        return {"time": self.time, "state": self.state.value, "actor": self.actor, "note": self.note}


# -- what a revision's evidence and outcome hold ----------------------------------------------
# The store keeps both as JSON objects (``revisions.evidence``, ``outcomes.outcome``) and
# `Revision` hands them out as dicts, so rows written by any version stay readable. These
# dataclasses are the one written-down contract for their keys: the agent writes through
# `to_dict`, and the service, the status page and the CLI read through `from_dict`. A field's
# name IS its JSON key; renaming one breaks every stored revision.


def _finite(v: Any) -> float | None:
    """A JSON number as a float; None for null, a non-number or a non-finite value."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


@dataclass(frozen=True)
class Evidence:
    """Why the agent proposed a revision: the tuning round's figures, recorded with the revision
    when it is created (live/agent.py). Revisions made otherwise (the baseline found live, an
    adopted config, a rollback: see `RollbackEvidence`) carry other or no evidence; reading theirs
    gives every field None. A gain is relative (0.05 = 5% better), on `metric`."""

    predicted_gain: float | None = None  # mean paired gain of the candidate over the running config
    spread: float | None = None  # standard error of that mean over the sampled workloads
    samples: int | None = None  # workloads the tuner evaluated on
    validation_samples: int | None = None  # fresh workloads the guardrail checked on (0: none)
    tuning_cost: dict[str, Any] | None = None  # as the tuner reports it (trials, simulations, ...)
    causal_graph: list[Any] | None = None  # [source, target, directed] edges of screening
    screened_knobs: dict[str, Any] | None = None  # knob frozen by screening -> its value
    metric: str | None = None  # what the gain is measured on (e.g. "avg_jct")
    running_value: float | None = None
    candidate_value: float | None = None
    reason: str | None = None  # the controller's words for its decision
    tuning_seconds: float | None = None
    history_jobs: int | None = None  # jobs of the cluster's history the round saw
    imputed_durations: int | None = None  # of those, unfinished ones given an imputed duration
    history_origin: float | None = None  # unix time the observation's times count from
    model: str | None = None  # the workload source ("replay" or a model's name)

    def to_dict(self) -> dict[str, Any]:
        """Every field under its own name, None included (the stored JSON has every key)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Evidence:
        """Any revision's stored evidence: missing keys are None, unknown keys are ignored, and
        the gains are None unless they are finite numbers."""
        d = d or {}
        known = {f.name: d.get(f.name) for f in fields(cls)}
        known["predicted_gain"] = _finite(known["predicted_gain"])
        known["spread"] = _finite(known["spread"])
        return cls(**known)


@dataclass(frozen=True)
class RollbackEvidence:
    """The evidence of a rollback's revision: which running revision it replaced, and which
    earlier revision's config it brings back."""

    rollback_of: int
    to: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Outcome:
    """What happened in the period after a revision was applied, recorded once by the agent's
    judge (live/agent.py) against the period before it. `observed_gain` is None (and absent from
    the stored JSON) when the revision was not judged: no finished jobs in one of the periods."""

    metric: str  # what was compared (the agent's metric, or avg_jct when that was not measured)
    before: dict[str, Any]  # the period before: `period_metrics(...).to_dict()`
    after: dict[str, Any]  # the period after
    predicted_gain: float | None  # copied from the revision's `Evidence`, to set beside it
    verdict: str  # "kept: ...", "worse: ...; rolled back" or "not judged: ..."
    observed_gain: float | None = None  # relative: (before - after) / |before|, 0.05 = 5% better

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"metric": self.metric, "before": self.before, "after": self.after,
                             "predicted_gain": self.predicted_gain, "verdict": self.verdict}
        if self.observed_gain is not None:
            d["observed_gain"] = self.observed_gain
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Outcome | None:
        """A revision's stored outcome (None when it has none); missing keys read as empty."""
        if not d:
            return None
        return cls(metric=str(d.get("metric") or ""), before=dict(d.get("before") or {}),
                   after=dict(d.get("after") or {}),
                   predicted_gain=_finite(d.get("predicted_gain")),
                   verdict=str(d.get("verdict") or ""),
                   observed_gain=_finite(d.get("observed_gain")))


@dataclass(frozen=True)
class Revision:
    """One managed live config, as proposed or applied, with its evidence and its history."""

    id: int
    created: float
    config: dict[str, Any]  # the FULL managed live config (Slurm names -> values)
    diff: dict[str, tuple[Any, Any]]  # knob -> (value before, value after), vs `parent`
    parent: int | None  # revision running when this one was made
    trigger: str  # "baseline", "period", "drift: ...", "rollback to 3", "manual"
    evidence: dict[str, Any]  # as stored; read it with `Evidence.from_dict`
    events: tuple[Event, ...]  # oldest first
    outcome: dict[str, Any] | None = None  # one period after applying; `Outcome.from_dict`

    @property
    def state(self) -> RevisionState:
        return self.events[-1].state

    def applied_at(self) -> float | None:
        """When this revision last went live (None if it never did)."""
        times = [e.time for e in self.events if e.state is RevisionState.APPLIED]
        return times[-1] if times else None

    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "id": self.id, "created": self.created, "state": self.state.value,
            "config": self.config, "diff": {k: list(v) for k, v in self.diff.items()},
            "parent": self.parent, "trigger": self.trigger, "evidence": self.evidence,
            "events": [e.to_dict() for e in self.events], "outcome": self.outcome,
        })


@dataclass(frozen=True)
class Flags:
    """The agent's switches: frozen by an operator (kill switch), or blocked by what it saw."""

    frozen: bool = False
    frozen_reason: str = ""
    frozen_by: str = ""
    blocked: str = ""  # "" or why the agent will not propose (hand edit, Slurm down, ...)

    def to_dict(self) -> dict[str, Any]:
        return {"frozen": self.frozen, "frozen_reason": self.frozen_reason,
                "frozen_by": self.frozen_by, "blocked": self.blocked}


@dataclass(frozen=True)
class ApplyIntent:
    """A write-ahead record: an apply of `rev_id` began; `previous` says what to restore."""

    seq: int
    time: float
    rev_id: int
    pid: int
    host: str
    actor: str
    previous: dict[str, Any] = field(default_factory=dict)

    def owner_alive(self) -> bool:
        """Whether the process that began the apply still runs (on this host)."""
        if self.host != socket.gethostname():
            return True  # cannot tell: assume it does
        if self.pid == os.getpid():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class RevisionStore:
    """The revisions of one cluster's managed config, in ``state_dir/state.db``."""

    def __init__(self, state_dir: Path | str) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / "state.db"
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            with self._connect() as db:
                db.execute("PRAGMA journal_mode=WAL")
                db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as e:
            raise LiveError(f"{self.path}: cannot open the revision store: {e}") from None

    # -- connection -----------------------------------------------------------------------
    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as e:
            raise LiveError(f"{self.path}: cannot open the revision store: {e}") from None
        try:
            db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            db.execute("PRAGMA synchronous=FULL")  # a committed event survives a power cut
            db.execute("PRAGMA foreign_keys=ON")
            yield db
        except sqlite3.OperationalError as e:
            raise LiveError(f"{self.path}: {e}") from None
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

    # -- reading --------------------------------------------------------------------------
    def get(self, rev_id: int) -> Revision:
        with self._connect() as db:
            return self._get(db, rev_id)

    def history(self, limit: int | None = None) -> list[Revision]:
        """Revisions, newest first."""
        with self._connect() as db:
            q = "SELECT id FROM revisions ORDER BY id DESC"
            ids = [r[0] for r in db.execute(q + (" LIMIT ?" if limit else ""),
                                             (limit,) if limit else ())]
            return [self._get(db, i) for i in ids]

    def running(self) -> Revision | None:
        """The revision whose config is live now: the one applied last."""
        with self._connect() as db:
            return self._running(db)

    def pending(self) -> Revision | None:
        """The open proposal, if any (there is at most one)."""
        with self._connect() as db:
            return self._pending(db)

    def flags(self) -> Flags:
        with self._connect() as db:
            return self._flags(db)

    def open_apply(self) -> ApplyIntent | None:
        """The apply that began and has not ended (its process may have died), if any."""
        with self._connect() as db:
            return self._open_apply(db)

    def last_round(self) -> tuple[float, dict[str, Any]] | None:
        """When the agent last ran a round, and what it found."""
        with self._connect() as db:
            row = db.execute("SELECT time, summary FROM rounds ORDER BY seq DESC LIMIT 1").fetchone()
        return (row[0], json.loads(row[1])) if row else None

    def rounds(self, limit: int = 20) -> list[tuple[float, dict[str, Any]]]:
        """The agent's last rounds, newest first."""
        with self._connect() as db:
            rows = db.execute("SELECT time, summary FROM rounds ORDER BY seq DESC LIMIT ?",
                              (limit,)).fetchall()
        return [(t, json.loads(s)) for t, s in rows]

    # -- writing --------------------------------------------------------------------------
    def create(self, config: Mapping[str, Any], *, trigger: str, actor: str, note: str = "",
               evidence: Mapping[str, Any] | None = None,
               state: RevisionState = RevisionState.PROPOSED,
               parent: int | None | str = "running") -> Revision:
        """A new revision, its diff taken against `parent` (by default the running revision).

        Only one proposal may be open at a time: creating a second raises `ActionNotAllowed`."""
        with self._write() as db:
            if state is RevisionState.PROPOSED and (p := self._pending(db)) is not None:
                raise ActionNotAllowed(f"revision {p.id} is already proposed; approve or reject "
                                       "it first")
            if parent == "running":
                run = self._running(db)
                parent_id = run.id if run else None
            else:
                parent_id = int(parent) if parent is not None else None
            base = self._get(db, parent_id).config if parent_id is not None else {}
            config = jsonable(dict(config))
            diff = {k: [base.get(k), v] for k, v in config.items() if base.get(k) != v}
            diff.update({k: [v, None] for k, v in base.items() if k not in config})
            now = time.time()
            cur = db.execute(
                "INSERT INTO revisions (created, config, diff, parent, trigger, evidence) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (now, json.dumps(config, sort_keys=True), json.dumps(diff, sort_keys=True),
                 parent_id, trigger, json.dumps(jsonable(dict(evidence or {})), sort_keys=True)))
            rev_id = cur.lastrowid
            if rev_id is None:
                raise LiveError(f"{self.path}: the revision just written cannot be read back")
            db.execute("INSERT INTO events (rev_id, time, state, actor, note) VALUES (?,?,?,?,?)",
                       (rev_id, now, RevisionState(state).value, actor, note))
            return self._get(db, rev_id)

    def transition(self, rev_id: int, state: RevisionState, *, actor: str, note: str = "",
                   allowed_from: Iterable[RevisionState] | None = None) -> Revision:
        """Append a state change; with `allowed_from`, only from those states (else
        `ActionNotAllowed`, saying the state it is in)."""
        with self._write() as db:
            rev = self._get(db, rev_id)
            if allowed_from is not None and rev.state not in set(allowed_from):
                raise ActionNotAllowed(f"revision {rev_id} is {rev.state.value}; this needs it "
                                       f"to be {' or '.join(s.value for s in allowed_from)}")
            self._event(db, rev_id, state, actor, note)
            return self._get(db, rev_id)

    def record_outcome(self, rev_id: int, outcome: Mapping[str, Any]) -> Revision:
        """What really happened in the period after `rev_id` was applied (newest wins)."""
        with self._write() as db:
            self._get(db, rev_id)
            db.execute("INSERT INTO outcomes (rev_id, time, outcome) VALUES (?, ?, ?)",
                       (rev_id, time.time(), json.dumps(jsonable(dict(outcome)), sort_keys=True)))
            return self._get(db, rev_id)

    def freeze(self, actor: str, reason: str = "") -> Flags:
        return self._flag("freeze", actor, reason)

    def unfreeze(self, actor: str) -> Flags:
        return self._flag("unfreeze", actor, "")

    def set_blocked(self, why: str, actor: str = "agent") -> Flags:
        """Say why the agent will not propose ("" clears it); a row only when it changes."""
        with self._write() as db:
            if self._flags(db).blocked != why:
                db.execute("INSERT INTO flags (time, kind, actor, note) VALUES (?, 'block', ?, ?)",
                           (time.time(), actor, why))
            return self._flags(db)

    def record_round(self, summary: Mapping[str, Any], when: float | None = None) -> None:
        with self._write() as db:
            db.execute("INSERT INTO rounds (time, summary) VALUES (?, ?)",
                       (time.time() if when is None else when,
                        json.dumps(jsonable(dict(summary)), sort_keys=True)))

    def begin_apply(self, rev_id: int, *, actor: str, previous: Mapping[str, Any]) -> ApplyIntent:
        """Write-ahead: record that an apply of `rev_id` starts and what to restore if it
        does not finish. Only one apply at a time (`ActionNotAllowed` otherwise); an intent left
        by a dead process must be reconciled (`end_apply`) first."""
        with self._write() as db:
            rev = self._get(db, rev_id)
            if rev.state is not RevisionState.PROPOSED:
                # every apply (approve, rollback, auto) goes through a proposal; two processes
                # approving at once: the second finds it applied already
                raise ActionNotAllowed(f"revision {rev_id} is {rev.state.value}; only a proposed "
                                       "revision can be applied")
            if (open_ := self._open_apply(db)) is not None:
                if open_.owner_alive():
                    raise ActionNotAllowed(f"revision {open_.rev_id} is being applied by pid "
                                           f"{open_.pid} right now; wait for it to finish")
                raise ActionNotAllowed(f"an apply of revision {open_.rev_id} by a process that "
                                       "died has not finished; it must be reconciled first")
            cur = db.execute(
                "INSERT INTO applies (time, rev_id, phase, begin_seq, pid, host, actor, previous, "
                "note) VALUES (?, ?, 'begin', NULL, ?, ?, ?, ?, '')",
                (time.time(), rev_id, os.getpid(), socket.gethostname(), actor,
                 json.dumps(jsonable(dict(previous)))))
            return self._open_apply(db) or _never(cur)

    def end_apply(self, intent: ApplyIntent, *, state: RevisionState | None, actor: str,
                  note: str, rev_id: int | None = None,
                  also: Iterable[tuple[int, RevisionState, str]] = ()) -> None:
        """Close `intent` and, in the same transaction, append the revision's event (`state`;
        None appends none), so that the store never shows an apply that ended without saying
        how. `also` appends more events in that transaction (e.g. the revision a rollback
        replaces)."""
        with self._write() as db:
            db.execute(
                "INSERT INTO applies (time, rev_id, phase, begin_seq, pid, host, actor, previous, "
                "note) VALUES (?, ?, 'end', ?, ?, ?, ?, '{}', ?)",
                (time.time(), intent.rev_id, intent.seq, os.getpid(), socket.gethostname(), actor,
                 note))
            if state is not None:
                self._event(db, rev_id if rev_id is not None else intent.rev_id, state, actor, note)
                for other, other_state, other_note in also:
                    self._event(db, other, other_state, actor, other_note)

    # -- internals ------------------------------------------------------------------------
    def _event(self, db: sqlite3.Connection, rev_id: int, state: RevisionState, actor: str,
               note: str) -> None:
        db.execute("INSERT INTO events (rev_id, time, state, actor, note) VALUES (?,?,?,?,?)",
                   (rev_id, time.time(), RevisionState(state).value, actor, note))

    def _flag(self, kind: str, actor: str, note: str) -> Flags:
        with self._write() as db:
            db.execute("INSERT INTO flags (time, kind, actor, note) VALUES (?, ?, ?, ?)",
                       (time.time(), kind, actor, note))
            return self._flags(db)

    def _get(self, db: sqlite3.Connection, rev_id: int) -> Revision:
        row = db.execute("SELECT id, created, config, diff, parent, trigger, evidence "
                         "FROM revisions WHERE id = ?", (int(rev_id),)).fetchone()
        if row is None:
            raise UnknownRevision(f"no revision {rev_id} in {self.path}")
        events = tuple(Event(t, RevisionState(s), a, n) for t, s, a, n in db.execute(
            "SELECT time, state, actor, note FROM events WHERE rev_id = ? ORDER BY seq", (row[0],)))
        out = db.execute("SELECT outcome FROM outcomes WHERE rev_id = ? ORDER BY seq DESC LIMIT 1",
                         (row[0],)).fetchone()
        return Revision(
            id=row[0], created=row[1], config=json.loads(row[2]),
            diff={k: (v[0], v[1]) for k, v in json.loads(row[3]).items()}, parent=row[4],
            trigger=row[5], evidence=json.loads(row[6]), events=events,
            outcome=json.loads(out[0]) if out else None)

    def _current_states(self, db: sqlite3.Connection) -> dict[int, str]:
        return dict(db.execute(
            "SELECT rev_id, state FROM events WHERE seq IN "
            "(SELECT MAX(seq) FROM events GROUP BY rev_id)").fetchall())

    def _running(self, db: sqlite3.Connection) -> Revision | None:
        row = db.execute("SELECT rev_id FROM events WHERE state = 'applied' "
                         "ORDER BY seq DESC LIMIT 1").fetchone()
        if row is None:
            return None
        rev = self._get(db, row[0])
        # A revision that was applied and then rolled back or failed is no longer live; what
        # replaced it was applied after it, so the newest 'applied' event is the live one unless
        # its revision has since left that state (then nothing known is live).
        return rev if rev.state is RevisionState.APPLIED else None

    def _pending(self, db: sqlite3.Connection) -> Revision | None:
        ids = sorted((i for i, s in self._current_states(db).items() if s == "proposed"),
                     reverse=True)
        return self._get(db, ids[0]) if ids else None

    def _flags(self, db: sqlite3.Connection) -> Flags:
        fr = db.execute("SELECT kind, actor, note FROM flags WHERE kind IN ('freeze', 'unfreeze') "
                        "ORDER BY seq DESC LIMIT 1").fetchone()
        bl = db.execute("SELECT note FROM flags WHERE kind = 'block' ORDER BY seq DESC LIMIT 1"
                        ).fetchone()
        frozen = fr is not None and fr[0] == "freeze"
        return Flags(frozen=frozen, frozen_reason=fr[2] if frozen else "",
                     frozen_by=fr[1] if frozen else "", blocked=bl[0] if bl else "")

    def _open_apply(self, db: sqlite3.Connection) -> ApplyIntent | None:
        row = db.execute(
            "SELECT seq, time, rev_id, pid, host, actor, previous FROM applies b "
            "WHERE phase = 'begin' AND NOT EXISTS "
            "(SELECT 1 FROM applies e WHERE e.phase = 'end' AND e.begin_seq = b.seq) "
            "ORDER BY seq DESC LIMIT 1").fetchone()
        if row is None:
            return None
        return ApplyIntent(seq=row[0], time=row[1], rev_id=row[2], pid=row[3], host=row[4],
                           actor=row[5], previous=json.loads(row[6]))


def _never(cur: Any) -> ApplyIntent:
    raise LiveError("the apply intent just written cannot be read back")
