"""The kill switch: freeze and unfreeze with the store alone, and the stop file.

A freeze is one write to the store (`RevisionStore.freeze`): it needs neither the agent's settings
(a plugin policy missing from this process's path, a hand edit of ``settings.json`` the loop has
not seen) nor Slurm, and every apply checks it inside its own transaction
(`RevisionStore.begin_apply`). When the store cannot be written (a full disk, a damaged file),
the freeze creates the stop file ``STOP`` beside it instead: creating an empty file needs no data
block, and the store reads the agent as frozen while it exists (`RevisionStore.flags`). An
operator can also create it by hand (``touch STATE/STOP``); `unfreeze` removes it.

Each freeze and unfreeze is told to the sinks given (a JSON log line, the webhook), after it took
effect; a sink never holds it up (live/notify.py).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .activity import Activity, ActivityKind, ActivitySink, Listeners
from .errors import LiveError
from .records import Flags
from .store import STOP_FILE, RevisionStore, read_stop_file


class KillSwitch:
    """Freeze and unfreeze the agent in `state_dir` (see the module doc); `log` gets what the
    operator should read besides (a freeze that fell back to the stop file, a failing sink)."""

    def __init__(self, state_dir: Path | str, sinks: Sequence[ActivitySink] = (),
                 log: Callable[[str], None] = lambda m: None) -> None:
        self.state_dir = Path(state_dir)
        self.stop_file = self.state_dir / STOP_FILE
        self.listeners = Listeners(log, sinks)
        self.sinks, self.log = self.listeners.sinks, log

    def freeze(self, actor: str, reason: str = "") -> Flags:
        """Stop every proposal and apply but an operator's rollback, from now until `unfreeze`."""
        self._check_agent()
        try:
            flags = self._store().freeze(actor, reason)
        except LiveError as e:
            self._write_stop_file(actor, reason, e)
            self.log(f"{e}; frozen with the stop file {self.stop_file} instead (every round and "
                     "apply checks it; `agent unfreeze` removes it)")
            stop = read_stop_file(self.state_dir)
            flags = Flags(frozen=True, frozen_by=stop[0] if stop else actor,
                          frozen_reason=stop[1] if stop else reason)
        self.listeners.tell(Activity(ActivityKind.FREEZE, actor, reason))
        return flags

    def unfreeze(self, actor: str) -> Flags:
        """Let the agent propose and apply again: the stop file goes, then the store's flag."""
        self._check_agent()
        try:
            self.stop_file.unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            raise LiveError(f"{self.stop_file}: cannot remove the stop file: "
                            f"{e.strerror or e}") from None
        flags = self._store().unfreeze(actor)
        self.listeners.tell(Activity(ActivityKind.UNFREEZE, actor))
        return flags

    def _store(self) -> RevisionStore:
        """The agent's store as it is: a missing or empty ``state.db`` (truncated in place) is
        not begun anew here (`LiveError`: the freeze falls back to the stop file)."""
        path = self.state_dir / "state.db"
        try:
            empty = path.stat().st_size == 0
        except OSError as e:
            raise LiveError(f"{path}: cannot read the store: {e.strerror or e}") from None
        if empty:
            raise LiveError(f"{path}: the store is empty (truncated?)")
        return RevisionStore(self.state_dir)

    def _check_agent(self) -> None:
        """`LiveError` unless `state_dir` is an agent's (a mistyped --state must not begin a
        store of its own)."""
        if not any(os.path.lexists(self.state_dir / f) for f in ("settings.json", "state.db")):
            raise LiveError(f"{self.state_dir / 'settings.json'}: no agent here (initialise the "
                            "state directory first)")

    def _write_stop_file(self, actor: str, reason: str, why: LiveError) -> None:
        """Create the stop file (that alone freezes), then say in it who and why if there is
        room; `LiveError` with both failures when it cannot be created."""
        try:
            fd = os.open(self.stop_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            raise LiveError(f"{why}; and the stop file {self.stop_file} cannot be created either "
                            f"({e.strerror or e}): the agent is NOT frozen") from None
        try:
            os.write(fd, json.dumps({"actor": actor, "reason": reason,
                                     "time": time.time()}).encode())
        except OSError:
            pass  # no room for the words: the empty file freezes all the same
        finally:
            os.close(fd)
