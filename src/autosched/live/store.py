"""The revision store: every proposal and revision of the live config, append-only, in SQLite.

Nothing is ever updated in place: a revision is written once, and each change of its state is a
new event row; freeze/unfreeze, "blocked" notes, outcomes and apply intents are rows too, the
newest winning. So a process killed at any moment leaves rows that are either fully there (one
transaction) or absent, and the history of who did what stays readable. The file, its schema and
its connections are `StoreFile`'s (live/storefile.py); the rounds, memories, readings and
heartbeats on it are `RoundLog`'s (live/roundlog.py); the records it returns are in
live/records.py.

A revision's states follow one table, `TRANSITIONS`, checked inside the transaction of every write
that appends an event (as Optuna checks that a trial is updatable): which state a revision of each
kind begins in, and which move each store method may make. Anything else raises
`IllegalTransition`, naming the table's rule. Every write that first checks a state (approve only
a proposal, one apply at a time, its parent still running) is one ``BEGIN IMMEDIATE``
transaction, so two processes cannot both act on the same proposal.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..jsonable import jsonable
from .errors import ActionNotAllowed, Frozen, IllegalTransition, LiveError, UnknownRevision
from .records import (
    ApplyIntent,
    Approval,
    Event,
    Evidence,
    Flags,
    JudgedOutcome,
    LiveOverride,
    Revision,
    RevisionKind,
    RevisionState,
)
from .roundlog import RoundLog

MAX_ID = 2**63 - 1  # SQLite's largest integer: no revision id is above it


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


class RevisionStore(RoundLog):
    """The revisions of one cluster's managed config, in ``state_dir/state.db`` (see the module
    doc), and the agent's flags and apply intents."""

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


    # -- writing --------------------------------------------------------------------------
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

    def begin_apply(self, rev_id: int, *, actor: str, previous: Mapping[str, Any],
                    min_interval: float | None = None, while_frozen: bool = False) -> ApplyIntent:
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
                # (an operator's approve says what to do: `OperatorActions.approve`; the round
                # that made it rejects it itself)
                raise ActionNotAllowed(
                    f"revision {rev_id} was proposed against revision {rev.parent}, but "
                    + (f"revision {running.id} is running" if running else
                       "no revision is known to be running"))
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
        """Each revision's state now; a state that is none of `RevisionState`'s is a revision
        that cannot be read (as `_get` says), never one that is simply not proposed: a round
        must not propose beside a revision whose state it cannot tell."""
        states = dict(db.execute(
            "SELECT rev_id, state FROM events WHERE seq IN "
            "(SELECT MAX(seq) FROM events GROUP BY rev_id)").fetchall())
        for rev_id, state in states.items():
            if state not in _STATES:
                raise LiveError(f"{self.path}: revision {rev_id} cannot be read: {state!r} is not "
                                "a valid RevisionState")
        return states

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


_STATES = frozenset(s.value for s in RevisionState)


def _never(cur: Any) -> ApplyIntent:
    raise LiveError("the apply intent just written cannot be read back")
