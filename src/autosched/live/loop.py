"""``agent run``'s loop: a round every period, sooner when contention arrives, the workload
drifts or a round said when to try again, until stopped.

Between rounds the loop beats (the store's heartbeat: the status says whether the loop is alive)
and, every `poll` seconds, looks at Slurm (the age of the last reading; a stale block cleared)
and checks the queue against what the last round saw (contention) and the workload against the
drift reference in the store. A frozen agent asks Slurm nothing. A
stop (`Stopping.request`, or `should_stop`) ends the wait at once and gives up a round that only
reads or tunes.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import LiveError
from .activity import Listeners
from .round import RoundOutcome
from .step import RoundStep
from .stopping import RoundAbandoned, Stopping

Clock = Callable[[], float]
Sleep = Callable[[float], object]


RUN_LOCK = "run.lock"  # in the state directory: held by the one `agent run` on it


@contextmanager
def run_lock(state_dir: Path) -> Iterator[None]:
    """Hold the state directory's loop lock for the block: one ``agent run`` per state directory
    (two each ran every round, tuned twice and judged twice, and nothing said so). An advisory
    lock on ``run.lock``: the kernel releases it when the process ends, kill -9 too. A lock
    already held is a `LiveError` naming who holds it."""
    path = Path(state_dir) / RUN_LOCK
    try:
        f = open(path, "a+", encoding="utf-8")
    except OSError as e:
        raise LiveError(f"{path}: cannot open the loop's lock: {e.strerror or e}") from None
    try:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            who = f.read(200).strip() or "a process"
            raise LiveError(f"{path}: another `agent run` ({who}) runs on this state directory; "
                            "one loop per state directory: stop it first") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()} on {socket.gethostname()}")
        f.flush()
        yield
    finally:
        f.close()  # (closing releases the lock)


def loop_holder(state_dir: Path) -> str | None:
    """Who holds the state directory's loop lock ("pid N on HOST"), or None when no `agent run`
    does (a lock file nobody holds is a loop that ended)."""
    path = Path(state_dir) / RUN_LOCK
    try:
        f = open(path, encoding="utf-8")
    except OSError:
        return None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return f.read(200).strip() or "a process"
        return None


class Loop:
    """Runs an agent's rounds (see the module doc)."""

    def __init__(self, rounds: RoundStep, stopping: Stopping, listeners: Listeners):
        self.rounds, self.stopping, self.listeners = rounds, stopping, listeners
        self.view, self.tuning = rounds.view, rounds.tuning
        self.store, self.settings = rounds.store, rounds.settings

    def run(self, rounds: int | None = None, poll: float | None = None,
            should_stop: Callable[[], bool] = lambda: False, sleep: Sleep = time.sleep,
            clock: Clock = time.monotonic) -> list[RoundOutcome]:
        """Rounds every period (and on drift, checked every `poll` s) until `rounds` rounds ran or
        `should_stop()` (or a stop is requested: a round that only reads or tunes then is given
        up). After a round that says when to try again (`retry_after`: Slurm did not answer), the
        next comes then. Returns the rounds' outcomes."""
        try:
            return self._run(rounds, poll, should_stop, sleep, clock)
        except RoundAbandoned as e:
            self.listeners.say(f"stopped: {e}; the round is given up, nothing of it recorded")
            return []

    def _run(self, rounds: int | None, poll: float | None, should_stop: Callable[[], bool],
             sleep: Sleep, clock: Clock) -> list[RoundOutcome]:
        period = self.settings.period
        poll = poll if poll is not None else max(30.0, min(period / 4, 600.0))
        done: list[RoundOutcome] = []
        trigger = "period"
        started = time.time()

        def stopped() -> bool:
            return should_stop() or self.stopping.requested

        while not stopped() and (rounds is None or len(done) < rounds):
            self.store.beat(poll, started)
            out = self.rounds.step(trigger)
            done.append(out)
            if rounds is not None and len(done) >= rounds:
                break
            wait = out.retry_after if out.retry_after is not None else period
            trigger = self._wait(clock() + wait, poll, started, stopped, sleep, clock)
        return done

    def _wait(self, deadline: float, poll: float, started: float, stopped: Callable[[], bool],
              sleep: Sleep, clock: Clock) -> str:
        """Wait until `deadline`, beating and polling; returns the next round's trigger:
        "contention: ..." when the queue grew past what the last round saw, "drift: ..." when the
        workload drifted meanwhile (the round starts at once), else "period"."""
        while clock() < deadline and not stopped():
            sleep(max(0.0, min(poll, deadline - clock())))
            if stopped():
                break
            self.store.beat(poll, started)
            if clock() >= deadline or self.store.flags().frozen:
                continue  # the round reads Slurm now; a frozen agent asks it nothing
            try:  # a look at Slurm: the age of the last observation, a stale block cleared
                with self.stopping.abandonable():
                    self.view.live_values()
            except LiveError:
                pass  # the next round reads again, and says what it found
            if (self.settings.drift or self.settings.trigger) and clock() < deadline and not self.stopping.requested:
                try:
                    with self.stopping.abandonable():
                        why = self.tuning.drifted()
                except LiveError:
                    why = ""
                if why:
                    return why
        return "period"
