"""The revision store: every proposal and revision of the live config, append-only, in SQLite.

One file, ``state.db`` in the agent's state directory, shared by every process that acts on the
cluster (the agent's loop, ``autosched agent ...`` commands, the HTTP service). Nothing is ever
updated in place: a revision is written once, and each change of its state is a new event row;
freeze/unfreeze, "blocked" notes, outcomes and apply intents are rows too, the newest winning.
So a process killed at any moment leaves rows that are either fully there (one transaction) or
absent, and the history of who did what stays readable.

A revision's states follow one table, `TRANSITIONS`, checked inside the transaction of every write
that appends an event (as Optuna checks that a trial is updatable): which state a revision of each
kind begins in, and which move each store method may make. Anything else raises
`IllegalTransition`, naming the table's rule.

Concurrency: WAL (readers never wait for the writer), a busy timeout, and ``BEGIN IMMEDIATE`` for
every write that first checks a state (approve only a proposal, one apply at a time, its parent
still running), so two processes cannot both act on the same proposal. Each call opens its own
short connection, which keeps the store safe to use from several threads too.

The schema is versioned (``PRAGMA user_version``): a store written by an older version is brought
up to date when it is opened, in one transaction (a process killed midway leaves it as it was).
A store is marked as autosched's (``PRAGMA application_id``); an SQLite database of something else
in its place is refused, never adopted (no table is created in it), as tuning refuses a study
file that is another program's database.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

from ..atomic import pid_alive
from ..jsonable import jsonable
from .errors import ActionNotAllowed, Frozen, IllegalTransition, LiveError, UnknownRevision

BUSY_TIMEOUT_S = 30.0
APPLICATION_ID = 0x61757473  # "auts": PRAGMA application_id of a revision store
MAX_ID = 2**63 - 1  # SQLite's largest integer: no revision id is above it
# Tables a store has always had: a database with tables but not these is someone else's.
_CORE_TABLES = frozenset({"revisions", "events"})
MEMORY_KEPT = 5  # controller memories kept (the newest is the one read)
OBSERVATIONS_KEPT = 50  # readings of Slurm's settings kept (the newest is the one shown)
HEARTBEATS_KEPT = 10

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


class RevisionState(str, Enum):
    """The state of a revision; the values are what JSON and the status page show."""

    PROPOSED = "proposed"
    APPLIED = "applied"
    REJECTED = "rejected"
    ROLLED_BACK = "rolled_back"
    FAILED = "failed"


class RevisionKind(str, Enum):
    """What made a revision (its `trigger` is a human label only)."""

    BASELINE = "baseline"  # the config the agent found live at its first round
    ADOPTED = "adopted"  # the live config as an operator kept it (after a hand edit)
    PROPOSAL = "proposal"  # a new config: a tuning round's winner, or one written by hand
    ROLLBACK = "rollback"  # an earlier revision's config, made live again


@dataclass(frozen=True)
class Transition:
    """One legal move of a revision's state, and the one store method that makes it."""

    source: RevisionState | None  # None: the revision is being created
    target: RevisionState
    by: str  # "create", "transition" or "end_apply"
    rule: str  # the rule in words, as errors quote it


_S = RevisionState
TRANSITIONS: tuple[Transition, ...] = (
    Transition(None, _S.PROPOSED, "create", "a proposal or a rollback is created proposed"),
    Transition(None, _S.APPLIED, "create",
               "a baseline or an adopted config is created applied: it is already live"),
    Transition(_S.PROPOSED, _S.REJECTED, "transition", "a proposal can be rejected"),
    Transition(_S.PROPOSED, _S.APPLIED, "end_apply",
               "a proposal becomes applied only when its apply ends well"),
    Transition(_S.PROPOSED, _S.FAILED, "end_apply",
               "a proposal becomes failed when its apply fails or is interrupted"),
    Transition(_S.APPLIED, _S.ROLLED_BACK, "end_apply",
               "an applied revision is rolled back only when the rollback that replaces it is "
               "applied"),
)
# The state each kind of revision begins in (each pair is a `create` row of the table).
BIRTH: dict[RevisionKind, RevisionState] = {
    RevisionKind.BASELINE: _S.APPLIED, RevisionKind.ADOPTED: _S.APPLIED,
    RevisionKind.PROPOSAL: _S.PROPOSED, RevisionKind.ROLLBACK: _S.PROPOSED,
}


