"""The agent's log of what it did and saw, round by round, on the store's file: the rounds (each
a `StoredRound`, read back only through its decoder), the controller's memory that a tuning round
left, the readings of Slurm's managed settings, and `agent run`'s heartbeats. Append-only; of the
memories, readings and heartbeats only the newest few are kept."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from ..jsonable import jsonable
from .records import BACKFILL_KEY, SETUP_KEY, SHADOWED_KEY, Heartbeat, LiveReading, StoredRound
from .storefile import StoreFile, json_object

MEMORY_KEPT = 5  # controller memories kept (the newest is the one read)
OBSERVATIONS_KEPT = 50  # readings of Slurm's settings kept (the newest is the one shown)
HEARTBEATS_KEPT = 10


class RoundLog(StoreFile):
    """The rounds, memories, readings and heartbeats of the store (see the module doc)."""

    def last_round(self) -> StoredRound | None:
        """The agent's last round, as it recorded it (`RoundOutcome.to_summary`)."""
        rounds = self.rounds(limit=1)
        return rounds[0] if rounds else None

    def rounds(self, limit: int = 20) -> list[StoredRound]:
        """The agent's last rounds, newest first (a summary that is not a JSON object reads as
        an empty one)."""
        with self._connect() as db:
            rows = db.execute("SELECT time, summary FROM rounds ORDER BY seq DESC LIMIT ?",
                              (limit,)).fetchall()
        return [StoredRound.from_row(t, json_object(s)) for t, s in rows]

    def last_round_with(self, key: str) -> StoredRound | None:
        """The newest round whose row has `key` (`SETUP_KEY`, `SHADOWED_KEY`, `BACKFILL_KEY`: a
        round that stopped before a read has no key for what it did not read)."""
        if key not in (SETUP_KEY, SHADOWED_KEY, BACKFILL_KEY):
            raise ValueError(f"{key!r}: not a key a round has only when it read it")
        with self._connect() as db:
            row = db.execute("SELECT time, summary FROM rounds WHERE CASE WHEN json_valid(summary) "
                             "THEN json_type(summary, ?) END IS NOT NULL ORDER BY seq DESC LIMIT 1",
                             (f'$."{key}"',)).fetchone()
        return StoredRound.from_row(row[0], json_object(row[1])) if row else None

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

    def controller_memory_round(self) -> tuple[str, StoredRound] | None:
        """The newest controller memory and the round that left it (what that round observed:
        the cluster's setup the memory's trials were simulated on)."""
        with self._connect() as db:
            row = db.execute("SELECT m.memory, r.time, r.summary FROM memory m JOIN rounds r ON "
                             "r.seq = m.round_seq ORDER BY m.seq DESC LIMIT 1").fetchone()
        return (row[0], StoredRound.from_row(row[1], json_object(row[2]))) if row else None

    def last_reading(self) -> LiveReading | None:
        """The managed knobs as the agent last read them from Slurm (None: never read yet)."""
        with self._connect() as db:
            row = db.execute("SELECT time, knobs FROM observations ORDER BY seq DESC LIMIT 1"
                             ).fetchone()
        if row is None:
            return None
        knobs = json_object(row[1])
        return LiveReading(float(row[0]), {str(k): str(v) for k, v in knobs.items()})

    def heartbeat(self) -> Heartbeat | None:
        """`agent run`'s newest heartbeat (None: no loop ever ran on this store)."""
        with self._connect() as db:
            row = db.execute("SELECT time, pid, host, poll, started FROM heartbeats ORDER BY seq "
                             "DESC LIMIT 1").fetchone()
        return Heartbeat(float(row[0]), int(row[1]), str(row[2]), float(row[3]), float(row[4])) \
            if row else None

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
