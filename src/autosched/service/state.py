"""What the service holds while it runs: one `ServiceState`, on ``app.state.service``, that
every route reads (through `service`, a FastAPI dependency).

It watches the store (`StoreWatch`: a ``state.db`` replaced under the running service is followed
when it is an agent's store, and otherwise every request is a 503 saying what happened), opens
the agent on first use and again after ``agent init`` rewrote its settings, keeps the status
(which clients poll) until the store changes, and serialises actions through one lock.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from fastapi import Request

from ..errors import LiveError
from ..live.approval import IncludePreview
from ..live.killswitch import KillSwitch
from ..live.records import Revision
from ..live.status import AgentStatus
from ..live.store import RevisionStore
from ..live.storefile import store_error
from . import views
from .guard import LogLine
from .models import StatusOut

STATUS_HISTORY = 10  # revisions in the status by default, as `agent status` lists


class AgentLike(Protocol):
    """The part of `autosched.live.agent.Agent` the service calls."""

    def status(self, history: int = 10) -> AgentStatus: ...
    def slurm_texts(self, config: dict[str, Any]) -> dict[str, str] | None: ...
    def preview(self, rev_id: int) -> IncludePreview: ...
    def approve(self, rev_id: int, actor: str, confirmed_diff: str | None = None,
                force: bool = False) -> Revision: ...
    def reject(self, rev_id: int, actor: str, reason: str = "") -> Revision: ...
    def rollback(self, rev_id: int | None, actor: str, note: str = "",
                 force: bool = False) -> Revision: ...


class StoreChanges:
    """Whether anything was committed to the store since it was last asked, by any process:
    SQLite's ``PRAGMA data_version`` on one connection of its own that never writes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False,
                                  isolation_level=None, timeout=30)
        self.lock = threading.Lock()

    def version(self) -> int:
        with self.lock:
            try:
                return self.db.execute("PRAGMA data_version").fetchone()[0]
            except sqlite3.Error as e:
                raise store_error(self.path, e) from None

    def close(self) -> None:
        with self.lock:
            self.db.close()


class StoreReplaced(LiveError):
    """``state.db`` is no longer a store the service can serve (the service answers 503)."""