def check_transition(rev_id: int | None, source: RevisionState | None, target: RevisionState,
                     by: str) -> None:
    """Raise `IllegalTransition` unless `TRANSITIONS` lets method `by` move a revision from
    `source` (None: being created) to `target`."""
    what = "a new revision" if rev_id is None else f"revision {rev_id}"
    for t in TRANSITIONS:
        if t.source is source and t.target is target:
            if t.by == by:
                return
            raise IllegalTransition(f"{what} is {_name(source)}; it becomes {target.value} only "
                                    f"through {t.by} ({t.rule})")
    rules = [t for t in TRANSITIONS if t.source is source]
    if not rules:
        raise IllegalTransition(f"{what} is {_name(source)}, which is final; it cannot become "
                                f"{target.value}")
    allowed = "; ".join(f"{t.target.value}: {t.rule}" for t in rules)
    raise IllegalTransition(f"{what} is {_name(source)}; it cannot become {target.value} (from "
                            f"{_name(source)} the table allows {allowed})")


def _name(state: RevisionState | None) -> str:
    return "not yet created" if state is None else state.value


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
# The store keeps both as JSON objects (``revisions.evidence``, ``outcomes.outcome``) and reads
# them back through these dataclasses, the one written-down contract for their keys: the agent
# writes them, and the service, the status page and the CLI read them. A field's name IS its JSON
# key; renaming one breaks every stored revision. Rows written by any version stay readable:
# missing keys read as None, unknown ones are ignored.


def _finite(v: Any) -> float | None:
    """A JSON number as a float; None for null, a non-number or a non-finite value."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _of(kind: type) -> Any:
    return lambda v: v if isinstance(v, kind) else None


# how a stored value is read, by the type its field declares
_READ: dict[str, Any] = {"float | None": _finite, "int | None": _int, "str | None": _of(str),
                         "dict[str, Any] | None": _of(dict), "list[Any] | None": _of(list)}


@dataclass(frozen=True)
class Evidence:
    """Why a revision was made. A tuning round's proposal carries the round's figures (the agent
    writes them when it creates the revision); a rollback says which running revision it replaced
    and which earlier revision's config it brings back; the baseline and an adopted config carry
    none. A gain is relative (0.05 = 5% better), on `metric`."""

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
    # the workload source ("replay" or a model's name, "stat at time scale 120" on a test bed)
    model: str | None = None
    # knobs the tuner's winner changed that carried none of its predicted gain, put back to their
    # running values before proposing; and each proposed knob's share of the gain (the gain lost
    # when only it goes back, as a fraction of the predicted gain)
    dropped_knobs: list[Any] | None = None
    knob_shares: dict[str, Any] | None = None
    rollback_of: int | None = None  # a rollback: the running revision it replaced
    to: int | None = None  # a rollback: the revision whose config it brings back

    def to_dict(self) -> dict[str, Any]:
        """Every field under its own name, None included (the stored JSON has every key)."""
        return asdict(self)

    def predicted_text(self) -> str:
        """The predicted gain as the status and the page word it: "+8.0% ± 2.0%"; "+12.7% (one
        workload: no spread measured)" when one workload was evaluated (its spread of 0 is not a
        measurement); "+8.0%" without a spread; "unknown" without a gain (never "+0.0%")."""
        if self.predicted_gain is None:
            return "unknown"
        if self.samples == 1:
            return f"{self.predicted_gain:+.1%} (one workload: no spread measured)"
        if self.spread is None:
            return f"{self.predicted_gain:+.1%}"
        return f"{self.predicted_gain:+.1%} ± {self.spread:.1%}"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Evidence:
        """Any revision's stored evidence: missing keys are None, unknown keys are ignored, and
        a value of another type than its field's is None (a gain must be a finite number)."""
        d = d if isinstance(d, Mapping) else {}
        return cls(**{f.name: _READ[str(f.type)](d.get(f.name)) for f in fields(cls)})


def gain_text(gain: float | None, sd: float | None, lo: float | None, hi: float | None,
              replays: int | None) -> str:
    """A counterfactual gain as the status words it: "+5.0% ± 2.0% (range +1.0% to +8.0%, 5
    replays)"; "+5.0% (1 replay)"; "+5.0%" when the outcome has no spread (an older one);
    "unknown" when there is no gain (never "+0.0%")."""
    if gain is None:
        return "unknown"
    if replays is None:
        return f"{gain:+.1%}"
    if sd is None or lo is None or hi is None:
        return f"{gain:+.1%} ({replays} replay{'s' if replays != 1 else ''})"
    return f"{gain:+.1%} ± {sd:.1%} (range {lo:+.1%} to {hi:+.1%}, {replays} replays)"


@dataclass(frozen=True)
class JudgedOutcome:
    """What a revision did over the period after it went live, recorded once by the agent's judge
    (live/round.py) one period on: the period's real jobs, replayed in the agent's twin from the
    backlog at the change under the config before it and under its own (live/judge.py), beside
    what really happened; every figure counts a job that had not finished by the period's end
    with what it had waited and run so far. Gains are relative (0.05 = 5% better), on `metric`.

    An outcome stored by an older version (a before/after comparison: ``before``, ``after``,
    ``observed_gain``) reads with its metric, predicted gain and verdict; its other figures are
    None."""

    metric: str  # what was compared (the agent's metric if the judge measures it, else avg_jct)
    predicted_gain: float | None  # copied from the revision's `Evidence`, to set beside it
    # "kept: ...", "worse: ...; rolled back", "twin not trusted: ...; frozen" or "not judged: ..."
    verdict: str
    # the change's gain in the twin on the period's real jobs: (old - new) / old of each
    # simulated pair, averaged over the replays (the recorded times' and the jittered copies');
    # None when not judged
    counterfactual_gain: float | None = None
    # how far the twin under the new config was from what the cluster did over the period:
    # |simulated - realized| / realized, averaged over the replays
    twin_error: float | None = None
    realized: dict[str, Any] | None = None  # the period as it went: `PeriodFigures.to_dict()`
    # replayed on the recorded submit times under the config before the change, and under the
    # revision's config
    simulated_old: dict[str, Any] | None = None
    simulated_new: dict[str, Any] | None = None
    period: dict[str, Any] | None = None  # the judged period: `Counterfactual.period()`
    # the gain's spread over the replays: standard deviation (None with one replay), lowest and
    # highest; how many replays; and the jittered copies' [old, new] figures (live/judge.py).
    # None in an outcome recorded before the judge replayed jittered copies.
    gain_sd: float | None = None
    gain_min: float | None = None
    gain_max: float | None = None
    replays: int | None = None
    copies: list[Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def counterfactual_text(self) -> str:
        """The counterfactual gain as `gain_text` words it."""
        return gain_text(self.counterfactual_gain, self.gain_sd, self.gain_min, self.gain_max,
                         self.replays)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> JudgedOutcome | None:
        """A revision's stored outcome (None when it has none): missing keys read as None (the
        metric and verdict as ""), unknown keys are ignored, and a value of another type than its
        field's is None."""
        if not d or not isinstance(d, Mapping):
            return None
        text = {"metric", "verdict"}
        values: dict[str, Any] = {f.name: str(d.get(f.name) or "") if f.name in text
                                  else _READ[str(f.type)](d.get(f.name)) for f in fields(cls)}
        return cls(**values)


@dataclass(frozen=True)
class Approval:
    """Who approved a revision, and the include file's diff as the apply wrote it. `confirmed`:
    the approver was shown this diff and sent it back with the approval (the status page, or the
    API's ``include_diff``); a command-line approve records the diff without it."""

    actor: str  # "operator:alice", "service:token", ...
    include_diff: str  # unified diff of the include file, before -> as written
    confirmed: bool
    time: float  # unix s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LiveOverride:
    """A live setting that differed from the running revision's (a hand edit) when an apply
    overwrote it because the operator forced it: the setting, its live text then, and the text
    the running revision holds."""

    setting: str
    live: str | None  # None: Slurm showed no value
    expected: str

    def __str__(self) -> str:
        return f"{self.setting} is {self.live} live, {self.expected} in the running revision"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LiveReading:
    """The managed knobs as the agent last read them from Slurm (`scontrol show config`), by
    knob name as Slurm spells each value, and when (unix s)."""

    time: float
    knobs: dict[str, str]


@dataclass(frozen=True)
class Heartbeat:
    """`agent run`'s sign of life: its process, when it was last seen (unix s), since when it
    runs, and how often it wakes (s): a beat older than a few of those means it is gone."""

    time: float
    pid: int
    host: str
    poll: float
    started: float

    def owner_alive(self) -> bool:
        """Whether the process still runs (on this host; on another one: assumed)."""
        return _pid_alive(self.pid, self.host)


@dataclass(frozen=True)
class Revision:
    """One managed live config, as proposed or applied, with its evidence and its history.

    Every field is a key of its JSON (`to_dict`); the service's response model is made from
    these fields (service/models.py)."""

    id: int
    created: float
    kind: RevisionKind
    config: dict[str, Any]  # the FULL managed live config (Slurm names -> values)
    diff: dict[str, tuple[Any, Any]]  # knob -> (value before, value after), vs `parent`
    parent: int | None  # revision running when this one was made
    trigger: str  # a label for people: "baseline", "period", "drift: ...", "rollback to 3", ...
    evidence: Evidence
    events: tuple[Event, ...]  # oldest first
    outcome: JudgedOutcome | None = None  # one period after applying
    approval: Approval | None = None  # who approved it and the diff written (an approve only)
    # hand-set live values its apply overwrote because the operator forced it (`--force`)
    overridden: tuple[LiveOverride, ...] = ()
    # the config as the Slurm settings the agent writes (`scontrol show config` spelling); the
    # agent's status fills it in, the store does not know the knobs
    slurm: dict[str, str] | None = None
    state: RevisionState = field(init=False)  # the newest event's
    applied_at: float | None = field(init=False)  # when it last went live (None: never)

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", self.events[-1].state)
        times = [e.time for e in self.events if e.state is RevisionState.APPLIED]
        object.__setattr__(self, "applied_at", times[-1] if times else None)

    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "id": self.id, "created": self.created, "kind": self.kind.value,
            "config": self.config, "diff": {k: list(v) for k, v in self.diff.items()},
            "parent": self.parent, "trigger": self.trigger, "evidence": self.evidence.to_dict(),
            "events": [e.to_dict() for e in self.events],
            "outcome": self.outcome.to_dict() if self.outcome else None,
            "approval": self.approval.to_dict() if self.approval else None,
            "overridden": [o.to_dict() for o in self.overridden], "slurm": self.slurm,
            "state": self.state.value, "applied_at": self.applied_at,
        })