def _ident(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class StoreWatch:
    """The revision store the service serves, and whether ``state.db`` is still that file.

    Each request asks `current()`: the same file (device and inode) is served as it is; a file
    put in its place is followed when it is an agent's store (a restored backup), with a fresh
    change counter; a removed file, or one that is not an agent's store, raises `StoreReplaced`
    with what happened, and nothing of the file that was there before is served."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.store = RevisionStore(self.state_dir)
        self.path = self.store.path
        self.ident = _ident(self.path)
        self.changes = StoreChanges(self.path)
        self.generation = 0  # how many times a replacement was followed
        self.lock = threading.Lock()

    def current(self) -> tuple[RevisionStore, StoreChanges, int]:
        ident = _ident(self.path)
        if ident != self.ident:
            with self.lock:
                ident = _ident(self.path)
                if ident != self.ident:
                    self._follow(ident)
        return self.store, self.changes, self.generation

    def _follow(self, ident: tuple[int, int] | None) -> None:
        if ident is None:
            raise StoreReplaced(f"{self.path} was removed while the service runs; put the store "
                                "back, or restart the service to begin a new one")
        try:
            store = RevisionStore(self.state_dir)  # refuses a database that is not a store
        except LiveError as e:
            raise StoreReplaced(f"{self.path} was replaced while the service runs, by a file that "
                                f"is not the agent's store: {e}") from None
        self.changes.close()
        self.store, self.changes = store, StoreChanges(self.path)
        self.ident = ident
        self.generation += 1


class ServiceState:
    """The service over `state_dir` (see the module doc). `open_agent` opens the agent
    (`autosched.live.agent.open_agent` in production); `log` receives a record for every
    action and message."""

    def __init__(self, state_dir: Path, *, token: str, open_agent: Callable[[], AgentLike],
                 open_reads: bool = True, log: LogLine | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.token, self.open_reads, self.log = token, open_reads, log
        self.watch = StoreWatch(self.state_dir)
        self.settings = self.state_dir / "settings.json"
        self.lock = threading.Lock()  # held through an action (an apply can take seconds)
        self._open_agent = open_agent
        self._opening = threading.Lock()  # reads must not wait for an action: a lock of their own
        self._opened: tuple[Any, AgentLike] | None = None  # (stamp, agent)
        self._latest: dict[int, tuple[Any, AgentStatus, bytes]] = {}  # history -> (key, status, JSON)
        self._rounds: tuple[Any, dict[str, int]] | None = None  # (key, the store's round counts)

    def store(self) -> RevisionStore:
        """The store, as it is now (`StoreWatch.current`: a replaced one is a 503)."""
        return self.watch.current()[0]

    def agent(self) -> AgentLike:
        """The agent, opened on first use and again when ``agent init`` rewrote its settings
        (or the store was replaced by another agent's)."""
        stamp = (_stamp(self.settings), self.watch.current()[2])
        with self._opening:
            if self._opened is None or self._opened[0] != stamp:
                self._opened = (stamp, self._open_agent())
            return self._opened[1]

    def kill_switch(self) -> KillSwitch:
        """Freeze and unfreeze with the store alone (never `open_agent`: settings a plugin
        policy or a hand edit made unloadable must not disable the kill switch), told to the
        log and to the webhook if its URL can be read."""
        from ..live.notify import Webhook, notify_url

        log = self.log

        def say(message: str) -> None:
            if log is not None:
                log({"event": "message", "message": message})

        sinks: list[Any] = [] if log is None else [lambda a: log(a.to_record())]
        url = notify_url(self.state_dir, say) if self.settings.exists() else None
        if url is not None:
            sinks.append(Webhook(url, str(self.state_dir), say))
        return KillSwitch(self.state_dir, sinks, say)

    def status_entry(self, history: int = STATUS_HISTORY) -> tuple[Any, AgentStatus, bytes]:
        """(key, status, its JSON). The status is a function of what the store holds and of the
        agent's settings, so it is computed (and serialised) again only after a commit by any
        process or a new `agent init`: it is what many clients poll, and computing it costs
        several store reads. Keyed by the version read *before* computing, so it is never
        staler than the store; and by the clock (whether the loop is alive, a round overdue):
        a minute at most. The key is None when the agent could not be opened (not kept)."""
        store, changes, generation = self.watch.current()
        key = (generation, changes.version(), _stamp(self.settings), int(time.time() // 30))
        entry = self._latest.get(history)
        if entry is not None and entry[0] == key:
            return entry
        try:
            ag = self.agent()
        except LiveError as e:
            # the store's part is worth showing even when the agent cannot be opened (no
            # `agent init` yet, settings unreadable): say why instead of failing
            st = views.status(store, None, str(e), history)
            return (None, st, _status_json(st))
        st = views.status(store, ag, history=history)
        entry = (key, st, _status_json(st))
        if len(self._latest) > 8:
            self._latest.clear()
        self._latest[history] = entry  # one assignment: threads see the old entry or the new, whole
        return entry

    def round_counts(self, key: Any) -> dict[str, int]:
        """The store's rounds by action, counted again only when the status's `key` changed."""
        got = self._rounds
        if key is None or got is None or got[0] != key:
            got = (key, self.store().round_counts())
            self._rounds = got
        return got[1]


def _status_json(st: AgentStatus) -> bytes:
    return StatusOut.model_validate(st.to_dict()).model_dump_json().encode()


def _stamp(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def service(request: Request) -> ServiceState:
    """The route's `ServiceState` (a FastAPI dependency)."""
    state: ServiceState = request.app.state.service
    return state