@dataclass(frozen=True)
class Flags:
    """The agent's switches: frozen by an operator (kill switch), or blocked by what it saw."""

    frozen: bool = False
    frozen_reason: str = ""
    frozen_by: str = ""
    blocked: str = ""  # "" or why the agent will not propose (hand edit, Slurm down, ...)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
        return _pid_alive(self.pid, self.host)


def _pid_alive(pid: int, host: str) -> bool:
    """Whether process `pid` of `host` runs (another host's: cannot tell, assumed to)."""
    return host != socket.gethostname() or pid_alive(pid)


class RevisionStore:
    """The revisions of one cluster's managed config, in ``state_dir/state.db``."""

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

    # -- reading --------------------------------------------------------------------------
    def get(self, rev_id: int) -> Revision:
        with self._connect() as db:
            return self._get(db, rev_id)

    def history(self, limit: int | None = None) -> list[Revision]:
        """Revisions, newest first."""
        with self._connect() as db:
            q = "SELECT id FROM revisions ORDER BY id DESC"
            limit = limit if limit is not None and 0 < limit <= MAX_ID else None
            ids = [r[0] for r in db.execute(q + (" LIMIT ?" if limit else ""),
                                             (limit,) if limit else ())]
            return [self._get(db, i) for i in ids]

    def newest_id(self) -> int:
        """The newest revision's id (0: none yet)."""
        with self._connect() as db:
            return int(db.execute("SELECT COALESCE(MAX(id), 0) FROM revisions").fetchone()[0])

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
        """When the agent last ran a round, and what it recorded (`RoundOutcome.to_summary`)."""
        rounds = self.rounds(limit=1)
        return rounds[0] if rounds else None

    def rounds(self, limit: int = 20) -> list[tuple[float, dict[str, Any]]]:
        """The agent's last rounds, newest first (a summary that is not a JSON object reads as
        an empty one)."""
        with self._connect() as db:
            rows = db.execute("SELECT time, summary FROM rounds ORDER BY seq DESC LIMIT ?",
                              (limit,)).fetchall()
        return [(t, _json_object(s)) for t, s in rows]

    def last_round_with(self, key: str) -> tuple[float, dict[str, Any]] | None:
        """The newest round whose summary has `key` (a round that stopped before a read has no
        key for what it did not read), as `last_round` returns it."""
        with self._connect() as db:
            row = db.execute("SELECT time, summary FROM rounds WHERE CASE WHEN json_valid(summary) "
                             "THEN json_type(summary, ?) END IS NOT NULL ORDER BY seq DESC LIMIT 1",
                             (f'$."{key}"',)).fetchone()
        return (row[0], _json_object(row[1])) if row else None

    def round_counts(self) -> dict[str, int]:
        """How many rounds recorded each action (their summary's ``action``; "" when a summary
        has none or is not JSON), over the store's whole life."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT CASE WHEN json_valid(summary) THEN json_extract(summary, '$.action') END "
                "AS action, COUNT(*) FROM rounds GROUP BY action").fetchall()
        out: dict[str, int] = {}
        for action, n in rows:
            key = action if isinstance(action, str) else ""
            out[key] = out.get(key, 0) + int(n)
        return out

    def controller_memory(self) -> str | None:
        """The controller's memory as the newest tuning round left it (JSON; None: none yet)."""
        got = self.controller_memory_round()
        return got[0] if got else None

    def controller_memory_round(self) -> tuple[str, dict[str, Any]] | None:
        """The newest controller memory and the summary of the round that left it (what that
        round observed: the cluster's setup the memory's trials were simulated on)."""
        with self._connect() as db:
            row = db.execute("SELECT m.memory, r.summary FROM memory m JOIN rounds r ON r.seq = m.round_seq "
                             "ORDER BY m.seq DESC LIMIT 1").fetchone()
        return (row[0], _json_object(row[1])) if row else None

    def last_reading(self) -> LiveReading | None:
        """The managed knobs as the agent last read them from Slurm (None: never read yet)."""
        with self._connect() as db:
            row = db.execute("SELECT time, knobs FROM observations ORDER BY seq DESC LIMIT 1"
                             ).fetchone()
        if row is None:
            return None
        knobs = _json_object(row[1])
        return LiveReading(float(row[0]), {str(k): str(v) for k, v in knobs.items()})

    def heartbeat(self) -> Heartbeat | None:
        """`agent run`'s newest heartbeat (None: no loop ever ran on this store)."""
        with self._connect() as db:
            row = db.execute("SELECT time, pid, host, poll, started FROM heartbeats ORDER BY seq "
                             "DESC LIMIT 1").fetchone()
        return Heartbeat(float(row[0]), int(row[1]), str(row[2]), float(row[3]), float(row[4])) \
            if row else None

    # -- writing --------------------------------------------------------------------------
    def record_reading(self, knobs: Mapping[str, str], when: float | None = None) -> LiveReading:
        """What the agent just read of Slurm's managed settings (by knob, Slurm's spelling)."""
        now = time.time() if when is None else when
        with self._write() as db:
            db.execute("INSERT INTO observations (time, knobs) VALUES (?, ?)",
                       (now, json.dumps(dict(knobs), sort_keys=True)))
            db.execute("DELETE FROM observations WHERE seq NOT IN "
                       "(SELECT seq FROM observations ORDER BY seq DESC LIMIT ?)",
                       (OBSERVATIONS_KEPT,))
        return LiveReading(now, dict(knobs))

    def beat(self, poll: float, started: float) -> Heartbeat:
        """`agent run` is alive: this process, now; it wakes every `poll` s."""
        beat = Heartbeat(time.time(), os.getpid(), socket.gethostname(), float(poll),
                         float(started))
        with self._write() as db:
            db.execute("INSERT INTO heartbeats (time, pid, host, poll, started) VALUES "
                       "(?, ?, ?, ?, ?)", (beat.time, beat.pid, beat.host, beat.poll, beat.started))
            db.execute("DELETE FROM heartbeats WHERE seq NOT IN "
                       "(SELECT seq FROM heartbeats ORDER BY seq DESC LIMIT ?)", (HEARTBEATS_KEPT,))
        return beat

    def create(self, config: Mapping[str, Any], *, trigger: str, actor: str, note: str = "",
               kind: RevisionKind = RevisionKind.PROPOSAL, evidence: Evidence | None = None,
               parent: int | None | str = "running") -> Revision:
        """A new revision, its diff taken against `parent` (by default the running revision).
        Its kind decides the state it begins in (`BIRTH`).

        Only one proposal may be open at a time, nothing is created applied while an apply is in
        progress, and a baseline only in an empty store: each raises `ActionNotAllowed`."""
        kind = RevisionKind(kind)
        state = BIRTH[kind]
        with self._write() as db:
            check_transition(None, None, state, "create")
            if state is RevisionState.PROPOSED and (p := self._pending(db)) is not None:
                raise ActionNotAllowed(f"revision {p.id} is already proposed; approve or reject "
                                       "it first")
            if kind is RevisionKind.BASELINE and db.execute("SELECT 1 FROM revisions").fetchone():
                raise ActionNotAllowed("a baseline is only ever a store's first revision")
            if state is RevisionState.APPLIED and (o := self._open_apply(db)) is not None:
                raise ActionNotAllowed(f"revision {o.rev_id} is being applied right now; wait "
                                       "for it to finish")
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
                "INSERT INTO revisions (created, config, diff, parent, trigger, evidence, kind) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (now, json.dumps(config, sort_keys=True), json.dumps(diff, sort_keys=True),
                 parent_id, trigger, json.dumps(jsonable((evidence or Evidence()).to_dict()),
                                                sort_keys=True), kind.value))
            rev_id = cur.lastrowid
            if rev_id is None:
                raise LiveError(f"{self.path}: the revision just written cannot be read back")
            db.execute("INSERT INTO events (rev_id, time, state, actor, note) VALUES (?,?,?,?,?)",
                       (rev_id, now, state.value, actor, note))
            return self._get(db, rev_id)

    def transition(self, rev_id: int, state: RevisionState, *, actor: str,
                   note: str = "") -> Revision:
        """Append a state change that needs no apply (rejecting a proposal), as `TRANSITIONS`
        allows; a revision being applied right now cannot be moved."""
        with self._write() as db:
            rev = self._get(db, rev_id)
            check_transition(rev_id, rev.state, state, "transition")
            if (o := self._open_apply(db)) is not None and o.rev_id == rev_id:
                raise ActionNotAllowed(f"revision {rev_id} is being applied by pid {o.pid} right "
                                       "now; wait for it to finish")
            self._event(db, rev_id, state, actor, note)
            return self._get(db, rev_id)

    def record_outcome(self, rev_id: int, outcome: JudgedOutcome) -> Revision:
        """What really happened in the period after `rev_id` was applied (newest wins)."""
        with self._write() as db:
            self._get(db, rev_id)
            db.execute("INSERT INTO outcomes (rev_id, time, outcome) VALUES (?, ?, ?)",
                       (rev_id, time.time(), json.dumps(jsonable(outcome.to_dict()),
                                                        sort_keys=True)))
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

    def record_round(self, summary: Mapping[str, Any], when: float | None = None,
                     memory: str | None = None) -> None:
        """A round's summary and, from a round that tuned, the controller's memory after it, in
        one transaction."""
        with self._write() as db:
            now = time.time() if when is None else when
            cur = db.execute("INSERT INTO rounds (time, summary) VALUES (?, ?)",
                             (now, json.dumps(jsonable(dict(summary)), sort_keys=True)))
            if memory is not None:
                db.execute("INSERT INTO memory (time, round_seq, memory) VALUES (?, ?, ?)",
                           (now, cur.lastrowid, memory))
                db.execute("DELETE FROM memory WHERE seq NOT IN "
                           "(SELECT seq FROM memory ORDER BY seq DESC LIMIT ?)", (MEMORY_KEPT,))

    def begin_apply(self, rev_id: int, *, actor: str, previous: Mapping[str, Any],
                    min_interval: float | None = None, while_frozen: bool = True) -> ApplyIntent:
        """Write-ahead: record that an apply of `rev_id` starts and what to restore if it
        does not finish. Checked in the same transaction (`ActionNotAllowed` otherwise): unless
        `while_frozen` (an operator's rollback), the agent is not frozen (the store's flag or the
        stop file: a freeze holds from the moment it is stored, also against an apply a round
        decided on before); the revision is proposed; no other apply is open (an intent left by
        a dead process must be reconciled, `end_apply`, first); the revision it was made against
        is still the running one; and, with `min_interval` (auto mode's one change per period),
        the running revision went live at least that many seconds ago unless it is the
        baseline."""
        with self._write() as db:
            if not while_frozen and (flags := self._flags(db)).frozen:
                raise Frozen(f"the agent is frozen by {flags.frozen_by}"
                             f"{': ' + flags.frozen_reason if flags.frozen_reason else ''}; "
                             "unfreeze it first")
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
            running = self._running(db)
            if rev.parent != (running.id if running else None):
                raise ActionNotAllowed(
                    f"revision {rev_id} was proposed against revision {rev.parent}, but "
                    + (f"revision {running.id} is running" if running else
                       "no revision is known to be running")
                    + "; reject it and let the agent propose again")
            if (min_interval is not None and running is not None and running.applied_at is not None
                    and running.kind is not RevisionKind.BASELINE):
                ago = time.time() - running.applied_at
                if ago < min_interval:
                    raise ActionNotAllowed(f"revision {running.id} went live {ago:.0f} s ago; at "
                                           f"most one change per period ({min_interval:g} s)")
            cur = db.execute(
                "INSERT INTO applies (time, rev_id, phase, begin_seq, pid, host, actor, previous, "
                "note) VALUES (?, ?, 'begin', NULL, ?, ?, ?, ?, '')",
                (time.time(), rev_id, os.getpid(), socket.gethostname(), actor,
                 json.dumps(jsonable(dict(previous)))))
            return self._open_apply(db) or _never(cur)

    def end_apply(self, intent: ApplyIntent, *, state: RevisionState | None, actor: str,
                  note: str, replaced_note: str = "", approval: Approval | None = None,
                  overridden: tuple[LiveOverride, ...] = ()) -> None:
        """Close `intent` and, in the same transaction, append the revision's event (`state`,
        applied or failed; None appends none), so that the store never shows an apply that ended
        without saying how. A rollback that is applied marks the revision it replaced (its
        parent) rolled back in the same transaction, with `replaced_note`. An `approval` is
        recorded with an apply that ended applied (and only then), as are the hand-set live
        values it `overridden` (an apply the operator forced over a hand edit)."""
        with self._write() as db:
            rev = self._get(db, intent.rev_id) if state is not None else None
            if rev is not None and state is not None:
                check_transition(rev.id, rev.state, state, "end_apply")
            replaced = None
            if (rev is not None and state is RevisionState.APPLIED
                    and rev.kind is RevisionKind.ROLLBACK and rev.parent is not None):
                replaced = self._get(db, rev.parent)
                check_transition(replaced.id, replaced.state, RevisionState.ROLLED_BACK,
                                 "end_apply")
            db.execute(
                "INSERT INTO applies (time, rev_id, phase, begin_seq, pid, host, actor, previous, "
                "note, overridden) VALUES (?, ?, 'end', ?, ?, ?, ?, '{}', ?, ?)",
                (time.time(), intent.rev_id, intent.seq, os.getpid(), socket.gethostname(), actor,
                 note, json.dumps([o.to_dict() for o in overridden]
                                  if state is RevisionState.APPLIED else [])))
            if rev is not None and state is not None:
                self._event(db, rev.id, state, actor, note)
            if rev is not None and state is RevisionState.APPLIED and approval is not None:
                db.execute("INSERT INTO approvals (rev_id, time, actor, include_diff, confirmed) "
                           "VALUES (?, ?, ?, ?, ?)", (rev.id, approval.time, approval.actor,
                                                      approval.include_diff,
                                                      int(approval.confirmed)))
            if replaced is not None:
                self._event(db, replaced.id, RevisionState.ROLLED_BACK, actor, replaced_note)

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
        rev_id = int(rev_id)
        # an id SQLite cannot hold (99999999999999999999) is no revision, not an OverflowError
        row = db.execute("SELECT id, created, config, diff, parent, trigger, evidence, kind "
                         "FROM revisions WHERE id = ?", (rev_id,)).fetchone() \
            if 0 < rev_id <= MAX_ID else None
        if row is None:
            raise UnknownRevision(f"no revision {rev_id} in {self.path}")
        try:
            events = tuple(Event(t, RevisionState(s), a, n) for t, s, a, n in db.execute(
                "SELECT time, state, actor, note FROM events WHERE rev_id = ? ORDER BY seq",
                (row[0],)))
            kind = RevisionKind(row[7])
            out = db.execute("SELECT outcome FROM outcomes WHERE rev_id = ? ORDER BY seq DESC "
                             "LIMIT 1", (row[0],)).fetchone()
            ap = db.execute("SELECT actor, include_diff, confirmed, time FROM approvals WHERE "
                            "rev_id = ? ORDER BY seq DESC LIMIT 1", (row[0],)).fetchone()
            ov = db.execute("SELECT overridden FROM applies WHERE rev_id = ? AND phase = 'end' "
                            "ORDER BY seq DESC LIMIT 1", (row[0],)).fetchone()
            return Revision(
                id=row[0], created=row[1], kind=kind, config=json.loads(row[2]),
                diff={k: (v[0], v[1]) for k, v in json.loads(row[3]).items()}, parent=row[4],
                trigger=row[5], evidence=Evidence.from_dict(json.loads(row[6])), events=events,
                outcome=JudgedOutcome.from_dict(json.loads(out[0])) if out else None,
                approval=Approval(str(ap[0]), str(ap[1]), bool(ap[2]), float(ap[3])) if ap
                else None,
                overridden=tuple(LiveOverride(str(o["setting"]), None if o["live"] is None
                                              else str(o["live"]), str(o["expected"]))
                                 for o in json.loads(ov[0])) if ov else ())
        except (ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
            raise LiveError(f"{self.path}: revision {row[0]} cannot be read: {e}") from None

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
        # A revision that was applied and then rolled back is no longer live; what replaced it was
        # applied after it, so the newest 'applied' event is the live one unless its revision has
        # since left that state (a store written before the transition table: then nothing known
        # is live).
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
        blocked = bl[0] if bl else ""
        if fr is not None and fr[0] == "freeze":
            return Flags(frozen=True, frozen_reason=fr[2], frozen_by=fr[1], blocked=blocked)
        stop = read_stop_file(self.state_dir)
        if stop is not None:
            return Flags(frozen=True, frozen_by=stop[0], frozen_reason=stop[1], blocked=blocked)
        return Flags(blocked=blocked)

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


STOP_FILE = "STOP"  # beside state.db: frozen while it exists (live/killswitch.py)
_MAX_STOP_BYTES = 4096


def read_stop_file(state_dir: Path) -> tuple[str, str] | None:
    """(who froze, why) when the stop file exists in `state_dir`, else None. It needs no content
    (``touch STOP`` freezes): what it holds is JSON ``{"actor": ..., "reason": ...}`` when the
    kill switch wrote it, and is read only as far as it can be."""
    path = Path(state_dir) / STOP_FILE
    if not os.path.lexists(path):
        return None
    actor, reason = "the stop file", ""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(_MAX_STOP_BYTES).decode("utf-8"))
        if isinstance(data, dict):
            actor = str(data.get("actor") or actor)[:200]
            reason = str(data.get("reason") or "")[:1000]
    except (OSError, ValueError):
        pass  # an empty or hand-written file freezes as well
    where = f"{path} exists; `agent unfreeze` removes it"
    return actor, f"{reason} ({where})" if reason else where


def _json_object(text: str) -> dict[str, Any]:
    try:
        d = json.loads(text)
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def _never(cur: Any) -> ApplyIntent:
    raise LiveError("the apply intent just written cannot be read back")
